//! OpenStack Nova bug 938317, as tests: 20 reserves at the same instant against room for 10
//! grant exactly 10, on every backend and across independent ledger instances.

use std::sync::Arc;

use domain::{Deltas, Limit, Limits, ProjectId, Refusal, ResourceName};
use ledger::{testing, EventStore, Ledger, LedgerConfig, LedgerError, Metadata, SystemClock};
use tokio::sync::Barrier;

fn r(s: &str) -> ResourceName {
    ResourceName::parse(s).unwrap()
}

async fn ledger(store: Arc<dyn EventStore>) -> Arc<Ledger> {
    Ledger::start(store, Arc::new(SystemClock), LedgerConfig::default())
        .await
        .unwrap()
}

/// Fires 20 reserves of one instance through `ledgers` (round robin), all released at once.
async fn burst(ledgers: &[Arc<Ledger>]) -> (usize, usize) {
    let limits: Limits = [(r("instances"), Limit::new(10).unwrap())].into();
    ledgers[0]
        .set_defaults(&limits, &Metadata::default())
        .await
        .unwrap();
    let project = ProjectId::parse("seed").unwrap();
    let start = Arc::new(Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let ledger = ledgers[i % ledgers.len()].clone();
            let project = project.clone();
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                let deltas = Deltas::new([(r("instances"), 1)].into()).unwrap();
                ledger
                    .reserve(&project, None, deltas, 3600, &Metadata::default())
                    .await
            })
        })
        .collect();
    let (mut granted, mut denied) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => granted += 1,
            Err(LedgerError::Refused(Refusal::OverQuota { overs, .. })) => {
                assert_eq!(overs, vec![r("instances")]);
                denied += 1;
            }
            Err(other) => panic!("unexpected answer: {other}"),
        }
    }
    // What the log says agrees with what the clients were told.
    let fresh = ledger(ledgers[0].store().clone()).await;
    let state = fresh.project_state(&project).await.unwrap();
    let usage = state.usage(&r("instances"), chrono::Utc::now());
    assert_eq!(usage.reserved, granted as i64);
    (granted, denied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_twenty_parallel_boots_grant_exactly_ten() {
    let (_dir, store) = testing::sqlite_store().await;
    assert_eq!(burst(&[ledger(store).await]).await, (10, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_twenty_parallel_boots_grant_exactly_ten() {
    let Some((_schema, store)) = testing::postgres_store().await else {
        return;
    };
    assert_eq!(burst(&[ledger(store).await]).await, (10, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_two_ledgers_sharing_one_database_grant_exactly_ten() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let schema = testing::postgres_schema(&url).await;
    let a = ledger(testing::postgres_store_in(&url, &schema).await).await;
    let b = ledger(testing::postgres_store_in(&url, &schema).await).await;
    assert_eq!(burst(&[a, b]).await, (10, 10));
}
