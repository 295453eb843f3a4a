//! The stored bodies of every event type: round trips, the frozen text new events are
//! stored as, and bad stored data refused without a panic.

use super::*;
use crate::{DescendantHold, SubtreeMember};
use chrono::{TimeZone, Utc};
use serde_json::json;

fn r(s: &str) -> ResourceName {
    ResourceName::parse(s).unwrap()
}

fn id(n: u128) -> ReservationId {
    ReservationId(Uuid::from_u128(n))
}

fn every_event() -> Vec<Event> {
    let deltas = Deltas::new([(r("cores"), 2), (r("ram"), -4096)].into()).unwrap();
    vec![
        Event::DefaultLimitsSet {
            limits: [(r("instances"), Limit::new(10).unwrap())].into(),
        },
        Event::LimitsSet {
            limits: [(r("cores"), Limit::UNLIMITED)].into(),
            forced: true,
        },
        Event::LimitsReset,
        Event::ReservationRequested {
            user: None,
            count: None,
            reservation_id: id(1),
            deltas: deltas.clone(),
            expires_at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
        },
        Event::ReservationCommitted {
            reservation_id: id(1),
        },
        Event::ReservationReleased {
            reservation_id: id(1),
            reason: ReleaseReason::Freed,
        },
        Event::ReservationDenied {
            ancestor_overs: Default::default(),
            user: None,
            user_overs: vec![],
            count: None,
            reservation_id: id(2),
            deltas,
            overs: vec![r("cores")],
            judged: [(
                r("cores"),
                Judged {
                    limit: Limit::new(4).unwrap(),
                    in_use: 3,
                    reserved: 1,
                },
            )]
            .into(),
        },
        Event::UsageCorrected {
            user: None,
            resource: r("ram"),
            in_use_before: 5,
            in_use_after: 0,
            reason: "audit 42".into(),
        },
        Event::ReservationRequested {
            user: None,
            count: Some(Counted {
                range: CountRange::new(2, 5).unwrap(),
                granted: 3,
            }),
            reservation_id: id(3),
            deltas: Deltas::new([(r("cores"), 6)].into()).unwrap(),
            expires_at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
        },
        Event::ReservationDenied {
            ancestor_overs: Default::default(),
            user: None,
            user_overs: vec![],
            count: Some(CountRange::new(2, 5).unwrap()),
            reservation_id: id(4),
            deltas: Deltas::new([(r("cores"), 4)].into()).unwrap(),
            overs: vec![r("cores")],
            judged: [(
                r("cores"),
                Judged {
                    limit: Limit::new(4).unwrap(),
                    in_use: 3,
                    reserved: 0,
                },
            )]
            .into(),
        },
        Event::ReservationRequested {
            count: None,
            reservation_id: id(5),
            deltas: Deltas::new([(r("cores"), 1)].into()).unwrap(),
            expires_at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
            user: Some(alice()),
        },
        Event::ReservationDenied {
            ancestor_overs: Default::default(),
            count: None,
            reservation_id: id(6),
            deltas: Deltas::new([(r("cores"), 1)].into()).unwrap(),
            overs: vec![],
            judged: BTreeMap::new(),
            user: Some(alice()),
            user_overs: vec![r("cores")],
        },
        Event::UsageCorrected {
            resource: r("cores"),
            in_use_before: 3,
            in_use_after: 1,
            reason: "recount".into(),
            user: Some(alice()),
        },
        Event::UserLimitsSet {
            user: alice(),
            limits: [(r("cores"), Limit::new(2).unwrap())].into(),
            forced: true,
        },
        Event::UserLimitsReset { user: alice() },
        Event::ReservationDenied {
            ancestor_overs: [(project("org"), vec![r("cores"), r("ram")])].into(),
            count: None,
            reservation_id: id(7),
            deltas: Deltas::new([(r("cores"), 1), (r("ram"), 1)].into()).unwrap(),
            overs: vec![],
            judged: BTreeMap::new(),
            user: None,
            user_overs: vec![],
        },
        Event::ParentSet {
            parent: Some(project("org")),
            forced: true,
        },
        Event::ParentSet {
            parent: None,
            forced: false,
        },
        Event::DescendantReserved {
            descendant: project("c1"),
            hold: hold(),
        },
        Event::DescendantUsageChanged {
            descendant: project("c1"),
            reservation_id: Some(id(8)),
            in_use: [(r("cores"), 2)].into(),
        },
        Event::DescendantUsageChanged {
            descendant: project("c1"),
            reservation_id: None,
            in_use: [(r("ram"), -512)].into(),
        },
        Event::DescendantsJoined {
            members: vec![
                SubtreeMember {
                    project: project("c1"),
                    parent: project("org"),
                    in_use: [(r("cores"), 3)].into(),
                    holds: vec![hold()],
                },
                SubtreeMember {
                    project: project("g1"),
                    parent: project("c1"),
                    in_use: BTreeMap::new(),
                    holds: vec![],
                },
            ],
        },
        Event::DescendantsLeft {
            projects: vec![project("c1"), project("g1")],
        },
    ]
}

