//! The checks behind `verified` that read the store: the replay against the acknowledged
//! commits, the views against the replay, and a cold load against the full fold.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::{ProjectId, ResourceName};
use ledger::EventStore;
use projections::Projections;

use crate::replay::replay_checking_limits;
use crate::report::round2;

/// How long the views may take to catch up with the log before the check gives up on them.
const VIEWS_CATCH_UP: Duration = Duration::from_secs(120);

/// Replays the log (no project over a limit, each project's instances equal to its
/// acknowledged boots) and compares the views with the events once they have caught up
/// (started here if the run had none). Prints each difference.
pub(crate) async fn verify_store(
    store: &Arc<dyn EventStore>,
    projections: Option<Arc<Projections>>,
    projects: &[ProjectId],
    tree: &[(ProjectId, Vec<ProjectId>)],
    committed: &HashMap<ProjectId, u64>,
) -> Result<bool, String> {
    let mut ok = true;
    let replay = replay_checking_limits(&**store).await?;
    if replay.over_limit > 0 {
        eprintln!(
            "verify: {} event(s) left a project over a limit",
            replay.over_limit
        );
        ok = false;
    }
    let instances = ResourceName::parse("instances").expect("static");
    for project in projects {
        let implied = committed.get(project).copied().unwrap_or(0);
        let replayed = replay
            .states
            .get(project)
            .map_or(0, |s| s.in_use(&instances));
        if replayed != implied as i64 {
            eprintln!(
                "verify: {project}: replayed in_use {replayed}, acknowledged commits {implied}"
            );
            ok = false;
        }
    }
    // Each parent's stream holds its children's usage too (SPEC rule 11): equal to theirs.
    let now = chrono::Utc::now();
    for (parent, children) in tree {
        let implied: u64 = children.iter().filter_map(|c| committed.get(c)).sum();
        let recorded = replay
            .states
            .get(parent)
            .map_or(0, |s| s.subtree_usage(&instances, now).in_use);
        if recorded != implied as i64 {
            eprintln!(
                "verify: {parent}: subtree in_use {recorded}, acknowledged commits {implied}"
            );
            ok = false;
        }
    }
    let projections = match projections {
        Some(p) => p,
        None => Projections::start(store.clone())
            .await
            .map_err(|e| e.to_string())?,
    };
    let head = store.head().await.map_err(|e| e.to_string())?;
    if let Err(e) = projections.wait_for(head, VIEWS_CATCH_UP).await {
        eprintln!("verify: views did not catch up: {e}");
        ok = false;
    }
    let differences = projections.verify().await.map_err(|e| e.to_string())?;
    for d in differences.iter().take(20) {
        eprintln!("verify: {d:?}");
    }
    Ok(ok && differences.is_empty())
}

/// Loads one project as a process that just started would, from its snapshot and the events
/// after it, and, for comparison, from all its events; reports both on stderr. Returns the
/// first in ms, and whether both gave the same state.
pub(crate) async fn time_cold_loads(
    store: &dyn EventStore,
    project: &ProjectId,
) -> Result<(f64, bool), String> {
    let started = Instant::now();
    let (state, snapshot_version) = ledger::load_project(store, project, true)
        .await
        .map_err(|e| e.to_string())?;
    let from_snapshot_ms = started.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    let (folded, _) = ledger::load_project(store, project, false)
        .await
        .map_err(|e| e.to_string())?;
    let from_events_ms = started.elapsed().as_secs_f64() * 1e3;
    let same = folded == state;
    if !same {
        eprintln!(
            "verify: {project}: the state loaded from its snapshot differs from its events' fold"
        );
    }
    let events = state.version.map_or(0, |v| v + 1);
    let tail = events - snapshot_version.map_or(0, |v| v + 1);
    eprintln!(
        "bench: loading {project} ({events} events, {} reservations): {from_snapshot_ms:.1} ms \
         from its snapshot and {tail} events after it, {from_events_ms:.1} ms from all its events",
        state.reservation_count()
    );
    Ok((round2(from_snapshot_ms), same))
}
