//! The event store: streams of events with optimistic expected-version appends, and one global
//! feed in commit order.
//!
//! Both backends keep the same table (`events`: position, stream, version, event id, type,
//! schema version, data, metadata, recorded time) with two unique keys, (stream, version) and
//! event id (on SQLite the first is (stream number, version), a number per stream kept in its
//! `streams` table, so the key's entries stay small on the file's 1 KiB pages), and share the
//! batch planner in [`plan`]: a backend only reads the current stream versions, the
//! already-stored event ids and the head position inside its write transaction,
//! and inserts the rows the planner returns. The embedded store, usually the file's only
//! writer, first tries without the read: it inserts the rows planned from what it last wrote,
//! under a check in the same statement that the file is still that way
//! ([`plan::speculate`]).

mod backend;
mod files;
mod known_file;
mod page_cache;
mod plan;
mod postgres;
mod rows;
mod sqlite;
mod sqlite_feed;
mod sqlite_thread;
mod sqlite_writer;
pub mod thread_names;
mod wal_batching;
mod wal_room;

use std::sync::Arc;

use async_trait::async_trait;
use domain::{EncodedSnapshot, StreamVersion, Timestamp};
use serde_json::value::RawValue;
use tokio::sync::watch;
use uuid::Uuid;

pub use files::{create_private_file, PRIVATE_FILE_MODE};
pub use page_cache::install as install_page_cache;
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use wal_batching::{counts as wal_write_counts, vfs_name as wal_batching_vfs, WalWriteCounts};

pub use crate::limits::{MAX_BATCH_EVENTS, MAX_READ_COUNT, WAL_BOUND_BYTES, WAL_ROOM_BYTES};

/// A global position: 1 for the first event ever stored, strictly increasing in commit order.
/// `0` means "before the first event".
pub type Position = u64;

/// Who and what caused an event, for audits. Each field is at most 256 characters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    /// Who the client says it acts for: declared, not verified.
    pub actor: Option<String>,
    pub request_id: Option<String>,
    pub correlation_id: Option<String>,
    /// Who was authenticated when the event was appended (a token's name or role,
    /// `anonymous`, `system:…` for the server's own events); set by the server, never by a
    /// client. `None` for events stored before principals were recorded: unknown.
    pub principal: Option<String>,
}

/// An event ready to append.
#[derive(Clone, Debug)]
pub struct EventData {
    pub event_id: Uuid,
    pub event_type: String,
    pub schema_version: u16,
    /// The body: JSON text as the codec wrote it, stored and read back as text (no JSON value
    /// is built on the way). The type guarantees it is JSON, so an append never stores a body
    /// that is not, and a stored body that is not reads as corrupt.
    pub data: Box<RawValue>,
    pub metadata: Metadata,
    pub recorded_at: Timestamp,
}

impl EventData {
    /// A domain event in its stored form (the codec's versioned body), with a new event id.
    pub fn encode(event: &domain::Event, metadata: Metadata, recorded_at: Timestamp) -> EventData {
        let encoded = domain::encode(event);
        EventData {
            event_id: Uuid::now_v7(),
            event_type: encoded.event_type.to_owned(),
            schema_version: encoded.schema_version,
            data: encoded.data,
            metadata,
            recorded_at,
        }
    }
}

impl PartialEq for EventData {
    /// Bodies compare as text (`RawValue` has no equality of its own).
    fn eq(&self, other: &Self) -> bool {
        let EventData {
            event_id,
            event_type,
            schema_version,
            data,
            metadata,
            recorded_at,
        } = self;
        *event_id == other.event_id
            && *event_type == other.event_type
            && *schema_version == other.schema_version
            && data.get() == other.data.get()
            && *metadata == other.metadata
            && *recorded_at == other.recorded_at
    }
}

/// An event as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedEvent {
    pub position: Position,
    pub stream: String,
    pub version: u64,
    pub event: EventData,
}

impl RecordedEvent {
    pub fn decode(&self) -> Result<domain::Event, domain::DecodeError> {
        domain::decode(
            &self.event.event_type,
            self.event.schema_version,
            self.event.data.get(),
        )
    }
}

/// An event of the global feed in the form a follower of the whole log needs
/// ([`EventStore::read_feed`]): a stored row's columns as stored (no event id), its body kept
/// as the stored JSON text, decoded only by [`FeedEvent::decode`] with the domain's codec.
/// Carries the whole [`Metadata`], so a field added there reaches followers with no change
/// to them.
#[derive(Clone, Debug, PartialEq)]
pub struct FeedEvent {
    pub position: Position,
    pub stream: String,
    pub version: u64,
    pub event_type: String,
    pub schema_version: u16,
    /// The body as stored: JSON text.
    pub data: String,
    pub metadata: Metadata,
    pub recorded_at: Timestamp,
}

