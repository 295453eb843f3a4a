//! What becomes of a hold: committed into in_use (rule 4: not after its expiry), released
//! or freed (rule 10: never below zero), expired by the sweeper. Repeats change nothing (rule 5).

use std::collections::BTreeMap;

use super::{Decision, Outcome, Refusal, ResourceStanding};
use crate::limits::MAX_EXPIRED_PER_DECISION;
use crate::state::taken_out;
use crate::{
    checked_add, Defaults, Event, Limit, ProjectId, ProjectState, ReleaseReason, Reservation,
    ReservationId, ReservationStatus, ResourceName, Timestamp, Usage,
};

pub(super) fn commit(
    state: &ProjectState,
    now: Timestamp,
    id: ReservationId,
) -> Result<Decision, Refusal> {
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
            let user = reservation.user.as_ref();
            for (resource, delta) in reservation.deltas.iter() {
                let mut after = checked_add(resource, state.in_use(resource), delta)?;
                if let Some(user) = user {
                    let user_in_use = state.user(user).map_or(0, |u| u.in_use(resource));
                    after = after.min(checked_add(resource, user_in_use, delta)?);
                }
                if after < 0 {
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

pub(super) fn release(
    state: &ProjectState,
    ancestors: &[&ProjectState],
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
            freeing_fits(state, ancestors, defaults, now, reservation)?;
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

/// Freeing a committed reservation takes its deltas out of in_use, never below zero (rule 10:
/// after a correction it stops at zero). It must still leave room for the reductions held
/// (rule 3, as a reserve would). Freeing a committed reduction (a negative delta) gives usage
/// back, which rule 1 bounds like any grant: it must fit under the project's limit, and the
/// user's own and each ancestor's (their subtrees), with what is reserved. As for a reserve, an
/// ancestor it would take over is named in `ancestor_overs`, not in the project's `overs`.
fn freeing_fits(
    state: &ProjectState,
    ancestors: &[&ProjectState],
    defaults: &Defaults,
    now: Timestamp,
    reservation: &Reservation,
) -> Result<(), Refusal> {
    let mut underflows = vec![];
    let mut overs = vec![];
    let mut ancestor_overs: BTreeMap<ProjectId, Vec<ResourceName>> = BTreeMap::new();
    let mut standing = BTreeMap::new();
    // Whether freeing `delta` takes `usage` over `limit`, with what is reserved. An overflow is
    // refused like every other sum (not read as "fits").
    let over = |resource: &ResourceName, delta: i64, limit: Limit, usage: Usage| {
        let Some(cap) = limit.cap() else {
            return Ok(false);
        };
        let freed = checked_add(
            resource,
            usage.in_use,
            delta.checked_neg().unwrap_or(i64::MAX),
        )?;
        Ok::<bool, Refusal>(checked_add(resource, freed, usage.reserved)? > cap)
    };
    for (resource, delta) in reservation.deltas.iter() {
        let usage = state.subtree_usage(resource, now);
        let limit = state.limit(defaults, resource).unwrap_or(Limit::UNLIMITED);
        standing.insert(resource.clone(), ResourceStanding::of(limit, &usage));
        let own_in_use = state.in_use(resource);
        if checked_add(resource, taken_out(own_in_use, delta), usage.releasing)? < 0 {
            underflows.push(resource.clone());
        }
        if delta >= 0 {
            continue;
        }
        let mut caps = vec![(limit, usage)];
        if let Some(user) = &reservation.user {
            if let Some(own) = state.user_override(user, resource) {
                caps.push((own, state.user_usage(user, resource, now)));
            }
        }
        for (limit, usage) in caps {
            if over(resource, delta, limit, usage)? && !overs.contains(resource) {
                overs.push(resource.clone());
            }
        }
        for ancestor in ancestors {
            let Some(limit) = ancestor.limit(defaults, resource) else {
                continue;
            };
            if over(
                resource,
                delta,
                limit,
                ancestor.subtree_usage(resource, now),
            )? {
                let named = ancestor_overs.entry(ancestor.project.clone()).or_default();
                named.push(resource.clone());
            }
        }
    }
    if !underflows.is_empty() {
        Err(Refusal::UsageUnderflow(underflows))
    } else if overs.is_empty() && ancestor_overs.is_empty() {
        Ok(())
    } else {
        Err(Refusal::OverQuota {
            overs,
            standing,
            max_count: None,
            user: None,
            ancestor_overs,
        })
    }
}

pub(super) fn expire(state: &ProjectState, now: Timestamp) -> Decision {
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
