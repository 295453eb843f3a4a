//! The bounds of the quota rules, in one place: every request and every event respects them,
//! and the other crates' limits (`ledger::limits`, `projections::limits`, `api::limits`) are
//! derived from or checked against them. None of these is tunable: they are part of the
//! contract (SPEC.md) and of the stored events' meaning.

/// At most this many resources in one reservation or one limits request.
pub const MAX_RESOURCES_PER_REQUEST: usize = 64;

/// Longest free text a client declares (actor, request id, reason), in characters.
pub const MAX_TEXT_CHARS: usize = 256;

/// Longest project id, in characters of `A-Z a-z 0-9 . _ : -`.
pub const MAX_PROJECT_ID_CHARS: usize = 128;
/// Longest resource name, in characters of `A-Z a-z 0-9 . _ : -`.
pub const MAX_RESOURCE_NAME_CHARS: usize = 64;

/// The shortest hold a reserve may ask for.
pub const MIN_EXPIRES_IN_S: u32 = 1;
/// The longest hold a reserve may ask for: 30 days.
pub const MAX_EXPIRES_IN_S: u32 = 30 * 24 * 3600;
/// The hold of a reserve that names none: one day.
pub const DEFAULT_EXPIRES_IN_S: u32 = 24 * 3600;

/// The largest `count.max` of a counted reserve (SPEC rule 9).
pub const MAX_COUNT: u32 = 10_000;

/// Most holds one `Expire` releases, so one decision stays a bounded append; the sweeper repeats.
pub const MAX_EXPIRED_PER_DECISION: usize = 1000;

/// Most ancestors a project may have (SPEC rule 11): trees are at most four levels deep.
pub const MAX_ANCESTORS: usize = 3;

/// Most descendants a project may have. Each ancestor keeps its descendants' usage and holds, and
/// a project joining a parent carries its whole subtree in one event, which this bounds.
pub const MAX_DESCENDANTS: usize = 1000;

const _: () = assert!(MAX_ANCESTORS >= 1 && MAX_DESCENDANTS >= MAX_ANCESTORS);
const _: () = assert!(MIN_EXPIRES_IN_S >= 1, "a hold lasts at least a second");
const _: () = assert!(MIN_EXPIRES_IN_S <= DEFAULT_EXPIRES_IN_S);
const _: () = assert!(DEFAULT_EXPIRES_IN_S <= MAX_EXPIRES_IN_S);
const _: () = assert!(MAX_RESOURCES_PER_REQUEST >= 1 && MAX_EXPIRED_PER_DECISION >= 1);
// A counted reserve's deltas are its unit's times at most MAX_COUNT: an i64 delta of up to
// 2^49 per unit still fits after the multiplication.
const _: () = assert!(MAX_COUNT >= 1 && (MAX_COUNT as i64) < (1 << 14));
// Free text and names share the limit of what a log line or a table cell shows whole.
const _: () = assert!(MAX_PROJECT_ID_CHARS <= MAX_TEXT_CHARS);
const _: () = assert!(MAX_RESOURCE_NAME_CHARS <= MAX_PROJECT_ID_CHARS);

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC.md's figures, as the error messages and the OpenAPI document spell them.
    #[test]
    fn the_expiry_bounds_are_specs() {
        assert_eq!(MAX_EXPIRES_IN_S, 2_592_000);
        assert_eq!(DEFAULT_EXPIRES_IN_S, 86_400);
    }
}
