//! `/v1/projects/{p}/parent`: a project's place in the tree (SPEC rule 11). `PUT` sets or
//! changes its parent (admin only; no cycles, at most 3 ancestors for any project of the moved
//! subtree, and rule 6 for every new ancestor: joining must not take an ancestor's subtree over
//! its limits unless `force`); `GET` answers the parent and every ancestor, nearest first
//! (readable as the project's limits are); `DELETE` makes it a root again (admin only).
//!
//! Reads and writes go to the ledger, never the views, so a read reflects every acknowledged
//! write at once. `PUT` also answers a `position` the views reflect the change at (the log's
//! head once it is written), for `?min_position=` on `GET /v1/projects?parent=`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use domain::{Actor, ClientRequestId, ProjectId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::limits::AuditedRequest;
use crate::error::ApiError;
use crate::extract::{JsonBody, OptionalJsonBody, ProjectPath, RequestContext};
use crate::openapi::schemas::{ClientTextSchema, PositionSchema, ProjectIdSchema};
use crate::problem::ProblemDocument;
use crate::server::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ParentRequest {
    /// The new parent: an existing project or a new one; not the project itself nor one of
    /// its descendants.
    #[schema(value_type = ProjectIdSchema, example = "acme")]
    pub parent: ProjectId,
    /// Attach it even if that takes a new ancestor's subtree over one of its limits.
    #[serde(default)]
    pub force: bool,
    /// Who did it, for the audit (defaults to the token's role).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub actor: Option<Actor>,
    /// The client's request id, for the audit (defaults to the HTTP x-request-id).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub request_id: Option<ClientRequestId>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ParentResponse {
    #[schema(value_type = ProjectIdSchema)]
    pub project: String,
    /// Its parent; null for a root project.
    #[schema(value_type = Option<ProjectIdSchema>)]
    pub parent: Option<String>,
    /// Every ancestor, nearest first (the parent, its parent, …); at most 3.
    #[schema(value_type = Vec<ProjectIdSchema>)]
    pub ancestors: Vec<String>,
    /// `PUT` only: a global position the views reflect the change at (for `min_position`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<PositionSchema>, nullable = false)]
    pub position: Option<u64>,
}

impl ParentResponse {
    fn of(project: &ProjectId, ancestors: Vec<ProjectId>, position: Option<u64>) -> Self {
        ParentResponse {
            project: project.to_string(),
            parent: ancestors.first().map(ToString::to_string),
            ancestors: ancestors.iter().map(ToString::to_string).collect(),
            position,
        }
    }
}

/// Set or change a project's parent.
#[utoipa::path(put, path = "/v1/projects/{p}/parent", tag = "tree",
    params(("p" = ProjectIdSchema, Path, description = "Project id")),
    request_body = ParentRequest,
    responses(
        (status = 200, description = "The project's parent and ancestors, nearest first", body = ParentResponse),
        (status = 400, description = "invalid-request (bad id or body; the parent is the project or one of its descendants: a cycle; the tree would be more than 4 levels deep; too many descendants)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden (admin only)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "limit-below-usage: a new ancestor's subtree would go over its limits (with `resources`); repeat with `force: true` to insist", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, contention, shutting-down: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn put_parent(
    State(state): State<AppState>,
    ctx: RequestContext,
    ProjectPath(project): ProjectPath,
    JsonBody(body): JsonBody<ParentRequest>,
) -> Result<Json<ParentResponse>, ApiError> {
    let meta = ctx.metadata(body.actor, body.request_id);
    let result = state
        .ledger
        .set_parent(&project, Some(body.parent), body.force, &meta)
        .await
        .map_err(ApiError::from);
    super::count_decision("set_parent", &result);
    let ancestors = result?;
    let position = state.ledger.store().head().await?;
    Ok(Json(ParentResponse::of(
        &project,
        ancestors,
        Some(position),
    )))
}

/// A project's parent and all its ancestors, nearest first.
#[utoipa::path(get, path = "/v1/projects/{p}/parent", tag = "tree",
    params(("p" = ProjectIdSchema, Path, description = "Project id")),
    responses(
        (status = 200, description = "The project's parent (null for a root) and ancestors, nearest first", body = ParentResponse),
        (status = 400, description = "invalid-request (bad project id)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_parent(
    State(state): State<AppState>,
    ProjectPath(project): ProjectPath,
) -> Result<Json<ParentResponse>, ApiError> {
    let ancestors = state.ledger.ancestors(&project).await?;
    Ok(Json(ParentResponse::of(&project, ancestors, None)))
}

/// Remove a project's parent: it becomes a root (with its descendants under it).
#[utoipa::path(delete, path = "/v1/projects/{p}/parent", tag = "tree",
    params(("p" = ProjectIdSchema, Path, description = "Project id")),
    request_body(content = Option<AuditedRequest>, description = "Optional: actor and request id for the audit"),
    responses(
        (status = 204, description = "The project has no parent"),
        (status = 400, description = "invalid-request (bad project id)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden (admin only)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, contention, shutting-down: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn delete_parent(
    State(state): State<AppState>,
    ctx: RequestContext,
    ProjectPath(project): ProjectPath,
    OptionalJsonBody(body): OptionalJsonBody<AuditedRequest>,
) -> Result<StatusCode, ApiError> {
    let meta = ctx.metadata(body.actor, body.request_id);
    let result = state
        .ledger
        .set_parent(&project, None, false, &meta)
        .await
        .map_err(ApiError::from);
    super::count_decision("remove_parent", &result);
    result?;
    Ok(StatusCode::NO_CONTENT)
}
