//! RFC 9457 problem details: the one shape every error of the API takes.
//!
//! `type` is `https://quota-ledger.dev/problems/{code}`, so clients can match on the last path
//! segment; `title` is fixed per code, `detail` explains this occurrence.

use std::collections::BTreeMap;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::openapi::schemas::{PositionSchema, ResourceNameSchema};

pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";
pub const PROBLEM_TYPE_BASE: &str = "https://quota-ledger.dev/problems/";

/// Every problem type the API answers with: the last segment of `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ToSchema, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemCode {
    /// 400: the request breaks a rule (bad JSON, unknown field, bad id, value out of range).
    InvalidRequest,
    /// 400: a resource without a default limit (a typo never becomes unlimited).
    UnknownResource,
    /// 401: no token, or a token the server does not know.
    Unauthorized,
    /// 403: the token's role does not allow this request.
    Forbidden,
    /// 403: the reserve would exceed a limit; nothing was reserved.
    OverQuota,
    /// 404: no such reservation, projection or route.
    NotFound,
    /// 405: the route exists but not with this method.
    MethodNotAllowed,
    /// 409: negative deltas would take in_use below zero.
    UsageUnderflow,
    /// 409: the reservation id was used before with a different body.
    IdempotencyMismatch,
    /// 409: the reservation expired before it was committed.
    ReservationExpired,
    /// 409: the reservation was released before this commit.
    ReservationReleased,
    /// 409: the new limit is below in_use + reserved; repeat with `force: true` to insist.
    LimitBelowUsage,
    /// 413: the body is larger than the server accepts (64 KiB).
    PayloadTooLarge,
    /// 415: a body sent without `Content-Type: application/json`.
    UnsupportedMediaType,
    /// 500: an unexpected failure; details are only in the server log, under the request id.
    Internal,
    /// 503: the event store cannot be reached; retry later.
    StoreUnavailable,
    /// 503: too many concurrent writers on one stream across nodes; retry (see Retry-After).
    Contention,
    /// 503: the views did not reach `min_position` in time; retry (see Retry-After).
    NotCaughtUp,
    /// 503: the usage and audit views are not running on this node.
    ProjectionsUnavailable,
    /// 503: the server is shutting down.
    ShuttingDown,
}

