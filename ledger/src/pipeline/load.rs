//! Loading a project's state from the store (its latest snapshot and the events after it), and
//! when the pipeline stores a new snapshot.

use domain::{ProjectId, ProjectState, SnapshotError, StreamVersion};

use super::LedgerError;
use crate::store::{EventStore, MAX_READ_COUNT};

/// A project's durable state, from its latest snapshot (when `from_snapshot` and it has one this
/// code reads) and the events after it; and the version of that snapshot.
pub async fn load_project(
    store: &dyn EventStore,
    project: &ProjectId,
    from_snapshot: bool,
) -> Result<(ProjectState, StreamVersion), LedgerError> {
    let stream = project.stream();
    let mut state = ProjectState::new(project.clone());
    let snapshot = if from_snapshot {
        store.read_snapshot(&stream).await?
    } else {
        None
    };
    if let Some(snapshot) = snapshot {
        match ProjectState::from_snapshot(project.clone(), &snapshot) {
            Ok(snapshotted) => state = snapshotted,
            // Written by an older release: folded anew below, and snapshotted again.
            Err(SnapshotError::OtherFormat(format)) => {
                tracing::debug!(%stream, format, "snapshot of another format not used");
            }
            Err(error) => {
                tracing::warn!(%stream, %error, "unreadable snapshot not used");
            }
        }
    }
    let snapshot_version = state.version;
    let mut from = state.version.map_or(0, |v| v + 1);
    // A snapshot taken while its last events were being appended lacks their positions:
    // those few events are read again for them.
    if let Some(version) = state.first_version_without_position() {
        from = from.min(version);
    }
    loop {
        let events = store.read_stream(&stream, from, MAX_READ_COUNT).await?;
        let done = events.len() < MAX_READ_COUNT;
        for recorded in &events {
            let event = recorded.decode().map_err(|e| LedgerError::Undecodable {
                stream: stream.clone(),
                version: recorded.version,
                message: e.to_string(),
            })?;
            if Some(recorded.version) > snapshot_version {
                state.apply(&event, recorded.event.recorded_at);
            }
            state.note_position(&event, recorded.version, recorded.position);
            from = recorded.version + 1;
        }
        if done {
            return Ok((state, snapshot_version));
        }
    }
}

/// Whether to snapshot a state that was last snapshotted at `snapshot_version`. A snapshot holds
/// every reservation the project ever had, so one is taken only after at least as many events
/// as it holds reservations (and `min_events`): writing snapshots then costs at most about one
/// reservation's bytes per event appended, and a load never folds more events after its
/// snapshot than that snapshot holds reservations. Snapshotting more often makes a large
/// project's loads faster, but the snapshots written cost throughput on every busy project, and
/// loads are rare (a cache miss) while appends are not.
pub(super) fn snapshot_due(
    state: &ProjectState,
    snapshot_version: StreamVersion,
    min_events: u64,
) -> bool {
    let count = |v: StreamVersion| v.map_or(0, |v| v + 1);
    let since = count(state.version).saturating_sub(count(snapshot_version));
    since >= min_events.max(state.reservation_count() as u64)
}
