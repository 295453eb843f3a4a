//! Nova's error body for every answer under `/compute/`: a problem+json answer (from a handler,
//! the authorization, an extractor or a fallback) is rewritten as
//! `{"badRequest": {"code": 400, "message": "…"}}`, keyed by Nova's fault name for the status.
//! The status and the headers (`Retry-After`, the request id) are kept.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{json, Value};

use crate::problem::PROBLEM_CONTENT_TYPE;

/// Error bodies are small; a larger one is not a problem document of ours.
const MAX_PROBLEM_BYTES: usize = 64 * 1024;

/// Nova's fault name for a status (nova/api/openstack/wsgi.py; `conflict` as SPEC.md names it).
pub fn fault_name(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "badRequest",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "itemNotFound",
        405 => "badMethod",
        409 => "conflict",
        413 | 429 => "overLimit",
        415 => "badMediaType",
        501 => "notImplemented",
        503 => "serviceUnavailable",
        _ => "computeFault",
    }
}

/// Middleware on the whole router: rewrites problem answers to `/compute/…` requests.
pub async fn nova_fault_bodies(request: Request, next: Next) -> Response {
    let nova = request.uri().path().starts_with("/compute/");
    let response = next.run(request).await;
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(PROBLEM_CONTENT_TYPE.as_bytes()));
    if !nova || !is_problem {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_PROBLEM_BYTES)
        .await
        .unwrap_or_default();
    let problem: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let message = problem["detail"]
        .as_str()
        .or_else(|| problem["title"].as_str())
        .unwrap_or("the request failed");
    let status = parts.status;
    let fault = json!({ fault_name(status): { "code": status.as_u16(), "message": message } });
    let text = fault.to_string();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_have_novas_fault_names() {
        assert_eq!(fault_name(StatusCode::BAD_REQUEST), "badRequest");
        assert_eq!(fault_name(StatusCode::NOT_FOUND), "itemNotFound");
        assert_eq!(fault_name(StatusCode::CONFLICT), "conflict");
        assert_eq!(
            fault_name(StatusCode::INTERNAL_SERVER_ERROR),
            "computeFault"
        );
    }
}
