//! The database the views live in. On PostgreSQL, the event store's own. On SQLite, a file of
//! their own beside the events (`<events file>-views`, see [`sqlite_views_path`]) with its own
//! writer: SQLite has one writer per file, and view transactions sharing the ledger's would
//! hold up its group commits. A view and its checkpoint still commit in one transaction, and
//! the views only ever apply events already committed (and fsynced) to the events file, so
//! after a crash the views file is at some past checkpoint and catches up. The SQL is common
//! to both backends (`$n` placeholders, `ON CONFLICT`, row values); see `tables`.
//!
//! A *WAL flush* is what SQLite calls a checkpoint: copying the WAL's pages back into the
//! views file. "Checkpoint" alone means a view's stored position (see `checkpoint`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use ledger::store::WAL_BOUND_BYTES;
use ledger::{Database, EventStore};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{PgPool, SqlitePool};

use crate::limits::{VIEWS_PAGE_SIZE_BYTES, VIEWS_WRITER_CACHE_BYTES};
use crate::thread_names;
use crate::ProjectionError;

/// The key of the PostgreSQL advisory lock that serialises writers of the live views, so
/// several nodes following one database never apply the same batch twice ("qview").
pub(crate) const VIEWS_LOCK_KEY: i64 = 0x71_76_69_65_77;
/// The session lock held for a whole rebuild: one rebuild at a time across nodes.
pub(crate) const REBUILD_LOCK_KEY: i64 = VIEWS_LOCK_KEY + 1;

/// Where the views of the SQLite event file `events_file` live.
pub fn sqlite_views_path(events_file: &Path) -> PathBuf {
    let mut name = events_file.as_os_str().to_owned();
    name.push("-views");
    PathBuf::from(name)
}

#[derive(Clone, Debug)]
pub(crate) enum Db {
    /// `write` is the views file's one writer and `read` its readers, so view queries never
    /// queue behind view writes. `wal_flusher` flushes the views' WAL into their file after
    /// bulk writes. (The events are read through the store: see `feed`.)
    Sqlite {
        write: SqlitePool,
        read: SqlitePool,
        wal_flusher: SqlitePool,
    },
    Postgres(PgPool),
}

impl Db {
    pub(crate) async fn of(store: &dyn EventStore) -> Result<Db, ProjectionError> {
        match store.database() {
            Database::Sqlite(store_pool) => {
                let events_file = store_pool.connect_options().get_filename().to_owned();
                let views_file = sqlite_views_path(&events_file);
                // Private like the events file (see `ledger::create_private_file`).
                ledger::store::create_private_file(&views_file)?;
                let options = SqliteConnectOptions::new()
                    .filename(views_file)
                    .create_if_missing(true)
                    .page_size(VIEWS_PAGE_SIZE_BYTES)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(Duration::from_secs(10));
                // The views writer serves only the follower (and rebuilds): its SQLite thread
                // starts on the views thread, at its priority.
                let write = on_views_thread(
                    SqlitePoolOptions::new().max_connections(1),
                    // The follower flushes the WAL in the background (`flush_wal`); the
                    // writer's own flush, by default every 1,000 pages, would copy nearly
                    // every view batch into the file a second time, and fsync it, in line.
                    options
                        .clone()
                        .thread_name(|_| thread_names::WRITER.into())
                        .pragma(
                            "wal_autocheckpoint",
                            (WAL_BOUND_BYTES / u64::from(VIEWS_PAGE_SIZE_BYTES)).to_string(),
                        )
                        // A negative cache size is in KiB.
                        .pragma(
                            "cache_size",
                            format!("-{}", VIEWS_WRITER_CACHE_BYTES / 1024),
                        ),
                )
                .await?;
                sqlx::migrate!("../migrations/sqlite-views")
                    .run(&write)
                    .await
                    .map_err(|e| ProjectionError::Database(e.to_string()))?;
                let store_id = store.identity().await?.ok_or_else(|| {
                    ProjectionError::Database("the SQLite store has no identity".into())
                })?;
                forget_views_of_another_store(&store_id, &write).await?;
                let read = SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect_with(
                        options
                            .clone()
                            .read_only(true)
                            .thread_name(|_| thread_names::READER.into()),
                    )
                    .await?;
                let wal_flusher = on_views_thread(
                    SqlitePoolOptions::new()
                        .max_connections(1)
                        .min_connections(0),
                    options.thread_name(|_| thread_names::WAL_FLUSH.into()),
                )
                .await?;
                Ok(Db::Sqlite {
                    write,
                    read,
                    wal_flusher,
                })
            }
            Database::Postgres(pool) => Ok(Db::Postgres(pool)),
        }
    }
}

