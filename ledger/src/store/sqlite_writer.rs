//! The embedded store's one writer: a thread of its own that owns the SQLite connection all
//! appends go through, and runs each batch's transaction there, start to end.
//!
//! Why a thread rather than a pooled async connection: sqlx runs every SQLite connection on a
//! worker thread and hands each statement to it and each result back, waking a thread both
//! ways, and a group commit took two or three such round trips. Here a batch crosses to the
//! writer once and its results come back once; between the two, every statement (prepared
//! once per connection and cached) runs on the thread that owns the connection, so the reads
//! an append needs cost an index seek each, not a hand-off.
//!
//! A transaction is never left open: an append that fails drops its connection (closing it
//! rolls back what it had not committed), and the next append opens a fresh one. A batch sent
//! here is written even if its caller stops waiting; an answer nobody waits for is dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, LazyLock};
use std::time::Duration;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};
use tokio::sync::oneshot;
use uuid::Uuid;

use super::known_file::KnownFile;
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

type Request = sqlite_thread::Request<Vec<StreamAppend>, Written>;

const STOPPED: &str = "the writer thread stopped";

/// The handle of the writer thread; the thread ends, closing its connection, once this is
/// dropped and the batches sent before have been written. Its queue has no bound of its own:
/// each caller waits for its batch, and the ledger has one caller (its group commit), so the
/// queue holds at most one batch per appending task.
pub(super) struct WriterThread {
    requests: mpsc::Sender<Request>,
}

impl WriterThread {
    /// Opens the writer's connection to the file at `path` (which must exist, migrated) on a
    /// new thread, and answers once it is open. A `read_only` writer refuses every append.
    pub(super) async fn start(
        path: &Path,
        read_only: bool,
        busy_timeout: Duration,
    ) -> Result<Self, StoreError> {
        let (requests, queue) = mpsc::channel::<Request>();
        let (opened, is_open) = oneshot::channel();
        let opener = Opener {
            path: path.to_owned(),
            read_only,
            busy_timeout,
        };
        std::thread::Builder::new()
            .name(super::thread_names::WRITER.into())
            .spawn(move || {
                let writer = match opener.open() {
                    Ok(writer) => {
                        let _ = opened.send(Ok(()));
                        writer
                    }
                    Err(error) => {
                        let _ = opened.send(Err(error));
                        return;
                    }
                };
                sqlite_thread::serve(
                    Some(writer),
                    || opener.open(),
                    queue,
                    |writer, batch| writer.append(&batch),
                );
            })
            .map_err(|e| StoreError::Unavailable(format!("cannot start the writer: {e}")))?;
        is_open
            .await
            .map_err(|_| StoreError::Unavailable(STOPPED.into()))??;
        Ok(WriterThread { requests })
    }

    /// Writes `batch` (checked by `plan::check_batch`) in one transaction on the writer thread.
    pub(super) async fn append(&self, batch: Vec<StreamAppend>) -> Result<Written, StoreError> {
        sqlite_thread::ask(&self.requests, batch, STOPPED).await
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

/// One row in the order of [`EVENT_COLUMNS`], then the stream's number, looked up by its name;
/// built once, since the statement cache is looked up by the text.
static INSERT: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO events ({EVENT_COLUMNS}, stream_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, \
         ?8, ?9, ?10, ?11, ?12, (SELECT stream_key FROM streams WHERE stream = ?2))"
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
        match self.insert(rows) {
            Ok(()) => {}
            Err(error) if is_unique_violation(&error) => {
                self.execute("ROLLBACK")?;
                return Ok(false);
            }
            Err(error) => return Err(unavailable(error)),
        }
        self.execute("COMMIT")?;
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
        self.insert(&rows).map_err(unavailable)?;
        self.execute("COMMIT")?;
        self.known.wrote(&rows);
        Ok((results, new_head))
    }

    fn insert(&self, rows: &[Row<'_>]) -> Result<(), rusqlite::Error> {
        let mut insert = self.conn.prepare_cached(&INSERT)?;
        for row in rows {
            if row.version == FIRST_VERSION {
                self.conn
                    .prepare_cached(NEW_STREAM)?
                    .execute([row.stream])?;
            }
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
            ])?;
        }
        Ok(())
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
