//! The embedded store: one SQLite file in WAL mode with `synchronous=FULL`, so a commit returns
//! only once the WAL is fsynced. SQLite has one writer at a time; appends run on one dedicated
//! connection inside `BEGIN IMMEDIATE`, on the appending task's thread (see
//! [`super::sqlite_writer`]), reads on their own pool. (The views live in a file of
//! their own, with their own writer: see the projections crate.)
//!
//! A *WAL flush* here is what SQLite calls a checkpoint: copying the pages the WAL holds back
//! into the database file, so the WAL can start again from its beginning. (In this workspace
//! "checkpoint" means a view's stored position.)

use std::str::FromStr;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection as _, SqliteConnection, SqlitePool};
use tokio::sync::watch;

use super::backend::Backend;
use super::page_cache;
use super::rows::{self, StreamReads};
use super::sqlite_feed::FeedThread;
use super::sqlite_writer::SqliteWriter;
use super::thread_names;
use super::{
    files, AppendResult, EventStore, FeedEvent, OpenMode, Position, StoreError, StreamAppend,
};
use crate::limits::{PAGE_SIZE_BYTES, SQLITE_BUSY_TIMEOUT, WAL_FLUSH_INTERVAL};

pub struct SqliteStore {
    /// The one writer: the connection every append goes through.
    writer: SqliteWriter,
    /// For [`EventStore::database`]: tools and tests that open the file themselves. Connects
    /// only when used.
    admin: SqlitePool,
    read: SqlitePool,
    /// The reader of [`EventStore::read_feed`], apart from `read` so a follower of the whole
    /// log never queues the reads that decisions wait for.
    feed: FeedThread,
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

impl SqliteStore {
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_with(url, OpenMode::CreateIfMissing).await
    }

    /// Opens the file at `url`. With [`OpenMode::CreateIfMissing`] a missing file is created
    /// private (see [`files`]); with [`OpenMode::ExistingOnly`] it must already be a quota
    /// store, checked before anything is written to it.
    pub async fn open_with(url: &str, mode: OpenMode) -> Result<Self, StoreError> {
        // Before this process's first SQLite connection, or not at all (see `page_cache`).
        page_cache::install();
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::UnsupportedUrl(e.to_string()))?;
        match mode {
            OpenMode::CreateIfMissing => files::create_private_file(options.get_filename())?,
            OpenMode::ExistingOnly => check_quota_store(&options).await?,
        }
        let options = options
            .create_if_missing(mode == OpenMode::CreateIfMissing)
            // Takes effect only when the file is created. A group commit of the fleet workload
            // dirties one leaf of the (stream number, version) index per stream it touches, and the
            // WAL write and its fsync grow with the bytes: 1 KiB pages write a quarter of
            // what 4 KiB pages do (see docs/BENCHMARKS.md).
            .page_size(PAGE_SIZE_BYTES)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(SQLITE_BUSY_TIMEOUT);
        // The file is created (with its page size and WAL mode) and migrated on a connection
        // of sqlx's, closed before the writer opens its own.
        let mut setup = SqliteConnection::connect_with(&options).await?;
        sqlx::migrate!("../migrations/sqlite")
            .run(&mut setup)
            .await
            .map_err(|e| StoreError::Migration(e.to_string()))?;
        let _ = setup.close().await;
        let writer = SqliteWriter::open(
            options.get_filename(),
            asks_read_only(url),
            SQLITE_BUSY_TIMEOUT,
        )?;
        // Each connection's thread is named for what it does (`thread_names`).
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(
                options
                    .clone()
                    .read_only(true)
                    .thread_name(|_| thread_names::READER.into()),
            )
            .await?;
        let admin = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_lazy_with(options.clone().thread_name(|_| thread_names::ADMIN.into()));
        let feed = FeedThread::new(options.get_filename(), SQLITE_BUSY_TIMEOUT);
        let store = SqliteStore {
            writer,
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
}

/// Whether `url` asks for the file read-only (`?mode=ro`, as sqlx's URLs and SQLite's URIs
/// spell it). The writer's connection is then read-only too, so every append is refused.
fn asks_read_only(url: &str) -> bool {
    url.split_once('?')
        .is_some_and(|(_, query)| query.split('&').any(|pair| pair == "mode=ro"))
}

/// Flushes the WAL into the database file from a connection of its own, so commits seldom wait
/// for it. A PASSIVE flush takes no lock that writers need.
async fn spawn_wal_flusher(
    options: SqliteConnectOptions,
    mut head: watch::Receiver<Position>,
) -> Result<(), StoreError> {
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(options.thread_name(|_| thread_names::WAL_FLUSH.into()))
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
    const STREAM_READS: StreamReads = rows::BY_STREAM_KEY;

    async fn append_valid_batch(
        &self,
        batch: Vec<StreamAppend>,
    ) -> Result<Vec<AppendResult>, StoreError> {
        let (results, head) = self.writer.append(&batch)?;
        if let Some(position) = head {
            super::advance_position(&self.head, position);
        }
        Ok(results)
    }

    fn read_pool(&self) -> &SqlitePool {
        &self.read
    }

    async fn read_feed_page(
        &self,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<FeedEvent>, StoreError> {
        self.feed.read(after, max_count).await
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
