//! The views equal a replay of the events: after a workload, at expiry, at a past instant,
//! and for a reader waiting for its write.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::TimeDelta;
use ledger::{Clock, EventStore};
use projections::AuditQuery;

use super::support::{
    all_events, assert_views_equal_replay, meta, projects, random_workload, replay, setup,
};
use crate::common::{deltas, p, r, WAIT};

pub(crate) async fn views_after_a_random_workload_equal_a_replay(store: Arc<dyn EventStore>) {
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

pub(crate) async fn holds_stop_counting_at_expiry_without_a_sweep(store: Arc<dyn EventStore>) {
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
pub(crate) async fn a_waiting_reader_does_not_wait_for_events_to_gather(
    store: Arc<dyn EventStore>,
) {
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

pub(crate) async fn point_in_time_usage_matches_a_replay_cut_there(store: Arc<dyn EventStore>) {
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
