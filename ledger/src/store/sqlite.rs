//! The embedded store: one SQLite file in WAL mode with `synchronous=FULL`, so a commit returns
//! only once the WAL is fsynced. SQLite has one writer at a time; appends run on one dedicated
//! connection inside `BEGIN IMMEDIATE`, reads on their own pool. (The views live in a file of
//! their own, with their own writer: see the projections crate.)
//!
//! A *WAL flush* here is what SQLite calls a checkpoint: copying the pages the WAL holds back
//! into the database file, so the WAL can start again from its beginning. (In this workspace
//! "checkpoint" means a view's stored position.)

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection as _, Row as _, SqliteConnection, SqlitePool};
use tokio::sync::watch;

use super::backend::Backend;
use super::rows::{to_i64, EVENT_COLUMNS, SAVE_SNAPSHOT};
use super::{files, plan, AppendResult, EventStore, OpenMode, Position, StoreError, StreamAppend};
use crate::limits::{MAX_ROWS_PER_INSERT, PAGE_SIZE_BYTES, WAL_BOUND_BYTES, WAL_FLUSH_INTERVAL};

pub struct SqliteStore {
    /// The one writer. `None` after a failed or abandoned append; the next append opens a
    /// fresh one.
    writer: tokio::sync::Mutex<Option<Writer>>,
    writer_options: SqliteConnectOptions,
    /// For [`EventStore::database`]: tools and tests that open the file themselves. Connects
    /// only when used.
    admin: SqlitePool,
    read: SqlitePool,
    /// The readers of [`EventStore::read_feed`], apart from `read` so a follower of the whole
    /// log never queues the reads that decisions wait for. Connected lazily, by the first
    /// feed read: SQLite runs each connection on a thread it spawns from the connecting thread,
    /// which inherits its priority, so a follower that runs at a lower priority (the views)
    /// keeps its reads there too.
    feed: SqlitePool,
    head: watch::Sender<Position>,
}

/// Fails unless the file of `options` exists and holds the events table. The look is taken on
/// a plain read-only connection (no journal-mode change, no migration), so a file that is not
/// a store is left exactly as it was.
async fn check_quota_store(options: &SqliteConnectOptions) -> Result<(), StoreError> {
    let path = options.get_filename();
    files::check_sqlite_file(path)?;
    let look = SqliteConnectOptions::new().filename(path).read_only(true);
    let mut conn = SqliteConnection::connect_with(&look)
        .await
        .map_err(|_| files::not_a_store(path, "SQLite cannot open it"))?;
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'events'",
    )
    .fetch_one(&mut conn)
    .await
    .map_err(|_| files::not_a_store(path, "SQLite cannot read it"))?;
    let _ = conn.close().await;
    if tables == 0 {
        return Err(files::not_a_store(path, "it has no events table"));
    }
    Ok(())
}

/// A dedicated connection rather than a pool: a pooled connection costs a liveness round trip
/// to SQLite's worker thread on every release, and a group commit is one or two round trips.
struct Writer {
    conn: SqliteConnection,
    /// The head this connection's last append saw or left, if it made one: the guess that lets
    /// the next append skip its read (see [`plan::speculate`]). Another process writing to the
    /// file makes the guess wrong, which costs that append one more round trip.
    last_head: Option<Position>,
}

