//! Usage (a project's or a user's) as it stood at a past instant, replayed from the project's stream and the defaults
//! stream with the domain's own fold, so it agrees with what the ledger decided on.
//!
//! A parent's stream holds its descendants' `Descendant*` events (SPEC rule 11), so the same
//! fold gives its subtree as it stood then: the children it had then, with their usage then.

use domain::{shown_usage, Defaults, ProjectId, ProjectState, Timestamp, UserId, DEFAULTS_STREAM};
use ledger::store::MAX_READ_COUNT;
use ledger::{EventStore, Position, RecordedEvent};

use crate::tree::subtree_at;
use crate::usage::resource_usage;
use crate::{ProjectionError, UsageReport};

/// The domain's event, decoded with the codec; an event that does not decode is an error,
/// never passed over.
pub(crate) fn decode(recorded: &RecordedEvent) -> Result<domain::Event, ProjectionError> {
    recorded
        .decode()
        .map_err(|error| ProjectionError::Undecodable {
            position: recorded.position,
            message: error.to_string(),
        })
}

/// Every event of `stream`, in version order.
pub(crate) async fn read_stream(
    store: &dyn EventStore,
    stream: &str,
) -> Result<Vec<RecordedEvent>, ProjectionError> {
    let mut events = Vec::new();
    loop {
        let from = events.last().map_or(0, |e: &RecordedEvent| e.version + 1);
        let page = store.read_stream(stream, from, MAX_READ_COUNT).await?;
        let done = page.len() < MAX_READ_COUNT;
        events.extend(page);
        if done {
            return Ok(events);
        }
    }
}

/// The project's usage at `at`, or a user's (its own limits over the project's, and its own
/// in_use and reserved).
pub(crate) async fn usage_at(
    store: &dyn EventStore,
    project: &ProjectId,
    user: Option<&UserId>,
    at: Timestamp,
) -> Result<UsageReport, ProjectionError> {
    let mut position: Position = 0;
    let mut defaults = Defaults::default();
    for recorded in read_stream(store, DEFAULTS_STREAM).await? {
        if recorded.event.recorded_at <= at {
            defaults.apply(&decode(&recorded)?);
            position = position.max(recorded.position);
        }
    }
    let mut state = ProjectState::new(project.clone());
    for recorded in read_stream(store, &project.stream()).await? {
        if recorded.event.recorded_at <= at {
            state.apply(&decode(&recorded)?, recorded.event.recorded_at);
            position = position.max(recorded.position);
        }
    }
    let usage = match user {
        None => state.usage_all(&defaults, at),
        Some(user) => state.user_usage_all(user, &defaults, at),
    };
    let subtree = match user {
        None => subtree_at(&state, usage.keys().cloned(), at),
        Some(_) => None,
    };
    let resources = shown_usage(usage)
        .map(|(resource, limit, usage)| {
            let shown = resource_usage(limit, usage.in_use, usage.reserved);
            (resource, shown)
        })
        .collect();
    Ok(UsageReport {
        project: project.clone(),
        resources,
        position,
        subtree,
    })
}
