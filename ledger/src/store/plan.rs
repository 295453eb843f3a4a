//! The part of an append both backends share: given what the transaction read (current stream
//! versions, event ids already stored, the head position), decide each append's result and the
//! rows to insert. Pure, so its rules are tested once.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

use super::{
    AppendResult, EventData, ExpectedVersion, Position, StoreError, StreamAppend, MAX_BATCH_EVENTS,
};
use domain::{EncodedSnapshot, StreamVersion};

/// Where an already-stored event lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredAt {
    pub stream: String,
    pub version: u64,
    pub position: Position,
}

/// A row to insert.
#[derive(Debug)]
pub struct Row<'a> {
    pub position: Position,
    pub stream: &'a str,
    pub version: u64,
    pub event: &'a EventData,
}

pub fn check_batch(batch: &[StreamAppend]) -> Result<(), StoreError> {
    let total: usize = batch.iter().map(|a| a.events.len()).sum();
    if total > MAX_BATCH_EVENTS {
        return Err(StoreError::InvalidAppend(format!(
            "{total} events in one batch; at most {MAX_BATCH_EVENTS}"
        )));
    }
    let mut seen = HashSet::new();
    for event in batch.iter().flat_map(|a| &a.events) {
        if !seen.insert(event.event_id) {
            return Err(StoreError::InvalidAppend(format!(
                "event id {} twice in one batch",
                event.event_id
            )));
        }
    }
    Ok(())
}

pub fn streams(batch: &[StreamAppend]) -> Vec<String> {
    let mut names: Vec<String> = batch.iter().map(|a| a.stream.clone()).collect();
    names.sort();
    names.dedup();
    names
}

pub fn event_ids(batch: &[StreamAppend]) -> Vec<Uuid> {
    batch
        .iter()
        .flat_map(|a| a.events.iter().map(|e| e.event_id))
        .collect()
}

/// What one append transaction does.
#[derive(Debug)]
pub struct Plan<'a> {
    /// One per append, in order.
    pub results: Vec<AppendResult>,
    /// The events to insert, in position order.
    pub rows: Vec<Row<'a>>,
    /// The snapshots to store, each replacing its stream's previous one, in batch order (a
    /// later one of the same stream is at a later version).
    pub snapshots: Vec<(&'a str, &'a EncodedSnapshot)>,
}

pub fn plan<'a>(
    batch: &'a [StreamAppend],
    mut versions: HashMap<String, u64>,
    stored: &HashMap<Uuid, StoredAt>,
    head: Position,
) -> Result<Plan<'a>, StoreError> {
    let mut results = Vec::with_capacity(batch.len());
    let mut rows = Vec::new();
    let mut snapshots = Vec::new();
    let mut next_position = head + 1;
    // Appends to one stream within a batch form a chain, each decided on the ones before it:
    // once one of them conflicts, the rest of that stream's chain conflicts too.
    let mut broken: HashSet<&str> = HashSet::new();
    for append in batch {
        let actual: StreamVersion = versions.get(&append.stream).copied();
        let already: Vec<Option<&StoredAt>> = append
            .events
            .iter()
            .map(|e| stored.get(&e.event_id))
            .collect();
        if !append.events.is_empty() && already.iter().all(Option::is_some) {
            let places: Vec<&StoredAt> = already.into_iter().flatten().collect();
            if places.iter().any(|p| p.stream != append.stream) {
                return Err(StoreError::InvalidAppend(
                    "event id already stored in another stream".into(),
                ));
            }
            results.push(AppendResult::Appended {
                versions: places.iter().map(|p| p.version).collect(),
                positions: places.iter().map(|p| p.position).collect(),
                stream_version: actual,
            });
            continue;
        }
        if already.iter().any(Option::is_some) {
            return Err(StoreError::InvalidAppend(
                "some but not all of an append's event ids are already stored".into(),
            ));
        }
        if broken.contains(append.stream.as_str()) || !append.expected.admits(actual) {
            broken.insert(&append.stream);
            results.push(AppendResult::Conflict {
                expected: append.expected,
                actual,
            });
            continue;
        }
        let first_version = actual.map_or(0, |v| v + 1);
        let mut appended_versions = Vec::with_capacity(append.events.len());
        let mut positions = Vec::with_capacity(append.events.len());
        for (version, event) in (first_version..).zip(&append.events) {
            rows.push(Row {
                position: next_position,
                stream: &append.stream,
                version,
                event,
            });
            appended_versions.push(version);
            positions.push(next_position);
            next_position += 1;
        }
        let stream_version = appended_versions.last().copied().or(actual);
        if let Some(v) = stream_version {
            versions.insert(append.stream.clone(), v);
        }
        if let Some(snapshot) = &append.snapshot {
            // A snapshot at any other version would describe events that are not (or not
            // only) the stored ones: a caller bug, and never worth storing.
            debug_assert_eq!(Some(snapshot.version), stream_version);
            if !append.events.is_empty() && stream_version == Some(snapshot.version) {
                snapshots.push((append.stream.as_str(), snapshot));
            }
        }
        results.push(AppendResult::Appended {
            versions: appended_versions,
            positions,
            stream_version,
        });
    }
    Ok(Plan {
        results,
        rows,
        snapshots,
    })
}

