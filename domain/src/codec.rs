//! The stored form of events: explicit serialised types with a schema version, separate from the
//! domain's `Event`. A stored event is never rewritten, so decoding must accept every schema
//! version ever written; a new version adds a new `*V2` type and an upcast here.

use std::collections::BTreeMap;

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use crate::{
    CountRange, Counted, Deltas, Event, Judged, Limit, ReleaseReason, ReservationId, ResourceName,
    Timestamp, UserId,
};

/// The schema version written for new events of every type.
pub const CURRENT_SCHEMA_VERSION: u16 = 1;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("unknown event type {0:?}")]
    UnknownType(String),
    #[error("{event_type} has no schema version {version}")]
    UnknownVersion { event_type: String, version: u16 },
    #[error("{event_type} v{version} does not decode: {message}")]
    Malformed {
        event_type: String,
        version: u16,
        message: String,
    },
}

/// An event ready to store: its type, schema version and JSON body. The body is JSON text,
/// serialised straight from the versioned type: the text the store keeps.
#[derive(Clone, Debug)]
pub struct Encoded {
    pub event_type: &'static str,
    pub schema_version: u16,
    pub data: Box<RawValue>,
}

// The fields of each stored type are declared in alphabetical order: it is the order of the
// keys in every body ever stored (they were serialised through a `serde_json::Value`, whose
// objects sort their keys), and serde writes fields in declaration order.

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsV1 {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    forced: bool,
    limits: BTreeMap<String, i64>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmptyV1 {}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestedV1 {
    /// Added with counted reserves: absent on a plain reserve (and every older event), so
    /// their bodies are unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    count: Option<CountedV1>,
    deltas: BTreeMap<String, i64>,
    expires_at: Timestamp,
    reservation_id: Uuid,
    /// Added with users, absent without one (as `count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<String>,
}

/// A counted reserve's range and the count granted (`granted` is 0 in a denial's range).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CountedV1 {
    #[serde(default, skip_serializing_if = "is_zero")]
    granted: u32,
    max: u32,
    min: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommittedV1 {
    reservation_id: Uuid,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleasedV1 {
    reason: String,
    reservation_id: Uuid,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgedV1 {
    in_use: i64,
    limit: i64,
    reserved: i64,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeniedV1 {
    /// Added with counted reserves, as in [`RequestedV1`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    count: Option<CountedV1>,
    deltas: BTreeMap<String, i64>,
    judged: BTreeMap<String, JudgedV1>,
    overs: Vec<String>,
    reservation_id: Uuid,
    /// Added with users, absent without one (as `count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    user_overs: Vec<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CorrectedV1 {
    in_use_after: i64,
    in_use_before: i64,
    reason: String,
    resource: String,
    /// Added with users, absent for a project's correction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserLimitsV1 {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    forced: bool,
    limits: BTreeMap<String, i64>,
    user: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserResetV1 {
    user: String,
}

fn limits_by_name(limits: &crate::Limits) -> BTreeMap<String, i64> {
    limits
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.value()))
        .collect()
}

fn user_name(user: Option<&UserId>) -> Option<String> {
    user.map(|u| u.as_str().to_owned())
}

fn deltas_by_name(deltas: &Deltas) -> BTreeMap<String, i64> {
    deltas
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v))
        .collect()
}

pub fn encode(event: &Event) -> Encoded {
    let data = match event {
        Event::DefaultLimitsSet { limits } => to_json(&LimitsV1 {
            limits: limits_by_name(limits),
            forced: false,
        }),
        Event::LimitsSet { limits, forced } => to_json(&LimitsV1 {
            limits: limits_by_name(limits),
            forced: *forced,
        }),
        Event::UserLimitsSet {
            user,
            limits,
            forced,
        } => to_json(&UserLimitsV1 {
            limits: limits_by_name(limits),
            forced: *forced,
            user: user.as_str().to_owned(),
        }),
        Event::UserLimitsReset { user } => to_json(&UserResetV1 {
            user: user.as_str().to_owned(),
        }),
        Event::LimitsReset => to_json(&EmptyV1 {}),
        Event::ReservationRequested {
            reservation_id,
            deltas,
            expires_at,
            count,
            user,
        } => to_json(&RequestedV1 {
            user: user_name(user.as_ref()),
            reservation_id: reservation_id.0,
            deltas: deltas_by_name(deltas),
            expires_at: *expires_at,
            count: count.map(|c| CountedV1 {
                granted: c.granted,
                max: c.range.max(),
                min: c.range.min(),
            }),
        }),
        Event::ReservationCommitted { reservation_id } => to_json(&CommittedV1 {
            reservation_id: reservation_id.0,
        }),
        Event::ReservationReleased {
            reservation_id,
            reason,
        } => to_json(&ReleasedV1 {
            reservation_id: reservation_id.0,
            reason: reason.as_str().to_owned(),
        }),
        Event::ReservationDenied {
            reservation_id,
            deltas,
            overs,
            judged,
            count,
            user,
            user_overs,
        } => to_json(&DeniedV1 {
            user: user_name(user.as_ref()),
            user_overs: user_overs.iter().map(|r| r.as_str().to_owned()).collect(),
            count: count.map(|range| CountedV1 {
                granted: 0,
                max: range.max(),
                min: range.min(),
            }),
            reservation_id: reservation_id.0,
            deltas: deltas_by_name(deltas),
            overs: overs.iter().map(|r| r.as_str().to_owned()).collect(),
            judged: judged
                .iter()
                .map(|(k, j)| {
                    (
                        k.as_str().to_owned(),
                        JudgedV1 {
                            limit: j.limit.value(),
                            in_use: j.in_use,
                            reserved: j.reserved,
                        },
                    )
                })
                .collect(),
        }),
        Event::UsageCorrected {
            resource,
            in_use_before,
            in_use_after,
            reason,
            user,
        } => to_json(&CorrectedV1 {
            user: user_name(user.as_ref()),
            resource: resource.as_str().to_owned(),
            in_use_before: *in_use_before,
            in_use_after: *in_use_after,
            reason: reason.clone(),
        }),
    };
    Encoded {
        event_type: event.type_name(),
        schema_version: CURRENT_SCHEMA_VERSION,
        data,
    }
}

fn to_json<T: Serialize>(value: &T) -> Box<RawValue> {
    // These types hold only strings, integers and maps with string keys: serialising cannot fail.
    serde_json::value::to_raw_value(value).expect("stored event types always serialise")
}

/// The event stored as `event_type` at `schema_version` with the JSON text `data`, parsed
/// straight into that version's serialised type.
pub fn decode(event_type: &str, schema_version: u16, data: &str) -> Result<Event, DecodeError> {
    let malformed = |message: String| DecodeError::Malformed {
        event_type: event_type.to_owned(),
        version: schema_version,
        message,
    };
    if !crate::EVENT_TYPES.contains(&event_type) {
        return Err(DecodeError::UnknownType(
            event_type.chars().take(64).collect(),
        ));
    }
    if schema_version != 1 {
        return Err(DecodeError::UnknownVersion {
            event_type: event_type.to_owned(),
            version: schema_version,
        });
    }
    let res = |s: &str| ResourceName::parse(s).map_err(|e| malformed(e.to_string()));
    let limits = |m: BTreeMap<String, i64>| -> Result<crate::Limits, DecodeError> {
        m.into_iter()
            .map(|(k, v)| {
                Ok((
                    res(&k)?,
                    Limit::new(v).map_err(|e| malformed(e.to_string()))?,
                ))
            })
            .collect()
    };
    let deltas = |m: BTreeMap<String, i64>| -> Result<Deltas, DecodeError> {
        let map = m
            .into_iter()
            .map(|(k, v)| Ok((res(&k)?, v)))
            .collect::<Result<_, DecodeError>>()?;
        Deltas::new(map).map_err(|e| malformed(e.to_string()))
    };
    let user = |s: &str| UserId::parse(s).map_err(|e| malformed(e.to_string()));
    let range = |c: &CountedV1| -> Result<CountRange, DecodeError> {
        CountRange::new(c.min, c.max).map_err(|e| malformed(e.to_string()))
    };
    let event = match event_type {
        "DefaultLimitsSet" => {
            let v: LimitsV1 = from_json(data).map_err(malformed)?;
            Event::DefaultLimitsSet {
                limits: limits(v.limits)?,
            }
        }
        "LimitsSet" => {
            let v: LimitsV1 = from_json(data).map_err(malformed)?;
            Event::LimitsSet {
                limits: limits(v.limits)?,
                forced: v.forced,
            }
        }
        "LimitsReset" => {
            let _: EmptyV1 = from_json(data).map_err(malformed)?;
            Event::LimitsReset
        }
        "ReservationRequested" => {
            let v: RequestedV1 = from_json(data).map_err(malformed)?;
            let count = match v.count {
                Some(c) => Some(Counted {
                    range: range(&c)?,
                    granted: c.granted,
                }),
                None => None,
            };
            Event::ReservationRequested {
                reservation_id: ReservationId(v.reservation_id),
                deltas: deltas(v.deltas)?,
                expires_at: v.expires_at,
                count,
                user: v.user.as_deref().map(user).transpose()?,
            }
        }
        "ReservationCommitted" => {
            let v: CommittedV1 = from_json(data).map_err(malformed)?;
            Event::ReservationCommitted {
                reservation_id: ReservationId(v.reservation_id),
            }
        }
        "ReservationReleased" => {
            let v: ReleasedV1 = from_json(data).map_err(malformed)?;
            let reason = match v.reason.as_str() {
                "rolled_back" => ReleaseReason::RolledBack,
                "expired" => ReleaseReason::Expired,
                "freed" => ReleaseReason::Freed,
                other => return Err(malformed(format!("unknown release reason {other:?}"))),
            };
            Event::ReservationReleased {
                reservation_id: ReservationId(v.reservation_id),
                reason,
            }
        }
        "ReservationDenied" => {
            let v: DeniedV1 = from_json(data).map_err(malformed)?;
            Event::ReservationDenied {
                count: v.count.as_ref().map(&range).transpose()?,
                reservation_id: ReservationId(v.reservation_id),
                deltas: deltas(v.deltas)?,
                overs: v.overs.iter().map(|s| res(s)).collect::<Result<_, _>>()?,
                user: v.user.as_deref().map(user).transpose()?,
                user_overs: v
                    .user_overs
                    .iter()
                    .map(|s| res(s))
                    .collect::<Result<_, _>>()?,
                judged: v
                    .judged
                    .into_iter()
                    .map(|(k, j)| {
                        Ok((
                            res(&k)?,
                            Judged {
                                limit: Limit::new(j.limit).map_err(|e| malformed(e.to_string()))?,
                                in_use: j.in_use,
                                reserved: j.reserved,
                            },
                        ))
                    })
                    .collect::<Result<_, DecodeError>>()?,
            }
        }
        "UsageCorrected" => {
            let v: CorrectedV1 = from_json(data).map_err(malformed)?;
            Event::UsageCorrected {
                resource: res(&v.resource)?,
                in_use_before: v.in_use_before,
                in_use_after: v.in_use_after,
                reason: v.reason,
                user: v.user.as_deref().map(user).transpose()?,
            }
        }
        "UserLimitsSet" => {
            let v: UserLimitsV1 = from_json(data).map_err(malformed)?;
            Event::UserLimitsSet {
                user: user(&v.user)?,
                limits: limits(v.limits)?,
                forced: v.forced,
            }
        }
        "UserLimitsReset" => {
            let v: UserResetV1 = from_json(data).map_err(malformed)?;
            Event::UserLimitsReset {
                user: user(&v.user)?,
            }
        }
        other => return Err(DecodeError::UnknownType(other.to_owned())),
    };
    Ok(event)
}

fn from_json<T: DeserializeOwned>(data: &str) -> Result<T, String> {
    serde_json::from_str(data).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
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
        ]
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
}
