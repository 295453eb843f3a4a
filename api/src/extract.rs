//! Extractors whose every rejection is an [`ApiError`], so malformed bodies, bad ids and bad
//! query strings are answered as problem+json like everything else.

use std::collections::HashSet;
use std::fmt;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, MatchedPath, Query, RawPathParams, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use domain::{Actor, ClientRequestId, ProjectId, ReservationId, UserId};
use ledger::Metadata;
use serde::de::{DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::Deserializer as _;

use crate::auth::Caller;
use crate::error::{truncate, ApiError};
use crate::limits::MAX_BODY_BYTES;
use crate::routes::table::RouteTable;

/// A JSON body: `Content-Type: application/json`, an object without duplicated keys at any
/// depth, that parses as `T` (whose types reject unknown fields).
pub struct JsonBody<T>(pub T);

/// Whether `value` is `application/json`, in any case, with no parameter but a UTF-8 charset
/// (JSON is UTF-8: RFC 8259).
fn is_json_media_type(value: &str) -> bool {
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/json")
        && parts.all(|parameter| match parameter.split_once('=') {
            Some((name, value)) => {
                name.trim().eq_ignore_ascii_case("charset")
                    && value.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
            }
            None => parameter.trim().is_empty(),
        })
}

/// A content type, when given, must be JSON; without one the body must be empty. So a browser
/// cannot send a write as a "simple" cross-site request (text/plain, forms) without a preflight.
fn check_content_type(headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
    match headers.get(header::CONTENT_TYPE) {
        Some(value) if value.to_str().is_ok_and(is_json_media_type) => Ok(()),
        Some(_) => Err(ApiError::UnsupportedMediaType(
            "the body must be sent as Content-Type: application/json".into(),
        )),
        None if body.is_empty() => Ok(()),
        None => Err(ApiError::UnsupportedMediaType(
            "a request with a body must say Content-Type: application/json".into(),
        )),
    }
}

async fn read_body<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, ApiError> {
    let (parts, body) = request.into_parts();
    if let Some(value) = parts.headers.get(header::CONTENT_TYPE) {
        // Refused before a byte of the body is read.
        if !value.to_str().is_ok_and(is_json_media_type) {
            check_content_type(&parts.headers, &[])?;
        }
    }
    let headers = parts.headers.clone();
    let bytes = Bytes::from_request(Request::from_parts(parts, body), state)
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(MAX_BODY_BYTES)
            } else {
                ApiError::InvalidRequest("the request body could not be read".into())
            }
        })?;
    check_content_type(&headers, &bytes)?;
    Ok(bytes)
}

/// A body's error as a problem detail. A syntax error keeps where it is (the client must find
/// it); an invalid value does not, since the message names the field or value already and the
/// parser's line and column are about the bytes, not the request.
fn json_error(e: serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    let text = e.to_string();
    let (what, message) = match e.classify() {
        Category::Syntax | Category::Eof => ("malformed JSON", text.as_str()),
        Category::Data => {
            let position = format!(" at line {} column {}", e.line(), e.column());
            (
                "invalid body",
                text.strip_suffix(&position).unwrap_or(&text),
            )
        }
        Category::Io => ("unreadable body", text.as_str()),
    };
    ApiError::InvalidRequest(format!("{what}: {message}"))
}

/// Walks a JSON value and fails on a key repeated within one object. serde's derives and maps
/// would take the first or the last silently.
struct UniqueKeys;

impl<'de> DeserializeSeed<'de> for UniqueKeys {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicated key {:?}",
                    truncate(&key)
                )));
            }
            map.next_value_seed(UniqueKeys)?;
            seen.insert(key);
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(UniqueKeys)?.is_some() {}
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}
/// The top level of a body: an object (serde's derives would also read a struct from an
/// array of its fields in order), checked with [`UniqueKeys`].
struct BodyObject;

impl<'de> Visitor<'de> for BodyObject {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        UniqueKeys.visit_map(map)
    }
}

fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut shape = serde_json::Deserializer::from_slice(bytes);
    shape
        .deserialize_any(BodyObject)
        .and_then(|()| shape.end())
        .map_err(json_error)?;
    serde_json::from_slice(bytes).map_err(json_error)
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

/// A JSON body that may be left out (empty means `T::default()`); when given, the same rules
/// as [`JsonBody`].
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

