//! OpenStack Nova bug 938317, as tests: 20 reserves at the same instant against room for 10
//! grant exactly 10, on every backend and across independent ledger instances; and per user
//! (SPEC rule 8): 20 reserves by one user with a user limit of 5 grant exactly 5.

use std::sync::Arc;

use domain::{Deltas, Limit, Limits, ProjectId, Refusal, ResourceName, UserId};
use ledger::{
    testing, EventStore, Ledger, LedgerConfig, LedgerError, Metadata, ReserveRequest, SystemClock,
};
use tokio::sync::Barrier;

fn r(s: &str) -> ResourceName {
    ResourceName::parse(s).unwrap()
}

async fn ledger(store: Arc<dyn EventStore>) -> Arc<Ledger> {
    Ledger::start(store, Arc::new(SystemClock), LedgerConfig::default())
        .await
        .unwrap()
}

fn alice() -> UserId {
    UserId::parse("alice").unwrap()
}

/// Fires 20 reserves of one instance through `ledgers` (round robin), all released at once:
/// against a limit of 10, or by one user with a user limit of 5 (the project's is 100).
async fn burst(ledgers: &[Arc<Ledger>], user: Option<UserId>) -> (usize, usize) {
    let project_limit = if user.is_some() { 100 } else { 10 };
    let limits: Limits = [(r("instances"), Limit::new(project_limit).unwrap())].into();
    ledgers[0]
        .set_defaults(&limits, &Metadata::default())
        .await
        .unwrap();
    let project = ProjectId::parse("seed").unwrap();
    if let Some(user) = &user {
        let own: Limits = [(r("instances"), Limit::new(5).unwrap())].into();
        ledgers[0]
            .set_user_limits(&project, user.clone(), own, false, &Metadata::default())
            .await
            .unwrap();
    }
    let start = Arc::new(Barrier::new(20));
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let ledger = ledgers[i % ledgers.len()].clone();
            let project = project.clone();
            let start = start.clone();
            let user = user.clone();
            tokio::spawn(async move {
                start.wait().await;
                let request = ReserveRequest {
                    reservation_id: None,
                    deltas: Deltas::new([(r("instances"), 1)].into()).unwrap(),
                    count: None,
                    user,
                    expires_in_s: 3600,
                };
                ledger
                    .reserve_with(&project, request, &Metadata::default())
                    .await
            })
        })
        .collect();
    let (mut granted, mut denied) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => granted += 1,
            Err(LedgerError::Refused(Refusal::OverQuota { overs, user, .. })) => {
                match user {
                    None => assert_eq!(overs, vec![r("instances")]),
                    Some(user) => {
                        assert!(overs.is_empty());
                        assert_eq!(user.overs, vec![r("instances")]);
                    }
                }
                denied += 1;
            }
            Err(other) => panic!("unexpected answer: {other}"),
        }
    }
    // What the log says agrees with what the clients were told.
    let fresh = ledger(ledgers[0].store().clone()).await;
    let state = fresh.project_state(&project).await.unwrap();
    let now = chrono::Utc::now();
    assert_eq!(state.usage(&r("instances"), now).reserved, granted as i64);
    if let Some(user) = &user {
        let usage = state.user_usage(user, &r("instances"), now);
        assert_eq!(usage.reserved, granted as i64);
    }
    (granted, denied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_twenty_parallel_boots_grant_exactly_ten() {
    let (_dir, store) = testing::sqlite_store().await;
    assert_eq!(burst(&[ledger(store).await], None).await, (10, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_twenty_parallel_boots_grant_exactly_ten() {
    let Some((_schema, store)) = testing::postgres_store().await else {
        return;
    };
    assert_eq!(burst(&[ledger(store).await], None).await, (10, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_two_ledgers_sharing_one_database_grant_exactly_ten() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let schema = testing::postgres_schema(&url).await;
    let a = ledger(testing::postgres_store_in(&url, &schema).await).await;
    let b = ledger(testing::postgres_store_in(&url, &schema).await).await;
    assert_eq!(burst(&[a, b], None).await, (10, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_twenty_parallel_boots_by_one_user_grant_exactly_its_five() {
    let (_dir, store) = testing::sqlite_store().await;
    assert_eq!(burst(&[ledger(store).await], Some(alice())).await, (5, 15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_twenty_parallel_boots_by_one_user_grant_exactly_its_five() {
    let Some((_schema, store)) = testing::postgres_store().await else {
        return;
    };
    assert_eq!(burst(&[ledger(store).await], Some(alice())).await, (5, 15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_two_ledgers_grant_one_user_exactly_its_five() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let schema = testing::postgres_schema(&url).await;
    let a = ledger(testing::postgres_store_in(&url, &schema).await).await;
    let b = ledger(testing::postgres_store_in(&url, &schema).await).await;
    assert_eq!(burst(&[a, b], Some(alice())).await, (5, 15));
}
