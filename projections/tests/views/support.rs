//! What the views tests share: a ledger over a store with the views following it, a random
//! workload, and the replay of the events the views are checked against.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use chrono::{TimeDelta, TimeZone, Utc};
use domain::{
    Defaults, Event, Limit, Limits, ProjectId, ProjectState, ReservationId, ResourceName,
    Timestamp, DEFAULTS_STREAM,
};
use ledger::store::MAX_READ_COUNT;
use ledger::{EventStore, Ledger, LedgerConfig, ManualClock, Metadata, RecordedEvent};
use projections::{Projections, ResourceUsage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{deltas, p, r, WAIT};

pub(crate) fn meta(actor: &str) -> Metadata {
    Metadata {
        actor: Some(actor.into()),
        request_id: Some(format!("req-{}", uuid::Uuid::new_v4().simple())),
        correlation_id: None,
        principal: Some(actor.into()),
    }
}

pub(crate) fn start_time() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
}

pub(crate) async fn ledger_on(store: Arc<dyn EventStore>, clock: Arc<ManualClock>) -> Arc<Ledger> {
    Ledger::start(store, clock, LedgerConfig::default())
        .await
        .unwrap()
}

pub(crate) async fn set_defaults(ledger: &Ledger) {
    let limits: Limits = [(r("instances"), 20), (r("cores"), 40), (r("ram"), -1)]
        .into_iter()
        .map(|(k, v)| (k, Limit::new(v).unwrap()))
        .collect();
    ledger.set_defaults(&limits, &meta("admin")).await.unwrap();
}

/// A random mix of every kind of decision over `projects`, with time moving so holds expire.
pub(crate) async fn random_workload(
    ledger: &Ledger,
    clock: &ManualClock,
    projects: &[ProjectId],
    steps: usize,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut held: Vec<(ProjectId, ReservationId)> = Vec::new();
    let mut committed: Vec<(ProjectId, ReservationId)> = Vec::new();
    for _ in 0..steps {
        let project = projects[rng.gen_range(0..projects.len())].clone();
        match rng.gen_range(0..100) {
            0..=39 => {
                let n = rng.gen_range(1..4);
                let d = deltas(&[("instances", n), ("cores", 2 * n), ("ram", 512 * n)]);
                let expires = rng.gen_range(5..120);
                // Some reserves are for one of two users inside the project (SPEC rule 8).
                let user = [None, Some("u1"), Some("u2")][rng.gen_range(0..3)]
                    .map(|u| domain::UserId::parse(u).unwrap());
                let request = ledger::ReserveRequest {
                    reservation_id: None,
                    deltas: d,
                    count: None,
                    user,
                    expires_in_s: expires,
                };
                if let Ok(view) = ledger.reserve_with(&project, request, &meta("alice")).await {
                    held.push((project, view.reservation_id));
                }
            }
            40..=64 if !held.is_empty() => {
                let (project, id) = held.swap_remove(rng.gen_range(0..held.len()));
                if ledger.commit(&project, id, &meta("bob")).await.is_ok() {
                    committed.push((project, id));
                }
            }
            65..=74 if !held.is_empty() => {
                let (project, id) = held.swap_remove(rng.gen_range(0..held.len()));
                let _ = ledger.release(&project, id, &meta("bob")).await;
            }
            75..=82 if !committed.is_empty() => {
                let (project, id) = committed.swap_remove(rng.gen_range(0..committed.len()));
                let _ = ledger.release(&project, id, &meta("carol")).await;
            }
            83..=86 => {
                let limits: Limits =
                    [(r("instances"), Limit::new(rng.gen_range(5..30)).unwrap())].into();
                let _ = ledger
                    .set_limits(&project, limits, true, &meta("admin"))
                    .await;
            }
            87..=88 => {
                let _ = ledger.reset_limits(&project, &meta("admin")).await;
            }
            89 => {
                // A user's correction moves the project's in_use by as much.
                let user = [None, Some("u1")][rng.gen_range(0..2)]
                    .map(|u| domain::UserId::parse(u).unwrap());
                let _ = ledger
                    .correct_usage(
                        &project,
                        user,
                        [(r("cores"), rng.gen_range(0..10))].into(),
                        domain::Reason::parse("recount").unwrap(),
                        &meta("admin"),
                    )
                    .await;
            }
            90..=93 => {
                let _ = ledger.expire(&project).await;
            }
            _ => clock.advance(TimeDelta::seconds(rng.gen_range(1..30))),
        }
    }
}

