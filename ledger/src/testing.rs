//! Fresh stores for tests, here and in the crates above: a SQLite file in a temporary folder,
//! or a PostgreSQL schema of its own on the server named by `QUOTA_TEST_POSTGRES_URL`, dropped
//! again when the test ends. Tests that need PostgreSQL are skipped, with a line in the normal
//! `cargo test` output, when the variable is not set, unless `QUOTA_TEST_REQUIRE_POSTGRES=1`
//! (`.ci/run` sets both) makes a missing server a failure.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, SqliteConnection};

use crate::store::{EventStore, PostgresStore, SqliteStore};

pub const POSTGRES_URL_VAR: &str = "QUOTA_TEST_POSTGRES_URL";
/// Set to `1` where PostgreSQL must be tested (CI): then an unset URL fails the test.
pub const REQUIRE_POSTGRES_VAR: &str = "QUOTA_TEST_REQUIRE_POSTGRES";

/// How long dropping a test's schema waits for locks that connections still hold (a server
/// process being killed, a pool mid-transaction) before giving up and leaving the schema.
const DROP_LOCK_TIMEOUT: &str = "10s";

/// A store on a new SQLite file; the folder lives as long as the returned guard.
pub async fn sqlite_store() -> (tempfile::TempDir, Arc<dyn EventStore>) {
    let dir = tempfile::tempdir().expect("temporary folder");
    let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let store = SqliteStore::open(&url).await.expect("open SQLite store");
    (dir, Arc::new(store))
}

/// The server's URL, or `None` when PostgreSQL tests are not configured: the calling test is
/// skipped, and says so on the real stderr (not the captured one), so that the skip shows in
/// `cargo test`'s normal output rather than passing as a silent `ok`. Panics instead when
/// `QUOTA_TEST_REQUIRE_POSTGRES=1`.
pub fn postgres_url() -> Option<String> {
    if let Ok(url) = std::env::var(POSTGRES_URL_VAR) {
        if !url.is_empty() {
            return Some(url);
        }
    }
    if std::env::var(REQUIRE_POSTGRES_VAR).is_ok_and(|value| value == "1") {
        panic!("{REQUIRE_POSTGRES_VAR}=1 but {POSTGRES_URL_VAR} is not set");
    }
    report_skip(&format!("set {POSTGRES_URL_VAR} to run it"));
    None
}

