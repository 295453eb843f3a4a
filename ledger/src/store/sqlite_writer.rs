//! The embedded store's one writer: the SQLite connection all appends go through, each batch's
//! transaction run on it start to end, on the thread of the task that appends.
//!
//! Why on the appending task's own thread: a hand-off to a thread of the connection's own
//! (which this was, and sqlx's SQLite connections are) wakes that thread for each batch and
//! the runtime's worker for each answer. Each wake costs the waker a system call and the woken
//! thread its wake-up latency (a vCPU that had gone idle, on this VM), on a cycle whose other
//! parts (deciding, the writer's CPU, the device's write and flush) are serial anyway
//! (docs/BENCHMARKS.md, 2026-12-07, 11:40). Every statement is prepared once per connection
//! and cached.
//!
//! What it costs: the appending task's worker thread is blocked for the transaction, its CPU
//! and one fsync (a few tenths of a millisecond here), and, when another process holds the
//! file's write lock, for up to the busy timeout. The ledger appends from one task (its group
//! commit), so at most one worker waits at a time; other workers, where there are any, serve
//! requests meanwhile, and with one worker requests wait for the commit. No lock on the file
//! is ever held across an `.await` in this process: a transaction begins and ends inside one
//! call.
//!
//! A transaction is never left open: an append that fails drops its connection (closing it
//! rolls back what it had not committed), and the next append opens a fresh one. A batch is
//! written within one poll of its caller, so a caller that stops waiting has either not begun
//! it or has it written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use uuid::Uuid;

use super::known_file::{KnownFile, StreamKeys};
use super::plan::{self, Plan, Row, FIRST_VERSION};
use super::rows::{to_i64, to_u64, EVENT_COLUMNS, SAVE_SNAPSHOT};
use super::sqlite_thread;
use super::wal_batching;
use super::wal_room::WalRoom;
use super::{AppendResult, Position, StoreError, StreamAppend};
use crate::limits::WAL_BOUND_BYTES;

/// What an append answers: each append's result, and the head it saw or left (another
/// process's appends included), for the store's head watch.
pub(super) type Written = (Vec<AppendResult>, Option<Position>);

/// The store's writer: its connection (none after a failure, until the next append opens one)
/// and how to open it. The lock is held only inside [`SqliteWriter::append`], never across an
/// `.await`, so appends from several tasks take turns.
pub(super) struct SqliteWriter {
    state: Mutex<WriterState>,
}

struct WriterState {
    current: Option<Writer>,
    opener: Opener,
}

impl SqliteWriter {
    /// Opens the writer's connection to the file at `path` (which must exist, migrated). A
    /// `read_only` writer refuses every append.
    pub(super) fn open(
        path: &Path,
        read_only: bool,
        busy_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let opener = Opener {
            path: path.to_owned(),
            read_only,
            busy_timeout,
        };
        let current = Some(opener.open()?);
        Ok(SqliteWriter {
            state: Mutex::new(WriterState { current, opener }),
        })
    }

    /// Writes `batch` (checked by `plan::check_batch`) in one transaction, on this thread.
    pub(super) fn append(&self, batch: &[StreamAppend]) -> Result<Written, StoreError> {
        // A panic inside an append drops the connection it took out (closing it rolls back),
        // so what a poisoned lock guards is still sound: no connection, opened afresh next.
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let WriterState { current, opener } = &mut *state;
        sqlite_thread::run_reopening(current, || opener.open(), |writer| writer.append(batch))
    }
}

/// The writer's connection and what it last saw.
struct Writer {
    conn: Connection,
    /// Zeros ahead of SQLite's writes in the WAL file, so commits overwrite rather than extend.
    wal_room: WalRoom,
    /// The head this connection's last append saw or left, if it made one, and the stream
    /// versions it knows there: with them the next append skips reading the stored event ids
    /// (see [`plan::speculate`]) and the versions it knows. Another process writing to the file
    /// makes the guess wrong, which costs that append the full read.
    known: KnownFile,
    /// The numbers of the streams it inserted events of.
    stream_keys: StreamKeys,
}

const BEGIN: &str = "BEGIN IMMEDIATE";
const HEAD: &str = "SELECT COALESCE(MAX(position), 0) FROM events";
/// Two index seeks: the stream's number by its name, then (number, version); NULL for a
/// stream with no events.
const STREAM_VERSION: &str = "SELECT MAX(events.version) FROM streams \
     JOIN events ON events.stream_key = streams.stream_key WHERE streams.stream = ?1";
const STORED_AT: &str = "SELECT stream, version, position FROM events WHERE event_id = ?1";
/// A stream's number, taken in the transaction of its first event (see migration 0006). A
/// stream listed already makes this a unique violation: the append assumed the stream empty.
const NEW_STREAM: &str = "INSERT INTO streams (stream) VALUES (?1)";
/// The number of a stream whose first event is stored, by its name (one index seek).
const STREAM_KEY: &str = "SELECT stream_key FROM streams WHERE stream = ?1";

