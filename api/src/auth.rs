//! Bearer tokens, roles and the authorization middleware. The tokens file itself (its format,
//! hashing, reloads) is [`crate::tokens`].
//!
//! Who may do what (see [`Access`]):
//! - `admin`: everything.
//! - `auditor`: every `GET` except the admin endpoints.
//! - `project:{p}`: reserve, commit, release and read (limits, usage, audit, reservations) of `p`.
//! - Any valid token: `GET /v1/defaults` and its audit, `GET /v1/defaults/audit` (the defaults
//!   are the same for everyone).
//! - No token: `/healthz`, `/openapi.json`, `/metrics` (metrics carry no project data).

use std::sync::Arc;

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use domain::ProjectId;

use crate::error::ApiError;
use crate::routes::table::{RouteTable, Rule};
use crate::tokens::{LineError, TokenName, TokenStore};

/// The principal of requests to a server without tokens.
pub const ANONYMOUS: &str = "anonymous";
/// Principals of the server's own work (e.g. `system:sweeper`); no token may be named so.
pub const SYSTEM_PREFIX: &str = "system:";

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Admin,
    Auditor,
    Project(ProjectId),
}

impl Role {
    pub fn parse(s: &str) -> Result<Role, LineError> {
        match s {
            "admin" => Ok(Role::Admin),
            "auditor" => Ok(Role::Auditor),
            other => match other.strip_prefix("project:") {
                Some(id) => ProjectId::parse(id)
                    .map(Role::Project)
                    .map_err(|_| LineError::RoleProject),
                None => Err(LineError::UnknownRole),
            },
        }
    }

    /// How the role appears in audits when the request names no actor.
    pub fn label(&self) -> String {
        match self {
            Role::Admin => "admin".into(),
            Role::Auditor => "auditor".into(),
            Role::Project(p) => format!("project:{p}"),
        }
    }

    pub fn allows(&self, access: &Access) -> bool {
        match (self, access) {
            (_, Access::Public | Access::Authenticated) => true,
            (Role::Admin, _) => true,
            (Role::Auditor, Access::ProjectRead(_)) => true,
            (Role::Project(own), Access::ProjectRead(p) | Access::ProjectWrite(p)) => {
                own.as_str() == p
            }
            _ => false,
        }
    }
}

/// What a request needs: its route's [`Rule`], resolved against the request's project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    Public,
    Authenticated,
    Admin,
    /// Reads of one project (the raw path segment, compared with the role's project).
    ProjectRead(String),
    /// Reservations of one project.
    ProjectWrite(String),
}

impl Access {
    /// A route's rule for a request on `project` (the raw `{p}` segment, if the route has one).
    /// A route missing from the table needs the admin role.
    pub fn of(rule: Option<Rule>, project: Option<&str>) -> Access {
        let project = project.unwrap_or_default().to_owned();
        match rule {
            Some(Rule::Public) => Access::Public,
            Some(Rule::AnyToken) => Access::Authenticated,
            Some(Rule::ProjectRead) => Access::ProjectRead(project),
            Some(Rule::ProjectWrite) => Access::ProjectWrite(project),
            Some(Rule::Admin) | None => Access::Admin,
        }
    }
}

/// Who is calling; put in the request's extensions by [`authorize`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The server runs without tokens.
    Open,
    Token {
        role: Role,
        name: Option<TokenName>,
    },
}

impl Caller {
    /// The role's label, the actor recorded when a request names none (`None` when open).
    pub fn label(&self) -> Option<String> {
        match self {
            Caller::Open => None,
            Caller::Token { role, .. } => Some(role.label()),
        }
    }

    /// Who was authenticated: the token's name, else its role's label (`admin`, `auditor`,
    /// `project:p`); `anonymous` when the server runs open. No request can choose it.
    pub fn principal(&self) -> String {
        match self {
            Caller::Open => ANONYMOUS.to_owned(),
            Caller::Token {
                name: Some(name), ..
            } => name.as_str().to_owned(),
            Caller::Token { role, name: None } => role.label(),
        }
    }
}