impl FeedEvent {
    /// The domain's event, decoded with the codec straight from the text; a body that is not
    /// JSON does not decode (`Malformed` for a known type and schema version).
    pub fn decode(&self) -> Result<domain::Event, domain::DecodeError> {
        domain::decode(&self.event_type, self.schema_version, &self.data)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// No check at all.
    Any,
    /// The stream must not exist yet.
    NoStream,
    /// The stream must exist, at any version.
    StreamExists,
    /// The stream's last event must be at exactly this version.
    Exact(u64),
}

impl ExpectedVersion {
    /// The expectation that a state folded up to `version` has seen the whole stream.
    pub fn from_version(version: StreamVersion) -> Self {
        version.map_or(ExpectedVersion::NoStream, ExpectedVersion::Exact)
    }

    fn admits(self, actual: StreamVersion) -> bool {
        match self {
            ExpectedVersion::Any => true,
            ExpectedVersion::NoStream => actual.is_none(),
            ExpectedVersion::StreamExists => actual.is_some(),
            ExpectedVersion::Exact(v) => actual == Some(v),
        }
    }
}

/// Events to append to one stream under one expectation. An append with no events only checks
/// the expectation: a durable "nothing changed since version N".
#[derive(Clone, Debug, PartialEq)]
pub struct StreamAppend {
    pub stream: String,
    pub expected: ExpectedVersion,
    pub events: Vec<EventData>,
    /// The stream's folded state as of this append's last event. It is stored, replacing the
    /// stream's previous snapshot, in the same transaction as the events, and only if this
    /// append writes them and they bring the stream to exactly `snapshot.version`: so a stored
    /// snapshot always describes stored events, and the latest one is at the newest version.
    pub snapshot: Option<EncodedSnapshot>,
    /// Linked to the next append of the batch: a chain of linked appends ends at the first
    /// append that is not linked, and is written whole or not at all (TigerBeetle's linked
    /// events; a decision whose consistency boundary spans several streams). A batch whose last
    /// append is linked is refused ([`StoreError::InvalidAppend`]).
    pub linked: bool,
}

impl StreamAppend {
    pub fn new(
        stream: impl Into<String>,
        expected: ExpectedVersion,
        events: Vec<EventData>,
    ) -> Self {
        StreamAppend {
            stream: stream.into(),
            expected,
            events,
            snapshot: None,
            linked: false,
        }
    }

    /// This append, linked to the next one of its batch (see [`StreamAppend::linked`]).
    pub fn linked(mut self) -> Self {
        self.linked = true;
        self
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendResult {
    Appended {
        /// Version and global position of each event, in order.
        versions: Vec<u64>,
        positions: Vec<Position>,
        /// The stream's version after this append.
        stream_version: StreamVersion,
    },
    Conflict {
        expected: ExpectedVersion,
        actual: StreamVersion,
    },
    /// The append would have been written, but another append of its linked chain conflicted,
    /// so none of the chain was.
    LinkedFailed,
}

impl AppendResult {
    /// Whether nothing of the append was written because of a stream version: its own
    /// expectation, or one of its linked chain's. Deciding again on fresh state may succeed.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            AppendResult::Conflict { .. } | AppendResult::LinkedFailed
        )
    }
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached or refused the work; retrying later may succeed. The
    /// outcome of an interrupted append is unknown, so callers re-read before deciding again.
    #[error("event store unavailable: {0}")]
    Unavailable(String),
    /// The request itself is wrong (a caller bug): nothing was written.
    #[error("invalid append: {0}")]
    InvalidAppend(String),
    /// The database holds something this code cannot read.
    #[error("event store corrupt: {0}")]
    Corrupt(String),
    #[error("event store migration failed: {0}")]
    Migration(String),
    #[error("unsupported store URL {0:?}: use sqlite://PATH or postgres://...")]
    UnsupportedUrl(String),
    /// Opening an existing store only (the checking tools): there is none where the URL points.
    #[error("{0}")]
    NotFound(String),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::Decode(_)
            | sqlx::Error::ColumnNotFound(_) => StoreError::Corrupt(e.to_string()),
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}

/// The database behind a store, for the read side's tables, which live beside the events.
#[derive(Clone, Debug)]
pub enum Database {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

#[async_trait]
pub trait EventStore: Send + Sync + 'static {
    /// `"sqlite"` or `"postgres"`.
    fn backend(&self) -> &'static str;

    /// The database the events are in (a write-capable pool).
    fn database(&self) -> Database;

    /// Append to several streams in one durable transaction. Appends are applied in order, each
    /// checked against its stream as left by the appends before it, and each gets its own
    /// result: one stream's conflict does not fail the others, except the other appends of its
    /// linked chain ([`StreamAppend::linked`]), which fail with it. An append whose events are all
    /// stored already (by event id) succeeds without writing, whatever its expectation.
    /// Returns only once the transaction is on disk.
    async fn append(&self, batch: Vec<StreamAppend>) -> Result<Vec<AppendResult>, StoreError>;

