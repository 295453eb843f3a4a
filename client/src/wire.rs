//! The bodies the quota API takes and answers, as SPEC.md describes them. The server declares
//! its own types for the same JSON (with validation and OpenAPI schemas); these are the
//! client's side of that contract, so a client build needs none of the server.
//!
//! Times are kept as the server's RFC 3339 text: the commands print them as they came.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

mod tree;

pub use tree::{
    OverQuota, ParentOf, ProjectEntry, ProjectList, ProjectListQuery, SetParent, Standing,
};

/// `{resource: amount}`, for limits (-1 is unlimited) and for deltas.
pub type Amounts = BTreeMap<String, i64>;

/// `PUT /v1/defaults`.
#[derive(Debug, Clone, Serialize)]
pub struct SetDefaults {
    pub limits: Amounts,
}

/// `PUT /v1/projects/{project}/limits`, and a user's (`…/users/{user}/limits`).
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
    /// The user inside the project the reserve is for: the user's own limits cap it too.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
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
    /// A user's in_use instead of the project's (the project's moves by as much).
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
    /// A reserve for a user: the resources that would be over the user's own limits (the
    /// four `user_` fields are absent for a reserve without a user).
    #[serde(default)]
    pub user_overs: Option<Vec<String>>,
    /// A reserve for a user: the user's limit of each resource of the request (its own,
    /// else the project's; -1 unlimited).
    #[serde(default)]
    pub user_limits: Option<BTreeMap<String, i64>>,
    /// A reserve for a user: the user's own in_use and reserved.
    #[serde(default)]
    pub user_usage: Option<BTreeMap<String, UsageNumbers>>,
    /// A reserve for a user: the user's headroom (absent for unlimited resources).
    #[serde(default)]
    pub user_headroom: Option<BTreeMap<String, i64>>,
    /// A project with ancestors: those whose limits it would go over, with the resources
    /// (`{ancestor: [resources]}`).
    #[serde(default)]
    pub ancestor_overs: Option<BTreeMap<String, Vec<String>>>,
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

/// The query of `GET /v1/projects/{project}/usage` and of a user's usage.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UsageQuery {
    /// A past instant (RFC 3339): usage as it was then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Wait until the view reflects this position.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_position: Option<u64>,
}

/// The query of `GET /v1/projects/{project}/usage/history`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HistoryQuery {
    pub resource: String,
    /// RFC 3339; the server's default is the project's first event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// RFC 3339; the server's default is now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Seconds between points; without it, a point per change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_position: Option<u64>,
}

