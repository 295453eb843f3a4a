//! Views that went wrong: verify finds a corrupted row, rebuild repairs it, and a crash
//! between a view update and its checkpoint loses and repeats nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ledger::{Clock, Database, EventStore, ManualClock};
use projections::{ProjectionError, Projections};

use super::support::{
    assert_views_equal_replay, ledger_on, meta, projects, random_workload, set_defaults, setup,
    start_time,
};
use crate::common::{deltas, p, WAIT};

/// Raw SQL on the views' database (as a bug or an operator would).
pub(crate) async fn execute(store: &dyn EventStore, sql: &str) {
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

pub(crate) async fn a_corrupted_row_is_reported_by_verify_and_repaired_by_rebuild(
    store: Arc<dyn EventStore>,
) {
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

pub(crate) async fn a_rebuild_while_writes_continue_ends_equal_to_a_replay(
    store: Arc<dyn EventStore>,
) {
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

pub(crate) async fn a_crash_between_view_update_and_checkpoint_loses_and_repeats_nothing(
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
