//! Rebuild speed of the usage view on SQLite: seeds a log of realistic events (reserve, then
//! commit, roll back or expire; some committed reservations later freed; over many projects),
//! then times `rebuild(Some("usage"))` and prints events/s.
//!
//! `cargo run --release -p quota-projections --example rebuild_bench [-- EVENTS [DB_FILE]]`
//! (with DB_FILE, an existing file is reused as seeded, to time rebuilds again quickly).

use std::sync::Arc;
use std::time::Instant;

use chrono::{TimeDelta, TimeZone, Utc};
use domain::{Deltas, Event, Limit, ReleaseReason, ReservationId, ResourceName, DEFAULTS_STREAM};
use ledger::{EventData, EventStore, ExpectedVersion, Metadata, StreamAppend};
use projections::Projections;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

const PROJECTS: usize = 10_000;
const EVENTS_PER_APPEND: usize = 4_000;

fn r(s: &str) -> ResourceName {
    ResourceName::parse(s).expect("valid resource name")
}

fn data(event: &Event, at: chrono::DateTime<Utc>, actor: &str) -> EventData {
    let metadata = Metadata {
        actor: Some(actor.to_owned()),
        principal: Some(actor.to_owned()),
        ..Metadata::default()
    };
    EventData::encode(event, metadata, at)
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let total: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("temporary folder");
    let file = std::env::args()
        .nth(2)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| dir.path().join("bench.db"));
    let reuse = file.exists();
    let url = format!("sqlite://{}", file.display());
    let store: Arc<dyn EventStore> = ledger::store::open(&url).await.expect("open store");
    if !reuse {
        seed(&*store, total).await;
    }
    let head = store.head().await.expect("head");

    let started = Instant::now();
    let mut after = 0;
    let mut decoded = 0usize;
    loop {
        let page = store.read_all(after, 10_000).await.expect("read");
        let Some(last) = page.last() else { break };
        after = last.position;
        decoded += page.iter().filter(|e| e.decode().is_ok()).count();
    }
    let read = started.elapsed().as_secs_f64();
    println!(
        "reading and decoding {decoded} events alone: {read:.2} s, {:.0} events/s",
        head as f64 / read
    );

    let projections = Projections::open(store.clone()).await.expect("open views");
    let started = Instant::now();
    projections
        .rebuild(None, &|_, _| {})
        .await
        .expect("rebuild all");
    let all = started.elapsed().as_secs_f64();
    println!(
        "rebuild of every view (usage + audit, {head} audit rows): {all:.2} s, {:.0} events/s",
        head as f64 / all
    );

    for _ in 0..3 {
        settle(&*store).await;
        let started = Instant::now();
        projections
            .rebuild(Some("usage"), &|_, _| {})
            .await
            .expect("rebuild usage");
        let usage = started.elapsed().as_secs_f64();
        println!(
            "rebuild of the usage view: {usage:.2} s, {:.0} events/s",
            head as f64 / usage
        );
    }

    let differences = projections.verify().await.expect("verify");
    println!("verify: {} differences", differences.len());
}

/// Waits until the old copies left by a rebuild are deleted (in the background), so the next
/// timing does not share SQLite's writer with that cleanup.
async fn settle(store: &dyn EventStore) {
    let ledger::Database::Sqlite(events) = store.database() else {
        return;
    };
    let pool = sqlx::SqlitePool::connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(
        projections::sqlite_views_path(events.connect_options().get_filename()),
    ))
    .await
    .expect("open the views' database");
    loop {
        let checkpoints: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM projection_checkpoints")
            .fetch_one(&pool)
            .await
            .expect("count checkpoints");
        if checkpoints <= 2 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

async fn seed(store: &dyn EventStore, total: usize) {
    let seeding = Instant::now();
    let mut at = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let defaults = Event::DefaultLimitsSet {
        limits: [(r("instances"), -1), (r("cores"), -1), (r("ram"), -1)]
            .into_iter()
            .map(|(k, v)| (k, Limit::new(v).expect("valid limit")))
            .collect(),
    };
    store
        .append(vec![StreamAppend::new(
            DEFAULTS_STREAM,
            ExpectedVersion::Any,
            vec![data(&defaults, at, "admin")],
        )])
        .await
        .expect("append defaults");
    let mut rng = StdRng::seed_from_u64(7);
    let projects: Vec<String> = (0..PROJECTS)
        .map(|i| format!("project-tenant-{i}"))
        .collect();
    // Per project: reservations waiting for their outcome, and committed ones.
    let mut pending: Vec<Vec<ReservationId>> = vec![Vec::new(); PROJECTS];
    let mut committed: Vec<Vec<ReservationId>> = vec![Vec::new(); PROJECTS];
    let mut seeded = 1usize;
    while seeded < total {
        let mut batch: Vec<StreamAppend> = Vec::new();
        let mut in_batch = 0;
        while in_batch < EVENTS_PER_APPEND && seeded + in_batch < total {
            at += TimeDelta::milliseconds(1);
            let p = rng.gen_range(0..PROJECTS);
            let event = if let Some(id) =
                (!pending[p].is_empty() && rng.gen_bool(0.5)).then(|| pending[p].swap_remove(0))
            {
                match rng.gen_range(0..10) {
                    0..=6 => {
                        committed[p].push(id);
                        Event::ReservationCommitted { reservation_id: id }
                    }
                    7..=8 => Event::ReservationReleased {
                        reservation_id: id,
                        reason: ReleaseReason::RolledBack,
                    },
                    _ => Event::ReservationReleased {
                        reservation_id: id,
                        reason: ReleaseReason::Expired,
                    },
                }
            } else if !committed[p].is_empty() && rng.gen_bool(0.1) {
                let i = rng.gen_range(0..committed[p].len());
                Event::ReservationReleased {
                    reservation_id: committed[p].swap_remove(i),
                    reason: ReleaseReason::Freed,
                }
            } else {
                let id = ReservationId(Uuid::now_v7());
                pending[p].push(id);
                let n = rng.gen_range(1..4);
                Event::ReservationRequested {
                    user: None,
                    count: None,
                    reservation_id: id,
                    deltas: Deltas::new(
                        [
                            (r("instances"), n),
                            (r("cores"), 2 * n),
                            (r("ram"), 4096 * n),
                        ]
                        .into(),
                    )
                    .expect("valid deltas"),
                    expires_at: at + TimeDelta::days(1),
                }
            };
            batch.push(StreamAppend::new(
                projects[p].clone(),
                ExpectedVersion::Any,
                vec![data(&event, at, "bench")],
            ));
            in_batch += 1;
        }
        store.append(batch).await.expect("append batch");
        seeded += in_batch;
    }
    println!(
        "seeded {total} events over {PROJECTS} projects in {:.1} s",
        seeding.elapsed().as_secs_f64()
    );
}
