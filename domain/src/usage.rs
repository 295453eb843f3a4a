//! The usage view's fold: what a project's usage is made of (committed usage, its own limits,
//! and the reservations that can still change it), folded event by event.
//!
//! [`ProjectState`](crate::ProjectState) keeps every reservation a project ever had (its
//! answers to retried commands need them), which a view of a million projects cannot hold.
//! A released reservation no longer changes anything (`apply` ignores commits and releases
//! of it, and a new request under its id starts afresh), so [`ProjectUsage`] keeps only the
//! held and committed ones. Its rules are `ProjectState::apply`'s: the property test below
//! folds random histories with both and compares every number after every event.

use std::collections::{BTreeMap, HashMap};

use crate::held::HoldTotals;
use crate::state::taken_out;
use crate::{Deltas, Event, Limits, ReservationId, ResourceName, Timestamp};

/// A reservation that still matters: held (its positive deltas count as reserved until
/// `expires_at`) or committed (its deltas are in `in_use`, and a release frees them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveReservation {
    pub deltas: Deltas,
    pub expires_at: Timestamp,
}

/// One project's usage, as the views keep it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProjectUsage {
    pub in_use: BTreeMap<ResourceName, i64>,
    pub overrides: Limits,
    /// Changed only through [`ProjectUsage::hold`] and `unhold`, which keep `held_totals`.
    held: HashMap<ReservationId, LiveReservation>,
    pub committed: HashMap<ReservationId, LiveReservation>,
    held_totals: HoldTotals,
}

/// What one event changed in a [`ProjectUsage`], so that a view writes back only that.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageChange {
    /// Resources whose `in_use` was written.
    pub in_use: Vec<ResourceName>,
    /// The reservation that was added, moved between held and committed, or dropped.
    pub reservation: Option<ReservationId>,
    /// Whether the overrides changed.
    pub limits: bool,
}

impl ProjectUsage {
    pub fn in_use(&self, resource: &ResourceName) -> i64 {
        self.in_use.get(resource).copied().unwrap_or(0)
    }

    /// The positive deltas of holds still live at `now`, for one resource (as
    /// `ProjectState::usage(..).reserved`).
    pub fn reserved_at(&self, resource: &ResourceName, now: Timestamp) -> i64 {
        if let Some(sums) = self.held_totals.sums_if_all_live(resource, now) {
            return sums.reserved;
        }
        self.held
            .values()
            .filter(|hold| now < hold.expires_at)
            .map(|hold| hold.deltas.get(resource))
            .filter(|delta| *delta > 0)
            .fold(0i64, |sum, delta| sum.saturating_add(delta))
    }

    /// The held reservations.
    pub fn held(&self) -> &HashMap<ReservationId, LiveReservation> {
        &self.held
    }

    /// Holds `reservation` under `id`, in place of whatever the id held.
    pub fn hold(&mut self, id: ReservationId, reservation: LiveReservation) {
        self.unhold(&id);
        self.held_totals
            .put_in(&reservation.deltas, reservation.expires_at);
        self.held.insert(id, reservation);
    }

    fn unhold(&mut self, id: &ReservationId) -> Option<LiveReservation> {
        let hold = self.held.remove(id)?;
        self.held_totals.take_out(&hold.deltas, hold.expires_at);
        Some(hold)
    }

    /// The reservation, held or committed, if it still matters.
    pub fn reservation(&self, id: &ReservationId) -> Option<&LiveReservation> {
        self.held.get(id).or_else(|| self.committed.get(id))
    }

