//! Principals: who was authenticated when an event was appended. Stored beside the event on both
//! backends, on every append path, read back by every read; events stored before the column
//! existed read as unknown (`None`), never as a guess; the sweeper's expiries are
//! `system:sweeper`'s.

use std::sync::Arc;

use chrono::{TimeDelta, TimeZone, Utc};
use domain::{Deltas, Event, Limit, ProjectId, ResourceName};
use ledger::sweeper::{Sweeper, SWEEPER_PRINCIPAL};
use ledger::{
    testing, EventData, EventStore, ExpectedVersion, Ledger, LedgerConfig, ManualClock, Metadata,
    StreamAppend,
};
use sqlx::Connection as _;
use uuid::Uuid;

fn meta(principal: Option<&str>) -> Metadata {
    Metadata {
        actor: Some("alice".into()),
        request_id: Some("req-1".into()),
        correlation_id: None,
        principal: principal.map(str::to_owned),
    }
}

fn limits_reset(principal: Option<&str>) -> EventData {
    let at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    EventData::encode(&Event::LimitsReset, meta(principal), at)
}

async fn append(store: &dyn EventStore, expected: ExpectedVersion, event: EventData) {
    let results = store
        .append(vec![StreamAppend::new(
            "project-acme",
            expected,
            vec![event],
        )])
        .await
        .expect("append");
    assert!(!results[0].is_conflict(), "{results:?}");
}

async fn principals(store: &dyn EventStore) -> Vec<Option<String>> {
    let all = store.read_all(0, 100).await.expect("read_all");
    let stream = store
        .read_stream("project-acme", 0, 100)
        .await
        .expect("read_stream");
    let of = |events: &[ledger::RecordedEvent]| -> Vec<Option<String>> {
        events
            .iter()
            .map(|e| e.event.metadata.principal.clone())
            .collect()
    };
    assert_eq!(of(&all), of(&stream), "both reads agree");
    of(&all)
}

/// Every append path (the checked one, then the speculative one) stores the principal.
async fn stored_and_read_back(store: Arc<dyn EventStore>) {
    append(
        &*store,
        ExpectedVersion::NoStream,
        limits_reset(Some("admin")),
    )
    .await;
    append(&*store, ExpectedVersion::Exact(0), limits_reset(None)).await;
    append(
        &*store,
        ExpectedVersion::Exact(1),
        limits_reset(Some("project:acme")),
    )
    .await;
    assert_eq!(
        principals(&*store).await,
        [Some("admin".into()), None, Some("project:acme".into())]
    );
}

#[tokio::test]
async fn principals_are_stored_and_read_back_sqlite() {
    let (_dir, store) = testing::sqlite_store().await;
    stored_and_read_back(store).await;
}

#[tokio::test]
async fn principals_are_stored_and_read_back_postgres() {
    if let Some((_schema, store)) = testing::postgres_store().await {
        stored_and_read_back(store).await;
    }
}

const OLD_INSERT: &str = "INSERT INTO events (position, stream, version, event_id, event_type, \
     schema_version, data, actor, request_id, correlation_id, recorded_at_ms) \
     VALUES (1, 'project-acme', 0, $1, 'LimitsReset', 1, $2, 'alice', 'req-0', NULL, 0)";

/// After an old event (the database as a build before principals left it), a new one; both
/// read back, the old one as unknown.
async fn old_then_new(store: Arc<dyn EventStore>) {
    append(
        &*store,
        ExpectedVersion::Exact(0),
        limits_reset(Some("admin")),
    )
    .await;
    append(
        &*store,
        ExpectedVersion::Exact(1),
        limits_reset(Some("auditor")),
    )
    .await;
    assert_eq!(
        principals(&*store).await,
        [None, Some("admin".into()), Some("auditor".into())]
    );
}

#[tokio::test]
async fn events_from_before_principals_read_as_unknown_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let mut conn = testing::sqlite_events_file_before(&path, 5).await;
    let data = domain::encode(&Event::LimitsReset).data.to_string();
    sqlx::query(OLD_INSERT)
        .bind(Uuid::now_v7())
        .bind(data)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    let url = format!("sqlite://{}", path.display());
    let store = Arc::new(ledger::store::SqliteStore::open(&url).await.unwrap());
    old_then_new(store).await;
}

#[tokio::test]
async fn events_from_before_principals_read_as_unknown_postgres() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let schema = testing::postgres_schema(&url).await;
    let in_schema = testing::postgres_url_in(&url, &schema);
    let mut conn = sqlx::PgConnection::connect(&in_schema).await.unwrap();
    let old = testing::migrations_before(sqlx::migrate!("../migrations/postgres"), 6);
    old.run(&mut conn).await.unwrap();
    sqlx::query(OLD_INSERT)
        .bind(Uuid::now_v7())
        .bind(sqlx::types::Json(domain::encode(&Event::LimitsReset).data))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();

    let store = testing::postgres_store_in(&url, &schema).await;
    old_then_new(store).await;
}

fn one_instance() -> Deltas {
    Deltas::new([(ResourceName::parse("instances").unwrap(), 1)].into()).unwrap()
}

/// The pipeline keeps the caller's principal (bounded like the actor); the sweeper's expiries
/// are recorded as `system:sweeper`, whoever made the hold.
async fn sweeper_and_pipeline(store: Arc<dyn EventStore>) {
    let clock = Arc::new(ManualClock::new(
        Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap(),
    ));
    let ledger = Ledger::start(store.clone(), clock.clone(), LedgerConfig::default())
        .await
        .unwrap();
    let instances = ResourceName::parse("instances").unwrap();
    ledger
        .set_defaults(
            &[(instances, Limit::new(5).unwrap())].into(),
            &meta(Some("admin")),
        )
        .await
        .unwrap();
    let project = ProjectId::parse("acme").unwrap();
    ledger
        .reserve(
            &project,
            None,
            one_instance(),
            60,
            &meta(Some("project:acme")),
        )
        .await
        .unwrap();
    let long = "p".repeat(1000);
    ledger
        .reserve(&project, None, one_instance(), 600, &meta(Some(&long)))
        .await
        .unwrap();
    clock.advance(TimeDelta::seconds(61));
    let mut sweeper = Sweeper::new(ledger.clone());
    assert_eq!(sweeper.sweep().await.unwrap(), 1);

    let events = store.read_all(0, 100).await.unwrap();
    let seen: Vec<(&str, Option<&str>)> = events
        .iter()
        .map(|e| {
            (
                e.event.event_type.as_str(),
                e.event.metadata.principal.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("DefaultLimitsSet", Some("admin")),
            ("ReservationRequested", Some("project:acme")),
            ("ReservationRequested", Some(&long[..256])),
            ("ReservationReleased", Some(SWEEPER_PRINCIPAL)),
        ]
    );
    assert_eq!(SWEEPER_PRINCIPAL, "system:sweeper");
}

#[tokio::test]
async fn the_sweeper_and_the_pipeline_record_principals_sqlite() {
    let (_dir, store) = testing::sqlite_store().await;
    sweeper_and_pipeline(store).await;
}

#[tokio::test]
async fn the_sweeper_and_the_pipeline_record_principals_postgres() {
    if let Some((_schema, store)) = testing::postgres_store().await {
        sweeper_and_pipeline(store).await;
    }
}
