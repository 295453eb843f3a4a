//! Decisions: a command, the state it is judged on and the time give the events to record and
//! the answer. Pure: the caller supplies `now` and appends the events.

//!
//! One file per kind of decision: `reserve` (rules 1–3, 7, 8, 9: grants and denials),
//! `holds` (commits, releases and expiries: rules 4, 5, 10), `admin` (limits and corrections:
//! rules 6, 8, 10).

mod admin;
mod holds;
mod parent;
mod reserve;

pub use parent::{decide_parent, ParentDecision, TreeRefusal};

use std::collections::BTreeMap;

use crate::limits::{MAX_EXPIRES_IN_S, MAX_RESOURCES_PER_REQUEST, MIN_EXPIRES_IN_S};
use crate::{
    check_limits, CountRange, Defaults, Deltas, Event, InvalidInput, Limit, Limits, ProjectId,
    ProjectState, Reason, ReservationId, ResourceName, Timestamp, Usage, UserId,
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Reserve {
        reservation_id: ReservationId,
        /// Per unit when `count` is given.
        deltas: Deltas,
        expires_in_s: u32,
        /// A counted reserve (SPEC rule 9): the largest k in the range that fits is granted.
        count: Option<CountRange>,
        /// The user inside the project it is for (SPEC rule 8): its own limits cap it too.
        user: Option<UserId>,
    },
    Commit {
        reservation_id: ReservationId,
    },
    Release {
        reservation_id: ReservationId,
    },
    SetLimits {
        limits: Limits,
        force: bool,
    },
    ResetLimits,
    /// A user's own limits (SPEC rule 8; rule 6 applies to the user's usage).
    SetUserLimits {
        user: UserId,
        limits: Limits,
        force: bool,
    },
    ResetUserLimits {
        user: UserId,
    },
    /// Record the release of every hold past its expiry (the sweeper's command).
    Expire,
    /// An operator's recount: the real in_use of each resource named (SPEC rule 10).
    CorrectUsage {
        in_use: BTreeMap<ResourceName, i64>,
        /// Validated at the edge (SPEC: 1–256 characters, no control characters).
        reason: Reason,
        /// A user's in_use instead of the project's; the project's moves by as much.
        user: Option<UserId>,
    },
}

impl Command {
    /// Checks what can be checked without state, so a bad command is refused before any I/O.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        match self {
            Command::Reserve { expires_in_s, .. } => {
                if !(MIN_EXPIRES_IN_S..=MAX_EXPIRES_IN_S).contains(expires_in_s) {
                    return Err(InvalidInput::ExpiresIn(i64::from(*expires_in_s)));
                }
            }
            Command::SetLimits { limits, .. } | Command::SetUserLimits { limits, .. } => {
                check_limits(limits)?
            }
            Command::CorrectUsage { in_use, .. } => {
                if in_use.is_empty() {
                    return Err(InvalidInput::EmptyCorrection);
                }
                if in_use.len() > MAX_RESOURCES_PER_REQUEST {
                    return Err(InvalidInput::TooManyResources(in_use.len()));
                }
                if let Some(negative) = in_use.values().find(|n| **n < 0) {
                    return Err(InvalidInput::NegativeUsage(*negative));
                }
            }
            Command::Commit { .. }
            | Command::Release { .. }
            | Command::ResetLimits
            | Command::ResetUserLimits { .. }
            | Command::Expire => {}
        }
        Ok(())
    }
}

/// A resource's numbers in an over-quota answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceStanding {
    pub limit: Limit,
    pub in_use: i64,
    pub reserved: i64,
}

impl ResourceStanding {
    /// The standing of a resource with this limit and usage.
    pub fn of(limit: Limit, usage: &Usage) -> Self {
        ResourceStanding {
            limit,
            in_use: usage.in_use,
            reserved: usage.reserved,
        }
    }

    /// `limit - in_use - reserved`, or `None` when unlimited.
    pub fn headroom(&self) -> Option<i64> {
        self.limit.cap().map(|cap| {
            cap.saturating_sub(self.in_use)
                .saturating_sub(self.reserved)
        })
    }
}

/// How a user's reserve stood against the user's own limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserStanding {
    pub user: UserId,
    /// The resources over the user's own limits, sorted.
    pub overs: Vec<ResourceName>,
    /// Every resource of the request: the user's limit (its own override, else the project's
    /// effective limit) and the user's usage.
    pub standing: BTreeMap<ResourceName, ResourceStanding>,
}

