//! A project's reservation list (`Projections::reservations`): every reservation as the
//! ledger itself answers it, in the order they were made, filtered by status and age, paged;
//! a status filter that passes over more reservations than a page looks at; and the project
//! list (`Projections::projects`). On every
//! backend (PostgreSQL skipped when `QUOTA_TEST_POSTGRES_URL` is not set).

#[macro_use]
mod common;

use common::{deltas, p, r, WAIT};

use std::sync::Arc;

use chrono::{TimeDelta, TimeZone, Utc};
use domain::{Event, Limit, Limits, ReservationId, Timestamp};
use ledger::{
    EventData, EventStore, ExpectedVersion, Ledger, LedgerConfig, ManualClock, Metadata,
    ReservationView, StreamAppend,
};
use projections::{
    ListedReservation, ProjectQuery, ProjectionError, Projections, ReservationQuery, StatusFilter,
};
use uuid::Uuid;

fn meta() -> Metadata {
    Metadata {
        actor: Some("tester".into()),
        ..Metadata::default()
    }
}

fn start_time() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
}

async fn setup(store: Arc<dyn EventStore>) -> (Arc<Ledger>, Arc<ManualClock>, Arc<Projections>) {
    let clock = Arc::new(ManualClock::new(start_time()));
    let ledger = Ledger::start(store.clone(), clock.clone(), LedgerConfig::default())
        .await
        .unwrap();
    let limits: Limits = [(r("instances"), Limit::new(100).unwrap())].into();
    ledger.set_defaults(&limits, &meta()).await.unwrap();
    let projections = Projections::start(store).await.unwrap();
    (ledger, clock, projections)
}

async fn list(projections: &Projections, query: ReservationQuery) -> Vec<ListedReservation> {
    let page = projections.reservations(&p("acme"), &query).await.unwrap();
    page.reservations
}

fn ids(listed: &[ListedReservation]) -> Vec<ReservationId> {
    listed.iter().map(|r| r.reservation_id).collect()
}

fn query(status: Option<StatusFilter>) -> ReservationQuery {
    ReservationQuery {
        status,
        ..ReservationQuery::default()
    }
}

/// The list shows each reservation exactly as the ledger answers `GET …/reservations/{id}`.
fn assert_same(listed: &ListedReservation, view: &ReservationView) {
    assert_eq!(listed.reservation_id, view.reservation_id);
    assert_eq!(listed.deltas, view.deltas);
    assert_eq!(listed.status, view.status);
    assert_eq!(listed.created_at, view.created_at);
    assert_eq!(listed.expires_at, view.expires_at);
    assert_eq!(listed.position, view.position);
}

async fn reservations_are_listed_filtered_and_paged(store: Arc<dyn EventStore>) {
    let (ledger, clock, projections) = setup(store.clone()).await;
    let acme = p("acme");
    // Seven reservations a minute apart; then r1 committed, r2 committed and freed, r3 rolled
    // back. Another project's reservation is never listed.
    let mut made = Vec::new();
    for i in 0..7 {
        let view = ledger
            .reserve(&acme, None, deltas(&[("instances", i + 1)]), 3600, &meta())
            .await
            .unwrap();
        made.push(view.reservation_id);
        clock.advance(TimeDelta::minutes(1));
    }
    ledger
        .reserve(&p("other"), None, deltas(&[("instances", 1)]), 60, &meta())
        .await
        .unwrap();
    ledger.commit(&acme, made[1], &meta()).await.unwrap();
    ledger.commit(&acme, made[2], &meta()).await.unwrap();
    ledger.release(&acme, made[2], &meta()).await.unwrap();
    ledger.release(&acme, made[3], &meta()).await.unwrap();
    projections
        .wait_for(store.head().await.unwrap(), WAIT)
        .await
        .unwrap();

    let all = list(&projections, query(None)).await;
    assert_eq!(ids(&all), made, "every reservation, in the order made");
    for listed in &all {
        let view = ledger
            .reservation(&acme, listed.reservation_id)
            .await
            .unwrap();
        assert_same(listed, &view);
    }

    let of = |indexes: &[usize]| indexes.iter().map(|i| made[*i]).collect::<Vec<_>>();
    let held = list(&projections, query(Some(StatusFilter::Held))).await;
    assert_eq!(ids(&held), of(&[0, 4, 5, 6]));
    let committed = list(&projections, query(Some(StatusFilter::Committed))).await;
    assert_eq!(ids(&committed), of(&[1]));
    let released = list(&projections, query(Some(StatusFilter::Released))).await;
    assert_eq!(ids(&released), of(&[2, 3]));

    // Orphaned holds: held, made before r4 was (at +4 min).
    let old_holds = ReservationQuery {
        status: Some(StatusFilter::Held),
        older_than: Some(start_time() + TimeDelta::seconds(4 * 60 + 30)),
        ..ReservationQuery::default()
    };
    assert_eq!(ids(&list(&projections, old_holds).await), of(&[0, 4]));

    // Pages of two, and of three held ones, follow on without a gap or a repeat.
    for (status, size, expected) in [
        (None, 2, of(&[0, 1, 2, 3, 4, 5, 6])),
        (Some(StatusFilter::Held), 3, of(&[0, 4, 5, 6])),
    ] {
        let mut seen = Vec::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let page = projections
                .reservations(
                    &acme,
                    &ReservationQuery {
                        status,
                        limit: Some(size),
                        cursor,
                        ..ReservationQuery::default()
                    },
                )
                .await
                .unwrap();
            assert!(page.reservations.len() <= size);
            seen.extend(ids(&page.reservations));
            pages += 1;
            cursor = page.next;
            if cursor.is_none() {
                break;
            }
        }
        assert_eq!(seen, expected);
        assert_eq!(pages, expected.len().div_ceil(size));
    }

    // No reservation names a user yet; a bad cursor is refused.
    let for_user = ReservationQuery {
        user: Some(domain::UserId::parse("alice").unwrap()),
        ..ReservationQuery::default()
    };
    assert!(list(&projections, for_user).await.is_empty());
    let bad = ReservationQuery {
        cursor: Some(projections::encode_cursor(1)),
        ..ReservationQuery::default()
    };
    let refused = projections.reservations(&acme, &bad).await;
    assert!(
        matches!(refused, Err(ProjectionError::InvalidCursor)),
        "{refused:?}"
    );
}

