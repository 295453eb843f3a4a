//! Decisions: a command, the state it is judged on and the time give the events to record and
//! the answer. Pure: the caller supplies `now` and appends the events.

use std::collections::BTreeMap;

use chrono::Duration;

use crate::limits::{
    MAX_EXPIRED_PER_DECISION, MAX_EXPIRES_IN_S, MAX_RESOURCES_PER_REQUEST, MIN_EXPIRES_IN_S,
};
use crate::{
    check_limits, checked_add, CountRange, Counted, Defaults, Deltas, Event, InvalidInput, Judged,
    Limit, Limits, ProjectState, Reason, ReleaseReason, ReservationId, ReservationStatus,
    ResourceName, Timestamp, Usage,
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
    /// Record the release of every hold past its expiry (the sweeper's command).
    Expire,
    /// An operator's recount: the real in_use of each resource named (SPEC rule 10).
    CorrectUsage {
        in_use: BTreeMap<ResourceName, i64>,
        /// Validated at the edge (SPEC: 1–256 characters, no control characters).
        reason: Reason,
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
            Command::SetLimits { limits, .. } => check_limits(limits)?,
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
    },
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
    fn grant(events: Vec<Event>, outcome: Outcome) -> Self {
        Decision {
            events,
            answer: Ok(outcome),
        }
    }

    fn refuse(refusal: impl Into<Refusal>) -> Self {
        Decision {
            events: vec![],
            answer: Err(refusal.into()),
        }
    }
}

fn unknown_resources<'a>(
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
    if let Err(invalid) = command.validate() {
        return Decision::refuse(invalid);
    }
    let result = match command {
        Command::Reserve {
            reservation_id,
            deltas,
            expires_in_s,
            count,
        } => {
            let asked = Asked {
                id: *reservation_id,
                unit: deltas,
                count: *count,
                expires_in_s: *expires_in_s,
            };
            reserve(state, defaults, now, &asked)
        }
        Command::Commit { reservation_id } => commit(state, now, *reservation_id),
        Command::Release { reservation_id } => release(state, defaults, now, *reservation_id),
        Command::SetLimits { limits, force } => set_limits(state, defaults, now, limits, *force),
        Command::ResetLimits => Ok(if state.overrides.is_empty() {
            Decision::grant(vec![], Outcome::Limits)
        } else {
            Decision::grant(vec![Event::LimitsReset], Outcome::Limits)
        }),
        Command::Expire => Ok(expire(state, now)),
        Command::CorrectUsage { in_use, reason } => {
            correct_usage(state, defaults, in_use, reason.as_str())
        }
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

/// A reserve as asked: its deltas (per unit when counted), count range and hold.
struct Asked<'a> {
    id: ReservationId,
    unit: &'a Deltas,
    count: Option<CountRange>,
    expires_in_s: u32,
}

impl Asked<'_> {
    /// Whether a stored reservation is what this reserve asks for (an idempotent repeat).
    fn is_repeated_by(&self, existing: &crate::Reservation) -> bool {
        let same_expiry = existing.expires_at - existing.created_at
            == Duration::seconds(i64::from(self.expires_in_s));
        let same_deltas = match existing.count {
            Some(counted) => self.unit.times(counted.granted).as_ref() == Ok(&existing.deltas),
            None => self.unit == &existing.deltas,
        };
        same_expiry && same_deltas && existing.count.map(|c| c.range) == self.count
    }
}

fn reserve(
    state: &ProjectState,
    defaults: &Defaults,
    now: Timestamp,
    asked: &Asked<'_>,
) -> Result<Decision, Refusal> {
    if let Some(existing) = state.reservation(&asked.id) {
        return if asked.is_repeated_by(existing) {
            Ok(Decision::grant(vec![], Outcome::Reservation(asked.id)))
        } else {
            Err(Refusal::IdempotencyMismatch)
        };
    }
    unknown_resources(state, defaults, asked.unit.resources())?;
    let (units, max_count) = match asked.count {
        None => (1, None),
        Some(range) => {
            let fits = units_that_fit(state, defaults, now, asked.unit, range.max())?;
            // Below the minimum the denial is judged on the minimum: the least it asked for.
            (fits.max(range.min()), Some(fits))
        }
    };
    let deltas = asked.unit.times(units)?;
    let judged = judge(state, defaults, now, &deltas)?;
    if !judged.overs.is_empty() {
        return Ok(Decision {
            events: vec![Event::ReservationDenied {
                reservation_id: asked.id,
                deltas,
                overs: judged.overs.clone(),
                judged: judged.as_event(),
                count: asked.count,
            }],
            answer: Err(Refusal::OverQuota {
                overs: judged.overs,
                standing: judged.standing,
                max_count,
            }),
        });
    }
    let expires_at = now + Duration::seconds(i64::from(asked.expires_in_s));
    let count = asked.count.map(|range| Counted {
        range,
        granted: units,
    });
    Ok(Decision::grant(
        vec![Event::ReservationRequested {
            reservation_id: asked.id,
            deltas,
            expires_at,
            count,
        }],
        Outcome::Reservation(asked.id),
    ))
}

