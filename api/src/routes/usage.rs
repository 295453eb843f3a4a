//! `GET /v1/projects/{p}/usage`: the usage view, now or as it stood at a time.
//!
//! A project with descendants (SPEC rule 11) also answers its subtree's usage and each child's,
//! and its headroom is its limit minus its subtree's in_use and reserved: what a reserve in it
//! or below it is judged on. Now, the subtree comes from the ledger's state of the project (its
//! stream records every change of its descendants' usage: the numbers its decisions use), read
//! after the view, and only for a project the views know children of (so the usage of a
//! project without any stays a read of the views alone); at a past instant, from the same fold
//! of its stream as its own usage then, so it has the children it had then.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use domain::{Limit, ResourceStanding, Usage};
use ledger::SubtreeView;
use projections::{ProjectQuery, Projections, SubtreeUsage, UsageReport};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::ApiError;
use crate::extract::{parse_time, ApiQuery, ProjectPath};
use crate::limits::{MIN_POSITION_WAIT, OWN_WRITES_WAIT};
use crate::openapi::schemas::{PositionSchema, ProjectIdSchema, TimestampSchema, UserIdSchema};
use crate::problem::ProblemDocument;
use crate::server::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// RFC 3339 time: the usage as it stood then (from the project's events).
    #[param(value_type = Option<TimestampSchema>)]
    pub at: Option<String>,
    /// Wait (up to 5 s) until the views reflect this global position, e.g. a write's `position`.
    #[param(value_type = Option<PositionSchema>)]
    pub min_position: Option<u64>,
}

