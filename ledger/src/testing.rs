//! Fresh stores for tests, here and in the crates above: a SQLite file in a temporary folder,
//! or a PostgreSQL schema of its own on the server named by `QUOTA_TEST_POSTGRES_URL` (tests
//! that need it are skipped when it is not set; `.ci/run` sets it).

use std::sync::Arc;

use sqlx::postgres::PgPoolOptions;

use crate::store::{EventStore, PostgresStore, SqliteStore};

pub const POSTGRES_URL_VAR: &str = "QUOTA_TEST_POSTGRES_URL";

/// A store on a new SQLite file; the folder lives as long as the returned guard.
pub async fn sqlite_store() -> (tempfile::TempDir, Arc<dyn EventStore>) {
    let dir = tempfile::tempdir().expect("temporary folder");
    let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let store = SqliteStore::open(&url).await.expect("open SQLite store");
    (dir, Arc::new(store))
}

/// The server's URL, or `None` (and a note on stderr) when PostgreSQL tests are not configured.
pub fn postgres_url() -> Option<String> {
    match std::env::var(POSTGRES_URL_VAR) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("skipped: set {POSTGRES_URL_VAR} to run the PostgreSQL tests");
            None
        }
    }
}

/// A new, empty schema on the test server; returns its name. Stores opened on it with
/// [`postgres_store_in`] share its tables, like nodes sharing one database.
pub async fn postgres_schema(url: &str) -> String {
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("connect to the test PostgreSQL server");
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
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

/// A store on a new schema, or `None` when PostgreSQL tests are not configured.
pub async fn postgres_store() -> Option<Arc<dyn EventStore>> {
    let url = postgres_url()?;
    let schema = postgres_schema(&url).await;
    Some(postgres_store_in(&url, &schema).await)
}
