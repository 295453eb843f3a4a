//! Reads and writes of the view tables, in one transaction type for both backends: the
//! transaction here, a view's bookkeeping in [`heads`], the usage view's reads in [`reads`]
//! and its writes in [`writes`].

mod heads;
mod reads;
mod writes;

pub(crate) use reads::ProjectRows;
pub(crate) use writes::FullPart;

use domain::{Limit, LiveReservation, ReservationId, ResourceName};
use sqlx::{Postgres, Sqlite, Transaction};

use crate::db::Db;
use crate::ProjectionError;

/// A transaction on the views' database: a writer's (exclusive among view writers) or a
/// reader's snapshot.
pub(crate) enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

/// Runs `$body` with `$conn` bound to the transaction's connection and `$DB` to its database.
macro_rules! on_tx {
    ($tx:expr, |$conn:ident, $DB:ident| $body:expr) => {
        match $tx {
            Tx::Sqlite(t) => {
                #[allow(dead_code)]
                type $DB = sqlx::Sqlite;
                let $conn = &mut **t;
                $body
            }
            Tx::Postgres(t) => {
                #[allow(dead_code)]
                type $DB = sqlx::Postgres;
                let $conn = &mut **t;
                $body
            }
        }
    };
}
pub(crate) use on_tx;

/// Where a view stands: the generation readers use and the position it has applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ViewHead {
    pub name: String,
    pub generation: i64,
    pub position: u64,
    pub code_version: i64,
}

/// The usage view's tables of numbers per (project, resource).
#[derive(Clone, Copy, Debug)]
pub(crate) enum NumberTable {
    InUse,
    Limits,
}

impl NumberTable {
    /// The select of its (project, resource, value) rows, without a condition.
    fn select(self) -> &'static str {
        match self {
            NumberTable::InUse => "SELECT project, resource, in_use FROM usage_in_use",
            NumberTable::Limits => "SELECT project, resource, limit_value FROM usage_limits",
        }
    }
}

/// A stored reservation of the usage view.
pub(crate) struct StoredReservation {
    pub project: String,
    pub id: ReservationId,
    pub held: bool,
    pub kept: LiveReservation,
}

fn corrupt(what: &str) -> ProjectionError {
    ProjectionError::CorruptView(what.to_owned())
}

fn limit(value: i64) -> Result<Limit, ProjectionError> {
    Limit::new(value).map_err(|_| corrupt("limit"))
}

fn resource(name: &str) -> Result<ResourceName, ProjectionError> {
    ResourceName::parse(name).map_err(|_| corrupt("resource name"))
}

impl Db {
    pub(crate) async fn begin_write(&self) -> Result<Tx, ProjectionError> {
        Ok(match self {
            Db::Sqlite { write, .. } => Tx::Sqlite(write.begin_with("BEGIN IMMEDIATE").await?),
            Db::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(crate::db::VIEWS_LOCK_KEY)
                    .execute(&mut *tx)
                    .await?;
                Tx::Postgres(tx)
            }
        })
    }

    /// A write transaction for a rebuild's fresh generation, which no one else writes: it
    /// does not take the live views' lock.
    pub(crate) async fn begin_unlocked(&self) -> Result<Tx, ProjectionError> {
        Ok(match self {
            Db::Sqlite { write, .. } => Tx::Sqlite(write.begin_with("BEGIN IMMEDIATE").await?),
            Db::Postgres(pool) => Tx::Postgres(pool.begin().await?),
        })
    }

    pub(crate) async fn begin_read(&self) -> Result<Tx, ProjectionError> {
        Ok(match self {
            Db::Sqlite { read, .. } => Tx::Sqlite(read.begin().await?),
            Db::Postgres(pool) => Tx::Postgres(
                pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .await?,
            ),
        })
    }
}

impl Tx {
    /// The verb of a multi-row insert. On SQLite, `OR FAIL`: a statement that may abort
    /// halfway must first copy every page it changes into a statement journal, to undo just
    /// itself; with 16 KiB pages that journal spills to a temporary file, a cost on every view
    /// batch (docs/BENCHMARKS.md, "Figures behind the code"). `OR FAIL` keeps the rows
    /// written before a failing one; every caller drops the whole transaction on any error,
    /// so nothing of a failed statement is ever committed.
    pub(crate) fn multi_row_insert(&self) -> &'static str {
        match self {
            Tx::Sqlite(_) => "INSERT OR FAIL INTO",
            Tx::Postgres(_) => "INSERT INTO",
        }
    }

    pub(crate) async fn commit(self) -> Result<(), ProjectionError> {
        match self {
            Tx::Sqlite(t) => t.commit().await?,
            Tx::Postgres(t) => t.commit().await?,
        }
        Ok(())
    }

    pub(crate) async fn rollback(self) -> Result<(), ProjectionError> {
        match self {
            Tx::Sqlite(t) => t.rollback().await?,
            Tx::Postgres(t) => t.rollback().await?,
        }
        Ok(())
    }
}
