//! The embedded store: one SQLite file in WAL mode with `synchronous=FULL`, so a commit returns
//! only once the WAL is fsynced. SQLite has one writer at a time; appends run on a dedicated
//! one-connection pool inside `BEGIN IMMEDIATE`, reads on their own pool.

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Row as _, Sqlite, SqlitePool};
use tokio::sync::watch;
use uuid::Uuid;

use super::plan::{self, StoredAt};
use super::{
    metadata_from, timestamp_from_ms, to_i64, to_u64, AppendResult, EventData, EventStore,
    Position, RecordedEvent, StoreError, StreamAppend,
};

/// Rows per multi-row statement: 11 parameters each, well under SQLite's 32,766.
const ROWS_PER_STATEMENT: usize = 500;
const COLUMNS: &str = "position, stream, version, event_id, event_type, schema_version, data, actor, request_id, correlation_id, recorded_at_ms";

pub struct SqliteStore {
    write: SqlitePool,
    read: SqlitePool,
    head: watch::Sender<Position>,
}

impl SqliteStore {
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::UnsupportedUrl(e.to_string()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10));
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.clone())
            .await?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&write)
            .await
            .map_err(|e| StoreError::Migration(e.to_string()))?;
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.read_only(true))
            .await?;
        let store = SqliteStore {
            write,
            read,
            head: watch::Sender::new(0),
        };
        let head = store.head().await?;
        store.head.send_replace(head);
        Ok(store)
    }
}

fn decode_row(row: &SqliteRow) -> Result<RecordedEvent, StoreError> {
    let data: String = row.try_get("data")?;
    let schema_version: i64 = row.try_get("schema_version")?;
    Ok(RecordedEvent {
        position: to_u64(row.try_get("position")?, "position")?,
        stream: row.try_get("stream")?,
        version: to_u64(row.try_get("version")?, "version")?,
        event: EventData {
            event_id: row.try_get("event_id")?,
            event_type: row.try_get("event_type")?,
            schema_version: u16::try_from(schema_version)
                .map_err(|_| StoreError::Corrupt(format!("schema version {schema_version}")))?,
            data: serde_json::from_str(&data).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            metadata: metadata_from(
                row.try_get("actor")?,
                row.try_get("request_id")?,
                row.try_get("correlation_id")?,
            ),
            recorded_at: timestamp_from_ms(row.try_get("recorded_at_ms")?)?,
        },
    })
}

#[async_trait]
impl EventStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn database(&self) -> super::Database {
        super::Database::Sqlite(self.write.clone())
    }

    async fn append(&self, batch: &[StreamAppend]) -> Result<Vec<AppendResult>, StoreError> {
        plan::check_batch(batch)?;
        let mut tx = self.write.begin_with("BEGIN IMMEDIATE").await?;

        let mut stored = HashMap::new();
        for chunk in plan::event_ids(batch).chunks(ROWS_PER_STATEMENT) {
            let mut q = QueryBuilder::<Sqlite>::new(
                "SELECT event_id, stream, version, position FROM events WHERE event_id IN (",
            );
            let mut list = q.separated(", ");
            for id in chunk {
                list.push_bind(*id);
            }
            q.push(")");
            for row in q.build().fetch_all(&mut *tx).await? {
                let id: Uuid = row.try_get(0)?;
                stored.insert(
                    id,
                    StoredAt {
                        stream: row.try_get(1)?,
                        version: to_u64(row.try_get(2)?, "version")?,
                        position: to_u64(row.try_get(3)?, "position")?,
                    },
                );
            }
        }

        let mut versions = HashMap::new();
        for chunk in plan::streams(batch).chunks(ROWS_PER_STATEMENT) {
            let mut q = QueryBuilder::<Sqlite>::new(
                "SELECT stream, MAX(version) FROM events WHERE stream IN (",
            );
            let mut list = q.separated(", ");
            for stream in chunk {
                list.push_bind(stream.as_str());
            }
            q.push(") GROUP BY stream");
            for row in q.build().fetch_all(&mut *tx).await? {
                versions.insert(
                    row.try_get::<String, _>(0)?,
                    to_u64(row.try_get(1)?, "version")?,
                );
            }
        }

        let head: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(position), 0) FROM events")
            .fetch_one(&mut *tx)
            .await?;
        let (results, rows) = plan::plan(batch, versions, &stored, to_u64(head, "position")?)?;

        let new_head = rows.last().map(|r| r.position);
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let mut q = QueryBuilder::<Sqlite>::new(format!("INSERT INTO events ({COLUMNS}) "));
            q.push_values(chunk, |mut b, row| {
                b.push_bind(to_i64(row.position))
                    .push_bind(row.stream)
                    .push_bind(to_i64(row.version))
                    .push_bind(row.event.event_id)
                    .push_bind(row.event.event_type.as_str())
                    .push_bind(i64::from(row.event.schema_version))
                    .push_bind(row.event.data.to_string())
                    .push_bind(row.event.metadata.actor.as_deref())
                    .push_bind(row.event.metadata.request_id.as_deref())
                    .push_bind(row.event.metadata.correlation_id.as_deref())
                    .push_bind(row.event.recorded_at.timestamp_millis());
            });
            q.build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        if let Some(position) = new_head {
            self.head.send_if_modified(|h| {
                let advanced = position > *h;
                *h = (*h).max(position);
                advanced
            });
        }
        Ok(results)
    }

    async fn read_stream(
        &self,
        stream: &str,
        from_version: u64,
        max_count: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM events WHERE stream = ? AND version >= ? ORDER BY version LIMIT ?"
        ))
        .bind(stream)
        .bind(to_i64(from_version))
        .bind(to_i64(max_count.min(super::MAX_READ_COUNT) as u64))
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(decode_row).collect()
    }

    async fn read_all(
        &self,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<RecordedEvent>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?"
        ))
        .bind(to_i64(after))
        .bind(to_i64(max_count.min(super::MAX_READ_COUNT) as u64))
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(decode_row).collect()
    }

    async fn head(&self) -> Result<Position, StoreError> {
        let head: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(position), 0) FROM events")
            .fetch_one(&self.read)
            .await?;
        to_u64(head, "position")
    }

    fn watch_head(&self) -> watch::Receiver<Position> {
        self.head.subscribe()
    }
}
