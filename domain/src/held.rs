//! A project's held reservations, and what they add up to (also the usage view's totals).
//!
//! Every reserve asks how much of each resource the project's live holds take, and the
//! project's holds are as many as its clients keep in flight (thousands for one whose clients
//! leave holds to expire). Summing them for each resource of each decision made a decision's
//! cost grow with them; the sums are kept instead, as holds come and go. They answer only while
//! every hold is still live (before the earliest expiry): after it, the caller sums the live
//! ones as before.

use std::collections::{BTreeMap, BTreeSet};

use crate::{Deltas, ReservationId, ResourceName, Timestamp};

/// What a set of holds adds up to, kept as holds come and go: for a project's state
/// ([`Holds`]) and for the usage view's fold (`ProjectUsage`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HoldTotals {
    /// Per resource, the sum of the holds' positive deltas, and of their negative ones. `i128`:
    /// a sum of `i64`s cannot overflow it, so taking a hold out is exact; reads saturate as
    /// summing in `i64` with `saturating_add` did (each sum has one sign, so that is a clamp).
    reserved: BTreeMap<ResourceName, i128>,
    releasing: BTreeMap<ResourceName, i128>,
    /// How many holds expire at each instant: its first key is the earliest expiry.
    expiries: BTreeMap<Timestamp, u64>,
}

/// What every hold adds up to for one resource: `reserved` ≥ 0, `releasing` ≤ 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HeldSums {
    pub reserved: i64,
    pub releasing: i64,
}

impl HoldTotals {
    /// Counts a hold of `deltas` until `expires_at` in.
    pub(crate) fn put_in(&mut self, deltas: &Deltas, expires_at: Timestamp) {
        for (resource, delta) in deltas.iter().filter(|(_, delta)| *delta != 0) {
            *self
                .sums_of_sign(delta)
                .entry(resource.clone())
                .or_default() += i128::from(delta);
        }
        *self.expiries.entry(expires_at).or_default() += 1;
    }

    /// Counts out a hold that was counted in with these `deltas` and `expires_at`.
    pub(crate) fn take_out(&mut self, deltas: &Deltas, expires_at: Timestamp) {
        for (resource, delta) in deltas.iter().filter(|(_, delta)| *delta != 0) {
            let sums = self.sums_of_sign(delta);
            if let Some(sum) = sums.get_mut(resource) {
                *sum -= i128::from(delta);
                if *sum == 0 {
                    sums.remove(resource);
                }
            }
        }
        if let Some(count) = self.expiries.get_mut(&expires_at) {
            *count -= 1;
            if *count == 0 {
                self.expiries.remove(&expires_at);
            }
        }
    }

    /// The sums of every hold for `resource`, if every hold is still live at `now`; `None`
    /// when some may have expired, and only the live ones count.
    pub(crate) fn sums_if_all_live(
        &self,
        resource: &ResourceName,
        now: Timestamp,
    ) -> Option<HeldSums> {
        let earliest = self.expiries.keys().next();
        if earliest.is_some_and(|earliest| now >= *earliest) {
            return None;
        }
        let clamp = |sum: Option<&i128>| {
            let sum = sum.copied().unwrap_or(0);
            i64::try_from(sum).unwrap_or(if sum > 0 { i64::MAX } else { i64::MIN })
        };
        Some(HeldSums {
            reserved: clamp(self.reserved.get(resource)),
            releasing: clamp(self.releasing.get(resource)),
        })
    }

    /// The sums a delta of this sign goes into (never called with 0).
    fn sums_of_sign(&mut self, delta: i64) -> &mut BTreeMap<ResourceName, i128> {
        if delta > 0 {
            &mut self.reserved
        } else {
            &mut self.releasing
        }
    }
}

/// The ids of a project's held reservations with their totals. Changed only through
/// [`Holds::put_in`] and [`Holds::take_out`], which keep the totals with the ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Holds {
    ids: BTreeSet<ReservationId>,
    totals: HoldTotals,
}

impl Holds {
    pub(crate) fn ids(&self) -> impl Iterator<Item = &ReservationId> {
        self.ids.iter()
    }

    /// Holds `id` with `deltas` until `expires_at`; nothing if `id` is held already.
    pub(crate) fn put_in(&mut self, id: ReservationId, deltas: &Deltas, expires_at: Timestamp) {
        if self.ids.insert(id) {
            self.totals.put_in(deltas, expires_at);
        }
    }

    /// Takes `id` out, with the `deltas` and `expires_at` it was put in with; nothing if `id`
    /// is not held.
    pub(crate) fn take_out(&mut self, id: &ReservationId, deltas: &Deltas, expires_at: Timestamp) {
        if self.ids.remove(id) {
            self.totals.take_out(deltas, expires_at);
        }
    }

    /// [`HoldTotals::sums_if_all_live`] of these holds.
    pub(crate) fn sums_if_all_live(
        &self,
        resource: &ResourceName,
        now: Timestamp,
    ) -> Option<HeldSums> {
        self.totals.sums_if_all_live(resource, now)
    }
}