impl SqliteStore {
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_with(url, OpenMode::CreateIfMissing).await
    }

    /// Opens the file at `url`. With [`OpenMode::CreateIfMissing`] a missing file is created
    /// private (see [`files`]); with [`OpenMode::ExistingOnly`] it must already be a quota
    /// store, checked before anything is written to it.
    pub async fn open_with(url: &str, mode: OpenMode) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::UnsupportedUrl(e.to_string()))?;
        match mode {
            OpenMode::CreateIfMissing => files::create_private_file(options.get_filename())?,
            OpenMode::ExistingOnly => check_quota_store(&options).await?,
        }
        let options = options
            .create_if_missing(mode == OpenMode::CreateIfMissing)
            // Takes effect only when the file is created. A group commit of the fleet workload
            // dirties one leaf of the (stream, version) index per stream it touches, and the
            // WAL write and its fsync grow with the bytes: 1 KiB pages write a quarter of
            // what 4 KiB pages do (see docs/BENCHMARKS.md).
            .page_size(PAGE_SIZE_BYTES)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10));
        let mut writer = connect_writer(&options).await?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&mut writer.conn)
            .await
            .map_err(|e| StoreError::Migration(e.to_string()))?;
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options.clone().read_only(true))
            .await?;
        let admin = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(options.clone());
        let feed = SqlitePoolOptions::new()
            .max_connections(2)
            .min_connections(0)
            .connect_lazy_with(
                options
                    .clone()
                    .read_only(true)
                    // A whole page in flight: SQLite's thread hands rows over without waiting
                    // for the reader to take each few (sqlx's default is 50 rows), which
                    // made a rebuild wait on every few rows (see docs/BENCHMARKS.md).
                    .row_buffer_size(super::MAX_READ_COUNT),
            );
        let store = SqliteStore {
            writer: tokio::sync::Mutex::new(Some(writer)),
            writer_options: options.clone(),
            admin,
            read,
            feed,
            head: watch::Sender::new(0),
        };
        let head = store.head().await?;
        store.head.send_replace(head);
        spawn_wal_flusher(options, store.head.subscribe()).await?;
        Ok(store)
    }

    /// One append on the writer connection, in one `BEGIN IMMEDIATE` transaction. Usually one
    /// round trip to SQLite's worker thread: the rows as planned from what this connection last
    /// saw, inserted only if the file is still that way (checked in the same statement). When
    /// that cannot be assumed or was wrong, two: BEGIN with a read of the current versions,
    /// then the insert with the COMMIT. sqlx runs a string of several statements in one call,
    /// stopping at the first error; the caller drops the connection on any error (closing it
    /// rolls back), so a transaction left open by a failure is never reused.
    async fn append_on(
        &self,
        writer: &mut Writer,
        batch: &[StreamAppend],
    ) -> Result<Vec<AppendResult>, StoreError> {
        if let Some(speculation) = writer
            .last_head
            .and_then(|head| plan::speculate(batch, head))
        {
            if append_speculatively(&mut writer.conn, &speculation).await? {
                let new_head = speculation.plan.rows.last().map(|r| r.position);
                writer.last_head = new_head;
                if let Some(position) = new_head {
                    super::advance_position(&self.head, position);
                }
                return Ok(speculation.plan.results);
            }
        }
        let (results, head) = append_checked(&mut writer.conn, batch).await?;
        writer.last_head = Some(head);
        super::advance_position(&self.head, head);
        Ok(results)
    }
}

/// `INSERT … SELECT … FROM (VALUES (?, …), …)` for `rows` rows, bound by [`bind_rows`]. The
/// text depends only on the number of rows, so sqlx prepares each size once per connection;
/// binding values directly costs SQLite far less than unpacking a JSON parameter.
fn insert_rows_sql(rows: usize) -> String {
    debug_assert!(rows > 0 && rows <= MAX_ROWS_PER_INSERT);
    let mut sql = format!(
        "INSERT INTO events ({EVENT_COLUMNS}) SELECT column1, column2, column3, column4, column5, \
         column6, column7, column8, column9, column10, column11, column12 FROM (VALUES "
    );
    for i in 0..rows {
        sql.push_str(if i == 0 { "" } else { ", " });
        sql.push_str("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    }
    sql.push(')');
    sql
}

type Query<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments<'q>>;

/// Binds rows in the order of [`EVENT_COLUMNS`].
fn bind_rows<'q>(mut query: Query<'q>, rows: &'q [plan::Row<'q>]) -> Query<'q> {
    for row in rows {
        query = query
            .bind(to_i64(row.position))
            .bind(row.stream)
            .bind(to_i64(row.version))
            .bind(row.event.event_id)
            .bind(row.event.event_type.as_str())
            .bind(i64::from(row.event.schema_version))
            .bind(row.event.data.get())
            .bind(row.event.metadata.actor.as_deref())
            .bind(row.event.metadata.request_id.as_deref())
            .bind(row.event.metadata.correlation_id.as_deref())
            .bind(row.event.recorded_at.timestamp_millis())
            .bind(row.event.metadata.principal.as_deref());
    }
    query
}

