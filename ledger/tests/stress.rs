//! Randomised stress: 64 tasks reserve, commit and release across 10 projects with small
//! limits for a few seconds. Afterwards the whole log is replayed: no project is over any limit
//! at any position, and the final state is exactly what the acknowledged answers imply.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::{
    Deltas, Limit, Limits, ProjectId, ProjectState, Refusal, ReleaseReason, ReservationId,
    ReservationStatus, ResourceName,
};
use ledger::{testing, EventStore, Ledger, LedgerConfig, LedgerError, Metadata, SystemClock};
use rand::{rngs::StdRng, Rng, SeedableRng};

const TASKS: usize = 64;
const PROJECTS: usize = 10;
const RUN_FOR: Duration = Duration::from_secs(3);

fn r(s: &str) -> ResourceName {
    ResourceName::parse(s).unwrap()
}

fn project(i: usize) -> ProjectId {
    ProjectId::parse(&format!("stress-{i}")).unwrap()
}

/// The last acknowledged outcome of one reservation, as its client saw it.
#[derive(Clone, Debug)]
struct Acked {
    project: ProjectId,
    deltas: Deltas,
    status: ReservationStatus,
}

#[derive(Default, Debug)]
struct Tally {
    granted: u64,
    denied: u64,
    commits: u64,
    releases: u64,
    contention: u64,
}

async fn client(ledger: Arc<Ledger>, seed: u64) -> (HashMap<ReservationId, Acked>, Tally) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut mine: HashMap<ReservationId, Acked> = HashMap::new();
    let mut tally = Tally::default();
    let meta = Metadata::default();
    let started = Instant::now();
    while started.elapsed() < RUN_FOR {
        let open: Vec<ReservationId> = mine
            .iter()
            .filter(|(_, a)| !matches!(a.status, ReservationStatus::Released(_)))
            .map(|(id, _)| *id)
            .collect();
        let choice = rng.gen_range(0..10);
        if open.is_empty() || choice < 5 {
            let p = project(rng.gen_range(0..PROJECTS));
            let deltas =
                Deltas::new([(r("instances"), 1), (r("cores"), rng.gen_range(1..4))].into())
                    .unwrap();
            // A few short holds, so expiry happens during the run.
            let expires_in_s = if rng.gen_ratio(1, 10) { 1 } else { 600 };
            match ledger
                .reserve(&p, None, deltas.clone(), expires_in_s, &meta)
                .await
            {
                Ok(view) => {
                    tally.granted += 1;
                    mine.insert(
                        view.reservation_id,
                        Acked {
                            project: p,
                            deltas,
                            status: ReservationStatus::Held,
                        },
                    );
                }
                Err(LedgerError::Refused(Refusal::OverQuota { .. })) => tally.denied += 1,
                Err(LedgerError::Contention { .. }) => tally.contention += 1,
                Err(other) => panic!("reserve: {other}"),
            }
        } else {
            let id = open[rng.gen_range(0..open.len())];
            let acked = mine[&id].clone();
            let answer = if choice < 8 {
                ledger.commit(&acked.project, id, &meta).await
            } else {
                ledger.release(&acked.project, id, &meta).await
            };
            match answer {
                Ok(view) => {
                    if choice < 8 {
                        tally.commits += 1;
                    } else {
                        tally.releases += 1;
                    }
                    mine.get_mut(&id).unwrap().status = view.status;
                }
                Err(LedgerError::Refused(Refusal::ReservationExpired)) => {
                    mine.get_mut(&id).unwrap().status =
                        ReservationStatus::Released(ReleaseReason::Expired);
                }
                Err(LedgerError::Contention { .. }) => tally.contention += 1,
                Err(other) => panic!("commit/release: {other}"),
            }
        }
    }
    (mine, tally)
}

