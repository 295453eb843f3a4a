//! The commands in the implementations' types, and their answers and state in the model's.

use std::collections::BTreeMap;

use domain::{
    Command, Correction, CountRange, Defaults, Deltas, Limit, Limits, ProjectState, Reason,
    Refusal, ReleaseReason, Reservation, ReservationId, ReservationStatus, ResourceName,
    ResourceStanding, Timestamp, UserId,
};
use ledger::{LimitSource, LimitsView, ReservationView};
use uuid::Uuid;

use super::commands::{named, Cmd, RESOURCES, USERS};
use super::reference::{
    refused, Answer, EffectiveLimits, Snapshot, Status, UserRefusal, UserSnapshot,
};

pub fn res(name: &str) -> ResourceName {
    ResourceName::parse(name).unwrap()
}

pub fn user_id(user: usize) -> UserId {
    UserId::parse(USERS[user]).unwrap()
}

pub fn deltas_of(pairs: &[(usize, i64)]) -> Deltas {
    Deltas::new(
        named(pairs)
            .into_iter()
            .map(|(r, d)| (res(&r), d))
            .collect(),
    )
    .unwrap()
}

pub fn limits_of(pairs: &[(usize, i64)]) -> Limits {
    named(pairs)
        .into_iter()
        .map(|(r, l)| (res(&r), Limit::new(l).unwrap()))
        .collect()
}

pub fn in_use_of(pairs: &[(usize, i64)]) -> BTreeMap<ResourceName, i64> {
    named(pairs)
        .into_iter()
        .map(|(r, n)| (res(&r), n))
        .collect()
}

pub fn count_of(count: Option<(u32, u32)>) -> Option<CountRange> {
    count.map(|(min, max)| CountRange::new(min, max).unwrap())
}

pub fn reason() -> Reason {
    Reason::parse("model test").unwrap()
}

pub fn status_of(status: ReservationStatus) -> Status {
    match status {
        ReservationStatus::Held => Status::Held,
        ReservationStatus::Committed => Status::Committed,
        ReservationStatus::Released(reason) => Status::Released(match reason {
            ReleaseReason::RolledBack => "rolled_back",
            ReleaseReason::Expired => "expired",
            ReleaseReason::Freed => "freed",
        }),
    }
}

fn plain_deltas(deltas: &Deltas) -> BTreeMap<String, i64> {
    deltas.iter().map(|(r, d)| (r.to_string(), d)).collect()
}

pub fn reservation_answer(r: &Reservation) -> Answer {
    Answer::Reservation {
        id: r.id.0,
        status: status_of(r.status),
        deltas: plain_deltas(&r.deltas),
        expires_ms: r.expires_at.timestamp_millis(),
        count: r.count.map(|c| c.granted),
        user: r.user.as_ref().map(ToString::to_string),
    }
}

pub fn view_answer(view: &ReservationView) -> Answer {
    Answer::Reservation {
        id: view.reservation_id.0,
        status: status_of(view.status),
        deltas: plain_deltas(&view.deltas),
        expires_ms: view.expires_at.timestamp_millis(),
        count: view.count.map(|c| c.granted),
        user: view.user.as_ref().map(ToString::to_string),
    }
}

pub fn limits_answer(view: &LimitsView) -> Answer {
    Answer::Limits(
        view.limits
            .iter()
            .map(|(r, (l, source))| {
                let source = match source {
                    LimitSource::User => "user",
                    LimitSource::Project => "project",
                    LimitSource::Default => "default",
                };
                (r.to_string(), (l.value(), source))
            })
            .collect(),
    )
}

/// The effective limits of the project, or of one of its users, read from a state.
pub fn state_limits(state: &ProjectState, defaults: &Defaults, user: Option<&UserId>) -> Answer {
    let mut all: EffectiveLimits = defaults
        .limits
        .iter()
        .map(|(r, l)| (r.to_string(), (l.value(), "default")))
        .collect();
    all.extend(
        state
            .overrides
            .iter()
            .map(|(r, l)| (r.to_string(), (l.value(), "project"))),
    );
    if let Some(own) = user.and_then(|u| state.user(u)) {
        all.extend(
            own.overrides
                .iter()
                .map(|(r, l)| (r.to_string(), (l.value(), "user"))),
        );
    }
    Answer::Limits(all)
}

pub fn corrected_answer(corrections: &[Correction]) -> Answer {
    Answer::Corrected(
        corrections
            .iter()
            .map(|c| (c.resource.to_string(), c.before, c.after))
            .collect(),
    )
}

