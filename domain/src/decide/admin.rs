//! An operator's decisions: a project's or a user's own limits (rule 6: not below usage
//! unless forced; rule 8) and corrections of in_use (rule 10).

use std::collections::BTreeMap;

use super::{unknown_resources, Correction, Decision, Outcome, Refusal, ResourceStanding};
use crate::{Defaults, Event, Limit, Limits, ProjectState, ResourceName, Timestamp, UserId};

/// Set the overrides of the project (`user` is `None`) or of one of its users. A limit
/// lowered below the owner's in_use + reserved is refused unless forced.
pub(super) fn set_limits(
    state: &ProjectState,
    defaults: &Defaults,
    now: Timestamp,
    user: Option<&UserId>,
    limits: &Limits,
    force: bool,
) -> Result<Decision, Refusal> {
    unknown_resources(state, defaults, limits.keys())?;
    // The owner's limit before: for the project its effective one, for a user its override.
    let current = |resource: &ResourceName| match user {
        None => state.limit(defaults, resource),
        Some(user) => state.user_override(user, resource),
    };
    let mut below = BTreeMap::new();
    for (resource, limit) in limits {
        let Some(cap) = limit.cap() else { continue };
        let lowering = current(resource)
            .and_then(Limit::cap)
            .is_none_or(|old| cap < old);
        let usage = match user {
            // A project's limit caps its subtree (rule 11).
            None => state.subtree_usage(resource, now),
            Some(user) => state.user_usage(user, resource, now),
        };
        let used = usage.in_use.saturating_add(usage.reserved);
        if lowering && cap < used {
            below.insert(resource.clone(), ResourceStanding::of(*limit, &usage));
        }
    }
    if !below.is_empty() && !force {
        return Err(Refusal::LimitBelowUsage(below));
    }
    let overridden = |resource: &ResourceName| match user {
        None => state.overrides.get(resource).copied(),
        Some(user) => state.user_override(user, resource),
    };
    let outcome = match user {
        None => Outcome::Limits,
        Some(user) => Outcome::UserLimits(user.clone()),
    };
    if limits.iter().all(|(r, l)| overridden(r) == Some(*l)) {
        return Ok(Decision::grant(vec![], outcome));
    }
    let limits = limits.clone();
    let forced = force && !below.is_empty();
    let event = match user {
        None => Event::LimitsSet { limits, forced },
        Some(user) => Event::UserLimitsSet {
            user: user.clone(),
            limits,
            forced,
        },
    };
    Ok(Decision::grant(vec![event], outcome))
}

pub(super) fn correct_usage(
    state: &ProjectState,
    defaults: &Defaults,
    in_use: &BTreeMap<ResourceName, i64>,
    reason: &str,
    user: Option<&UserId>,
) -> Result<Decision, Refusal> {
    unknown_resources(state, defaults, in_use.keys())?;
    let user_state = user.and_then(|u| state.user(u));
    // One event per resource whose count changes; equal counts record nothing.
    let corrections: Vec<Correction> = in_use
        .iter()
        .map(|(resource, after)| Correction {
            resource: resource.clone(),
            before: match user {
                None => state.in_use(resource),
                Some(_) => user_state.map_or(0, |u| u.in_use(resource)),
            },
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
            user: user.cloned(),
        })
        .collect();
    Ok(Decision::grant(
        events,
        Outcome::UsageCorrected(corrections),
    ))
}
