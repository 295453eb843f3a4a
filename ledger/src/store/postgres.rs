//! The shared store: PostgreSQL, for several `quota serve` nodes on one database.
//!
//! Gap-safety: a PostgreSQL sequence value is taken at insert but becomes visible at commit, so
//! a reader asking for `position > last` could skip an event that commits late (Marten#1629).
//! Here every append first takes one transaction-scoped advisory lock, then reads the head and
//! assigns `head + 1, head + 2, ...`. The lock is held until the transaction has committed, so
//! positions are assigned in commit order and no reader ever sees position N+1 before N.
//! Throughput comes from batching many decisions into each of these serialised transactions.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgPool, Row as _};
use tokio::sync::watch;

use super::backend::Backend;
use super::rows::{self, to_i64, Reader, StreamReads, EVENT_COLUMNS, SAVE_SNAPSHOT};
use super::{plan, AppendResult, FeedEvent, OpenMode, Position, StoreError, StreamAppend};

/// The advisory lock key that serialises appends ("quota" in ASCII).
const APPEND_LOCK_KEY: i64 = 0x71_75_6f_74_61;
/// `BEGIN; SELECT pg_advisory_xact_lock(APPEND_LOCK_KEY)`, spelled out for the simple protocol.
/// An append only looks rows up by key, so a sequential scan of `events` is never the right
/// plan for it; but a connection opened on a new database caches the plans made for its empty
/// tables, and without fresh statistics (autovacuum off) kept scanning as the tables grew.
/// Turning scans off keeps the cached plans on the indexes; planning every statement anew
/// would cost more than it saves (see docs/BENCHMARKS.md).
const BEGIN_AND_LOCK: &str =
    "BEGIN; SET LOCAL enable_seqscan = off; SELECT pg_advisory_xact_lock(487301543009)";
const NOTIFY_CHANNEL: &str = "quota_events";

pub struct PostgresStore {
    pool: PgPool,
    head: watch::Sender<Position>,
    /// The task that hears other nodes' appends; it ends with the store.
    _listener: ListenerTask,
}

/// Aborts the listening task when the store is dropped. (The task cannot tell by itself: it
/// holds a sender of the head, and "no receiver" is also the state before any follower has
/// subscribed, which is where a first version of it stopped for good.)
struct ListenerTask(tokio::task::JoinHandle<()>);

impl Drop for ListenerTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl PostgresStore {
    /// The connection options of a store at `url`.
    pub fn connect_options(url: &str) -> Result<PgConnectOptions, StoreError> {
        url.parse::<PgConnectOptions>()
            .map_err(|e: sqlx::Error| StoreError::UnsupportedUrl(e.to_string()))
    }

    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_with(url, OpenMode::CreateIfMissing).await
    }

    /// Opens the store at `url`; with [`OpenMode::ExistingOnly`], only if its schema already
    /// holds the events table (checked before any migration could create it).
    pub async fn open_with(url: &str, mode: OpenMode) -> Result<Self, StoreError> {
        let options = Self::connect_options(url)?;
        let pool = PgPoolOptions::new()
            .max_connections(8)
            // While the database is down, a request waits this long for a connection before
            // it is answered 503; appends are serialised, so a queued one may wait twice.
            .acquire_timeout(Duration::from_secs(2))
            .connect_with(options)
            .await?;
        if mode == OpenMode::ExistingOnly {
            let events: Option<String> = sqlx::query_scalar("SELECT to_regclass('events')::text")
                .fetch_one(&pool)
                .await?;
            if events.is_none() {
                return Err(StoreError::NotFound(
                    "no quota store in that database: its search path has no events table".into(),
                ));
            }
        }
        Self::with_pool(pool).await
    }

    /// A store on an existing pool (tests give each instance its own pool and schema).
    pub async fn with_pool(pool: PgPool) -> Result<Self, StoreError> {
        // Two nodes starting together must not both run the migrations.
        let mut conn = pool.acquire().await?;
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(APPEND_LOCK_KEY + 1)
            .execute(&mut *conn)
            .await?;
        let migrated = sqlx::migrate!("../migrations/postgres")
            .run(&mut *conn)
            .await
            .map_err(|e| StoreError::Migration(e.to_string()));
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(APPEND_LOCK_KEY + 1)
            .execute(&mut *conn)
            .await?;
        migrated?;
        drop(conn);
        let head = watch::Sender::new(Reader(&pool).head().await?);
        let listener = ListenerTask(Self::listen_for_other_nodes(&pool, &head));
        Ok(PostgresStore {
            pool,
            head,
            _listener: listener,
        })
    }

    /// Other nodes' appends arrive as NOTIFY, so local followers wake for them too. A lost
    /// listener only delays followers until their periodic re-check.
    fn listen_for_other_nodes(
        pool: &PgPool,
        head: &watch::Sender<Position>,
    ) -> tokio::task::JoinHandle<()> {
        let pool = pool.clone();
        let head = head.clone();
        tokio::spawn(async move {
            loop {
                let Ok(mut listener) = PgListener::connect_with(&pool).await else {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                };
                if listener.listen(NOTIFY_CHANNEL).await.is_err() {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                while let Ok(notification) = listener.recv().await {
                    if let Ok(position) = notification.payload().parse::<u64>() {
                        super::advance_position(&head, position);
                    }
                }
            }
        })
    }
}

