//! A typed HTTP client of the quota API, and the wire types it sends and receives ([`wire`]).
//! The `quota` command line and the load generator's HTTP driver both talk to the server
//! through it, so a request or answer shape is written once on the client side.
//!
//! It may not depend on the server (`api`) or on the ledger: a client build carries no server
//! code, and the server's own types stay free to change behind the JSON they produce.

mod problem;
pub mod wire;

use std::time::Duration;

use reqwest::Method;
pub use reqwest::StatusCode;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

pub use problem::{ClientError, Problem};
use wire::{
    AuditPage, AuditQuery, Correct, Corrections, DefaultLimits, DryRun, DryRunQuery,
    EffectiveLimits, History, HistoryQuery, ParentOf, ProjectLimits, ProjectList, ProjectListQuery,
    ProjectionStatus, Reservation, ReservationList, ReservationListQuery, Reserve, SetDefaults,
    SetLimits, SetParent, Step, TransitionBody, Usage, UsageQuery,
};

/// How long one request may take, answer included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A successful answer: typed, and the JSON as the server sent it (the only untyped form here,
/// kept because `quota --json` prints the server's answer verbatim).
#[derive(Debug, Clone)]
pub struct Answer<T> {
    pub body: T,
    pub json: Value,
}

/// Whose audit trail to read.
#[derive(Clone, Copy, Debug)]
pub enum AuditOf<'a> {
    /// A project's (its id).
    Project(&'a str),
    /// The default limits'.
    Defaults,
}

