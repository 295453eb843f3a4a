//! Bearer tokens, roles and the authorization middleware. The tokens file itself (its format,
//! hashing, reloads) is [`crate::tokens`].
//!
//! Who may do what (see [`Access`]):
//! - `admin`: everything.
//! - `auditor`: every `GET` except the admin endpoints.
//! - `project:{p}`: reserve, commit, release and read (limits, usage, audit, reservations) of `p`.
//! - Any valid token: `GET /v1/defaults` (the defaults are the same for everyone).
//! - No token: `/healthz`, `/openapi.json`, `/metrics` (metrics carry no project data).

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use domain::ProjectId;

use crate::error::ApiError;
use crate::server::AppState;
use crate::tokens::{LineError, TokenName};

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

/// What a request needs, from its method and route.
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
    pub fn of(method: &Method, route: &str, project: Option<&str>) -> Access {
        let project = project.unwrap_or_default().to_owned();
        match route {
            "/healthz" | "/metrics" | "/openapi.json" => Access::Public,
            "/v1/defaults" if method == Method::GET || method == Method::HEAD => {
                Access::Authenticated
            }
            "/v1/projects/{p}/limits" if method == Method::GET || method == Method::HEAD => {
                Access::ProjectRead(project)
            }
            "/v1/projects/{p}/reservations"
            | "/v1/projects/{p}/reservations/{id}/commit"
            | "/v1/projects/{p}/reservations/{id}/release" => Access::ProjectWrite(project),
            "/v1/projects/{p}/reservations/{id}"
            | "/v1/projects/{p}/usage"
            | "/v1/projects/{p}/audit" => Access::ProjectRead(project),
            _ => Access::Admin,
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

fn bearer_token(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Middleware on every route: authenticates the token and checks the route's [`Access`].
/// Runs before any body or parameter is parsed, so a caller without access learns nothing else.
pub async fn authorize(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(store) = state.tokens.as_deref() else {
        request.extensions_mut().insert(Caller::Open);
        return next.run(request).await;
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
    let access = Access::of(request.method(), &route, project.as_deref());
    if access == Access::Public {
        return next.run(request).await;
    }
    let tokens = store.current();
    let Some(caller) = bearer_token(&request).and_then(|t| tokens.authenticate(t)) else {
        return ApiError::Unauthorized.into_response();
    };
    let Caller::Token { role, .. } = &caller else {
        return ApiError::Unauthorized.into_response();
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
        return ApiError::Forbidden(detail).into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn routes_need_what_the_spec_says() {
        let p = Some("acme");
        assert_eq!(
            Access::of(&Method::PUT, "/v1/defaults", None),
            Access::Admin
        );
        assert_eq!(
            Access::of(&Method::GET, "/v1/defaults", None),
            Access::Authenticated
        );
        assert_eq!(
            Access::of(&Method::PUT, "/v1/projects/{p}/limits", p),
            Access::Admin
        );
        assert_eq!(
            Access::of(&Method::DELETE, "/v1/projects/{p}/limits", p),
            Access::Admin
        );
        assert_eq!(
            Access::of(&Method::GET, "/v1/projects/{p}/limits", p),
            Access::ProjectRead("acme".into())
        );
        assert_eq!(
            Access::of(
                &Method::POST,
                "/v1/projects/{p}/reservations/{id}/commit",
                p
            ),
            Access::ProjectWrite("acme".into())
        );
        assert_eq!(
            Access::of(&Method::GET, "/v1/admin/projections", None),
            Access::Admin
        );
        assert_eq!(Access::of(&Method::GET, "/healthz", None), Access::Public);
    }
}
