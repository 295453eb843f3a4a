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
