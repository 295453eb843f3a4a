//! `/v1/projects/{p}/users/{u}/…`: the users inside a project (SPEC rule 8). A user's own
//! limits cap its reserves besides the project's (`limits`: set, read, removed, as a project's
//! are, rule 6 applying to the user's usage), and its usage (`usage`: its own in_use and
//! reserved, with its limits).
//!
//! A user's usage now is read from the ledger's state of the project, not from the views
//! (which keep no per-user rows): it reflects every acknowledged write at once, so
//! `min_position` only has to be a position the log has. `?at=` replays the project's stream,
//! as a project's usage at a time does.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use domain::ResourceStanding;
use ledger::UserUsage;

use super::limits::{
    effective_limits, project_limits, AuditedRequest, EffectiveLimits, LimitsRequest, ProjectLimits,
};
use super::usage::{refuse_past_head, running, ResourceUsageBody, UsageQuery, UsageResponse};
use crate::error::ApiError;
use crate::extract::{ApiQuery, JsonBody, OptionalJsonBody, RequestContext, UserPath};
use crate::openapi::schemas::{ProjectIdSchema, UserIdSchema};
use crate::problem::ProblemDocument;
use crate::server::AppState;

/// Set some of a user's own limits (merged with its other overrides).
#[utoipa::path(put, path = "/v1/projects/{p}/users/{u}/limits", tag = "limits",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), ("u" = UserIdSchema, Path, description = "User id")),
    request_body = LimitsRequest,
    responses(
        (status = 200, description = "The user's effective limits", body = EffectiveLimits),
        (status = 400, description = "invalid-request, unknown-resource", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden (admin only)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "limit-below-usage (the user's usage; with `resources`)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, contention, shutting-down: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn put_user_limits(
    State(state): State<AppState>,
    ctx: RequestContext,
    UserPath(project, user): UserPath,
    JsonBody(body): JsonBody<LimitsRequest>,
) -> Result<Json<EffectiveLimits>, ApiError> {
    let meta = ctx.metadata(body.actor, body.request_id);
    let result = state
        .ledger
        .set_user_limits(&project, user, body.limits, body.force, &meta)
        .await
        .map_err(ApiError::from);
    super::count_decision("set_user_limits", &result);
    Ok(Json(effective_limits(result?)))
}

/// A user's effective limits and where each comes from (`user`, `project` or `default`).
#[utoipa::path(get, path = "/v1/projects/{p}/users/{u}/limits", tag = "limits",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), ("u" = UserIdSchema, Path, description = "User id")),
    responses(
        (status = 200, description = "Effective limits with their source", body = ProjectLimits),
        (status = 400, description = "invalid-request (bad project or user id)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_user_limits(
    State(state): State<AppState>,
    UserPath(project, user): UserPath,
) -> Result<Json<ProjectLimits>, ApiError> {
    let view = state.ledger.user_limits(&project, &user).await?;
    Ok(Json(project_limits(view)))
}

/// Remove all of a user's own limits: it has no cap but the project's.
#[utoipa::path(delete, path = "/v1/projects/{p}/users/{u}/limits", tag = "limits",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), ("u" = UserIdSchema, Path, description = "User id")),
    request_body(content = Option<AuditedRequest>, description = "Optional: actor and request id for the audit"),
    responses(
        (status = 204, description = "The user's overrides are removed"),
        (status = 400, description = "invalid-request (bad project or user id)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden (admin only)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, contention, shutting-down: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn delete_user_limits(
    State(state): State<AppState>,
    ctx: RequestContext,
    UserPath(project, user): UserPath,
    OptionalJsonBody(body): OptionalJsonBody<AuditedRequest>,
) -> Result<StatusCode, ApiError> {
    let meta = ctx.metadata(body.actor, body.request_id);
    let result = state
        .ledger
        .reset_user_limits(&project, user, &meta)
        .await
        .map_err(ApiError::from);
    super::count_decision("reset_user_limits", &result);
    result?;
    Ok(StatusCode::NO_CONTENT)
}

/// A user's usage: per resource its limit (its own, else the project's), in_use, reserved and
/// headroom.
#[utoipa::path(get, path = "/v1/projects/{p}/users/{u}/usage", tag = "usage",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), ("u" = UserIdSchema, Path, description = "User id"), UsageQuery),
    responses(
        (status = 200, description = "The user's usage per resource", body = UsageResponse),
        (status = 400, description = "invalid-request (bad id, bad time)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "not-caught-up (min_position past the log's head), projections-unavailable, store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_user_usage(
    State(state): State<AppState>,
    UserPath(project, user): UserPath,
    ApiQuery(query): ApiQuery<UsageQuery>,
) -> Result<Json<UsageResponse>, ApiError> {
    let at = query.at()?;
    if let Some(position) = query.min_position {
        refuse_past_head(&state, position).await?;
    }
    let mut response: UsageResponse = match at {
        Some(at) => {
            let projections = running(&state)?;
            projections.user_usage_at(&project, &user, at).await?.into()
        }
        None => now(
            project.to_string(),
            state.ledger.user_usage(&project, &user).await?,
        ),
    };
    response.user = Some(user.to_string());
    Ok(Json(response))
}

fn now(project: String, usage: UserUsage) -> UsageResponse {
    let resources = usage
        .resources
        .into_iter()
        .map(|(resource, (limit, usage))| {
            let body = ResourceUsageBody {
                limit: limit.value(),
                in_use: usage.in_use,
                reserved: usage.reserved,
                headroom: ResourceStanding::of(limit, &usage).headroom(),
            };
            (resource.to_string(), body)
        })
        .collect();
    UsageResponse {
        project,
        user: None,
        subtree: None,
        children: None,
        resources,
        position: usage.position,
    }
}
