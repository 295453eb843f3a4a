//! Two nodes on one PostgreSQL database: each hears the other's appends (NOTIFY), and the
//! speculative append (`quota_append_keyed`, migration 0012) writes no wrong row when the head
//! a node guesses is right but its guess of a stream is not.

use std::sync::Arc;
use std::time::Duration;

use ledger::testing;
use ledger::{AppendResult, EventStore, ExpectedVersion, Position, StreamAppend};

#[allow(unused_macros)]
mod common;

use common::appends::{append, event, one};

/// Whether `other` hears of `head` (by NOTIFY: nothing else moves its head) within `within`.
async fn hears(other: &dyn EventStore, head: Position, within: Duration) -> bool {
    let mut heard = other.watch_head();
    let wait = heard.wait_for(|&p| p >= head);
    let heard_in_time = matches!(tokio::time::timeout(within, wait).await, Ok(Ok(_)));
    heard_in_time
}

/// Appends `batch` on `writer` (none of it may conflict), then waits until `other` has heard.
async fn append_heard_by(
    writer: &dyn EventStore,
    other: &dyn EventStore,
    batch: Vec<StreamAppend>,
) {
    let results = writer.append(batch).await.expect("append");
    assert!(
        !results.iter().any(AppendResult::is_conflict),
        "{results:?}"
    );
    let head = writer.head().await.expect("head");
    assert!(
        hears(other, head, Duration::from_secs(10)).await,
        "the other store hears the NOTIFY"
    );
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
        let result = one(writer, append(stream, expected, vec![event(attempt)])).await;
        assert!(!result.is_conflict(), "{result:?}");
        let head = writer.head().await.expect("head");
        if hears(other, head, Duration::from_millis(200)).await {
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

/// The head a node guesses is right but its guess of a stream is not: another node wrote to the
/// stream and its NOTIFY moved the head. Then only the function's probes and the table's unique
/// keys stand between the guess and a wrong row. (The conformance suite's two-writer test
/// reaches this case only when the NOTIFY happens to arrive in time; here each step waits.)
#[tokio::test]
async fn a_right_head_with_a_wrong_stream_guess_writes_no_wrong_row() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let schema = testing::postgres_schema(&url).await;
    let a: Arc<dyn EventStore> = testing::postgres_store_in(&url, &schema).await;
    let b: Arc<dyn EventStore> = testing::postgres_store_in(&url, &schema).await;
    listening(&*a, &*b, "warm-a").await;
    listening(&*b, &*a, "warm-b").await;

    let s0 = append("s", ExpectedVersion::NoStream, vec![event(0)]);
    append_heard_by(&*a, &*b, vec![s0]).await;
    let s1 = append("s", ExpectedVersion::Exact(0), vec![event(0)]);
    append_heard_by(&*b, &*a, vec![s1]).await;

    // Below the truth: version 1 of s is taken (the unique key on (stream, version)).
    let stale = append("s", ExpectedVersion::Exact(0), vec![event(0)]);
    let fresh = append("t", ExpectedVersion::NoStream, vec![event(0)]);
    let results = a.append(vec![stale, fresh]).await.unwrap();
    assert!(
        matches!(
            results[0],
            AppendResult::Conflict {
                actual: Some(1),
                ..
            }
        ),
        "{results:?}"
    );
    assert!(!results[1].is_conflict(), "{results:?}");

    // A stream that already exists, expected not to (version 0 is taken).
    let u0 = append("u", ExpectedVersion::NoStream, vec![event(0)]);
    append_heard_by(&*b, &*a, vec![u0]).await;
    let again = append("u", ExpectedVersion::NoStream, vec![event(0)]);
    assert!(one(&*a, again).await.is_conflict());

    // Above the truth: s never reached version 5 (the probe that it is stored).
    let ahead = append("s", ExpectedVersion::Exact(5), vec![event(0)]);
    assert!(one(&*a, ahead).await.is_conflict());

    // A stream named with no event to write, behind the truth (the probe that its next
    // version is free), beside one that holds.
    let u1 = append("u", ExpectedVersion::Exact(0), vec![event(0)]);
    append_heard_by(&*b, &*a, vec![u1]).await;
    let check_only = append("u", ExpectedVersion::Exact(0), vec![]);
    let t1 = append("t", ExpectedVersion::Exact(0), vec![event(0)]);
    let results = a.append(vec![check_only, t1]).await.unwrap();
    assert!(results[0].is_conflict(), "{results:?}");
    assert!(!results[1].is_conflict(), "{results:?}");

    // An event b stored, appended again by a (the unique key on event_id): answered with
    // where it is, not stored twice.
    let stored = event(0);
    let v0 = append("v", ExpectedVersion::NoStream, vec![stored.clone()]);
    append_heard_by(&*b, &*a, vec![v0]).await;
    let retried = append("v", ExpectedVersion::NoStream, vec![stored]);
    let AppendResult::Appended { positions, .. } = one(&*a, retried).await else {
        panic!("a retried append of a stored event is answered with where it is")
    };
    let all = a.read_all(0, 100).await.unwrap();
    assert_eq!(positions, vec![all.len() as u64]);

    // Streams and versions: nothing out of place, no gap.
    let versions = |stream: &str| -> Vec<u64> {
        all.iter()
            .filter(|e| e.stream == stream)
            .map(|e| e.version)
            .collect()
    };
    assert_eq!(versions("s"), vec![0, 1]);
    assert_eq!(versions("t"), vec![0, 1]);
    assert_eq!(versions("u"), vec![0, 1]);
    assert_eq!(versions("v"), vec![0]);
    let positions: Vec<u64> = all.iter().map(|e| e.position).collect();
    assert_eq!(positions, (1..=all.len() as u64).collect::<Vec<_>>());
}
