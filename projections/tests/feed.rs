//! The views' reader of the feed against what a store may hold: metadata with control
//! characters (older builds stored them), an event that does not decode, and a reader that
//! loses an event. On every backend (PostgreSQL skipped when `QUOTA_TEST_POSTGRES_URL` is not
//! set).

#[macro_use]
mod common;

use common::{deltas, p, r, WAIT};

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use domain::{Event, Limit, Limits, ReservationId};
use ledger::{
    Database, EventData, EventStore, ExpectedVersion, Ledger, LedgerConfig, ManualClock, Metadata,
    StreamAppend,
};
use projections::{AuditEntry, AuditQuery, Projections};

fn meta(actor: &str, request_id: &str) -> Metadata {
    Metadata {
        actor: Some(actor.into()),
        request_id: Some(request_id.into()),
        ..Metadata::default()
    }
}

async fn setup(store: Arc<dyn EventStore>) -> (Arc<Ledger>, Arc<Projections>) {
    let clock = Arc::new(ManualClock::new(
        Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap(),
    ));
    let ledger = Ledger::start(store.clone(), clock, LedgerConfig::default())
        .await
        .unwrap();
    let limits: Limits = [(r("instances"), Limit::new(20).unwrap())].into();
    ledger
        .set_defaults(&limits, &meta("admin", "setup"))
        .await
        .unwrap();
    let projections = Projections::start(store).await.unwrap();
    (ledger, projections)
}

/// Appends `events` to the project's stream as they are, behind the ledger's back (as an older
/// build, which did not check metadata, stored them).
async fn append_raw(store: &dyn EventStore, project: &str, events: Vec<(Event, Metadata)>) {
    let events = events
        .into_iter()
        .map(|(event, metadata)| EventData::encode(&event, metadata, Utc::now()))
        .collect();
    let results = store
        .append(vec![StreamAppend::new(
            p(project).stream(),
            ExpectedVersion::Any,
            events,
        )])
        .await
        .unwrap();
    assert!(!results[0].is_conflict());
}

async fn audit_of(projections: &Projections, project: &str) -> Vec<AuditEntry> {
    let query = AuditQuery {
        limit: Some(1000),
        ..AuditQuery::default()
    };
    projections
        .audit(&p(project), &query)
        .await
        .unwrap()
        .entries
}

async fn assert_caught_up_and_verified(store: &dyn EventStore, projections: &Projections) {
    let head = store.head().await.unwrap();
    projections.wait_for(head, WAIT).await.unwrap();
    let status = projections.status().await.unwrap();
    assert!(status.iter().all(|s| s.lag == 0), "{status:?}");
    assert!(
        projections.health().iter().all(|v| v.degraded.is_none()),
        "{:?}",
        projections.health()
    );
    let differences = projections.verify().await.unwrap();
    assert!(differences.is_empty(), "verify: {differences:?}");
}

/// The stalled-views reproduction: on SQLite the reader joined columns with char(30) and
/// char(31), so an actor holding U+001E stopped every view for good, and U+001F made the views
/// pass over the event. Whatever the metadata holds, every event reaches the views intact.
async fn control_characters_in_metadata_neither_stall_nor_skip(store: Arc<dyn EventStore>) {
    let (ledger, projections) = setup(store.clone()).await;
    let id = ReservationId(uuid::Uuid::now_v7());
    let mut hostile = vec![
        ("ev\u{1e}il", "req\u{1f}1"),
        ("a\u{1f}b\u{1e}c\u{1}", "\u{1e}"),
    ];
    if store.backend() == "sqlite" {
        // PostgreSQL's text cannot hold NUL; SQLite's can.
        hostile.push(("nul\u{0}actor", "nul\u{0}request"));
    }
    let mut events = vec![
        (
            Event::ReservationRequested {
                user: None,
                count: None,
                reservation_id: id,
                deltas: deltas(&[("instances", 2)]),
                expires_at: Utc.with_ymd_and_hms(2030, 1, 1, 0, 0, 0).unwrap(),
            },
            meta(hostile[0].0, hostile[0].1),
        ),
        (
            Event::ReservationCommitted { reservation_id: id },
            meta(hostile[1].0, hostile[1].1),
        ),
    ];
    if let Some((actor, request_id)) = hostile.get(2) {
        events.push((
            Event::LimitsSet {
                limits: [(r("instances"), Limit::new(9).unwrap())].into(),
                forced: false,
            },
            meta(actor, request_id),
        ));
    }
    append_raw(&*store, "hostile", events).await;
    // Events after them are applied too.
    ledger
        .reserve(
            &p("after"),
            None,
            deltas(&[("instances", 1)]),
            60,
            &meta("alice", "req-2"),
        )
        .await
        .unwrap();

    assert_caught_up_and_verified(&*store, &projections).await;
    let entries = audit_of(&projections, "hostile").await;
    let stored: Vec<(Option<&str>, Option<&str>)> = entries
        .iter()
        .map(|e| (e.actor.as_deref(), e.request_id.as_deref()))
        .collect();
    let sent: Vec<(Option<&str>, Option<&str>)> = hostile
        .iter()
        .map(|(actor, request_id)| (Some(*actor), Some(*request_id)))
        .collect();
    assert_eq!(stored, sent);
    let usage = projections.usage(&p("hostile"), Utc::now()).await.unwrap();
    assert_eq!(usage.resources[&r("instances")].in_use, 2);
    assert_eq!(audit_of(&projections, "after").await.len(), 1);
}

