//! The stored form of a project's folded state, so that a project with a long history loads
//! from its last snapshot plus the events after it instead of from its first event.
//!
//! A snapshot is a cache of `fold(apply, events[..=version])`, never a source of truth: the
//! events stay. Its body is an explicit serialised type, like the events' (see `codec`), and it
//! carries [`SNAPSHOT_FORMAT`]. A snapshot of any other format is not read (the project is
//! folded from its events again and snapshotted anew), so bump the format whenever the stored
//! form or what [`ProjectState::apply`] folds changes: a state folded by older rules must never
//! be mistaken for one folded by the current rules.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::state::UserState;
use crate::subtree::Subtree;
use crate::{
    CountRange, Counted, Deltas, DescendantHold, Limit, Limits, ProjectId, ProjectState,
    ReleaseReason, Reservation, ReservationId, ReservationStatus, ResourceName, SubtreeMember,
    Timestamp, UserId,
};

/// The snapshot format this code writes and the only one it reads. 2: each reservation ends
/// with its count (`[min, max, granted]`, or null for a plain reserve). 3: each reservation
/// then ends with its user (or null), the state has `users`, and a release or a user's
/// correction never takes in_use below zero. 4: the state has `parent` and `descendants`
/// (SPEC rule 11).
pub const SNAPSHOT_FORMAT: u16 = 4;

/// Room a snapshot's body is given per reservation, and per descendant hold, before it is
/// written: a reservation of three resources takes about 150 bytes. A body large enough to
/// matter (a busy project keeps every committed reservation, tens of thousands) grown by
/// doubling instead was copied and, being fresh memory each time, faulted in and zeroed by the
/// kernel several times over: most of the snapshot's cost on the decision path. Room asked for
/// and never written is never touched, so erring high costs nothing.
const BODY_BYTES_PER_RESERVATION: usize = 256;
const BODY_BYTES_PER_DESCENDANT_HOLD: usize = 192;
const BODY_BYTES_BASE: usize = 4096;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotError {
    #[error("snapshot format {0} is not {SNAPSHOT_FORMAT}")]
    OtherFormat(u16),
    #[error("snapshot does not decode: {0}")]
    Malformed(String),
}

/// A project's state in stored form: the stream version it was folded to, and the JSON body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedSnapshot {
    pub version: u64,
    pub format: u16,
    pub data: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StateV1 {
    version: u64,
    overrides: BTreeMap<String, i64>,
    limits_version: Option<u64>,
    limits_position: Option<u64>,
    in_use: BTreeMap<String, i64>,
    reservations: Vec<ReservationV1>,
    users: BTreeMap<String, UserV1>,
    parent: Option<String>,
    descendants: Vec<DescendantV1>,
}

/// A descendant as `[project, parent, in_use, holds]`, each hold `[id, deltas, expires_at ms]`.
#[derive(Deserialize)]
struct DescendantV1(
    String,
    String,
    BTreeMap<String, i64>,
    Vec<(Uuid, BTreeMap<String, i64>, i64)>,
);

#[derive(Serialize)]
struct DescendantV1Out<'a>(
    &'a str,
    &'a str,
    &'a BTreeMap<ResourceName, i64>,
    Vec<(&'a Uuid, &'a Deltas, i64)>,
);

/// A user's overrides, usage and the version (and position, once known) of its limits event.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserV1 {
    overrides: BTreeMap<String, i64>,
    limits_version: Option<u64>,
    limits_position: Option<u64>,
    in_use: BTreeMap<String, i64>,
}

#[derive(Serialize)]
struct UserV1Out<'a> {
    overrides: BTreeMap<&'a str, i64>,
    limits_version: Option<u64>,
    limits_position: Option<u64>,
    in_use: &'a BTreeMap<ResourceName, i64>,
}

/// One reservation as a JSON array (`[id, deltas, status, ...]`): a long-lived project has
/// one per reservation it ever had, so field names would be most of the snapshot's bytes.
#[derive(Deserialize)]
struct ReservationV1(
    Uuid,
    BTreeMap<String, i64>,
    /// "held", "committed", or the release reason ("rolled_back", "expired", "freed").
    String,
    /// created_at, expires_at and status_at, in ms since the Unix epoch.
    i64,
    i64,
    i64,
    /// The stream version of the status event, and its global position if it was known.
    u64,
    Option<u64>,
    /// A counted reserve's `[min, max, granted]`; null for a plain one.
    Option<[u32; 3]>,
    /// The user it is for; null for the project alone.
    Option<String>,
);

