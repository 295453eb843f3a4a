//! The pipeline over a real store: answers, positions, idempotency, expiry with a driven
//! clock, cache eviction, and two ledgers writing one SQLite file.

use std::sync::Arc;

use chrono::{TimeDelta, TimeZone, Utc};
use domain::{
    Deltas, Limit, Limits, ProjectId, Refusal, ReleaseReason, ReservationId, ReservationStatus,
    ResourceName,
};
use ledger::sweeper::Sweeper;
use ledger::{
    testing, EventStore, Ledger, LedgerConfig, LedgerError, LimitSource, ManualClock, Metadata,
    SystemClock,
};
use uuid::Uuid;

fn r(s: &str) -> ResourceName {
    ResourceName::parse(s).unwrap()
}

fn p(s: &str) -> ProjectId {
    ProjectId::parse(s).unwrap()
}

fn one(res: &str, n: i64) -> Deltas {
    Deltas::new([(r(res), n)].into()).unwrap()
}

fn limits(pairs: &[(&str, i64)]) -> Limits {
    pairs
        .iter()
        .map(|(k, v)| (r(k), Limit::new(*v).unwrap()))
        .collect()
}

/// One instance for 60 s, with a new id.
async fn reserve_an_instance(
    ledger: &Ledger,
    project: &ProjectId,
) -> Result<ledger::ReservationView, LedgerError> {
    ledger
        .reserve(project, None, one("instances", 1), 60, &Metadata::default())
        .await
}

async fn with_clock(
    store: Arc<dyn EventStore>,
    clock: Arc<ManualClock>,
    config: LedgerConfig,
) -> Arc<Ledger> {
    let ledger = Ledger::start(store, clock, config).await.unwrap();
    ledger
        .set_defaults(
            &limits(&[("instances", 3), ("cores", 8)]),
            &Metadata::default(),
        )
        .await
        .unwrap();
    ledger
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap(),
    ))
}

#[tokio::test]
async fn a_boot_reserves_commits_and_frees_with_positions() {
    let (_dir, store) = testing::sqlite_store().await;
    let ledger = with_clock(store.clone(), clock(), LedgerConfig::default()).await;
    let meta = Metadata {
        actor: Some("alice".into()),
        request_id: Some("r1".into()),
        correlation_id: None,
        principal: None,
    };
    let held = ledger
        .reserve(&p("acme"), None, one("instances", 1), 60, &meta)
        .await
        .unwrap();
    assert_eq!(held.status, ReservationStatus::Held);
    assert_eq!(held.expires_at - held.created_at, TimeDelta::seconds(60));
    let committed = ledger
        .commit(&p("acme"), held.reservation_id, &meta)
        .await
        .unwrap();
    assert_eq!(committed.status, ReservationStatus::Committed);
    assert!(committed.position > held.position);
    // Idempotent commit: same answer, same position, nothing appended.
    let head = store.head().await.unwrap();
    assert_eq!(
        ledger
            .commit(&p("acme"), held.reservation_id, &meta)
            .await
            .unwrap(),
        committed
    );
    assert_eq!(store.head().await.unwrap(), head);
    let freed = ledger
        .release(&p("acme"), held.reservation_id, &meta)
        .await
        .unwrap();
    assert_eq!(
        freed.status,
        ReservationStatus::Released(ReleaseReason::Freed)
    );
    assert_eq!(
        ledger
            .reservation(&p("acme"), held.reservation_id)
            .await
            .unwrap(),
        freed
    );
    // The events carry the metadata and the positions match the log.
    let stored = store.read_stream("project-acme", 0, 10).await.unwrap();
    assert_eq!(stored.len(), 3);
    assert_eq!(stored[2].position, freed.position);
    assert_eq!(stored[0].event.metadata.actor.as_deref(), Some("alice"));
}

#[tokio::test]
async fn client_chosen_ids_make_reserve_idempotent_across_restarts() {
    let (_dir, store) = testing::sqlite_store().await;
    let id = ReservationId(Uuid::now_v7());
    let first = {
        let ledger = with_clock(store.clone(), clock(), LedgerConfig::default()).await;
        ledger
            .reserve(
                &p("acme"),
                Some(id),
                one("instances", 3),
                60,
                &Metadata::default(),
            )
            .await
            .unwrap()
    };
    // A new process with an empty cache: the retry finds the original in the stream.
    let ledger = Ledger::start(store.clone(), clock(), LedgerConfig::default())
        .await
        .unwrap();
    let again = ledger
        .reserve(
            &p("acme"),
            Some(id),
            one("instances", 3),
            60,
            &Metadata::default(),
        )
        .await
        .unwrap();
    assert_eq!(again, first);
    assert!(matches!(
        ledger
            .reserve(
                &p("acme"),
                Some(id),
                one("instances", 2),
                60,
                &Metadata::default()
            )
            .await,
        Err(LedgerError::Refused(Refusal::IdempotencyMismatch))
    ));
}