#[async_trait]
impl Backend for PostgresStore {
    type Db = sqlx::Postgres;
    const NAME: &'static str = "postgres";
    const STREAM_READS: StreamReads = rows::BY_STREAM_NAME;

    fn database_of_events(&self) -> super::Database {
        super::Database::Postgres(self.pool.clone())
    }

    fn read_pool(&self) -> &PgPool {
        &self.pool
    }

    fn head_sender(&self) -> &watch::Sender<Position> {
        &self.head
    }

    async fn read_feed_page(
        &self,
        after: Position,
        max_count: usize,
    ) -> Result<Vec<FeedEvent>, StoreError> {
        Reader(&self.pool).feed(after, max_count).await
    }

    async fn store_identity(&self) -> Result<Option<String>, StoreError> {
        // The views live in this same database, so they cannot be paired with another one.
        Ok(None)
    }

    async fn append_valid_batch(
        &self,
        batch: Vec<StreamAppend>,
    ) -> Result<Vec<AppendResult>, StoreError> {
        self.write_batch(&batch).await
    }
}

impl PostgresStore {
    async fn write_batch(&self, batch: &[StreamAppend]) -> Result<Vec<AppendResult>, StoreError> {
        // The head this node last heard of (its own appends, other nodes' NOTIFYs): if the
        // database is still there, the rows are inserted in one round trip, under a check in
        // the same statement; if not, nothing is inserted and the read below follows.
        let guess = *self.head.borrow();
        if let Some(speculation) = plan::speculate(batch, guess) {
            let rows = &speculation.plan.rows;
            let guard = Guard {
                head: guess,
                assumed_versions: &speculation.assumed_versions,
            };
            let inserted = append_guarded(&self.pool, rows, guard).await?;
            if inserted == rows.len() {
                if let Some(last) = rows.last() {
                    super::advance_position(&self.head, last.position);
                }
                return Ok(speculation.plan.results);
            }
            if inserted != 0 {
                return Err(StoreError::Corrupt(format!(
                    "a guarded insert of {} rows inserted {inserted}",
                    rows.len()
                )));
            }
        }

        // BEGIN and the lock travel as one simple query: one round trip instead of two.
        let mut tx = self.pool.begin_with(BEGIN_AND_LOCK).await?;
        // One read for everything the planner needs: the head, each stream's version (one
        // index seek per stream; a GROUP BY would scan each stream's history) and which of the
        // batch's event ids are stored already. The ids are joined from UNNEST rather than
        // matched with `= ANY($2)`, which the planner may answer with a sequential scan.
        let ids = plan::event_ids(batch);
        let streams = plan::streams(batch);
        let found = sqlx::query(
            "SELECT 'head', NULL, NULL::bigint, COALESCE(MAX(position), 0), NULL::uuid FROM events \
             UNION ALL \
             SELECT 'version', s, (SELECT MAX(version) FROM events WHERE stream = s), NULL, NULL \
               FROM UNNEST($1::text[]) AS s \
             UNION ALL \
             SELECT 'stored', stream, version, position, event_id \
               FROM UNNEST($2::uuid[]) AS id JOIN events ON events.event_id = id",
        )
        .bind(&streams)
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
        let (plan, _) = super::plan_from_read(batch, found)?;
        let new_head = plan.rows.last().map(|r| r.position);
        // Rare (one per doubling of a project's history), so one statement each.
        for (stream, snapshot) in &plan.snapshots {
            sqlx::query(SAVE_SNAPSHOT)
                .bind(stream)
                .bind(to_i64(snapshot.version))
                .bind(snapshot.format as i16)
                .bind(&snapshot.data)
                .execute(&mut *tx)
                .await?;
        }
        if !plan.rows.is_empty() {
            let inserted = insert_rows(&mut tx, &plan.rows).await?;
            if inserted != plan.rows.len() {
                return Err(StoreError::Corrupt(format!(
                    "an insert of {} rows inserted {inserted}",
                    plan.rows.len()
                )));
            }
        }
        tx.commit().await?;
        if let Some(position) = new_head {
            super::advance_position(&self.head, position);
        }
        Ok(plan.results)
    }
}

