//! Snapshots of project state, over both backends: a project with a long history is loaded from
//! its snapshot plus the events after it, and that state is exactly the fold of all its events;
//! a snapshot this code cannot read is passed over, never trusted.

use std::sync::Arc;

use domain::{Deltas, Limit, Limits, ProjectId, ProjectState, ReservationStatus, ResourceName};
use ledger::{
    store::MAX_READ_COUNT, testing, Database, EventStore, Ledger, LedgerConfig, Metadata,
    SystemClock,
};

fn r(s: &str) -> ResourceName {
    ResourceName::parse(s).unwrap()
}

fn boot() -> Deltas {
    Deltas::new([(r("instances"), 1), (r("cores"), 2)].into()).unwrap()
}

async fn start(store: &Arc<dyn EventStore>) -> Arc<Ledger> {
    let config = LedgerConfig {
        snapshot_min_events: 8,
        ..LedgerConfig::default()
    };
    Ledger::start(store.clone(), Arc::new(SystemClock), config)
        .await
        .unwrap()
}

/// The state folded from every event of the stream, as if there were no snapshots.
async fn fold_all(store: &dyn EventStore, project: &ProjectId) -> ProjectState {
    let mut state = ProjectState::new(project.clone());
    let mut from = 0;
    loop {
        let events = store
            .read_stream(&project.stream(), from, MAX_READ_COUNT)
            .await
            .unwrap();
        for recorded in &events {
            let event = recorded.decode().unwrap();
            state.apply(&event, recorded.event.recorded_at);
            state.note_position(&event, recorded.version, recorded.position);
            from = recorded.version + 1;
        }
        if events.len() < MAX_READ_COUNT {
            return state;
        }
    }
}

async fn execute(store: &Database, sql: &str) {
    match store {
        Database::Sqlite(pool) => sqlx::query(sql).execute(pool).await.map(drop),
        Database::Postgres(pool) => sqlx::query(sql).execute(pool).await.map(drop),
    }
    .unwrap();
}