/// One resource's usage over time.
#[derive(Debug, Clone, Deserialize)]
pub struct History {
    pub project: String,
    pub resource: String,
    /// In time order; the last is the state at `until`.
    pub points: Vec<HistoryPoint>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HistoryPoint {
    /// RFC 3339 UTC.
    pub at: String,
    pub in_use: i64,
    pub reserved: i64,
    /// -1 is unlimited.
    pub limit: i64,
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
    /// Only the entries about this user inside the project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The entries of the project and of all its descendants (`subtree=true`; left out when
    /// false, as a server without the hierarchy knows no such parameter).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub subtree: bool,
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

/// A project's (or a user's) effective limits after a `PUT` of its limits.
#[derive(Debug, Clone, Deserialize)]
pub struct EffectiveLimits {
    pub project: String,
    /// A user's limits: the user (absent for a project's).
    #[serde(default)]
    pub user: Option<String>,
    pub limits: Amounts,
    pub position: u64,
}

/// A project's (or a user's) limits with where each comes from (`GET .../limits`).
#[derive(Debug, Clone, Deserialize)]
pub struct ProjectLimits {
    pub project: String,
    /// A user's limits: the user (absent for a project's).
    #[serde(default)]
    pub user: Option<String>,
    pub limits: BTreeMap<String, LimitEntry>,
    pub position: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct LimitEntry {
    pub limit: i64,
    /// `user` (a user's own override), `project` or `default`.
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
    /// The user inside the project the reservation is for, if any.
    #[serde(default)]
    pub user: Option<String>,
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

/// A project's (or a user's) usage, now or at a past instant.
#[derive(Debug, Clone, Deserialize)]
pub struct Usage {
    pub project: String,
    /// A user's usage: the user (absent for a project's).
    #[serde(default)]
    pub user: Option<String>,
    pub resources: BTreeMap<String, ResourceUsage>,
    /// A project with children: the in_use and reserved of it and all its descendants, which
    /// its limits cap (its `headroom` is the limit minus these).
    #[serde(default)]
    pub subtree: Option<Standing>,
    /// A project with children: each child's subtree usage, by child.
    #[serde(default)]
    pub children: Option<BTreeMap<String, Standing>>,
    pub position: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ResourceUsage {
    /// -1 is unlimited.
    pub limit: i64,
    pub in_use: i64,
    pub reserved: i64,
    /// `limit - in_use - reserved` (of the subtree, for a project with children); absent when
    /// unlimited.
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
    /// The project the event is about: in a subtree's audit, the project or a descendant.
    #[serde(default)]
    pub project: Option<String>,
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
    /// The user inside the project the event is about, where it has one.
    #[serde(default)]
    pub user: Option<String>,
}

/// One view's progress (`GET /v1/admin/projections`).
#[derive(Debug, Clone, Deserialize)]
pub struct ProjectionStatus {
    pub name: String,
    pub position: u64,
    pub head: u64,
    pub lag: u64,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_reserve_names_its_user_only_when_it_has_one() {
        let mut body = Reserve {
            deltas: Amounts::from([("instances".to_owned(), 1)]),
            ..Reserve::default()
        };
        assert_eq!(
            serde_json::to_value(&body).expect("JSON"),
            json!({"deltas": {"instances": 1}})
        );
        body.user = Some("alice".into());
        assert_eq!(
            serde_json::to_value(&body).expect("JSON"),
            json!({"deltas": {"instances": 1}, "user": "alice"})
        );
        let query = AuditQuery {
            user: Some("alice".into()),
            ..AuditQuery::default()
        };
        assert_eq!(
            serde_json::to_value(&query).expect("JSON"),
            json!({"user": "alice"})
        );
    }

    #[test]
    fn a_dry_run_reads_the_users_numbers_when_it_has_them() {
        let project = json!({"granted": true, "overs": [], "limits": {"instances": 10},
            "usage": {"instances": {"in_use": 0, "reserved": 0}}, "headroom": {"instances": 10}});
        let answer: DryRun = serde_json::from_value(project.clone()).expect("a dry run");
        assert!(answer.user_overs.is_none() && answer.user_limits.is_none());

        let mut user = project;
        user["granted"] = json!(false);
        user["user_overs"] = json!(["instances"]);
        user["user_limits"] = json!({"instances": 2});
        user["user_usage"] = json!({"instances": {"in_use": 1, "reserved": 1}});
        user["user_headroom"] = json!({"instances": 0});
        let answer: DryRun = serde_json::from_value(user).expect("a user's dry run");
        assert_eq!(answer.user_overs, Some(vec!["instances".to_owned()]));
        assert_eq!(
            answer.user_limits,
            Some(Amounts::from([("instances".into(), 2)]))
        );
        let usage = &answer.user_usage.expect("user_usage")["instances"];
        assert_eq!((usage.in_use, usage.reserved), (1, 1));
        assert_eq!(
            answer.user_headroom,
            Some(Amounts::from([("instances".into(), 0)]))
        );
    }

    #[test]
    fn reservations_and_audit_entries_carry_their_user_when_they_have_one() {
        let reservation = json!({"reservation_id": "6f1d630e-0000-4000-8000-000000000001",
            "project": "globex", "deltas": {"instances": 2}, "status": "held",
            "expires_at": "2026-01-01T00:00:00Z", "created_at": "2026-01-01T00:00:00Z",
            "position": 3});
        let plain: Reservation = serde_json::from_value(reservation.clone()).expect("one");
        assert_eq!(plain.user, None);
        let mut theirs = reservation;
        theirs["user"] = json!("alice");
        let theirs: Reservation = serde_json::from_value(theirs).expect("a user's");
        assert_eq!(theirs.user.as_deref(), Some("alice"));

        let entry: AuditEntry = serde_json::from_value(json!({"position": 3, "version": 0,
            "at": "2026-01-01T00:00:00Z", "type": "UsageCorrected", "user": "alice"}))
        .expect("an entry");
        assert_eq!(entry.user.as_deref(), Some("alice"));
    }
}
