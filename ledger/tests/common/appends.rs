//! Events and appends as the store's suites write them. Not every suite uses each of them.
#![allow(dead_code)]

use chrono::Utc;
use ledger::{AppendResult, EventData, EventStore, ExpectedVersion, Metadata, StreamAppend};
use serde_json::json;
use uuid::Uuid;

/// A new event whose body is `{"n": n}`, with every metadata field but the correlation id set.
pub fn event(n: u64) -> EventData {
    EventData {
        event_id: Uuid::now_v7(),
        event_type: "Test".into(),
        schema_version: 1,
        data: serde_json::value::to_raw_value(&json!({ "n": n })).unwrap(),
        metadata: Metadata {
            actor: Some("tester".into()),
            request_id: Some(format!("req-{n}")),
            correlation_id: None,
            principal: Some("tester-token".into()),
        },
        recorded_at: chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis())
            .unwrap(),
    }
}

pub fn append(stream: &str, expected: ExpectedVersion, events: Vec<EventData>) -> StreamAppend {
    StreamAppend::new(stream, expected, events)
}

/// Appends `a` alone and returns its result.
pub async fn one(store: &dyn EventStore, a: StreamAppend) -> AppendResult {
    let mut results = store.append(vec![a]).await.expect("append");
    assert_eq!(results.len(), 1);
    results.remove(0)
}
