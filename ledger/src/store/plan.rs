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

/// The version of a stream's first event; each later one is one more.
pub const FIRST_VERSION: u64 = 0;

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
    versions: HashMap<String, u64>,
    stored: &HashMap<Uuid, StoredAt>,
    head: Position,
) -> Result<Plan<'a>, StoreError> {
    let mut planner = Planner {
        versions,
        stored,
        next_position: head + 1,
        broken: HashSet::new(),
        plan: Plan {
            results: Vec::with_capacity(batch.len()),
            rows: Vec::new(),
            snapshots: Vec::new(),
        },
    };
    let mut start = 0;
    while start < batch.len() {
        // A chain: the appends up to and including the first that is not linked.
        let end = batch[start..]
            .iter()
            .position(|a| !a.linked)
            .map(|offset| start + offset)
            .ok_or_else(|| {
                StoreError::InvalidAppend("the batch ends inside a linked chain".into())
            })?;
        planner.chain(&batch[start..=end])?;
        start = end + 1;
    }
    Ok(planner.plan)
}

/// The planning of one batch, a chain at a time.
struct Planner<'a, 's> {
    /// Each stream's version as left by the appends planned so far.
    versions: HashMap<String, u64>,
    stored: &'s HashMap<Uuid, StoredAt>,
    next_position: Position,
    /// Streams whose chain of appends in this batch is broken: appends to one stream within a
    /// batch are each decided on the ones before it, so once one of them fails, the rest do.
    broken: HashSet<&'a str>,
    plan: Plan<'a>,
}

