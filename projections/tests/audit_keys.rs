//! The audit view's project keys (sqlite-views/0008, postgres/0013) on a views database built
//! before them: the migration gives every existing project of every generation a key and
//! fills it into its entries, and on PostgreSQL an entry a previous binary inserts without a
//! key is given one.

use sqlx::{Connection, Row};

/// Entries as a binary before the keys wrote them: two generations, two projects.
const OLD_ROWS: [(i64, i64, &str); 4] = [(1, 1, "b"), (1, 2, "a"), (1, 3, "b"), (2, 4, "c")];

const OLD_INSERT: &str = "INSERT INTO audit_entries (generation, position, project, version, \
     at_ms, event_type, usage_after) VALUES ($1, $2, $3, 1, 0, 'LimitsSet', '{}')";

/// Each entry's generation, position and key; and the projects' keys.
const ENTRY_KEYS: &str = "SELECT e.generation, e.position, e.project_key, k.project_key AS listed \
     FROM audit_entries e LEFT JOIN audit_projects k \
     ON k.generation = e.generation AND k.project = e.project ORDER BY e.position";

fn assert_keys(rows: &[(i64, i64, Option<i64>, Option<i64>)]) {
    // Keys follow project id order within a generation: a, b in generation 1; c in 2.
    let expected = [(1, 1, 2), (1, 2, 1), (1, 3, 2), (2, 4, 1)];
    assert_eq!(rows.len(), expected.len());
    for (row, (generation, position, key)) in rows.iter().zip(expected) {
        assert_eq!(
            *row,
            (generation, position, Some(key), Some(key)),
            "entry {position}"
        );
    }
}

#[tokio::test]
async fn sqlite_migration_gives_existing_entries_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.path().join("views.db"))
        .create_if_missing(true);
    let mut conn = sqlx::SqliteConnection::connect_with(&options)
        .await
        .unwrap();
    let old = ledger::testing::migrations_before(sqlx::migrate!("../migrations/sqlite-views"), 8);
    old.run(&mut conn).await.unwrap();
    for (generation, position, project) in OLD_ROWS {
        sqlx::query(OLD_INSERT)
            .bind(generation)
            .bind(position)
            .bind(project)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    sqlx::migrate!("../migrations/sqlite-views")
        .run(&mut conn)
        .await
        .unwrap();
    let rows: Vec<(i64, i64, Option<i64>, Option<i64>)> = sqlx::query_as(ENTRY_KEYS)
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_keys(&rows);
}

#[tokio::test]
async fn postgres_migration_and_a_previous_binarys_entries_get_keys() {
    let Some(url) = ledger::testing::postgres_url() else {
        return;
    };
    let schema = ledger::testing::postgres_schema(&url).await;
    let in_schema = ledger::testing::postgres_url_in(&url, &schema);
    let mut conn = sqlx::PgConnection::connect(&in_schema).await.unwrap();
    let old = ledger::testing::migrations_before(sqlx::migrate!("../migrations/postgres"), 13);
    old.run(&mut conn).await.unwrap();
    for (generation, position, project) in OLD_ROWS {
        sqlx::query(OLD_INSERT)
            .bind(generation)
            .bind(position)
            .bind(project)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    sqlx::migrate!("../migrations/postgres")
        .run(&mut conn)
        .await
        .unwrap();
    let rows: Vec<(i64, i64, Option<i64>, Option<i64>)> = sqlx::query_as(ENTRY_KEYS)
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_keys(&rows);

    // A previous binary's insert names no key: a known project gets its own, a new one the next.
    for (position, project) in [(5_i64, "a"), (6, "d")] {
        sqlx::query(OLD_INSERT)
            .bind(1_i64)
            .bind(position)
            .bind(project)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    let keys: Vec<i64> = sqlx::query(
        "SELECT project_key FROM audit_entries WHERE position IN (5, 6) ORDER BY position",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert_eq!(keys, [1, 3]);
    conn.close().await.unwrap();
}
