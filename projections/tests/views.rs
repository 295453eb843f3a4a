//! The views against a replay of the events, on every backend: each test is written once over
//! a store and instantiated below for SQLite and for PostgreSQL (skipped when
//! `QUOTA_TEST_POSTGRES_URL` is not set).

#[macro_use]
mod common;

#[path = "views/audit.rs"]
mod audit;
#[path = "views/history.rs"]
mod history;
#[path = "views/repair.rs"]
mod repair;
#[path = "views/replay.rs"]
mod replay;
#[path = "views/support.rs"]
mod support;

use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use domain::{ProjectId, DEFAULTS_STREAM};
use ledger::{Clock, EventStore, ManualClock};
use projections::{AuditQuery, ProjectionError, Projections};

use audit::audit_pages_and_filters;
use history::{
    history_is_bounded_and_sees_unrecorded_expiries, history_points_equal_point_in_time_usage,
    history_shows_each_change_within_one_millisecond,
};
use repair::{
    a_corrupted_row_is_reported_by_verify_and_repaired_by_rebuild,
    a_crash_between_view_update_and_checkpoint_loses_and_repeats_nothing,
    a_rebuild_while_writes_continue_ends_equal_to_a_replay,
};
use replay::{
    a_waiting_reader_does_not_wait_for_events_to_gather,
    holds_stop_counting_at_expiry_without_a_sweep, point_in_time_usage_matches_a_replay_cut_there,
    views_after_a_random_workload_equal_a_replay,
};
use support::{
    all_events, assert_views_equal_replay, ledger_on, projects, random_workload, set_defaults,
    setup, start_time,
};

on_every_backend!(
    views_after_a_random_workload_equal_a_replay,
    holds_stop_counting_at_expiry_without_a_sweep,
    a_corrupted_row_is_reported_by_verify_and_repaired_by_rebuild,
    a_rebuild_while_writes_continue_ends_equal_to_a_replay,
    a_crash_between_view_update_and_checkpoint_loses_and_repeats_nothing,
    point_in_time_usage_matches_a_replay_cut_there,
    audit_pages_and_filters,
    a_waiting_reader_does_not_wait_for_events_to_gather,
    history_points_equal_point_in_time_usage,
    history_is_bounded_and_sees_unrecorded_expiries,
    history_shows_each_change_within_one_millisecond,
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
