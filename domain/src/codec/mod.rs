//! The stored form of events: explicit serialised types with a schema version, separate from the
//! domain's `Event`. A stored event is never rewritten, so decoding must accept every schema
//! version ever written; a new version adds a new `*V2` type and an upcast here.

use std::collections::BTreeMap;

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

mod tree;

use crate::{
    CountRange, Counted, Deltas, Event, Judged, Limit, ProjectId, ReleaseReason, ReservationId,
    ResourceName, Timestamp, UserId,
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
    /// Added with hierarchy: the ancestors over their limits, absent when none was.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    ancestor_overs: BTreeMap<String, Vec<String>>,
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
            ancestor_overs,
        } => to_json(&DeniedV1 {
            ancestor_overs: ancestor_overs
                .iter()
                .map(|(p, overs)| {
                    let names = overs.iter().map(|r| r.as_str().to_owned()).collect();
                    (p.as_str().to_owned(), names)
                })
                .collect(),
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
        Event::ParentSet { .. }
        | Event::DescendantReserved { .. }
        | Event::DescendantUsageChanged { .. }
        | Event::DescendantsJoined { .. }
        | Event::DescendantsLeft { .. } => tree::encode(event),
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
                ancestor_overs: v
                    .ancestor_overs
                    .iter()
                    .map(|(p, overs)| {
                        let project = ProjectId::parse(p).map_err(|e| malformed(e.to_string()))?;
                        let overs = overs.iter().map(|s| res(s)).collect::<Result<_, _>>()?;
                        Ok((project, overs))
                    })
                    .collect::<Result<_, DecodeError>>()?,
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
        tree_type => tree::decode(tree_type, data).map_err(malformed)?,
    };
    Ok(event)
}

fn from_json<T: DeserializeOwned>(data: &str) -> Result<T, String> {
    serde_json::from_str(data).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