/// One row in the order of [`EVENT_COLUMNS`], then the stream's number; built once, since the
/// statement cache is looked up by the text.
static INSERT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO events ({EVENT_COLUMNS}, stream_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, \
         ?8, ?9, ?10, ?11, ?12, ?13)"
    )
});

/// How the writer's connection is opened, the first time and after a failure.
struct Opener {
    path: PathBuf,
    /// The store was asked for read-only (`?mode=ro`): the connection is too, so every append
    /// fails (unavailable) and the file is never written.
    read_only: bool,
    busy_timeout: Duration,
}

impl Opener {
    /// Opens the file (it exists: the store created and migrated it) with the pragmas every
    /// commit relies on: WAL, `synchronous=FULL` (a commit returns only once the WAL is
    /// fsynced, which [`wal_batching`]'s VFS needs), and a WAL the writer flushes itself past
    /// [`WAL_BOUND_BYTES`].
    fn open(&self) -> Result<Writer, StoreError> {
        let access = if self.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
        };
        let path = &self.path;
        let vfs = wal_batching::vfs_name().map_err(StoreError::Unavailable)?;
        let conn = Connection::open_with_flags_and_vfs(
            path,
            access | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            vfs,
        )
        .map_err(unavailable)?;
        conn.busy_timeout(self.busy_timeout).map_err(unavailable)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
            .map_err(unavailable)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Unavailable(format!(
                "{} cannot be put in WAL mode (it is in {mode} mode)",
                path.display()
            )));
        }
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(unavailable)?;
        let page_size_bytes: i64 = conn
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .map_err(unavailable)?;
        let pages = WAL_BOUND_BYTES / u64::try_from(page_size_bytes.max(512)).unwrap_or(512);
        conn.pragma_update(None, "wal_autocheckpoint", pages)
            .map_err(unavailable)?;
        Ok(Writer {
            conn,
            wal_room: WalRoom::beside(path),
            known: KnownFile::default(),
            stream_keys: StreamKeys::default(),
        })
    }
}

impl Writer {
    fn append(&mut self, batch: &[StreamAppend]) -> Result<Written, StoreError> {
        if let Some(speculation) = self
            .known
            .head()
            .and_then(|head| plan::speculate(batch, head))
        {
            if self.append_speculatively(&speculation)? {
                self.known.wrote(&speculation.plan.rows);
                return Ok((speculation.plan.results, self.known.head()));
            }
        }
        let (results, head) = self.append_checked(batch)?;
        Ok((results, Some(head)))
    }

    /// The speculated rows, inserted only if the head and every named stream's version are what
    /// was assumed: `true` when they were and the rows are durable, `false` when nothing was
    /// written (the transaction then ends empty, without an fsync). An event id stored already
    /// (a retried append) also writes nothing here: the checked path finds it.
    fn append_speculatively(
        &mut self,
        speculation: &plan::Speculation<'_>,
    ) -> Result<bool, StoreError> {
        let rows = &speculation.plan.rows;
        let head = rows[0].position - 1;
        self.begin()?;
        if !self.is_as_assumed(head, &speculation.assumed_versions)? {
            self.execute("ROLLBACK")?;
            return Ok(false);
        }
        let used_keys = match self.insert(rows) {
            Ok(used_keys) => used_keys,
            Err(error) if is_unique_violation(&error) => {
                self.execute("ROLLBACK")?;
                return Ok(false);
            }
            Err(error) => return Err(unavailable(error)),
        };
        self.execute("COMMIT")?;
        self.stream_keys.committed(used_keys);
        Ok(true)
    }