fn numbers(s: &ResourceStanding) -> (i64, i64, i64) {
    (s.limit.value(), s.in_use, s.reserved)
}

pub fn refusal_answer(refusal: &Refusal) -> Answer {
    let names = |v: &[ResourceName]| v.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    let standing = |s: &BTreeMap<ResourceName, ResourceStanding>| {
        s.iter()
            .map(|(r, s)| (r.to_string(), Some(numbers(s))))
            .collect()
    };
    match refusal {
        Refusal::Invalid(_) => refused("invalid", vec![]),
        Refusal::UnknownResource(v) => refused("unknown-resource", names(v)),
        Refusal::OverQuota {
            overs,
            standing: s,
            max_count,
            user,
            ancestor_overs: _,
        } => Answer::Refused {
            code: "over-quota",
            resources: standing(s),
            overs: names(overs),
            max_count: *max_count,
            user: user.as_ref().map(|u| UserRefusal {
                user: u.user.to_string(),
                overs: names(&u.overs),
                standing: u
                    .standing
                    .iter()
                    .map(|(r, s)| (r.to_string(), numbers(s)))
                    .collect(),
            }),
        },
        Refusal::UsageUnderflow(v) => refused("usage-underflow", names(v)),
        Refusal::IdempotencyMismatch => refused("idempotency-mismatch", vec![]),
        Refusal::NotFound => refused("not-found", vec![]),
        Refusal::ReservationExpired => refused("reservation-expired", vec![]),
        Refusal::ReservationReleased => refused("reservation-released", vec![]),
        Refusal::LimitBelowUsage(s) => Answer::Refused {
            code: "limit-below-usage",
            resources: standing(s),
            overs: vec![],
            max_count: None,
            user: None,
        },
        Refusal::Tree(_) => refused("invalid", vec![]),
    }
}

pub fn domain_command(command: &Cmd, id: Uuid) -> Command {
    let reservation_id = ReservationId(id);
    match command {
        Cmd::Reserve {
            deltas,
            expires_in,
            count,
            user,
            ..
        } => Command::Reserve {
            user: user.map(user_id),
            reservation_id,
            deltas: deltas_of(deltas),
            expires_in_s: *expires_in,
            count: count_of(*count),
        },
        Cmd::Commit(_) => Command::Commit { reservation_id },
        Cmd::Release(_) => Command::Release { reservation_id },
        Cmd::SetLimits { limits, force } => Command::SetLimits {
            limits: limits_of(limits),
            force: *force,
        },
        Cmd::ResetLimits => Command::ResetLimits,
        Cmd::SetUserLimits {
            user,
            limits,
            force,
        } => Command::SetUserLimits {
            user: user_id(*user),
            limits: limits_of(limits),
            force: *force,
        },
        Cmd::ResetUserLimits(user) => Command::ResetUserLimits {
            user: user_id(*user),
        },
        Cmd::Expire => Command::Expire,
        Cmd::Correct { user, in_use } => Command::CorrectUsage {
            user: user.map(user_id),
            in_use: in_use_of(in_use),
            reason: reason(),
        },
        Cmd::Advance(_) => unreachable!(),
    }
}

pub fn state_snapshot(state: &ProjectState, now: Timestamp, ids: &[Uuid]) -> Snapshot {
    let triple = |u: domain::Usage| (u.in_use, u.reserved, u.releasing);
    Snapshot {
        overrides: state
            .overrides
            .iter()
            .map(|(r, l)| (r.to_string(), l.value()))
            .collect(),
        usage: RESOURCES[..3]
            .iter()
            .map(|r| (r.to_string(), triple(state.usage(&res(r), now))))
            .collect(),
        users: (0..USERS.len())
            .map(|u| {
                let user = user_id(u);
                let own = UserSnapshot {
                    overrides: state
                        .user(&user)
                        .map(|s| {
                            s.overrides
                                .iter()
                                .map(|(r, l)| (r.to_string(), l.value()))
                                .collect()
                        })
                        .unwrap_or_default(),
                    usage: RESOURCES[..3]
                        .iter()
                        .map(|r| (r.to_string(), triple(state.user_usage(&user, &res(r), now))))
                        .collect(),
                };
                (USERS[u].to_owned(), own)
            })
            .collect(),
        reservations: ids
            .iter()
            .map(|id| {
                let r = state.reservation(&ReservationId(*id));
                let about =
                    r.map(|r| (status_of(r.status), r.user.as_ref().map(|u| u.to_string())));
                (*id, about)
            })
            .collect(),
    }
}
