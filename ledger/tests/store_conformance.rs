//! One conformance suite for every `EventStore` backend: each test is written once, over
//! `Arc<dyn EventStore>`, and instantiated below for SQLite and for PostgreSQL.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use domain::EncodedSnapshot;
use ledger::testing;
use ledger::{AppendResult, EventData, EventStore, ExpectedVersion, RecordedEvent, StreamAppend};
use serde_json::{json, Value};
use uuid::Uuid;

#[macro_use]
mod common;

use common::appends::{append, event, one};

/// A stored body as JSON: PostgreSQL gives back its own spelling of the text appended.
fn body(event: &RecordedEvent) -> Value {
    serde_json::from_str(event.event.data.get()).unwrap()
}

async fn expected_versions_are_enforced(store: Arc<dyn EventStore>) {
    let r = one(
        &*store,
        append("s", ExpectedVersion::NoStream, vec![event(0), event(1)]),
    )
    .await;
    let AppendResult::Appended {
        versions,
        positions,
        stream_version,
    } = r
    else {
        panic!("{r:?}")
    };
    assert_eq!(versions, vec![0, 1]);
    assert_eq!(stream_version, Some(1));
    assert!(positions[0] < positions[1]);

    // The stream exists now: "no stream" conflicts, as does a stale exact version.
    for expected in [
        ExpectedVersion::NoStream,
        ExpectedVersion::Exact(0),
        ExpectedVersion::Exact(2),
    ] {
        assert_eq!(
            one(&*store, append("s", expected, vec![event(9)])).await,
            AppendResult::Conflict {
                expected,
                actual: Some(1)
            }
        );
    }
    assert!(matches!(
        one(
            &*store,
            append("other", ExpectedVersion::StreamExists, vec![event(9)])
        )
        .await,
        AppendResult::Conflict { actual: None, .. }
    ));
    assert!(!one(
        &*store,
        append("s", ExpectedVersion::Exact(1), vec![event(2)])
    )
    .await
    .is_conflict());
    assert!(
        !one(&*store, append("s", ExpectedVersion::Any, vec![event(3)]))
            .await
            .is_conflict()
    );
    assert!(!one(
        &*store,
        append("s", ExpectedVersion::StreamExists, vec![event(4)])
    )
    .await
    .is_conflict());

    let stored = store.read_stream("s", 0, 100).await.unwrap();
    assert_eq!(
        stored.iter().map(|e| e.version).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(body(&stored[0]), json!({"n": 0}));
    assert_eq!(stored[0].event.metadata.actor.as_deref(), Some("tester"));
    assert_eq!(
        stored[0].event.metadata.principal.as_deref(),
        Some("tester-token")
    );
    assert_eq!(
        stored[0].event.metadata.request_id.as_deref(),
        Some("req-0")
    );
    // Conflicting appends wrote nothing.
    assert!(stored.iter().all(|e| body(e) != json!({"n": 9})));
}

async fn re_appending_stored_event_ids_is_a_no_op(store: Arc<dyn EventStore>) {
    let events = vec![event(0), event(1)];
    let first = one(
        &*store,
        append("s", ExpectedVersion::NoStream, events.clone()),
    )
    .await;
    // The same events again, even under a now-wrong expectation: success, nothing written.
    let again = one(
        &*store,
        append("s", ExpectedVersion::NoStream, events.clone()),
    )
    .await;
    let (
        AppendResult::Appended { positions: p1, .. },
        AppendResult::Appended { positions: p2, .. },
    ) = (&first, &again)
    else {
        panic!("{first:?} {again:?}")
    };
    assert_eq!(p1, p2);
    assert_eq!(store.read_stream("s", 0, 100).await.unwrap().len(), 2);
    assert_eq!(store.head().await.unwrap(), p1[1]);
    // A duplicate id inside one batch is a caller error, and writes nothing.
    let e = event(5);
    assert!(store
        .append(vec![append("t", ExpectedVersion::Any, vec![e.clone(), e])])
        .await
        .is_err());
    assert!(store.read_stream("t", 0, 10).await.unwrap().is_empty());
}

async fn one_conflicting_stream_does_not_fail_the_batch(store: Arc<dyn EventStore>) {
    one(
        &*store,
        append("b", ExpectedVersion::NoStream, vec![event(0)]),
    )
    .await;
    let results = store
        .append(vec![
            append("a", ExpectedVersion::NoStream, vec![event(1)]),
            append("b", ExpectedVersion::NoStream, vec![event(2)]),
            append("c", ExpectedVersion::NoStream, vec![event(3), event(4)]),
            // Chained on "a" within the same batch.
            append("a", ExpectedVersion::Exact(0), vec![event(5)]),
        ])
        .await
        .unwrap();
    assert!(!results[0].is_conflict());
    assert_eq!(
        results[1],
        AppendResult::Conflict {
            expected: ExpectedVersion::NoStream,
            actual: Some(0)
        }
    );
    assert!(!results[2].is_conflict());
    assert!(matches!(&results[3], AppendResult::Appended { versions, .. } if versions == &vec![1]));
    assert_eq!(store.read_stream("a", 0, 10).await.unwrap().len(), 2);
    assert_eq!(store.read_stream("b", 0, 10).await.unwrap().len(), 1);
    assert_eq!(store.read_stream("c", 0, 10).await.unwrap().len(), 2);
}

async fn a_broken_chain_stays_broken(store: Arc<dyn EventStore>) {
    one(
        &*store,
        append("s", ExpectedVersion::NoStream, vec![event(0)]),
    )
    .await;
    // The first append expects a version the stream does not have; the second was decided on
    // top of the first and must not land even though its own expectation happens to match.
    let results = store
        .append(vec![
            append("s", ExpectedVersion::NoStream, vec![event(1)]),
            append("s", ExpectedVersion::Exact(0), vec![event(2)]),
        ])
        .await
        .unwrap();
    assert!(results.iter().all(AppendResult::is_conflict), "{results:?}");
    assert_eq!(store.read_stream("s", 0, 10).await.unwrap().len(), 1);
}

async fn empty_appends_check_the_version_only(store: Arc<dyn EventStore>) {
    assert!(
        !one(&*store, append("s", ExpectedVersion::NoStream, vec![]))
            .await
            .is_conflict()
    );
    one(
        &*store,
        append("s", ExpectedVersion::NoStream, vec![event(0)]),
    )
    .await;
    assert_eq!(
        one(&*store, append("s", ExpectedVersion::NoStream, vec![])).await,
        AppendResult::Conflict {
            expected: ExpectedVersion::NoStream,
            actual: Some(0)
        }
    );
    assert_eq!(
        one(&*store, append("s", ExpectedVersion::Exact(0), vec![])).await,
        AppendResult::Appended {
            versions: vec![],
            positions: vec![],
            stream_version: Some(0)
        }
    );
    assert_eq!(store.head().await.unwrap(), 1);
}

async fn the_feed_reads_from_any_position(store: Arc<dyn EventStore>) {
    assert_eq!(store.head().await.unwrap(), 0);
    assert!(store.read_all(0, 10).await.unwrap().is_empty());
    for i in 0..25u64 {
        let stream = format!("s{}", i % 3);
        one(
            &*store,
            append(&stream, ExpectedVersion::Any, vec![event(i)]),
        )
        .await;
    }
    let all = store.read_all(0, 1000).await.unwrap();
    assert_eq!(all.len(), 25);
    assert!(all.windows(2).all(|w| w[0].position < w[1].position));
    assert_eq!(store.head().await.unwrap(), all[24].position);
    // Paging by the last position seen covers everything exactly once.
    let mut seen = vec![];
    let mut after = 0;
    loop {
        let page = store.read_all(after, 7).await.unwrap();
        if page.is_empty() {
            break;
        }
        after = page.last().unwrap().position;
        seen.extend(page.into_iter().map(|e| e.position));
    }
    assert_eq!(seen, all.iter().map(|e| e.position).collect::<Vec<_>>());
    let tail = store.read_all(all[20].position, 100).await.unwrap();
    assert_eq!(tail.len(), 4);
    let from_version = store.read_stream("s1", 3, 100).await.unwrap();
    assert_eq!(from_version.first().map(|e| e.version), Some(3));
    // Watchers see the head move.
    assert_eq!(*store.watch_head().borrow(), all[24].position);
}

/// The feed (what the views read) gives every stored field of every event as `read_all` does,
/// pages from any position, and reads an empty metadata field as absent.
async fn the_feed_gives_what_read_all_gives(store: Arc<dyn EventStore>) {
    assert!(store.read_feed(0, 10).await.unwrap().is_empty());
    for i in 0..12u64 {
        let mut e = event(i);
        if i % 4 == 0 {
            e.metadata.actor = Some(String::new());
            e.metadata.correlation_id = Some(format!("corr-{i}"));
        }
        one(
            &*store,
            append(&format!("f{}", i % 5), ExpectedVersion::Any, vec![e]),
        )
        .await;
    }
    let all = store.read_all(0, 100).await.unwrap();
    let mut feed = vec![];
    let mut after = 0;
    loop {
        let page = store.read_feed(after, 5).await.unwrap();
        assert!(page.len() <= 5);
        let Some(last) = page.last() else { break };
        after = last.position;
        feed.extend(page);
    }
    assert_eq!(feed.len(), all.len());
    for (fed, stored) in feed.iter().zip(&all) {
        assert_eq!(fed.position, stored.position);
        assert_eq!(fed.stream, stored.stream);
        assert_eq!(fed.version, stored.version);
        assert_eq!(fed.event_type, stored.event.event_type);
        assert_eq!(fed.schema_version, stored.event.schema_version);
        assert_eq!(fed.recorded_at, stored.event.recorded_at);
        assert_eq!(fed.metadata, stored.event.metadata);
        let fed_body: Value = serde_json::from_str(&fed.data).unwrap();
        assert_eq!(fed_body, body(stored));
    }
    assert_eq!(
        feed[0].metadata.actor, None,
        "an empty actor reads as absent"
    );
    assert_eq!(feed[0].metadata.correlation_id.as_deref(), Some("corr-0"));
    assert_eq!(feed[1].metadata.actor.as_deref(), Some("tester"));
    let tail = store.read_feed(all[8].position, 100).await.unwrap();
    assert_eq!(tail.len(), 3);
}

/// Concurrent writers on the same streams: every append is either stored once, at the
/// version it expected, or reported as a conflict; a follower sees every event exactly once.
async fn concurrent_writers_never_overwrite_and_followers_miss_nothing(
    stores: Vec<Arc<dyn EventStore>>,
) {
    let reader = stores[0].clone();
    let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers_done = finished.clone();
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let store = stores[w % stores.len()].clone();
            tokio::spawn(async move {
                let mut appended = 0u64;
                for i in 0..40u64 {
                    let stream = format!("hot{}", i % 2);
                    let current = store.read_stream(&stream, 0, 10_000).await.unwrap();
                    let expected = ExpectedVersion::from_version(current.last().map(|e| e.version));
                    let r = one(
                        &*store,
                        append(&stream, expected, vec![event(w as u64 * 1000 + i)]),
                    )
                    .await;
                    if !r.is_conflict() {
                        appended += 1;
                    }
                }
                appended
            })
        })
        .collect();
    let follower = tokio::spawn(async move {
        let mut seen = vec![];
        let mut after = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            let page = reader.read_all(after, 3).await.unwrap();
            for e in &page {
                seen.push(e.position);
                after = e.position;
            }
            if page.is_empty() {
                tokio::time::sleep(Duration::from_millis(1)).await;
                if !seen.is_empty()
                    && reader.head().await.unwrap() == after
                    && writers_done.load(std::sync::atomic::Ordering::SeqCst)
                {
                    break;
                }
            }
        }
        seen
    });
    let mut total = 0;
    for w in writers {
        total += w.await.unwrap();
    }
    finished.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = follower.await.unwrap();
    let all = stores[0].read_all(0, 10_000).await.unwrap();
    assert_eq!(all.len() as u64, total);
    assert_eq!(
        seen,
        all.iter().map(|e| e.position).collect::<Vec<_>>(),
        "the follower saw each event once, in order"
    );
    for stream in ["hot0", "hot1"] {
        let versions: Vec<u64> = stores[0]
            .read_stream(stream, 0, 10_000)
            .await
            .unwrap()
            .iter()
            .map(|e| e.version)
            .collect();
        assert_eq!(versions, (0..versions.len() as u64).collect::<Vec<_>>());
    }
    let ids: HashSet<Uuid> = all.iter().map(|e| e.event.event_id).collect();
    assert_eq!(ids.len(), all.len());
}

