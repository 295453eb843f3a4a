//! `ApiError`: every way a request can fail, and how each one is answered. Internal failures are
//! logged here with their cause and answered with a generic problem, so no SQL text, panic
//! message or file path ever reaches a client.

use std::collections::BTreeMap;

use axum::response::{IntoResponse, Response};
use domain::{ProjectId, Refusal, ResourceName, ResourceStanding, UserStanding};
use ledger::{LedgerError, StoreError};
use projections::ProjectionError;
use serde_json::{json, Map, Value};

use crate::problem::{Problem, ProblemCode};
use crate::standing::Standing;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("no default limit for {}", join(.0))]
    UnknownResource(Vec<ResourceName>),
    #[error("{}", over_quota(.overs, .user.as_deref(), .ancestor_overs))]
    OverQuota {
        overs: Vec<ResourceName>,
        standing: BTreeMap<ResourceName, ResourceStanding>,
        /// A counted reserve: the largest count that would fit (0 if none).
        max_count: Option<u32>,
        /// A reserve for a user: how it stood against the user's own limits.
        user: Option<Box<UserStanding>>,
        /// The ancestors whose limits it would go over, with those resources.
        ancestor_overs: BTreeMap<ProjectId, Vec<ResourceName>>,
    },
    #[error("usage of {} would fall below zero", join(.0))]
    UsageUnderflow(Vec<ResourceName>),
    #[error("reservation id already used with a different request")]
    IdempotencyMismatch,
    #[error("{0}")]
    NotFound(String),
    #[error("the reservation expired before it was committed")]
    ReservationExpired,
    #[error("the reservation was already released")]
    ReservationReleased,
    #[error("limit below current usage for {}", join(.0.keys()))]
    LimitBelowUsage(BTreeMap<ResourceName, ResourceStanding>),
    #[error("a valid bearer token is required")]
    Unauthorized,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("the event store is unavailable; retry later")]
    StoreUnavailable,
    #[error("too many concurrent writers on {0}; retry")]
    Contention(String),
    #[error("the views reached position {reached}, not {wanted}, in time; retry")]
    NotCaughtUp { wanted: u64, reached: u64 },
    /// A `min_position` beyond every stored event: no write has answered it yet.
    #[error(
        "no event has position {wanted}: the log ends at {head}; pass the `position` a write answered"
    )]
    PastHead { wanted: u64, head: u64 },
    #[error("the usage and audit views are not running on this node")]
    ProjectionsUnavailable,
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The cause is logged, never sent.
    #[error("internal error")]
    Internal(String),
}