/// What a speculative insert assumes (see [`plan::speculate`]).
struct Guard<'a> {
    head: Position,
    assumed_versions: &'a [(&'a str, Option<u64>)],
}

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// Rows as one array per column, in the order of [`EVENT_COLUMNS`]: one parameter each, whatever
/// the number of rows, unpacked with `UNNEST`. The bodies travel as text, cast to JSONB in the
/// statement, so no JSON value is built on the way.
struct ColumnArrays<'a> {
    positions: Vec<i64>,
    streams: Vec<&'a str>,
    versions: Vec<i64>,
    event_ids: Vec<uuid::Uuid>,
    types: Vec<&'a str>,
    schema_versions: Vec<i16>,
    data: Vec<&'a str>,
    actors: Vec<Option<&'a str>>,
    request_ids: Vec<Option<&'a str>>,
    correlation_ids: Vec<Option<&'a str>>,
    recorded: Vec<i64>,
    principals: Vec<Option<&'a str>>,
}

impl<'a> ColumnArrays<'a> {
    fn of(rows: &'a [plan::Row<'a>]) -> Self {
        let mut arrays = ColumnArrays {
            positions: Vec::with_capacity(rows.len()),
            streams: Vec::with_capacity(rows.len()),
            versions: Vec::with_capacity(rows.len()),
            event_ids: Vec::with_capacity(rows.len()),
            types: Vec::with_capacity(rows.len()),
            schema_versions: Vec::with_capacity(rows.len()),
            data: Vec::with_capacity(rows.len()),
            actors: Vec::with_capacity(rows.len()),
            request_ids: Vec::with_capacity(rows.len()),
            correlation_ids: Vec::with_capacity(rows.len()),
            recorded: Vec::with_capacity(rows.len()),
            principals: Vec::with_capacity(rows.len()),
        };
        for row in rows {
            arrays.positions.push(to_i64(row.position));
            arrays.streams.push(row.stream);
            arrays.versions.push(to_i64(row.version));
            arrays.event_ids.push(row.event.event_id);
            arrays.types.push(row.event.event_type.as_str());
            arrays.schema_versions.push(row.event.schema_version as i16);
            arrays.data.push(row.event.data.get());
            arrays.actors.push(row.event.metadata.actor.as_deref());
            arrays
                .request_ids
                .push(row.event.metadata.request_id.as_deref());
            arrays
                .correlation_ids
                .push(row.event.metadata.correlation_id.as_deref());
            arrays
                .recorded
                .push(row.event.recorded_at.timestamp_millis());
            arrays
                .principals
                .push(row.event.metadata.principal.as_deref());
        }
        arrays
    }

    /// Binds the twelve arrays, in the order of [`EVENT_COLUMNS`], as the query's next parameters.
    fn bind<'q>(&'q self, query: PgQuery<'q>) -> PgQuery<'q> {
        query
            .bind(&self.positions)
            .bind(&self.streams)
            .bind(&self.versions)
            .bind(&self.event_ids)
            .bind(&self.types)
            .bind(&self.schema_versions)
            .bind(&self.data)
            .bind(&self.actors)
            .bind(&self.request_ids)
            .bind(&self.correlation_ids)
            .bind(&self.recorded)
            .bind(&self.principals)
    }
}

