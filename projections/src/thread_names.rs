//! The names of the views' threads, set where each is started, read by whatever attributes work
//! to them (the bench's CPU split, profiles); see `ledger::store::thread_names` for what the
//! kernel keeps of a name.

/// The views' own thread (their runtime, at a lower priority).
pub const VIEWS: &str = "quota-views";
/// The views file's writer connection (SQLite).
pub const WRITER: &str = "views-sqlite-wr";
/// The views file's read pool (SQLite).
pub const READER: &str = "views-sqlite-rd";
/// The connection that flushes the views file's WAL (SQLite).
pub const WAL_FLUSH: &str = "views-sqlite-fl";
