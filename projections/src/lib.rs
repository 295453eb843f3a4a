//! The read side: usage and audit views built from the ledger's global feed.
//!
//! INTERFACE SKELETON: the signatures below are the contract the `api` crate codes against.
//! The bodies are being written (issue 3); keep the names and types stable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use domain::{Deltas, Limit, ProjectId, ReservationId, ResourceName, Timestamp};
use ledger::{EventStore, Position, StoreError};

/// The views this crate maintains, by name (as in `/v1/admin/projections/{name}/rebuild`).
pub const PROJECTION_NAMES: [&str; 2] = ["usage", "audit"];

/// Most audit entries one page returns.
pub const MAX_AUDIT_PAGE: usize = 1000;
pub const DEFAULT_AUDIT_PAGE: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no projection named {0:?}")]
    UnknownProjection(String),
    #[error("invalid cursor")]
    InvalidCursor,
    #[error("projection {name} reached position {reached}, not {wanted}, within the timeout")]
    Timeout {
        name: String,
        wanted: Position,
        reached: Position,
    },
    #[error("stored event at position {position} is unreadable: {message}")]
    Undecodable { position: Position, message: String },
}

/// One resource of a project in the usage view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceUsage {
    /// The effective limit (-1 unlimited).
    pub limit: Limit,
    pub in_use: i64,
    pub reserved: i64,
    /// `limit - in_use - reserved`; `None` when unlimited.
    pub headroom: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageReport {
    pub project: ProjectId,
    pub resources: BTreeMap<ResourceName, ResourceUsage>,
    /// The global position the report reflects.
    pub position: Position,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditQuery {
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub event_type: Option<String>,
    pub reservation: Option<ReservationId>,
    pub actor: Option<String>,
    /// Page size, 1 to MAX_AUDIT_PAGE (DEFAULT_AUDIT_PAGE when None).
    pub limit: Option<usize>,
    /// Opaque cursor from a previous page's `next`.
    pub cursor: Option<String>,
}

/// Usage of one resource right after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageAfter {
    pub in_use: i64,
    pub reserved: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    pub position: Position,
    pub version: u64,
    pub at: Timestamp,
    pub event_type: String,
    pub reservation_id: Option<ReservationId>,
    pub deltas: Option<Deltas>,
    pub actor: Option<String>,
    pub request_id: Option<String>,
    /// For releases: rolled_back, expired or freed; for corrections: the operator's reason.
    pub reason: Option<String>,
    /// The usage the event left behind (for denials: the usage it was judged on).
    pub usage_after: BTreeMap<ResourceName, UsageAfter>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    pub next: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectionStatus {
    pub name: String,
    pub position: Position,
    pub head: Position,
    pub lag: u64,
}

/// One row of a stored view that differs from a replay of the events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    pub view: String,
    pub project: String,
    pub resource: String,
    pub field: String,
    pub stored: Option<i64>,
    pub expected: Option<i64>,
}

pub struct Projections {
    _store: Arc<dyn EventStore>,
}

impl Projections {
    /// Creates the view tables if needed, rebuilds any view whose code version changed, and
    /// starts following the feed in the background.
    pub async fn start(store: Arc<dyn EventStore>) -> Result<Arc<Projections>, ProjectionError> {
        let _ = store;
        todo!()
    }

    /// Opens the views without following the feed (for the CLI's rebuild and verify).
    pub async fn open(store: Arc<dyn EventStore>) -> Result<Arc<Projections>, ProjectionError> {
        let _ = store;
        todo!()
    }

    /// Waits until every view has applied `position` (read-your-writes), at most `timeout`.
    pub async fn wait_for(&self, position: Position, timeout: Duration) -> Result<(), ProjectionError> {
        let _ = (position, timeout);
        todo!()
    }

    /// The project's usage from the usage view; holds past their expiry at `now` do not count.
    pub async fn usage(&self, project: &ProjectId, now: Timestamp) -> Result<UsageReport, ProjectionError> {
        let _ = (project, now);
        todo!()
    }

    /// The project's usage as it stood at `at`, from its stream.
    pub async fn usage_at(&self, project: &ProjectId, at: Timestamp) -> Result<UsageReport, ProjectionError> {
        let _ = (project, at);
        todo!()
    }

    pub async fn audit(&self, project: &ProjectId, query: &AuditQuery) -> Result<AuditPage, ProjectionError> {
        let _ = (project, query);
        todo!()
    }

    pub async fn status(&self) -> Result<Vec<ProjectionStatus>, ProjectionError> {
        todo!()
    }

    /// Starts rebuilding a view beside the live one; returns at once (HTTP 202).
    pub async fn request_rebuild(self: &Arc<Self>, name: &str) -> Result<(), ProjectionError> {
        let _ = name;
        todo!()
    }

    /// Rebuilds a view (or all, with `None`) and waits; `progress(done, total)` is called as
    /// events are applied.
    pub async fn rebuild(&self, name: Option<&str>, progress: &(dyn Fn(u64, u64) + Send + Sync)) -> Result<(), ProjectionError> {
        let _ = (name, progress);
        todo!()
    }

    /// Replays the events in memory and lists every stored row that differs.
    pub async fn verify(&self) -> Result<Vec<Difference>, ProjectionError> {
        todo!()
    }
}