/// `verify` reads the events by a path of its own: a views reader that loses an event is
/// caught, not repeated.
async fn verify_reports_an_event_the_views_reader_lost(store: Arc<dyn EventStore>) {
    let (ledger, projections) = setup(store.clone()).await;
    let project = p("lossy");
    let kept = ledger
        .reserve(
            &project,
            None,
            deltas(&[("instances", 1)]),
            3600,
            &meta("alice", "req-1"),
        )
        .await
        .unwrap();
    projections.wait_for(kept.position, WAIT).await.unwrap();
    assert!(projections.verify().await.unwrap().is_empty());

    let lost_position = store.head().await.unwrap() + 1;
    projections.drop_event_from_feed(lost_position);
    let lost = ledger
        .reserve(
            &project,
            None,
            deltas(&[("instances", 3)]),
            3600,
            &meta("bob", "req-2"),
        )
        .await
        .unwrap();
    assert_eq!(lost.position, lost_position);
    projections.wait_for(lost.position, WAIT).await.unwrap();

    let differences = projections.verify().await.unwrap();
    let position = i64::try_from(lost_position).unwrap();
    assert!(
        differences.iter().any(|d| d.view == "audit"
            && d.field == "position"
            && d.stored.is_none()
            && d.expected == Some(position)),
        "{differences:?}"
    );
    assert!(
        differences.iter().any(|d| d.view == "usage"
            && d.project == "lossy"
            && d.field == "held_reservations"
            && d.stored == Some(1)
            && d.expected == Some(2)),
        "{differences:?}"
    );
}

/// Raw SQL on the store's own tables (as an operator, or a future build, would).
async fn execute_on_events(store: &dyn EventStore, sql: &str) {
    match store.database() {
        Database::Sqlite(pool) => {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        Database::Postgres(pool) => {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
    }
}

/// An event that does not decode (a type from a newer build, say) is never passed over: the
/// views stop right before it, say why, count the failures and retry; once it reads, they go on.
async fn an_undecodable_event_holds_the_views_and_is_retried(store: Arc<dyn EventStore>) {
    let (ledger, projections) = setup(store.clone()).await;
    let before = ledger
        .reserve(
            &p("early"),
            None,
            deltas(&[("instances", 1)]),
            60,
            &meta("alice", "req-1"),
        )
        .await
        .unwrap();
    projections.wait_for(before.position, WAIT).await.unwrap();
    let bad = store.head().await.unwrap() + 1;
    execute_on_events(
        &*store,
        &ledger::testing::undecodable_event_sql(store.backend(), &bad.to_string()),
    )
    .await;
    let after = ledger
        .reserve(
            &p("late"),
            None,
            deltas(&[("instances", 1)]),
            60,
            &meta("bob", "req-2"),
        )
        .await
        .unwrap();
    assert!(after.position > bad);

    let timeout = projections
        .wait_for(after.position, Duration::from_millis(1500))
        .await;
    assert!(timeout.is_err(), "the views moved past an unreadable event");
    let status = projections.status().await.unwrap();
    assert!(status.iter().all(|s| s.position == bad - 1), "{status:?}");
    let health = projections.health();
    assert_eq!(health.len(), 2);
    for view in &health {
        assert!(view.failures >= 2, "retried: {view:?}");
        let reason = view.degraded.as_deref().unwrap_or_default();
        assert!(reason.contains(&format!("position {bad}")), "{view:?}");
    }

    // Repaired (an operator's fix, or a build that reads the type), the views go on from it.
    execute_on_events(
        &*store,
        &format!("UPDATE events SET event_type = 'LimitsReset' WHERE position = {bad}"),
    )
    .await;
    projections.wait_for(after.position, WAIT).await.unwrap();
    assert_caught_up_and_verified(&*store, &projections).await;
    let strange = audit_of(&projections, "strange").await;
    assert_eq!(strange.len(), 1);
    assert_eq!(strange[0].position, bad);
}

on_every_backend!(
    control_characters_in_metadata_neither_stall_nor_skip,
    verify_reports_an_event_the_views_reader_lost,
    an_undecodable_event_holds_the_views_and_is_retried,
);