/// A batch larger than one insert statement carries (SQLite binds at most 512 rows each).
async fn a_large_batch_is_stored_whole_and_in_order(store: Arc<dyn EventStore>) {
    let events: Vec<EventData> = (0..1_200).map(event).collect();
    let ids: Vec<Uuid> = events.iter().map(|e| e.event_id).collect();
    let results = store
        .append(vec![
            append("big", ExpectedVersion::NoStream, events[..700].to_vec()),
            append("other", ExpectedVersion::NoStream, vec![event(9_999)]),
            append("big", ExpectedVersion::Exact(699), events[700..].to_vec()),
        ])
        .await
        .unwrap();
    assert!(results.iter().all(|r| !r.is_conflict()), "{results:?}");
    let stored = store.read_stream("big", 0, 10_000).await.unwrap();
    assert_eq!(
        stored.iter().map(|e| e.event.event_id).collect::<Vec<_>>(),
        ids
    );
    assert_eq!(
        stored.iter().map(|e| e.version).collect::<Vec<_>>(),
        (0..1_200).collect::<Vec<u64>>()
    );
    let all = store.read_all(0, 10_000).await.unwrap();
    assert_eq!(all.len(), 1_201);
    assert!(all.windows(2).all(|w| w[1].position == w[0].position + 1));
    assert_eq!(all[700].stream, "other");
}

