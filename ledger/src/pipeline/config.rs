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

/// The memory bound of the cached states, counted in reservations: a fleet of many projects,
/// each small, would otherwise grow without limit once every project is cached, since the
/// project bound alone says nothing about how much each cached state holds.
pub const DEFAULT_CACHE_MAX_RESERVATIONS: usize = 200_000;

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            max_conflict_retries: 16,
            cache_capacity: 100_000,
            cache_max_reservations: DEFAULT_CACHE_MAX_RESERVATIONS,
            max_batch_appends: 2_048,
            queue_capacity: 65_536,
            snapshot_min_events: 1_024,
        }
    }
}