pub(crate) async fn all_events(store: &dyn EventStore) -> Vec<RecordedEvent> {
    let mut events: Vec<RecordedEvent> = Vec::new();
    loop {
        let after = events.last().map_or(0, |e| e.position);
        let page = store.read_all(after, MAX_READ_COUNT).await.unwrap();
        if page.is_empty() {
            return events;
        }
        events.extend(page);
    }
}

/// The usage of every project, replayed with the domain's fold from events recorded up to
/// `cut`, as it stood at `now`.
pub(crate) async fn replay(
    store: &dyn EventStore,
    cut: Timestamp,
    now: Timestamp,
) -> HashMap<ProjectId, BTreeMap<ResourceName, ResourceUsage>> {
    let mut defaults = Defaults::default();
    let mut states: HashMap<ProjectId, ProjectState> = HashMap::new();
    for recorded in all_events(store).await {
        if recorded.event.recorded_at > cut {
            continue;
        }
        let event: Event = recorded.decode().unwrap();
        if recorded.stream == DEFAULTS_STREAM {
            defaults.apply(&event);
        } else if let Some(project) = ProjectId::from_stream(&recorded.stream) {
            states
                .entry(project.clone())
                .or_insert_with(|| ProjectState::new(project))
                .apply(&event, recorded.event.recorded_at);
        }
    }
    states
        .into_iter()
        .map(|(project, state)| {
            let usage = state
                .usage_all(&defaults, now)
                .into_iter()
                .map(|(resource, (limit, usage))| {
                    let limit = limit.unwrap_or(Limit::UNLIMITED);
                    let headroom = limit.cap().map(|c| c - usage.in_use - usage.reserved);
                    (
                        resource,
                        ResourceUsage {
                            limit,
                            in_use: usage.in_use,
                            reserved: usage.reserved,
                            headroom,
                        },
                    )
                })
                .collect();
            (project, usage)
        })
        .collect()
}

pub(crate) async fn assert_views_equal_replay(
    store: &dyn EventStore,
    projections: &Projections,
    projects: &[ProjectId],
    now: Timestamp,
) {
    let head = store.head().await.unwrap();
    projections.wait_for(head, WAIT).await.unwrap();
    let expected = replay(store, Timestamp::MAX_UTC, now).await;
    for project in projects {
        let report = projections.usage(project, now).await.unwrap();
        assert!(report.position >= head);
        let want = expected.get(project).cloned().unwrap_or_default();
        let got = report.resources;
        if want.is_empty() {
            // A project without events shows the defaults with nothing used.
            assert!(
                got.values().all(|u| u.in_use == 0 && u.reserved == 0),
                "{project}: {got:?}"
            );
        } else {
            assert_eq!(got, want, "usage of {project}");
        }
    }
    let differences = projections.verify().await.unwrap();
    assert!(differences.is_empty(), "verify: {differences:?}");
}

pub(crate) fn projects(n: usize) -> Vec<ProjectId> {
    (0..n).map(|i| p(&format!("proj-{i}"))).collect()
}

pub(crate) async fn setup(
    store: Arc<dyn EventStore>,
) -> (Arc<Ledger>, Arc<ManualClock>, Arc<Projections>) {
    let clock = Arc::new(ManualClock::new(start_time()));
    let ledger = ledger_on(store.clone(), clock.clone()).await;
    set_defaults(&ledger).await;
    let projections = Projections::start(store).await.unwrap();
    (ledger, clock, projections)
}
