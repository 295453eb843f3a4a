//! How a [`Ledger`](super::Ledger) is sized: retries, cache bounds, batch bounds, snapshot policy.

#[derive(Clone, Debug)]
pub struct LedgerConfig {
    /// Decide again at most this many times after an expected-version conflict.
    pub max_conflict_retries: u32,
    /// Projects whose state stays cached; colder ones are evicted and reloaded on use.
    pub cache_capacity: usize,
    /// Reservations (of any status) the cached states may hold together; past it idle
    /// projects are evicted too. A state keeps every reservation its project ever had, so a
    /// bound on projects alone does not bound memory: see [`DEFAULT_CACHE_MAX_RESERVATIONS`].
    pub cache_max_reservations: usize,
    /// Most appends (decisions) in one group commit.
    pub max_batch_appends: usize,
    /// Appends waiting for the appender before new requests wait for room.
    pub queue_capacity: usize,
    /// A project's state is snapshotted once this many events, and at least as many as it has
    /// reservations, were appended since its last snapshot; see `snapshot_due`.
    pub snapshot_min_events: u64,
}

pub use crate::limits::DEFAULT_CACHE_MAX_RESERVATIONS;
use crate::limits::{
    DEFAULT_CACHE_PROJECTS, DEFAULT_MAX_BATCH_APPENDS, DEFAULT_MAX_CONFLICT_RETRIES,
    DEFAULT_QUEUE_CAPACITY, DEFAULT_SNAPSHOT_MIN_EVENTS,
};

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            max_conflict_retries: DEFAULT_MAX_CONFLICT_RETRIES,
            cache_capacity: DEFAULT_CACHE_PROJECTS,
            cache_max_reservations: DEFAULT_CACHE_MAX_RESERVATIONS,
            max_batch_appends: DEFAULT_MAX_BATCH_APPENDS,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            snapshot_min_events: DEFAULT_SNAPSHOT_MIN_EVENTS,
        }
    }
}