    /// Folds one event of the project's stream, as `ProjectState::apply` does.
    pub fn apply(&mut self, event: &Event) -> UsageChange {
        let mut change = UsageChange::default();
        match event {
            Event::DefaultLimitsSet { .. } | Event::ReservationDenied { .. } => {}
            Event::LimitsSet { limits, .. } => {
                self.overrides
                    .extend(limits.iter().map(|(r, l)| (r.clone(), *l)));
                change.limits = true;
            }
            Event::LimitsReset => {
                self.overrides.clear();
                change.limits = true;
            }
            Event::ReservationRequested {
                reservation_id,
                deltas,
                expires_at,
                ..
            } => {
                // A request replaces whatever the id held before.
                self.committed.remove(reservation_id);
                self.hold(
                    *reservation_id,
                    LiveReservation {
                        deltas: deltas.clone(),
                        expires_at: *expires_at,
                    },
                );
                change.reservation = Some(*reservation_id);
            }
            Event::ReservationCommitted { reservation_id } => {
                if let Some(kept) = self.unhold(reservation_id) {
                    for (resource, delta) in kept.deltas.iter() {
                        let used = self.in_use.entry(resource.clone()).or_default();
                        *used = used.saturating_add(delta);
                        change.in_use.push(resource.clone());
                    }
                    self.committed.insert(*reservation_id, kept);
                    change.reservation = Some(*reservation_id);
                }
            }
            Event::ReservationReleased { reservation_id, .. } => {
                if self.unhold(reservation_id).is_some() {
                    change.reservation = Some(*reservation_id);
                } else if let Some(kept) = self.committed.remove(reservation_id) {
                    for (resource, delta) in kept.deltas.iter() {
                        let used = self.in_use.entry(resource.clone()).or_default();
                        *used = taken_out(*used, delta);
                        change.in_use.push(resource.clone());
                    }
                    change.reservation = Some(*reservation_id);
                }
            }
            Event::UsageCorrected {
                resource,
                in_use_before,
                in_use_after,
                user,
                ..
            } => {
                let used = self.in_use.entry(resource.clone()).or_default();
                *used = match user {
                    None => *in_use_after,
                    // A user's correction moves the project's in_use by the same amount.
                    Some(_) => taken_out(*used, in_use_before.saturating_sub(*in_use_after)),
                };
                change.in_use.push(resource.clone());
            }
            // A user's limits cap only reserves; the views keep the project's own usage, not
            // its place in the tree nor its descendants' (the ledger's state answers those).
            Event::UserLimitsSet { .. }
            | Event::UserLimitsReset { .. }
            | Event::ParentSet { .. }
            | Event::DescendantReserved { .. }
            | Event::DescendantUsageChanged { .. }
            | Event::DescendantsJoined { .. }
            | Event::DescendantsLeft { .. } => {}
        }
        change
    }
}

#[cfg(test)]
mod tests {
    //! Property: over any history, the fold keeps exactly `ProjectState::apply`'s numbers.

    use std::collections::BTreeSet;

    use chrono::{Duration, TimeZone, Utc};
    use proptest::prelude::*;

    use super::*;
    use crate::tests::{deltas, id, r};
    use crate::{Limit, ProjectId, ProjectState, ReleaseReason, ReservationStatus, UserId};

    const RESOURCES: [&str; 3] = ["cores", "ram", "gpus"];

    /// (kind, reservation, amounts, seconds to expiry, release reason)
    fn step() -> impl Strategy<Value = (u8, u128, (i64, i64), i64, u8)> {
        (0u8..11, 0u128..5, (-3i64..6, -2i64..4), 1i64..60, 0u8..3)
    }

    /// No user, or one of two.
    fn user(pick: u8) -> Option<UserId> {
        [None, Some("alice"), Some("bob")][usize::from(pick)].map(|u| UserId::parse(u).unwrap())
    }

    fn event(
        (kind, n, (a, b), expires_s, reason): (u8, u128, (i64, i64), i64, u8),
        now: Timestamp,
    ) -> Event {
        let some_deltas = || {
            let pairs: Vec<(&str, i64)> = [("cores", a), ("ram", b)]
                .into_iter()
                .filter(|(_, v)| *v != 0)
                .collect();
            if pairs.is_empty() {
                deltas(&[("gpus", 1)])
            } else {
                deltas(&pairs)
            }
        };
        match kind {
            0 | 1 => Event::ReservationRequested {
                count: None,
                reservation_id: id(n),
                deltas: some_deltas(),
                expires_at: now + Duration::seconds(expires_s),
                user: user(reason),
            },
            2 | 3 => Event::ReservationCommitted {
                reservation_id: id(n),
            },
            4 => Event::ReservationReleased {
                reservation_id: id(n),
                reason: [
                    ReleaseReason::RolledBack,
                    ReleaseReason::Expired,
                    ReleaseReason::Freed,
                ][usize::from(reason)],
            },
            5 => Event::LimitsSet {
                limits: [(
                    r(RESOURCES[usize::from(reason)]),
                    Limit::new(a.max(-1)).unwrap(),
                )]
                .into(),
                forced: reason == 0,
            },
            6 => Event::LimitsReset,
            7 => Event::UsageCorrected {
                resource: r(RESOURCES[usize::from(reason)]),
                in_use_before: b.abs(),
                in_use_after: a.abs(),
                reason: "recount".into(),
                user: user(u8::try_from(n % 3).unwrap()),
            },
            9 => Event::UserLimitsSet {
                user: user(1 + reason % 2).unwrap(),
                limits: [(r("cores"), Limit::new(a.max(-1)).unwrap())].into(),
                forced: false,
            },
            10 => Event::UserLimitsReset {
                user: user(1 + reason % 2).unwrap(),
            },
            _ => Event::ReservationDenied {
                ancestor_overs: Default::default(),
                count: None,
                reservation_id: id(n),
                deltas: some_deltas(),
                overs: vec![r("cores")],
                judged: BTreeMap::new(),
                user: user(reason),
                user_overs: vec![],
            },
        }
    }