/// Opens a pool from the views thread (see `background`), so that SQLite's connection threads
/// start there and run at its priority.
async fn on_views_thread(
    pool: SqlitePoolOptions,
    options: SqliteConnectOptions,
) -> Result<SqlitePool, ProjectionError> {
    crate::background::spawn(async move { pool.connect_with(options).await })
        .await
        .map_err(|e| ProjectionError::Database(format!("views thread: {e}")))?
        .map_err(Into::into)
}

/// Every table of migrations/sqlite-views (a test holds the list to the schema).
const VIEW_TABLES: [&str; 9] = [
    "projection_state",
    "projection_checkpoints",
    "usage_in_use",
    "usage_limits",
    "usage_reservations",
    "audit_entries",
    "audit_projects",
    "project_parents",
    "views_source",
];

/// A views file records which event file it was built from (the id the events file's
/// migration gave it). Paired with another one (the events file was replaced or restored from
/// a backup) its rows describe other events: they are deleted, and the views are built again
/// from the start by the follower or a rebuild.
async fn forget_views_of_another_store(
    store_id: &str,
    views: &SqlitePool,
) -> Result<(), ProjectionError> {
    let mut tx = views.begin_with("BEGIN IMMEDIATE").await?;
    let built_from: Option<String> = sqlx::query_scalar("SELECT store_id FROM views_source")
        .fetch_optional(&mut *tx)
        .await?;
    if built_from.as_deref() != Some(store_id) {
        if built_from.is_some() {
            tracing::warn!(
                "the views file was built from another event file; building the views again"
            );
        }
        for table in VIEW_TABLES {
            sqlx::query(&format!("DELETE FROM {table}"))
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query("INSERT INTO views_source (store_id) VALUES ($1)")
            .bind(store_id)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

impl Db {
    /// Starts flushing SQLite's WAL into the views file, without blocking writers (PASSIVE),
    /// so a long run of view writes does not leave readers searching a huge WAL. A failure
    /// only delays that.
    pub(crate) fn flush_wal(&self) {
        if let Db::Sqlite { wal_flusher, .. } = self {
            // In the background: copying a large WAL takes a while, and nothing waits for it.
            let wal_flusher = wal_flusher.clone();
            tokio::spawn(async move {
                if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                    .execute(&wal_flusher)
                    .await
                {
                    tracing::warn!(error = ?error, "WAL flush after view writes failed");
                }
            });
        }
    }
}

pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view batch's pages must fit the writer's cache, or they are spilled to the WAL and
    /// read back in the middle of every batch (see `VIEWS_WRITER_CACHE_BYTES`).
    #[tokio::test]
    async fn the_views_writer_caches_a_batch_and_readers_keep_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("quota.db").display());
        let store = ledger::store::SqliteStore::open(&url).await.unwrap();
        let Db::Sqlite { write, read, .. } = Db::of(&store).await.unwrap() else {
            panic!("a SQLite store has SQLite views");
        };
        let cache_size = |pool: SqlitePool| async move {
            sqlx::query_scalar::<_, i64>("PRAGMA cache_size")
                .fetch_one(&pool)
                .await
                .unwrap()
        };
        let expected_kib = i64::try_from(VIEWS_WRITER_CACHE_BYTES / 1024).unwrap();
        assert_eq!(cache_size(write).await, -expected_kib);
        assert_eq!(cache_size(read).await, -2000);
    }

    /// Views of another event file are forgotten table by table: a table the list misses keeps
    /// rows about events this file does not hold.
    #[tokio::test]
    async fn the_tables_forgotten_for_another_event_file_are_all_the_view_tables() {
        let pool = SqlitePool::connect("sqlite::memory:").await.unwrap();
        sqlx::migrate!("../migrations/sqlite-views")
            .run(&pool)
            .await
            .unwrap();
        let mut tables: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        tables.sort();
        let mut listed: Vec<String> = VIEW_TABLES.iter().map(|t| (*t).to_owned()).collect();
        listed.sort();
        assert_eq!(tables, listed);
    }
}
