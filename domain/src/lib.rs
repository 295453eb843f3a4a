//! The quota rules, pure: validated ids and numbers, the events of the ledger and their stored
//! form, the state folded from events, and `decide(command, state, defaults, now)`.
//!
//! Nothing here does I/O, reads a clock or spawns a task. The write side (`ledger`) loads state,
//! calls [`decide`] with the time, and appends the events it returns; the read side
//! (`projections`) folds the same events into views. Both fold with this crate's rules
//! ([`ProjectState::apply`]; the views' [`ProjectUsage::apply`], tested against it), so a replay
//! and the live path cannot disagree.
//!
//! It may not depend on any other crate of the workspace, nor on a database, a runtime or a
//! clock: every rule is testable as given events, when command, then events or refusal.

mod codec;
mod decide;
mod events;
mod held;
mod ids;
pub mod limits;
mod quantity;
mod snapshot;
mod state;
mod subtree;
mod text;
mod usage;

#[cfg(test)]
mod tests;

pub use codec::{decode, encode, DecodeError, Encoded, CURRENT_SCHEMA_VERSION};
pub use decide::{
    decide, decide_defaults, decide_in_tree, decide_parent, Command, Correction, Decision, Outcome,
    ParentDecision, Refusal, ResourceStanding, TreeRefusal, UserStanding,
};
pub use events::{
    DescendantHold, Event, Judged, ReleaseReason, SubtreeMember, Timestamp, EVENT_TYPES,
};
pub use ids::{
    ProjectId, ReservationId, ResourceName, UserId, DEFAULTS_STREAM, PROJECT_STREAM_PREFIX,
};
pub use limits::{
    DEFAULT_EXPIRES_IN_S, MAX_ANCESTORS, MAX_DESCENDANTS, MAX_EXPIRED_PER_DECISION,
    MAX_EXPIRES_IN_S, MAX_RESOURCES_PER_REQUEST, MAX_TEXT_CHARS, MIN_EXPIRES_IN_S,
};
pub use quantity::{check_limits, checked_add, CountRange, Counted, Deltas, Limit, Limits};
pub use snapshot::{EncodedSnapshot, SnapshotError, SNAPSHOT_FORMAT};
pub use state::{
    shown_usage, Defaults, ProjectState, Reservation, ReservationStatus, StreamVersion, Usage,
    UserState,
};
pub use subtree::{Descendant, Subtree, SubtreeUsage};
pub use text::{is_control, Actor, ClientRequestId, Reason};
pub use usage::{LiveReservation, ProjectUsage, UsageChange};

/// Input that breaks a rule of SPEC.md before any state is consulted: a 400 at the edge.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidInput {
    #[error("invalid {kind}: {reason}")]
    Name { kind: &'static str, reason: String },
    /// Free text (actor, request id, reason) that is empty, too long or holds a control
    /// character.
    #[error("invalid {field}: {reason}")]
    Text { field: &'static str, reason: String },
    #[error("invalid reservation id {0:?}: not a UUID")]
    ReservationId(String),
    #[error("invalid limit {0}: must be -1 (unlimited) or more")]
    Limit(i64),
    #[error("deltas must name at least one resource")]
    EmptyDeltas,
    #[error("limits must name at least one resource")]
    EmptyLimits,
    #[error("a correction must name at least one resource")]
    EmptyCorrection,
    #[error("{0} resources in one request; at most {max} are allowed", max = MAX_RESOURCES_PER_REQUEST)]
    TooManyResources(usize),
    #[error("arithmetic overflow for {0}: values are 64-bit")]
    Overflow(ResourceName),
    #[error("expires_in {0} is out of range: {MIN_EXPIRES_IN_S} to {MAX_EXPIRES_IN_S} seconds")]
    ExpiresIn(i64),
    #[error("in_use {0} is negative")]
    NegativeUsage(i64),
    #[error("count {min}..{max} is out of range: 1 <= min <= max <= {max_count}", max_count = crate::limits::MAX_COUNT)]
    Count { min: u32, max: u32 },
}