/// One line on the process's stderr naming the skipped test. libtest captures only the
/// `print!` family, so a direct write reaches the terminal even for a passing test.
pub fn report_skip(reason: &str) {
    let thread = std::thread::current();
    // libtest runs each test on a thread named after it.
    let test = thread.name().unwrap_or("a PostgreSQL test");
    let line = format!("SKIPPED (PostgreSQL) {test}: {reason}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// A test's own schema on the PostgreSQL server, dropped with everything in it when the guard
/// is dropped, whether the test passed or panicked. Derefs to the schema's name.
#[derive(Debug)]
pub struct PostgresSchema {
    server_url: String,
    name: String,
}

impl PostgresSchema {
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl std::ops::Deref for PostgresSchema {
    type Target = str;

    fn deref(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Display for PostgresSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl Drop for PostgresSchema {
    fn drop(&mut self) {
        // Drop is synchronous and often runs inside the test's tokio runtime, where blocking
        // on that runtime is not allowed: the statement runs on a thread with a runtime of its
        // own, and this waits for it so the schema is gone before the test is reported.
        let server_url = self.server_url.clone();
        let name = self.name.clone();
        let dropped = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|error| error.to_string())?
                .block_on(drop_schema(&server_url, &name))
                .map_err(|error| error.to_string())
        })
        .join();
        let failure = match dropped {
            Ok(Ok(())) => return,
            Ok(Err(error)) => error,
            Err(_) => "the dropping thread panicked".to_owned(),
        };
        let line = format!("could not drop test schema {}: {failure}\n", self.name);
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }
}

async fn drop_schema(server_url: &str, name: &str) -> Result<(), sqlx::Error> {
    let mut conn = sqlx::PgConnection::connect(server_url).await?;
    sqlx::query(&format!("SET lock_timeout = '{DROP_LOCK_TIMEOUT}'"))
        .execute(&mut conn)
        .await?;
    // A server process that was just killed may still hold locks until PostgreSQL notices
    // its connection closed; a second try after a pause covers that.
    let statement = format!("DROP SCHEMA IF EXISTS {name} CASCADE");
    if sqlx::query(&statement).execute(&mut conn).await.is_err() {
        tokio::time::sleep(Duration::from_secs(1)).await;
        sqlx::query(&statement).execute(&mut conn).await?;
    }
    conn.close().await
}

/// A new, empty schema on the test server, dropped when the returned guard is. Stores opened
/// on it with [`postgres_store_in`] share its tables, like nodes sharing one database; keep the
/// guard for the whole test, and stop servers using the schema before it drops.
pub async fn postgres_schema(url: &str) -> PostgresSchema {
    let schema = PostgresSchema {
        server_url: url.to_owned(),
        name: format!("t_{}", uuid::Uuid::new_v4().simple()),
    };
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("connect to the test PostgreSQL server");
    sqlx::query(&format!("CREATE SCHEMA {}", schema.name))
        .execute(&pool)
        .await
        .expect("create test schema");
    pool.close().await;
    schema
}

/// The URL of a database in `schema`, for code that opens stores by URL (the `quota` binary).
pub fn postgres_url_in(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

/// A store with its own pool on `schema`.
pub async fn postgres_store_in(url: &str, schema: &str) -> Arc<dyn EventStore> {
    let options = PostgresStore::connect_options(url).expect("PostgreSQL URL");
    let pool = PgPoolOptions::new()
        .max_connections(8)
        .connect_with(options.options([("search_path", schema)]))
        .await
        .expect("connect to the test PostgreSQL server");
    Arc::new(
        PostgresStore::with_pool(pool)
            .await
            .expect("open PostgreSQL store"),
    )
}

/// A store on a new schema (dropped with the returned guard), or `None` when PostgreSQL tests
/// are not configured.
pub async fn postgres_store() -> Option<(PostgresSchema, Arc<dyn EventStore>)> {
    let url = postgres_url()?;
    let schema = postgres_schema(&url).await;
    let store = postgres_store_in(&url, &schema).await;
    Some((schema, store))
}

/// `migrator` without its migrations from `version` on: it makes a database as a binary before
/// that migration left it, for tests that migrate such a database the rest of the way.
pub fn migrations_before(mut migrator: Migrator, version: i64) -> Migrator {
    migrator.migrations = migrator
        .migrations
        .iter()
        .filter(|m| m.version < version)
        .cloned()
        .collect();
    migrator
}

/// A new SQLite events file at `path` as a binary before migration `version` left it, and a
/// connection to it, for the test to write what such a binary wrote.
pub async fn sqlite_events_file_before(path: &Path, version: i64) -> SqliteConnection {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true);
    let mut conn = SqliteConnection::connect_with(&options)
        .await
        .expect("create the old file");
    migrations_before(sqlx::migrate!("../migrations/sqlite"), version)
        .run(&mut conn)
        .await
        .expect("migrate the old file");
    conn
}

/// The SQL that stores, behind the ledger's back, an event at `position` (an SQL expression)
/// that no build decodes: a `ReservationTeleported` of the stream `project-strange`. On
/// `backend` (`EventStore::backend`: "sqlite" numbers each stream in `streams` and keys its
/// events by that number).
pub fn undecodable_event_sql(backend: &str, position: &str) -> String {
    let (new_stream, key_column, key, event_id, data) = if backend == "sqlite" {
        (
            "INSERT INTO streams (stream) VALUES ('project-strange'); ",
            "stream_key, ",
            "(SELECT stream_key FROM streams WHERE stream = 'project-strange'), ",
            "randomblob(16)",
            "'{}'",
        )
    } else {
        ("", "", "", "gen_random_uuid()", "'{}'::jsonb")
    };
    format!(
        "{new_stream}INSERT INTO events (position, stream, {key_column}version, event_id, \
         event_type, schema_version, data, recorded_at_ms) VALUES ({position}, 'project-strange', \
         {key}0, {event_id}, 'ReservationTeleported', 1, {data}, 1767225600000)"
    )
}