/// On every route, after the authorization (see [`crate::auth::guard_routes`]): a query string
/// on a route that reads none (see [`Query`](crate::routes::table::Query)) is a 400, so a new
/// route cannot silently ignore parameters a client believes it sent.
pub fn refuse_unread_query(table: &RouteTable, request: &Request) -> Result<(), ApiError> {
    let query = request.uri().query().unwrap_or_default();
    if query.is_empty() {
        return Ok(());
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str)
        .unwrap_or_default();
    if table.reads_query(request.method(), route) {
        return Ok(());
    }
    let names: Vec<String> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| truncate(pair.split('=').next().unwrap_or_default()))
        .take(4)
        .collect();
    Err(ApiError::InvalidRequest(format!(
        "unknown query parameter(s) {names:?}: this route takes no query parameters"
    )))
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

/// The `{p}` and `{u}` of a user route, validated (a user id has the project id grammar).
pub struct UserPath(pub ProjectId, pub UserId);

impl<S: Send + Sync> FromRequestParts<S> for UserPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let project = parse_project(&path_param(parts, "p").await?)?;
        let user = parse_user(&path_param(parts, "u").await?)?;
        Ok(UserPath(project, user))
    }
}

/// A user id from a path or a query (`?user=`, Nova's `?user_id=`): the project id grammar.
pub fn parse_user(raw: &str) -> Result<UserId, ApiError> {
    UserId::parse(raw)
        .map_err(|e| ApiError::InvalidRequest(format!("{e} (got {:?})", truncate(raw))))
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
    /// The HTTP request id: the client's `x-request-id` if well formed, else the server's own
    /// (see `observe::observe_requests`).
    pub request_id: Option<String>,
}

impl RequestContext {
    /// Event metadata: the body's actor (else the caller's role) and request id (else the HTTP
    /// request id); the HTTP request id is always the correlation id. The principal is the
    /// authenticated caller's, whatever the body says.
    pub fn metadata(&self, actor: Option<Actor>, request_id: Option<ClientRequestId>) -> Metadata {
        Metadata {
            actor: actor.map(String::from).or_else(|| self.caller.label()),
            request_id: request_id
                .map(String::from)
                .or_else(|| self.request_id.clone()),
            correlation_id: self.request_id.clone(),
            principal: Some(self.caller.principal()),
        }
    }