/// The speculated rows, inserted only if the head and every named stream's version are what
/// was assumed: `true` when they were and the rows are durable, `false` when nothing was
/// written (the transaction then ends empty, without an fsync).
async fn append_speculatively(
    conn: &mut SqliteConnection,
    speculation: &plan::Speculation<'_>,
) -> Result<bool, StoreError> {
    let rows = &speculation.plan.rows;
    if rows.len() > MAX_ROWS_PER_INSERT {
        return Ok(false);
    }
    let head = rows[0].position - 1;
    let sql = format!(
        "BEGIN IMMEDIATE; \
         {insert} \
           WHERE (SELECT COALESCE(MAX(position), 0) FROM events) = ? \
             AND NOT EXISTS (SELECT 1 FROM json_each(?) \
                   WHERE (SELECT MAX(version) FROM events WHERE stream = value->>0) \
                         IS NOT value->>1); \
         SELECT changes(); \
         COMMIT",
        insert = insert_rows_sql(rows.len()),
    );
    let query = bind_rows(sqlx::query(&sql), rows).bind(to_i64(head)).bind(
        serde_json::to_string(&speculation.assumed_versions)
            .map_err(|e| StoreError::InvalidAppend(e.to_string()))?,
    );
    match query.fetch_all(&mut *conn).await {
        Ok(found) => {
            let inserted: i64 = found
                .first()
                .ok_or_else(|| StoreError::Corrupt("changes() returned no row".into()))?
                .try_get(0)?;
            match usize::try_from(inserted) {
                Ok(n) if n == rows.len() => Ok(true),
                Ok(0) => Ok(false),
                _ => Err(StoreError::Corrupt(format!(
                    "a guarded insert of {} rows inserted {inserted}",
                    rows.len()
                ))),
            }
        }
        // An event id stored already (a retried append): the checked path finds it.
        Err(sqlx::Error::Database(error))
            if error.kind() == sqlx::error::ErrorKind::UniqueViolation =>
        {
            sqlx::query("ROLLBACK").execute(&mut *conn).await?;
            Ok(false)
        }
        Err(error) => Err(error.into()),
    }
}

/// The append with its read: the current head, the versions of the streams named and any
/// event ids stored already, then the planned insert. Returns the results and the head after.
async fn append_checked(
    conn: &mut SqliteConnection,
    batch: &[StreamAppend],
) -> Result<(Vec<AppendResult>, Position), StoreError> {
    // The read has one fixed text whatever the batch size (lists travel as one JSON parameter,
    // unpacked by json_each), so it is prepared once per connection. Each stream's version is
    // a separate MAX() so that SQLite answers it with one index seek instead of scanning the
    // stream (a GROUP BY would).
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
    .bind(serde_json::to_string(&streams).map_err(|e| StoreError::InvalidAppend(e.to_string()))?)
    .bind(serde_json::to_string(&ids).map_err(|e| StoreError::InvalidAppend(e.to_string()))?)
    .fetch_all(&mut *conn)
    .await?;

    let (plan, head) = super::plan_from_read(batch, found)?;
    let Some(new_head) = plan.rows.last().map(|r| r.position) else {
        // Nothing to write (conflicts, or events stored already): no fsync either.
        sqlx::query("ROLLBACK").execute(&mut *conn).await?;
        return Ok((plan.results, head));
    };
    // Rare (one per doubling of a project's history), so one statement each.
    for (stream, snapshot) in &plan.snapshots {
        sqlx::query(SAVE_SNAPSHOT)
            .bind(stream)
            .bind(to_i64(snapshot.version))
            .bind(i64::from(snapshot.format))
            .bind(&snapshot.data)
            .execute(&mut *conn)
            .await?;
    }
    let mut sql: String = plan
        .rows
        .chunks(MAX_ROWS_PER_INSERT)
        .map(|chunk| insert_rows_sql(chunk.len()) + "; ")
        .collect();
    sql.push_str("COMMIT");
    bind_rows(sqlx::query(&sql), &plan.rows)
        .execute(&mut *conn)
        .await?;
    Ok((plan.results, new_head))
}