impl<'a> Planner<'a, '_> {
    /// Plans a linked chain (one append when it is not linked): whole, or, when any of its
    /// appends conflicts, not at all.
    fn chain(&mut self, chain: &'a [StreamAppend]) -> Result<(), StoreError> {
        let first_result = self.plan.results.len();
        let rows = self.plan.rows.len();
        let snapshots = self.plan.snapshots.len();
        let next_position = self.next_position;
        let mut undo: Vec<(&'a str, Option<u64>)> = Vec::new();
        for append in chain {
            let before = self.versions.get(&append.stream).copied();
            let result = self.append(append)?;
            if self.versions.get(&append.stream).copied() != before {
                undo.push((&append.stream, before));
            }
            self.plan.results.push(result);
        }
        let results = &mut self.plan.results[first_result..];
        if chain.len() == 1 || !results.iter().any(AppendResult::is_conflict) {
            return Ok(());
        }
        // Undo the chain: nothing of it is written, and what follows is planned as if it had
        // never been asked for, except that its streams' later appends were decided on it.
        for result in results.iter_mut().filter(|r| !r.is_conflict()) {
            *result = AppendResult::LinkedFailed;
        }
        self.plan.rows.truncate(rows);
        self.plan.snapshots.truncate(snapshots);
        self.next_position = next_position;
        for (stream, version) in undo.into_iter().rev() {
            match version {
                Some(v) => self.versions.insert(stream.to_owned(), v),
                None => self.versions.remove(stream),
            };
        }
        self.broken.extend(chain.iter().map(|a| a.stream.as_str()));
        Ok(())
    }

    fn append(&mut self, append: &'a StreamAppend) -> Result<AppendResult, StoreError> {
        let actual: StreamVersion = self.versions.get(&append.stream).copied();
        let already: Vec<Option<&StoredAt>> = append
            .events
            .iter()
            .map(|e| self.stored.get(&e.event_id))
            .collect();
        if !append.events.is_empty() && already.iter().all(Option::is_some) {
            let places: Vec<&StoredAt> = already.into_iter().flatten().collect();
            if places.iter().any(|p| p.stream != append.stream) {
                return Err(StoreError::InvalidAppend(
                    "event id already stored in another stream".into(),
                ));
            }
            return Ok(AppendResult::Appended {
                versions: places.iter().map(|p| p.version).collect(),
                positions: places.iter().map(|p| p.position).collect(),
                stream_version: actual,
            });
        }
        if already.iter().any(Option::is_some) {
            return Err(StoreError::InvalidAppend(
                "some but not all of an append's event ids are already stored".into(),
            ));
        }
        if self.broken.contains(append.stream.as_str()) || !append.expected.admits(actual) {
            self.broken.insert(&append.stream);
            return Ok(AppendResult::Conflict {
                expected: append.expected,
                actual,
            });
        }
        let first_version = actual.map_or(FIRST_VERSION, |v| v + 1);
        let mut appended_versions = Vec::with_capacity(append.events.len());
        let mut positions = Vec::with_capacity(append.events.len());
        for (version, event) in (first_version..).zip(&append.events) {
            self.plan.rows.push(Row {
                position: self.next_position,
                stream: &append.stream,
                version,
                event,
            });
            appended_versions.push(version);
            positions.push(self.next_position);
            self.next_position += 1;
        }
        let stream_version = appended_versions.last().copied().or(actual);
        if let Some(v) = stream_version {
            self.versions.insert(append.stream.clone(), v);
        }
        if let Some(snapshot) = &append.snapshot {
            // A snapshot at any other version would describe events that are not (or not
            // only) the stored ones: a caller bug, and never worth storing.
            debug_assert_eq!(Some(snapshot.version), stream_version);
            if !append.events.is_empty() && stream_version == Some(snapshot.version) {
                self.plan.snapshots.push((append.stream.as_str(), snapshot));
            }
        }
        Ok(AppendResult::Appended {
            versions: appended_versions,
            positions,
            stream_version,
        })
    }
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

    fn linked(stream: &str, expected: ExpectedVersion, events: usize) -> StreamAppend {
        append(stream, expected, events).linked()
    }

    /// A chain whose second append conflicts writes nothing: its first append fails with it,
    /// the positions it would have taken go to the next append, and the streams it named stay
    /// broken for the rest of the batch.
    #[test]
    fn a_linked_chain_is_written_whole_or_not_at_all() {
        let batch = [
            linked("a", ExpectedVersion::Exact(4), 2),
            append("b", ExpectedVersion::Exact(7), 1),
            append("c", ExpectedVersion::NoStream, 1),
            append("a", ExpectedVersion::Exact(6), 1),
            linked("c", ExpectedVersion::Exact(0), 1),
            append("d", ExpectedVersion::NoStream, 1),
        ];
        let versions = HashMap::from([("a".to_owned(), 4), ("b".to_owned(), 3)]);
        let plan = plan(&batch, versions, &HashMap::new(), 100).unwrap();
        assert!(matches!(plan.results[0], AppendResult::LinkedFailed));
        assert!(matches!(
            plan.results[1],
            AppendResult::Conflict {
                actual: Some(3),
                ..
            }
        ));
        assert!(
            matches!(&plan.results[2], AppendResult::Appended { positions, .. } if positions == &vec![101])
        );
        assert!(plan.results[3].is_conflict(), "a's chain is broken");
        assert!(
            matches!(&plan.results[4], AppendResult::Appended { versions, .. } if versions == &vec![1])
        );
        assert!(
            matches!(&plan.results[5], AppendResult::Appended { positions, .. } if positions == &vec![103])
        );
        let placed: Vec<(&str, u64, Position)> = plan
            .rows
            .iter()
            .map(|r| (r.stream, r.version, r.position))
            .collect();
        assert_eq!(placed, vec![("c", 0, 101), ("c", 1, 102), ("d", 0, 103)]);
    }

    #[test]
    fn a_batch_may_not_end_inside_a_chain() {
        let batch = [
            append("a", ExpectedVersion::Any, 1),
            linked("b", ExpectedVersion::Any, 1),
        ];
        assert!(matches!(
            plan(&batch, HashMap::new(), &HashMap::new(), 0),
            Err(StoreError::InvalidAppend(_))
        ));
    }
}