impl UsageQuery {
    /// `at`, parsed: the time a usage is asked as it stood at.
    pub fn at(&self) -> Result<Option<domain::Timestamp>, ApiError> {
        self.at
            .as_deref()
            .map(|raw| parse_time("at", raw))
            .transpose()
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ResourceUsageBody {
    /// The effective limit, -1 for unlimited.
    pub limit: i64,
    pub in_use: i64,
    pub reserved: i64,
    /// `limit - in_use - reserved`; absent when unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headroom: Option<i64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UsageResponse {
    #[schema(value_type = ProjectIdSchema)]
    pub project: String,
    /// A user's usage: the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<UserIdSchema>, nullable = false)]
    pub user: Option<String>,
    pub resources: BTreeMap<String, ResourceUsageBody>,
    /// A project with descendants: the in_use and reserved of the project and all its
    /// descendants, which its limits cap (its `headroom` is the limit minus these).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub subtree: Option<BTreeMap<String, UsageNumbers>>,
    /// A project with descendants: each child's subtree usage (the child's and all its
    /// descendants'), by child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub children: Option<BTreeMap<String, BTreeMap<String, UsageNumbers>>>,
    /// The global position the report reflects.
    #[schema(value_type = PositionSchema)]
    pub position: u64,
}

/// One resource's usage in a subtree.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UsageNumbers {
    pub in_use: i64,
    pub reserved: i64,
}

fn numbers(usage: BTreeMap<domain::ResourceName, Usage>) -> BTreeMap<String, UsageNumbers> {
    usage
        .into_iter()
        .map(|(r, u)| {
            let numbers = UsageNumbers {
                in_use: u.in_use,
                reserved: u.reserved,
            };
            (r.to_string(), numbers)
        })
        .collect()
}

impl UsageResponse {
    /// A parent's usage: its subtree's and its children's beside its own, and each limited
    /// resource's headroom taken from the subtree. Unchanged for a project without descendants.
    fn with_subtree(mut self, subtree: Option<SubtreeUsage>) -> Self {
        let Some(SubtreeUsage { subtree, children }) = subtree else {
            return self;
        };
        for (resource, body) in &mut self.resources {
            let below = domain::ResourceName::parse(resource)
                .ok()
                .and_then(|r| subtree.get(&r));
            if let (Some(usage), Ok(limit)) = (below, Limit::new(body.limit)) {
                body.headroom = ResourceStanding::of(limit, usage).headroom();
            }
        }
        self.subtree = Some(numbers(subtree));
        self.children = Some(
            children
                .into_iter()
                .map(|(child, usage)| (child.to_string(), numbers(usage)))
                .collect(),
        );
        self
    }
}

/// The subtree of the ledger's view of a project; `None` without descendants.
fn subtree_now(view: SubtreeView) -> Option<SubtreeUsage> {
    (!view.descendants.is_empty()).then_some(SubtreeUsage {
        subtree: view.subtree,
        children: view.children,
    })
}

impl From<UsageReport> for UsageResponse {
    /// The project's own usage; its subtree is added by `with_subtree`.
    fn from(report: UsageReport) -> Self {
        UsageResponse {
            project: report.project.to_string(),
            user: None,
            subtree: None,
            children: None,
            resources: report
                .resources
                .into_iter()
                .map(|(r, u)| {
                    (
                        r.to_string(),
                        ResourceUsageBody {
                            limit: u.limit.value(),
                            in_use: u.in_use,
                            reserved: u.reserved,
                            headroom: u.headroom,
                        },
                    )
                })
                .collect(),
            position: report.position,
        }
    }
}

/// The views, or 503 when they are not running on this node.
pub fn running(state: &AppState) -> Result<&Arc<Projections>, ApiError> {
    state
        .projections
        .as_ref()
        .ok_or(ApiError::ProjectionsUnavailable)
}

/// Read-your-writes. With `min_position`, waits for it (up to 5 s, else 503 `not-caught-up`).
/// Without, waits briefly for the last write this node made, so a client talking to one node
/// sees its own writes without asking; on timeout it answers from the views as they are.
pub async fn catch_up(
    state: &AppState,
    projections: &Projections,
    min_position: Option<u64>,
) -> Result<(), ApiError> {
    match min_position {
        Some(position) => {
            refuse_past_head(state, position).await?;
            projections.wait_for(position, MIN_POSITION_WAIT).await?
        }
        None => {
            let own_head = *state.ledger.store().watch_head().borrow();
            if let Err(error) = projections.wait_for(own_head, OWN_WRITES_WAIT).await {
                tracing::debug!(%error, "answering from views behind this node's last write");
            }
        }
    }
    Ok(())
}

/// A `min_position` no event has yet is answered at once, not after the whole wait: positions
/// come from acknowledged writes, and the store knows its head (on PostgreSQL, every node's
/// writes included). This node's own head is checked first, so a position it wrote costs no
/// query.
pub(super) async fn refuse_past_head(state: &AppState, position: u64) -> Result<(), ApiError> {
    let store = state.ledger.store();
    if position <= *store.watch_head().borrow() {
        return Ok(());
    }
    let head = store.head().await?;
    if position > head {
        return Err(ApiError::PastHead {
            wanted: position,
            head,
        });
    }
    Ok(())
}

/// A project's usage: limit, in_use, reserved and headroom per resource; for a project with
/// descendants, also its subtree's and each child's usage (its headroom is of the subtree).
#[utoipa::path(get, path = "/v1/projects/{p}/usage", tag = "usage",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), UsageQuery),
    responses(
        (status = 200, description = "Usage per resource", body = UsageResponse),
        (status = 400, description = "invalid-request (bad id, bad time)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "not-caught-up (min_position not reached in 5 s, with `min_position` and `position`), projections-unavailable, store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_usage(
    State(state): State<AppState>,
    ProjectPath(project): ProjectPath,
    ApiQuery(query): ApiQuery<UsageQuery>,
) -> Result<Json<UsageResponse>, ApiError> {
    let at = query.at()?;
    let projections = running(&state)?;
    catch_up(&state, projections, query.min_position).await?;
    let (report, subtree) = match at {
        Some(at) => {
            let mut report = projections.usage_at(&project, at).await?;
            let subtree = report.subtree.take();
            (report, subtree)
        }
        None => {
            let report = projections
                .usage(&project, state.ledger.clock().now())
                .await?;
            let one_child = ProjectQuery {
                limit: Some(1),
                ..ProjectQuery::default()
            };
            let subtree = match projections.children(&project, &one_child).await {
                Ok(page) if page.projects.is_empty() => None,
                _ => subtree_now(state.ledger.subtree(&project).await?),
            };
            (report, subtree)
        }
    };
    Ok(Json(UsageResponse::from(report).with_subtree(subtree)))
}
