//! The embedded store: one SQLite file in WAL mode with `synchronous=FULL`, so a commit returns
//! only once the WAL is fsynced. SQLite has one writer at a time; appends run on one dedicated
//! connection inside `BEGIN IMMEDIATE`, reads on their own pool. (The views live in a file of
//! their own, with their own writer: see the projections crate.)

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
use domain::EncodedSnapshot;

/// The page size of files this store creates (existing files keep theirs).
const PAGE_SIZE_BYTES: u32 = 1024;
/// The WAL's bound, 64 MiB: the writer checkpoints when the WAL holds this many bytes of pages.
const WAL_AUTOCHECKPOINT_BYTES: u64 = 64 << 20;
/// How often the WAL is copied back into the database file while writes go on.
const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(250);
const SAVE_SNAPSHOT: &str = "INSERT INTO snapshots (stream, version, format, data) \
     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (stream) DO UPDATE \
     SET version = excluded.version, format = excluded.format, data = excluded.data";
const COLUMNS: &str = "position, stream, version, event_id, event_type, schema_version, data, actor, request_id, correlation_id, recorded_at_ms";

pub struct SqliteStore {
    /// The one writer. A dedicated connection rather than a pool: a pooled connection costs a
    /// liveness round trip to SQLite's worker thread on every release, and a group commit is
    /// only a few round trips. `None` after a failed or abandoned append; the next append
    /// opens a fresh one.
    writer: tokio::sync::Mutex<Option<SqliteConnection>>,
    writer_options: SqliteConnectOptions,
    /// For [`EventStore::database`]: tools and tests that open the file themselves. Connects
    /// only when used.
    admin: SqlitePool,
    read: SqlitePool,
    head: watch::Sender<Position>,
}

impl SqliteStore {
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::UnsupportedUrl(e.to_string()))?
            .create_if_missing(true)
            // Takes effect only when the file is created. A group commit of the fleet workload
            // dirties one leaf of the (stream, version) index per stream it touches, and the
            // WAL write and its fsync grow with the bytes: 1 KiB pages write a quarter of
            // what 4 KiB pages do (fleet: +14% boots/s with `quota bench`).
            .page_size(PAGE_SIZE_BYTES)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10));
        let mut writer = connect_writer(&options).await?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&mut writer)
            .await
            .map_err(|e| StoreError::Migration(e.to_string()))?;
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone().read_only(true))
            .await?;
        let admin = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(options.clone());
        let store = SqliteStore {
            writer: tokio::sync::Mutex::new(Some(writer)),
            writer_options: options.clone(),
            admin,
            read,
            head: watch::Sender::new(0),
        };
        let head = store.head().await?;
        store.head.send_replace(head);
        spawn_checkpointer(options, store.head.subscribe()).await?;
        Ok(store)
    }

    /// One append on the writer connection, in one `BEGIN IMMEDIATE` transaction, in two round
    /// trips to SQLite's worker thread: BEGIN with the read, and the insert with the COMMIT.
    /// sqlx runs a string of several statements in one call, stopping at the first error; the
    /// caller drops the connection on any error (closing it rolls back), so a transaction left
    /// open by a failure is never reused.
    async fn append_on(
        &self,
        conn: &mut SqliteConnection,
        batch: &[StreamAppend],
    ) -> Result<Vec<AppendResult>, StoreError> {
        // Every statement here has one fixed text whatever the batch size (lists travel as one
        // JSON parameter, unpacked by json_each), so each is prepared once per connection. Each
        // stream's version is a separate MAX() so that SQLite answers it with one index seek
        // instead of scanning the stream (a GROUP BY would).
        let ids: Vec<String> = plan::event_ids(batch)
            .iter()
            .map(|id| id.simple().to_string())
            .collect();
        let streams = plan::streams(batch);
        let found = sqlx::query(
            "BEGIN IMMEDIATE; \
             SELECT 'head', NULL, NULL, COALESCE(MAX(position), 0), NULL FROM events \
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
        .fetch_all(&mut *conn)
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
        let plan::Plan {
            results,
            rows,
            snapshots,
        } = plan::plan(batch, versions, &stored, head)?;

        let new_head = rows.last().map(|r| r.position);
        if rows.is_empty() {
            // Nothing to write (conflicts, or events stored already): no fsync either.
            sqlx::query("ROLLBACK").execute(&mut *conn).await?;
        } else {
            // Rare (one per doubling of a project's history), so one statement each.
            for (stream, snapshot) in &snapshots {
                sqlx::query(SAVE_SNAPSHOT)
                    .bind(stream)
                    .bind(to_i64(snapshot.version))
                    .bind(i64::from(snapshot.format))
                    .bind(&snapshot.data)
                    .execute(&mut *conn)
                    .await?;
            }
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
                 FROM json_each(?1); \
                 COMMIT"
            ))
            .bind(serde_json::Value::Array(packed).to_string())
            .execute(&mut *conn)
            .await?;
        }
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

/// Opens the writer connection. A background connection copies the WAL into the database file
/// as it grows (see below); the writer's own checkpoint, every WAL_AUTOCHECKPOINT_BYTES, then
/// finds little left to copy, and it is what lets the next commit restart the WAL from its
/// start (a WAL that only grows makes every fsync also flush file-size metadata: 2x slower).
async fn connect_writer(options: &SqliteConnectOptions) -> Result<SqliteConnection, StoreError> {
    let mut conn = SqliteConnection::connect_with(options).await?;
    let page_size_bytes: i64 = sqlx::query_scalar("PRAGMA page_size")
        .fetch_one(&mut conn)
        .await?;
    let pages = WAL_AUTOCHECKPOINT_BYTES / u64::try_from(page_size_bytes.max(512)).unwrap_or(512);
    sqlx::query(&format!("PRAGMA wal_autocheckpoint = {pages}"))
        .execute(&mut conn)
        .await?;
    Ok(conn)
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
        super::Database::Sqlite(self.admin.clone())
    }

    async fn append(&self, batch: &[StreamAppend]) -> Result<Vec<AppendResult>, StoreError> {
        plan::check_batch(batch)?;
        let mut writer = self.writer.lock().await;
        // Taken out for the append and put back only after it succeeded: after a failure, or
        // if this future is dropped midway, the connection may be inside a transaction (or one
        // SQLite rolled back itself on SQLITE_FULL or SQLITE_IOERR), so it is closed instead.
        let mut conn = match writer.take() {
            Some(conn) => conn,
            None => connect_writer(&self.writer_options).await?,
        };
        let results = self.append_on(&mut conn, batch).await?;
        *writer = Some(conn);
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

    async fn read_snapshot(&self, stream: &str) -> Result<Option<EncodedSnapshot>, StoreError> {
        let row: Option<(i64, i64, String)> =
            sqlx::query_as("SELECT version, format, data FROM snapshots WHERE stream = ?")
                .bind(stream)
                .fetch_optional(&self.read)
                .await?;
        row.map(|(version, format, data)| super::snapshot_from(version, format, data))
            .transpose()
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