/// The speculative append in one round trip: `quota_append_keyed` (migration 0012), called
/// outside a transaction, so its implicit transaction commits before the answer comes back
/// (sqlx reads on to ReadyForQuery before returning the row). Returns how many rows were
/// inserted: all, or 0 when the database is not as `guard` assumes, whether the function's
/// probes saw it or one of the table's unique keys refused a row (nothing is written either way).
async fn append_guarded(
    pool: &PgPool,
    rows: &[plan::Row<'_>],
    guard: Guard<'_>,
) -> Result<usize, StoreError> {
    let arrays = ColumnArrays::of(rows);
    let new_head = rows.last().map_or(0, |r| r.position);
    let probes = Probes::of(rows, &guard);
    let query = sqlx::query(
        "SELECT quota_append_keyed($1, $2, $3, $4, $5, $6, $7, $8::jsonb[], $9, $10, $11, $12, \
         $13, $14, $15, $16, $17, $18, $19, $20)",
    )
    .bind(APPEND_LOCK_KEY);
    let answer = arrays
        .bind(query)
        .bind(NOTIFY_CHANNEL)
        .bind(new_head.to_string())
        .bind(to_i64(guard.head))
        .bind(&probes.existing_streams)
        .bind(&probes.existing_versions)
        .bind(&probes.free_streams)
        .bind(&probes.free_versions)
        .fetch_one(pool)
        .await;
    let inserted: i64 = match answer {
        Ok(row) => row.try_get(0)?,
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(UNIQUE_VIOLATION) => 0,
        Err(e) => return Err(e.into()),
    };
    Ok(usize::try_from(inserted).unwrap_or(0))
}

/// SQLSTATE `unique_violation`.
const UNIQUE_VIOLATION: &str = "23505";

/// What `quota_append_keyed` reads before it inserts (see migration 0012): the (stream,
/// version) pairs that must be stored (each assumed version) and those that must not (the next
/// version of each assumed stream the batch writes no row to; for the others the unique key on
/// (stream, version) refuses a taken version as the row goes in).
struct Probes<'a> {
    existing_streams: Vec<&'a str>,
    existing_versions: Vec<i64>,
    free_streams: Vec<&'a str>,
    free_versions: Vec<i64>,
}

impl<'a> Probes<'a> {
    fn of(rows: &[plan::Row<'_>], guard: &Guard<'a>) -> Self {
        let written: std::collections::HashSet<&str> = rows.iter().map(|r| r.stream).collect();
        let mut probes = Probes {
            existing_streams: Vec::new(),
            existing_versions: Vec::new(),
            free_streams: Vec::new(),
            free_versions: Vec::new(),
        };
        for &(stream, assumed) in guard.assumed_versions {
            if let Some(version) = assumed {
                probes.existing_streams.push(stream);
                probes.existing_versions.push(to_i64(version));
            }
            if !written.contains(stream) {
                probes.free_streams.push(stream);
                probes.free_versions.push(to_i64(
                    assumed.map_or(plan::FIRST_VERSION, |version| version + 1),
                ));
            }
        }
        probes
    }
}

/// Inserts `rows` in the caller's transaction (which holds the append lock) and notifies other
/// nodes of the new head; returns how many were inserted.
async fn insert_rows(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    rows: &[plan::Row<'_>],
) -> Result<usize, StoreError> {
    let arrays = ColumnArrays::of(rows);
    let new_head = rows.last().map_or(0, |r| r.position);
    let query = format!(
        "WITH inserted AS (INSERT INTO events ({EVENT_COLUMNS}) SELECT * FROM UNNEST(\
         $1::bigint[], $2::text[], $3::bigint[], $4::uuid[], $5::text[], $6::smallint[], \
         $7::jsonb[], $8::text[], $9::text[], $10::text[], $11::bigint[], $12::text[]) RETURNING 1) \
         SELECT n, CASE WHEN n > 0 THEN pg_notify($13, $14) END \
         FROM (SELECT COUNT(*) AS n FROM inserted) AS done"
    );
    let inserted: i64 = arrays
        .bind(sqlx::query(&query))
        .bind(NOTIFY_CHANNEL)
        .bind(new_head.to_string())
        .fetch_one(&mut **tx)
        .await?
        .try_get(0)?;
    Ok(usize::try_from(inserted).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_literal_lock_key_is_the_constant() {
        assert!(super::BEGIN_AND_LOCK.ends_with(&format!("({})", super::APPEND_LOCK_KEY)));
    }
}