impl ProblemCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ProblemCode::InvalidRequest => "invalid-request",
            ProblemCode::UnknownResource => "unknown-resource",
            ProblemCode::Unauthorized => "unauthorized",
            ProblemCode::Forbidden => "forbidden",
            ProblemCode::OverQuota => "over-quota",
            ProblemCode::NotFound => "not-found",
            ProblemCode::MethodNotAllowed => "method-not-allowed",
            ProblemCode::UsageUnderflow => "usage-underflow",
            ProblemCode::IdempotencyMismatch => "idempotency-mismatch",
            ProblemCode::ReservationExpired => "reservation-expired",
            ProblemCode::ReservationReleased => "reservation-released",
            ProblemCode::LimitBelowUsage => "limit-below-usage",
            ProblemCode::PayloadTooLarge => "payload-too-large",
            ProblemCode::UnsupportedMediaType => "unsupported-media-type",
            ProblemCode::Internal => "internal",
            ProblemCode::StoreUnavailable => "store-unavailable",
            ProblemCode::Contention => "contention",
            ProblemCode::NotCaughtUp => "not-caught-up",
            ProblemCode::ProjectionsUnavailable => "projections-unavailable",
            ProblemCode::ShuttingDown => "shutting-down",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            ProblemCode::InvalidRequest | ProblemCode::UnknownResource => StatusCode::BAD_REQUEST,
            ProblemCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ProblemCode::Forbidden | ProblemCode::OverQuota => StatusCode::FORBIDDEN,
            ProblemCode::NotFound => StatusCode::NOT_FOUND,
            ProblemCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ProblemCode::UsageUnderflow
            | ProblemCode::IdempotencyMismatch
            | ProblemCode::ReservationExpired
            | ProblemCode::ReservationReleased
            | ProblemCode::LimitBelowUsage => StatusCode::CONFLICT,
            ProblemCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ProblemCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ProblemCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ProblemCode::StoreUnavailable
            | ProblemCode::Contention
            | ProblemCode::NotCaughtUp
            | ProblemCode::ProjectionsUnavailable
            | ProblemCode::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            ProblemCode::InvalidRequest => "Invalid request",
            ProblemCode::UnknownResource => "Unknown resource",
            ProblemCode::Unauthorized => "Unauthorized",
            ProblemCode::Forbidden => "Forbidden",
            ProblemCode::OverQuota => "Over quota",
            ProblemCode::NotFound => "Not found",
            ProblemCode::MethodNotAllowed => "Method not allowed",
            ProblemCode::UsageUnderflow => "Usage underflow",
            ProblemCode::IdempotencyMismatch => "Idempotency mismatch",
            ProblemCode::ReservationExpired => "Reservation expired",
            ProblemCode::ReservationReleased => "Reservation released",
            ProblemCode::LimitBelowUsage => "Limit below usage",
            ProblemCode::PayloadTooLarge => "Payload too large",
            ProblemCode::UnsupportedMediaType => "Unsupported media type",
            ProblemCode::Internal => "Internal error",
            ProblemCode::StoreUnavailable => "Store unavailable",
            ProblemCode::Contention => "Contention",
            ProblemCode::NotCaughtUp => "Views not caught up",
            ProblemCode::ProjectionsUnavailable => "Projections unavailable",
            ProblemCode::ShuttingDown => "Shutting down",
        }
    }

    pub fn type_uri(self) -> String {
        format!("{PROBLEM_TYPE_BASE}{}", self.as_str())
    }

    pub const ALL: [ProblemCode; 20] = [
        ProblemCode::InvalidRequest,
        ProblemCode::UnknownResource,
        ProblemCode::Unauthorized,
        ProblemCode::Forbidden,
        ProblemCode::OverQuota,
        ProblemCode::NotFound,
        ProblemCode::MethodNotAllowed,
        ProblemCode::UsageUnderflow,
        ProblemCode::IdempotencyMismatch,
        ProblemCode::ReservationExpired,
        ProblemCode::ReservationReleased,
        ProblemCode::LimitBelowUsage,
        ProblemCode::PayloadTooLarge,
        ProblemCode::UnsupportedMediaType,
        ProblemCode::Internal,
        ProblemCode::StoreUnavailable,
        ProblemCode::Contention,
        ProblemCode::NotCaughtUp,
        ProblemCode::ProjectionsUnavailable,
        ProblemCode::ShuttingDown,
    ];
}

