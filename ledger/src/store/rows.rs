//! What both backends read the same way: the SQL of every read and one decoder per row shape,
//! written once over sqlx's generic `Row` and `Pool`. The SQL uses `$n` placeholders, which
//! SQLite accepts too, and casts the two columns whose stored types differ (the body: TEXT on
//! SQLite, JSONB on PostgreSQL; small integers: INTEGER and SMALLINT) to one type, so one
//! decoder reads either backend's rows. A backend keeps only what really differs: connecting,
//! pragmas, migrations and the guarded append with its transaction.

use domain::{EncodedSnapshot, Timestamp};
use serde_json::value::RawValue;
use sqlx::{ColumnIndex, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};
use uuid::Uuid;

use super::{EventData, FeedEvent, Metadata, Position, RecordedEvent, StoreError, MAX_READ_COUNT};

/// The events table's columns in the order both backends insert them.
pub(crate) const EVENT_COLUMNS: &str = "position, stream, version, event_id, event_type, \
     schema_version, data, actor, request_id, correlation_id, recorded_at_ms, principal";

/// The columns of a [`FeedEvent`], in the order [`feed_event`] reads them; the body as JSON
/// text and the schema version as a 64-bit integer on both backends.
macro_rules! feed_columns {
    () => {
        "position, stream, version, event_type, CAST(schema_version AS BIGINT), \
         CAST(data AS TEXT), recorded_at_ms, actor, request_id, correlation_id, principal"
    };
}

/// [`feed_columns!`] and then the event id: what [`recorded_event`] reads.
macro_rules! recorded_columns {
    () => {
        concat!(feed_columns!(), ", event_id")
    };
}

/// The index of the event id in [`recorded_columns!`]: after the feed's eleven columns.
const EVENT_ID_COLUMN: usize = 11;

/// The two reads that find events by stream, whose SQL differs between the backends: SQLite
/// keys the events by a number per stream (its `streams` table, migration 0006), PostgreSQL by
/// the stream's name.
pub struct StreamReads {
    /// A stream's events from `$2` in version order, at most `$3` of them.
    read_stream: &'static str,
    /// The names of streams with events after `$1`, in order, at most `$2` of them.
    stream_names: &'static str,
}

/// Found by (stream name, version).
pub(crate) const BY_STREAM_NAME: StreamReads = StreamReads {
    read_stream: concat!(
        "SELECT ",
        recorded_columns!(),
        " FROM events WHERE stream = $1 AND version >= $2 ORDER BY version LIMIT $3"
    ),
    stream_names: "SELECT DISTINCT stream FROM events WHERE stream > $1 ORDER BY stream LIMIT $2",
};

/// Found by (stream number, version), the number by the name in `streams`.
pub(crate) const BY_STREAM_KEY: StreamReads = StreamReads {
    read_stream: concat!(
        "SELECT ",
        recorded_columns!(),
        " FROM events WHERE stream_key = (SELECT stream_key FROM streams WHERE stream = $1) \
         AND version >= $2 ORDER BY version LIMIT $3"
    ),
    stream_names: "SELECT stream FROM streams WHERE stream > $1 ORDER BY stream LIMIT $2",
};

const READ_ALL: &str = concat!(
    "SELECT ",
    recorded_columns!(),
    " FROM events WHERE position > $1 ORDER BY position LIMIT $2"
);
pub(crate) const READ_FEED: &str = concat!(
    "SELECT ",
    feed_columns!(),
    " FROM events WHERE position > $1 ORDER BY position LIMIT $2"
);
const READ_SNAPSHOT: &str =
    "SELECT version, CAST(format AS BIGINT), data FROM snapshots WHERE stream = $1";
const HEAD: &str = "SELECT COALESCE(MAX(position), 0) FROM events";

/// Stores a stream's snapshot in the append's transaction, replacing its previous one.
pub(crate) const SAVE_SNAPSHOT: &str = "INSERT INTO snapshots (stream, version, format, data) \
     VALUES ($1, $2, $3, $4) ON CONFLICT (stream) DO UPDATE \
     SET version = excluded.version, format = excluded.format, data = excluded.data";

/// The read methods of [`super::EventStore`] over a pool of either backend.
pub(crate) struct Reader<'p, DB: sqlx::Database>(pub(crate) &'p Pool<DB>);

