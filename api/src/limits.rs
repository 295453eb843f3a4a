//! The HTTP edge's bounds, in one place: what a request may be, how long the server waits for
//! clients and for itself. The two an operator tunes are `quota serve` flags whose defaults
//! are here (`--client-timeout`, `--max-connections`); the rest follow from the contract and
//! from the other crates' limits (`domain::limits`, `ledger::limits`, `projections::limits`),
//! asserted below where one must hold against another.

use std::time::Duration;

use domain::limits::{MAX_RESOURCES_PER_REQUEST, MAX_RESOURCE_NAME_CHARS, MAX_TEXT_CHARS};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A request's head (request line and headers) must arrive within this, however it trickles.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(10);
/// `--client-timeout`'s default, in seconds: a connection silent this long is closed.
pub const DEFAULT_CLIENT_TIMEOUT_S: u64 = 30;
/// `--max-connections`'s default: further connections wait until one closes.
pub const DEFAULT_MAX_CONNECTIONS: u64 = 10_000;
/// The most `--max-connections` may be.
pub const MAX_MAX_CONNECTIONS: u64 = 1_000_000;

/// How long a read waits for `min_position` before answering 503 `not-caught-up`.
pub const MIN_POSITION_WAIT: Duration = Duration::from_secs(5);
/// How long a read without `min_position` waits for this node's own last write to reach the
/// views before answering with what they have.
pub const OWN_WRITES_WAIT: Duration = Duration::from_secs(1);

/// How often the defaults are re-read, to see changes made through other nodes.
pub const DEFAULTS_REFRESH: Duration = Duration::from_secs(1);
/// The sweeper looks at least this often.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// After a shutdown signal, in-flight requests get this long to finish.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Shortest token accepted: guessing one must be hopeless.
pub const MIN_TOKEN_CHARS: usize = 16;
/// Longest `x-request-id` the server keeps (a longer one is replaced by a new id).
pub const MAX_HTTP_REQUEST_ID_CHARS: usize = 128;
/// Longest principal an audit filter may name: principals are stored at most this long.
pub const MAX_PRINCIPAL_CHARS: usize = MAX_TEXT_CHARS;

// A reserve naming every resource it may, each with the longest name and a 20-digit delta,
// with the longest actor and request id, fits in a body.
const _: () = assert!(
    MAX_RESOURCES_PER_REQUEST * (MAX_RESOURCE_NAME_CHARS + 32) + 4 * MAX_TEXT_CHARS + 1024
        <= MAX_BODY_BYTES
);
// A read that waits for its own writes gives up before one that waits for a named position.
const _: () = assert!(OWN_WRITES_WAIT.as_millis() <= MIN_POSITION_WAIT.as_millis());
// A client's head deadline and a read's wait end well within the shutdown drain, so draining
// never cuts a request that is still within its own limits.
const _: () = assert!(HEAD_DEADLINE.as_secs() < DRAIN_TIMEOUT.as_secs());
const _: () = assert!(MIN_POSITION_WAIT.as_secs() < DRAIN_TIMEOUT.as_secs());
const _: () = assert!(DEFAULT_CLIENT_TIMEOUT_S <= DRAIN_TIMEOUT.as_secs());
const _: () =
    assert!(1 <= DEFAULT_MAX_CONNECTIONS && DEFAULT_MAX_CONNECTIONS <= MAX_MAX_CONNECTIONS);
