//! `quota usage`, `quota audit` and `quota correct`: usage and its history, over HTTP, a
//! project's or (`--user`) a user's inside it. A parent's usage shows its subtree too.

use client::wire::{AuditEntry, AuditPage, AuditQuery, Correct, Usage, UsageQuery};
use client::{AuditOf, Client};

use crate::args::AuditArgs;
use crate::output::{limit_text, or_dash, pairs_text, Output};
use crate::pages::{every_page, print_all};
use crate::{table, tree, CliError};

/// `quota usage PROJECT [--user U]`: the project's usage, or a user's inside it.
pub async fn usage(
    client: &Client,
    out: Output,
    project: &str,
    user: Option<&str>,
    query: &UsageQuery,
) -> Result<(), CliError> {
    let answer = match user {
        Some(user) => client.user_usage(project, user, query).await?,
        None => client.usage(project, query).await?,
    };
    out.print(&answer, |usage| usage_table(usage, query.at.as_deref()));
    Ok(())
}

/// Prints a page of the audit trail; with `--all`, every page as one table (or one JSON array).
pub async fn audit(client: &Client, out: Output, args: AuditArgs) -> Result<(), CliError> {
    let mut query = AuditQuery {
        since: args.since,
        until: args.until,
        event_type: args.event_type,
        reservation: args.reservation,
        actor: args.actor,
        user: args.user,
        subtree: args.subtree,
        cursor: args.pages.cursor,
        limit: args.pages.limit,
    };
    let of = match &args.project {
        Some(project) if !args.defaults => AuditOf::Project(project.as_str()),
        _ => AuditOf::Defaults,
    };
    if !args.pages.all {
        let answer = client.audit(of, &query).await?;
        out.print(&answer, |page| {
            let table = audit_table(&page.entries, query.subtree, page.next.as_deref());
            // A page is read by people; `--all` stays one table, for tools.
            match reservation_hint(&page.entries) {
                Some(hint) => format!("{table}\n{hint}"),
                None => table,
            }
        });
        return Ok(());
    }
    let first = query.cursor.take();
    let pages = every_page(
        first,
        |page: &AuditPage| page.next.clone(),
        |cursor| {
            let query = AuditQuery {
                cursor,
                ..query.clone()
            };
            async move { client.audit(of, &query).await }
        },
    )
    .await?;
    print_all(
        out,
        pages,
        "entries",
        |page| page.entries,
        |entries| audit_table(entries, query.subtree, None),
    );
    Ok(())
}

/// `quota correct`: a row per resource whose in_use changed.
pub async fn correct(
    client: &Client,
    out: Output,
    project: &str,
    body: &Correct,
) -> Result<(), CliError> {
    let answer = client.correct(project, body).await?;
    out.print(&answer, |done| {
        let rows: Vec<Vec<String>> = done
            .corrections
            .iter()
            .map(|c| {
                vec![
                    c.resource.clone(),
                    c.before.to_string(),
                    c.after.to_string(),
                ]
            })
            .collect();
        let user = body.user.as_ref();
        if rows.is_empty() {
            let of = user.map_or(String::new(), |user| format!(" of user {user}"));
            return format!(
                "(nothing to correct: every count{of} was already right; position {})",
                done.position
            );
        }
        // A user's correction: the numbers are the user's, and the project's moved as much.
        let whose = user.map_or(String::new(), |user| {
            format!("user {user}'s in_use; the project's moved by as much; ")
        });
        let table = table::render(&["RESOURCE", "IN_USE_BEFORE", "IN_USE_AFTER"], &rows);
        format!("{table}\n({whose}position {})", done.position)
    });
    Ok(())
}

/// `at` is the `--at` asked for, which an empty answer's hint names. A project with children
/// has SUBTREE_ columns (itself and all its descendants, which its limits cap) and a table of
/// its children's subtrees.
fn usage_table(answer: &Usage, at: Option<&str>) -> String {
    let subtree = answer.subtree.as_ref();
    let rows: Vec<Vec<String>> = answer
        .resources
        .iter()
        .map(|(resource, usage)| {
            let mut row = vec![
                resource.clone(),
                limit_text(usage.limit),
                usage.in_use.to_string(),
                usage.reserved.to_string(),
            ];
            if let Some(subtree) = subtree {
                let total = subtree.get(resource);
                row.push(or_dash(total.map(|t| t.in_use)));
                row.push(or_dash(total.map(|t| t.reserved)));
            }
            row.push(or_dash(usage.headroom));
            row
        })
        .collect();
    let mut headers = vec!["RESOURCE", "LIMIT", "IN_USE", "RESERVED"];
    if subtree.is_some() {
        headers.extend(["SUBTREE_IN_USE", "SUBTREE_RESERVED"]);
    }
    headers.push("HEADROOM");
    let mut table = table::render(&headers, &rows);
    if let Some(children) = answer.children.as_ref().filter(|c| !c.is_empty()) {
        table.push_str("\n\n");
        table.push_str(&tree::children_table(children));
    }
    let hint = match (rows.is_empty(), at) {
        (false, _) => String::new(),
        (true, Some(at)) => format!("\n(no usage at {at}: no resource existed yet)"),
        (true, None) => "\n(no resources yet: quota defaults set NAME=LIMIT creates one)".into(),
    };
    // A user's usage says whose it is: its limits may be the project's, its usage is its own.
    let whose = answer.user.as_ref().map_or(String::new(), |user| {
        format!("user {user} of {}, ", answer.project)
    });
    let tree = if subtree.is_some() {
        "headroom is the limit minus the subtree's in_use and reserved; "
    } else {
        ""
    };
    format!(
        "{table}{hint}\n({whose}{tree}as of position {})",
        answer.position
    )
}

/// The entries as a table; `next` is the cursor of the page after them, if there is one. A
/// USER column only when some entry is about a user; a PROJECT column in a subtree's audit.
fn audit_table(entries: &[AuditEntry], subtree: bool, next: Option<&str>) -> String {
    let users = entries.iter().any(|entry| entry.user.is_some());
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|entry| {
            let mut row = vec![entry.position.to_string(), entry.at.clone()];
            if subtree {
                row.push(or_dash(entry.project.as_ref()));
            }
            row.extend([entry.event_type.clone(), or_dash(entry.reservation_id)]);
            if users {
                row.push(or_dash(entry.user.as_ref()));
            }
            row.extend([
                or_dash(entry.deltas.as_ref().map(pairs_text)),
                or_dash(entry.actor.as_ref()),
                or_dash(entry.reason.as_ref()),
            ]);
            row
        })
        .collect();
    let mut headers = vec!["POSITION", "AT"];
    if subtree {
        headers.push("PROJECT");
    }
    headers.extend(["TYPE", "RESERVATION"]);
    if users {
        headers.push("USER");
    }
    headers.extend(["DELTAS", "ACTOR", "REASON"]);
    let mut out = table::render(&headers, &rows);
    if let Some(next) = next {
        out.push_str(&format!("\n(more: --cursor {next})"));
    }
    out
}

/// How to follow a RESERVATION of the table, with the first one as the example: its status
/// with `quota reservation`, all its events with `quota audit --reservation`.
fn reservation_hint(entries: &[AuditEntry]) -> Option<String> {
    entries.iter().find_map(|entry| {
        let id = entry.reservation_id?;
        let project = entry.project.as_deref()?;
        Some(format!(
            "(a reservation's status: quota reservation {project} {id}; \
             all its events: quota audit {project} --reservation {id})"
        ))
    })
}
