//! The embedded store's stream numbers (migration 0006): a file written before them, with
//! events of several streams, reads the same after the migration, and its streams go on from
//! the versions they had; a new stream gets a number of its own, and a stream is listed
//! exactly when it has events.

use chrono::{TimeZone, Utc};
use domain::Event;
use ledger::{testing, EventData, EventStore, ExpectedVersion, Metadata, StreamAppend};
use sqlx::Connection as _;
use uuid::Uuid;

const OLD_INSERT: &str = "INSERT INTO events (position, stream, version, event_id, event_type, \
     schema_version, data, actor, request_id, correlation_id, recorded_at_ms, principal) \
     VALUES ($1, $2, $3, $4, 'LimitsReset', 1, $5, 'alice', NULL, NULL, 0, 'admin')";

/// The streams and versions written before the migration, in position order: two streams
/// interleaved, and one whose name sorts between them.
const OLD_EVENTS: [(&str, i64); 6] = [
    ("project-b", 0),
    ("project-a", 0),
    ("project-b", 1),
    ("project-ab", 0),
    ("project-a", 1),
    ("project-b", 2),
];

fn limits_reset() -> EventData {
    let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    EventData::encode(&Event::LimitsReset, Metadata::default(), at)
}

async fn append(store: &dyn EventStore, stream: &str, expected: ExpectedVersion) -> bool {
    let results = store
        .append(vec![StreamAppend::new(
            stream,
            expected,
            vec![limits_reset()],
        )])
        .await
        .expect("append");
    !results[0].is_conflict()
}

/// `stream`'s versions and positions, as `read_stream` answers them.
async fn stream_of(store: &dyn EventStore, stream: &str) -> Vec<(u64, u64)> {
    let events = store
        .read_stream(stream, 0, 100)
        .await
        .expect("read_stream");
    assert!(events.iter().all(|e| e.stream == stream), "{events:?}");
    events.iter().map(|e| (e.version, e.position)).collect()
}

#[tokio::test]
async fn a_file_from_before_stream_numbers_reads_and_appends_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let mut conn = testing::sqlite_events_file_before(&path, 6).await;
    let data = domain::encode(&Event::LimitsReset).data.to_string();
    for (position, (stream, version)) in (1_i64..).zip(OLD_EVENTS) {
        sqlx::query(OLD_INSERT)
            .bind(position)
            .bind(stream)
            .bind(version)
            .bind(Uuid::now_v7())
            .bind(&data)
            .execute(&mut conn)
            .await
            .unwrap();
    }
    conn.close().await.unwrap();

    let url = format!("sqlite://{}", path.display());
    let store = ledger::store::SqliteStore::open(&url).await.unwrap();
    assert_eq!(stream_of(&store, "project-a").await, [(0, 2), (1, 5)]);
    assert_eq!(
        stream_of(&store, "project-b").await,
        [(0, 1), (1, 3), (2, 6)]
    );
    assert_eq!(stream_of(&store, "project-ab").await, [(0, 4)]);
    assert_eq!(
        store.stream_names("", 10).await.unwrap(),
        ["project-a", "project-ab", "project-b"]
    );
    assert_eq!(
        store.stream_names("project-a", 1).await.unwrap(),
        ["project-ab"]
    );
    let all = store.read_all(0, 100).await.unwrap();
    assert_eq!(all.len(), OLD_EVENTS.len());
    assert!(all
        .iter()
        .all(|e| e.event.metadata.principal.as_deref() == Some("admin")));

    // A stale expectation still conflicts; the right one appends.
    assert!(!append(&store, "project-a", ExpectedVersion::Exact(0)).await);
    assert!(!append(&store, "project-a", ExpectedVersion::NoStream).await);
    assert!(append(&store, "project-a", ExpectedVersion::Exact(1)).await);
    assert!(append(&store, "project-c", ExpectedVersion::NoStream).await);
    assert!(append(&store, "project-c", ExpectedVersion::Exact(0)).await);
    assert_eq!(
        stream_of(&store, "project-a").await,
        [(0, 2), (1, 5), (2, 7)]
    );
    assert_eq!(stream_of(&store, "project-c").await, [(0, 8), (1, 9)]);
    assert_eq!(stream_of(&store, "project-none").await, []);
    assert_eq!(
        store.stream_names("project-ab", 10).await.unwrap(),
        ["project-b", "project-c"]
    );
}

/// Appends from a second store on the same file (another process's writer) find the streams
/// and numbers the first one made, and the other way round.
#[tokio::test]
async fn two_writers_of_one_file_share_the_stream_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("events.db").display());
    let first = ledger::store::SqliteStore::open(&url).await.unwrap();
    let second = ledger::store::SqliteStore::open(&url).await.unwrap();
    assert!(append(&first, "project-a", ExpectedVersion::NoStream).await);
    assert!(!append(&second, "project-a", ExpectedVersion::NoStream).await);
    assert!(append(&second, "project-a", ExpectedVersion::Exact(0)).await);
    assert!(append(&second, "project-b", ExpectedVersion::NoStream).await);
    assert!(!append(&first, "project-b", ExpectedVersion::NoStream).await);
    assert!(append(&first, "project-b", ExpectedVersion::Exact(0)).await);
    assert!(append(&first, "project-a", ExpectedVersion::Exact(1)).await);
    for store in [&first, &second] {
        assert_eq!(
            stream_of(store, "project-a").await,
            [(0, 1), (1, 2), (2, 5)]
        );
        assert_eq!(stream_of(store, "project-b").await, [(0, 3), (1, 4)]);
        assert_eq!(
            store.stream_names("", 10).await.unwrap(),
            ["project-a", "project-b"]
        );
    }
}