fn with_snapshot(mut a: StreamAppend, version: u64, body: &str) -> StreamAppend {
    a.snapshot = Some(EncodedSnapshot {
        version,
        format: 1,
        data: body.into(),
    });
    a
}

async fn snapshots_are_stored_only_with_their_events(store: Arc<dyn EventStore>) {
    assert_eq!(store.read_snapshot("s").await.unwrap(), None);
    let first = one(
        &*store,
        with_snapshot(
            append("s", ExpectedVersion::NoStream, vec![event(0), event(1)]),
            1,
            "first",
        ),
    )
    .await;
    assert!(!first.is_conflict());
    let stored = store.read_snapshot("s").await.unwrap().unwrap();
    assert_eq!((stored.version, stored.data.as_str()), (1, "first"));

    // A conflicting append's snapshot is not stored, nor is a chain's after its broken link;
    // in the same batch, the other stream's append and snapshot are.
    let results = store
        .append(vec![
            with_snapshot(
                append("s", ExpectedVersion::Exact(0), vec![event(2)]),
                2,
                "stale",
            ),
            with_snapshot(
                append("s", ExpectedVersion::Exact(2), vec![event(3)]),
                3,
                "after a broken link",
            ),
            with_snapshot(
                append("t", ExpectedVersion::NoStream, vec![event(4)]),
                0,
                "other stream",
            ),
        ])
        .await
        .unwrap();
    assert!(results[0].is_conflict() && results[1].is_conflict());
    assert!(!results[2].is_conflict());
    assert_eq!(
        store.read_snapshot("s").await.unwrap().unwrap().data,
        "first"
    );
    assert_eq!(
        store.read_snapshot("t").await.unwrap().unwrap().data,
        "other stream"
    );

    // A later snapshot replaces the earlier one; of two in one batch, the later stays.
    store
        .append(vec![
            with_snapshot(
                append("s", ExpectedVersion::Exact(1), vec![event(5)]),
                2,
                "second",
            ),
            with_snapshot(
                append("s", ExpectedVersion::Exact(2), vec![event(6), event(7)]),
                4,
                "third",
            ),
        ])
        .await
        .unwrap();
    let stored = store.read_snapshot("s").await.unwrap().unwrap();
    assert_eq!((stored.version, stored.data.as_str()), (4, "third"));

    // Re-appending stored events writes nothing, so not their snapshot either.
    let next = with_snapshot(
        append("t", ExpectedVersion::Exact(0), vec![event(8)]),
        1,
        "next",
    );
    assert!(!one(&*store, next.clone()).await.is_conflict());
    let mut replay = next;
    replay.snapshot.as_mut().unwrap().data = "replayed".into();
    assert!(!one(&*store, replay).await.is_conflict());
    assert_eq!(
        store.read_snapshot("t").await.unwrap().unwrap().data,
        "next"
    );
}

