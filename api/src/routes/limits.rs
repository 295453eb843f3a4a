//! `/v1/projects/{p}/limits`: a project's own limits over the defaults.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use domain::{Actor, ClientRequestId, Limits};
use ledger::LimitsView;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::extract::{JsonBody, OptionalJsonBody, ProjectPath, RequestContext};
use crate::openapi::schemas::{
    ClientTextSchema, LimitSourceSchema, LimitsSchema, PositionSchema, ProjectIdSchema,
    UserIdSchema,
};
use crate::problem::ProblemDocument;
use crate::server::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsRequest {
    /// `{resource: limit}` to merge into the project's overrides; -1 is unlimited.
    #[schema(value_type = LimitsSchema, example = json!({"instances": 5}))]
    pub limits: Limits,
    /// Lower a limit below the current in_use + reserved anyway.
    #[serde(default)]
    pub force: bool,
    /// Who did it, for the audit (defaults to the token's role).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub actor: Option<Actor>,
    /// The client's request id, for the audit (defaults to the HTTP x-request-id).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub request_id: Option<ClientRequestId>,
}

/// Optional body of `DELETE`: who did it, for the audit.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditedRequest {
    /// Who did it, for the audit (defaults to the token's role).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub actor: Option<Actor>,
    /// The client's request id, for the audit (defaults to the HTTP x-request-id).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub request_id: Option<ClientRequestId>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EffectiveLimits {
    #[schema(value_type = ProjectIdSchema)]
    pub project: String,
    /// A user's limits: the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<UserIdSchema>, nullable = false)]
    pub user: Option<String>,
    /// The effective limit of every resource (a user's own, else the project's own, else the
    /// default).
    pub limits: BTreeMap<String, i64>,
    /// Global position of the project's last limits event (0 if none).
    #[schema(value_type = PositionSchema)]
    pub position: u64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LimitEntry {
    pub limit: i64,
    /// `user` (a user's own override), `project` (the project's override) or `default`.
    #[schema(value_type = LimitSourceSchema, example = "default")]
    pub source: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProjectLimits {
    #[schema(value_type = ProjectIdSchema)]
    pub project: String,
    /// A user's limits: the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<UserIdSchema>, nullable = false)]
    pub user: Option<String>,
    pub limits: BTreeMap<String, LimitEntry>,
    /// Global position of the project's last limits event (0 if none).
    #[schema(value_type = PositionSchema)]
    pub position: u64,
}

/// Set some of a project's limits (merged with its other overrides).
#[utoipa::path(put, path = "/v1/projects/{p}/limits", tag = "limits",
    params(("p" = ProjectIdSchema, Path, description = "Project id")),
    request_body = LimitsRequest,
    responses(
        (status = 200, description = "The project's effective limits", body = EffectiveLimits),
        (status = 400, description = "invalid-request, unknown-resource", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden (admin only)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "limit-below-usage (with `resources`)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, contention, shutting-down: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn put_limits(
    State(state): State<AppState>,
    ctx: RequestContext,
    ProjectPath(project): ProjectPath,
    JsonBody(body): JsonBody<LimitsRequest>,
) -> Result<Json<EffectiveLimits>, ApiError> {
    let meta = ctx.metadata(body.actor, body.request_id);
    let result = state
        .ledger
        .set_limits(&project, body.limits, body.force, &meta)
        .await
        .map_err(ApiError::from);
    super::count_decision("set_limits", &result);
    Ok(Json(effective_limits(result?)))
}

/// The effective limits a write of limits answers.
pub(super) fn effective_limits(view: LimitsView) -> EffectiveLimits {
    EffectiveLimits {
        project: view.project.to_string(),
        user: view.user.map(|u| u.to_string()),
        limits: view
            .limits
            .iter()
            .map(|(r, (limit, _))| (r.to_string(), limit.value()))
            .collect(),
        position: view.position,
    }
}

/// The effective limits a read of limits answers, with where each comes from.
pub(super) fn project_limits(view: LimitsView) -> ProjectLimits {
    ProjectLimits {
        project: view.project.to_string(),
        user: view.user.map(|u| u.to_string()),
        limits: view
            .limits
            .iter()
            .map(|(r, (limit, source))| {
                (
                    r.to_string(),
                    LimitEntry {
                        limit: limit.value(),
                        source: source.as_str().to_owned(),
                    },
                )
            })
            .collect(),
        position: view.position,
    }
}

/// A project's effective limits and where each comes from.
#[utoipa::path(get, path = "/v1/projects/{p}/limits", tag = "limits",
    params(("p" = ProjectIdSchema, Path, description = "Project id")),
    responses(
        (status = 200, description = "Effective limits with their source", body = ProjectLimits),
        (status = 400, description = "invalid-request (bad project id)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_limits(
    State(state): State<AppState>,
    ProjectPath(project): ProjectPath,
) -> Result<Json<ProjectLimits>, ApiError> {
    Ok(Json(project_limits(state.ledger.limits(&project).await?)))
}

/// Remove all of a project's own limits: it is back on the defaults.
#[utoipa::path(delete, path = "/v1/projects/{p}/limits", tag = "limits",
    params(("p" = ProjectIdSchema, Path, description = "Project id")),
    request_body(content = Option<AuditedRequest>, description = "Optional: actor and request id for the audit"),
    responses(
        (status = 204, description = "Back to the defaults"),
        (status = 400, description = "invalid-request (bad project id)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden (admin only)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, contention, shutting-down: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn delete_limits(
    State(state): State<AppState>,
    ctx: RequestContext,
    ProjectPath(project): ProjectPath,
    OptionalJsonBody(body): OptionalJsonBody<AuditedRequest>,
) -> Result<StatusCode, ApiError> {
    let meta = ctx.metadata(body.actor, body.request_id);
    let result = state
        .ledger
        .reset_limits(&project, &meta)
        .await
        .map_err(ApiError::from);
    super::count_decision("reset_limits", &result);
    result?;
    Ok(StatusCode::NO_CONTENT)
}
