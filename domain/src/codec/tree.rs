//! The stored form of the hierarchy's events (SPEC rule 11): a project's parent, and what its
//! ancestors record of its usage. Fields in alphabetical order, as in the parent module.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

use super::{deltas_by_name, from_json, to_json};
use crate::{
    Deltas, DescendantHold, Event, ProjectId, ReservationId, ResourceName, SubtreeMember, Timestamp,
};

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParentSetV1 {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    forced: bool,
    /// Absent when the parent was removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HoldV1 {
    deltas: BTreeMap<String, i64>,
    expires_at: Timestamp,
    reservation_id: Uuid,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DescendantReservedV1 {
    descendant: String,
    hold: HoldV1,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DescendantUsageChangedV1 {
    descendant: String,
    in_use: BTreeMap<String, i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reservation_id: Option<Uuid>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemberV1 {
    holds: Vec<HoldV1>,
    in_use: BTreeMap<String, i64>,
    parent: String,
    project: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DescendantsJoinedV1 {
    members: Vec<MemberV1>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DescendantsLeftV1 {
    projects: Vec<String>,
}

fn counts_by_name(counts: &BTreeMap<ResourceName, i64>) -> BTreeMap<String, i64> {
    counts
        .iter()
        .map(|(r, n)| (r.as_str().to_owned(), *n))
        .collect()
}

fn hold_v1(hold: &DescendantHold) -> HoldV1 {
    HoldV1 {
        deltas: deltas_by_name(&hold.deltas),
        expires_at: hold.expires_at,
        reservation_id: hold.reservation_id.0,
    }
}

/// The body of a hierarchy event (the parent module sends no other here).
pub(super) fn encode(event: &Event) -> Box<RawValue> {
    match event {
        Event::ParentSet { parent, forced } => to_json(&ParentSetV1 {
            forced: *forced,
            parent: parent.as_ref().map(|p| p.as_str().to_owned()),
        }),
        Event::DescendantReserved { descendant, hold } => to_json(&DescendantReservedV1 {
            descendant: descendant.as_str().to_owned(),
            hold: hold_v1(hold),
        }),
        Event::DescendantUsageChanged {
            descendant,
            reservation_id,
            in_use,
        } => to_json(&DescendantUsageChangedV1 {
            descendant: descendant.as_str().to_owned(),
            in_use: counts_by_name(in_use),
            reservation_id: reservation_id.map(|id| id.0),
        }),
        Event::DescendantsJoined { members } => to_json(&DescendantsJoinedV1 {
            members: members
                .iter()
                .map(|m| MemberV1 {
                    holds: m.holds.iter().map(hold_v1).collect(),
                    in_use: counts_by_name(&m.in_use),
                    parent: m.parent.as_str().to_owned(),
                    project: m.project.as_str().to_owned(),
                })
                .collect(),
        }),
        Event::DescendantsLeft { projects } => to_json(&DescendantsLeftV1 {
            projects: projects.iter().map(|p| p.as_str().to_owned()).collect(),
        }),
        other => unreachable!("{} is not a hierarchy event", other.type_name()),
    }
}

fn project(s: &str) -> Result<ProjectId, String> {
    ProjectId::parse(s).map_err(|e| e.to_string())
}

fn counts(map: BTreeMap<String, i64>) -> Result<BTreeMap<ResourceName, i64>, String> {
    map.into_iter()
        .map(|(r, n)| Ok((ResourceName::parse(&r).map_err(|e| e.to_string())?, n)))
        .collect()
}

fn hold(v: HoldV1) -> Result<DescendantHold, String> {
    Ok(DescendantHold {
        reservation_id: ReservationId(v.reservation_id),
        deltas: Deltas::new(counts(v.deltas)?).map_err(|e| e.to_string())?,
        expires_at: v.expires_at,
    })
}

/// A hierarchy event from its stored body; the error is why it does not decode.
pub(super) fn decode(event_type: &str, data: &str) -> Result<Event, String> {
    Ok(match event_type {
        "ParentSet" => {
            let v: ParentSetV1 = from_json(data)?;
            Event::ParentSet {
                parent: v.parent.as_deref().map(project).transpose()?,
                forced: v.forced,
            }
        }
        "DescendantReserved" => {
            let v: DescendantReservedV1 = from_json(data)?;
            Event::DescendantReserved {
                descendant: project(&v.descendant)?,
                hold: hold(v.hold)?,
            }
        }
        "DescendantUsageChanged" => {
            let v: DescendantUsageChangedV1 = from_json(data)?;
            Event::DescendantUsageChanged {
                descendant: project(&v.descendant)?,
                reservation_id: v.reservation_id.map(ReservationId),
                in_use: counts(v.in_use)?,
            }
        }
        "DescendantsJoined" => {
            let v: DescendantsJoinedV1 = from_json(data)?;
            let members = v.members.into_iter().map(|m| {
                Ok(SubtreeMember {
                    project: project(&m.project)?,
                    parent: project(&m.parent)?,
                    in_use: counts(m.in_use)?,
                    holds: m.holds.into_iter().map(hold).collect::<Result<_, _>>()?,
                })
            });
            Event::DescendantsJoined {
                members: members.collect::<Result<_, String>>()?,
            }
        }
        "DescendantsLeft" => {
            let v: DescendantsLeftV1 = from_json(data)?;
            Event::DescendantsLeft {
                projects: v
                    .projects
                    .iter()
                    .map(|p| project(p))
                    .collect::<Result<_, _>>()?,
            }
        }
        other => return Err(format!("unknown event type {other:?}")),
    })
}
