//! `quota reserve`, `commit`, `release`, `reservation` and `reservations`.

use client::wire::{
    DryRun, Reservation, ReservationList, ReservationListQuery, Reserve, Step, TransitionBody,
};
use client::Client;

use crate::args::ReservationsArgs;
use crate::output::{limit_text, or_dash, pairs_text, Output};
use crate::pages::{every_page, print_all};
use crate::{table, CliError};

pub async fn reserve(
    client: &Client,
    out: Output,
    project: &str,
    body: &Reserve,
) -> Result<(), CliError> {
    let answer = client.reserve(project, body).await?;
    out.print(&answer, reservation_text);
    Ok(())
}

/// `quota reserve --dry-run`: the verdict, then a row per resource of the request.
pub async fn dry_run(
    client: &Client,
    out: Output,
    project: &str,
    body: &Reserve,
) -> Result<(), CliError> {
    let answer = client.reserve_dry_run(project, body).await?;
    out.print(&answer, dry_run_text);
    Ok(())
}

fn dry_run_text(answer: &DryRun) -> String {
    let verdict = match (answer.granted, answer.count, answer.max_count) {
        (true, Some(count), _) => format!("would be granted, count {count}"),
        (true, None, _) => "would be granted".to_owned(),
        (false, _, most) => {
            let most = most.map(|n| format!(" (at most count {n} would fit)"));
            format!(
                "would be denied: over quota for {}{}",
                answer.overs.join(", "),
                most.unwrap_or_default()
            )
        }
    };
    let rows: Vec<Vec<String>> = answer
        .limits
        .iter()
        .map(|(resource, limit)| {
            let usage = answer.usage.get(resource);
            vec![
                resource.clone(),
                limit_text(*limit),
                or_dash(usage.map(|u| u.in_use)),
                or_dash(usage.map(|u| u.reserved)),
                or_dash(answer.headroom.get(resource)),
            ]
        })
        .collect();
    let table = table::render(
        &["RESOURCE", "LIMIT", "IN_USE", "RESERVED", "HEADROOM"],
        &rows,
    );
    format!("{verdict} (dry run: nothing held or recorded)\n{table}")
}

/// `quota commit` or `quota release`.
pub async fn transition(
    client: &Client,
    out: Output,
    step: Step,
    project: &str,
    id: &str,
    actor: Option<String>,
) -> Result<(), CliError> {
    let body = actor.map(|actor| TransitionBody { actor });
    let answer = client.transition(project, id, step, body.as_ref()).await?;
    out.print(&answer, reservation_text);
    Ok(())
}

pub async fn show(client: &Client, out: Output, project: &str, id: &str) -> Result<(), CliError> {
    let answer = client.reservation(project, id).await?;
    out.print(&answer, reservation_text);
    Ok(())
}

/// Prints a page of a project's reservations; with `--all`, every page as one table (or one
/// JSON array).
pub async fn list(client: &Client, out: Output, args: ReservationsArgs) -> Result<(), CliError> {
    let mut query = ReservationListQuery {
        status: args.status,
        user: args.user,
        older_than: args.older_than,
        cursor: args.pages.cursor,
        limit: args.pages.limit,
    };
    let project = args.project.as_str();
    if !args.pages.all {
        let answer = client.reservations(project, &query).await?;
        out.print(&answer, |page| {
            list_table(&page.reservations, page.next.as_deref())
        });
        return Ok(());
    }
    let first = query.cursor.take();
    let pages = every_page(
        first,
        |page: &ReservationList| page.next.clone(),
        |cursor| {
            let query = ReservationListQuery {
                cursor,
                ..query.clone()
            };
            async move { client.reservations(project, &query).await }
        },
    )
    .await?;
    print_all(
        out,
        pages,
        "reservations",
        |page| page.reservations,
        |reservations| list_table(reservations, None),
    );
    Ok(())
}

/// The reservations as a table; `next` is the cursor of the page after them, if there is one.
fn list_table(reservations: &[Reservation], next: Option<&str>) -> String {
    let rows: Vec<Vec<String>> = reservations
        .iter()
        .map(|r| {
            vec![
                r.reservation_id.to_string(),
                r.status.clone(),
                pairs_text(&r.deltas),
                r.created_at.clone(),
                // Only a hold can still expire (as in `quota reservation`).
                or_dash((r.status == "held").then_some(&r.expires_at)),
                or_dash(r.reason.as_ref()),
                r.position.to_string(),
            ]
        })
        .collect();
    let mut out = table::render(
        &[
            "RESERVATION",
            "STATUS",
            "DELTAS",
            "CREATED_AT",
            "EXPIRES_AT",
            "REASON",
            "POSITION",
        ],
        &rows,
    );
    if rows.is_empty() {
        out.push_str("\n(no reservations match)");
    }
    if let Some(next) = next {
        out.push_str(&format!("\n(more: --cursor {next})"));
    }
    out
}

/// One `name value` line per field.
fn reservation_text(answer: &Reservation) -> String {
    let mut rows = vec![
        ("reservation", answer.reservation_id.to_string()),
        ("project", answer.project.clone()),
        ("status", answer.status.clone()),
    ];
    if let Some(reason) = &answer.reason {
        rows.push(("reason", reason.clone()));
    }
    if let Some(count) = answer.count {
        rows.push(("count", count.to_string()));
    }
    rows.extend([
        ("deltas", pairs_text(&answer.deltas)),
        ("created_at", answer.created_at.clone()),
    ]);
    // Only a hold can still expire; after a commit or a release the time means nothing.
    if answer.status == "held" {
        rows.push(("expires_at", answer.expires_at.clone()));
    }
    rows.push(("position", answer.position.to_string()));
    rows.iter()
        .map(|(name, value)| format!("{name:<12} {value}"))
        .collect::<Vec<_>>()
        .join("\n")
}
