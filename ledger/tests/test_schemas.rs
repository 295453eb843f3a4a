//! The PostgreSQL schemas `ledger::testing` hands to tests are dropped when their guard is,
//! whether the test passed or panicked, even with a store still connected to them. Skipped
//! without `QUOTA_TEST_POSTGRES_URL`.

use ledger::testing;

async fn schema_exists(url: &str, name: &str) -> bool {
    let pool = sqlx::PgPool::connect(url).await.expect("connect");
    let found: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
            .bind(name)
            .fetch_one(&pool)
            .await
            .expect("look the schema up");
    pool.close().await;
    found
}

#[tokio::test]
async fn a_schema_is_dropped_with_its_guard_while_a_store_is_open_on_it() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let schema = testing::postgres_schema(&url).await;
    let name = schema.name().to_owned();
    let store = testing::postgres_store_in(&url, &schema).await;
    assert!(schema_exists(&url, &name).await);
    drop(schema);
    assert!(!schema_exists(&url, &name).await, "{name} is still there");
    drop(store);
}

#[tokio::test]
async fn a_schema_is_dropped_when_its_test_panics() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let (named, name) = tokio::sync::oneshot::channel();
    let server = url.clone();
    // A local task, so that its panic is caught (and its message captured) on this thread.
    let tasks = tokio::task::LocalSet::new();
    let task = tasks.spawn_local(async move {
        let (schema, _store) = {
            let schema = testing::postgres_schema(&server).await;
            let store = testing::postgres_store_in(&server, &schema).await;
            (schema, store)
        };
        named.send(schema.name().to_owned()).expect("send the name");
        panic!("a failing test");
    });
    let failed = tasks.run_until(task).await;
    assert!(failed.is_err_and(|error| error.is_panic()));
    let name = name.await.expect("the schema's name");
    assert!(!schema_exists(&url, &name).await, "{name} is still there");
}
