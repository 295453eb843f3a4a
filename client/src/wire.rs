//! The bodies the quota API takes and answers, as SPEC.md describes them. The server declares
//! its own types for the same JSON (with validation and OpenAPI schemas); these are the
//! client's side of that contract, so a client build needs none of the server.
//!
//! Times are kept as the server's RFC 3339 text: the commands print them as they came.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// `{resource: amount}`, for limits (-1 is unlimited) and for deltas.
pub type Amounts = BTreeMap<String, i64>;

/// `PUT /v1/defaults`.
#[derive(Debug, Clone, Serialize)]
pub struct SetDefaults {
    pub limits: Amounts,
}

/// `PUT /v1/projects/{project}/limits`.
#[derive(Debug, Clone, Serialize)]
pub struct SetLimits {
    pub limits: Amounts,
    /// Lower a limit below current usage anyway.
    pub force: bool,
}

/// `POST /v1/projects/{project}/reservations`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Reserve {
    pub deltas: Amounts,
    /// Seconds until an uncommitted hold expires (the server's default when left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<i64>,
    /// The caller's id for idempotent retries, sent as given: the server says what is wrong
    /// with one that is not a UUID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// A counted reserve: `deltas` per unit, the largest count in the range granted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<CountSpec>,
}

/// `count` of a counted reserve.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CountSpec {
    pub min: u32,
    pub max: u32,
}

/// `POST /v1/projects/{project}/usage/corrections`.
#[derive(Debug, Clone, Serialize)]
pub struct Correct {
    /// `{resource: real in_use}`.
    pub in_use: Amounts,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// The corrections a recount recorded.
#[derive(Debug, Clone, Deserialize)]
pub struct Corrections {
    pub corrections: Vec<Correction>,
    pub position: u64,
}

/// One resource's in_use before and after a correction.
#[derive(Debug, Clone, Deserialize)]
pub struct Correction {
    pub resource: String,
    pub before: i64,
    pub after: i64,
}

/// What a reserve would get now (`POST …/reservations?dry_run=true`).
#[derive(Debug, Clone, Deserialize)]
pub struct DryRun {
    pub granted: bool,
    /// A counted reserve that would be granted: its count.
    #[serde(default)]
    pub count: Option<u32>,
    /// A counted reserve that would be denied: the largest count that would fit.
    #[serde(default)]
    pub max_count: Option<u32>,
    pub overs: Vec<String>,
    /// The effective limit of each resource of the request (-1 unlimited).
    pub limits: BTreeMap<String, i64>,
    pub usage: BTreeMap<String, UsageNumbers>,
    /// Absent for unlimited resources.
    pub headroom: BTreeMap<String, i64>,
}

/// A resource's committed and held amounts.
#[derive(Debug, Clone, Deserialize)]
pub struct UsageNumbers {
    pub in_use: i64,
    pub reserved: i64,
}

/// The query of a dry run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DryRunQuery {
    pub dry_run: bool,
}

/// What happens to a held reservation: `POST .../reservations/{id}/commit` or `/release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Commit,
    Release,
}

impl Step {
    /// The last segment of the step's path.
    pub fn action(self) -> &'static str {
        match self {
            Step::Commit => "commit",
            Step::Release => "release",
        }
    }
}

/// The optional body of a commit or a release.
#[derive(Debug, Clone, Serialize)]
pub struct TransitionBody {
    pub actor: String,
}

/// The query of `GET /v1/projects/{project}/usage`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UsageQuery {
    /// A past instant (RFC 3339): usage as it was then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Wait until the view reflects this position.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_position: Option<u64>,
}

/// The query of `GET /v1/projects/{project}/audit`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// A previous page's `next`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// The query of `GET /v1/projects/{project}/reservations`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReservationListQuery {
    /// `held`, `committed` or `released`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Only reservations made before this RFC 3339 time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub older_than: Option<String>,
    /// A previous page's `next`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Page size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// One page of a project's reservations.
#[derive(Debug, Clone, Deserialize)]
pub struct ReservationList {
    pub reservations: Vec<Reservation>,
    /// The cursor of the next page, if there is one.
    #[serde(default)]
    pub next: Option<String>,
}

/// The default limits (`GET`/`PUT /v1/defaults`).
#[derive(Debug, Clone, Deserialize)]
pub struct DefaultLimits {
    pub limits: Amounts,
}

/// A project's effective limits after a `PUT` of its limits.
#[derive(Debug, Clone, Deserialize)]
pub struct EffectiveLimits {
    pub project: String,
    pub limits: Amounts,
    pub position: u64,
}

/// A project's limits with where each comes from (`GET .../limits`).
#[derive(Debug, Clone, Deserialize)]
pub struct ProjectLimits {
    pub project: String,
    pub limits: BTreeMap<String, LimitEntry>,
    pub position: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct LimitEntry {
    pub limit: i64,
    /// `project` or `default`.
    pub source: String,
}

/// A reservation, as every reservation endpoint answers it.
#[derive(Debug, Clone, Deserialize)]
pub struct Reservation {
    pub reservation_id: Uuid,
    pub project: String,
    pub deltas: Amounts,
    /// A counted reserve: the count granted.
    #[serde(default)]
    pub count: Option<u32>,
    /// `held`, `committed` or `released`.
    pub status: String,
    pub expires_at: String,
    pub created_at: String,
    /// Why it was released, when it was.
    #[serde(default)]
    pub reason: Option<String>,
    /// The log position of the decision that answered.
    pub position: u64,
}

/// A project's usage, now or at a past instant.
#[derive(Debug, Clone, Deserialize)]
pub struct Usage {
    pub project: String,
    pub resources: BTreeMap<String, ResourceUsage>,
    pub position: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ResourceUsage {
    /// -1 is unlimited.
    pub limit: i64,
    pub in_use: i64,
    pub reserved: i64,
    /// `limit - in_use - reserved`; absent when unlimited.
    #[serde(default)]
    pub headroom: Option<i64>,
}

/// One page of a project's audit trail.
#[derive(Debug, Clone, Deserialize)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    /// The cursor of the next page, if there is one.
    #[serde(default)]
    pub next: Option<String>,
}

/// One event of the audit trail: the fields the command line shows.
#[derive(Debug, Clone, Deserialize)]
pub struct AuditEntry {
    pub position: u64,
    pub at: String,
    #[serde(rename = "type")]
    pub event_type: String,
    #[serde(default)]
    pub reservation_id: Option<Uuid>,
    #[serde(default)]
    pub deltas: Option<Amounts>,
    #[serde(default)]
    pub actor: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// One view's progress (`GET /v1/admin/projections`).
#[derive(Debug, Clone, Deserialize)]
pub struct ProjectionStatus {
    pub name: String,
    pub position: u64,
    pub head: u64,
    pub lag: u64,
}
