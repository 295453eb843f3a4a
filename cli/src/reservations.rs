//! `quota reserve`, `commit`, `release` and `reservation`.

use client::wire::{Reservation, Reserve, Step, TransitionBody};
use client::Client;

use crate::output::{pairs_text, Output};
use crate::CliError;

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
