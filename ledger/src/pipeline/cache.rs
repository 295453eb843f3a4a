//! The cached project states: one slot per project, evicted when idle past either bound (the
//! number of projects, or the reservations their states hold together).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use domain::{ProjectId, ProjectState, StreamVersion};

/// One project's place in the cache.
pub(super) struct Slot {
    /// Bumped by the appender when an append of this slot fails; see the pipeline's docs.
    pub(super) epoch: AtomicU64,
    /// The reservations in `inner.state` when last counted: this slot's part of
    /// [`SlotCache::reservations`].
    reservations: AtomicUsize,
    pub(super) inner: tokio::sync::Mutex<SlotState>,
}

/// A slot's state, changed only under its lock.
pub(super) struct SlotState {
    pub(super) state: ProjectState,
    /// The epoch `state` was built under; a mismatch means it must be reloaded.
    pub(super) epoch: u64,
    pub(super) loaded: bool,
    /// The version of the project's latest snapshot, stored or queued with an append.
    pub(super) snapshot_version: StreamVersion,
}

/// The slots, and the bounds they are evicted by.
pub(super) struct SlotCache {
    /// Projects whose state stays cached.
    capacity: usize,
    /// Reservations the cached states may hold together.
    max_reservations: usize,
    slots: Mutex<Slots>,
    /// The sum of every cached slot's `reservations`: an atomic, so that counting after a
    /// decision takes no lock. Eviction subtracts only idle slots, which nobody counts.
    reservations: AtomicUsize,
}

#[derive(Default)]
struct Slots {
    by_project: HashMap<ProjectId, Arc<Slot>>,
    /// The total after the last eviction that could not get under its target because the
    /// rest was in use; the next waits for the total to grow by a hundredth of the bound, so
    /// that a cache over its bound is not scanned on every request.
    futile_eviction_at: Option<usize>,
}

impl SlotCache {
    pub(super) fn new(capacity: usize, max_reservations: usize) -> Self {
        SlotCache {
            capacity,
            max_reservations,
            slots: Mutex::new(Slots::default()),
            reservations: AtomicUsize::new(0),
        }
    }

    pub(super) fn projects(&self) -> usize {
        self.lock().by_project.len()
    }

    /// Reservations held by the cached project states, together.
    pub(super) fn reservations(&self) -> usize {
        self.reservations.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The project's slot, new (not loaded) if it was not cached; evicts idle slots first when
    /// the cache is over a bound.
    pub(super) fn slot(&self, project: &ProjectId) -> Arc<Slot> {
        let mut slots = self.lock();
        let reservations = self.reservations();
        let over_bound = reservations > self.max_reservations
            && slots
                .futile_eviction_at
                .is_none_or(|at| reservations > at + self.max_reservations / 100);
        // Held while evicting, so the project about to be used is not among the evicted.
        let cached = slots.by_project.get(project).cloned();
        if over_bound {
            self.evict_idle(&mut slots);
        }
        if let Some(slot) = cached {
            return slot;
        }
        if slots.by_project.len() >= self.capacity {
            self.evict_idle(&mut slots);
        }
        let slot = Arc::new(Slot {
            epoch: AtomicU64::new(0),
            reservations: AtomicUsize::new(0),
            inner: tokio::sync::Mutex::new(SlotState {
                state: ProjectState::new(project.clone()),
                epoch: 0,
                loaded: false,
                snapshot_version: None,
            }),
        });
        slots.by_project.insert(project.clone(), slot.clone());
        slot
    }

    /// Records how many reservations `slot`'s state holds now (called with the slot locked,
    /// after each change of its state).
    pub(super) fn count_reservations(&self, slot: &Slot, state: &ProjectState) {
        let now = state.reservation_count();
        let before = slot.reservations.swap(now, Ordering::Relaxed);
        if now >= before {
            self.reservations.fetch_add(now - before, Ordering::Relaxed);
        } else {
            self.reservations.fetch_sub(before - now, Ordering::Relaxed);
        }
    }

    /// Drops cached projects nobody is using until the cache is 10% under both its bounds,
    /// the number of projects and the reservations they hold. Nobody can start using a slot
    /// meanwhile: slots are handed out under the same lock.
    fn evict_idle(&self, slots: &mut Slots) {
        let mut projects = slots.by_project.len();
        let mut reservations = self.reservations();
        // A bound not reached sets no target.
        let target_projects = if projects >= self.capacity {
            self.capacity - self.capacity / 10
        } else {
            usize::MAX
        };
        let target_reservations = if reservations > self.max_reservations {
            self.max_reservations - self.max_reservations / 10
        } else {
            usize::MAX
        };
        let mut idle: Vec<ProjectId> = Vec::new();
        for (project, slot) in &slots.by_project {
            if projects <= target_projects && reservations <= target_reservations {
                break;
            }
            if Arc::strong_count(slot) == 1 {
                idle.push(project.clone());
                projects -= 1;
                reservations =
                    reservations.saturating_sub(slot.reservations.load(Ordering::Relaxed));
            }
        }
        for project in idle {
            if let Some(slot) = slots.by_project.remove(&project) {
                self.reservations
                    .fetch_sub(slot.reservations.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        slots.futile_eviction_at = (reservations > target_reservations).then_some(reservations);
    }
}
