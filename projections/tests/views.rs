//! The views against a replay of the events, on every backend: each test is written once over
//! a store and instantiated below for SQLite and for PostgreSQL (skipped when
//! `QUOTA_TEST_POSTGRES_URL` is not set).

#[macro_use]
mod common;

use common::{deltas, p, r, WAIT};

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeDelta, TimeZone, Utc};
use domain::{
    Defaults, Event, Limit, Limits, ProjectId, ProjectState, ReservationId, ResourceName,
    Timestamp, DEFAULTS_STREAM,
};
use ledger::store::MAX_READ_COUNT;
use ledger::{
    Clock, Database, EventStore, Ledger, LedgerConfig, ManualClock, Metadata, RecordedEvent,
};
use projections::{AuditQuery, ProjectionError, Projections, ResourceUsage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn meta(actor: &str) -> Metadata {
    Metadata {
        actor: Some(actor.into()),
        request_id: Some(format!("req-{}", uuid::Uuid::new_v4().simple())),
        correlation_id: None,
        principal: Some(actor.into()),
    }
}

fn start_time() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
}

async fn ledger_on(store: Arc<dyn EventStore>, clock: Arc<ManualClock>) -> Arc<Ledger> {
    Ledger::start(store, clock, LedgerConfig::default())
        .await
        .unwrap()
}

async fn set_defaults(ledger: &Ledger) {
    let limits: Limits = [(r("instances"), 20), (r("cores"), 40), (r("ram"), -1)]
        .into_iter()
        .map(|(k, v)| (k, Limit::new(v).unwrap()))
        .collect();
    ledger.set_defaults(&limits, &meta("admin")).await.unwrap();
}

