//! A usage history equals point-in-time usage (`usage_at`, replayed from the streams) at every
//! point, misses no change between two points, and is bounded.

use std::sync::Arc;

use chrono::TimeDelta;
use domain::{Limit, ProjectId, ResourceName, Timestamp};
use ledger::{Clock, EventStore};
use projections::{HistoryPoint, HistoryQuery, ProjectionError, Projections, MAX_HISTORY_POINTS};

use super::support::{projects, random_workload, setup};
use crate::common::{deltas, r, WAIT};

/// What `usage_at` says of one resource at `at` (a resource it does not show has no limit and
/// nothing used).
async fn replayed(
    projections: &Projections,
    project: &ProjectId,
    resource: &ResourceName,
    at: Timestamp,
) -> (i64, i64, Limit) {
    let report = projections.usage_at(project, at).await.unwrap();
    report
        .resources
        .get(resource)
        .map_or((0, 0, Limit::UNLIMITED), |u| {
            (u.in_use, u.reserved, u.limit)
        })
}

fn numbers(point: &HistoryPoint) -> (i64, i64, Limit) {
    (point.in_use, point.reserved, point.limit)
}

async fn history(
    projections: &Projections,
    project: &ProjectId,
    query: HistoryQuery,
) -> Vec<HistoryPoint> {
    projections.history(project, &query).await.unwrap().points
}

pub(crate) async fn history_points_equal_point_in_time_usage(store: Arc<dyn EventStore>) {
    let (ledger, clock, projections) = setup(store.clone()).await;
    let projects = projects(2);
    let started = clock.now();
    for round in 0..3 {
        random_workload(&ledger, &clock, &projects, 80, 40 + round).await;
        clock.advance(TimeDelta::seconds(90));
    }
    let head = store.head().await.unwrap();
    projections.wait_for(head, WAIT).await.unwrap();
    let until = clock.now();
    for project in &projects {
        for resource in ["instances", "cores", "ram"].map(r) {
            let every_change = HistoryQuery {
                resource: resource.clone(),
                since: None,
                until,
                step_ms: None,
            };
            let points = history(&projections, project, every_change).await;
            assert!(points.len() > 2, "{project} {resource}: {points:?}");
            assert_eq!(points.last().unwrap().at, until);
            // The last point of each instant: earlier ones show changes within its millisecond.
            let instants: Vec<&HistoryPoint> = points
                .iter()
                .enumerate()
                .filter(|(i, p)| points.get(i + 1).is_none_or(|next| next.at != p.at))
                .map(|(_, p)| p)
                .collect();
            for pair in points.windows(2) {
                assert!(pair[0].at <= pair[1].at, "{pair:?}");
            }
            for pair in instants.windows(2) {
                // Nothing moved between two instants: just before the later one, the usage is
                // still the earlier one's.
                let just_before = pair[1].at - TimeDelta::milliseconds(1);
                let then = replayed(&projections, project, &resource, just_before).await;
                assert_eq!(
                    then,
                    numbers(pair[0]),
                    "{project} {resource} before {pair:?}"
                );
            }
            for point in &instants {
                let then = replayed(&projections, project, &resource, point.at).await;
                assert_eq!(then, numbers(point), "{project} {resource} at {}", point.at);
            }
            // Stepped, from before the first event: the same numbers at each step.
            let stepped = HistoryQuery {
                resource: resource.clone(),
                since: Some(started - TimeDelta::seconds(5)),
                until,
                step_ms: Some(7_000),
            };
            let points = history(&projections, project, stepped).await;
            assert_eq!(points.first().unwrap().at, started - TimeDelta::seconds(5));
            assert_eq!(points.last().unwrap().at, until);
            for point in &points {
                let then = replayed(&projections, project, &resource, point.at).await;
                assert_eq!(then, numbers(point), "{project} {resource} at {}", point.at);
            }
        }
    }
}

