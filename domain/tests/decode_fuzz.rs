//! The event decoder against hostile stored data: any type name, schema version and JSON body
//! (deep, huge, unicode, negative and overflowing numbers, near-miss field names) decodes or is
//! refused with a `DecodeError`, and never panics; whatever decodes also folds into a project
//! state without panicking.

use chrono::{TimeZone, Utc};
use domain::{decode, ProjectId, ProjectState, EVENT_TYPES};
use proptest::prelude::*;
use serde_json::{json, Map, Number, Value};

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        Just(Value::from(i64::MIN)),
        Just(Value::from(i64::MAX)),
        Just(Value::from(u64::MAX)),
        Just(Value::from(-1)),
        Just(Value::from(0)),
        any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z_]{1,12}",
        "\\PC{0,40}",
        Just("instances".to_owned()),
        Just("ff2c8e3a-2f55-4f0a-9a57-3cdd0e0f7a1b".to_owned()),
        Just("2026-11-29T12:00:00Z".to_owned()),
        Just("9999-99-99T99:99:99Z".to_owned()),
        Just("x".repeat(10_000)),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        text().prop_map(Value::String),
    ]
}

/// Field names the stored types use, so that decoding gets past the first field often.
const FIELDS: &[&str] = &[
    "limits",
    "forced",
    "reservation_id",
    "deltas",
    "expires_at",
    "reason",
    "overs",
    "judged",
    "limit",
    "in_use",
    "reserved",
    "resource",
    "in_use_before",
    "in_use_after",
    "count",
    "user",
    "user_overs",
    "ancestor_overs",
    "parent",
    "descendant",
    "hold",
    "holds",
    "members",
    "project",
    "projects",
];

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 64, 8, |inner| {
        let key = prop_oneof![
            3 => prop::sample::select(FIELDS).prop_map(str::to_owned),
            1 => text(),
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn event_type() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(&EVENT_TYPES[..]).prop_map(str::to_owned),
        1 => text(),
    ]
}

fn at() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
}

fn fold(event: &domain::Event) {
    let mut state = ProjectState::new(ProjectId::parse("fuzz").unwrap());
    state.apply(event, at());
    state.apply(event, at());
    let _ = state.usage_all(&domain::Defaults::default(), at());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn decode_never_panics(
        event_type in event_type(),
        version in prop_oneof![8 => Just(1u16), 1 => any::<u16>()],
        data in value(),
    ) {
        if let Ok(event) = decode(&event_type, version, &data.to_string()) {
            fold(&event);
        }
    }

    /// Well-formed shapes with hostile values: the closest a corrupt row gets to decoding.
    #[test]
    fn decode_of_near_valid_bodies_never_panics(
        id in text(),
        name in text(),
        n in number(),
        m in number(),
        expires_at in text(),
        reason in text(),
    ) {
        let bodies = [
            ("DefaultLimitsSet", json!({"limits": {name.clone(): n.clone()}})),
            ("LimitsSet", json!({"limits": {name.clone(): n.clone()}, "forced": true})),
            ("ReservationRequested", json!({"reservation_id": id, "deltas": {name.clone(): n.clone()}, "expires_at": expires_at})),
            ("ReservationReleased", json!({"reservation_id": id, "reason": reason})),
            ("ReservationDenied", json!({"reservation_id": id, "deltas": {name.clone(): n.clone()}, "overs": [name.clone()], "judged": {name.clone(): {"limit": n.clone(), "in_use": m.clone(), "reserved": m.clone()}}})),
            ("UsageCorrected", json!({"resource": name, "in_use_before": n, "in_use_after": m, "reason": reason})),
        ];
        for (event_type, data) in bodies {
            if let Ok(event) = decode(event_type, 1, &data.to_string()) {
                fold(&event);
            }
        }
    }
}

#[test]
fn deep_and_huge_bodies_never_panic() {
    // As deep as a stored body can be: the store parses JSON text with serde_json, which refuses
    // nesting beyond 128 levels before any decoding.
    let mut deep = json!(1);
    for _ in 0..127 {
        deep = json!([deep]);
    }
    for event_type in EVENT_TYPES {
        let _ = decode(event_type, 1, &deep.to_string());
        let huge = json!({"limits": (0..100_000).map(|i| (format!("r{i}"), json!(i))).collect::<Map<_, _>>()});
        let _ = decode(event_type, 1, &huge.to_string());
    }
    let text = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(serde_json::from_str::<Value>(&text).is_err());
}