/// Opens the writer connection. A background connection flushes the WAL into the database file
/// as it grows (see below); the writer's own flush, every [`WAL_BOUND_BYTES`], then finds
/// little left to copy, and it is what lets the next commit restart the WAL from its start (a
/// WAL that only grows makes every fsync also write the file's size to disk).
async fn connect_writer(options: &SqliteConnectOptions) -> Result<Writer, StoreError> {
    let mut conn = SqliteConnection::connect_with(options).await?;
    let page_size_bytes: i64 = sqlx::query_scalar("PRAGMA page_size")
        .fetch_one(&mut conn)
        .await?;
    let pages = WAL_BOUND_BYTES / u64::try_from(page_size_bytes.max(512)).unwrap_or(512);
    sqlx::query(&format!("PRAGMA wal_autocheckpoint = {pages}"))
        .execute(&mut conn)
        .await?;
    Ok(Writer {
        conn,
        last_head: None,
    })
}

/// Flushes the WAL into the database file from a connection of its own, so commits seldom wait
/// for it. A PASSIVE flush takes no lock that writers need.
async fn spawn_wal_flusher(
    options: SqliteConnectOptions,
    mut head: watch::Receiver<Position>,
) -> Result<(), StoreError> {
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await?;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(WAL_FLUSH_INTERVAL).await;
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
                tracing::warn!(%error, "WAL flush failed; will retry");
            }
        }
    });
    Ok(())
}

#[async_trait]
impl Backend for SqliteStore {
    type Db = sqlx::Sqlite;
    const NAME: &'static str = "sqlite";

    async fn append_valid_batch(
        &self,
        batch: &[StreamAppend],
    ) -> Result<Vec<AppendResult>, StoreError> {
        let mut writer = self.writer.lock().await;
        // Taken out for the append and put back only after it succeeded: after a failure, or
        // if this future is dropped midway, the connection may be inside a transaction (or one
        // SQLite rolled back itself on SQLITE_FULL or SQLITE_IOERR), so it is closed instead.
        let mut current = match writer.take() {
            Some(current) => current,
            None => connect_writer(&self.writer_options).await?,
        };
        let results = self.append_on(&mut current, batch).await?;
        *writer = Some(current);
        Ok(results)
    }

    fn read_pool(&self) -> &SqlitePool {
        &self.read
    }

    fn feed_pool(&self) -> &SqlitePool {
        &self.feed
    }

    fn database_of_events(&self) -> super::Database {
        super::Database::Sqlite(self.admin.clone())
    }

    async fn store_identity(&self) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT id FROM store_identity")
            .fetch_optional(&self.read)
            .await?)
    }

    fn head_sender(&self) -> &watch::Sender<Position> {
        &self.head
    }
}

#[cfg(test)]
mod tests {
    use sqlx::{Connection as _, SqliteConnection};

    /// The workspace's `.cargo/config.toml` compiles SQLite without the two process-wide
    /// mutexes every connection would otherwise share (see there, and docs/BENCHMARKS.md).
    #[tokio::test]
    async fn sqlite_is_built_without_shared_mutexes() {
        let mut conn = SqliteConnection::connect("sqlite::memory:").await.unwrap();
        let options: Vec<String> = sqlx::query_scalar("PRAGMA compile_options")
            .fetch_all(&mut conn)
            .await
            .unwrap();
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "memory statistics are on: {options:?}"
        );
        assert!(
            !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
            "connections share one page cache: {options:?}"
        );
    }
}