fn project(name: &str) -> ProjectId {
    ProjectId::parse(name).unwrap()
}

fn hold() -> DescendantHold {
    DescendantHold {
        reservation_id: id(8),
        deltas: Deltas::new([(r("cores"), 2)].into()).unwrap(),
        expires_at: Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap(),
    }
}

fn alice() -> UserId {
    UserId::parse("alice").unwrap()
}

#[test]
fn every_event_round_trips() {
    for event in every_event() {
        let enc = encode(&event);
        assert_eq!(enc.schema_version, CURRENT_SCHEMA_VERSION);
        let back = decode(enc.event_type, enc.schema_version, enc.data.get()).unwrap();
        assert_eq!(back, event);
    }
}

/// The stored text of each body, compact with its keys in order, as bodies have always
/// been stored. If this test breaks, new events are stored differently from the old ones.
#[test]
fn bodies_are_stored_as_this_text() {
    let texts: Vec<String> = every_event()
        .iter()
        .map(|event| encode(event).data.get().to_owned())
        .collect();
    assert_eq!(
        texts,
        [
            r#"{"limits":{"instances":10}}"#,
            r#"{"forced":true,"limits":{"cores":-1}}"#,
            r#"{}"#,
            r#"{"deltas":{"cores":2,"ram":-4096},"expires_at":"2026-01-02T03:04:05Z","reservation_id":"00000000-0000-0000-0000-000000000001"}"#,
            r#"{"reservation_id":"00000000-0000-0000-0000-000000000001"}"#,
            r#"{"reason":"freed","reservation_id":"00000000-0000-0000-0000-000000000001"}"#,
            r#"{"deltas":{"cores":2,"ram":-4096},"judged":{"cores":{"in_use":3,"limit":4,"reserved":1}},"overs":["cores"],"reservation_id":"00000000-0000-0000-0000-000000000002"}"#,
            r#"{"in_use_after":0,"in_use_before":5,"reason":"audit 42","resource":"ram"}"#,
            r#"{"count":{"granted":3,"max":5,"min":2},"deltas":{"cores":6},"expires_at":"2026-01-02T03:04:05Z","reservation_id":"00000000-0000-0000-0000-000000000003"}"#,
            r#"{"count":{"max":5,"min":2},"deltas":{"cores":4},"judged":{"cores":{"in_use":3,"limit":4,"reserved":0}},"overs":["cores"],"reservation_id":"00000000-0000-0000-0000-000000000004"}"#,
            r#"{"deltas":{"cores":1},"expires_at":"2026-01-02T03:04:05Z","reservation_id":"00000000-0000-0000-0000-000000000005","user":"alice"}"#,
            r#"{"deltas":{"cores":1},"judged":{},"overs":[],"reservation_id":"00000000-0000-0000-0000-000000000006","user":"alice","user_overs":["cores"]}"#,
            r#"{"in_use_after":1,"in_use_before":3,"reason":"recount","resource":"cores","user":"alice"}"#,
            r#"{"forced":true,"limits":{"cores":2},"user":"alice"}"#,
            r#"{"user":"alice"}"#,
            r#"{"ancestor_overs":{"org":["cores","ram"]},"deltas":{"cores":1,"ram":1},"judged":{},"overs":[],"reservation_id":"00000000-0000-0000-0000-000000000007"}"#,
            r#"{"forced":true,"parent":"org"}"#,
            r#"{}"#,
            r#"{"descendant":"c1","hold":{"deltas":{"cores":2},"expires_at":"2026-01-02T03:04:05Z","reservation_id":"00000000-0000-0000-0000-000000000008"}}"#,
            r#"{"descendant":"c1","in_use":{"cores":2},"reservation_id":"00000000-0000-0000-0000-000000000008"}"#,
            r#"{"descendant":"c1","in_use":{"ram":-512}}"#,
            r#"{"members":[{"holds":[{"deltas":{"cores":2},"expires_at":"2026-01-02T03:04:05Z","reservation_id":"00000000-0000-0000-0000-000000000008"}],"in_use":{"cores":3},"parent":"org","project":"c1"},{"holds":[],"in_use":{},"parent":"c1","project":"g1"}]}"#,
            r#"{"projects":["c1","g1"]}"#,
        ]
    );
}

/// A body that is not JSON, or JSON of another shape, is malformed, never a panic.
#[test]
fn bodies_that_are_not_json_are_malformed() {
    for body in ["", "{", "not json", "{\"limits\": {}} trailing"] {
        assert!(matches!(
            decode("LimitsSet", 1, body),
            Err(DecodeError::Malformed { .. })
        ));
    }
}