#[tokio::test]
async fn the_sweeper_records_expiry_and_late_commits_are_refused() {
    let (_dir, store) = testing::sqlite_store().await;
    let clock = clock();
    let ledger = with_clock(store.clone(), clock.clone(), LedgerConfig::default()).await;
    let short = ledger
        .reserve(&p("a"), None, one("instances", 2), 10, &Metadata::default())
        .await
        .unwrap();
    let long = ledger
        .reserve(
            &p("b"),
            None,
            one("instances", 1),
            100,
            &Metadata::default(),
        )
        .await
        .unwrap();
    let mut sweeper = Sweeper::new(ledger.clone());
    assert_eq!(sweeper.sweep().await.unwrap(), 0);
    assert_eq!(sweeper.holds(), 2);
    clock.advance(TimeDelta::seconds(10));
    // Expired holds stop counting at once, before the sweeper runs.
    ledger
        .reserve(&p("a"), None, one("instances", 3), 10, &Metadata::default())
        .await
        .unwrap();
    assert_eq!(sweeper.sweep().await.unwrap(), 1);
    let swept = ledger
        .reservation(&p("a"), short.reservation_id)
        .await
        .unwrap();
    assert_eq!(
        swept.status,
        ReservationStatus::Released(ReleaseReason::Expired)
    );
    assert!(matches!(
        ledger
            .commit(&p("a"), short.reservation_id, &Metadata::default())
            .await,
        Err(LedgerError::Refused(Refusal::ReservationExpired))
    ));
    assert_eq!(
        ledger
            .reservation(&p("b"), long.reservation_id)
            .await
            .unwrap()
            .status,
        ReservationStatus::Held
    );
    let stored = store.read_stream("project-a", 0, 10).await.unwrap();
    assert_eq!(
        stored
            .iter()
            .filter(|e| e.event.event_type == "ReservationReleased")
            .count(),
        1
    );
    assert_eq!(
        stored.last().unwrap().event.metadata.actor.as_deref(),
        Some("sweeper")
    );
}

#[tokio::test]
async fn limits_answer_effective_values_and_positions() {
    let (_dir, store) = testing::sqlite_store().await;
    let ledger = with_clock(store.clone(), clock(), LedgerConfig::default()).await;
    let empty = ledger.limits(&p("acme")).await.unwrap();
    assert_eq!(empty.position, 0);
    assert_eq!(
        empty.limits[&r("cores")],
        (Limit::new(8).unwrap(), LimitSource::Default)
    );
    let set = ledger
        .set_limits(
            &p("acme"),
            limits(&[("cores", 2)]),
            false,
            &Metadata::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        set.limits[&r("cores")],
        (Limit::new(2).unwrap(), LimitSource::Project)
    );
    assert_eq!(set.position, store.head().await.unwrap());
    // Read back by a fresh process: same position.
    let fresh = Ledger::start(store.clone(), clock(), LedgerConfig::default())
        .await
        .unwrap();
    assert_eq!(fresh.limits(&p("acme")).await.unwrap(), set);
    ledger
        .reserve(&p("acme"), None, one("cores", 2), 60, &Metadata::default())
        .await
        .unwrap();
    assert!(matches!(
        ledger
            .set_limits(
                &p("acme"),
                limits(&[("cores", 1)]),
                false,
                &Metadata::default()
            )
            .await,
        Err(LedgerError::Refused(Refusal::LimitBelowUsage(_)))
    ));
    assert!(matches!(
        ledger
            .set_limits(
                &p("acme"),
                limits(&[("gpus", 1)]),
                false,
                &Metadata::default()
            )
            .await,
        Err(LedgerError::Refused(Refusal::UnknownResource(_)))
    ));
    let reset = ledger
        .reset_limits(&p("acme"), &Metadata::default())
        .await
        .unwrap();
    assert_eq!(reset.limits[&r("cores")].1, LimitSource::Default);
}

