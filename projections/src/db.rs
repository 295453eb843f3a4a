//! The database the views live in: the event store's own, so a view and its checkpoint commit
//! in one transaction. The SQL is common to SQLite and PostgreSQL (`$n` placeholders,
//! `ON CONFLICT`, row values); see `tables`.

use ledger::{Database, EventStore};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{PgPool, SqlitePool};

use crate::ProjectionError;

/// The key of the PostgreSQL advisory lock that serialises writers of the live views, so
/// several nodes following one database never apply the same batch twice ("qview").
pub(crate) const VIEWS_LOCK_KEY: i64 = 0x71_76_69_65_77;
/// The session lock held for a whole rebuild: one rebuild at a time across nodes.
pub(crate) const REBUILD_LOCK_KEY: i64 = VIEWS_LOCK_KEY + 1;

#[derive(Clone, Debug)]
pub(crate) enum Db {
    /// `write` is the ledger's one-connection writer; `read` is ours, read-only, so view
    /// queries never queue behind appends. `checkpointer` copies the WAL back into the
    /// database file after a rebuild's bulk writes: the store checkpoints only after appends,
    /// and a rebuild writes without any.
    Sqlite {
        write: SqlitePool,
        read: SqlitePool,
        checkpointer: SqlitePool,
    },
    Postgres(PgPool),
}

impl Db {
    pub(crate) async fn of(store: &dyn EventStore) -> Result<Db, ProjectionError> {
        match store.database() {
            Database::Sqlite(write) => {
                let options: SqliteConnectOptions = (*write.connect_options()).clone();
                let read = SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect_with(options.clone().read_only(true))
                    .await?;
                let checkpointer = SqlitePoolOptions::new()
                    .max_connections(1)
                    .min_connections(0)
                    .connect_with(options)
                    .await?;
                Ok(Db::Sqlite {
                    write,
                    read,
                    checkpointer,
                })
            }
            Database::Postgres(pool) => Ok(Db::Postgres(pool)),
        }
    }
}

/// Rows per multi-row statement: at most 12 parameters a row keeps every statement far below
/// both backends' parameter limits, and few statements keep SQLite's per-statement cost low.
pub(crate) const ROWS_PER_STATEMENT: usize = 1000;

impl Db {
    /// Starts copying SQLite's WAL back into the database file, without blocking writers
    /// (PASSIVE), so a long run of view writes does not leave readers searching a huge WAL. A
    /// failure only delays that.
    pub(crate) fn checkpoint_wal(&self) {
        if let Db::Sqlite { checkpointer, .. } = self {
            // In the background: copying a large WAL takes a while, and nothing waits for it.
            let checkpointer = checkpointer.clone();
            tokio::spawn(async move {
                if let Err(error) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                    .execute(&checkpointer)
                    .await
                {
                    tracing::warn!(error = ?error, "WAL checkpoint after view writes failed");
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