/// Why a command was refused. A refusal changes nothing, except where its decision also
/// carries events (a denial is audited; a commit after expiry records the expiry).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    #[error("no default limit for {}", join(.0))]
    UnknownResource(Vec<ResourceName>),
    #[error("over quota for {}", join(.overs))]
    OverQuota {
        /// Every resource that is over, sorted.
        overs: Vec<ResourceName>,
        /// The standing of every resource of the request.
        standing: BTreeMap<ResourceName, ResourceStanding>,
        /// A counted reserve: the largest count that would fit (0 if none).
        max_count: Option<u32>,
        /// A reserve for a user: how it stood against the user's limits.
        user: Option<Box<UserStanding>>,
        /// The ancestors whose subtree it would take over their limits, with those resources.
        ancestor_overs: BTreeMap<ProjectId, Vec<ResourceName>>,
    },
    /// A parent that cannot be set (SPEC rule 11): a 400.
    #[error(transparent)]
    Tree(#[from] TreeRefusal),
    #[error("usage of {} would fall below zero", join(.0))]
    UsageUnderflow(Vec<ResourceName>),
    #[error("reservation id already used with a different request")]
    IdempotencyMismatch,
    #[error("no such reservation")]
    NotFound,
    #[error("the reservation expired before it was committed")]
    ReservationExpired,
    #[error("the reservation was already released")]
    ReservationReleased,
    #[error("limit below current usage for {}", join(.0.keys()))]
    LimitBelowUsage(BTreeMap<ResourceName, ResourceStanding>),
}

fn join<'a>(names: impl IntoIterator<Item = &'a ResourceName>) -> String {
    names
        .into_iter()
        .map(ResourceName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a granted command answers; the caller reads the details from the state after the
/// events are applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Reservation(ReservationId),
    Limits,
    /// A user's limits were set or reset.
    UserLimits(UserId),
    Expired(usize),
    /// The resources whose in_use changed (an unchanged one is left out).
    UsageCorrected(Vec<Correction>),
}

/// One resource's in_use, before and after a correction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Correction {
    pub resource: ResourceName,
    pub before: i64,
    pub after: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Events to append, in order. May be non-empty even when the answer is a refusal.
    pub events: Vec<Event>,
    pub answer: Result<Outcome, Refusal>,
}

impl Decision {
    pub(crate) fn grant(events: Vec<Event>, outcome: Outcome) -> Self {
        Decision {
            events,
            answer: Ok(outcome),
        }
    }

    pub(crate) fn refuse(refusal: impl Into<Refusal>) -> Self {
        Decision {
            events: vec![],
            answer: Err(refusal.into()),
        }
    }
}

pub(crate) fn unknown_resources<'a>(
    state: &ProjectState,
    defaults: &Defaults,
    names: impl Iterator<Item = &'a ResourceName>,
) -> Result<(), Refusal> {
    let _ = state; // a resource exists only once it has a default, whatever the overrides
    let unknown: Vec<ResourceName> = names
        .filter(|r| defaults.limit(r).is_none())
        .cloned()
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(Refusal::UnknownResource(unknown))
    }
}

/// Decide a project command at `now` against the project's state and the defaults.
pub fn decide(
    command: &Command,
    state: &ProjectState,
    defaults: &Defaults,
    now: Timestamp,
) -> Decision {
    decide_in_tree(command, state, &[], defaults, now)
}

/// Decide a project command as [`decide`] does, for a project with ancestors (nearest first):
/// a reserve must fit each ancestor's limits too (rule 11).
pub fn decide_in_tree(
    command: &Command,
    state: &ProjectState,
    ancestors: &[&ProjectState],
    defaults: &Defaults,
    now: Timestamp,
) -> Decision {
    if let Err(invalid) = command.validate() {
        return Decision::refuse(invalid);
    }
    let result = match command {
        Command::Reserve {
            reservation_id,
            deltas,
            expires_in_s,
            count,
            user,
        } => {
            let asked = reserve::Asked {
                id: *reservation_id,
                unit: deltas,
                count: *count,
                expires_in_s: *expires_in_s,
                user: user.as_ref(),
            };
            reserve::reserve(state, ancestors, defaults, now, &asked)
        }
        Command::Commit { reservation_id } => holds::commit(state, now, *reservation_id),
        Command::Release { reservation_id } => {
            holds::release(state, ancestors, defaults, now, *reservation_id)
        }
        Command::SetLimits { limits, force } => {
            admin::set_limits(state, defaults, now, None, limits, *force)
        }
        Command::ResetLimits => Ok(if state.overrides.is_empty() {
            Decision::grant(vec![], Outcome::Limits)
        } else {
            Decision::grant(vec![Event::LimitsReset], Outcome::Limits)
        }),
        Command::SetUserLimits {
            user,
            limits,
            force,
        } => admin::set_limits(state, defaults, now, Some(user), limits, *force),
        Command::ResetUserLimits { user } => Ok(Decision::grant(
            state
                .user(user)
                .filter(|u| !u.overrides.is_empty())
                .map(|_| Event::UserLimitsReset { user: user.clone() })
                .into_iter()
                .collect(),
            Outcome::UserLimits(user.clone()),
        )),
        Command::Expire => Ok(holds::expire(state, now)),
        Command::CorrectUsage {
            in_use,
            reason,
            user,
        } => admin::correct_usage(state, defaults, in_use, reason.as_str(), user.as_ref()),
    };
    result.unwrap_or_else(Decision::refuse)
}

/// Decide new default limits.
pub fn decide_defaults(limits: &Limits, defaults: &Defaults) -> Result<Vec<Event>, Refusal> {
    check_limits(limits)?;
    if limits.iter().all(|(r, l)| defaults.limit(r) == Some(*l)) {
        return Ok(vec![]);
    }
    Ok(vec![Event::DefaultLimitsSet {
        limits: limits.clone(),
    }])
}