#[tokio::test]
async fn evicted_projects_reload_from_their_streams() {
    let (_dir, store) = testing::sqlite_store().await;
    let config = LedgerConfig {
        cache_capacity: 10,
        ..LedgerConfig::default()
    };
    let ledger = with_clock(store, clock(), config).await;
    let mut ids = vec![];
    for i in 0..50 {
        let view = ledger
            .reserve(
                &p(&format!("p{i}")),
                None,
                one("instances", 3),
                60,
                &Metadata::default(),
            )
            .await
            .unwrap();
        ids.push(view.reservation_id);
    }
    assert!(ledger.cached_projects() <= 10);
    for (i, id) in ids.iter().enumerate() {
        let project = p(&format!("p{i}"));
        // Full: the reloaded state still counts the hold.
        assert!(ledger
            .reserve(
                &project,
                None,
                one("instances", 1),
                60,
                &Metadata::default()
            )
            .await
            .is_err());
        assert_eq!(
            ledger
                .commit(&project, *id, &Metadata::default())
                .await
                .unwrap()
                .status,
            ReservationStatus::Committed
        );
    }
}

/// A state keeps every reservation its project ever had, so the cache is bounded by the
/// reservations it holds as well as by projects.
#[tokio::test]
async fn the_cache_is_bounded_by_the_reservations_it_holds() {
    let (_dir, store) = testing::sqlite_store().await;
    let max_reservations = 20;
    let config = LedgerConfig {
        cache_max_reservations: max_reservations,
        ..LedgerConfig::default()
    };
    let ledger = with_clock(store, clock(), config).await;
    let reservations_each = 3;
    let mut ids = vec![];
    for i in 0..30 {
        let project = p(&format!("p{i}"));
        for _ in 0..reservations_each {
            let view = reserve_an_instance(&ledger, &project).await.unwrap();
            ids.push((project.clone(), view.reservation_id));
        }
        // Checked before each request: past it by at most what one request added.
        assert!(
            ledger.cached_reservations() <= max_reservations + 1,
            "{} cached reservations",
            ledger.cached_reservations()
        );
    }
    assert!(ledger.cached_projects() < 30);
    for (project, id) in &ids {
        // Full (3 of 3 held): the reloaded state still counts the holds.
        assert!(reserve_an_instance(&ledger, project).await.is_err());
        assert_eq!(
            ledger
                .commit(project, *id, &Metadata::default())
                .await
                .unwrap()
                .status,
            ReservationStatus::Committed
        );
    }
}

/// The cache's count of reservations follows the states through requests, commits, releases
/// and reloads.
#[tokio::test]
async fn the_cache_counts_the_reservations_of_its_states() {
    let (_dir, store) = testing::sqlite_store().await;
    let ledger = with_clock(store.clone(), clock(), LedgerConfig::default()).await;
    let mut made = 0;
    for i in 0..5 {
        let project = p(&format!("p{i}"));
        let first = reserve_an_instance(&ledger, &project).await.unwrap();
        let second = reserve_an_instance(&ledger, &project).await.unwrap();
        ledger
            .commit(&project, first.reservation_id, &Metadata::default())
            .await
            .unwrap();
        ledger
            .release(&project, second.reservation_id, &Metadata::default())
            .await
            .unwrap();
        made += 2;
        assert_eq!(ledger.cached_reservations(), made);
    }
    // A second ledger on the same store loads the states from their streams.
    let reloaded = with_clock(store, clock(), LedgerConfig::default()).await;
    for i in 0..5 {
        reloaded.project_state(&p(&format!("p{i}"))).await.unwrap();
    }
    assert_eq!(reloaded.cached_reservations(), made);
}

/// Two processes on one SQLite file: each one's cached state goes stale when the other
/// writes; the expected-version check catches it and the pipeline decides again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_ledgers_on_one_file_never_oversubscribe() {
    let (dir, store_a) = testing::sqlite_store().await;
    let url = format!("sqlite://{}", dir.path().join("ledger.db").display());
    let store_b: Arc<dyn EventStore> =
        Arc::new(ledger::store::SqliteStore::open(&url).await.unwrap());
    let a = Ledger::start(store_a, Arc::new(SystemClock), LedgerConfig::default())
        .await
        .unwrap();
    a.set_defaults(&limits(&[("instances", 25)]), &Metadata::default())
        .await
        .unwrap();
    let b = Ledger::start(store_b, Arc::new(SystemClock), LedgerConfig::default())
        .await
        .unwrap();
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let ledger = if i % 2 == 0 { a.clone() } else { b.clone() };
            tokio::spawn(async move {
                ledger
                    .reserve(
                        &p("shared"),
                        None,
                        one("instances", 1),
                        60,
                        &Metadata::default(),
                    )
                    .await
            })
        })
        .collect();
    let mut granted = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => granted += 1,
            Err(LedgerError::Refused(Refusal::OverQuota { .. })) => {}
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(granted, 25);
}