/// A hold that expires with no event recording it stops counting at its expiry, in the
/// history as in `usage_at`; a step that gives too many points is refused; and more changes
/// than fit are cut by a step that fits.
pub(crate) async fn history_is_bounded_and_sees_unrecorded_expiries(store: Arc<dyn EventStore>) {
    let (ledger, clock, projections) = setup(store.clone()).await;
    let project = domain::ProjectId::parse("bounded").unwrap();
    let meta = super::support::meta("alice");
    let since = clock.now();
    ledger
        .reserve(&project, None, deltas(&[("instances", 2)]), 10, &meta)
        .await
        .unwrap();
    clock.advance(TimeDelta::seconds(30));
    let head = store.head().await.unwrap();
    projections.wait_for(head, WAIT).await.unwrap();
    let query = HistoryQuery {
        resource: r("instances"),
        since: None,
        until: clock.now(),
        step_ms: None,
    };
    let points = history(&projections, &project, query.clone()).await;
    let expiry = since + TimeDelta::seconds(10);
    let reserved: Vec<(Timestamp, i64)> = points.iter().map(|p| (p.at, p.reserved)).collect();
    assert_eq!(
        reserved,
        vec![(since, 2), (expiry, 0), (clock.now(), 0)],
        "{points:?}"
    );
    // A step of 1 ms over 30 s: 30,001 points, refused.
    let too_fine = HistoryQuery {
        step_ms: Some(1),
        ..query.clone()
    };
    let refused = projections.history(&project, &too_fine).await.unwrap_err();
    assert!(
        matches!(refused, ProjectionError::TooManyPoints(MAX_HISTORY_POINTS)),
        "{refused:?}"
    );
    // More changes than fit: a point per step that fits, each still equal to usage_at.
    for _ in 0..MAX_HISTORY_POINTS {
        // Each hold lapses after 1 s: at most 17 are held at once, under the limit of 20.
        clock.advance(TimeDelta::milliseconds(60));
        ledger
            .reserve(&project, None, deltas(&[("instances", 1)]), 1, &meta)
            .await
            .unwrap();
    }
    let head = store.head().await.unwrap();
    projections.wait_for(head, WAIT).await.unwrap();
    let all = HistoryQuery {
        until: clock.now(),
        ..query
    };
    let points = history(&projections, &project, all).await;
    assert!(points.len() <= MAX_HISTORY_POINTS && points.len() > MAX_HISTORY_POINTS / 2);
    for point in points.iter().step_by(97).chain(points.last()) {
        let then = replayed(&projections, &project, &r("instances"), point.at).await;
        assert_eq!(then, numbers(point), "at {}", point.at);
    }
}

/// Without a step, every change has a point of its own, even when several fall in one
/// millisecond (SPEC: "one point per change"): a reserve, its commit and a second reserve on
/// one clock reading give three points at that instant, in the order of the events, and the
/// last of them is what `usage_at` answers for it.
pub(crate) async fn history_shows_each_change_within_one_millisecond(store: Arc<dyn EventStore>) {
    let (ledger, clock, projections) = setup(store.clone()).await;
    let project = domain::ProjectId::parse("same-instant").unwrap();
    let meta = super::support::meta("alice");
    let at = clock.now();
    let first = ledger
        .reserve(&project, None, deltas(&[("instances", 1)]), 60, &meta)
        .await
        .unwrap();
    ledger
        .commit(&project, first.reservation_id, &meta)
        .await
        .unwrap();
    ledger
        .reserve(&project, None, deltas(&[("instances", 2)]), 60, &meta)
        .await
        .unwrap();
    clock.advance(TimeDelta::seconds(1));
    let head = store.head().await.unwrap();
    projections.wait_for(head, WAIT).await.unwrap();
    let until = clock.now();
    let query = HistoryQuery {
        resource: r("instances"),
        since: None,
        until,
        step_ms: None,
    };
    let points = history(&projections, &project, query).await;
    let seen: Vec<(Timestamp, i64, i64)> = points
        .iter()
        .map(|p| (p.at, p.in_use, p.reserved))
        .collect();
    assert_eq!(
        seen,
        vec![(at, 0, 1), (at, 1, 0), (at, 1, 2), (until, 1, 2)],
        "{points:?}"
    );
    let then = replayed(&projections, &project, &r("instances"), at).await;
    assert_eq!(then, numbers(&points[2]));
}
