//! The read side's bounds, in one place: batch and page sizes, the follower's timings, the
//! views' SQLite sizing and the audit page, with their relationships to each other and to the
//! ledger's read bounds asserted at compile time. None is a flag: they trade the views' lag
//! against the ledger's commit latency, measured with `quota bench` (docs/BENCHMARKS.md).

use std::time::Duration;

use ledger::limits::MAX_READ_COUNT;

/// Most events per batch: one read, one transaction. A view transaction rewrites every B-tree
/// leaf it touches, and under load with many projects it touches nearly all the per-project
/// leaves of the audit indexes whatever its size: so the fewer, larger transactions, the
/// fewer bytes per event (see the follower's `COALESCE_FOR`).
pub const BATCH_EVENTS: usize = 20_000;

/// Rows per transaction when writing a whole state: big enough to be fast, small enough that
/// the ledger's appends on SQLite's single writer never wait long.
pub const ROWS_PER_TRANSACTION: usize = 20_000;

/// Rows deleted per transaction when dropping the old generation.
pub const DELETES_PER_TRANSACTION: i64 = 10_000;

/// Events per read of the feed.
pub const PAGE_EVENTS: usize = 10_000;

/// Pages read ahead of the fold.
pub const PAGES_AHEAD: usize = 2;

/// How often the follower looks for events without being woken (other nodes, lost wakes).
pub const RECHECK_EVERY: Duration = Duration::from_millis(500);

/// How long, after applying a batch, the follower lets new events gather before the next,
/// unless a reader waits for them (`Projections::wait_for`). Views lag the ledger by up to
/// this much under load, which SPEC.md allows; in exchange the views' file takes a few large
/// transactions a second instead of dozens. On a shared disk that matters to the ledger: a
/// view transaction's fsync writes megabytes, and the ledger's small fsyncs queue behind it
/// (docs/BENCHMARKS.md, "Figures behind the code", has the measurement).
pub const COALESCE_FOR: Duration = Duration::from_millis(500);

/// How often, while views are written, their WAL is flushed back into their file (SQLite).
pub const WAL_FLUSH_EVERY: Duration = Duration::from_millis(250);

/// The wait after a first failure before trying again (the database may be restarting); it
/// doubles with each failure in a row, up to `RETRY_AT_MOST`.
pub const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between retries.
pub const RETRY_AT_MOST: Duration = Duration::from_secs(30);

/// Most audit entries one page returns.
pub const MAX_AUDIT_PAGE: usize = 1000;

/// Audit entries a page returns when the query names no `limit`.
pub const DEFAULT_AUDIT_PAGE: usize = 100;

/// Most project ids one page of the project list returns.
pub const MAX_PROJECT_PAGE: usize = 1000;

/// Project ids a page returns when the query names no `limit`.
pub const DEFAULT_PROJECT_PAGE: usize = 100;

/// Most points a usage history answers (SPEC: "at most 1,000 points"): its instants are listed
/// only while they fit, else the range is cut by a step that fits, so its cost is bounded
/// however long the project's history.
pub const MAX_HISTORY_POINTS: usize = 1000;

/// Most reservations one page of a project's reservation list returns.
pub const MAX_RESERVATION_PAGE: usize = 1000;

/// Reservations a page returns when the query names no `limit`.
pub const DEFAULT_RESERVATION_PAGE: usize = 100;

/// Most reservations a filtered page of the reservation list looks at (by their request
/// entries, each checked against its own later entries); it stops there and answers with a
/// cursor, so one request never walks a project's whole history.
pub const SCAN_RESERVATIONS: usize = 10_000;

/// Page size of a views file when it is created. A view batch inserts into six B-trees of the
/// audit view at once; large pages make them shallower and split less, so the views keep
/// closer to the log under load (see docs/BENCHMARKS.md).
pub const VIEWS_PAGE_SIZE_BYTES: u32 = 16384;

/// The page cache of the views' writer. A view batch touches a leaf of each project-led audit
/// index per project it names, and with SQLite's default (2,000 KiB, 125 pages of 16 KiB) the
/// cache overflowed in the middle of every batch: dirty pages were spilled to the WAL, read
/// back, changed and written again. 32 MiB holds a fleet batch; a larger cache bought nothing
/// more (see docs/BENCHMARKS.md). The cache fills only as far as batches reach; at most this
/// much memory.
pub const VIEWS_WRITER_CACHE_BYTES: u64 = 32 << 20;

/// Rows per multi-row statement: at most 12 parameters a row keeps every statement far below
/// both backends' parameter limits, and few statements keep SQLite's per-statement cost low.
pub const ROWS_PER_STATEMENT: usize = 1000;

/// How much nicer the views thread is than the thread that starts it (nice values run from -20
/// to 19; a thread with a higher one yields the core to one with a lower one).
pub const VIEWS_NICE_INCREMENT: i32 = 10;

// A read of the feed never asks for more than the store returns in one read.
const _: () = assert!(PAGE_EVENTS <= MAX_READ_COUNT);
const _: () = assert!(DEFAULT_AUDIT_PAGE <= MAX_AUDIT_PAGE && MAX_AUDIT_PAGE <= MAX_READ_COUNT);
// A filtered page of reservations can always fill: it looks at more than it returns.
const _: () = assert!(DEFAULT_RESERVATION_PAGE <= MAX_RESERVATION_PAGE);
const _: () = assert!(1 <= DEFAULT_PROJECT_PAGE && DEFAULT_PROJECT_PAGE <= MAX_PROJECT_PAGE);
const _: () = assert!(MAX_RESERVATION_PAGE < SCAN_RESERVATIONS);
// A history has room for at least its first and last points.
const _: () = assert!(2 <= MAX_HISTORY_POINTS);
// A multi-row statement of at most 12 parameters a row stays under SQLite's 32,766 parameters
// and PostgreSQL's 65,535.
const _: () = assert!(ROWS_PER_STATEMENT * 12 <= 32_766);
const _: () = assert!(RETRY_FIRST.as_millis() <= RETRY_AT_MOST.as_millis());
// Views flush their WAL at least once between batches gathered under load.
const _: () = assert!(WAL_FLUSH_EVERY.as_millis() <= COALESCE_FOR.as_millis());
// A rebuild deletes and writes in transactions no longer than a live batch's.
const _: () = assert!(DELETES_PER_TRANSACTION as usize <= BATCH_EVENTS);
const _: () = assert!(ROWS_PER_TRANSACTION <= BATCH_EVENTS);
const _: () = assert!(PAGES_AHEAD >= 1 && 0 < VIEWS_NICE_INCREMENT && VIEWS_NICE_INCREMENT <= 19);
const _: () = assert!(VIEWS_PAGE_SIZE_BYTES.is_power_of_two() && VIEWS_PAGE_SIZE_BYTES <= 65_536);