/// The largest count, up to `most`, whose multiple of `unit` fits every limit (0 if none):
/// each resource with a positive delta and a cap allows `(cap - in_use - reserved) / delta`.
fn units_that_fit(
    state: &ProjectState,
    defaults: &Defaults,
    now: Timestamp,
    unit: &Deltas,
    most: u32,
) -> Result<u32, Refusal> {
    let mut fits = i64::from(most);
    for (resource, delta) in unit.iter().filter(|(_, d)| *d > 0) {
        let limit = state
            .limit(defaults, resource)
            .expect("every resource was checked to have a default limit");
        let Some(cap) = limit.cap() else { continue };
        let usage = state.usage(resource, now);
        let used = checked_add(resource, usage.in_use, usage.reserved)?;
        let room = cap.saturating_sub(used).max(0);
        fits = fits.min(room / delta);
    }
    Ok(u32::try_from(fits).unwrap_or(0))
}

/// How `deltas` stand against the limits: the resources over them, and every resource's
/// numbers. An underflow (a reduction below zero) is refused.
struct Judgement {
    overs: Vec<ResourceName>,
    standing: BTreeMap<ResourceName, ResourceStanding>,
}

impl Judgement {
    fn as_event(&self) -> BTreeMap<ResourceName, Judged> {
        self.standing
            .iter()
            .map(|(r, s)| {
                (
                    r.clone(),
                    Judged {
                        limit: s.limit,
                        in_use: s.in_use,
                        reserved: s.reserved,
                    },
                )
            })
            .collect()
    }
}

fn judge(
    state: &ProjectState,
    defaults: &Defaults,
    now: Timestamp,
    deltas: &Deltas,
) -> Result<Judgement, Refusal> {
    let mut underflows = vec![];
    let mut overs = vec![];
    let mut standing = BTreeMap::new();
    for (resource, delta) in deltas.iter() {
        let usage = state.usage(resource, now);
        let limit = state
            .limit(defaults, resource)
            .expect("every resource was checked to have a default limit");
        standing.insert(resource.clone(), ResourceStanding::of(limit, &usage));
        if delta < 0 {
            let after = checked_add(
                resource,
                checked_add(resource, usage.in_use, usage.releasing)?,
                delta,
            )?;
            if after < 0 {
                underflows.push(resource.clone());
            }
        } else {
            let after = checked_add(
                resource,
                checked_add(resource, usage.in_use, usage.reserved)?,
                delta,
            )?;
            if limit.cap().is_some_and(|cap| delta > 0 && after > cap) {
                overs.push(resource.clone());
            }
        }
    }
    if !underflows.is_empty() {
        return Err(Refusal::UsageUnderflow(underflows));
    }
    Ok(Judgement { overs, standing })
}

fn commit(state: &ProjectState, now: Timestamp, id: ReservationId) -> Result<Decision, Refusal> {
    let reservation = state.reservation(&id).ok_or(Refusal::NotFound)?;
    match reservation.status {
        ReservationStatus::Committed => Ok(Decision::grant(vec![], Outcome::Reservation(id))),
        ReservationStatus::Released(ReleaseReason::Expired) => Err(Refusal::ReservationExpired),
        ReservationStatus::Released(_) => Err(Refusal::ReservationReleased),
        ReservationStatus::Held if !reservation.is_live_hold(now) => Ok(Decision {
            // Record the expiry now rather than leave it to the sweeper: nothing is lost silently.
            events: vec![Event::ReservationReleased {
                reservation_id: id,
                reason: ReleaseReason::Expired,
            }],
            answer: Err(Refusal::ReservationExpired),
        }),
        ReservationStatus::Held => {
            // Reserve kept in_use plus held reductions at zero or more, but a correction or a
            // freed reservation since then may have lowered in_use: never commit below zero.
            let mut underflows = vec![];
            for (resource, delta) in reservation.deltas.iter() {
                if checked_add(resource, state.in_use(resource), delta)? < 0 {
                    underflows.push(resource.clone());
                }
            }
            if !underflows.is_empty() {
                return Err(Refusal::UsageUnderflow(underflows));
            }
            Ok(Decision::grant(
                vec![Event::ReservationCommitted { reservation_id: id }],
                Outcome::Reservation(id),
            ))
        }
    }
}

