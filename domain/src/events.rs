//! The events of the ledger, as the domain sees them. Their stored form lives in `codec`, so that
//! these types can change while old events stay readable.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::{
    CountRange, Counted, Deltas, Limit, Limits, ProjectId, ReservationId, ResourceName, UserId,
};

pub type Timestamp = DateTime<Utc>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseReason {
    /// The client gave the hold back before committing it.
    RolledBack,
    /// The hold passed its expiry without a commit.
    Expired,
    /// A committed reservation was given back: the resource was deleted.
    Freed,
}

impl ReleaseReason {
    /// The reason [`ReleaseReason::as_str`] names.
    pub fn parse(name: &str) -> Option<ReleaseReason> {
        [
            ReleaseReason::RolledBack,
            ReleaseReason::Expired,
            ReleaseReason::Freed,
        ]
        .into_iter()
        .find(|reason| reason.as_str() == name)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseReason::RolledBack => "rolled_back",
            ReleaseReason::Expired => "expired",
            ReleaseReason::Freed => "freed",
        }
    }
}

/// What one resource looked like when a reserve was judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judged {
    pub limit: Limit,
    pub in_use: i64,
    pub reserved: i64,
}

/// A hold of a descendant, as its ancestors keep it (SPEC rule 11): its positive deltas count
/// in their subtree's reserved until `expires_at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescendantHold {
    pub reservation_id: ReservationId,
    pub deltas: Deltas,
    pub expires_at: Timestamp,
}

/// A project entering an ancestor's subtree, with what it brings there: its own in_use and its
/// held reservations (a project's descendants join with it, each as a member of its own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubtreeMember {
    pub project: ProjectId,
    /// Its parent: the project it joins under, or one of the members joining with it.
    pub parent: ProjectId,
    pub in_use: BTreeMap<ResourceName, i64>,
    pub holds: Vec<DescendantHold>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Default limits were set (merged into the defaults; other resources keep theirs).
    DefaultLimitsSet {
        limits: Limits,
    },
    /// A project's own limits were set (merged into its overrides).
    LimitsSet {
        limits: Limits,
        forced: bool,
    },
    /// A project's overrides were all removed: it is back on the defaults.
    LimitsReset,
    /// A reserve was granted: the deltas are held until commit, release or expiry.
    ReservationRequested {
        reservation_id: ReservationId,
        /// For a counted reserve, the unit's deltas times the count granted.
        deltas: Deltas,
        expires_at: Timestamp,
        /// A counted reserve's range and grant (SPEC rule 9); `None` for a plain reserve and
        /// for every event stored before counts existed.
        count: Option<Counted>,
        /// The user inside the project it is for (SPEC rule 8); `None` for the project alone
        /// and for every event stored before users existed.
        user: Option<UserId>,
    },
    ReservationCommitted {
        reservation_id: ReservationId,
    },
    ReservationReleased {
        reservation_id: ReservationId,
        reason: ReleaseReason,
    },
    /// A reserve was refused for quota; kept so that audits see who asked for what.
    ReservationDenied {
        reservation_id: ReservationId,
        /// For a counted reserve, the unit's deltas times `count.min`: the least it asked for.
        deltas: Deltas,
        overs: Vec<ResourceName>,
        judged: BTreeMap<ResourceName, Judged>,
        /// A counted reserve's range; `None` for a plain reserve.
        count: Option<CountRange>,
        /// The user it was for, as in `ReservationRequested`.
        user: Option<UserId>,
        /// The resources over the user's own limits, sorted (empty without a user).
        user_overs: Vec<ResourceName>,
        /// The ancestors whose limits it was over, with those resources (SPEC rule 11).
        ancestor_overs: BTreeMap<ProjectId, Vec<ResourceName>>,
    },
    /// An operator's reconciliation of in_use for one resource: the project's, or a user's
    /// (which moves the project's in_use by the same amount).
    UsageCorrected {
        resource: ResourceName,
        in_use_before: i64,
        in_use_after: i64,
        reason: String,
        user: Option<UserId>,
    },
    /// A user's own limits were set (merged into its overrides; SPEC rule 8).
    UserLimitsSet {
        user: UserId,
        limits: Limits,
        forced: bool,
    },
    /// A user's overrides were all removed: it has no cap but the project's.
    UserLimitsReset {
        user: UserId,
    },
    /// The project's parent was set, or removed when `None` (SPEC rule 11). `forced` when the
    /// new ancestors' subtrees went over a limit by it (rule 6).
    ParentSet {
        parent: Option<ProjectId>,
        forced: bool,
    },
    /// In an ancestor's stream: a descendant's reserve was granted, so its hold counts in this
    /// project's subtree until it ends.
    DescendantReserved {
        descendant: ProjectId,
        hold: DescendantHold,
    },
    /// In an ancestor's stream: a descendant's in_use moved by `in_use` (a commit, a freed
    /// reservation, a correction), and its hold `reservation_id` ended, if one is named.
    DescendantUsageChanged {
        descendant: ProjectId,
        reservation_id: Option<ReservationId>,
        in_use: BTreeMap<ResourceName, i64>,
    },
    /// In an ancestor's stream: projects joined its subtree (a project and its descendants).
    DescendantsJoined {
        members: Vec<SubtreeMember>,
    },
    /// In an ancestor's stream: projects left its subtree (a project and its descendants).
    DescendantsLeft {
        projects: Vec<ProjectId>,
    },
}