/// The same form as [`StateV1`], written from borrowed fields: a snapshot is taken on the
/// decision path of a busy project, so it copies nothing. The round-trip and frozen-body tests
/// hold the two to one form.
#[derive(Serialize)]
struct StateV1Out<'a> {
    version: u64,
    overrides: BTreeMap<&'a str, i64>,
    limits_version: Option<u64>,
    limits_position: Option<u64>,
    in_use: &'a BTreeMap<ResourceName, i64>,
    reservations: Vec<ReservationV1Out<'a>>,
    users: BTreeMap<&'a str, UserV1Out<'a>>,
    parent: Option<&'a str>,
    descendants: Vec<DescendantV1Out<'a>>,
}

#[derive(Serialize)]
struct ReservationV1Out<'a>(
    &'a Uuid,
    &'a Deltas,
    &'static str,
    i64,
    i64,
    i64,
    u64,
    Option<u64>,
    Option<[u32; 3]>,
    Option<&'a str>,
);

fn status_name(status: ReservationStatus) -> &'static str {
    match status {
        ReservationStatus::Held => "held",
        ReservationStatus::Committed => "committed",
        ReservationStatus::Released(reason) => reason.as_str(),
    }
}

fn status_from(name: &str) -> Result<ReservationStatus, String> {
    Ok(match name {
        "held" => ReservationStatus::Held,
        "committed" => ReservationStatus::Committed,
        "rolled_back" => ReservationStatus::Released(ReleaseReason::RolledBack),
        "expired" => ReservationStatus::Released(ReleaseReason::Expired),
        "freed" => ReservationStatus::Released(ReleaseReason::Freed),
        other => return Err(format!("unknown reservation status {other:?}")),
    })
}

