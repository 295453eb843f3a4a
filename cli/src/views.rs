//! `quota usage` and `quota audit`: the read side, over HTTP.

use client::wire::{AuditPage, AuditQuery, Usage, UsageQuery};
use client::Client;

use crate::args::AuditArgs;
use crate::output::{or_dash, pairs_text, Output};
use crate::{table, CliError};

pub async fn usage(
    client: &Client,
    out: Output,
    project: &str,
    query: &UsageQuery,
) -> Result<(), CliError> {
    let answer = client.usage(project, query).await?;
    out.print(&answer, usage_table);
    Ok(())
}

/// Prints a page of the audit trail; with `--all`, every page after it too.
pub async fn audit(client: &Client, out: Output, args: AuditArgs) -> Result<(), CliError> {
    let mut query = AuditQuery {
        since: args.since,
        until: args.until,
        event_type: args.event_type,
        reservation: args.reservation,
        actor: args.actor,
        cursor: args.cursor,
        limit: args.limit,
    };
    loop {
        let answer = client.audit(&args.project, &query).await?;
        out.print(&answer, audit_table);
        query.cursor = answer.body.next;
        if !args.all || query.cursor.is_none() {
            return Ok(());
        }
    }
}

fn usage_table(answer: &Usage) -> String {
    let rows: Vec<Vec<String>> = answer
        .resources
        .iter()
        .map(|(resource, usage)| {
            vec![
                resource.clone(),
                if usage.limit == -1 {
                    "unlimited".into()
                } else {
                    usage.limit.to_string()
                },
                usage.in_use.to_string(),
                usage.reserved.to_string(),
                or_dash(usage.headroom),
            ]
        })
        .collect();
    format!(
        "{}\n(as of position {})",
        table::render(
            &["RESOURCE", "LIMIT", "IN_USE", "RESERVED", "HEADROOM"],
            &rows
        ),
        answer.position
    )
}

fn audit_table(answer: &AuditPage) -> String {
    let rows: Vec<Vec<String>> = answer
        .entries
        .iter()
        .map(|entry| {
            vec![
                entry.position.to_string(),
                entry.at.clone(),
                entry.event_type.clone(),
                or_dash(entry.reservation_id),
                or_dash(entry.deltas.as_ref().map(pairs_text)),
                or_dash(entry.actor.as_ref()),
                or_dash(entry.reason.as_ref()),
            ]
        })
        .collect();
    let mut out = table::render(
        &[
            "POSITION",
            "AT",
            "TYPE",
            "RESERVATION",
            "DELTAS",
            "ACTOR",
            "REASON",
        ],
        &rows,
    );
    if let Some(next) = &answer.next {
        out.push_str(&format!("\n(more: --cursor {next})"));
    }
    out
}