/// A client of one server: its base URL and the bearer token, if any.
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    /// A client for `base` (e.g. `http://127.0.0.1:8080`); an empty token counts as none.
    pub fn new(base: &str, token: Option<String>) -> Result<Client, ClientError> {
        Client::build(reqwest::Client::builder(), base, token)
    }

    /// A client that keeps up to `idle_connections` connections open for reuse, for callers
    /// that send from many tasks at once.
    pub fn with_idle_connections(
        base: &str,
        token: Option<String>,
        idle_connections: usize,
    ) -> Result<Client, ClientError> {
        let builder = reqwest::Client::builder().pool_max_idle_per_host(idle_connections);
        Client::build(builder, base, token)
    }

    fn build(
        builder: reqwest::ClientBuilder,
        base: &str,
        token: Option<String>,
    ) -> Result<Client, ClientError> {
        let http = builder
            .timeout(REQUEST_TIMEOUT)
            .build()
            .map_err(ClientError::Build)?;
        Ok(Client {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: token.filter(|t| !t.is_empty()),
        })
    }

    /// The base URL, without a trailing slash.
    pub fn base(&self) -> &str {
        &self.base
    }

    pub async fn defaults(&self) -> Result<Answer<DefaultLimits>, ClientError> {
        self.call(Method::GET, "/v1/defaults", &(), None::<&()>)
            .await
    }

    pub async fn set_defaults(
        &self,
        body: &SetDefaults,
    ) -> Result<Answer<DefaultLimits>, ClientError> {
        self.call(Method::PUT, "/v1/defaults", &(), Some(body))
            .await
    }

    pub async fn limits(&self, project: &str) -> Result<Answer<ProjectLimits>, ClientError> {
        let path = limits_path(project);
        self.call(Method::GET, &path, &(), None::<&()>).await
    }

    pub async fn set_limits(
        &self,
        project: &str,
        body: &SetLimits,
    ) -> Result<Answer<EffectiveLimits>, ClientError> {
        let path = limits_path(project);
        self.call(Method::PUT, &path, &(), Some(body)).await
    }

    /// Removes a project's own limits (back to the defaults).
    pub async fn reset_limits(&self, project: &str) -> Result<(), ClientError> {
        let path = limits_path(project);
        self.send(Method::DELETE, &path, &(), None::<&()>).await?;
        Ok(())
    }

    /// A user's effective limits and where each comes from (`user`, `project` or `default`).
    pub async fn user_limits(
        &self,
        project: &str,
        user: &str,
    ) -> Result<Answer<ProjectLimits>, ClientError> {
        let path = user_path(project, user, "limits");
        self.call(Method::GET, &path, &(), None::<&()>).await
    }

    /// Sets some of a user's own limits (an admin token).
    pub async fn set_user_limits(
        &self,
        project: &str,
        user: &str,
        body: &SetLimits,
    ) -> Result<Answer<EffectiveLimits>, ClientError> {
        let path = user_path(project, user, "limits");
        self.call(Method::PUT, &path, &(), Some(body)).await
    }

    /// Removes a user's own limits: it has no cap but the project's (an admin token).
    pub async fn reset_user_limits(&self, project: &str, user: &str) -> Result<(), ClientError> {
        let path = user_path(project, user, "limits");
        self.send(Method::DELETE, &path, &(), None::<&()>).await?;
        Ok(())
    }

    /// A user's usage inside a project, now or at a past instant (`query.at`).
    pub async fn user_usage(
        &self,
        project: &str,
        user: &str,
        query: &UsageQuery,
    ) -> Result<Answer<Usage>, ClientError> {
        let path = user_path(project, user, "usage");
        self.call(Method::GET, &path, query, None::<&()>).await
    }

    /// A project's parent and all its ancestors (none for a root project).
    pub async fn parent(&self, project: &str) -> Result<Answer<ParentOf>, ClientError> {
        let path = parent_path(project);
        self.call(Method::GET, &path, &(), None::<&()>).await
    }

    /// Sets or changes a project's parent (an admin token); answers its new ancestors.
    pub async fn set_parent(
        &self,
        project: &str,
        body: &SetParent,
    ) -> Result<Answer<ParentOf>, ClientError> {
        let path = parent_path(project);
        self.call(Method::PUT, &path, &(), Some(body)).await
    }

    /// Detaches a project from its parent: it becomes a root (an admin token).
    pub async fn remove_parent(&self, project: &str) -> Result<(), ClientError> {
        let path = parent_path(project);
        self.send(Method::DELETE, &path, &(), None::<&()>).await?;
        Ok(())
    }

    /// One page of the projects, in id order (`query.parent`: only that project's children).
    pub async fn projects(
        &self,
        query: &ProjectListQuery,
    ) -> Result<Answer<ProjectList>, ClientError> {
        self.call(Method::GET, "/v1/projects", query, None::<&()>)
            .await
    }

    pub async fn reserve(
        &self,
        project: &str,
        body: &Reserve,
    ) -> Result<Answer<Reservation>, ClientError> {
        let path = format!("/v1/projects/{}/reservations", segment(project));
        self.call(Method::POST, &path, &(), Some(body)).await
    }

    /// What the reserve would get now, holding and recording nothing.
    pub async fn reserve_dry_run(
        &self,
        project: &str,
        body: &Reserve,
    ) -> Result<Answer<DryRun>, ClientError> {
        let path = format!("/v1/projects/{}/reservations", segment(project));
        let query = DryRunQuery { dry_run: true };
        self.call(Method::POST, &path, &query, Some(body)).await
    }

    /// Commits or releases a reservation; without a body when there is no actor to declare.
    pub async fn transition(
        &self,
        project: &str,
        id: &str,
        step: Step,
        body: Option<&TransitionBody>,
    ) -> Result<Answer<Reservation>, ClientError> {
        let path = format!("{}/{}", reservation_path(project, id), step.action());
        self.call(Method::POST, &path, &(), body).await
    }

    pub async fn reservation(
        &self,
        project: &str,
        id: &str,
    ) -> Result<Answer<Reservation>, ClientError> {
        let path = reservation_path(project, id);
        self.call(Method::GET, &path, &(), None::<&()>).await
    }

    /// Sets the project's in_use (or a user's, `body.user`) to real counts (an admin token).
    pub async fn correct(
        &self,
        project: &str,
        body: &Correct,
    ) -> Result<Answer<Corrections>, ClientError> {
        let path = format!("/v1/projects/{}/usage/corrections", segment(project));
        self.call(Method::POST, &path, &(), Some(body)).await
    }

    /// One page of a project's reservations, in the order they were made.
    pub async fn reservations(
        &self,
        project: &str,
        query: &ReservationListQuery,
    ) -> Result<Answer<ReservationList>, ClientError> {
        let path = format!("/v1/projects/{}/reservations", segment(project));
        self.call(Method::GET, &path, query, None::<&()>).await
    }

    pub async fn usage(
        &self,
        project: &str,
        query: &UsageQuery,
    ) -> Result<Answer<Usage>, ClientError> {
        let path = format!("/v1/projects/{}/usage", segment(project));
        self.call(Method::GET, &path, query, None::<&()>).await
    }

    /// One resource's in_use, reserved and limit over time.
    pub async fn history(
        &self,
        project: &str,
        query: &HistoryQuery,
    ) -> Result<Answer<History>, ClientError> {
        let path = format!("/v1/projects/{}/usage/history", segment(project));
        self.call(Method::GET, &path, query, None::<&()>).await
    }

    pub async fn audit(
        &self,
        of: AuditOf<'_>,
        query: &AuditQuery,
    ) -> Result<Answer<AuditPage>, ClientError> {
        let path = match of {
            AuditOf::Project(project) => format!("/v1/projects/{}/audit", segment(project)),
            AuditOf::Defaults => "/v1/defaults/audit".to_owned(),
        };
        self.call(Method::GET, &path, query, None::<&()>).await
    }

    /// Each view's progress (an admin token).
    pub async fn projections(&self) -> Result<Answer<Vec<ProjectionStatus>>, ClientError> {
        self.call(Method::GET, "/v1/admin/projections", &(), None::<&()>)
            .await
    }

    /// Sends a request and reads the answer's JSON as `T`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: &impl Serialize,
        body: Option<&impl Serialize>,
    ) -> Result<Answer<T>, ClientError> {
        let json = self.send(method.clone(), path, query, body).await?;
        let body = T::deserialize(&json).map_err(|source| ClientError::UnexpectedShape {
            method,
            path: path.to_owned(),
            source,
        })?;
        Ok(Answer { body, json })
    }

    /// Sends a request; answers the JSON of a 2xx (`Null` for 204), or the problem as an error.
    async fn send(
        &self,
        method: Method,
        path: &str,
        query: &impl Serialize,
        body: Option<&impl Serialize>,
    ) -> Result<Value, ClientError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method.clone(), &url).query(query);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|source| ClientError::Unreachable {
                base: self.base.clone(),
                source,
            })?;
        let status = response.status();
        let text = response.text().await.map_err(|source| ClientError::Read {
            method: method.clone(),
            path: path.to_owned(),
            source,
        })?;
        if !status.is_success() {
            return Err(ClientError::from_answer(status, &text));
        }
        if status == StatusCode::NO_CONTENT || text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|source| ClientError::NotJson {
            method,
            path: path.to_owned(),
            source,
        })
    }
}

fn limits_path(project: &str) -> String {
    format!("/v1/projects/{}/limits", segment(project))
}

fn parent_path(project: &str) -> String {
    format!("/v1/projects/{}/parent", segment(project))
}

/// `/v1/projects/{project}/users/{user}/{what}`.
fn user_path(project: &str, user: &str, what: &str) -> String {
    format!(
        "/v1/projects/{}/users/{}/{what}",
        segment(project),
        segment(user)
    )
}

fn reservation_path(project: &str, id: &str) -> String {
    format!(
        "/v1/projects/{}/reservations/{}",
        segment(project),
        segment(id)
    )
}

/// Percent-encodes a path segment, so an odd project id reaches the server intact (and is
/// refused there with a clear message rather than routed elsewhere).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn segments_keep_unreserved_bytes_and_encode_the_rest() {
        assert_eq!(super::segment("acme-1.a_b~c:d"), "acme-1.a_b~c:d");
        assert_eq!(super::segment("a/b c"), "a%2Fb%20c");
    }
}