/// A status filter looks at a bounded number of reservations per page: past them, it answers
/// what it found with a cursor, and the next page goes on from there.
async fn a_filtered_page_stops_at_its_scan_bound(store: Arc<dyn EventStore>) {
    let (_ledger, _clock, projections) = setup(store.clone()).await;
    let committed_first = projections::limits::SCAN_RESERVATIONS + 5;
    let expires_at = start_time() + TimeDelta::hours(1);
    let mut events = Vec::new();
    let requested = |id: ReservationId| {
        EventData::encode(
            &Event::ReservationRequested {
                user: None,
                count: None,
                reservation_id: id,
                deltas: deltas(&[("instances", 1)]),
                expires_at,
            },
            meta(),
            start_time(),
        )
    };
    for _ in 0..committed_first {
        let id = ReservationId(Uuid::now_v7());
        events.push(requested(id));
        let committed = Event::ReservationCommitted { reservation_id: id };
        events.push(EventData::encode(&committed, meta(), start_time()));
    }
    let held = ReservationId(Uuid::now_v7());
    events.push(requested(held));
    for chunk in events.chunks(1000) {
        let append = StreamAppend::new(p("acme").stream(), ExpectedVersion::Any, chunk.to_vec());
        let results = store.append(vec![append]).await.unwrap();
        assert!(!results[0].is_conflict());
    }
    projections
        .wait_for(store.head().await.unwrap(), WAIT)
        .await
        .unwrap();

    let mut cursor = None;
    let mut found = Vec::new();
    let mut pages = 0;
    loop {
        let page = projections
            .reservations(
                &p("acme"),
                &ReservationQuery {
                    status: Some(StatusFilter::Held),
                    cursor,
                    ..ReservationQuery::default()
                },
            )
            .await
            .unwrap();
        if pages == 0 {
            assert!(
                page.reservations.is_empty(),
                "the first page saw only commits"
            );
            assert!(page.next.is_some(), "and says where to go on");
        }
        found.extend(ids(&page.reservations));
        pages += 1;
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(found, vec![held]);
    assert_eq!(pages, 2);
}

on_every_backend!(
    reservations_are_listed_filtered_and_paged,
    a_filtered_page_stops_at_its_scan_bound,
    projects_are_listed_in_order,
);

/// The project list (issue 20's `GET /v1/projects`): every project with an event, in id order,
/// filtered by prefix, paged; never the defaults' stream.
async fn projects_are_listed_in_order(store: Arc<dyn EventStore>) {
    let (ledger, _clock, projections) = setup(store.clone()).await;
    let names = ["acme", "acme-dev", "beta", "acme.prod", "zeta", "a"];
    for name in names {
        ledger
            .reserve(&p(name), None, deltas(&[("instances", 1)]), 60, &meta())
            .await
            .unwrap();
    }
    projections
        .wait_for(store.head().await.unwrap(), WAIT)
        .await
        .unwrap();
    let page = |prefix: Option<&str>, limit: Option<usize>, cursor: Option<String>| {
        let query = ProjectQuery {
            prefix: prefix.map(str::to_owned),
            limit,
            cursor,
        };
        let projections = projections.clone();
        async move { projections.projects(&query).await.unwrap() }
    };
    let all = page(None, None, None).await;
    assert_eq!(
        all.projects,
        ["a", "acme", "acme-dev", "acme.prod", "beta", "zeta"]
    );
    assert_eq!(all.next, None);
    let acme = page(Some("acme"), None, None).await;
    assert_eq!(acme.projects, ["acme", "acme-dev", "acme.prod"]);
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let next = page(Some("a"), Some(2), cursor).await;
        assert!(next.projects.len() <= 2);
        seen.extend(next.projects);
        cursor = next.next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(seen, ["a", "acme", "acme-dev", "acme.prod"]);
    assert!(page(Some("q"), None, None).await.projects.is_empty());
}
