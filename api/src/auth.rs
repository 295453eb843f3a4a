//! Bearer tokens and roles.
//!
//! The tokens file has one `TOKEN ROLE` pair a line (`#` starts a comment); roles are `admin`,
//! `auditor` and `project:{id}`. Only SHA-256 hashes of the tokens are kept, a presented token is
//! compared with every stored hash in constant time, and no token is ever logged or echoed.
//!
//! Who may do what (see [`Access`]):
//! - `admin`: everything.
//! - `auditor`: every `GET` except the admin endpoints.
//! - `project:{p}`: reserve, commit, release and read (limits, usage, audit, reservations) of `p`.
//! - Any valid token: `GET /v1/defaults` (the defaults are the same for everyone).
//! - No token: `/healthz`, `/openapi.json`, `/metrics` (metrics carry no project data).

use std::path::Path;

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use domain::ProjectId;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::error::ApiError;
use crate::server::AppState;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Admin,
    Auditor,
    Project(ProjectId),
}

impl Role {
    pub fn parse(s: &str) -> Result<Role, String> {
        match s {
            "admin" => Ok(Role::Admin),
            "auditor" => Ok(Role::Auditor),
            other => match other.strip_prefix("project:") {
                Some(id) => ProjectId::parse(id)
                    .map(Role::Project)
                    .map_err(|e| e.to_string()),
                None => Err(format!(
                    "unknown role {:?}: use admin, auditor or project:ID",
                    other.chars().take(64).collect::<String>()
                )),
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
    Token(Role),
}

impl Caller {
    pub fn label(&self) -> Option<String> {
        match self {
            Caller::Open => None,
            Caller::Token(role) => Some(role.label()),
        }
    }
}

type TokenHash = [u8; 32];

fn hash(token: &str) -> TokenHash {
    Sha256::digest(token.as_bytes()).into()
}

/// The known tokens, by hash.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    entries: Vec<(TokenHash, Role)>,
}

impl Tokens {
    pub fn load(path: &Path) -> Result<Tokens, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read tokens file {}: {e}", path.display()))?;
        Tokens::parse(&text).map_err(|e| format!("tokens file {}: {e}", path.display()))
    }

    /// Parses `TOKEN ROLE` lines. Errors name the line, never the token.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut entries: Vec<(TokenHash, Role)> = vec![];
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let line = line.split('#').next().unwrap_or_default().trim();
            if line.is_empty() {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(token), Some(role), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(format!("line {number}: expected `TOKEN ROLE`"));
            };
            let role = Role::parse(role).map_err(|e| format!("line {number}: {e}"))?;
            let digest = hash(token);
            if entries.iter().any(|(known, _)| *known == digest) {
                return Err(format!("line {number}: this token is listed twice"));
            }
            entries.push((digest, role));
        }
        if entries.is_empty() {
            return Err("no tokens".into());
        }
        Ok(Tokens { entries })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The role of `token`. Every stored hash is compared, in constant time, whatever matches.
    pub fn authenticate(&self, token: &str) -> Option<Role> {
        let presented = hash(token);
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (i, (known, _)) in self.entries.iter().enumerate() {
            let matches = known.ct_eq(&presented);
            index = u64::conditional_select(&index, &(i as u64), matches);
            found |= matches;
        }
        if bool::from(found) {
            usize::try_from(index)
                .ok()
                .and_then(|i| self.entries.get(i))
                .map(|(_, role)| role.clone())
        } else {
            None
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
    let Some(tokens) = state.tokens.as_deref() else {
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
    let Some(role) = bearer_token(&request).and_then(|t| tokens.authenticate(t)) else {
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
    request.extensions_mut().insert(Caller::Token(role));
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_file_parses_roles_and_comments() {
        let tokens = Tokens::parse(
            "# operators\nsecret-a admin\nsecret-b auditor # read only\n\nsecret-c project:acme\n",
        )
        .expect("valid file");
        assert_eq!(tokens.len(), 3);
        assert_eq!(tokens.authenticate("secret-a"), Some(Role::Admin));
        assert_eq!(tokens.authenticate("secret-b"), Some(Role::Auditor));
        assert_eq!(
            tokens.authenticate("secret-c"),
            Some(Role::Project(ProjectId::parse("acme").expect("id")))
        );
        assert_eq!(tokens.authenticate("secret-d"), None);
    }

    #[test]
    fn tokens_file_errors_do_not_show_tokens() {
        for bad in [
            "hunter2 root",
            "hunter2",
            "hunter2 admin extra",
            "hunter2 admin\nhunter2 auditor",
        ] {
            let error = Tokens::parse(bad).expect_err(bad);
            assert!(!error.contains("hunter2"), "{error}");
        }
        assert!(Tokens::parse("# nothing\n").is_err());
    }

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