/// Boots from 16 clients at once, so that snapshots are taken while earlier events of the
/// project are still on their way to disk; a third of the boots are freed again.
async fn boot_concurrently(ledger: &Arc<Ledger>, project: &ProjectId, per_client: usize) {
    let meta = Metadata::default();
    let tasks: Vec<_> = (0..16)
        .map(|client| {
            let ledger = ledger.clone();
            let project = project.clone();
            let meta = meta.clone();
            tokio::spawn(async move {
                for n in 0..per_client {
                    let held = ledger
                        .reserve(&project, None, boot(), 600, &meta)
                        .await
                        .unwrap();
                    let id = held.reservation_id;
                    ledger.commit(&project, id, &meta).await.unwrap();
                    if (client + n) % 3 == 0 {
                        ledger.release(&project, id, &meta).await.unwrap();
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// A ledger whose defaults let boots through without limit.
async fn start_unlimited(store: &Arc<dyn EventStore>) -> (Arc<Ledger>, Limits) {
    let ledger = start(store).await;
    let limits: Limits = [
        (r("instances"), Limit::UNLIMITED),
        (r("cores"), Limit::UNLIMITED),
    ]
    .into();
    ledger
        .set_defaults(&limits, &Metadata::default())
        .await
        .unwrap();
    (ledger, limits)
}

async fn a_long_history_loads_from_its_snapshot(store: Arc<dyn EventStore>) {
    let project = ProjectId::parse("long").unwrap();
    let meta = Metadata::default();
    let (ledger, limits) = start_unlimited(&store).await;
    ledger
        .set_limits(&project, limits, false, &meta)
        .await
        .unwrap();
    boot_concurrently(&ledger, &project, 20).await;
    let first = ledger
        .reserve(&project, None, boot(), 600, &meta)
        .await
        .unwrap();
    drop(ledger);

    let snapshot = store
        .read_snapshot(&project.stream())
        .await
        .unwrap()
        .expect("a snapshot after hundreds of events");
    let everything = fold_all(&*store, &project).await;
    assert!(snapshot.version > 200, "snapshot at {}", snapshot.version);
    assert!(snapshot.version <= everything.version.unwrap());
    // It rode with an append, so at least that append's positions were not known yet.
    let snapshotted = ProjectState::from_snapshot(project.clone(), &snapshot).unwrap();
    assert!(snapshotted.first_version_without_position().is_some());

    // A new process loads the snapshot and the tail: exactly the fold of every event,
    // positions included (the snapshot was taken with some of them still unknown).
    let ledger = start(&store).await;
    assert_eq!(ledger.project_state(&project).await.unwrap(), everything);
    let again = ledger
        .reserve(&project, Some(first.reservation_id), boot(), 600, &meta)
        .await
        .unwrap();
    assert_eq!(again, first);
    boot_concurrently(&ledger, &project, 5).await;
    drop(ledger);

    // An unreadable snapshot, or one of another format, is passed over: the project is folded
    // from its first event, and its next decisions store a readable snapshot again.
    for broken in [
        "UPDATE snapshots SET data = 'not a snapshot'",
        "UPDATE snapshots SET format = 999",
    ] {
        execute(&store.database(), broken).await;
        let ledger = start(&store).await;
        assert_eq!(
            ledger.project_state(&project).await.unwrap(),
            fold_all(&*store, &project).await
        );
        let held = ledger
            .reserve(&project, None, boot(), 600, &meta)
            .await
            .unwrap();
        assert_eq!(held.status, ReservationStatus::Held);
        drop(ledger);
        let snapshot = store
            .read_snapshot(&project.stream())
            .await
            .unwrap()
            .unwrap();
        let state = ProjectState::from_snapshot(project.clone(), &snapshot).unwrap();
        assert_eq!(state.version, Some(snapshot.version));
        let ledger = start(&store).await;
        assert_eq!(
            ledger.project_state(&project).await.unwrap(),
            fold_all(&*store, &project).await
        );
    }
}

/// A snapshot that knows none of its events' positions (as if all were in flight when it was
/// taken): the load reads them from the events, and the state is the fold of all of them.
async fn positions_missing_from_a_snapshot_are_read_from_the_events(store: Arc<dyn EventStore>) {
    let project = ProjectId::parse("unpositioned").unwrap();
    let (ledger, _) = start_unlimited(&store).await;
    boot_concurrently(&ledger, &project, 2).await;
    drop(ledger);

    let mut unpositioned = ProjectState::new(project.clone());
    for recorded in store.read_stream(&project.stream(), 0, 100).await.unwrap() {
        unpositioned.apply(&recorded.decode().unwrap(), recorded.event.recorded_at);
    }
    assert!(unpositioned.first_version_without_position().is_some());
    let snapshot = unpositioned.to_snapshot().unwrap();
    let sql = format!(
        "DELETE FROM snapshots; INSERT INTO snapshots (stream, version, format, data) \
         VALUES ('{}', {}, {}, '{}')",
        project.stream(),
        snapshot.version,
        snapshot.format,
        snapshot.data
    );
    match store.database() {
        Database::Sqlite(pool) => sqlx::raw_sql(&sql).execute(&pool).await.map(drop),
        Database::Postgres(pool) => sqlx::raw_sql(&sql).execute(&pool).await.map(drop),
    }
    .unwrap();
    let loaded = start(&store).await.project_state(&project).await.unwrap();
    assert_eq!(loaded.first_version_without_position(), None);
    assert_eq!(loaded, fold_all(&*store, &project).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_long_history_loads_from_its_snapshot() {
    let (_dir, store) = testing::sqlite_store().await;
    a_long_history_loads_from_its_snapshot(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_long_history_loads_from_its_snapshot() {
    let Some((_schema, store)) = testing::postgres_store().await else {
        return;
    };
    a_long_history_loads_from_its_snapshot(store).await;
}

#[tokio::test]
async fn sqlite_positions_missing_from_a_snapshot_are_read_from_the_events() {
    let (_dir, store) = testing::sqlite_store().await;
    positions_missing_from_a_snapshot_are_read_from_the_events(store).await;
}

#[tokio::test]
async fn postgres_positions_missing_from_a_snapshot_are_read_from_the_events() {
    let Some((_schema, store)) = testing::postgres_store().await else {
        return;
    };
    positions_missing_from_a_snapshot_are_read_from_the_events(store).await;
}
