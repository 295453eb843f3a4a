//! What the embedded store's writer knows of its file between appends: the head it saw or left,
//! and the versions of the streams it read or wrote since. With them an append that continues
//! from where the writer left the file checks its streams' expected versions without an index
//! seek each (on a fleet of projects, a batch names a stream per decision).
//!
//! Every version is a fact about the file at the known head. Events are only ever appended and
//! each append moves the head on, so while the file is still at that head nobody else has
//! written and every fact holds; once the file is seen at any other head, all are forgotten.
//!
//! A stream's number (its key in `streams`, migration 0006) is a fact at every head: it is
//! taken in the transaction of the stream's first event, and no row of `streams` is ever
//! updated or deleted. So [`StreamKeys`] holds what it learned for as long as the connection
//! lives, whoever else writes; it learns a key only from a transaction that committed.

use std::collections::HashMap;

use super::plan::Row;
use super::Position;
use crate::limits::{MAX_KNOWN_STREAM_KEYS, MAX_KNOWN_STREAM_VERSIONS};

#[derive(Debug, Default)]
pub(super) struct KnownFile {
    head: Option<Position>,
    /// Each stream's last version at `head`; `None`: it had no events.
    versions: HashMap<String, Option<u64>>,
}

impl KnownFile {
    /// The head the writer last saw or left, if it knows one.
    pub(super) fn head(&self) -> Option<Position> {
        self.head
    }

    /// The file was read at `head` (under the write lock): what was known holds only if that
    /// is where the writer left it.
    pub(super) fn seen_at(&mut self, head: Position) {
        if self.head != Some(head) {
            self.versions.clear();
            self.head = Some(head);
        }
    }

    /// `stream`'s version at the known head, if known: `Some(None)` means it had no events.
    pub(super) fn version(&self, stream: &str) -> Option<Option<u64>> {
        self.versions.get(stream).copied()
    }

    /// `stream` was read at the known head, at `version`.
    pub(super) fn learn(&mut self, stream: &str, version: Option<u64>) {
        if self.versions.len() >= MAX_KNOWN_STREAM_VERSIONS {
            self.versions.clear();
        }
        self.versions.insert(stream.to_owned(), version);
    }

    /// `rows` (in position order) were committed right after the known head: the head moves
    /// to the last of them, and each stream named to its last version.
    pub(super) fn wrote(&mut self, rows: &[Row<'_>]) {
        let Some(last) = rows.last() else {
            return;
        };
        debug_assert!(self.head.is_some_and(|head| head < rows[0].position));
        for row in rows {
            match self.versions.get_mut(row.stream) {
                Some(version) => *version = Some(row.version),
                None => self.learn(row.stream, Some(row.version)),
            }
        }
        self.head = Some(last.position);
    }
}

/// The numbers of the streams the writer inserted events of, by name, so an insert binds its
/// stream's number instead of looking it up in `streams` (an index seek on the name per row).
#[derive(Debug, Default)]
pub(super) struct StreamKeys {
    keys: HashMap<String, i64>,
}

impl StreamKeys {
    pub(super) fn get(&self, stream: &str) -> Option<i64> {
        self.keys.get(stream).copied()
    }

    /// The keys a transaction used, learned once it has committed (a rolled-back one may have
    /// taken keys that no longer exist).
    pub(super) fn committed(&mut self, used: impl IntoIterator<Item = (String, i64)>) {
        for (stream, key) in used {
            if self.keys.len() >= MAX_KNOWN_STREAM_KEYS {
                self.keys.clear();
            }
            self.keys.insert(stream, key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventData;

    fn event() -> EventData {
        EventData {
            event_id: uuid::Uuid::now_v7(),
            event_type: "Test".into(),
            schema_version: 1,
            data: serde_json::value::RawValue::from_string("{}".into()).unwrap(),
            metadata: Default::default(),
            recorded_at: chrono::DateTime::from_timestamp_millis(0).unwrap(),
        }
    }

    #[test]
    fn versions_hold_only_at_the_head_they_were_learned_at() {
        let e = event();
        let mut known = KnownFile::default();
        assert_eq!(known.head(), None);
        known.seen_at(10);
        known.learn("a", Some(3));
        known.learn("b", None);
        assert_eq!(known.version("a"), Some(Some(3)));
        assert_eq!(known.version("b"), Some(None));
        assert_eq!(known.version("c"), None);

        let rows = [
            Row {
                position: 11,
                stream: "b",
                version: 0,
                event: &e,
            },
            Row {
                position: 12,
                stream: "a",
                version: 4,
                event: &e,
            },
            Row {
                position: 13,
                stream: "b",
                version: 1,
                event: &e,
            },
        ];
        known.wrote(&rows);
        assert_eq!(known.head(), Some(13));
        assert_eq!(known.version("a"), Some(Some(4)));
        assert_eq!(known.version("b"), Some(Some(1)));

        // Seen where it was left: still known.
        known.seen_at(13);
        assert_eq!(known.version("a"), Some(Some(4)));
        // Another writer moved the file on: nothing is known any more.
        known.seen_at(14);
        assert_eq!((known.head(), known.version("a")), (Some(14), None));
    }

    #[test]
    fn it_forgets_everything_rather_than_grow_past_its_bound() {
        let mut known = KnownFile::default();
        known.seen_at(0);
        for n in 0..MAX_KNOWN_STREAM_VERSIONS {
            known.learn(&format!("s{n}"), None);
        }
        assert_eq!(known.versions.len(), MAX_KNOWN_STREAM_VERSIONS);
        known.learn("one more", Some(0));
        assert_eq!(known.versions.len(), 1);
        assert_eq!(known.version("one more"), Some(Some(0)));
    }

    #[test]
    fn stream_keys_forget_everything_rather_than_grow_past_their_bound() {
        let mut keys = StreamKeys::default();
        keys.committed((0..MAX_KNOWN_STREAM_KEYS as i64).map(|n| (format!("s{n}"), n)));
        assert_eq!(keys.keys.len(), MAX_KNOWN_STREAM_KEYS);
        assert_eq!(keys.get("s7"), Some(7));
        keys.committed([("one more".to_owned(), -1)]);
        assert_eq!((keys.keys.len(), keys.get("s7")), (1, None));
        assert_eq!(keys.get("one more"), Some(-1));
    }
}
