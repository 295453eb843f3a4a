//! The write side's bounds, in one place: the `Ledger`'s defaults (the ones an operator tunes
//! are `quota serve` flags), the group commit's batch bounds and the metadata bound, with
//! their relationships to each other and to the domain's limits asserted at compile time.

use domain::limits::{MAX_EXPIRED_PER_DECISION, MAX_TEXT_CHARS};

pub use crate::store::{MAX_BATCH_EVENTS, MAX_READ_COUNT};

/// Decide again at most this many times after an expected-version conflict.
pub const DEFAULT_MAX_CONFLICT_RETRIES: u32 = 16;
/// Projects whose state stays cached (`quota serve --cache-projects`).
pub const DEFAULT_CACHE_PROJECTS: usize = 100_000;
/// The memory bound of the cached states, counted in reservations (`quota serve
/// --cache-reservations`): a fleet of many projects, each small, would otherwise grow without
/// limit once every project is cached, since the project bound alone says nothing about how
/// much each cached state holds.
pub const DEFAULT_CACHE_MAX_RESERVATIONS: usize = 200_000;
/// Most appends (decisions) in one group commit (`quota serve --batch-appends`).
pub const DEFAULT_MAX_BATCH_APPENDS: usize = 2_048;
/// Appends waiting for the group commit before new requests wait for room.
pub const DEFAULT_QUEUE_CAPACITY: usize = 65_536;
/// A project's state is snapshotted once this many events, and at least as many as it has
/// reservations, were appended since its last snapshot (`quota serve --snapshot-events`).
pub const DEFAULT_SNAPSHOT_MIN_EVENTS: u64 = 1_024;

/// Longest metadata value stored (actor, request id, correlation id, principal), in characters;
/// longer ones are cut, never refused, since the edge has already validated what clients send.
pub const MAX_METADATA_CHARS: usize = 256;

/// How often the group commit lets other tasks run between batches.
pub const APPENDER_YIELDS: usize = 4;

// Validated client text is stored whole.
const _: () = assert!(MAX_TEXT_CHARS <= MAX_METADATA_CHARS);
// One decision always fits one batch, or the group commit could never write it.
const _: () = assert!(MAX_EXPIRED_PER_DECISION <= MAX_BATCH_EVENTS);
// A full batch can be queued whole while the previous one commits.
const _: () = assert!(DEFAULT_MAX_BATCH_APPENDS <= DEFAULT_QUEUE_CAPACITY);
// Eviction stops trying for a while after freeing under 1% of the bound: that 1% is not zero.
const _: () = assert!(DEFAULT_CACHE_MAX_RESERVATIONS >= 100);
const _: () = assert!(DEFAULT_CACHE_PROJECTS >= 1 && DEFAULT_SNAPSHOT_MIN_EVENTS >= 1);
