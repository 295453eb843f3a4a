//! A reserve: granted if it fits every cap (rules 1, 8), denied and audited if not (rule 2),
//! refused on a reduction below zero (rule 3) or an unknown resource (rule 7); a counted
//! reserve takes the largest count that fits (rule 9).

use std::collections::BTreeMap;

use chrono::Duration;

use super::{unknown_resources, Decision, Outcome, Refusal, ResourceStanding, UserStanding};
use crate::{
    checked_add, CountRange, Counted, Defaults, Deltas, Event, Judged, Limit, ProjectId,
    ProjectState, ReservationId, ResourceName, Timestamp, Usage, UserId,
};

/// A reserve as asked: its deltas (per unit when counted), count range and hold.
pub(super) struct Asked<'a> {
    pub id: ReservationId,
    pub unit: &'a Deltas,
    pub count: Option<CountRange>,
    pub expires_in_s: u32,
    pub user: Option<&'a UserId>,
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
        same_expiry
            && same_deltas
            && existing.count.map(|c| c.range) == self.count
            && existing.user.as_ref() == self.user
    }
}

pub(super) fn reserve(
    state: &ProjectState,
    ancestors: &[&ProjectState],
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
            let fits = units_that_fit(state, ancestors, defaults, now, asked, range.max())?;
            // Below the minimum the denial is judged on the minimum: the least it asked for.
            (fits.max(range.min()), Some(fits))
        }
    };
    let deltas = asked.unit.times(units)?;
    let judged = judge(state, defaults, now, &deltas);
    let user = asked
        .user
        .map(|user| judge_user(state, defaults, now, &deltas, user))
        .transpose();
    let (judged, user) = match (judged, user) {
        (Ok(judged), Ok(user)) => (judged, user),
        // Rule 2: a refusal names every resource below zero, the project's and the user's.
        (Err(Refusal::UsageUnderflow(mut project)), Err(Refusal::UsageUnderflow(user))) => {
            project.extend(user);
            project.sort();
            project.dedup();
            return Err(Refusal::UsageUnderflow(project));
        }
        (Err(refusal), _) | (_, Err(refusal)) => return Err(refusal),
    };
    let user_overs = user.as_ref().map_or(vec![], |u| u.overs.clone());
    let ancestor_overs = judge_ancestors(ancestors, defaults, now, &deltas)?;
    if !judged.overs.is_empty() || !user_overs.is_empty() || !ancestor_overs.is_empty() {
        return Ok(Decision {
            events: vec![Event::ReservationDenied {
                reservation_id: asked.id,
                deltas,
                overs: judged.overs.clone(),
                judged: judged.as_event(),
                count: asked.count,
                user: asked.user.cloned(),
                user_overs,
                ancestor_overs: ancestor_overs.clone(),
            }],
            answer: Err(Refusal::OverQuota {
                overs: judged.overs,
                standing: judged.standing,
                max_count,
                user: user.map(Box::new),
                ancestor_overs,
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
            user: asked.user.cloned(),
        }],
        Outcome::Reservation(asked.id),
    ))
}

/// The largest count, up to `most`, whose multiple of the unit fits every limit (0 if none):
/// each resource with a positive delta and a cap allows `(cap - in_use - reserved) / delta`,
/// for the project's subtree, for the user's own limits and for each ancestor's subtree.
fn units_that_fit(
    state: &ProjectState,
    ancestors: &[&ProjectState],
    defaults: &Defaults,
    now: Timestamp,
    asked: &Asked<'_>,
    most: u32,
) -> Result<u32, Refusal> {
    let room = |cap: i64, usage: Usage, resource: &ResourceName| {
        checked_add(resource, usage.in_use, usage.reserved)
            .map(|used| cap.saturating_sub(used).max(0))
    };
    let mut fits = i64::from(most);
    for (resource, delta) in asked.unit.iter().filter(|(_, d)| *d > 0) {
        let limit = state
            .limit(defaults, resource)
            .expect("every resource was checked to have a default limit");
        if let Some(cap) = limit.cap() {
            fits = fits.min(room(cap, state.subtree_usage(resource, now), resource)? / delta);
        }
        for ancestor in ancestors {
            let cap = ancestor.limit(defaults, resource).and_then(Limit::cap);
            if let Some(cap) = cap {
                let usage = ancestor.subtree_usage(resource, now);
                fits = fits.min(room(cap, usage, resource)? / delta);
            }
        }
        let user_cap = asked
            .user
            .and_then(|user| Some((user, state.user_override(user, resource)?.cap()?)));
        if let Some((user, cap)) = user_cap {
            fits = fits.min(room(cap, state.user_usage(user, resource, now), resource)? / delta);
        }
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
        // The limit caps the subtree (the project alone when it has no descendants); rule 3
        // is about the project's own in_use.
        let usage = state.subtree_usage(resource, now);
        let own_in_use = state.in_use(resource);
        let limit = state
            .limit(defaults, resource)
            .expect("every resource was checked to have a default limit");
        standing.insert(resource.clone(), ResourceStanding::of(limit, &usage));
        if delta < 0 {
            let after = checked_add(
                resource,
                checked_add(resource, own_in_use, usage.releasing)?,
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

/// The ancestors whose subtree `deltas` would take over their limit (rule 11), with those
/// resources, sorted.
fn judge_ancestors(
    ancestors: &[&ProjectState],
    defaults: &Defaults,
    now: Timestamp,
    deltas: &Deltas,
) -> Result<BTreeMap<ProjectId, Vec<ResourceName>>, Refusal> {
    let mut overs = BTreeMap::new();
    for ancestor in ancestors {
        let mut over = vec![];
        for (resource, delta) in deltas.iter().filter(|(_, d)| *d > 0) {
            let Some(cap) = ancestor.limit(defaults, resource).and_then(Limit::cap) else {
                continue;
            };
            let usage = ancestor.subtree_usage(resource, now);
            let used = checked_add(resource, usage.in_use, usage.reserved)?;
            if checked_add(resource, used, delta)? > cap {
                over.push(resource.clone());
            }
        }
        if !over.is_empty() {
            overs.insert(ancestor.project.clone(), over);
        }
    }
    Ok(overs)
}

/// How `deltas` stand against a user's own limits (rule 8: only its overrides cap it), with
/// rule 3 for the user's usage: a reduction below the user's zero is refused.
fn judge_user(
    state: &ProjectState,
    defaults: &Defaults,
    now: Timestamp,
    deltas: &Deltas,
    user: &UserId,
) -> Result<UserStanding, Refusal> {
    let mut underflows = vec![];
    let mut overs = vec![];
    let mut standing = BTreeMap::new();
    for (resource, delta) in deltas.iter() {
        let usage = state.user_usage(user, resource, now);
        let own = state.user_override(user, resource);
        let shown = own
            .or_else(|| state.limit(defaults, resource))
            .expect("every resource was checked to have a default limit");
        standing.insert(resource.clone(), ResourceStanding::of(shown, &usage));
        let held = if delta < 0 {
            usage.releasing
        } else {
            usage.reserved
        };
        let after = checked_add(resource, checked_add(resource, usage.in_use, held)?, delta)?;
        if delta < 0 && after < 0 {
            underflows.push(resource.clone());
        }
        if delta > 0 && own.and_then(Limit::cap).is_some_and(|cap| after > cap) {
            overs.push(resource.clone());
        }
    }
    if !underflows.is_empty() {
        return Err(Refusal::UsageUnderflow(underflows));
    }
    Ok(UserStanding {
        user: user.clone(),
        overs,
        standing,
    })
}
