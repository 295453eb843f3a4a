//! `GET /v1/projects/{p}/reservations`: a project's reservations, filtered by status, user and
//! age, in the order they were made, a page at a time. Operators use it to find orphaned holds
//! (`?status=held&older_than=…`).

use axum::extract::State;
use axum::Json;
use domain::ProjectId;
use projections::{ListedReservation, ReservationPage, ReservationQuery, StatusFilter};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::reservations::ReservationResponse;
use super::rfc3339;
use super::usage::{catch_up, running};
use crate::error::{truncate, ApiError};
use crate::extract::{page_size, parse_time, parse_user, ApiQuery, ProjectPath};
use crate::openapi::schemas::{
    PositionSchema, ProjectIdSchema, ReservationCursorSchema, ReservationPageSizeSchema,
    ReservationStatusSchema, TimestampSchema, UserIdSchema,
};
use crate::problem::ProblemDocument;
use crate::server::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReservationListParams {
    /// Only reservations with this status: `held`, `committed` or `released`.
    #[param(value_type = Option<ReservationStatusSchema>)]
    pub status: Option<String>,
    /// Only reservations made for this user.
    #[param(value_type = Option<UserIdSchema>)]
    pub user: Option<String>,
    /// RFC 3339: only reservations made before this time.
    #[param(value_type = Option<TimestampSchema>)]
    pub older_than: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(value_type = Option<ReservationPageSizeSchema>)]
    pub limit: Option<u64>,
    /// The `next` of the previous page.
    #[param(value_type = Option<ReservationCursorSchema>)]
    pub cursor: Option<String>,
    /// Wait (up to 5 s) until the views reflect this global position.
    #[param(value_type = Option<PositionSchema>)]
    pub min_position: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReservationListResponse {
    /// In the order they were made.
    pub reservations: Vec<ReservationResponse>,
    /// Cursor of the next page; null when the list is complete. A filtered page may hold
    /// fewer reservations than asked for, even none, and still have a `next`: each page looks
    /// at no more than 10,000 reservations.
    pub next: Option<String>,
}

fn status_filter(raw: &str) -> Result<StatusFilter, ApiError> {
    match raw {
        "held" => Ok(StatusFilter::Held),
        "committed" => Ok(StatusFilter::Committed),
        "released" => Ok(StatusFilter::Released),
        _ => Err(ApiError::InvalidRequest(format!(
            "status={:?} is not a status; known are held, committed, released",
            truncate(raw)
        ))),
    }
}

fn reservation_query(params: ReservationListParams) -> Result<ReservationQuery, ApiError> {
    let limit = page_size(params.limit, projections::MAX_RESERVATION_PAGE)?;
    Ok(ReservationQuery {
        status: params.status.as_deref().map(status_filter).transpose()?,
        user: params.user.as_deref().map(parse_user).transpose()?,
        older_than: params
            .older_than
            .as_deref()
            .map(|t| parse_time("older_than", t))
            .transpose()?,
        limit,
        cursor: params.cursor,
    })
}

fn listed(project: &ProjectId, reservation: ListedReservation) -> ReservationResponse {
    ReservationResponse {
        reservation_id: reservation.reservation_id.0,
        project: project.to_string(),
        deltas: reservation
            .deltas
            .iter()
            .map(|(r, d)| (r.to_string(), d))
            .collect(),
        count: reservation.count,
        user: reservation.user.map(|u| u.to_string()),
        status: reservation.status.as_str().to_owned(),
        expires_at: rfc3339(reservation.expires_at),
        created_at: rfc3339(reservation.created_at),
        reason: match reservation.status {
            domain::ReservationStatus::Released(reason) => Some(reason.as_str().to_owned()),
            _ => None,
        },
        position: reservation.position,
    }
}

/// A project's reservations, oldest first, from the views; find orphaned holds with
/// `?status=held&older_than=…`.
#[utoipa::path(get, path = "/v1/projects/{p}/reservations", tag = "reservations",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), ReservationListParams),
    responses(
        (status = 200, description = "One page of reservations, in the order they were made", body = ReservationListResponse),
        (status = 400, description = "invalid-request (bad id, status, user, time, limit or cursor)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "not-caught-up (with `min_position` and `position`), projections-unavailable, store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn list_reservations(
    State(state): State<AppState>,
    ProjectPath(project): ProjectPath,
    ApiQuery(params): ApiQuery<ReservationListParams>,
) -> Result<Json<ReservationListResponse>, ApiError> {
    let min_position = params.min_position;
    let query = reservation_query(params)?;
    let projections = running(&state)?;
    catch_up(&state, projections, min_position).await?;
    let ReservationPage { reservations, next } = projections.reservations(&project, &query).await?;
    Ok(Json(ReservationListResponse {
        reservations: reservations
            .into_iter()
            .map(|r| listed(&project, r))
            .collect(),
        next,
    }))
}
