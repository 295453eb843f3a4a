//! Two nodes on one PostgreSQL database: each hears the other's appends (NOTIFY).

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use ledger::testing;
use ledger::{EventData, EventStore, ExpectedVersion, Metadata, StreamAppend};
use uuid::Uuid;

fn event() -> EventData {
    EventData {
        event_id: Uuid::now_v7(),
        event_type: "Test".into(),
        schema_version: 1,
        data: serde_json::value::RawValue::from_string("{}".into()).unwrap(),
        metadata: Metadata::default(),
        recorded_at: chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis())
            .unwrap(),
    }
}

fn append(stream: &str, expected: ExpectedVersion, events: Vec<EventData>) -> StreamAppend {
    StreamAppend::new(stream, expected, events)
}

/// Appends to a stream of its own on `writer` until `other` hears of it: a store's listener
/// starts LISTENing a little after the store opens, and a NOTIFY before that is not heard.
async fn listening(writer: &dyn EventStore, other: &dyn EventStore, stream: &str) {
    for attempt in 0..50 {
        let expected = if attempt == 0 {
            ExpectedVersion::NoStream
        } else {
            ExpectedVersion::Exact(attempt - 1)
        };
        writer
            .append(vec![append(stream, expected, vec![event()])])
            .await
            .expect("append");
        let head = writer.head().await.expect("head");
        let mut heard = other.watch_head();
        let wait = heard.wait_for(|&p| p >= head);
        if tokio::time::timeout(Duration::from_millis(200), wait)
            .await
            .is_ok()
        {
            return;
        }
    }
    panic!("the other store never heard a NOTIFY");
}

/// A node whose head nobody watched yet still hears the other node: its followers subscribe
/// whenever they start, and until then the head must keep moving for them.
#[tokio::test]
async fn a_node_hears_the_other_before_anything_watches_its_head() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let schema = testing::postgres_schema(&url).await;
    let a: Arc<dyn EventStore> = testing::postgres_store_in(&url, &schema).await;
    let b: Arc<dyn EventStore> = testing::postgres_store_in(&url, &schema).await;
    // Long enough for b's listening task to have run, with no receiver of b's head.
    tokio::time::sleep(Duration::from_millis(300)).await;
    listening(&*a, &*b, "s").await;
}