fn join<'a>(names: impl IntoIterator<Item = &'a ResourceName>) -> String {
    names
        .into_iter()
        .map(ResourceName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The detail of an over-quota problem: what is over, and whose limits: the project's, the
/// user's, an ancestor's.
fn over_quota(
    overs: &[ResourceName],
    user: Option<&UserStanding>,
    ancestor_overs: &BTreeMap<ProjectId, Vec<ResourceName>>,
) -> String {
    let user_overs = user.map_or(&[][..], |u| &u.overs[..]);
    let mut parts = vec![];
    if !overs.is_empty() {
        parts.push(format!("over quota for {}", join(overs)));
    }
    if !user_overs.is_empty() {
        parts.push(format!("over the user's quota for {}", join(user_overs)));
    }
    for (ancestor, overs) in ancestor_overs {
        parts.push(format!("over {ancestor}'s quota for {}", join(overs)));
    }
    if parts.is_empty() {
        return "over quota".to_owned();
    }
    parts.join(", and ")
}

fn names(resources: &[ResourceName]) -> Value {
    Value::from(resources.iter().map(|r| r.as_str()).collect::<Vec<_>>())
}

impl ApiError {
    pub fn code(&self) -> ProblemCode {
        match self {
            ApiError::InvalidRequest(_) => ProblemCode::InvalidRequest,
            ApiError::UnknownResource(_) => ProblemCode::UnknownResource,
            ApiError::OverQuota { .. } => ProblemCode::OverQuota,
            ApiError::UsageUnderflow(_) => ProblemCode::UsageUnderflow,
            ApiError::IdempotencyMismatch => ProblemCode::IdempotencyMismatch,
            ApiError::NotFound(_) => ProblemCode::NotFound,
            ApiError::ReservationExpired => ProblemCode::ReservationExpired,
            ApiError::ReservationReleased => ProblemCode::ReservationReleased,
            ApiError::LimitBelowUsage(_) => ProblemCode::LimitBelowUsage,
            ApiError::Unauthorized => ProblemCode::Unauthorized,
            ApiError::Forbidden(_) => ProblemCode::Forbidden,
            ApiError::MethodNotAllowed(_) => ProblemCode::MethodNotAllowed,
            ApiError::PayloadTooLarge(_) => ProblemCode::PayloadTooLarge,
            ApiError::UnsupportedMediaType(_) => ProblemCode::UnsupportedMediaType,
            ApiError::StoreUnavailable => ProblemCode::StoreUnavailable,
            ApiError::Contention(_) => ProblemCode::Contention,
            ApiError::NotCaughtUp { .. } | ApiError::PastHead { .. } => ProblemCode::NotCaughtUp,
            ApiError::ProjectionsUnavailable => ProblemCode::ProjectionsUnavailable,
            ApiError::ShuttingDown => ProblemCode::ShuttingDown,
            ApiError::Internal(_) => ProblemCode::Internal,
        }
    }

    pub fn to_problem(&self) -> Problem {
        let code = self.code();
        let detail = match self {
            ApiError::Internal(_) => {
                "an unexpected error occurred; the server log has the details under this request's x-request-id"
                    .to_owned()
            }
            other => other.to_string(),
        };
        let problem = Problem::new(code, detail);
        match self {
            ApiError::OverQuota {
                overs,
                standing,
                max_count,
                user,
                ancestor_overs,
            } => {
                let Standing {
                    limits,
                    usage,
                    headroom,
                } = Standing::of(standing);
                let mut problem = problem
                    .with("overs", names(overs))
                    .with("limits", json!(limits))
                    .with("usage", json!(usage))
                    .with("headroom", json!(headroom));
                if let Some(most) = max_count {
                    problem = problem.with("max_count", json!(most));
                }
                // Over quota for a user adds the user's numbers (SPEC: reserve errors).
                if let Some(user) = user.as_deref().filter(|u| !u.overs.is_empty()) {
                    let Standing {
                        limits,
                        usage,
                        headroom,
                    } = Standing::of(&user.standing);
                    problem = problem
                        .with("user_overs", names(&user.overs))
                        .with("user_limits", json!(limits))
                        .with("user_usage", json!(usage))
                        .with("user_headroom", json!(headroom));
                }
                if !ancestor_overs.is_empty() {
                    let by_ancestor: Map<String, Value> = ancestor_overs
                        .iter()
                        .map(|(a, overs)| (a.to_string(), names(overs)))
                        .collect();
                    problem = problem.with("ancestor_overs", Value::Object(by_ancestor));
                }
                problem
            }
            ApiError::LimitBelowUsage(below) => {
                let resources: Map<String, Value> = below
                    .iter()
                    .map(|(r, s)| {
                        (
                            r.to_string(),
                            json!({"limit": s.limit.value(), "in_use": s.in_use, "reserved": s.reserved}),
                        )
                    })
                    .collect();
                problem.with("resources", Value::Object(resources))
            }
            ApiError::UnknownResource(resources) | ApiError::UsageUnderflow(resources) => {
                problem.with("resources", names(resources))
            }
            ApiError::Contention(_) | ApiError::StoreUnavailable | ApiError::ShuttingDown => {
                problem.retry_after(1)
            }
            ApiError::NotCaughtUp { wanted, reached } => problem
                .with("min_position", json!(wanted))
                .with("position", json!(reached))
                .retry_after(1),
            // `position` is the log's head here: the views cannot be past it.
            ApiError::PastHead { wanted, head } => problem
                .with("min_position", json!(wanted))
                .with("position", json!(head))
                .retry_after(1),
            _ => problem,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(cause) = &self {
            // The request span carries the request id, so the log line can be found from it.
            tracing::error!(%cause, "request failed");
        }
        self.to_problem().into_response()
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Invalid(invalid) => ApiError::InvalidRequest(invalid.to_string()),
            Refusal::UnknownResource(resources) => ApiError::UnknownResource(resources),
            Refusal::OverQuota {
                overs,
                standing,
                max_count,
                user,
                ancestor_overs,
            } => ApiError::OverQuota {
                overs,
                standing,
                max_count,
                user,
                ancestor_overs,
            },
            Refusal::Tree(refusal) => ApiError::InvalidRequest(refusal.to_string()),
            Refusal::UsageUnderflow(resources) => ApiError::UsageUnderflow(resources),
            Refusal::IdempotencyMismatch => ApiError::IdempotencyMismatch,
            Refusal::NotFound => ApiError::NotFound("no such reservation".into()),
            Refusal::ReservationExpired => ApiError::ReservationExpired,
            Refusal::ReservationReleased => ApiError::ReservationReleased,
            Refusal::LimitBelowUsage(below) => ApiError::LimitBelowUsage(below),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Unavailable(cause) => {
                tracing::warn!(%cause, "event store unavailable");
                ApiError::StoreUnavailable
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<LedgerError> for ApiError {
    fn from(error: LedgerError) -> Self {
        match error {
            LedgerError::Refused(refusal) => refusal.into(),
            LedgerError::Contention { stream, attempts } => {
                tracing::warn!(%stream, attempts, "gave up after conflicting appends");
                ApiError::Contention(stream)
            }
            LedgerError::Store(store) => store.into(),
            LedgerError::ShuttingDown => ApiError::ShuttingDown,
            undecodable @ LedgerError::Undecodable { .. } => {
                ApiError::Internal(undecodable.to_string())
            }
        }
    }
}

impl From<ProjectionError> for ApiError {
    fn from(error: ProjectionError) -> Self {
        match error {
            ProjectionError::Store(store) => store.into(),
            ProjectionError::UnknownProjection(name) => {
                ApiError::NotFound(format!("no projection named {:?}", truncate(&name)))
            }
            ProjectionError::InvalidCursor => ApiError::InvalidRequest("invalid cursor".into()),
            too_many @ ProjectionError::TooManyPoints(_) => {
                ApiError::InvalidRequest(too_many.to_string())
            }
            ProjectionError::Timeout {
                wanted, reached, ..
            } => ApiError::NotCaughtUp { wanted, reached },
            ProjectionError::Database(cause) => {
                tracing::warn!(%cause, "the views' database failed");
                ApiError::StoreUnavailable
            }
            ProjectionError::Outdated(view) => {
                tracing::info!(%view, "a query waits for a view's rebuild for this version");
                ApiError::ProjectionsUnavailable
            }
            internal @ (ProjectionError::Undecodable { .. } | ProjectionError::CorruptView(_)) => {
                ApiError::Internal(internal.to_string())
            }
        }
    }
}

/// Echoes of client input stay short.
pub fn truncate(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::Limit;

    fn r(s: &str) -> ResourceName {
        ResourceName::parse(s).expect("valid name")
    }

    #[test]
    fn over_quota_names_overs_limits_usage_and_headroom() {
        let standing = BTreeMap::from([
            (
                r("cores"),
                ResourceStanding {
                    limit: Limit::UNLIMITED,
                    in_use: 4,
                    reserved: 2,
                },
            ),
            (
                r("instances"),
                ResourceStanding {
                    limit: Limit::new(10).expect("limit"),
                    in_use: 7,
                    reserved: 3,
                },
            ),
        ]);
        let body = ApiError::OverQuota {
            user: None,
            overs: vec![r("instances")],
            standing: standing.clone(),
            max_count: None,
            ancestor_overs: BTreeMap::new(),
        }
        .to_problem()
        .body();
        assert_eq!(body["type"], "https://quota-ledger.dev/problems/over-quota");
        assert_eq!(body["status"], 403);
        assert_eq!(body["overs"], json!(["instances"]));
        assert_eq!(body["limits"], json!({"cores": -1, "instances": 10}));
        assert_eq!(
            body["usage"]["instances"],
            json!({"in_use": 7, "reserved": 3})
        );
        assert_eq!(body["headroom"], json!({"instances": 0}));
        assert!(body.get("ancestor_overs").is_none(), "{body}");

        // Over an ancestor's limit only: `overs` stays empty, `ancestor_overs` names it.
        let dept = ProjectId::parse("dept").expect("id");
        let problem = ApiError::OverQuota {
            user: None,
            overs: vec![],
            standing,
            max_count: None,
            ancestor_overs: BTreeMap::from([(dept, vec![r("instances")])]),
        }
        .to_problem();
        let body = problem.body();
        assert_eq!(body["overs"], json!([]));
        assert_eq!(body["ancestor_overs"], json!({"dept": ["instances"]}));
        assert_eq!(problem.detail, "over dept's quota for instances");
    }

    #[test]
    fn a_tree_refusal_is_an_invalid_request() {
        let cycle = domain::TreeRefusal::Cycle {
            project: ProjectId::parse("a").expect("id"),
            parent: ProjectId::parse("b").expect("id"),
        };
        let problem = ApiError::from(Refusal::Tree(cycle)).to_problem();
        assert_eq!(problem.code.as_str(), "invalid-request");
        assert!(problem.detail.contains("cycle"), "{}", problem.detail);
    }

    #[test]
    fn internal_errors_do_not_leak_their_cause() {
        let error: ApiError =
            LedgerError::Store(StoreError::Corrupt("SELECT * FROM events".into())).into();
        let body = error.to_problem().body();
        assert_eq!(body["status"], 500);
        assert!(!body.to_string().contains("SELECT"));
    }

    #[test]
    fn every_refusal_has_its_status() {
        let cases: [(Refusal, u16, &str); 5] = [
            (Refusal::NotFound, 404, "not-found"),
            (Refusal::IdempotencyMismatch, 409, "idempotency-mismatch"),
            (Refusal::ReservationExpired, 409, "reservation-expired"),
            (Refusal::ReservationReleased, 409, "reservation-released"),
            (
                Refusal::UsageUnderflow(vec![r("ram")]),
                409,
                "usage-underflow",
            ),
        ];
        for (refusal, status, code) in cases {
            let problem = ApiError::from(refusal).to_problem();
            assert_eq!(problem.code.status().as_u16(), status);
            assert_eq!(problem.code.as_str(), code);
        }
    }

    #[test]
    fn unavailable_stores_and_contention_are_retryable_503s() {
        let unavailable: ApiError = LedgerError::Store(StoreError::Unavailable(
            "connection refused to 10.0.0.5:5432".into(),
        ))
        .into();
        let problem = unavailable.to_problem();
        assert_eq!(problem.code.as_str(), "store-unavailable");
        assert_eq!(problem.code.status().as_u16(), 503);
        assert_eq!(problem.retry_after, Some(1));
        assert!(!problem.body().to_string().contains("10.0.0.5"));

        let contention: ApiError = LedgerError::Contention {
            stream: "project-acme".into(),
            attempts: 17,
        }
        .into();
        let problem = contention.to_problem();
        assert_eq!(
            (problem.code.as_str(), problem.retry_after),
            ("contention", Some(1))
        );

        let views: ApiError =
            ProjectionError::Database("relation usage_rows does not exist".into()).into();
        let body = views.to_problem().body();
        assert_eq!(body["status"], 503);
        assert!(!body.to_string().contains("relation"));
    }
}