    fn reservations_with(
        state: &ProjectState,
        status: ReservationStatus,
    ) -> HashMap<ReservationId, LiveReservation> {
        state
            .reservations
            .values()
            .filter(|r| r.status == status)
            .map(|r| {
                (
                    r.id,
                    LiveReservation {
                        deltas: r.deltas.clone(),
                        expires_at: r.expires_at,
                    },
                )
            })
            .collect()
    }

    /// A project's usage of `resource` at `at`, summed over all its reservations.
    fn summed(state: &ProjectState, resource: &ResourceName, at: Timestamp) -> crate::Usage {
        let live = state.reservations.values().filter(|r| r.is_live_hold(at));
        let deltas: Vec<i64> = live.map(|r| r.deltas.get(resource)).collect();
        crate::Usage {
            in_use: state.in_use(resource),
            reserved: deltas.iter().filter(|d| **d > 0).sum(),
            releasing: deltas.iter().filter(|d| **d < 0).sum(),
        }
    }

    proptest! {
        #[test]
        fn the_usage_fold_keeps_the_numbers_of_project_state(
            steps in proptest::collection::vec((step(), 0i64..20), 1..120)
        ) {
            let mut now = Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).unwrap();
            let mut state = ProjectState::new(ProjectId::parse("p").unwrap());
            let mut usage = ProjectUsage::default();
            for (step, advance_s) in steps {
                now += Duration::seconds(advance_s);
                let event = event(step, now);
                let before = usage.clone();
                state.apply(&event, now);
                let change = usage.apply(&event);

                prop_assert_eq!(&usage.overrides, &state.overrides);
                prop_assert_eq!(usage.held(), &reservations_with(&state, ReservationStatus::Held));
                prop_assert_eq!(
                    &usage.committed,
                    &reservations_with(&state, ReservationStatus::Committed)
                );
                for name in RESOURCES {
                    let resource = r(name);
                    prop_assert_eq!(usage.in_use(&resource), state.in_use(&resource));
                    for later in [0, 10, 30, 90] {
                        let at = now + Duration::seconds(later);
                        prop_assert_eq!(
                            usage.reserved_at(&resource, at),
                            state.usage(&resource, at).reserved
                        );
                        // Both keep totals of their holds: the sums are checked against
                        // every reservation's own status and expiry, summed afresh.
                        prop_assert_eq!(state.usage(&resource, at), summed(&state, &resource, at));
                    }
                }
                // The change names everything that moved, so a view that writes back only
                // that stays equal to the fold.
                let moved_in_use: BTreeSet<&ResourceName> = usage
                    .in_use
                    .iter()
                    .filter(|(r, v)| before.in_use.get(*r) != Some(*v))
                    .map(|(r, _)| r)
                    .collect();
                let named: BTreeSet<&ResourceName> = change.in_use.iter().collect();
                prop_assert!(moved_in_use.is_subset(&named), "{moved_in_use:?} {named:?}");
                prop_assert_eq!(change.limits, before.overrides != usage.overrides
                    || matches!(event, Event::LimitsSet { .. } | Event::LimitsReset));
                if let Some(changed) = event.reservation_id().filter(|id| {
                    before.reservation(id) != usage.reservation(id)
                        || before.held().contains_key(id) != usage.held().contains_key(id)
                }) {
                    prop_assert_eq!(change.reservation, Some(changed));
                }
            }
        }
    }
}
