//! Linked appends (a chain written whole or not at all; `StreamAppend::linked`), as a
//! conformance suite for every `EventStore` backend: each test is written once and run on
//! SQLite and on PostgreSQL, including concurrent writers of chains over shared streams on two
//! pools of one database.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::Utc;
use ledger::{
    AppendResult, EventData, EventStore, ExpectedVersion, Metadata, StoreError, StreamAppend,
};
use serde_json::json;
use uuid::Uuid;

#[macro_use]
mod common;

fn event(tag: &str) -> EventData {
    EventData {
        event_id: Uuid::now_v7(),
        event_type: "Test".into(),
        schema_version: 1,
        data: serde_json::value::to_raw_value(&json!({ "tag": tag })).unwrap(),
        metadata: Metadata::default(),
        recorded_at: chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis())
            .unwrap(),
    }
}

fn append(stream: &str, expected: ExpectedVersion, tags: &[&str]) -> StreamAppend {
    StreamAppend::new(stream, expected, tags.iter().map(|t| event(t)).collect())
}

/// Every stored event's tag, per stream, in version order.
async fn tags(store: &dyn EventStore) -> HashMap<String, Vec<String>> {
    let mut by_stream: HashMap<String, Vec<String>> = HashMap::new();
    for e in store.read_all(0, 10_000).await.unwrap() {
        let body: serde_json::Value = serde_json::from_str(e.event.data.get()).unwrap();
        by_stream
            .entry(e.stream)
            .or_default()
            .push(body["tag"].as_str().unwrap().to_owned());
    }
    by_stream
}

/// A chain whose last append conflicts stores none of its events; the appends around it in
/// the batch are stored, at positions with no gap where the chain would have been.
async fn a_chain_with_a_conflict_stores_nothing(store: Arc<dyn EventStore>) {
    let setup = [append("parent", ExpectedVersion::NoStream, &["p0"])];
    assert!(!store.append(setup.to_vec()).await.unwrap()[0].is_conflict());
    let batch = [
        append("child", ExpectedVersion::NoStream, &["c0", "c1"]).linked(),
        // The parent is at version 0: expecting none is stale.
        append("parent", ExpectedVersion::NoStream, &["p1"]),
        append("other", ExpectedVersion::NoStream, &["o0"]),
    ];
    let results = store.append(batch.to_vec()).await.unwrap();
    assert_eq!(results[0], AppendResult::LinkedFailed);
    assert!(matches!(
        results[1],
        AppendResult::Conflict {
            actual: Some(0),
            ..
        }
    ));
    let AppendResult::Appended { positions, .. } = &results[2] else {
        panic!("{results:?}")
    };
    assert_eq!(
        positions,
        &vec![2],
        "no gap where the chain would have been"
    );
    let stored = tags(&*store).await;
    assert_eq!(stored.get("child"), None);
    assert_eq!(stored["parent"], ["p0"]);
    assert_eq!(stored["other"], ["o0"]);
    assert_eq!(store.head().await.unwrap(), 2);
}