impl Event {
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::DefaultLimitsSet { .. } => "DefaultLimitsSet",
            Event::LimitsSet { .. } => "LimitsSet",
            Event::LimitsReset => "LimitsReset",
            Event::ReservationRequested { .. } => "ReservationRequested",
            Event::ReservationCommitted { .. } => "ReservationCommitted",
            Event::ReservationReleased { .. } => "ReservationReleased",
            Event::ReservationDenied { .. } => "ReservationDenied",
            Event::UsageCorrected { .. } => "UsageCorrected",
            Event::UserLimitsSet { .. } => "UserLimitsSet",
            Event::UserLimitsReset { .. } => "UserLimitsReset",
            Event::ParentSet { .. } => "ParentSet",
            Event::DescendantReserved { .. } => "DescendantReserved",
            Event::DescendantUsageChanged { .. } => "DescendantUsageChanged",
            Event::DescendantsJoined { .. } => "DescendantsJoined",
            Event::DescendantsLeft { .. } => "DescendantsLeft",
        }
    }

    /// The user the event is about, if any.
    pub fn user(&self) -> Option<&UserId> {
        match self {
            Event::ReservationRequested { user, .. }
            | Event::ReservationDenied { user, .. }
            | Event::UsageCorrected { user, .. } => user.as_ref(),
            Event::UserLimitsSet { user, .. } | Event::UserLimitsReset { user } => Some(user),
            _ => None,
        }
    }

    pub fn reservation_id(&self) -> Option<ReservationId> {
        match self {
            Event::ReservationRequested { reservation_id, .. }
            | Event::ReservationCommitted { reservation_id }
            | Event::ReservationReleased { reservation_id, .. }
            | Event::ReservationDenied { reservation_id, .. } => Some(*reservation_id),
            _ => None,
        }
    }
}

pub const EVENT_TYPES: [&str; 15] = [
    "DefaultLimitsSet",
    "LimitsSet",
    "LimitsReset",
    "ReservationRequested",
    "ReservationCommitted",
    "ReservationReleased",
    "ReservationDenied",
    "UsageCorrected",
    "UserLimitsSet",
    "UserLimitsReset",
    "ParentSet",
    "DescendantReserved",
    "DescendantUsageChanged",
    "DescendantsJoined",
    "DescendantsLeft",
];