fn release(
    state: &ProjectState,
    defaults: &Defaults,
    now: Timestamp,
    id: ReservationId,
) -> Result<Decision, Refusal> {
    let reservation = state.reservation(&id).ok_or(Refusal::NotFound)?;
    let reason = match reservation.status {
        ReservationStatus::Released(_) => {
            return Ok(Decision::grant(vec![], Outcome::Reservation(id)));
        }
        ReservationStatus::Held if reservation.is_live_hold(now) => ReleaseReason::RolledBack,
        ReservationStatus::Held => ReleaseReason::Expired,
        ReservationStatus::Committed => {
            // Freeing a committed reservation takes its deltas out of in_use. Freeing must
            // leave room for the reductions still held, as a reserve would; and freeing a
            // committed reduction (a negative delta) gives usage back, which rule 1 bounds
            // like any grant: it must fit under the limit with what is reserved.
            let mut underflows = vec![];
            let mut overs = vec![];
            let mut standing = BTreeMap::new();
            for (resource, delta) in reservation.deltas.iter() {
                let usage = state.usage(resource, now);
                let freed = checked_add(
                    resource,
                    usage.in_use,
                    delta.checked_neg().unwrap_or(i64::MAX),
                )?;
                if checked_add(resource, freed, usage.releasing)? < 0 {
                    underflows.push(resource.clone());
                }
                let limit = state.limit(defaults, resource).unwrap_or(Limit::UNLIMITED);
                if let Some(cap) = limit.cap().filter(|_| delta < 0) {
                    // An overflow is refused like every other sum (not read as "fits").
                    if checked_add(resource, freed, usage.reserved)? > cap {
                        overs.push(resource.clone());
                    }
                }
                standing.insert(resource.clone(), ResourceStanding::of(limit, &usage));
            }
            if !underflows.is_empty() {
                return Err(Refusal::UsageUnderflow(underflows));
            }
            if !overs.is_empty() {
                return Err(Refusal::OverQuota {
                    overs,
                    standing,
                    max_count: None,
                });
            }
            ReleaseReason::Freed
        }
    };
    Ok(Decision::grant(
        vec![Event::ReservationReleased {
            reservation_id: id,
            reason,
        }],
        Outcome::Reservation(id),
    ))
}

fn set_limits(
    state: &ProjectState,
    defaults: &Defaults,
    now: Timestamp,
    limits: &Limits,
    force: bool,
) -> Result<Decision, Refusal> {
    unknown_resources(state, defaults, limits.keys())?;
    let mut below = BTreeMap::new();
    for (resource, limit) in limits {
        let Some(cap) = limit.cap() else { continue };
        let current = state.limit(defaults, resource);
        let lowering = current.and_then(Limit::cap).is_none_or(|old| cap < old);
        let usage = state.usage(resource, now);
        let used = usage.in_use.saturating_add(usage.reserved);
        if lowering && cap < used {
            below.insert(resource.clone(), ResourceStanding::of(*limit, &usage));
        }
    }
    if !below.is_empty() && !force {
        return Err(Refusal::LimitBelowUsage(below));
    }
    if limits
        .iter()
        .all(|(r, l)| state.overrides.get(r) == Some(l))
    {
        return Ok(Decision::grant(vec![], Outcome::Limits));
    }
    Ok(Decision::grant(
        vec![Event::LimitsSet {
            limits: limits.clone(),
            forced: force && !below.is_empty(),
        }],
        Outcome::Limits,
    ))
}

fn expire(state: &ProjectState, now: Timestamp) -> Decision {
    let mut due: Vec<_> = state.held().filter(|r| !r.is_live_hold(now)).collect();
    due.sort_by_key(|r| (r.expires_at, r.id));
    due.truncate(MAX_EXPIRED_PER_DECISION);
    let events: Vec<Event> = due
        .iter()
        .map(|r| Event::ReservationReleased {
            reservation_id: r.id,
            reason: ReleaseReason::Expired,
        })
        .collect();
    let count = events.len();
    Decision::grant(events, Outcome::Expired(count))
}

fn correct_usage(
    state: &ProjectState,
    defaults: &Defaults,
    in_use: &BTreeMap<ResourceName, i64>,
    reason: &str,
) -> Result<Decision, Refusal> {
    unknown_resources(state, defaults, in_use.keys())?;
    // One event per resource whose count changes; equal counts record nothing.
    let corrections: Vec<Correction> = in_use
        .iter()
        .map(|(resource, after)| Correction {
            resource: resource.clone(),
            before: state.in_use(resource),
            after: *after,
        })
        .filter(|c| c.before != c.after)
        .collect();
    let events = corrections
        .iter()
        .map(|c| Event::UsageCorrected {
            resource: c.resource.clone(),
            in_use_before: c.before,
            in_use_after: c.after,
            reason: reason.to_owned(),
        })
        .collect();
    Ok(Decision::grant(
        events,
        Outcome::UsageCorrected(corrections),
    ))
}
