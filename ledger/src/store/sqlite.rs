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
use sqlx::{Connection as _, Row as _, SqliteConnection, SqlitePool};
use tokio::sync::watch;
use uuid::Uuid;

use super::plan::{self, StoredAt};
use super::{
    metadata_from, timestamp_from_ms, to_i64, to_u64, AppendResult, EventData, EventStore,
    Position, RecordedEvent, StoreError, StreamAppend,
};

/// The WAL's bound: 16,384 pages of 4 KiB, 64 MiB.
const WAL_AUTOCHECKPOINT_PAGES: u32 = 16_384;
/// How often the WAL is copied back into the database file while writes go on.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(250);
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
        // A background connection copies the WAL into the database file as it grows, see
        // below; the writer's own checkpoint, every WAL_AUTOCHECKPOINT_PAGES, then finds little
        // left to copy, and it is what lets the next commit restart the WAL from its start (a
        // WAL that only grows makes every fsync also flush file-size metadata: 2x slower).
        let write = SqlitePoolOptions::new()
            .max_connections(1)
            // The pool's liveness ping before each use is a round trip to the SQLite worker on
            // every group commit; a broken file shows up as the append's own error anyway.
            .test_before_acquire(false)
            .connect_with(
                options
                    .clone()
                    .pragma("wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES.to_string()),
            )
            .await?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&write)
            .await
            .map_err(|e| StoreError::Migration(e.to_string()))?;
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone().read_only(true))
            .await?;
        let store = SqliteStore {
            write,
            read,
            head: watch::Sender::new(0),
        };
        let head = store.head().await?;
        store.head.send_replace(head);
        spawn_checkpointer(options, store.head.subscribe()).await?;
        Ok(store)
    }

    /// One append on the writer connection, in one `BEGIN IMMEDIATE` transaction.
    async fn append_on(
        &self,
        conn: &mut SqliteConnection,
        batch: &[StreamAppend],
    ) -> Result<Vec<AppendResult>, StoreError> {
        // Every statement here has one fixed text whatever the batch size (lists travel as one
        // JSON parameter, unpacked by json_each), so each is prepared once per connection; a
        // whole append is four round trips to the SQLite worker: BEGIN, one read, one insert,
        // COMMIT. Each stream's version is a separate MAX() so that SQLite answers it with one
        // index seek instead of scanning the stream (a GROUP BY would).
        let ids: Vec<String> = plan::event_ids(batch)
            .iter()
            .map(|id| id.simple().to_string())
            .collect();
        let streams = plan::streams(batch);
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let found = sqlx::query(
            "SELECT 'head', NULL, NULL, COALESCE(MAX(position), 0), NULL FROM events \
             UNION ALL \
             SELECT 'version', value, \
                    (SELECT MAX(version) FROM events WHERE stream = json_each.value), NULL, NULL \
               FROM json_each(?1) \
             UNION ALL \
             SELECT 'stored', stream, version, position, event_id FROM events \
               WHERE event_id IN (SELECT unhex(value) FROM json_each(?2))",
        )
        .bind(
            serde_json::to_string(&streams)
                .map_err(|e| StoreError::InvalidAppend(e.to_string()))?,
        )
        .bind(serde_json::to_string(&ids).map_err(|e| StoreError::InvalidAppend(e.to_string()))?)
        .fetch_all(&mut *tx)
        .await?;

        let mut head = 0;
        let mut versions = HashMap::new();
        let mut stored = HashMap::new();
        for row in found {
            let kind: String = row.try_get(0)?;
            match kind.as_str() {
                "head" => head = to_u64(row.try_get(3)?, "position")?,
                "version" => {
                    // One row per stream asked about; a stream with no events has no version.
                    if let Some(version) = row.try_get::<Option<i64>, _>(2)? {
                        versions.insert(row.try_get::<String, _>(1)?, to_u64(version, "version")?);
                    }
                }
                _ => {
                    let id: Uuid = row.try_get(4)?;
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
        }
        let (results, rows) = plan::plan(batch, versions, &stored, head)?;

        let new_head = rows.last().map(|r| r.position);
        if !rows.is_empty() {
            let packed: Vec<serde_json::Value> = rows
                .iter()
                .map(|row| {
                    serde_json::json!([
                        row.position,
                        row.stream,
                        row.version,
                        row.event.event_id.simple().to_string(),
                        row.event.event_type,
                        row.event.schema_version,
                        row.event.data.to_string(),
                        row.event.metadata.actor,
                        row.event.metadata.request_id,
                        row.event.metadata.correlation_id,
                        row.event.recorded_at.timestamp_millis(),
                    ])
                })
                .collect();
            sqlx::query(&format!(
                "INSERT INTO events ({COLUMNS}) \
                 SELECT value->>0, value->>1, value->>2, unhex(value->>3), value->>4, value->>5, \
                        value->>6, value->>7, value->>8, value->>9, value->>10 \
                 FROM json_each(?1)"
            ))
            .bind(serde_json::Value::Array(packed).to_string())
            .execute(&mut *tx)
            .await?;
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
}

/// Copies the WAL back into the database file from a connection of its own, so commits seldom
/// wait for it. A PASSIVE checkpoint takes no lock that writers need.
async fn spawn_checkpointer(
    options: SqliteConnectOptions,
    mut head: watch::Receiver<Position>,
) -> Result<(), StoreError> {
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await?;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(CHECKPOINT_INTERVAL).await;
            // Only when something was written; stop with the store.
            match head.has_changed() {
                Ok(true) => {
                    head.mark_unchanged();
                }
                Ok(false) => continue,
                Err(_) => return,
            }
            if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                .execute(&pool)
                .await
            {
                tracing::warn!(%error, "WAL checkpoint failed; will retry");
            }
        }
    });
    Ok(())
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
        let mut conn = self.write.acquire().await?;
        let result = self.append_on(&mut conn, batch).await;
        if result.is_err() {
            // A failed statement or COMMIT can leave the connection inside a transaction that
            // SQLite has already rolled back itself (SQLITE_FULL, SQLITE_IOERR); sqlx would then
            // refuse every later BEGIN on it. Close it instead; the pool opens a fresh one.
            conn.close_on_drop();
        }
        result
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
