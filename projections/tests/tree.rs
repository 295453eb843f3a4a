//! The hierarchy on the read side (SPEC rule 11): the parent links the audit view keeps from
//! `ParentSet` (the project list's parents, a project's children, kept through a rebuild), a
//! subtree's audit (the project's entries and its descendants', in position order, paged), and a
//! parent's usage at a past instant (the children it had then). On every backend (PostgreSQL
//! skipped when `QUOTA_TEST_POSTGRES_URL` is not set).

#[macro_use]
mod common;

use common::{deltas, p, r, WAIT};

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{TimeDelta, TimeZone, Utc};
use domain::{Limit, Limits, Timestamp};
use ledger::{Clock, EventStore, Ledger, LedgerConfig, ManualClock, Metadata};
use projections::{AuditQuery, ProjectQuery, Projections};

fn meta() -> Metadata {
    Metadata {
        actor: Some("tester".into()),
        ..Metadata::default()
    }
}

fn start_time() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
}

async fn caught_up(store: &Arc<dyn EventStore>, projections: &Projections) {
    let head = store.head().await.unwrap();
    projections.wait_for(head, WAIT).await.unwrap();
}

/// The projects and parents of a page, as `(project, parent)`.
fn listed(page: &projections::ProjectPage) -> Vec<(String, Option<String>)> {
    page.projects
        .iter()
        .map(|project| (project.clone(), page.parents.get(project).cloned()))
        .collect()
}

fn pair(project: &str, parent: Option<&str>) -> (String, Option<String>) {
    (project.to_owned(), parent.map(str::to_owned))
}

async fn a_tree_on_the_read_side(store: Arc<dyn EventStore>) {
    let clock = Arc::new(ManualClock::new(start_time()));
    let ledger = Ledger::start(store.clone(), clock.clone(), LedgerConfig::default())
        .await
        .unwrap();
    let limits: Limits = [(r("instances"), Limit::new(100).unwrap())].into();
    ledger.set_defaults(&limits, &meta()).await.unwrap();
    let projections = Projections::start(store.clone()).await.unwrap();

    // team uses 2 before it joins; org > dept > team; then team uses 3 more, 1 held.
    let held = ledger
        .reserve(&p("team"), None, deltas(&[("instances", 2)]), 600, &meta())
        .await
        .unwrap();
    ledger
        .commit(&p("team"), held.reservation_id, &meta())
        .await
        .unwrap();
    clock.advance(TimeDelta::seconds(10));
    let before_join = clock.now();
    clock.advance(TimeDelta::seconds(10));
    ledger
        .set_parent(&p("dept"), Some(p("org")), false, &meta())
        .await
        .unwrap();
    let ancestors = ledger
        .set_parent(&p("team"), Some(p("dept")), false, &meta())
        .await
        .unwrap();
    assert_eq!(ancestors, [p("dept"), p("org")]);
    clock.advance(TimeDelta::seconds(10));
    let joined = clock.now();
    clock.advance(TimeDelta::seconds(10));
    ledger
        .reserve(&p("team"), None, deltas(&[("instances", 1)]), 600, &meta())
        .await
        .unwrap();
    ledger
        .reserve(&p("solo"), None, deltas(&[("instances", 1)]), 600, &meta())
        .await
        .unwrap();
    caught_up(&store, &projections).await;

    // The project list carries each project's parent; `children` lists one parent's.
    let all = projections
        .projects(&ProjectQuery::default())
        .await
        .unwrap();
    assert_eq!(
        listed(&all),
        [
            pair("dept", Some("org")),
            pair("org", None),
            pair("solo", None),
            pair("team", Some("dept")),
        ]
    );
    let of_org = projections
        .children(&p("org"), &ProjectQuery::default())
        .await
        .unwrap();
    assert_eq!(listed(&of_org), [pair("dept", Some("org"))]);
    let none = projections
        .children(&p("team"), &ProjectQuery::default())
        .await
        .unwrap();
    assert!(none.projects.is_empty() && none.next.is_none());

    // org's subtree audit: its own entries and dept's and team's, in position order, each
    // naming its project; the same page by page.
    let query = |cursor: Option<String>, limit: Option<usize>| AuditQuery {
        subtree: true,
        cursor,
        limit,
        ..AuditQuery::default()
    };
    let whole = projections
        .audit(&p("org"), &query(None, None))
        .await
        .unwrap();
    assert!(whole.next.is_none());
    let mut per_project: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in &whole.entries {
        *per_project.entry(entry.project.as_str()).or_default() += 1;
    }
    assert_eq!(
        per_project,
        BTreeMap::from([("dept", 3), ("org", 3), ("team", 4)]),
        "{:?}",
        whole.entries
    );
    let positions: Vec<u64> = whole.entries.iter().map(|e| e.position).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    let mut paged = Vec::new();
    let mut cursor = None;
    loop {
        let page = projections
            .audit(&p("org"), &query(cursor, Some(3)))
            .await
            .unwrap();
        paged.extend(page.entries);
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(paged, whole.entries);
    let own = projections
        .audit(&p("org"), &AuditQuery::default())
        .await
        .unwrap();
    assert_eq!(own.entries.len(), 3, "{:?}", own.entries);
    let team_joined = own
        .entries
        .iter()
        .find(|e| e.event_type == "DescendantsJoined");
    let team_joined = team_joined.expect("org records dept's joining");
    assert_eq!(team_joined.descendant, Some(p("dept")));

    // Usage at a past instant: before team joined, dept has no subtree; after, team with the 2
    // it brought; now, the hold too.
    let then = projections.usage_at(&p("dept"), before_join).await.unwrap();
    assert_eq!(then.subtree, None);
    let after = projections.usage_at(&p("dept"), joined).await.unwrap();
    let subtree = after.subtree.expect("dept's subtree after team joined");
    assert_eq!(subtree.subtree[&r("instances")].in_use, 2);
    assert_eq!(subtree.children.keys().collect::<Vec<_>>(), [&p("team")]);
    let now = projections.usage_at(&p("org"), clock.now()).await.unwrap();
    let subtree = now.subtree.expect("org's subtree");
    let instances = &subtree.subtree[&r("instances")];
    assert_eq!((instances.in_use, instances.reserved), (2, 1));
    let dept = &subtree.children[&p("dept")][&r("instances")];
    assert_eq!((dept.in_use, dept.reserved), (2, 1));

    // A parent removed: the link goes; a rebuild keeps the links; verify agrees.
    ledger
        .set_parent(&p("dept"), None, false, &meta())
        .await
        .unwrap();
    caught_up(&store, &projections).await;
    projections.rebuild(None, &|_, _| {}).await.unwrap();
    let all = projections
        .projects(&ProjectQuery::default())
        .await
        .unwrap();
    assert_eq!(
        listed(&all),
        [
            pair("dept", None),
            pair("org", None),
            pair("solo", None),
            pair("team", Some("dept")),
        ]
    );
    let rebuilt = projections
        .audit(&p("org"), &query(None, None))
        .await
        .unwrap();
    assert_eq!(
        rebuilt.entries.len(),
        4,
        "org alone now, with DescendantsLeft"
    );
    assert_eq!(projections.verify().await.unwrap(), []);
}

on_every_backend!(a_tree_on_the_read_side);
