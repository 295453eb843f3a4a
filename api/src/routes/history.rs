//! `GET /v1/projects/{p}/usage/history`: one resource's in_use, reserved and limit over time,
//! from the audit view (see `projections::History`): a point per change, or per `step`, at most
//! 1,000, each equal to `usage?at=` at its instant.

use axum::extract::State;
use axum::Json;
use domain::ResourceName;
use projections::{HistoryQuery, MAX_HISTORY_POINTS};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::rfc3339;
use super::usage::{catch_up, running};
use crate::error::{truncate, ApiError};
use crate::extract::{parse_time, ApiQuery, ProjectPath};
use crate::openapi::schemas::{
    HistoryStepSchema, PositionSchema, ProjectIdSchema, ResourceNameSchema, TimestampSchema,
};
use crate::problem::ProblemDocument;
use crate::server::AppState;

/// The widest `step`: ten years of seconds.
pub const MAX_STEP_SECONDS: u64 = 315_360_000;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct HistoryParams {
    /// The resource to chart (required).
    #[param(value_type = ResourceNameSchema)]
    pub resource: Option<String>,
    /// RFC 3339: the first point's time (default: the project's first event).
    #[param(value_type = Option<TimestampSchema>)]
    pub since: Option<String>,
    /// RFC 3339: the last point's time (default: now).
    #[param(value_type = Option<TimestampSchema>)]
    pub until: Option<String>,
    /// Seconds between points: a point at `since`, every `step` after it and at `until`
    /// (at most 1,000 points). Without it, a point at every change, or, when the changes are
    /// more than fit, every step that fits.
    #[param(value_type = Option<HistoryStepSchema>)]
    pub step: Option<u64>,
    /// Wait (up to 5 s) until the views reflect this global position.
    #[param(value_type = Option<PositionSchema>)]
    pub min_position: Option<u64>,
}

/// The resource at one instant.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistoryPointBody {
    /// RFC 3339 UTC.
    #[schema(value_type = TimestampSchema)]
    pub at: String,
    pub in_use: i64,
    pub reserved: i64,
    /// The effective limit then, -1 for unlimited.
    pub limit: i64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct HistoryResponse {
    #[schema(value_type = ProjectIdSchema)]
    pub project: String,
    #[schema(value_type = ResourceNameSchema)]
    pub resource: String,
    /// In time order, 1 to 1,000; the last is the state at `until`.
    pub points: Vec<HistoryPointBody>,
    /// The global position the points reflect.
    #[schema(value_type = PositionSchema)]
    pub position: u64,
}

fn query_of(params: &HistoryParams, now: domain::Timestamp) -> Result<HistoryQuery, ApiError> {
    let raw = params.resource.as_deref().ok_or_else(|| {
        ApiError::InvalidRequest("resource is required: the resource to chart".into())
    })?;
    let resource = ResourceName::parse(raw).map_err(|_| {
        ApiError::InvalidRequest(format!(
            "resource={:?} must be 1 to {} characters of A-Z a-z 0-9 . _ : -",
            truncate(raw),
            ResourceName::MAX_LEN
        ))
    })?;
    let since = params
        .since
        .as_deref()
        .map(|raw| parse_time("since", raw))
        .transpose()?;
    let until = match params.until.as_deref() {
        Some(raw) => parse_time("until", raw)?,
        None => now,
    };
    if since.is_some_and(|since| since > until) {
        return Err(ApiError::InvalidRequest(
            "since must not be after until".into(),
        ));
    }
    let step_ms = params
        .step
        .map(|step| {
            (1..=MAX_STEP_SECONDS)
                .contains(&step)
                .then(|| i64::try_from(step * 1000).unwrap_or(i64::MAX))
                .ok_or_else(|| {
                    ApiError::InvalidRequest(format!(
                        "step={step} must be 1 to {MAX_STEP_SECONDS} seconds"
                    ))
                })
        })
        .transpose()?;
    Ok(HistoryQuery {
        resource,
        since,
        until,
        step_ms,
    })
}

#[utoipa::path(get, path = "/v1/projects/{p}/usage/history", tag = "usage",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), HistoryParams),
    responses(
        (status = 200, description = "The resource's usage and limit over time", body = HistoryResponse),
        (status = 400, description = "invalid-request (no or bad resource, bad time, since after until, a step giving more than 1,000 points)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "not-caught-up (min_position not reached in 5 s), projections-unavailable, store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_history(
    State(state): State<AppState>,
    ProjectPath(project): ProjectPath,
    ApiQuery(params): ApiQuery<HistoryParams>,
) -> Result<Json<HistoryResponse>, ApiError> {
    let query = query_of(&params, state.ledger.clock().now())?;
    let projections = running(&state)?;
    catch_up(&state, projections, params.min_position).await?;
    let history = projections.history(&project, &query).await?;
    debug_assert!((1..=MAX_HISTORY_POINTS).contains(&history.points.len()));
    Ok(Json(HistoryResponse {
        project: history.project.to_string(),
        resource: history.resource.to_string(),
        points: history
            .points
            .into_iter()
            .map(|point| HistoryPointBody {
                at: rfc3339(point.at),
                in_use: point.in_use,
                reserved: point.reserved,
                limit: point.limit.value(),
            })
            .collect(),
        position: history.position,
    }))
}
