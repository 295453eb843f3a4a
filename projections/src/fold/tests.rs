//! Audit rows of limits events, and of the hierarchy's events.

use domain::{Event, Limit, ResourceName, DEFAULTS_STREAM};

use super::{AuditRow, LimitsChange, ViewState};
use crate::feed::FeedEvent;

fn limits(pairs: &[(&str, i64)]) -> domain::Limits {
    pairs
        .iter()
        .map(|(r, l)| (ResourceName::parse(r).unwrap(), Limit::new(*l).unwrap()))
        .collect()
}

fn apply(state: &mut ViewState, stream: &str, event: Event) -> AuditRow {
    let feed = FeedEvent {
        position: 1,
        stream: stream.to_owned(),
        version: 0,
        recorded_at: chrono::DateTime::from_timestamp_millis(0).unwrap(),
        metadata: ledger::Metadata {
            principal: Some("admin".into()),
            ..ledger::Metadata::default()
        },
        event,
    };
    state.apply(&feed, true).expect("an audit row")
}

fn change(before: &str, after: &str, forced: Option<bool>) -> LimitsChange {
    LimitsChange {
        before: Some(before.into()),
        after: Some(after.into()),
        forced,
    }
}

/// Defaults entries say what the defaults named were before and after; project entries
/// the effective limits (override, else default); a reset, the overrides it removed.
#[test]
fn limits_entries_carry_before_and_after() {
    let mut state = ViewState::default();
    let set_defaults = |l| Event::DefaultLimitsSet { limits: l };
    let row = apply(
        &mut state,
        DEFAULTS_STREAM,
        set_defaults(limits(&[("cpu", 4)])),
    );
    assert_eq!(row.change, change("{}", r#"{"cpu":4}"#, None));
    assert_eq!(row.principal.as_deref(), Some("admin"));
    let row = apply(
        &mut state,
        DEFAULTS_STREAM,
        set_defaults(limits(&[("cpu", 8), ("ram", -1)])),
    );
    assert_eq!(
        row.change,
        change(r#"{"cpu":4}"#, r#"{"cpu":8,"ram":-1}"#, None)
    );

    let project = "project-acme";
    let set = Event::LimitsSet {
        limits: limits(&[("cpu", 2), ("gpu", 1)]),
        forced: true,
    };
    let row = apply(&mut state, project, set);
    assert_eq!(
        row.change,
        change(r#"{"cpu":8}"#, r#"{"cpu":2,"gpu":1}"#, Some(true))
    );
    let row = apply(&mut state, project, Event::LimitsReset);
    assert_eq!(
        row.change,
        change(r#"{"cpu":2,"gpu":1}"#, r#"{"cpu":8}"#, None)
    );
    let commit = Event::ReservationCommitted {
        reservation_id: domain::ReservationId(uuid::Uuid::nil()),
    };
    assert_eq!(
        apply(&mut state, project, commit).change,
        LimitsChange::default()
    );
}

/// The hierarchy's entries: a `ParentSet` names the new parent (none when removed) and whether
/// it was forced; an ancestor's `Descendant*` entries name the descendant, the hold and what
/// moved, and leave `usage_after` empty (the views keep the ancestor's own usage only).
#[test]
fn tree_entries_say_what_they_are_about() {
    use std::collections::BTreeMap;

    use domain::{Deltas, DescendantHold, ProjectId, ReservationId, SubtreeMember};

    let project = |id: &str| ProjectId::parse(id).unwrap();
    let instances = ResourceName::parse("instances").unwrap();
    let id = ReservationId(uuid::Uuid::from_u128(7));
    let mut state = ViewState::default();
    let set = Event::ParentSet {
        parent: Some(project("org")),
        forced: true,
    };
    let row = apply(&mut state, "project-dept", set);
    assert_eq!(row.parent.as_deref(), Some("org"));
    assert_eq!(row.change.forced, Some(true));
    assert_eq!((row.descendant, row.deltas), (None, None));
    let removed = Event::ParentSet {
        parent: None,
        forced: false,
    };
    let row = apply(&mut state, "project-dept", removed);
    assert_eq!((row.parent, row.change.forced), (None, Some(false)));

    let hold = DescendantHold {
        reservation_id: id,
        deltas: Deltas::new(BTreeMap::from([(instances.clone(), 2)])).unwrap(),
        expires_at: chrono::DateTime::from_timestamp_millis(60_000).unwrap(),
    };
    let reserved = Event::DescendantReserved {
        descendant: project("team"),
        hold,
    };
    let row = apply(&mut state, "project-org", reserved);
    assert_eq!(row.descendant.as_deref(), Some("team"));
    assert_eq!(row.reservation_id, Some(id.to_string()));
    assert_eq!(row.deltas.as_deref(), Some(r#"{"instances":2}"#));
    assert_eq!(row.usage_after, "{}");
    let committed = Event::DescendantUsageChanged {
        descendant: project("team"),
        reservation_id: Some(id),
        in_use: BTreeMap::from([(instances.clone(), 2)]),
    };
    let row = apply(&mut state, "project-org", committed);
    assert_eq!(row.reservation_id, Some(id.to_string()));
    assert_eq!(row.deltas.as_deref(), Some(r#"{"instances":2}"#));
    let rolled_back = Event::DescendantUsageChanged {
        descendant: project("team"),
        reservation_id: Some(id),
        in_use: BTreeMap::new(),
    };
    assert_eq!(apply(&mut state, "project-org", rolled_back).deltas, None);

    let member = |p: &str, parent: &str, n: i64| SubtreeMember {
        project: project(p),
        parent: project(parent),
        in_use: BTreeMap::from([(instances.clone(), n)]),
        holds: vec![],
    };
    let joined = Event::DescendantsJoined {
        members: vec![member("dept", "org", 3), member("team", "dept", 2)],
    };
    let row = apply(&mut state, "project-org", joined);
    assert_eq!(row.descendant.as_deref(), Some("dept"));
    assert_eq!(row.deltas.as_deref(), Some(r#"{"instances":5}"#));
    let left = Event::DescendantsLeft {
        projects: vec![project("dept"), project("team")],
    };
    let row = apply(&mut state, "project-org", left);
    assert_eq!(
        (row.descendant.as_deref(), row.deltas),
        (Some("dept"), None)
    );
}
