//! The embedded store's writer thread: what happens to a batch once it is handed over.

use std::time::Duration;

use chrono::Utc;
use ledger::testing;
use ledger::{AppendResult, EventData, ExpectedVersion, Metadata, StreamAppend};
use uuid::Uuid;

fn event(n: u64) -> EventData {
    EventData {
        event_id: Uuid::now_v7(),
        event_type: "Test".into(),
        schema_version: 1,
        data: serde_json::value::to_raw_value(&serde_json::json!({ "n": n })).unwrap(),
        metadata: Metadata::default(),
        recorded_at: chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis())
            .unwrap(),
    }
}

/// A caller that stops waiting (a dropped request, a timeout) does not stop its batch: it was
/// handed to the writer whole, so it is written whole, and the writer goes on with the next
/// batch on top of it. Nothing half-written is left behind and no later append is refused.
#[tokio::test]
async fn a_batch_whose_caller_stops_waiting_is_written_whole_and_the_writer_goes_on() {
    let (_dir, store) = testing::sqlite_store().await;
    let abandoned = vec![StreamAppend::new(
        "s",
        ExpectedVersion::NoStream,
        vec![event(0), event(1), event(2)],
    )];
    // The first poll hands the batch over; the zero timeout then drops the future, unless the
    // writer was quicker still. Either way the batch is the writer's now.
    let _ = tokio::time::timeout(Duration::ZERO, store.append(abandoned)).await;

    let next = vec![StreamAppend::new(
        "s",
        ExpectedVersion::Exact(2),
        vec![event(3)],
    )];
    let results = store.append(next).await.expect("append");
    assert!(
        matches!(&results[0], AppendResult::Appended { versions, .. } if versions == &vec![3]),
        "{results:?}"
    );
    let stored = store.read_stream("s", 0, 100).await.unwrap();
    let versions: Vec<u64> = stored.iter().map(|e| e.version).collect();
    assert_eq!(versions, vec![0, 1, 2, 3]);
    let positions: Vec<u64> = stored.iter().map(|e| e.position).collect();
    assert_eq!(positions, vec![1, 2, 3, 4]);
}

/// An append that writes nothing still reads the file's head, and the store's head watch
/// hears of it: here another store on the same file (another process) wrote meanwhile, and the
/// append, decided on an older version, conflicts.
#[tokio::test]
async fn an_append_that_writes_nothing_still_moves_the_head_watch_to_the_file_head() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    let a = ledger::store::SqliteStore::open(&url).await.unwrap();
    let b = ledger::store::SqliteStore::open(&url).await.unwrap();
    use ledger::EventStore as _;
    let first = vec![StreamAppend::new(
        "s",
        ExpectedVersion::NoStream,
        vec![event(0)],
    )];
    a.append(first).await.unwrap();
    let other = vec![StreamAppend::new(
        "t",
        ExpectedVersion::NoStream,
        vec![event(1), event(2)],
    )];
    b.append(other).await.unwrap();
    assert_eq!(*a.watch_head().borrow(), 1);

    let stale = vec![StreamAppend::new(
        "t",
        ExpectedVersion::NoStream,
        vec![event(3)],
    )];
    let results = a.append(stale).await.unwrap();
    assert!(results[0].is_conflict(), "{results:?}");
    assert_eq!(
        *a.watch_head().borrow(),
        3,
        "the head read in the append's transaction"
    );
}