    /// Events of one stream from `from_version` on, at most `max_count`.
    async fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max_count: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError>;

    /// Events of all streams after `after`, in commit order, at most `max_count`. A reader that
    /// continues from the last position it saw never misses an event.
    async fn read_all(
        &self,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError>;

    /// The global feed for followers of the whole log (the views): events after `after`, in
    /// commit order, at most `max_count` (capped at [`MAX_READ_COUNT`]), in the lean
    /// [`FeedEvent`] form. Like [`EventStore::read_all`], a reader that continues from the
    /// last position it saw never misses an event.
    async fn read_feed(
        &self,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<FeedEvent>, StoreError>;

    /// The names of the streams that have events, in name order, after `after` (`""` for the
    /// first page), at most `max_count` (capped at [`MAX_READ_COUNT`]): with
    /// [`EventStore::read_stream`], a way to every event that does not go through the feed.
    async fn stream_names(&self, after: &str, max_count: usize) -> Result<Vec<String>, StoreError>;

    /// An id made when the store was created, if the backend keeps one (SQLite): whatever is
    /// derived from one store's events and kept elsewhere (the views' own file) records it,
    /// and is never applied to another store's events.
    async fn identity(&self) -> Result<Option<String>, StoreError>;

    /// The stream's latest snapshot (see [`StreamAppend::snapshot`]), if it has one.
    async fn read_snapshot(&self, stream: &str) -> Result<Option<EncodedSnapshot>, StoreError>;

    /// The position of the last event stored, 0 when empty.
    async fn head(&self) -> Result<Position, StoreError>;

    /// The head as last seen by this process: changes after every append, so followers wake on
    /// writes rather than poll.
    fn watch_head(&self) -> watch::Receiver<Position>;
}

/// Whether opening a store may create it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// The service: a missing SQLite file, or a database without the tables, becomes a new
    /// empty store.
    CreateIfMissing,
    /// The checking tools: only a store that exists is opened ([`StoreError::NotFound`]
    /// otherwise), so a typo in a path is an error, not a new empty store that "verifies".
    ExistingOnly,
}

/// Opens a store from a URL: `sqlite://PATH` (created if missing) or `postgres://...`, and runs
/// its migrations.
pub async fn open(url: &str) -> Result<Arc<dyn EventStore>, StoreError> {
    open_with(url, OpenMode::CreateIfMissing).await
}

/// Opens a store that must exist already (see [`OpenMode::ExistingOnly`]).
pub async fn open_existing(url: &str) -> Result<Arc<dyn EventStore>, StoreError> {
    open_with(url, OpenMode::ExistingOnly).await
}

async fn open_with(url: &str, mode: OpenMode) -> Result<Arc<dyn EventStore>, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteStore::open_with(url, mode).await?))
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        Ok(Arc::new(PostgresStore::open_with(url, mode).await?))
    } else {
        Err(StoreError::UnsupportedUrl(url.chars().take(64).collect()))
    }
}

/// Moves a watched position (a store's published head, a view's applied position) forward to
/// `position`, never back: appends, other nodes' notifications and view batches may report out
/// of order. Wakes watchers only when it moved.
pub fn advance_position(watched: &watch::Sender<Position>, position: Position) {
    watched.send_if_modified(|current| {
        let advanced = position > *current;
        *current = (*current).max(position);
        advanced
    });
}

/// Plans `batch` from what its transaction read, in both backends' shape: rows of (kind,
/// stream, version, position, event id), where kind is `head` (the head position), `version`
/// (a named stream and its version, NULL before its first event) or `stored` (where one of the
/// batch's event ids is stored already). Returns the plan and the head that was read.
pub(crate) fn plan_from_read<R>(
    batch: &[StreamAppend],
    rows: Vec<R>,
) -> Result<(plan::Plan<'_>, Position), StoreError>
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Uuid: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let mut head = 0;
    let mut versions = std::collections::HashMap::new();
    let mut stored = std::collections::HashMap::new();
    for row in rows {
        let kind: String = row.try_get(0)?;
        match kind.as_str() {
            "head" => head = rows::to_u64(row.try_get(3)?, "position")?,
            "version" => {
                // One row per stream asked about; a stream with no events has no version.
                if let Some(version) = row.try_get::<Option<i64>, _>(2)? {
                    versions.insert(
                        row.try_get::<String, _>(1)?,
                        rows::to_u64(version, "version")?,
                    );
                }
            }
            _ => {
                let id: Uuid = row.try_get(4)?;
                stored.insert(
                    id,
                    plan::StoredAt {
                        stream: row.try_get(1)?,
                        version: rows::to_u64(row.try_get(2)?, "version")?,
                        position: rows::to_u64(row.try_get(3)?, "position")?,
                    },
                );
            }
        }
    }
    Ok((plan::plan(batch, versions, &stored, head)?, head))
}