/// The token of `Authorization: Bearer TOKEN`, else of `X-Auth-Token: TOKEN` (what OpenStack
/// clients send; SPEC: the Nova-compatible API).
fn bearer_token(request: &Request) -> Option<&str> {
    let headers = request.headers();
    match headers.get(header::AUTHORIZATION) {
        Some(value) => {
            let (scheme, token) = value.to_str().ok()?.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        }
        None => headers.get("x-auth-token")?.to_str().ok().map(str::trim),
    }
}

/// What [`authorize`] needs: the tokens (`None`: the server runs open) and each route's rule.
#[derive(Clone)]
pub struct Guard {
    pub tokens: Option<Arc<TokenStore>>,
    pub table: Arc<RouteTable>,
}

/// Middleware on every route, before any body or parameter is parsed: authenticates the token
/// and checks the route's [`Access`] ([`authorize`]), then refuses a query string the route
/// does not read ([`crate::extract::refuse_unread_query`]), so a caller without access learns
/// nothing else, not even whether its query would have been read. One layer for both: each
/// layer costs every request a clone of the route's service.
pub async fn guard_routes(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let request = match authorize(&guard, request).await {
        Ok(request) => request,
        Err(refused) => return refused.into_response(),
    };
    if let Err(refused) = crate::extract::refuse_unread_query(&guard.table, &request) {
        return refused.into_response();
    }
    next.run(request).await
}