    /// Whether the file is at `head` and each stream at its assumed version (`None`: none).
    /// `head` is the known one: a version known there is not read again.
    fn is_as_assumed(
        &mut self,
        head: Position,
        assumed_versions: &[(&str, Option<u64>)],
    ) -> Result<bool, StoreError> {
        let actual = self.read_head()?;
        self.known.seen_at(actual);
        if actual != head {
            return Ok(false);
        }
        for (stream, assumed) in assumed_versions {
            if self.version_at_known_head(stream)? != *assumed {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// `stream`'s version at the head the file was just seen at (under the write lock): the
    /// known one if there is one, else read and remembered. `None`: the stream has no events.
    fn version_at_known_head(&mut self, stream: &str) -> Result<Option<u64>, StoreError> {
        if let Some(known) = self.known.version(stream) {
            return Ok(known);
        }
        let read = self.read_version(stream)?;
        self.known.learn(stream, read);
        Ok(read)
    }

    /// The append with its read: the current head, the versions of the streams named (those
    /// not known at that head) and any event ids stored already, then the planned insert.
    /// Returns the results and the head after (the one read, when nothing was written).
    fn append_checked(
        &mut self,
        batch: &[StreamAppend],
    ) -> Result<(Vec<AppendResult>, Position), StoreError> {
        self.begin()?;
        let head = self.read_head()?;
        self.known.seen_at(head);
        let mut versions = HashMap::new();
        for stream in plan::streams(batch) {
            if let Some(version) = self.version_at_known_head(&stream)? {
                versions.insert(stream, version);
            }
        }
        let mut stored = HashMap::new();
        for id in plan::event_ids(batch) {
            if let Some(at) = self.read_stored_at(id)? {
                stored.insert(id, at);
            }
        }
        let Plan {
            results,
            rows,
            snapshots,
        } = plan::plan(batch, versions, &stored, head)?;
        let Some(new_head) = rows.last().map(|r| r.position) else {
            // Nothing to write (conflicts, or events stored already): no fsync either.
            self.execute("ROLLBACK")?;
            return Ok((results, head));
        };
        for (stream, snapshot) in &snapshots {
            self.conn
                .prepare_cached(SAVE_SNAPSHOT)
                .and_then(|mut save| {
                    save.execute(params![
                        stream,
                        to_i64(snapshot.version),
                        i64::from(snapshot.format),
                        snapshot.data
                    ])
                })
                .map_err(unavailable)?;
        }
        let used_keys = self.insert(&rows).map_err(unavailable)?;
        self.execute("COMMIT")?;
        self.stream_keys.committed(used_keys);
        self.known.wrote(&rows);
        Ok((results, new_head))
    }

    /// Inserts `rows`; returns the stream numbers it took or looked up that were not known,
    /// to be learned once the transaction commits.
    fn insert(&self, rows: &[Row<'_>]) -> Result<HashMap<String, i64>, rusqlite::Error> {
        let mut insert = self.conn.prepare_cached(&INSERT)?;
        let mut used_keys = HashMap::new();
        for row in rows {
            let stream_key = self.stream_key(row, &mut used_keys)?;
            let event = row.event;
            let meta = &event.metadata;
            insert.execute(params![
                to_i64(row.position),
                row.stream,
                to_i64(row.version),
                &event.event_id.as_bytes()[..],
                event.event_type,
                i64::from(event.schema_version),
                event.data.get(),
                meta.actor,
                meta.request_id,
                meta.correlation_id,
                event.recorded_at.timestamp_millis(),
                meta.principal,
                stream_key,
            ])?;
        }
        Ok(used_keys)
    }

    /// `row`'s stream number: taken for its first event, else known, else looked up.
    fn stream_key(
        &self,
        row: &Row<'_>,
        used_keys: &mut HashMap<String, i64>,
    ) -> Result<i64, rusqlite::Error> {
        if row.version == FIRST_VERSION {
            self.conn
                .prepare_cached(NEW_STREAM)?
                .execute([row.stream])?;
            let taken = self.conn.last_insert_rowid();
            used_keys.insert(row.stream.to_owned(), taken);
            return Ok(taken);
        }
        if let Some(known) = self.stream_keys.get(row.stream) {
            return Ok(known);
        }
        if let Some(used) = used_keys.get(row.stream) {
            return Ok(*used);
        }
        let read: i64 = self
            .conn
            .prepare_cached(STREAM_KEY)?
            .query_row([row.stream], |found| found.get(0))?;
        used_keys.insert(row.stream.to_owned(), read);
        Ok(read)
    }

    /// Takes the write lock, and with it makes room in the WAL for what this transaction writes.
    fn begin(&mut self) -> Result<(), StoreError> {
        self.execute(BEGIN)?;
        self.wal_room.make_room();
        Ok(())
    }

    fn execute(&self, sql: &str) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut statement| statement.execute([]))
            .map(|_| ())
            .map_err(unavailable)
    }

    fn read_head(&self) -> Result<Position, StoreError> {
        let head: i64 = self
            .conn
            .prepare_cached(HEAD)
            .and_then(|mut read| read.query_row([], |row| row.get(0)))
            .map_err(unavailable)?;
        to_u64(head, "position")
    }

    fn read_version(&self, stream: &str) -> Result<Option<u64>, StoreError> {
        let version: Option<i64> = self
            .conn
            .prepare_cached(STREAM_VERSION)
            .and_then(|mut read| read.query_row([stream], |row| row.get(0)))
            .map_err(unavailable)?;
        version.map(|v| to_u64(v, "version")).transpose()
    }

    fn read_stored_at(&self, id: Uuid) -> Result<Option<plan::StoredAt>, StoreError> {
        let found: Option<(String, i64, i64)> = self
            .conn
            .prepare_cached(STORED_AT)
            .and_then(|mut read| {
                read.query_row([&id.as_bytes()[..]], |row| {
                    Ok((row.get(0)?, row.get(1)?, row.get(2)?))
                })
                .optional()
            })
            .map_err(unavailable)?;
        found
            .map(|(stream, version, position)| {
                Ok(plan::StoredAt {
                    stream,
                    version: to_u64(version, "version")?,
                    position: to_u64(position, "position")?,
                })
            })
            .transpose()
    }
}

/// An event id stored already (the event-id key), or a position or version taken meanwhile.
fn is_unique_violation(error: &rusqlite::Error) -> bool {
    matches!(
        error,
        rusqlite::Error::SqliteFailure(failure, _)
            if failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || failure.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
    )
}

/// Whatever SQLite refused (a full disk, an I/O error, a lock held past the busy timeout) may
/// succeed later: the store is unavailable, and the append's connection is not reused.
fn unavailable(error: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(error.to_string())
}