async fn stress(ledgers: Vec<Arc<Ledger>>) {
    let limits: Limits = [
        (r("instances"), Limit::new(5).unwrap()),
        (r("cores"), Limit::new(9).unwrap()),
    ]
    .into();
    ledgers[0]
        .set_defaults(&limits, &Metadata::default())
        .await
        .unwrap();
    // One project with its own, tighter limit.
    ledgers[0]
        .set_limits(
            &project(0),
            [(r("instances"), Limit::new(2).unwrap())].into(),
            false,
            &Metadata::default(),
        )
        .await
        .unwrap();
    for l in &ledgers[1..] {
        l.refresh_defaults().await.unwrap();
    }

    let tasks: Vec<_> = (0..TASKS)
        .map(|i| tokio::spawn(client(ledgers[i % ledgers.len()].clone(), i as u64)))
        .collect();
    let mut acked: HashMap<ReservationId, Acked> = HashMap::new();
    let mut total = Tally::default();
    for t in tasks {
        let (mine, tally) = t.await.unwrap();
        acked.extend(mine);
        total.granted += tally.granted;
        total.denied += tally.denied;
        total.commits += tally.commits;
        total.releases += tally.releases;
        total.contention += tally.contention;
    }
    eprintln!("{total:?}");
    assert!(
        total.granted > 100 && total.denied > 0 && total.commits > 0,
        "{total:?}"
    );

    let store: Arc<dyn EventStore> = ledgers[0].store().clone();
    let states = replay_checking_limits(&*store, &limits).await;

    // Every acknowledged answer is in the log, exactly as acknowledged (a hold may since have
    // expired, which only the sweeper or a later command records).
    for (id, a) in &acked {
        let state = &states[&a.project];
        let stored = state
            .reservation(id)
            .unwrap_or_else(|| panic!("acknowledged {id} is not in the log"));
        assert_eq!(stored.deltas, a.deltas);
        let consistent = stored.status == a.status
            || (a.status == ReservationStatus::Held
                && stored.status == ReservationStatus::Released(ReleaseReason::Expired));
        assert!(
            consistent,
            "{id}: acknowledged {:?}, stored {:?}",
            a.status, stored.status
        );
    }
    // And in_use is what the acknowledged commits and frees imply.
    for (i, state) in (0..PROJECTS).map(|i| (i, &states[&project(i)])) {
        for res in ["instances", "cores"] {
            let implied: i64 = acked
                .values()
                .filter(|a| a.project == project(i) && a.status == ReservationStatus::Committed)
                .map(|a| a.deltas.get(&r(res)))
                .sum();
            assert_eq!(state.in_use(&r(res)), implied, "project {i} {res}");
        }
    }
}

/// Folds the whole log; at every event, every project is within its limits at that instant.
async fn replay_checking_limits(
    store: &dyn EventStore,
    defaults: &Limits,
) -> HashMap<ProjectId, ProjectState> {
    let mut states: HashMap<ProjectId, ProjectState> = HashMap::new();
    let mut after = 0;
    loop {
        let events = store.read_all(after, 5_000).await.unwrap();
        if events.is_empty() {
            break;
        }
        for recorded in &events {
            after = recorded.position;
            let Some(p) = ProjectId::from_stream(&recorded.stream) else {
                continue;
            };
            let state = states
                .entry(p.clone())
                .or_insert_with(|| ProjectState::new(p));
            assert_eq!(
                state.version.map_or(0, |v| v + 1),
                recorded.version,
                "no gaps in a stream"
            );
            state.apply(&recorded.decode().unwrap(), recorded.event.recorded_at);
            for (res, default) in defaults {
                let cap = state
                    .overrides
                    .get(res)
                    .copied()
                    .unwrap_or(*default)
                    .cap()
                    .unwrap();
                let usage = state.usage(res, recorded.event.recorded_at);
                assert!(
                    usage.in_use + usage.reserved <= cap,
                    "{} over {res} at position {}: {usage:?} > {cap}",
                    state.project,
                    recorded.position
                );
            }
        }
    }
    states
}

async fn ledger(store: Arc<dyn EventStore>) -> Arc<Ledger> {
    Ledger::start(store, Arc::new(SystemClock), LedgerConfig::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_stress_never_oversubscribes() {
    let (_dir, store) = testing::sqlite_store().await;
    stress(vec![ledger(store).await]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_stress_with_two_ledgers_never_oversubscribes() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let schema = testing::postgres_schema(&url).await;
    let a = ledger(testing::postgres_store_in(&url, &schema).await).await;
    let b = ledger(testing::postgres_store_in(&url, &schema).await).await;
    stress(vec![a.clone(), b.clone()]).await;
    let conflicts = a
        .stats()
        .conflicts
        .load(std::sync::atomic::Ordering::Relaxed)
        + b.stats()
            .conflicts
            .load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("cross-node conflicts resolved: {conflicts}");
    assert!(
        conflicts > 0,
        "two nodes on shared projects should have conflicted at least once"
    );
}
