//! What the server records of every request: its id, its span and log line, its metrics.
//!
//! One middleware does all three because each `from_fn` layer costs every request a clone
//! and a boxing of the route's service below it; the three were separate layers once, and
//! their clones and drops were a tenth of the HTTP worker's time on a hot run.

use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tracing::Instrument;
use uuid::Uuid;

use crate::error::{truncate, ApiError};
use crate::limits::MAX_HTTP_REQUEST_ID_CHARS;
use crate::metrics::{method_label, record_request, UNMATCHED_ROUTE};

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// An `x-request-id` the server uses: the client's if it is 1-128 characters of
/// `A-Z a-z 0-9 . _ : -` (nothing that could break a log line or a header), else a new UUID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpRequestId(String);

impl HttpRequestId {
    pub const MAX_LEN: usize = MAX_HTTP_REQUEST_ID_CHARS;

    pub fn parse(s: &str) -> Option<HttpRequestId> {
        let well_formed = (1..=Self::MAX_LEN).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        well_formed.then(|| HttpRequestId(s.to_owned()))
    }

    pub fn generate() -> HttpRequestId {
        HttpRequestId(Uuid::new_v4().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Middleware, the outermost of every route:
/// - every request carries a well-formed `x-request-id` from here on (the client's, or one the
///   server made in place of a missing or malformed one), in its headers and as an
///   [`HttpRequestId`] in its extensions, and its answer echoes it;
/// - one span per request carrying its id, and one log line per answer. Headers are not
///   logged, so tokens never reach the log. Nothing a client sends is logged raw: the id is
///   well formed, the method and route come from fixed sets, and the path is quoted and
///   shortened;
/// - its count and duration by method, route template and status ([`record_request`]).
pub async fn observe_requests(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(HttpRequestId::parse)
        .unwrap_or_else(HttpRequestId::generate);
    let Ok(id_header) = HeaderValue::from_str(id.as_str()) else {
        return ApiError::Internal("a request id is not a header value".into()).into_response();
    };
    let method = method_label(request.method());
    let route = request.extensions().get::<MatchedPath>().cloned();
    let route = route.as_ref().map_or(UNMATCHED_ROUTE, MatchedPath::as_str);
    let span = tracing::info_span!(
        "request",
        id = %id.as_str(),
        method,
        route = %route,
        path = ?truncate(request.uri().path()),
    );
    request
        .headers_mut()
        .insert(REQUEST_ID_HEADER, id_header.clone());
    request.extensions_mut().insert(id);

    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    let elapsed = started.elapsed();
    let status = response.status().as_u16();
    record_request(method, route, status, elapsed);
    span.in_scope(|| tracing::info!(status, ms = millis_to_microsecond(elapsed), "answered"));
    response.headers_mut().insert(REQUEST_ID_HEADER, id_header);
    response
}

/// Milliseconds rounded to 3 decimals (the microsecond): a log line reads `ms=0.977`, not the
/// float's every digit, and stays a number for JSON logs.
fn millis_to_microsecond(elapsed: Duration) -> f64 {
    (elapsed.as_nanos() as f64 / 1e3).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logged_milliseconds_keep_three_decimals() {
        let elapsed = Duration::from_nanos(977_117_999);
        assert_eq!(millis_to_microsecond(elapsed).to_string(), "977.118");
        let elapsed = Duration::from_nanos(977_118);
        assert_eq!(millis_to_microsecond(elapsed).to_string(), "0.977");
        assert_eq!(millis_to_microsecond(Duration::ZERO).to_string(), "0");
    }

    #[test]
    fn request_ids_follow_their_grammar() {
        for good in [
            "a",
            "req-1",
            "0190f3a0-7b7e-7cc0-8000-000000000001",
            "a.b_c:d-E",
            &"r".repeat(128),
        ] {
            assert_eq!(
                HttpRequestId::parse(good).map(|id| id.0),
                Some(good.to_owned())
            );
        }
        for bad in [
            "",
            "a b",
            "x\" status=204",
            "é",
            "a/b",
            "a\tb",
            "a\nb",
            &"r".repeat(129),
        ] {
            assert_eq!(HttpRequestId::parse(bad), None, "{bad:?}");
        }
        assert!(HttpRequestId::parse(HttpRequestId::generate().as_str()).is_some());
    }
}