conformance!(
    expected_versions_are_enforced,
    re_appending_stored_event_ids_is_a_no_op,
    one_conflicting_stream_does_not_fail_the_batch,
    a_broken_chain_stays_broken,
    empty_appends_check_the_version_only,
    the_feed_reads_from_any_position,
    the_feed_gives_what_read_all_gives,
    snapshots_are_stored_only_with_their_events,
    a_large_batch_is_stored_whole_and_in_order,
);

#[tokio::test]
async fn sqlite_concurrent_writers() {
    let (_dir, store) = testing::sqlite_store().await;
    concurrent_writers_never_overwrite_and_followers_miss_nothing(vec![store]).await;
}

/// Two stores on one file, as two processes would be: each writer's guess of the file (what it
/// last wrote) goes stale whenever the other writes, and must never turn into a wrong row.
#[tokio::test]
async fn sqlite_concurrent_writers_on_two_stores() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    let a: Arc<dyn EventStore> = Arc::new(ledger::store::SqliteStore::open(&url).await.unwrap());
    let b: Arc<dyn EventStore> = Arc::new(ledger::store::SqliteStore::open(&url).await.unwrap());
    concurrent_writers_never_overwrite_and_followers_miss_nothing(vec![a, b]).await;
}

/// Appends `a` alone and asserts it was stored.
async fn appended(store: &dyn EventStore, a: StreamAppend) {
    let result = one(store, a).await;
    assert!(!result.is_conflict(), "{result:?}");
}