/// A chain that fits is stored whole, in order, with consecutive positions; an append of the
/// same batch after a failed chain, to one of its streams, fails too (it was decided on it).
async fn a_chain_that_fits_is_stored_whole(store: Arc<dyn EventStore>) {
    let batch = [
        append("parent", ExpectedVersion::NoStream, &["p0"]).linked(),
        append("child", ExpectedVersion::NoStream, &["c0"]).linked(),
        append("grandchild", ExpectedVersion::NoStream, &["g0"]),
        append("child", ExpectedVersion::Exact(5), &["c1"]).linked(),
        append("parent", ExpectedVersion::Exact(0), &["p1"]),
        append("parent", ExpectedVersion::Exact(1), &["p2"]),
    ];
    let results = store.append(batch.to_vec()).await.unwrap();
    let positions: Vec<Vec<u64>> = results[..3]
        .iter()
        .map(|r| match r {
            AppendResult::Appended { positions, .. } => positions.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(positions, [[1], [2], [3]]);
    assert!(matches!(results[3], AppendResult::Conflict { .. }));
    assert_eq!(results[4], AppendResult::LinkedFailed);
    assert!(
        results[5].is_conflict(),
        "decided on the failed chain: {results:?}"
    );
    let stored = tags(&*store).await;
    assert_eq!(stored["parent"], ["p0"]);
    assert_eq!(stored["child"], ["c0"]);
    assert_eq!(stored["grandchild"], ["g0"]);
}

/// A batch that ends inside a chain is refused whole: nothing of it is stored.
async fn an_open_chain_is_refused(store: Arc<dyn EventStore>) {
    let batch = [
        append("a", ExpectedVersion::Any, &["a0"]),
        append("b", ExpectedVersion::Any, &["b0"]).linked(),
    ];
    assert!(matches!(
        store.append(batch.to_vec()).await,
        Err(StoreError::InvalidAppend(_))
    ));
    assert_eq!(store.head().await.unwrap(), 0);
}

/// Re-appending a stored chain (its event ids) is a no-op success for each of its appends.
async fn a_stored_chain_appended_again_is_a_no_op(store: Arc<dyn EventStore>) {
    let batch = [
        append("a", ExpectedVersion::NoStream, &["a0"]).linked(),
        append("b", ExpectedVersion::NoStream, &["b0"]),
    ];
    let first = store.append(batch.to_vec()).await.unwrap();
    let again = store.append(batch.to_vec()).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(store.head().await.unwrap(), 2);
}

/// Writers race chains over a shared parent and their own children, each chain expecting the
/// versions it read: every chain is stored whole or not at all, and the parent's events are
/// exactly the children's chains that were stored.
async fn racing_chains_are_all_or_nothing(stores: Vec<Arc<dyn EventStore>>) {
    let writers: Vec<_> = (0..6)
        .map(|w| {
            let store = stores[w % stores.len()].clone();
            tokio::spawn(async move {
                let child = format!("child{w}");
                let mut stored = 0;
                for i in 0..15 {
                    let version = |events: Vec<ledger::RecordedEvent>| {
                        ExpectedVersion::from_version(events.last().map(|e| e.version))
                    };
                    let parent_at = version(store.read_stream("parent", 0, 10_000).await.unwrap());
                    let child_at = version(store.read_stream(&child, 0, 10_000).await.unwrap());
                    let tag = format!("{w}-{i}");
                    let chain = [
                        append(&child, child_at, &[&tag]).linked(),
                        append("parent", parent_at, &[&tag]),
                    ];
                    let results = store.append(chain.to_vec()).await.unwrap();
                    let written = results.iter().filter(|r| !r.is_conflict()).count();
                    assert!(written == 0 || written == 2, "{results:?}");
                    stored += written / 2;
                }
                stored
            })
        })
        .collect();
    let mut total = 0;
    for w in writers {
        total += w.await.unwrap();
    }
    let stored = tags(&*stores[0]).await;
    let mut parent = stored["parent"].clone();
    let mut children: Vec<String> = stored
        .iter()
        .filter(|(stream, _)| stream.starts_with("child"))
        .flat_map(|(_, tags)| tags.clone())
        .collect();
    parent.sort();
    children.sort();
    assert_eq!(parent, children, "each chain is stored whole or not at all");
    assert_eq!(parent.len(), total);
    assert!(total > 0);
}

conformance!(
    a_chain_with_a_conflict_stores_nothing,
    a_chain_that_fits_is_stored_whole,
    an_open_chain_is_refused,
    a_stored_chain_appended_again_is_a_no_op,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_racing_chains_on_two_stores() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    let a: Arc<dyn EventStore> = Arc::new(ledger::store::SqliteStore::open(&url).await.unwrap());
    let b: Arc<dyn EventStore> = Arc::new(ledger::store::SqliteStore::open(&url).await.unwrap());
    racing_chains_are_all_or_nothing(vec![a, b]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_racing_chains_on_two_pools() {
    let Some(url) = ledger::testing::postgres_url() else {
        return;
    };
    let schema = ledger::testing::postgres_schema(&url).await;
    let a = ledger::testing::postgres_store_in(&url, &schema).await;
    let b = ledger::testing::postgres_store_in(&url, &schema).await;
    racing_chains_are_all_or_nothing(vec![a, b]).await;
}