fn resource_map(map: BTreeMap<String, i64>) -> Result<BTreeMap<ResourceName, i64>, String> {
    map.into_iter()
        .map(|(k, v)| {
            ResourceName::parse(&k)
                .map(|name| (name, v))
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn limits_by_name(limits: &Limits) -> BTreeMap<&str, i64> {
    limits
        .iter()
        .map(|(k, v)| (k.as_str(), v.value()))
        .collect()
}

fn limits_from(map: BTreeMap<String, i64>) -> Result<Limits, String> {
    map.into_iter()
        .map(|(name, value)| {
            let name = ResourceName::parse(&name).map_err(|e| e.to_string())?;
            let limit = Limit::new(value).map_err(|e| e.to_string())?;
            Ok((name, limit))
        })
        .collect()
}

fn timestamp(ms: i64) -> Result<Timestamp, String> {
    chrono::DateTime::from_timestamp_millis(ms).ok_or_else(|| format!("time {ms} out of range"))
}

fn project_id(id: &str) -> Result<ProjectId, String> {
    ProjectId::parse(id).map_err(|e| e.to_string())
}

/// The descendants a snapshot holds, with their in_use summed as the fold sums it.
fn subtree_from(descendants: Vec<DescendantV1>) -> Result<Subtree, String> {
    let members = descendants
        .into_iter()
        .map(|DescendantV1(id, parent, in_use, holds)| {
            let holds = holds.into_iter().map(|(id, deltas, expires)| {
                let hold = DescendantHold {
                    reservation_id: ReservationId(id),
                    deltas: Deltas::new(resource_map(deltas)?).map_err(|e| e.to_string())?,
                    expires_at: timestamp(expires)?,
                };
                Ok((hold.reservation_id, hold))
            });
            let member = crate::Descendant {
                parent: project_id(&parent)?,
                in_use: resource_map(in_use)?,
                holds: holds.collect::<Result<_, String>>()?,
            };
            Ok(SubtreeMember::from_descendant(project_id(&id)?, member))
        });
    let members = members.collect::<Result<Vec<_>, String>>()?;
    let mut subtree = Subtree::default();
    subtree.apply(&crate::Event::DescendantsJoined { members });
    Ok(subtree)
}

impl ProjectState {
    /// The stored form of this state, or `None` for a project with no events (nothing to
    /// save). Times keep millisecond precision, the precision events are recorded with.
    pub fn to_snapshot(&self) -> Option<EncodedSnapshot> {
        let version = self.version?;
        let mut reservations: Vec<&Reservation> =
            self.reservations.values().map(|r| &**r).collect();
        // Stream order (each reservation's status event has its own version), so that equal
        // states give equal bytes.
        reservations.sort_unstable_by_key(|r| r.status_version);
        let body = StateV1Out {
            version,
            overrides: limits_by_name(&self.overrides),
            limits_version: self.limits_version,
            limits_position: self.limits_position,
            in_use: &self.in_use,
            reservations: reservations
                .into_iter()
                .map(|r| {
                    ReservationV1Out(
                        &r.id.0,
                        &r.deltas,
                        status_name(r.status),
                        r.created_at.timestamp_millis(),
                        r.expires_at.timestamp_millis(),
                        r.status_at.timestamp_millis(),
                        r.status_version,
                        r.position,
                        r.count.map(|c| [c.range.min(), c.range.max(), c.granted]),
                        r.user.as_ref().map(UserId::as_str),
                    )
                })
                .collect(),
            users: self
                .users
                .iter()
                .map(|(user, u)| {
                    let body = UserV1Out {
                        overrides: limits_by_name(&u.overrides),
                        limits_version: u.limits_version,
                        limits_position: u.limits_position,
                        in_use: &u.in_use,
                    };
                    (user.as_str(), body)
                })
                .collect(),
            parent: self.parent.as_ref().map(ProjectId::as_str),
            descendants: self
                .subtree
                .members
                .iter()
                .map(|(id, d)| {
                    let holds = d.holds.values().map(|h| {
                        let expires = h.expires_at.timestamp_millis();
                        (&h.reservation_id.0, &h.deltas, expires)
                    });
                    DescendantV1Out(id.as_str(), d.parent.as_str(), &d.in_use, holds.collect())
                })
                .collect(),
        };
        let holds: usize = self.subtree.members.values().map(|d| d.holds.len()).sum();
        let room = BODY_BYTES_BASE
            + BODY_BYTES_PER_RESERVATION * self.reservations.len()
            + BODY_BYTES_PER_DESCENDANT_HOLD * holds;
        let mut data = Vec::with_capacity(room);
        serde_json::to_writer(&mut data, &body).expect("a state always serialises");
        Some(EncodedSnapshot {
            version,
            format: SNAPSHOT_FORMAT,
            data: String::from_utf8(data).expect("JSON is UTF-8"),
        })
    }

    /// The state a snapshot holds. Everything is validated as events are: a snapshot that
    /// does not describe a possible state is an error, never a panic or a silently odd state.
    pub fn from_snapshot(
        project: ProjectId,
        snapshot: &EncodedSnapshot,
    ) -> Result<ProjectState, SnapshotError> {
        if snapshot.format != SNAPSHOT_FORMAT {
            return Err(SnapshotError::OtherFormat(snapshot.format));
        }
        let body: StateV1 = serde_json::from_str(&snapshot.data)
            .map_err(|e| SnapshotError::Malformed(e.to_string()))?;
        Self::from_v1(project, body, snapshot.version).map_err(SnapshotError::Malformed)
    }

    fn from_v1(project: ProjectId, body: StateV1, version: u64) -> Result<ProjectState, String> {
        if body.version != version {
            return Err(format!(
                "body is at version {} but stored as {version}",
                body.version
            ));
        }
        let at_or_before = |v: u64, what: &str| {
            if v <= version {
                Ok(())
            } else {
                Err(format!(
                    "{what} version {v} is after the snapshot's {version}"
                ))
            }
        };
        if let Some(v) = body.limits_version {
            at_or_before(v, "limits")?;
        }
        let mut state = ProjectState::new(project);
        state.version = Some(version);
        state.limits_version = body.limits_version;
        state.limits_position = body.limits_position;
        state.overrides = limits_from(body.overrides)?;
        state.in_use = resource_map(body.in_use)?;
        for (user, u) in body.users {
            if let Some(v) = u.limits_version {
                at_or_before(v, "user limits")?;
            }
            let user = UserId::parse(&user).map_err(|e| e.to_string())?;
            let u = UserState {
                overrides: limits_from(u.overrides)?,
                limits_version: u.limits_version,
                limits_position: u.limits_position,
                in_use: resource_map(u.in_use)?,
            };
            state.users.insert(user, u);
        }
        state.parent = body.parent.as_deref().map(project_id).transpose()?;
        state.subtree = subtree_from(body.descendants)?;
        for ReservationV1(
            id,
            deltas,
            status,
            created,
            expires,
            status_at,
            status_version,
            position,
            count,
            user,
        ) in body.reservations
        {
            at_or_before(status_version, "reservation status")?;
            let count = match count {
                Some([min, max, granted]) => Some(Counted {
                    range: CountRange::new(min, max).map_err(|e| e.to_string())?,
                    granted,
                }),
                None => None,
            };
            let reservation = Reservation {
                id: ReservationId(id),
                deltas: Deltas::new(resource_map(deltas)?).map_err(|e| e.to_string())?,
                count,
                user: user
                    .map(|u| UserId::parse(&u).map_err(|e| e.to_string()))
                    .transpose()?,
                status: status_from(&status)?,
                created_at: timestamp(created)?,
                expires_at: timestamp(expires)?,
                status_at: timestamp(status_at)?,
                status_version,
                position,
            };
            if reservation.status == ReservationStatus::Held {
                state
                    .held
                    .put_in(reservation.id, &reservation.deltas, reservation.expires_at);
            }
            if state
                .reservations
                .insert(reservation.id, Box::new(reservation))
                .is_some()
            {
                return Err(format!("reservation {id} twice"));
            }
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{deltas, id, r};
    use crate::Event;
    use chrono::Duration;

    fn t0() -> Timestamp {
        timestamp(1_700_000_000_123).unwrap()
    }

    /// A state with every status, overrides, corrected usage and some known positions.
    fn busy_state() -> ProjectState {
        let mut state = ProjectState::new(ProjectId::parse("p").unwrap());
        let mut at = t0();
        let mut apply = |state: &mut ProjectState, event: Event| {
            at += Duration::milliseconds(7);
            state.apply(&event, at);
            let version = state.version.unwrap();
            if version.is_multiple_of(2) {
                state.note_position(&event, version, 1000 + version);
            }
        };
        apply(
            &mut state,
            Event::LimitsSet {
                limits: [(r("cores"), Limit::new(10).unwrap())].into(),
                forced: false,
            },
        );
        for n in 1..=5 {
            apply(
                &mut state,
                Event::ReservationRequested {
                    count: None,
                    reservation_id: id(n),
                    deltas: deltas(&[("cores", n as i64), ("ram", -1)]),
                    expires_at: t0() + Duration::seconds(60),
                    user: (n % 2 == 1).then(alice),
                },
            );
        }
        apply(
            &mut state,
            Event::ReservationCommitted {
                reservation_id: id(1),
            },
        );
        apply(
            &mut state,
            Event::ReservationCommitted {
                reservation_id: id(2),
            },
        );
        for (n, reason) in [
            (2, ReleaseReason::Freed),
            (3, ReleaseReason::RolledBack),
            (4, ReleaseReason::Expired),
        ] {
            apply(
                &mut state,
                Event::ReservationReleased {
                    reservation_id: id(n),
                    reason,
                },
            );
        }
        apply(
            &mut state,
            Event::UsageCorrected {
                resource: r("disk"),
                in_use_before: 0,
                in_use_after: 3,
                reason: "audit".into(),
                user: None,
            },
        );
        apply(
            &mut state,
            Event::UsageCorrected {
                resource: r("cores"),
                in_use_before: 1,
                in_use_after: 2,
                reason: "audit".into(),
                user: Some(alice()),
            },
        );
        apply(
            &mut state,
            Event::UserLimitsSet {
                user: alice(),
                limits: [(r("cores"), Limit::new(4).unwrap())].into(),
                forced: false,
            },
        );
        state
    }

    fn alice() -> UserId {
        UserId::parse("alice").unwrap()
    }

    #[test]
    fn a_state_round_trips() {
        let state = busy_state();
        let snapshot = state.to_snapshot().unwrap();
        assert_eq!(snapshot.version, state.version.unwrap());
        let back = ProjectState::from_snapshot(state.project.clone(), &snapshot).unwrap();
        assert_eq!(back, state);
        let held: Vec<ReservationId> = back.held().map(|r| r.id).collect();
        assert_eq!(held, [id(5)]);
        assert_eq!(back.to_snapshot().unwrap(), snapshot);
    }

    #[test]
    fn a_project_without_events_has_no_snapshot() {
        assert_eq!(
            ProjectState::new(ProjectId::parse("p").unwrap()).to_snapshot(),
            None
        );
    }

    /// The frozen body of format 4: a plain reservation, and a counted one for a user with
    /// limits and usage of its own; a parent, a child and a grandchild with a hold.
    #[test]
    fn format_4_bodies_stay_readable() {
        let data = r#"{"version":4,"overrides":{"cores":-1},"limits_version":0,"limits_position":null,"in_use":{"cores":2},"reservations":[["00000000-0000-0000-0000-000000000001",{"cores":2},"committed",1700000000000,1700000060000,1700000000005,2,17,null,null],["00000000-0000-0000-0000-000000000002",{"cores":6},"held",1700000000000,1700000060000,1700000000000,3,null,[2,5,3],"alice"]],"users":{"alice":{"overrides":{"cores":8},"limits_version":4,"limits_position":21,"in_use":{"cores":1}}},"parent":"org","descendants":[["c1","p",{"cores":3},[]],["g1","c1",{},[["00000000-0000-0000-0000-000000000009",{"cores":4},1700000060000]]]]}"#;
        let snapshot = EncodedSnapshot {
            version: 4,
            format: 4,
            data: data.into(),
        };
        let state = ProjectState::from_snapshot(ProjectId::parse("p").unwrap(), &snapshot).unwrap();
        let reservation = state.reservation(&id(1)).unwrap();
        assert_eq!(reservation.status, ReservationStatus::Committed);
        assert_eq!(reservation.position, Some(17));
        assert_eq!((reservation.count, reservation.user.clone()), (None, None));
        let counted = state.reservation(&id(2)).unwrap();
        assert_eq!(
            counted.count,
            Some(Counted {
                range: CountRange::new(2, 5).unwrap(),
                granted: 3
            })
        );
        assert_eq!(counted.user, Some(alice()));
        assert_eq!(state.in_use(&r("cores")), 2);
        assert_eq!(state.limits_version, Some(0));
        let user = state.user(&alice()).unwrap();
        assert_eq!(user.in_use(&r("cores")), 1);
        assert_eq!(
            state.user_override(&alice(), &r("cores")),
            Limit::new(8).ok()
        );
        assert_eq!(
            (user.limits_version, user.limits_position),
            (Some(4), Some(21))
        );
        assert_eq!(state.parent, ProjectId::parse("org").ok());
        let subtree = state.subtree();
        assert_eq!(subtree.height(&state.project), 2);
        let below = subtree.usage(&r("cores"), t0());
        assert_eq!((below.in_use, below.reserved), (3, 4));
        let cores = state.subtree_usage(&r("cores"), t0());
        assert_eq!((cores.in_use, cores.reserved), (5, 10));
        assert_eq!(state.to_snapshot().unwrap(), snapshot, "written as read");
    }

    /// Snapshots of earlier formats (before counts, before users) are not read: the project is
    /// folded from its events and snapshotted anew.
    #[test]
    fn earlier_formats_are_not_read() {
        let format_1 = r#"{"version":2,"overrides":{"cores":-1},"limits_version":0,"limits_position":null,"in_use":{"cores":2},"reservations":[["00000000-0000-0000-0000-000000000001",{"cores":2},"committed",1700000000000,1700000060000,1700000000005,2,17]]}"#;
        let format_2 = r#"{"version":2,"overrides":{"cores":-1},"limits_version":0,"limits_position":null,"in_use":{"cores":2},"reservations":[["00000000-0000-0000-0000-000000000001",{"cores":2},"committed",1700000000000,1700000060000,1700000000005,2,17,null]]}"#;
        for (format, data) in [(1, format_1), (2, format_2)] {
            let snapshot = EncodedSnapshot {
                version: 2,
                format,
                data: data.into(),
            };
            assert_eq!(
                ProjectState::from_snapshot(ProjectId::parse("p").unwrap(), &snapshot),
                Err(SnapshotError::OtherFormat(format))
            );
        }
    }

    #[test]
    fn bad_snapshots_are_errors_not_panics() {
        let state = busy_state();
        let good = state.to_snapshot().unwrap();
        let project = state.project.clone();
        let other_format = EncodedSnapshot {
            format: SNAPSHOT_FORMAT + 1,
            ..good.clone()
        };
        assert_eq!(
            ProjectState::from_snapshot(project.clone(), &other_format),
            Err(SnapshotError::OtherFormat(SNAPSHOT_FORMAT + 1))
        );
        let wrong_version = EncodedSnapshot {
            version: good.version + 1,
            ..good.clone()
        };
        let bodies = [
            "not json".to_owned(),
            good.data.replace("\"committed\"", "\"lost\""),
            good.data.replace("\"cores\"", "\"bad name!\""),
            good.data.replace("\"cores\":10", "\"cores\":-2"),
            good.data
                .replace("\"version\":", "\"extra\":1,\"version\":"),
        ];
        for data in bodies {
            assert_ne!(data, good.data);
            let bad = EncodedSnapshot {
                data,
                ..good.clone()
            };
            assert!(matches!(
                ProjectState::from_snapshot(project.clone(), &bad),
                Err(SnapshotError::Malformed(_))
            ));
        }
        assert!(matches!(
            ProjectState::from_snapshot(project, &wrong_version),
            Err(SnapshotError::Malformed(_))
        ));
    }
}