    /// Who was authenticated: the token's name, else its role; `anonymous` on an open server.
    pub fn principal(&self) -> String {
        self.caller.principal()
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
            .extensions
            .get::<crate::observe::HttpRequestId>()
            .map(|id| id.as_str().to_owned());
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

/// A list's `limit` query parameter: a page size from 1 to `max` (`None`: the list's default).
pub fn page_size(limit: Option<u64>, max: usize) -> Result<Option<usize>, ApiError> {
    limit
        .map(|n| {
            usize::try_from(n)
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| {
                    ApiError::InvalidRequest(format!("limit {n} is out of range: 1 to {max}"))
                })
        })
        .transpose()
}

/// The `{name}` of an admin route.
pub struct NamePath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for NamePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        path_param(parts, "name").await.map(NamePath)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;
    use axum::http::HeaderValue;
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        a: Option<std::collections::BTreeMap<String, i64>>,
        b: Option<String>,
    }

    fn parse(text: &str) -> Result<Body, String> {
        parse_json::<Body>(text.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn bodies_are_objects() {
        assert!(parse(r#"{"a": {"x": 1}, "b": "y"}"#).is_ok());
        assert!(parse("{}").is_ok());
        for bad in [r#"[{"x": 1}, "y"]"#, "[]", "null", "1", r#""a""#, "true"] {
            let error = parse(bad).expect_err(bad);
            assert!(error.contains("a JSON object"), "{bad}: {error}");
        }
    }

    #[test]
    fn duplicated_keys_are_refused_at_any_depth() {
        for bad in [
            r#"{"b": "x", "b": "y"}"#,
            r#"{"a": {"x": 1, "x": 2}}"#,
            r#"{"a": {"x": 1, "\u0078": 2}}"#,
            r#"{"a": {"x": 1}, "b": "y", "a": {"z": 1}}"#,
        ] {
            let error = parse(bad).expect_err(bad);
            assert!(error.contains("duplicated key"), "{bad}: {error}");
        }
        // The same key in different objects is fine (checked here on the shape alone).
        let mut shape =
            serde_json::Deserializer::from_str(r#"{"a": {"x": 1}, "b": [{"x": 1}, {"x": 2}]}"#);
        assert!(shape.deserialize_any(BodyObject).is_ok());
    }

    /// `quota defaults set instances=-5` printed "... at line 1 column 26": the parser's
    /// position in bytes the operator never wrote.
    #[test]
    fn invalid_values_are_named_without_the_parsers_position() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Limits {
            limits: std::collections::BTreeMap<String, domain::Limit>,
        }
        let error = parse_json::<Limits>(br#"{"limits": {"instances": -5}}"#)
            .expect_err("a limit below -1")
            .to_string();
        assert!(error.contains("-5"), "{error}");
        assert!(!error.contains("line 1"), "{error}");
        let syntax = parse(r#"{"b": "x",}"#).expect_err("a trailing comma");
        assert!(syntax.contains("line 1 column"), "{syntax}");
    }

    #[test]
    fn trailing_text_is_refused() {
        assert!(parse(r#"{"b": "x"} {"b": "y"}"#).is_err());
    }

    #[test]
    fn json_media_types() {
        for good in [
            "application/json",
            "APPLICATION/JSON",
            "application/json; charset=utf-8",
            "application/json;charset=\"UTF-8\"",
            "application/json ;",
        ] {
            assert!(is_json_media_type(good), "{good}");
        }
        for bad in [
            "",
            "text/plain",
            "application/jsonx",
            "application/json; charset=utf-16",
            "application/json; boundary=x",
            "application/problem+json",
            "multipart/form-data",
        ] {
            assert!(!is_json_media_type(bad), "{bad}");
        }
    }

    #[test]
    fn a_body_needs_a_json_content_type_and_no_body_needs_none() {
        let mut headers = HeaderMap::new();
        assert!(check_content_type(&headers, b"").is_ok());
        assert!(matches!(
            check_content_type(&headers, b"{}"),
            Err(ApiError::UnsupportedMediaType(_))
        ));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(check_content_type(&headers, b"").is_err());
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        assert!(check_content_type(&headers, b"{}").is_ok());
    }

    async fn context(caller: Option<Caller>, request_id: Option<&str>) -> RequestContext {
        let mut builder = axum::http::Request::builder();
        if let Some(id) = request_id {
            builder = builder.header(crate::observe::REQUEST_ID_HEADER, id);
        }
        let (mut parts, ()) = builder.body(()).expect("request").into_parts();
        // What `observe::observe_requests` leaves for the handlers besides the header.
        if let Some(id) = request_id.and_then(crate::observe::HttpRequestId::parse) {
            parts.extensions.insert(id);
        }
        if let Some(caller) = caller {
            parts.extensions.insert(caller);
        }
        RequestContext::from_request_parts(&mut parts, &())
            .await
            .unwrap_or_else(|_| panic!("a context"))
    }

    #[tokio::test]
    async fn the_context_knows_the_principal() {
        let named = Caller::Token {
            role: Role::Admin,
            name: Some(crate::tokens::TokenName::parse("ops.alice").expect("name")),
        };
        assert_eq!(context(Some(named), None).await.principal(), "ops.alice");
        let unnamed = Caller::Token {
            role: Role::Project(ProjectId::parse("acme").expect("id")),
            name: None,
        };
        assert_eq!(
            context(Some(unnamed), None).await.principal(),
            "project:acme"
        );
        assert_eq!(
            context(Some(Caller::Open), None).await.principal(),
            "anonymous"
        );
        assert_eq!(context(None, None).await.principal(), "anonymous");
    }

    #[tokio::test]
    async fn metadata_takes_the_body_first_then_the_caller_and_the_http_request_id() {
        let ctx = context(
            Some(Caller::Token {
                role: Role::Auditor,
                name: None,
            }),
            Some("req-1"),
        )
        .await;
        let meta = ctx.metadata(None, None);
        assert_eq!(meta.actor.as_deref(), Some("auditor"));
        assert_eq!(meta.request_id.as_deref(), Some("req-1"));
        assert_eq!(meta.correlation_id.as_deref(), Some("req-1"));
        assert_eq!(meta.principal.as_deref(), Some("auditor"));
        let meta = ctx.metadata(
            Some(Actor::parse("alice").expect("actor")),
            Some(ClientRequestId::parse("c-9").expect("id")),
        );
        assert_eq!(meta.actor.as_deref(), Some("alice"));
        assert_eq!(meta.request_id.as_deref(), Some("c-9"));
        assert_eq!(meta.correlation_id.as_deref(), Some("req-1"));
        assert_eq!(
            meta.principal.as_deref(),
            Some("auditor"),
            "the body never sets it"
        );
    }
}