/// A random mix of every kind of decision over `projects`, with time moving so holds expire.
async fn random_workload(
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

async fn all_events(store: &dyn EventStore) -> Vec<RecordedEvent> {
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
async fn replay(
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

async fn assert_views_equal_replay(
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

fn projects(n: usize) -> Vec<ProjectId> {
    (0..n).map(|i| p(&format!("proj-{i}"))).collect()
}

async fn setup(store: Arc<dyn EventStore>) -> (Arc<Ledger>, Arc<ManualClock>, Arc<Projections>) {
    let clock = Arc::new(ManualClock::new(start_time()));
    let ledger = ledger_on(store.clone(), clock.clone()).await;
    set_defaults(&ledger).await;
    let projections = Projections::start(store).await.unwrap();
    (ledger, clock, projections)
}

async fn views_after_a_random_workload_equal_a_replay(store: Arc<dyn EventStore>) {
    let (ledger, clock, projections) = setup(store.clone()).await;
    let projects = projects(4);
    random_workload(&ledger, &clock, &projects, 400, 1).await;
    assert_views_equal_replay(&*store, &projections, &projects, clock.now()).await;
    // Every project event has its audit row.
    let events = all_events(&*store).await;
    for project in &projects {
        let mut entries = Vec::new();
        let mut query = AuditQuery {
            limit: Some(1000),
            ..AuditQuery::default()
        };
        loop {
            let page = projections.audit(project, &query).await.unwrap();
            entries.extend(page.entries);
            match page.next {
                Some(next) => query.cursor = Some(next),
                None => break,
            }
        }
        let positions: Vec<u64> = events
            .iter()
            .filter(|e| e.stream == project.stream())
            .map(|e| e.position)
            .collect();
        assert_eq!(
            entries.iter().map(|e| e.position).collect::<Vec<_>>(),
            positions
        );
    }
    let status = projections.status().await.unwrap();
    assert_eq!(status.len(), 2);
    assert!(status.iter().all(|s| s.lag == 0), "{status:?}");
}

async fn holds_stop_counting_at_expiry_without_a_sweep(store: Arc<dyn EventStore>) {
    let (ledger, clock, projections) = setup(store.clone()).await;
    let project = p("expiring");
    let view = ledger
        .reserve(
            &project,
            None,
            deltas(&[("instances", 3)]),
            10,
            &meta("alice"),
        )
        .await
        .unwrap();
    projections.wait_for(view.position, WAIT).await.unwrap();
    let usage = projections.usage(&project, clock.now()).await.unwrap();
    assert_eq!(usage.resources[&r("instances")].reserved, 3);
    assert_eq!(usage.resources[&r("instances")].headroom, Some(17));
    assert_eq!(usage.resources[&r("ram")].headroom, None);
    let later = clock.now() + TimeDelta::seconds(10);
    let usage = projections.usage(&project, later).await.unwrap();
    assert_eq!(usage.resources[&r("instances")].reserved, 0);
    assert_eq!(usage.resources[&r("instances")].headroom, Some(20));
    assert_eq!(usage.position, view.position);
}

/// Between view transactions the follower lets events gather for up to half a second; a reader
/// waiting for a write (read-your-writes) is served without waiting for that.
async fn a_waiting_reader_does_not_wait_for_events_to_gather(store: Arc<dyn EventStore>) {
    let (ledger, _clock, projections) = setup(store).await;
    let project = p("prompt");
    let metadata = meta("alice");
    let reserve = || ledger.reserve(&project, None, deltas(&[("instances", 1)]), 60, &metadata);
    // The follower has just applied a batch, so it is gathering the next one.
    let first = reserve().await.unwrap();
    projections.wait_for(first.position, WAIT).await.unwrap();
    let second = reserve().await.unwrap();
    let started = std::time::Instant::now();
    projections.wait_for(second.position, WAIT).await.unwrap();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_millis(250),
        "waited {waited:?} for a write already committed"
    );
}

/// Raw SQL on the views' database (as a bug or an operator would).
async fn execute(store: &dyn EventStore, sql: &str) {
    match store.database() {
        Database::Sqlite(pool) => {
            // On SQLite the views have a file of their own beside the events.
            let views = projections::sqlite_views_path(pool.connect_options().get_filename());
            let views = sqlx::SqlitePool::connect_with(
                sqlx::sqlite::SqliteConnectOptions::new().filename(views),
            )
            .await
            .unwrap();
            sqlx::query(sql).execute(&views).await.unwrap();
            views.close().await;
        }
        Database::Postgres(pool) => {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
    }
}

async fn a_corrupted_row_is_reported_by_verify_and_repaired_by_rebuild(store: Arc<dyn EventStore>) {
    let (ledger, clock, projections) = setup(store.clone()).await;
    let projects = projects(3);
    random_workload(&ledger, &clock, &projects, 200, 2).await;
    let project = p("corrupt");
    let view = ledger
        .reserve(
            &project,
            None,
            deltas(&[("instances", 2), ("cores", 4)]),
            3600,
            &meta("alice"),
        )
        .await
        .unwrap();
    let view = ledger
        .commit(&project, view.reservation_id, &meta("alice"))
        .await
        .unwrap();
    projections.wait_for(view.position, WAIT).await.unwrap();
    assert!(projections.verify().await.unwrap().is_empty());

    execute(&*store, "UPDATE usage_in_use SET in_use = in_use + 5 WHERE project = 'corrupt' AND resource = 'cores'").await;
    execute(
        &*store,
        "DELETE FROM audit_entries WHERE project = 'corrupt'",
    )
    .await;
    let differences = projections.verify().await.unwrap();
    let in_use: Vec<_> = differences.iter().filter(|d| d.field == "in_use").collect();
    assert_eq!(in_use.len(), 1, "{differences:?}");
    assert_eq!(
        (in_use[0].project.as_str(), in_use[0].resource.as_str()),
        ("corrupt", "cores")
    );
    assert_eq!((in_use[0].stored, in_use[0].expected), (Some(9), Some(4)));
    assert_eq!(
        differences.iter().filter(|d| d.view == "audit").count(),
        2,
        "{differences:?}"
    );

    projections.rebuild(None, &|_, _| {}).await.unwrap();
    assert!(projections.verify().await.unwrap().is_empty());
    let mut all = projects.clone();
    all.push(project);
    assert_views_equal_replay(&*store, &projections, &all, clock.now()).await;
}

async fn a_rebuild_while_writes_continue_ends_equal_to_a_replay(store: Arc<dyn EventStore>) {
    let (ledger, clock, projections) = setup(store.clone()).await;
    let projects = projects(5);
    random_workload(&ledger, &clock, &projects, 300, 3).await;
    let head = store.head().await.unwrap();
    projections.wait_for(head, WAIT).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = projects
        .iter()
        .cloned()
        .map(|project| {
            let projections = projections.clone();
            let stop = stop.clone();
            let clock = clock.clone();
            tokio::spawn(async move {
                let mut reads = 0u32;
                let mut last_position = 0;
                while !stop.load(Ordering::SeqCst) {
                    let report = projections
                        .usage(&project, clock.now())
                        .await
                        .expect("readers never fail");
                    assert!(!report.resources.is_empty());
                    assert!(
                        report.position >= last_position,
                        "views never move backwards"
                    );
                    last_position = report.position;
                    reads += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                reads
            })
        })
        .collect();
    let writer = {
        let ledger = ledger.clone();
        let clock = clock.clone();
        let projects = projects.clone();
        tokio::spawn(async move { random_workload(&ledger, &clock, &projects, 300, 4).await })
    };
    projections
        .rebuild(Some("usage"), &|_, _| {})
        .await
        .unwrap();
    projections.rebuild(None, &|_, _| {}).await.unwrap();
    projections.request_rebuild("audit").await.unwrap();
    writer.await.unwrap();
    projections
        .rebuild(Some("audit"), &|_, _| {})
        .await
        .unwrap();
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        assert!(reader.await.unwrap() > 0);
    }
    assert_views_equal_replay(&*store, &projections, &projects, clock.now()).await;
    assert!(matches!(
        projections.request_rebuild("nope").await,
        Err(ProjectionError::UnknownProjection(_))
    ));
}

async fn a_crash_between_view_update_and_checkpoint_loses_and_repeats_nothing(
    store: Arc<dyn EventStore>,
) {
    let clock = Arc::new(ManualClock::new(start_time()));
    let ledger = ledger_on(store.clone(), clock.clone()).await;
    set_defaults(&ledger).await;
    // No follower: batches are applied by hand.
    let projections = Projections::open(store.clone()).await.unwrap();
    let projects = projects(3);
    random_workload(&ledger, &clock, &projects, 150, 5).await;
    let first = projections.catch_up().await.unwrap();
    random_workload(&ledger, &clock, &projects, 150, 6).await;

    projections.fail_next_batch_before_checkpoint();
    assert!(projections.catch_up().await.is_err());
    let status = projections.status().await.unwrap();
    assert!(status.iter().all(|s| s.position == first), "{status:?}");
    assert!(
        projections.verify().await.unwrap().is_empty(),
        "the failed batch left nothing behind"
    );

    projections.catch_up().await.unwrap();
    // Applying again finds nothing to do: no event counts twice.
    projections.catch_up().await.unwrap();
    assert_views_equal_replay(&*store, &projections, &projects, clock.now()).await;
}

async fn point_in_time_usage_matches_a_replay_cut_there(store: Arc<dyn EventStore>) {
    let (ledger, clock, projections) = setup(store.clone()).await;
    let projects = projects(2);
    let mut instants = vec![clock.now() - TimeDelta::seconds(1)];
    for round in 0..5 {
        random_workload(&ledger, &clock, &projects, 60, 10 + round).await;
        instants.push(clock.now());
        clock.advance(TimeDelta::milliseconds(1500));
        instants.push(clock.now() - TimeDelta::milliseconds(700));
    }
    for at in instants {
        let expected = replay(&*store, at, at).await;
        for project in &projects {
            let report = projections.usage_at(project, at).await.unwrap();
            let want: BTreeMap<_, _> = expected.get(project).cloned().unwrap_or_default();
            let want: BTreeMap<_, _> = if want.is_empty() {
                // Before the project's first event only the defaults exist.
                report
                    .resources
                    .iter()
                    .filter(|(_, u)| u.in_use == 0 && u.reserved == 0)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            } else {
                want
            };
            assert_eq!(report.resources, want, "{project} at {at}");
        }
    }
    // Now equals the live view.
    let head = store.head().await.unwrap();
    projections.wait_for(head, WAIT).await.unwrap();
    for project in &projects {
        let live = projections.usage(project, clock.now()).await.unwrap();
        let past = projections.usage_at(project, clock.now()).await.unwrap();
        assert_eq!(live.resources, past.resources);
    }
}

async fn audit_pages_and_filters(store: Arc<dyn EventStore>) {
    let (ledger, clock, projections) = setup(store.clone()).await;
    let project = p("audited");
    let limits: Limits = [(r("instances"), Limit::new(2).unwrap())].into();
    ledger
        .set_limits(&project, limits, false, &meta("admin"))
        .await
        .unwrap();
    let t0 = clock.now();
    let mut ids = Vec::new();
    for i in 0..3 {
        clock.advance(TimeDelta::seconds(10));
        let who = if i == 1 { "bob" } else { "alice" };
        if let Ok(view) = ledger
            .reserve(
                &project,
                None,
                deltas(&[("instances", 1), ("cores", 2)]),
                3600,
                &meta(who),
            )
            .await
        {
            ids.push(view.reservation_id);
        }
    }
    assert_eq!(ids.len(), 2, "the third is denied");
    clock.advance(TimeDelta::seconds(10));
    let t_commit = clock.now();
    ledger
        .commit(&project, ids[0], &meta("carol"))
        .await
        .unwrap();
    let last = ledger
        .release(&project, ids[1], &meta("carol"))
        .await
        .unwrap();
    projections.wait_for(last.position, WAIT).await.unwrap();

    // Everything, three at a time.
    let mut all = Vec::new();
    let mut query = AuditQuery {
        limit: Some(3),
        ..AuditQuery::default()
    };
    let mut pages = 0;
    loop {
        let page = projections.audit(&project, &query).await.unwrap();
        assert!(page.entries.len() <= 3);
        pages += 1;
        all.extend(page.entries);
        match page.next {
            Some(next) => query.cursor = Some(next),
            None => break,
        }
    }
    let types: Vec<&str> = all.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "LimitsSet",
            "ReservationRequested",
            "ReservationRequested",
            "ReservationDenied",
            "ReservationCommitted",
            "ReservationReleased"
        ]
    );
    assert_eq!(pages, 2);
    assert!(all.windows(2).all(|w| w[0].position < w[1].position));
    assert_eq!(
        all.iter().map(|e| e.version).collect::<Vec<_>>(),
        (0..6).collect::<Vec<u64>>()
    );
    let limits_set = &all[0];
    assert_eq!(limits_set.usage_after[&r("instances")].in_use, 0);
    let second = &all[2];
    assert_eq!(second.usage_after[&r("instances")].reserved, 2);
    assert_eq!(
        second.deltas,
        Some(deltas(&[("instances", 1), ("cores", 2)]))
    );
    let denied = &all[3];
    assert_eq!(
        denied.usage_after[&r("instances")].reserved,
        2,
        "the usage it was judged on"
    );
    let committed = &all[4];
    assert_eq!(committed.usage_after[&r("instances")].in_use, 1);
    assert_eq!(committed.usage_after[&r("instances")].reserved, 1);
    assert_eq!(
        committed.deltas,
        Some(deltas(&[("instances", 1), ("cores", 2)]))
    );
    assert_eq!(committed.actor.as_deref(), Some("carol"));
    assert!(committed.request_id.is_some());
    let released = &all[5];
    assert_eq!(released.reason.as_deref(), Some("rolled_back"));
    assert_eq!(released.usage_after[&r("cores")].reserved, 0);
    assert_eq!(released.usage_after[&r("cores")].in_use, 2);

    let only = |q: AuditQuery| {
        let projections = projections.clone();
        let project = project.clone();
        async move { projections.audit(&project, &q).await.unwrap().entries }
    };
    let by_type = only(AuditQuery {
        event_type: Some("ReservationRequested".into()),
        ..AuditQuery::default()
    })
    .await;
    assert_eq!(by_type.len(), 2);
    let by_reservation = only(AuditQuery {
        reservation: Some(ids[0]),
        ..AuditQuery::default()
    })
    .await;
    assert_eq!(
        by_reservation
            .iter()
            .map(|e| e.event_type.as_str())
            .collect::<Vec<_>>(),
        ["ReservationRequested", "ReservationCommitted"]
    );
    let by_actor = only(AuditQuery {
        actor: Some("bob".into()),
        ..AuditQuery::default()
    })
    .await;
    assert_eq!(by_actor.len(), 1);
    let by_time = only(AuditQuery {
        since: Some(t0 + TimeDelta::seconds(15)),
        until: Some(t_commit),
        ..AuditQuery::default()
    })
    .await;
    assert_eq!(by_time.len(), 4, "{by_time:?}");
    let other = projections
        .audit(&p("nobody"), &AuditQuery::default())
        .await
        .unwrap();
    assert!(other.entries.is_empty() && other.next.is_none());
    for garbage in [
        "",
        "zz",
        "not a cursor",
        "00ff",
        &hex_of("a1:-4"),
        &hex_of("a1:99999999999999999999"),
    ] {
        let bad = AuditQuery {
            cursor: Some(garbage.to_string()),
            ..AuditQuery::default()
        };
        assert!(
            matches!(
                projections.audit(&project, &bad).await,
                Err(ProjectionError::InvalidCursor)
            ),
            "{garbage:?}"
        );
    }
    // Page sizes are bounded.
    let huge = AuditQuery {
        limit: Some(1_000_000),
        ..AuditQuery::default()
    };
    assert_eq!(
        projections
            .audit(&project, &huge)
            .await
            .unwrap()
            .entries
            .len(),
        6
    );
}

fn hex_of(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

on_every_backend!(
    views_after_a_random_workload_equal_a_replay,
    holds_stop_counting_at_expiry_without_a_sweep,
    a_corrupted_row_is_reported_by_verify_and_repaired_by_rebuild,
    a_rebuild_while_writes_continue_ends_equal_to_a_replay,
    a_crash_between_view_update_and_checkpoint_loses_and_repeats_nothing,
    point_in_time_usage_matches_a_replay_cut_there,
    audit_pages_and_filters,
    a_waiting_reader_does_not_wait_for_events_to_gather,
);

/// Two nodes on one PostgreSQL database: two ledgers append concurrently (so commits
/// interleave), and both run the followers on the same view tables. Every event reaches the
/// views exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_nodes_writing_and_following_one_database() {
    let Some(url) = ledger::testing::postgres_url() else {
        return;
    };
    let schema = ledger::testing::postgres_schema(&url).await;
    let a = ledger::testing::postgres_store_in(&url, &schema).await;
    let b = ledger::testing::postgres_store_in(&url, &schema).await;
    let clock = Arc::new(ManualClock::new(start_time()));
    let ledger_a = ledger_on(a.clone(), clock.clone()).await;
    let ledger_b = ledger_on(b.clone(), clock.clone()).await;
    set_defaults(&ledger_a).await;
    ledger_b.refresh_defaults().await.unwrap();
    let (node_a, node_b) =
        tokio::join!(Projections::start(a.clone()), Projections::start(b.clone()));
    let (node_a, node_b) = (node_a.unwrap(), node_b.unwrap());
    let projects = projects(6);
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            let ledger = if i % 2 == 0 {
                ledger_a.clone()
            } else {
                ledger_b.clone()
            };
            let clock = clock.clone();
            let projects = projects.clone();
            tokio::spawn(
                async move { random_workload(&ledger, &clock, &projects, 120, 20 + i).await },
            )
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_views_equal_replay(&*a, &node_a, &projects, clock.now()).await;
    assert_views_equal_replay(&*b, &node_b, &projects, clock.now()).await;
    // Audit rows: one per event, none twice (the primary key would refuse a second anyway).
    let events = all_events(&*a).await;
    let mut rows = 0;
    for project in &projects {
        rows += node_b
            .audit(
                project,
                &AuditQuery {
                    limit: Some(1000),
                    ..AuditQuery::default()
                },
            )
            .await
            .unwrap()
            .entries
            .len();
    }
    assert_eq!(
        rows,
        events
            .iter()
            .filter(|e| e.stream != DEFAULTS_STREAM)
            .count()
    );
}

/// With the follower stopped, read-your-writes times out with a clear error.
#[tokio::test]
async fn wait_for_times_out_when_the_views_lag() {
    let (_dir, store) = ledger::testing::sqlite_store().await;
    let projections = Projections::open(store).await.unwrap();
    let err = projections
        .wait_for(5, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProjectionError::Timeout {
                wanted: 5,
                reached: 0,
                ..
            }
        ),
        "{err:?}"
    );
}

/// Opens the SQLite store at `path` (the events file; its views file is beside it).
async fn sqlite_store_at(path: &std::path::Path) -> Arc<dyn EventStore> {
    let url = format!("sqlite://{}", path.display());
    ledger::store::open(&url).await.unwrap()
}

/// Runs a workload with the views following it, then stops everything.
async fn sqlite_history(path: &std::path::Path, projects: &[ProjectId], steps: usize, seed: u64) {
    let store = sqlite_store_at(path).await;
    let (ledger, clock, projections) = setup(store.clone()).await;
    random_workload(&ledger, &clock, projects, steps, seed).await;
    assert_views_equal_replay(&*store, &projections, projects, clock.now()).await;
    drop((ledger, projections));
    // Let the follower see its shutdown before the files change under it.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

fn remove_sqlite_file(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
}

/// The views are derived data: with their file deleted, they are built again from the events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_deleted_views_file_is_built_again_from_the_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quota.db");
    let projects = projects(4);
    sqlite_history(&path, &projects, 150, 31).await;
    remove_sqlite_file(&projections::sqlite_views_path(&path));

    let store = sqlite_store_at(&path).await;
    let projections = Projections::start(store.clone()).await.unwrap();
    let now = start_time() + TimeDelta::days(1);
    assert_views_equal_replay(&*store, &projections, &projects, now).await;
}

/// A views file paired with another event file (the events file replaced, say by a backup)
/// describes other events: its rows are dropped and the views are built from these events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_views_of_another_event_file_are_not_applied_to_this_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("quota.db");
    let projects = projects(4);
    sqlite_history(&path, &projects, 200, 41).await;
    remove_sqlite_file(&path);
    // A shorter, different history: the old views' checkpoint lies beyond its head.
    sqlite_history(&path, &projects, 40, 42).await;

    let store = sqlite_store_at(&path).await;
    let projections = Projections::start(store.clone()).await.unwrap();
    let now = start_time() + TimeDelta::days(1);
    assert_views_equal_replay(&*store, &projections, &projects, now).await;
    for status in projections.status().await.unwrap() {
        assert!(status.position <= store.head().await.unwrap(), "{status:?}");
    }
}