/// Authenticates the token and checks the route's [`Access`]; the request goes on with its
/// [`Caller`] in its extensions.
async fn authorize(guard: &Guard, mut request: Request) -> Result<Request, ApiError> {
    let Some(store) = guard.tokens.as_deref() else {
        request.extensions_mut().insert(Caller::Open);
        return Ok(request);
    };
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned())
        .unwrap_or_default();
    let (mut parts, body) = request.into_parts();
    let project = match RawPathParams::from_request_parts(&mut parts, &()).await {
        Ok(params) => params
            .iter()
            .find(|(k, _)| *k == "p")
            .map(|(_, v)| v.to_owned()),
        Err(_) => None,
    };
    let mut request = Request::from_parts(parts, body);
    let rule = guard.table.rule(request.method(), &route);
    let access = Access::of(rule, project.as_deref());
    if access == Access::Public {
        return Ok(request);
    }
    let tokens = store.current();
    let Some(caller) = bearer_token(&request).and_then(|t| tokens.authenticate(t)) else {
        return Err(ApiError::Unauthorized);
    };
    let Caller::Token { role, .. } = &caller else {
        return Err(ApiError::Unauthorized);
    };
    if !role.allows(&access) {
        let detail = match &access {
            Access::Admin => "this request needs the admin role".to_owned(),
            Access::ProjectRead(_) | Access::ProjectWrite(_) => {
                format!(
                    "the {} role does not cover this project or request",
                    role.label()
                )
            }
            Access::Public | Access::Authenticated => String::new(),
        };
        return Err(ApiError::Forbidden(detail));
    }
    request.extensions_mut().insert(caller);
    Ok(request)
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::*;

    #[test]
    fn roles_cover_their_scope_only() {
        let acme = Role::Project(ProjectId::parse("acme").expect("id"));
        let read = |p: &str| Access::ProjectRead(p.into());
        let write = |p: &str| Access::ProjectWrite(p.into());
        assert!(acme.allows(&read("acme")) && acme.allows(&write("acme")));
        assert!(!acme.allows(&read("other")) && !acme.allows(&write("other")));
        assert!(!acme.allows(&Access::Admin));
        assert!(Role::Auditor.allows(&read("any")));
        assert!(!Role::Auditor.allows(&write("any")) && !Role::Auditor.allows(&Access::Admin));
        assert!(Role::Admin.allows(&Access::Admin) && Role::Admin.allows(&write("x")));
    }

    /// The rules registered with the routes, as SPEC.md gives them.
    #[test]
    fn routes_need_what_the_spec_says() {
        let (_, table) = crate::server::routes().into_parts();
        let access = |method: Method, route: &str| {
            let project = route.contains("{p}").then_some("acme");
            Access::of(table.rule(&method, route), project)
        };
        let read = Access::ProjectRead("acme".into());
        let write = Access::ProjectWrite("acme".into());
        assert_eq!(access(Method::PUT, "/v1/defaults"), Access::Admin);
        assert_eq!(access(Method::GET, "/v1/defaults"), Access::Authenticated);
        assert_eq!(access(Method::HEAD, "/v1/defaults"), Access::Authenticated);
        assert_eq!(
            access(Method::PUT, "/v1/projects/{p}/limits"),
            Access::Admin
        );
        assert_eq!(
            access(Method::DELETE, "/v1/projects/{p}/limits"),
            Access::Admin
        );
        assert_eq!(access(Method::GET, "/v1/projects/{p}/limits"), read);
        assert_eq!(access(Method::HEAD, "/v1/projects/{p}/limits"), read);
        assert_eq!(access(Method::POST, "/v1/projects/{p}/reservations"), write);
        let commit = "/v1/projects/{p}/reservations/{id}/commit";
        assert_eq!(access(Method::POST, commit), write);
        let release = "/v1/projects/{p}/reservations/{id}/release";
        assert_eq!(access(Method::POST, release), write);
        assert_eq!(
            access(Method::GET, "/v1/projects/{p}/reservations/{id}"),
            read
        );
        assert_eq!(access(Method::GET, "/v1/projects/{p}/usage"), read);
        assert_eq!(access(Method::GET, "/v1/projects/{p}/audit"), read);
        let defaults_audit = access(Method::GET, "/v1/defaults/audit");
        assert_eq!(defaults_audit, Access::Authenticated);
        assert_eq!(access(Method::GET, "/v1/admin/projections"), Access::Admin);
        let rebuild = "/v1/admin/projections/{name}/rebuild";
        assert_eq!(access(Method::POST, rebuild), Access::Admin);
        for public in [
            "/healthz",
            "/metrics",
            "/openapi.json",
            "/ui",
            "/ui/",
            "/ui/{asset}",
        ] {
            assert_eq!(access(Method::GET, public), Access::Public);
        }
    }

    /// A method a route does not serve needs the most demanding of the route's rules, as the
    /// route strings matched before the table did (the answer is a 405 for those who pass).
    #[test]
    fn methods_a_route_does_not_serve_need_its_strictest_rule() {
        let (_, table) = crate::server::routes().into_parts();
        let rule = |method: Method, route: &str| table.rule(&method, route);
        assert_eq!(rule(Method::POST, "/v1/defaults"), Some(Rule::Admin));
        assert_eq!(
            rule(Method::POST, "/v1/projects/{p}/limits"),
            Some(Rule::Admin)
        );
        let usage = "/v1/projects/{p}/usage";
        assert_eq!(rule(Method::DELETE, usage), Some(Rule::ProjectRead));
        let reserve = "/v1/projects/{p}/reservations";
        assert_eq!(rule(Method::GET, reserve), Some(Rule::ProjectRead));
        assert_eq!(rule(Method::DELETE, reserve), Some(Rule::ProjectWrite));
        assert_eq!(rule(Method::POST, "/healthz"), Some(Rule::Public));
        assert_eq!(rule(Method::GET, "/v1/unknown"), None);
    }

    #[test]
    fn only_the_routes_declared_so_read_a_query() {
        let (_, table) = crate::server::routes().into_parts();
        assert!(table.reads_query(&Method::GET, "/v1/projects/{p}/usage"));
        assert!(table.reads_query(&Method::HEAD, "/v1/projects/{p}/audit"));
        assert!(table.reads_query(&Method::GET, "/v1/projects/{p}/reservations"));
        assert!(table.reads_query(&Method::POST, "/v1/projects/{p}/reservations"));
        let commit = "/v1/projects/{p}/reservations/{id}/commit";
        assert!(!table.reads_query(&Method::POST, commit));
        assert!(!table.reads_query(&Method::GET, "/v1/defaults"));
    }
}
