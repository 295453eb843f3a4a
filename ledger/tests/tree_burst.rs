//! Nova bug 938317 across a tree (SPEC rule 11): a parent with room for 10 and two children
//! with 10 each; 20 reserves at the same instant, spread over the children, grant exactly 10,
//! on every backend and with the children's requests sent through two ledgers sharing one
//! PostgreSQL database.

use std::sync::Arc;

use domain::{Deltas, Limit, Limits, ProjectId, Refusal, ResourceName};
use ledger::{
    testing, EventStore, Ledger, LedgerConfig, LedgerError, Metadata, ReserveRequest, SystemClock,
};
use tokio::sync::Barrier;

fn r(s: &str) -> ResourceName {
    ResourceName::parse(s).unwrap()
}

fn p(s: &str) -> ProjectId {
    ProjectId::parse(s).unwrap()
}

async fn ledger(store: Arc<dyn EventStore>) -> Arc<Ledger> {
    Ledger::start(store, Arc::new(SystemClock), LedgerConfig::default())
        .await
        .unwrap()
}

fn instances(n: i64) -> Limits {
    [(r("instances"), Limit::new(n).unwrap())].into()
}

/// Builds dept (limit 10) with children c1 and c2 (10 each), then fires 20 reserves of one
/// instance at once, child i % 2 through ledger i % len: returns (granted, denied).
async fn tree_burst(ledgers: &[Arc<Ledger>]) -> (usize, usize) {
    let meta = Metadata::default();
    let first = &ledgers[0];
    first.set_defaults(&instances(100), &meta).await.unwrap();
    first
        .set_limits(&p("dept"), instances(10), false, &meta)
        .await
        .unwrap();
    for child in ["c1", "c2"] {
        first
            .set_limits(&p(child), instances(10), false, &meta)
            .await
            .unwrap();
        let ancestors = first
            .set_parent(&p(child), Some(p("dept")), false, &meta)
            .await
            .unwrap();
        assert_eq!(ancestors, vec![p("dept")]);
    }
    let start = Arc::new(Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let ledger = ledgers[i % ledgers.len()].clone();
            let child = p(["c1", "c2"][i % 2]);
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                let request = ReserveRequest {
                    reservation_id: None,
                    deltas: Deltas::new([(r("instances"), 1)].into()).unwrap(),
                    count: None,
                    user: None,
                    expires_in_s: 3600,
                };
                ledger
                    .reserve_with(&child, request, &Metadata::default())
                    .await
            })
        })
        .collect();
    let (mut granted, mut denied) = (0, 0);
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => granted += 1,
            Err(LedgerError::Refused(Refusal::OverQuota {
                overs,
                ancestor_overs,
                ..
            })) => {
                assert!(overs.is_empty(), "a child alone is never over: {overs:?}");
                assert_eq!(ancestor_overs, [(p("dept"), vec![r("instances")])].into());
                denied += 1;
            }
            Err(other) => panic!("unexpected answer: {other}"),
        }
    }
    // What the log says agrees with what the clients were told, in every stream.
    let fresh = ledger(first.store().clone()).await;
    let now = chrono::Utc::now();
    let dept = fresh.project_state(&p("dept")).await.unwrap();
    assert_eq!(
        dept.subtree_usage(&r("instances"), now).reserved,
        granted as i64
    );
    let mut children = 0;
    for child in ["c1", "c2"] {
        let state = fresh.project_state(&p(child)).await.unwrap();
        children += state.usage(&r("instances"), now).reserved;
    }
    assert_eq!(children, granted as i64);
    (granted, denied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_tree_burst_grants_exactly_the_parents_ten() {
    let (_dir, store) = testing::sqlite_store().await;
    assert_eq!(tree_burst(&[ledger(store).await]).await, (10, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_tree_burst_grants_exactly_the_parents_ten() {
    let Some((_schema, store)) = testing::postgres_store().await else {
        return;
    };
    assert_eq!(tree_burst(&[ledger(store).await]).await, (10, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_two_ledgers_tree_burst_grants_exactly_the_parents_ten() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let schema = testing::postgres_schema(&url).await;
    let a = ledger(testing::postgres_store_in(&url, &schema).await).await;
    let b = ledger(testing::postgres_store_in(&url, &schema).await).await;
    assert_eq!(tree_burst(&[a, b]).await, (10, 10));
}
