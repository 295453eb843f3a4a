//! The audit view: its pages and its filters.

use std::sync::Arc;

use chrono::TimeDelta;
use domain::{Limit, Limits};
use ledger::{Clock, EventStore};
use projections::{AuditQuery, ProjectionError};

use super::support::{meta, setup};
use crate::common::{deltas, p, r, WAIT};

pub(crate) async fn audit_pages_and_filters(store: Arc<dyn EventStore>) {
    let (ledger, clock, projections) = setup(store.clone()).await;
    let project = p("audited");
    let limits: Limits = [(r("instances"), Limit::new(2).unwrap())].into();
    ledger
        .set_limits(&project, limits, false, &meta("admin"))
        .await
        .unwrap();
    let t0 = clock.now();
    let mut ids = Vec::new();
    for i in 0..3 {
        clock.advance(TimeDelta::seconds(10));
        let who = if i == 1 { "bob" } else { "alice" };
        if let Ok(view) = ledger
            .reserve(
                &project,
                None,
                deltas(&[("instances", 1), ("cores", 2)]),
                3600,
                &meta(who),
            )
            .await
        {
            ids.push(view.reservation_id);
        }
    }
    assert_eq!(ids.len(), 2, "the third is denied");
    clock.advance(TimeDelta::seconds(10));
    let t_commit = clock.now();
    ledger
        .commit(&project, ids[0], &meta("carol"))
        .await
        .unwrap();
    let last = ledger
        .release(&project, ids[1], &meta("carol"))
        .await
        .unwrap();
    projections.wait_for(last.position, WAIT).await.unwrap();

    // Everything, three at a time.
    let mut all = Vec::new();
    let mut query = AuditQuery {
        limit: Some(3),
        ..AuditQuery::default()
    };
    let mut pages = 0;
    loop {
        let page = projections.audit(&project, &query).await.unwrap();
        assert!(page.entries.len() <= 3);
        pages += 1;
        all.extend(page.entries);
        match page.next {
            Some(next) => query.cursor = Some(next),
            None => break,
        }
    }
    let types: Vec<&str> = all.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "LimitsSet",
            "ReservationRequested",
            "ReservationRequested",
            "ReservationDenied",
            "ReservationCommitted",
            "ReservationReleased"
        ]
    );
    assert_eq!(pages, 2);
    assert!(all.windows(2).all(|w| w[0].position < w[1].position));
    assert_eq!(
        all.iter().map(|e| e.version).collect::<Vec<_>>(),
        (0..6).collect::<Vec<u64>>()
    );
    let limits_set = &all[0];
    assert_eq!(limits_set.usage_after[&r("instances")].in_use, 0);
    let second = &all[2];
    assert_eq!(second.usage_after[&r("instances")].reserved, 2);
    assert_eq!(
        second.deltas,
        Some(deltas(&[("instances", 1), ("cores", 2)]))
    );
    let denied = &all[3];
    assert_eq!(
        denied.usage_after[&r("instances")].reserved,
        2,
        "the usage it was judged on"
    );
    let committed = &all[4];
    assert_eq!(committed.usage_after[&r("instances")].in_use, 1);
    assert_eq!(committed.usage_after[&r("instances")].reserved, 1);
    assert_eq!(
        committed.deltas,
        Some(deltas(&[("instances", 1), ("cores", 2)]))
    );
    assert_eq!(committed.actor.as_deref(), Some("carol"));
    assert!(committed.request_id.is_some());
    let released = &all[5];
    assert_eq!(released.reason.as_deref(), Some("rolled_back"));
    assert_eq!(released.usage_after[&r("cores")].reserved, 0);
    assert_eq!(released.usage_after[&r("cores")].in_use, 2);

    let only = |q: AuditQuery| {
        let projections = projections.clone();
        let project = project.clone();
        async move { projections.audit(&project, &q).await.unwrap().entries }
    };
    let by_type = only(AuditQuery {
        event_type: Some("ReservationRequested".into()),
        ..AuditQuery::default()
    })
    .await;
    assert_eq!(by_type.len(), 2);
    let by_reservation = only(AuditQuery {
        reservation: Some(ids[0]),
        ..AuditQuery::default()
    })
    .await;
    assert_eq!(
        by_reservation
            .iter()
            .map(|e| e.event_type.as_str())
            .collect::<Vec<_>>(),
        ["ReservationRequested", "ReservationCommitted"]
    );
    let by_actor = only(AuditQuery {
        actor: Some("bob".into()),
        ..AuditQuery::default()
    })
    .await;
    assert_eq!(by_actor.len(), 1);
    let by_time = only(AuditQuery {
        since: Some(t0 + TimeDelta::seconds(15)),
        until: Some(t_commit),
        ..AuditQuery::default()
    })
    .await;
    assert_eq!(by_time.len(), 4, "{by_time:?}");
    let other = projections
        .audit(&p("nobody"), &AuditQuery::default())
        .await
        .unwrap();
    assert!(other.entries.is_empty() && other.next.is_none());
    for garbage in [
        "",
        "zz",
        "not a cursor",
        "00ff",
        &hex_of("a1:-4"),
        &hex_of("a1:99999999999999999999"),
    ] {
        let bad = AuditQuery {
            cursor: Some(garbage.to_string()),
            ..AuditQuery::default()
        };
        assert!(
            matches!(
                projections.audit(&project, &bad).await,
                Err(ProjectionError::InvalidCursor)
            ),
            "{garbage:?}"
        );
    }
    // Page sizes are bounded.
    let huge = AuditQuery {
        limit: Some(1_000_000),
        ..AuditQuery::default()
    };
    assert_eq!(
        projections
            .audit(&project, &huge)
            .await
            .unwrap()
            .entries
            .len(),
        6
    );
}

pub(crate) fn hex_of(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}
