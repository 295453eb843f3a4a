//! `/v1/admin/projections`: the views' progress, and rebuilds without downtime.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use projections::PROJECTION_NAMES;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::usage::running;
use crate::error::{truncate, ApiError};
use crate::extract::NamePath;
use crate::openapi::schemas::{ProjectionNameSchema, RebuildStatusSchema};
use crate::problem::ProblemDocument;
use crate::server::AppState;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProjectionStatusBody {
    #[schema(value_type = ProjectionNameSchema, example = "usage")]
    pub name: String,
    /// The last global position the view applied.
    pub position: u64,
    /// The store's last position.
    pub head: u64,
    /// `head - position`.
    pub lag: u64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct RebuildAccepted {
    #[schema(value_type = ProjectionNameSchema)]
    pub name: String,
    /// Always `rebuilding`: the view is rebuilt beside the live one, then swapped in.
    #[schema(value_type = RebuildStatusSchema)]
    pub status: String,
}

/// Progress of every view.
#[utoipa::path(get, path = "/v1/admin/projections", tag = "admin",
    responses(
        (status = 200, description = "One entry per view", body = Vec<ProjectionStatusBody>),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden (admin only)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "projections-unavailable, store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn list_projections(
    State(state): State<AppState>,
) -> Result<Json<Vec<ProjectionStatusBody>>, ApiError> {
    let status = running(&state)?.status().await?;
    Ok(Json(
        status
            .into_iter()
            .map(|s| ProjectionStatusBody {
                name: s.name,
                position: s.position,
                head: s.head,
                lag: s.lag,
            })
            .collect(),
    ))
}

/// Start rebuilding a view from the events, beside the live one; answers at once.
#[utoipa::path(post, path = "/v1/admin/projections/{name}/rebuild", tag = "admin",
    params(("name" = ProjectionNameSchema, Path, description = "`usage` or `audit`")),
    responses(
        (status = 202, description = "Rebuild started", body = RebuildAccepted),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden (admin only)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 404, description = "not-found (no such view)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "projections-unavailable", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn rebuild_projection(
    State(state): State<AppState>,
    NamePath(name): NamePath,
) -> Result<(StatusCode, Json<RebuildAccepted>), ApiError> {
    if !PROJECTION_NAMES.contains(&name.as_str()) {
        return Err(ApiError::NotFound(format!(
            "no projection named {:?}; known are {}",
            truncate(&name),
            PROJECTION_NAMES.join(", ")
        )));
    }
    running(&state)?.request_rebuild(&name).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(RebuildAccepted {
            name,
            status: "rebuilding".into(),
        }),
    ))
}
