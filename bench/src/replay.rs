//! The replay of the whole log that `verified` and the end-to-end tests rely on: no project
//! may ever stand over a limit a grant added to.

use std::collections::HashMap;

use domain::{Defaults, Limit, ProjectId, ProjectState, DEFAULTS_STREAM};
use ledger::EventStore;

/// The result of replaying the whole log.
pub struct Replay {
    pub events: u64,
    /// Events after which some project was over a capped limit.
    pub over_limit: u64,
    pub states: HashMap<ProjectId, ProjectState>,
}

/// Folds every event in commit order, checking after each grant that the project is within
/// the capped limit of every resource the grant adds to, at that event's instant (a forced
/// lower limit may leave other usage above its limit; only new positive reserves are denied).
pub async fn replay_checking_limits(store: &dyn EventStore) -> Result<Replay, String> {
    let mut defaults = Defaults::default();
    let mut states: HashMap<ProjectId, ProjectState> = HashMap::new();
    let mut replay_events = 0;
    let mut over_limit = 0;
    let mut after = 0;
    loop {
        let events = store
            .read_all(after, ledger::store::MAX_READ_COUNT)
            .await
            .map_err(|e| e.to_string())?;
        if events.is_empty() {
            break;
        }
        for recorded in &events {
            after = recorded.position;
            replay_events += 1;
            let event = recorded
                .decode()
                .map_err(|e| format!("position {}: {e}", recorded.position))?;
            if recorded.stream == DEFAULTS_STREAM {
                defaults.apply(&event);
                continue;
            }
            let Some(project) = ProjectId::from_stream(&recorded.stream) else {
                continue;
            };
            let state = states
                .entry(project.clone())
                .or_insert_with(|| ProjectState::new(project));
            state.apply(&event, recorded.event.recorded_at);
            let deltas = match &event {
                domain::Event::ReservationRequested { deltas, .. } => deltas,
                // A descendant's grant adds to this project's subtree (SPEC rule 11).
                domain::Event::DescendantReserved { hold, .. } => &hold.deltas,
                _ => continue,
            };
            // SPEC rule 1 bounds the resources a grant adds to; another resource may stand
            // above a limit lowered with force (or a lowered default) and only blocks new
            // positive reserves of itself. A limit caps the project's subtree (rule 11).
            let at = recorded.event.recorded_at;
            for (resource, (limit, _)) in state.usage_all(&defaults, at) {
                let usage = state.subtree_usage(&resource, at);
                if deltas.get(&resource) <= 0 {
                    continue;
                }
                let Some(cap) = limit.and_then(Limit::cap) else {
                    continue;
                };
                if usage.in_use.saturating_add(usage.reserved) > cap {
                    eprintln!(
                        "verify: {} over {resource} at position {}",
                        state.project, recorded.position
                    );
                    over_limit += 1;
                }
            }
        }
    }
    Ok(Replay {
        events: replay_events,
        over_limit,
        states,
    })
}