impl<DB> Reader<'_, DB>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
    for<'r> i64: Decode<'r, DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> Uuid: Decode<'r, DB> + Type<DB>,
{
    /// See [`super::EventStore::read_stream`].
    pub(crate) async fn stream(
        &self,
        by: &StreamReads,
        stream: &str,
        from_version: u64,
        max_count: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let rows = sqlx::query(by.read_stream)
            .bind(stream)
            .bind(to_i64(from_version))
            .bind(read_limit(max_count))
            .fetch_all(self.0)
            .await?;
        rows.iter().map(recorded_event).collect()
    }

    /// See [`super::EventStore::read_all`].
    pub(crate) async fn all(
        &self,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let rows = self.after(READ_ALL, after, max_count).await?;
        rows.iter().map(recorded_event).collect()
    }

    /// See [`super::EventStore::read_feed`].
    pub(crate) async fn feed(
        &self,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<FeedEvent>, StoreError> {
        let rows = self.after(READ_FEED, after, max_count).await?;
        rows.iter().map(feed_event).collect()
    }

    /// The rows of `sql`, a read of the events in position order, after `after`.
    async fn after(
        &self,
        sql: &'static str,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<DB::Row>, StoreError> {
        Ok(sqlx::query(sql)
            .bind(to_i64(after))
            .bind(read_limit(max_count))
            .fetch_all(self.0)
            .await?)
    }

    /// See [`super::EventStore::stream_names`].
    pub(crate) async fn stream_names(
        &self,
        by: &StreamReads,
        after: &str,
        max_count: usize,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(by.stream_names)
            .bind(after)
            .bind(read_limit(max_count))
            .fetch_all(self.0)
            .await?;
        rows.iter()
            .map(|row| Ok(row.try_get::<String, _>(0)?))
            .collect()
    }

    /// See [`super::EventStore::read_snapshot`].
    pub(crate) async fn snapshot(
        &self,
        stream: &str,
    ) -> Result<Option<EncodedSnapshot>, StoreError> {
        let row = sqlx::query(READ_SNAPSHOT)
            .bind(stream)
            .fetch_optional(self.0)
            .await?;
        row.map(|row| snapshot_of(&row)).transpose()
    }

    /// See [`super::EventStore::head`].
    pub(crate) async fn head(&self) -> Result<Position, StoreError> {
        let row = sqlx::query(HEAD).fetch_one(self.0).await?;
        to_u64(row.try_get(0)?, "position")
    }
}

pub(crate) fn read_limit(max_count: usize) -> i64 {
    to_i64(max_count.min(MAX_READ_COUNT) as u64)
}

/// A row that selected [`feed_columns!`] (or [`recorded_columns!`]).
fn feed_event<R>(row: &R) -> Result<FeedEvent, StoreError>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    FeedColumns {
        position: row.try_get(0)?,
        stream: row.try_get(1)?,
        version: row.try_get(2)?,
        event_type: row.try_get(3)?,
        schema_version: row.try_get(4)?,
        data: row.try_get(5)?,
        recorded_at_ms: row.try_get(6)?,
        actor: row.try_get(7)?,
        request_id: row.try_get(8)?,
        correlation_id: row.try_get(9)?,
        principal: row.try_get(10)?,
    }
    .into_event()
}

/// The columns of [`feed_columns!`] as read, by whichever driver read them: one place for
/// what they must hold.
pub(crate) struct FeedColumns {
    pub(crate) position: i64,
    pub(crate) stream: String,
    pub(crate) version: i64,
    pub(crate) event_type: String,
    pub(crate) schema_version: i64,
    pub(crate) data: String,
    pub(crate) recorded_at_ms: i64,
    pub(crate) actor: Option<String>,
    pub(crate) request_id: Option<String>,
    pub(crate) correlation_id: Option<String>,
    pub(crate) principal: Option<String>,
}

impl FeedColumns {
    /// The event, or corrupt if a column holds what no append stores. An empty metadata
    /// field reads as absent.
    pub(crate) fn into_event(self) -> Result<FeedEvent, StoreError> {
        let present = |field: Option<String>| field.filter(|s| !s.is_empty());
        let schema_version = self.schema_version;
        Ok(FeedEvent {
            position: to_u64(self.position, "position")?,
            stream: self.stream,
            version: to_u64(self.version, "version")?,
            event_type: self.event_type,
            schema_version: u16::try_from(schema_version)
                .map_err(|_| StoreError::Corrupt(format!("schema version {schema_version}")))?,
            data: self.data,
            recorded_at: timestamp_from_ms(self.recorded_at_ms)?,
            metadata: Metadata {
                actor: present(self.actor),
                request_id: present(self.request_id),
                correlation_id: present(self.correlation_id),
                principal: present(self.principal),
            },
        })
    }
}

/// A row that selected [`recorded_columns!`]. A body that is not JSON is corrupt.
fn recorded_event<R>(row: &R) -> Result<RecordedEvent, StoreError>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Uuid: Decode<'r, R::Database> + Type<R::Database>,
{
    let feed = feed_event(row)?;
    Ok(RecordedEvent {
        position: feed.position,
        stream: feed.stream,
        version: feed.version,
        event: EventData {
            event_id: row.try_get(EVENT_ID_COLUMN)?,
            event_type: feed.event_type,
            schema_version: feed.schema_version,
            data: RawValue::from_string(feed.data)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            metadata: feed.metadata,
            recorded_at: feed.recorded_at,
        },
    })
}

/// A row that selected version, format and data of a snapshot.
fn snapshot_of<R>(row: &R) -> Result<EncodedSnapshot, StoreError>
where
    R: Row,
    usize: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let format: i64 = row.try_get(1)?;
    Ok(EncodedSnapshot {
        version: to_u64(row.try_get(0)?, "snapshot version")?,
        format: u16::try_from(format)
            .map_err(|_| StoreError::Corrupt(format!("snapshot format {format}")))?,
        data: row.try_get(2)?,
    })
}

fn timestamp_from_ms(ms: i64) -> Result<Timestamp, StoreError> {
    chrono::DateTime::from_timestamp_millis(ms)
        .ok_or_else(|| StoreError::Corrupt(format!("recorded_at {ms} out of range")))
}

pub(crate) fn to_u64(value: i64, what: &str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("negative {what} {value}")))
}

pub(crate) fn to_i64(value: u64) -> i64 {
    // Positions and versions are counts of stored events; they stay far below 2^63.
    i64::try_from(value).expect("position or version beyond i64")
}