/// What a batch would do if the store were exactly as its writer believes: at `head`, and each
/// stream at the version its first append in the batch expects. A writer that is usually the
/// only one (the embedded store) inserts these rows under a check of those assumptions in the
/// same transaction, instead of reading first: a wrong guess inserts nothing and costs a
/// retry with the real values, never a wrong row.
#[derive(Debug)]
pub struct Speculation<'a> {
    pub plan: Plan<'a>,
    /// Every stream the batch names, once, with the version it was assumed to be at (`None`:
    /// assumed not to exist).
    pub assumed_versions: Vec<(&'a str, Option<u64>)>,
}

/// `None` when the batch cannot be speculated on: an expectation that names no version, a
/// batch that would conflict or write nothing even if the guess held, or one that stores a
/// snapshot (rare; the checked path handles it).
pub fn speculate(batch: &[StreamAppend], head: Position) -> Option<Speculation<'_>> {
    if batch.iter().any(|a| a.snapshot.is_some()) {
        return None;
    }
    let mut assumed_versions: Vec<(&str, Option<u64>)> = Vec::new();
    let mut versions = HashMap::new();
    let mut named = HashSet::new();
    for append in batch {
        if !named.insert(append.stream.as_str()) {
            continue;
        }
        let assumed = match append.expected {
            ExpectedVersion::Exact(version) => Some(version),
            ExpectedVersion::NoStream => None,
            ExpectedVersion::Any | ExpectedVersion::StreamExists => return None,
        };
        if let Some(version) = assumed {
            versions.insert(append.stream.clone(), version);
        }
        assumed_versions.push((append.stream.as_str(), assumed));
    }
    let plan = plan(batch, versions, &HashMap::new(), head).ok()?;
    if plan.rows.is_empty() || plan.results.iter().any(AppendResult::is_conflict) {
        return None;
    }
    Some(Speculation {
        plan,
        assumed_versions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> EventData {
        EventData {
            event_id: Uuid::now_v7(),
            event_type: "Test".into(),
            schema_version: 1,
            data: serde_json::value::RawValue::from_string("{}".into()).unwrap(),
            metadata: Default::default(),
            recorded_at: chrono::DateTime::from_timestamp_millis(0).unwrap(),
        }
    }

    fn append(stream: &str, expected: ExpectedVersion, events: usize) -> StreamAppend {
        StreamAppend::new(stream, expected, (0..events).map(|_| event()).collect())
    }

    #[test]
    fn speculation_continues_from_the_assumed_head_and_versions() {
        let batch = [
            append("a", ExpectedVersion::Exact(4), 2),
            append("b", ExpectedVersion::NoStream, 1),
            append("a", ExpectedVersion::Exact(6), 1),
            append("c", ExpectedVersion::Exact(0), 0),
        ];
        let speculation = speculate(&batch, 100).expect("speculable");
        assert_eq!(
            speculation.assumed_versions,
            vec![("a", Some(4)), ("b", None), ("c", Some(0))]
        );
        let placed: Vec<(&str, u64, Position)> = speculation
            .plan
            .rows
            .iter()
            .map(|r| (r.stream, r.version, r.position))
            .collect();
        assert_eq!(
            placed,
            vec![("a", 5, 101), ("a", 6, 102), ("b", 0, 103), ("a", 7, 104)]
        );
        assert!(!speculation
            .plan
            .results
            .iter()
            .any(AppendResult::is_conflict));
    }

    #[test]
    fn batches_that_cannot_be_guessed_or_would_conflict_anyway_are_not_speculated() {
        for expected in [ExpectedVersion::Any, ExpectedVersion::StreamExists] {
            assert!(speculate(&[append("a", expected, 1)], 0).is_none());
        }
        // The second append of "a" expects a version the first does not leave.
        let chain = [
            append("a", ExpectedVersion::Exact(1), 1),
            append("a", ExpectedVersion::Exact(1), 1),
        ];
        assert!(speculate(&chain, 9).is_none());
        // Nothing to write.
        assert!(speculate(&[append("a", ExpectedVersion::Exact(1), 0)], 9).is_none());
        // A snapshot rides along.
        let mut with_snapshot = append("a", ExpectedVersion::Exact(1), 1);
        with_snapshot.snapshot = Some(EncodedSnapshot {
            version: 2,
            format: 1,
            data: "{}".into(),
        });
        assert!(speculate(&[with_snapshot], 9).is_none());
    }
}
