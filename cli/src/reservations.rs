//! `quota reserve`, `commit`, `release`, `reservation` and `reservations`.

use std::collections::BTreeMap;

use client::wire::{
    DryRun, Reservation, ReservationList, ReservationListQuery, Reserve, Step, TransitionBody,
    UsageNumbers,
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
    out.print(&answer, |answer| dry_run_text(answer, body.user.as_deref()));
    Ok(())
}

/// The verdict and the project's numbers; for a reserve with a user, then the user's numbers.
fn dry_run_text(answer: &DryRun, user: Option<&str>) -> String {
    let verdict = match (answer.granted, answer.count, answer.max_count) {
        (true, Some(count), _) => format!("would be granted, count {count}"),
        (true, None, _) => "would be granted".to_owned(),
        (false, _, most) => {
            let most = most.map(|n| format!(" (at most count {n} would fit)"));
            format!(
                "would be denied: {}{}",
                overs_text(answer, user),
                most.unwrap_or_default()
            )
        }
    };
    let table = standing_table(&answer.limits, &answer.usage, &answer.headroom);
    let mut text = format!("{verdict} (dry run: nothing held or recorded)\n{table}");
    if let (Some(limits), Some(usage)) = (&answer.user_limits, &answer.user_usage) {
        let empty = BTreeMap::new();
        let headroom = answer.user_headroom.as_ref().unwrap_or(&empty);
        let whose = user.map_or("the user".to_owned(), |u| format!("user {u}"));
        text.push_str(&format!(
            "\n{whose} (its own limits, else the project's):\n{}",
            standing_table(limits, usage, headroom)
        ));
    }
    text
}

/// `over quota for instances`, `over user alice's quota for cores`, `over acme's quota for
/// ram` (an ancestor's), or several of them.
fn overs_text(answer: &DryRun, user: Option<&str>) -> String {
    let mut parts = Vec::new();
    if !answer.overs.is_empty() {
        parts.push(format!("over quota for {}", answer.overs.join(", ")));
    }
    let user_overs = answer.user_overs.as_deref().unwrap_or_default();
    if !user_overs.is_empty() {
        let whose = user.map_or("the user's".to_owned(), |u| format!("user {u}'s"));
        parts.push(format!("over {whose} quota for {}", user_overs.join(", ")));
    }
    for (ancestor, overs) in answer.ancestor_overs.iter().flatten() {
        if !overs.is_empty() {
            parts.push(format!("over {ancestor}'s quota for {}", overs.join(", ")));
        }
    }
    if parts.is_empty() {
        // Denied over nothing named here: the server's fields say.
        return "over quota".to_owned();
    }
    parts.join(", and ")
}

/// A row per resource: its limit, in_use, reserved and headroom.
fn standing_table(
    limits: &BTreeMap<String, i64>,
    usage: &BTreeMap<String, UsageNumbers>,
    headroom: &BTreeMap<String, i64>,
) -> String {
    let rows: Vec<Vec<String>> = limits
        .iter()
        .map(|(resource, limit)| {
            let usage = usage.get(resource);
            vec![
                resource.clone(),
                limit_text(*limit),
                or_dash(usage.map(|u| u.in_use)),
                or_dash(usage.map(|u| u.reserved)),
                or_dash(headroom.get(resource)),
            ]
        })
        .collect();
    table::render(
        &["RESOURCE", "LIMIT", "IN_USE", "RESERVED", "HEADROOM"],
        &rows,
    )
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
/// A USER column only when some reservation is for a user.
fn list_table(reservations: &[Reservation], next: Option<&str>) -> String {
    let users = reservations.iter().any(|r| r.user.is_some());
    let rows: Vec<Vec<String>> = reservations
        .iter()
        .map(|r| {
            let mut row = vec![r.reservation_id.to_string()];
            if users {
                row.push(or_dash(r.user.as_ref()));
            }
            row.extend([
                r.status.clone(),
                pairs_text(&r.deltas),
                r.created_at.clone(),
                // Only a hold can still expire (as in `quota reservation`).
                or_dash((r.status == "held").then_some(&r.expires_at)),
                or_dash(r.reason.as_ref()),
                r.position.to_string(),
            ]);
            row
        })
        .collect();
    let mut headers = vec!["RESERVATION"];
    if users {
        headers.push("USER");
    }
    headers.extend([
        "STATUS",
        "DELTAS",
        "CREATED_AT",
        "EXPIRES_AT",
        "REASON",
        "POSITION",
    ]);
    let mut out = table::render(&headers, &rows);
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
    ];
    if let Some(user) = &answer.user {
        rows.push(("user", user.clone()));
    }
    rows.push(("status", answer.status.clone()));
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