/// Frozen v1 bodies: if this test breaks, old events in users' stores no longer read.
#[test]
fn v1_bodies_stay_readable() {
    let requested = json!({
        "reservation_id": "00000000-0000-0000-0000-000000000001",
        "deltas": {"instances": 1, "cores": 2},
        "expires_at": "2026-01-02T03:04:05Z"
    });
    assert!(matches!(
        decode("ReservationRequested", 1, &requested.to_string()),
        Ok(Event::ReservationRequested { .. })
    ));
    let released =
        json!({"reservation_id": "00000000-0000-0000-0000-000000000001", "reason": "expired"});
    assert_eq!(
        decode("ReservationReleased", 1, &released.to_string()),
        Ok(Event::ReservationReleased {
            reservation_id: id(1),
            reason: ReleaseReason::Expired
        })
    );
    assert_eq!(
        decode("LimitsSet", 1, &json!({"limits": {"cores": 8}}).to_string()),
        Ok(Event::LimitsSet {
            limits: [(r("cores"), Limit::new(8).unwrap())].into(),
            forced: false
        })
    );
}

#[test]
fn bad_stored_events_are_errors_not_panics() {
    assert!(matches!(
        decode("Nope", 1, "{}"),
        Err(DecodeError::UnknownType(_))
    ));
    assert!(matches!(
        decode("LimitsReset", 9, "{}"),
        Err(DecodeError::UnknownVersion { .. })
    ));
    for body in [
        json!(null),
        json!({"limits": {"bad name": 1}}),
        json!({"limits": {"x": -7}}),
        json!({"limits": {}, "extra": 1}),
    ] {
        assert!(matches!(
            decode("LimitsSet", 1, &body.to_string()),
            Err(DecodeError::Malformed { .. })
        ));
    }
    assert!(decode(
        "ReservationReleased",
        1,
        &json!({"reservation_id": "00000000-0000-0000-0000-000000000001", "reason": "??"})
            .to_string()
    )
    .is_err());
}

/// Every body with a key no version ever wrote, or that is not a JSON object (nor an array,
/// which serde reads positionally), is malformed: the hierarchy's bodies as much as the others'.
#[test]
fn every_type_refuses_unknown_keys_and_other_shapes() {
    for event in every_event() {
        let enc = encode(&event);
        let mut body: serde_json::Value = serde_json::from_str(enc.data.get()).unwrap();
        body.as_object_mut()
            .unwrap()
            .insert("extra".into(), json!(1));
        for bad in [body, json!(null), json!("x"), json!(7)] {
            assert!(
                matches!(
                    decode(enc.event_type, 1, &bad.to_string()),
                    Err(DecodeError::Malformed { .. })
                ),
                "{} accepted {bad}",
                enc.event_type
            );
        }
    }
}

/// The hierarchy's bodies validate what they name: projects, resources, ids and times.
#[test]
fn bad_hierarchy_bodies_are_malformed() {
    let t = "2026-01-02T03:04:05Z";
    let u = "00000000-0000-0000-0000-000000000008";
    let hold = json!({"deltas": {"cores": 2}, "expires_at": t, "reservation_id": u});
    let member = |project: &str, parent: &str, hold: serde_json::Value| json!({"holds": [hold], "in_use": {}, "parent": parent, "project": project});
    let cases = [
        ("ParentSet", json!({"parent": "bad name"})),
        ("ParentSet", json!({"parent": ""})),
        ("ParentSet", json!({"forced": "yes"})),
        ("DescendantReserved", json!({"descendant": "c1"})),
        (
            "DescendantReserved",
            json!({"descendant": "c/1", "hold": hold}),
        ),
        (
            "DescendantReserved",
            json!({"descendant": "c1", "hold": {"deltas": {"bad name": 1}, "expires_at": t, "reservation_id": u}}),
        ),
        (
            "DescendantReserved",
            json!({"descendant": "c1", "hold": {"deltas": {}, "expires_at": "never", "reservation_id": u}}),
        ),
        (
            "DescendantReserved",
            json!({"descendant": "c1", "hold": {"deltas": {}, "expires_at": t, "reservation_id": "1"}}),
        ),
        ("DescendantUsageChanged", json!({"descendant": "c1"})),
        (
            "DescendantUsageChanged",
            json!({"descendant": "c1", "in_use": {"bad name": 1}}),
        ),
        (
            "DescendantUsageChanged",
            json!({"descendant": "c1", "in_use": {}, "reservation_id": "x"}),
        ),
        (
            "DescendantsJoined",
            json!({"members": [member("c1", "bad name", hold.clone())]}),
        ),
        (
            "DescendantsJoined",
            json!({"members": [member("", "org", hold.clone())]}),
        ),
        (
            "DescendantsJoined",
            json!({"members": [member("c1", "org", json!([u]))]}),
        ),
        ("DescendantsJoined", json!({"members": {}})),
        ("DescendantsLeft", json!({"projects": ["c1", "bad name"]})),
        ("DescendantsLeft", json!({"projects": "c1"})),
        (
            "ReservationDenied",
            json!({"ancestor_overs": {"bad name": ["cores"]}, "deltas": {}, "judged": {}, "overs": [], "reservation_id": u}),
        ),
        (
            "ReservationDenied",
            json!({"ancestor_overs": {"org": ["bad name"]}, "deltas": {}, "judged": {}, "overs": [], "reservation_id": u}),
        ),
    ];
    for (event_type, body) in cases {
        assert!(
            matches!(
                decode(event_type, 1, &body.to_string()),
                Err(DecodeError::Malformed { .. })
            ),
            "{event_type} accepted {body}"
        );
    }
}