/// Two writers on one database: each guesses the database is as it last saw it (see
/// `plan::speculate`), and the other's appends make that guess wrong in every way it can be.
async fn a_writer_whose_view_is_stale_conflicts_or_continues_after_the_other(
    a: Arc<dyn EventStore>,
    b: Arc<dyn EventStore>,
) {
    appended(&*a, append("s", ExpectedVersion::NoStream, vec![event(0)])).await;
    appended(&*a, append("t", ExpectedVersion::NoStream, vec![event(1)])).await;
    // b writes to both streams; a has not seen it.
    appended(&*b, append("s", ExpectedVersion::Exact(0), vec![event(2)])).await;
    appended(&*b, append("u", ExpectedVersion::NoStream, vec![event(3)])).await;
    // a's expectation of s is stale, below the truth.
    assert_eq!(
        one(&*a, append("s", ExpectedVersion::Exact(0), vec![event(4)])).await,
        AppendResult::Conflict {
            expected: ExpectedVersion::Exact(0),
            actual: Some(1)
        }
    );
    // Above the truth: a version s never reached.
    assert!(
        one(&*a, append("s", ExpectedVersion::Exact(5), vec![event(5)]))
            .await
            .is_conflict()
    );
    // t is as a left it, but the head moved: a's event goes after b's.
    let AppendResult::Appended {
        positions,
        versions,
        ..
    } = one(&*a, append("t", ExpectedVersion::Exact(0), vec![event(6)])).await
    else {
        panic!("t was as a left it")
    };
    assert_eq!((versions, positions), (vec![1], vec![5]));
    // And an event id b stored is recognised, not stored twice.
    let again = event(7);
    appended(
        &*b,
        append("v", ExpectedVersion::NoStream, vec![again.clone()]),
    )
    .await;
    // (a appends once more first, so that it knows the head again.)
    appended(&*a, append("t", ExpectedVersion::Exact(1), vec![event(8)])).await;
    let AppendResult::Appended { positions, .. } = one(
        &*a,
        append("v", ExpectedVersion::NoStream, vec![again.clone()]),
    )
    .await
    else {
        panic!("a retried append of a stored event is answered with where it is")
    };
    assert_eq!(positions, vec![6]);
    // The same event appended to a stream whose expectation holds is refused, not stored again.
    let refused = a
        .append(vec![append("w", ExpectedVersion::NoStream, vec![again])])
        .await;
    assert!(
        matches!(refused, Err(ledger::StoreError::InvalidAppend(_))),
        "{refused:?}"
    );
    assert_eq!(a.read_all(0, 100).await.unwrap().len(), 7);
}

#[tokio::test]
async fn sqlite_a_writer_whose_view_is_stale_conflicts_or_continues_after_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    let a = Arc::new(ledger::store::SqliteStore::open(&url).await.unwrap());
    let b = Arc::new(ledger::store::SqliteStore::open(&url).await.unwrap());
    a_writer_whose_view_is_stale_conflicts_or_continues_after_the_other(a, b).await;
}

/// Two stores on one new schema (dropped with the guard), as two nodes on one database; `None`
/// without a server.
async fn two_postgres_stores() -> Option<(
    testing::PostgresSchema,
    Arc<dyn EventStore>,
    Arc<dyn EventStore>,
)> {
    let url = testing::postgres_url()?;
    let schema = testing::postgres_schema(&url).await;
    let a = testing::postgres_store_in(&url, &schema).await;
    let b = testing::postgres_store_in(&url, &schema).await;
    Some((schema, a, b))
}

#[tokio::test]
async fn postgres_a_writer_whose_view_is_stale_conflicts_or_continues_after_the_other() {
    if let Some((_schema, a, b)) = two_postgres_stores().await {
        a_writer_whose_view_is_stale_conflicts_or_continues_after_the_other(a, b).await;
    }
}

#[tokio::test]
async fn postgres_concurrent_writers_on_two_pools() {
    if let Some((_schema, a, b)) = two_postgres_stores().await {
        concurrent_writers_never_overwrite_and_followers_miss_nothing(vec![a, b]).await;
    }
}
