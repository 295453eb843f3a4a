//! Extractors whose every rejection is an [`ApiError`], so malformed bodies, bad ids and bad
//! query strings are answered as problem+json like everything else.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Query, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use domain::{ProjectId, ReservationId};
use ledger::Metadata;
use serde::de::DeserializeOwned;

use crate::auth::Caller;
use crate::error::{truncate, ApiError};

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// A JSON body. The content type is not checked (a `curl -d` without `-H` still works); the body
/// must parse as `T`, whose types reject unknown fields.
pub struct JsonBody<T>(pub T);

async fn read_body<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state)
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(MAX_BODY_BYTES)
            } else {
                ApiError::InvalidRequest("the request body could not be read".into())
            }
        })
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                "malformed JSON"
            }
            serde_json::error::Category::Data => "invalid body",
            serde_json::error::Category::Io => "unreadable body",
        };
        ApiError::InvalidRequest(format!("{what}: {e}"))
    })
}

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(request, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::InvalidRequest("a JSON body is required".into()));
        }
        parse_json(&bytes).map(JsonBody)
    }
}

/// A JSON body that may be left out (empty means `T::default()`).
pub struct OptionalJsonBody<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptionalJsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = read_body(request, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJsonBody(T::default()));
        }
        parse_json(&bytes).map(OptionalJsonBody)
    }
}

async fn path_param(parts: &mut Parts, name: &str) -> Result<String, ApiError> {
    let params = RawPathParams::from_request_parts(parts, &())
        .await
        .map_err(|_| ApiError::InvalidRequest("path parameters must be UTF-8".into()))?;
    params
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.to_owned())
        .ok_or_else(|| ApiError::Internal(format!("route has no path parameter {name}")))
}

fn parse_project(raw: &str) -> Result<ProjectId, ApiError> {
    ProjectId::parse(raw)
        .map_err(|e| ApiError::InvalidRequest(format!("{e} (got {:?})", truncate(raw))))
}

/// The `{p}` of a project route, validated.
pub struct ProjectPath(pub ProjectId);

impl<S: Send + Sync> FromRequestParts<S> for ProjectPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let raw = path_param(parts, "p").await?;
        parse_project(&raw).map(ProjectPath)
    }
}

/// The `{p}` and `{id}` of a reservation route, validated.
pub struct ReservationPath(pub ProjectId, pub ReservationId);

impl<S: Send + Sync> FromRequestParts<S> for ReservationPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let project = parse_project(&path_param(parts, "p").await?)?;
        let raw = path_param(parts, "id").await?;
        let id = ReservationId::parse(&raw).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
        Ok(ReservationPath(project, id))
    }
}

/// A query string parsed as `T` (whose types reject unknown parameters).
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(value)| ApiQuery(value))
            .map_err(|rejection| ApiError::InvalidRequest(rejection.body_text()))
    }
}

/// Who asked and under which request id, for the metadata of the events a request records.
pub struct RequestContext {
    pub caller: Caller,
    pub request_id: Option<String>,
}

impl RequestContext {
    /// Event metadata: the body's actor (else the caller's role) and request id (else the HTTP
    /// request id); the HTTP request id is always the correlation id. The principal is the
    /// authenticated caller's, whatever the body says.
    pub fn metadata(&self, actor: Option<String>, request_id: Option<String>) -> Metadata {
        Metadata {
            actor: actor.or_else(|| self.caller.label()),
            request_id: request_id.or_else(|| self.request_id.clone()),
            correlation_id: self.request_id.clone(),
            principal: Some(self.caller.label().unwrap_or_else(|| "anonymous".into())),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestContext {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let caller = parts
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or(Caller::Open);
        let request_id = parts
            .headers
            .get(crate::server::REQUEST_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Ok(RequestContext { caller, request_id })
    }
}

/// Parses an RFC 3339 time from a query string. A `+` offset that arrived unencoded (as a
/// space) is accepted too.
pub fn parse_time(name: &str, raw: &str) -> Result<domain::Timestamp, ApiError> {
    let parse =
        |s: &str| chrono::DateTime::parse_from_rfc3339(s).map(|t| t.with_timezone(&chrono::Utc));
    parse(raw)
        .or_else(|e| parse(&raw.replace(' ', "+")).map_err(|_| e))
        .map_err(|e| {
            ApiError::InvalidRequest(format!(
                "{name}={:?} is not an RFC 3339 time (like 2026-01-31T12:00:00Z): {e}",
                truncate(raw)
            ))
        })
}

/// The `{name}` of an admin route.
pub struct NamePath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for NamePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        path_param(parts, "name").await.map(NamePath)
    }
}
