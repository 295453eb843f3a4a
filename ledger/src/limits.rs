//! The write side's bounds, in one place: the `Ledger`'s defaults (the ones an operator tunes
//! are `quota serve` flags), the group commit's and the stores' batch and read bounds, the
//! SQLite files' sizing and the metadata bound, with
//! their relationships to each other and to the domain's limits asserted at compile time.

use std::time::Duration;

use domain::limits::{MAX_EXPIRED_PER_DECISION, MAX_TEXT_CHARS};

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

// The stores.

/// Most rows one read returns; callers page with the last position or version they saw.
pub const MAX_READ_COUNT: usize = 10_000;

/// Most events one batch may carry (bounded so one transaction stays short).
pub const MAX_BATCH_EVENTS: usize = 8_192;

/// The page size of SQLite event files this store creates (existing files keep theirs).
pub const PAGE_SIZE_BYTES: u32 = 1024;

/// The bound of a WAL, 64 MiB, for the events file and the views' file alike: a writer flushes
/// the WAL itself (SQLite's `wal_autocheckpoint`) once it holds this many bytes of pages.
pub const WAL_BOUND_BYTES: u64 = 64 << 20;

/// How far the events file's writer keeps zeros ahead of what SQLite has written in its WAL,
/// 1 MiB: one commit in about seventy (at 15 KiB a commit) extends the file and carries the
/// zeros to the disk, instead of every commit extending it.
pub const WAL_ROOM_BYTES: u64 = 1 << 20;

/// Most stream versions the embedded store's writer remembers between appends (about 60 bytes
/// each, so at most a few MiB); past it, it forgets them all and reads them again as needed.
pub const MAX_KNOWN_STREAM_VERSIONS: usize = 100_000;

/// Most stream numbers the embedded store's writer remembers (about 60 bytes each); past it, it
/// forgets them all and looks them up again as needed.
pub const MAX_KNOWN_STREAM_KEYS: usize = 100_000;

/// How long a SQLite statement waits for a lock another connection holds (the WAL flusher,
/// another process) before the store answers unavailable.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the WAL is flushed into the database file while writes go on.
pub const WAL_FLUSH_INTERVAL: Duration = Duration::from_millis(250);

// Validated client text is stored whole.
const _: () = assert!(MAX_TEXT_CHARS <= MAX_METADATA_CHARS);
// One decision always fits one batch, or the group commit could never write it.
const _: () = assert!(MAX_EXPIRED_PER_DECISION <= MAX_BATCH_EVENTS);
// A full batch can be queued whole while the previous one commits.
const _: () = assert!(DEFAULT_MAX_BATCH_APPENDS <= DEFAULT_QUEUE_CAPACITY);
// Eviction stops trying for a while after freeing under 1% of the bound: that 1% is not zero.
const _: () = assert!(DEFAULT_CACHE_MAX_RESERVATIONS >= 100);
const _: () = assert!(DEFAULT_CACHE_PROJECTS >= 1 && DEFAULT_SNAPSHOT_MIN_EVENTS >= 1);
const _: () = assert!(PAGE_SIZE_BYTES.is_power_of_two() && PAGE_SIZE_BYTES >= 512);
// The WAL bound leaves room for a full batch at a page per event.
const _: () = assert!(WAL_BOUND_BYTES >= (MAX_BATCH_EVENTS as u64) * (PAGE_SIZE_BYTES as u64));
// The room is a small part of the WAL it grows towards.
const _: () = assert!(WAL_ROOM_BYTES > 0 && WAL_ROOM_BYTES <= WAL_BOUND_BYTES / 16);