/// A problem as sent on the wire. The extra members depend on the type: `over-quota` carries
/// `overs`, `limits`, `usage` and `headroom` (and `max_count` for a counted reserve, the
/// `user_*` members when over a user's own limits, `ancestor_overs` when over an ancestor's); `limit-below-usage` carries `resources` (an
/// object); `unknown-resource` and `usage-underflow` carry `resources` (a list of names);
/// `not-caught-up` carries `min_position` and `position`. Members a type does not carry are left
/// out, never `null`.
///
/// This type describes the answer for the document only; [`Problem::body`] writes it.
#[derive(Clone, Debug, ToSchema)]
pub struct ProblemDocument {
    /// `https://quota-ledger.dev/problems/{code}`; the code is one of [`ProblemCode`].
    #[schema(
        example = "https://quota-ledger.dev/problems/over-quota",
        format = "uri"
    )]
    pub r#type: String,
    /// Fixed per code.
    pub title: String,
    /// The HTTP status, repeated.
    #[schema(minimum = 400, maximum = 599)]
    pub status: u16,
    /// This occurrence, for people.
    pub detail: String,
    /// over-quota: every resource that is over, sorted.
    #[schema(nullable = false, value_type = Option<Vec<ResourceNameSchema>>)]
    pub overs: Option<Vec<String>>,
    /// over-quota: `{resource: limit}` for every resource of the request; -1 is unlimited.
    #[schema(nullable = false)]
    pub limits: Option<BTreeMap<String, i64>>,
    /// over-quota: `{resource: {in_use, reserved}}` for every resource of the request.
    #[schema(nullable = false)]
    pub usage: Option<BTreeMap<String, ProblemUsage>>,
    /// over-quota: `limit - in_use - reserved` per limited resource (absent when unlimited).
    #[schema(nullable = false)]
    pub headroom: Option<BTreeMap<String, i64>>,
    /// over-quota of a counted reserve: the largest count that would fit (0 if none).
    #[schema(nullable = false)]
    pub max_count: Option<u32>,
    /// over-quota of a reserve for a user over the user's own limits: those resources, sorted.
    #[schema(nullable = false, value_type = Option<Vec<ResourceNameSchema>>)]
    pub user_overs: Option<Vec<String>>,
    /// over-quota for a user: the user's limit of every resource of the request (its own,
    /// else the project's).
    #[schema(nullable = false)]
    pub user_limits: Option<BTreeMap<String, i64>>,
    /// over-quota for a user: the user's `{resource: {in_use, reserved}}`.
    #[schema(nullable = false)]
    pub user_usage: Option<BTreeMap<String, ProblemUsage>>,
    /// over-quota for a user: the user's `limit - in_use - reserved` per limited resource.
    #[schema(nullable = false)]
    pub user_headroom: Option<BTreeMap<String, i64>>,
    /// over-quota of a reserve over an ancestor's limits (SPEC rule 11; the ancestor's subtree
    /// counts against them): `{ancestor: [resources]}`, each list sorted. `overs` names only
    /// the project's own.
    #[schema(nullable = false, value_type = Option<BTreeMap<String, Vec<ResourceNameSchema>>>)]
    pub ancestor_overs: Option<BTreeMap<String, Vec<String>>>,
    /// limit-below-usage: `{resource: {limit, in_use, reserved}}`; unknown-resource and
    /// usage-underflow: the names, sorted.
    #[schema(nullable = false)]
    pub resources: Option<ProblemResources>,
    /// not-caught-up: the position the request asked for.
    #[schema(nullable = false, value_type = Option<PositionSchema>)]
    pub min_position: Option<u64>,
    /// not-caught-up: the position the views had reached when the wait ended.
    #[schema(nullable = false, value_type = Option<PositionSchema>)]
    pub position: Option<u64>,
}

/// A resource's usage in an `over-quota` problem.
#[derive(Clone, Debug, ToSchema, serde::Serialize)]
pub struct ProblemUsage {
    pub in_use: i64,
    pub reserved: i64,
}

/// A resource whose new limit would fall below its usage, in a `limit-below-usage` problem.
#[derive(Clone, Debug, ToSchema, serde::Serialize)]
pub struct ProblemLimitBelowUsage {
    /// The limit asked for.
    pub limit: i64,
    pub in_use: i64,
    pub reserved: i64,
}

/// `resources` of a problem: names (`unknown-resource`, `usage-underflow`) or, for
/// `limit-below-usage`, the standing of each resource.
#[derive(Clone, Debug, ToSchema, serde::Serialize)]
#[serde(untagged)]
pub enum ProblemResources {
    #[schema(value_type = Vec<ResourceNameSchema>)]
    Names(Vec<String>),
    Standing(BTreeMap<String, ProblemLimitBelowUsage>),
}

/// A problem ready to send.
#[derive(Clone, Debug)]
pub struct Problem {
    pub code: ProblemCode,
    pub detail: String,
    pub extensions: Map<String, Value>,
    /// Seconds, for the `Retry-After` header of 503s.
    pub retry_after: Option<u32>,
}

impl Problem {
    pub fn new(code: ProblemCode, detail: impl Into<String>) -> Self {
        Problem {
            code,
            detail: detail.into(),
            extensions: Map::new(),
            retry_after: None,
        }
    }

    pub fn with(mut self, name: &str, value: Value) -> Self {
        self.extensions.insert(name.to_owned(), value);
        self
    }

    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub fn body(&self) -> Value {
        let mut body = Map::new();
        body.insert("type".into(), Value::from(self.code.type_uri()));
        body.insert("title".into(), Value::from(self.code.title()));
        body.insert("status".into(), Value::from(self.code.status().as_u16()));
        body.insert("detail".into(), Value::from(self.detail.clone()));
        for (name, value) in &self.extensions {
            body.insert(name.clone(), value.clone());
        }
        Value::Object(body)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        let mut response = (self.code.status(), body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(PROBLEM_CONTENT_TYPE),
        );
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.code == ProblemCode::Unauthorized {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"quota\""),
            );
        }
        response
    }
}
