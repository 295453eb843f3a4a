//! `/v1/projects/{p}/reservations`: reserve (or its dry run), read, commit and release.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use domain::{
    Actor, ClientRequestId, CountRange, Deltas, InvalidInput, ReservationId, ReservationStatus,
    UserId, DEFAULT_EXPIRES_IN_S, MAX_EXPIRES_IN_S, MIN_EXPIRES_IN_S,
};
use ledger::{DryRun, ReservationView};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::rfc3339;
use crate::error::ApiError;
use crate::extract::{
    ApiQuery, JsonBody, OptionalJsonBody, ProjectPath, RequestContext, ReservationPath,
};
use crate::openapi::schemas::{
    ClientTextSchema, DeltasSchema, PositionSchema, ProjectIdSchema, ReleaseReasonSchema,
    ReservationStatusSchema, ResourceNameSchema, TimestampSchema, UserIdSchema,
};
use crate::problem::ProblemDocument;
use crate::problem::ProblemUsage;
use crate::server::AppState;
use crate::standing::Standing;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReserveRequest {
    /// `{resource: amount}`, 1 to 64 resources; negative amounts shrink usage at commit.
    #[schema(value_type = DeltasSchema, example = json!({"instances": 1, "cores": 2, "ram": 4096}))]
    pub deltas: Deltas,
    /// Seconds until an uncommitted hold expires: 1 to 2592000, default 86400.
    #[schema(minimum = 1, maximum = 2592000, default = 86400)]
    pub expires_in: Option<i64>,
    /// A client-chosen id makes the reserve idempotent.
    pub reservation_id: Option<Uuid>,
    /// Who asked, for the audit (defaults to the token's role).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub actor: Option<Actor>,
    /// The client's request id, for the audit (defaults to the HTTP x-request-id).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub request_id: Option<ClientRequestId>,
    /// A counted reserve (Nova's min_count/max_count): `deltas` are per unit, and the largest
    /// count in `min..=max` that fits every limit is granted.
    pub count: Option<CountBody>,
    /// The user inside the project the reserve is for: the user's own limits cap it too.
    #[schema(value_type = Option<UserIdSchema>)]
    pub user: Option<UserId>,
}

/// `count` of a counted reserve: 1 <= min <= max <= 10000.
#[derive(Debug, Clone, Copy, ToSchema)]
pub struct CountBody {
    #[schema(minimum = 1, maximum = 10000)]
    pub min: u32,
    #[schema(minimum = 1, maximum = 10000)]
    pub max: u32,
}

impl<'de> Deserialize<'de> for CountBody {
    /// Only from an object: serde would also read a struct from an array (`[1, 2]`), and a
    /// JSON body's objects must be objects (SPEC: input rules).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            min: u32,
            max: u32,
        }
        let object = serde_json::Map::deserialize(d)?;
        let Fields { min, max } = Fields::deserialize(serde_json::Value::Object(object))
            .map_err(serde::de::Error::custom)?;
        Ok(CountBody { min, max })
    }
}

impl CountBody {
    fn range(self) -> Result<CountRange, ApiError> {
        CountRange::new(self.min, self.max).map_err(|e| ApiError::InvalidRequest(e.to_string()))
    }
}

/// The query of a reserve.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReserveParams {
    /// `true`: answer what the reserve would get now (200 with a [`DryRunResponse`]), holding
    /// and recording nothing, not even a denial.
    pub dry_run: Option<bool>,
}

/// What a reserve would be answered now (`?dry_run=true`).
#[derive(Debug, Serialize, ToSchema)]
pub struct DryRunResponse {
    /// Whether the reserve would be granted.
    pub granted: bool,
    /// The resources that would be over their limits, sorted; empty when granted.
    #[schema(value_type = Vec<ResourceNameSchema>)]
    pub overs: Vec<String>,
    /// The limits, usage and headroom of the request's resources, as it would be judged.
    #[serde(flatten)]
    pub standing: Standing,
    /// A counted reserve that would be granted: the count it would get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub count: Option<u32>,
    /// A counted reserve that would be denied: the largest count that would fit (0 if none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub max_count: Option<u32>,
    /// A reserve for a user: the resources that would be over the user's own limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<ResourceNameSchema>>, nullable = false)]
    pub user_overs: Option<Vec<String>>,
    /// A reserve for a user: the user's limits (its own, else the project's), usage and
    /// headroom.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub user_limits: Option<BTreeMap<String, i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub user_usage: Option<BTreeMap<String, ProblemUsage>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub user_headroom: Option<BTreeMap<String, i64>>,
    /// A reserve that would be denied over an ancestor's limit (SPEC rule 11): those ancestors,
    /// with the resources over, sorted (`{ancestor: [resources]}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<BTreeMap<String, Vec<ResourceNameSchema>>>, nullable = false)]
    pub ancestor_overs: Option<BTreeMap<String, Vec<String>>>,
}

impl From<DryRun> for DryRunResponse {
    fn from(judged: DryRun) -> Self {
        let user = judged.user.as_ref().map(|u| {
            let overs: Vec<String> = u.overs.iter().map(ToString::to_string).collect();
            (overs, Standing::of(&u.standing))
        });
        let ancestor_overs = (!judged.granted && !judged.ancestor_overs.is_empty()).then(|| {
            judged
                .ancestor_overs
                .iter()
                .map(|(a, overs)| {
                    (
                        a.to_string(),
                        overs.iter().map(ToString::to_string).collect(),
                    )
                })
                .collect()
        });
        DryRunResponse {
            ancestor_overs,
            granted: judged.granted,
            overs: judged.overs.iter().map(ToString::to_string).collect(),
            standing: Standing::of(&judged.standing),
            count: judged.count,
            max_count: judged.max_count,
            user_overs: user.as_ref().map(|u| u.0.clone()),
            user_limits: user.as_ref().map(|u| u.1.limits.clone()),
            user_usage: user.as_ref().map(|u| u.1.usage.clone()),
            user_headroom: user.map(|u| u.1.headroom),
        }
    }
}

/// Optional body of commit and release.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TransitionRequest {
    /// Who did it, for the audit (defaults to the token's role).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub actor: Option<Actor>,
    /// The client's request id, for the audit (defaults to the HTTP x-request-id).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub request_id: Option<ClientRequestId>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ReservationResponse {
    pub reservation_id: Uuid,
    #[schema(value_type = ProjectIdSchema)]
    pub project: String,
    /// For a counted reserve, the unit's deltas times `count`.
    pub deltas: BTreeMap<String, i64>,
    /// A counted reserve: the count granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, minimum = 1, maximum = 10000)]
    pub count: Option<u32>,
    /// The user inside the project the reservation is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<UserIdSchema>, nullable = false)]
    pub user: Option<String>,
    /// `held`, `committed` or `released`.
    #[schema(value_type = ReservationStatusSchema, example = "held")]
    pub status: String,
    /// RFC 3339 UTC.
    #[schema(value_type = TimestampSchema)]
    pub expires_at: String,
    #[schema(value_type = TimestampSchema)]
    pub created_at: String,
    /// For released reservations: `rolled_back`, `expired` or `freed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ReleaseReasonSchema>, nullable = false)]
    pub reason: Option<String>,
    /// Global position of the event that gave the reservation this status.
    #[schema(value_type = PositionSchema)]
    pub position: u64,
}

impl From<ReservationView> for ReservationResponse {
    fn from(view: ReservationView) -> Self {
        ReservationResponse {
            reservation_id: view.reservation_id.0,
            project: view.project.to_string(),
            deltas: view
                .deltas
                .iter()
                .map(|(r, d)| (r.to_string(), d))
                .collect(),
            count: view.count.map(|c| c.granted),
            user: view.user.map(|u| u.to_string()),
            status: view.status.as_str().to_owned(),
            expires_at: rfc3339(view.expires_at),
            created_at: rfc3339(view.created_at),
            reason: match view.status {
                ReservationStatus::Released(reason) => Some(reason.as_str().to_owned()),
                _ => None,
            },
            position: view.position,
        }
    }
}

fn expires_in_seconds(requested: Option<i64>) -> Result<u32, ApiError> {
    let seconds = requested.unwrap_or(i64::from(DEFAULT_EXPIRES_IN_S));
    u32::try_from(seconds)
        .ok()
        .filter(|s| (MIN_EXPIRES_IN_S..=MAX_EXPIRES_IN_S).contains(s))
        .ok_or_else(|| ApiError::InvalidRequest(InvalidInput::ExpiresIn(seconds).to_string()))
}

/// Reserve deltas for a project, all or nothing; with `?dry_run=true`, only say what a reserve
/// would get now.
#[utoipa::path(post, path = "/v1/projects/{p}/reservations", tag = "reservations",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), ReserveParams),
    request_body = ReserveRequest,
    responses(
        (status = 201, description = "Granted: the held reservation (or the original, for a repeated reservation_id)", body = ReservationResponse),
        (status = 200, description = "A dry run: what a reserve would get now; nothing is held or recorded", body = DryRunResponse),
        (status = 400, description = "invalid-request, unknown-resource", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "over-quota (with `overs`, `limits`, `usage`, `headroom`; `max_count` for a counted reserve; `user_overs`, `user_limits`, `user_usage`, `user_headroom` when over a user's own limits; `ancestor_overs` when over an ancestor's), forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "usage-underflow, idempotency-mismatch", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 413, description = "payload-too-large", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, contention, shutting-down: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn reserve(
    State(state): State<AppState>,
    ctx: RequestContext,
    ProjectPath(project): ProjectPath,
    ApiQuery(params): ApiQuery<ReserveParams>,
    JsonBody(body): JsonBody<ReserveRequest>,
) -> Result<Response, ApiError> {
    let expires_in = expires_in_seconds(body.expires_in)?;
    let request = ledger::ReserveRequest {
        reservation_id: body.reservation_id.map(ReservationId),
        deltas: body.deltas,
        count: body.count.map(CountBody::range).transpose()?,
        user: body.user,
        expires_in_s: expires_in,
    };
    if params.dry_run == Some(true) {
        let judged = state.ledger.dry_run_reserve(&project, request).await?;
        return Ok(Json(DryRunResponse::from(judged)).into_response());
    }
    let meta = ctx.metadata(body.actor, body.request_id);
    let result = state
        .ledger
        .reserve_with(&project, request, &meta)
        .await
        .map_err(ApiError::from);
    super::count_decision("reserve", &result);
    let reservation: ReservationResponse = result?.into();
    Ok((StatusCode::CREATED, Json(reservation)).into_response())
}

/// A reservation as it durably stands.
#[utoipa::path(get, path = "/v1/projects/{p}/reservations/{id}", tag = "reservations",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), ("id" = Uuid, Path, description = "Reservation id")),
    responses(
        (status = 200, description = "The reservation", body = ReservationResponse),
        (status = 400, description = "invalid-request (bad id)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 404, description = "not-found", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_reservation(
    State(state): State<AppState>,
    ReservationPath(project, id): ReservationPath,
) -> Result<Json<ReservationResponse>, ApiError> {
    Ok(Json(state.ledger.reservation(&project, id).await?.into()))
}

/// Commit a held reservation: its deltas move into in_use. Idempotent.
#[utoipa::path(post, path = "/v1/projects/{p}/reservations/{id}/commit", tag = "reservations",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), ("id" = Uuid, Path, description = "Reservation id")),
    request_body(content = Option<TransitionRequest>, description = "Optional: actor and request id for the audit"),
    responses(
        (status = 200, description = "The committed reservation", body = ReservationResponse),
        (status = 400, description = "invalid-request", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 404, description = "not-found", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "reservation-expired, reservation-released, usage-underflow", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, contention, shutting-down: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn commit(
    State(state): State<AppState>,
    ctx: RequestContext,
    ReservationPath(project, id): ReservationPath,
    OptionalJsonBody(body): OptionalJsonBody<TransitionRequest>,
) -> Result<Json<ReservationResponse>, ApiError> {
    let meta = ctx.metadata(body.actor, body.request_id);
    let result = state
        .ledger
        .commit(&project, id, &meta)
        .await
        .map_err(ApiError::from);
    super::count_decision("commit", &result);
    Ok(Json(result?.into()))
}

/// Release a reservation: a held one is rolled back, a committed one frees its usage (a
/// committed reduction gives its usage back, within the limit). Idempotent.
#[utoipa::path(post, path = "/v1/projects/{p}/reservations/{id}/release", tag = "reservations",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), ("id" = Uuid, Path, description = "Reservation id")),
    request_body(content = Option<TransitionRequest>, description = "Optional: actor and request id for the audit"),
    responses(
        (status = 200, description = "The released reservation", body = ReservationResponse),
        (status = 400, description = "invalid-request", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden; over-quota (freeing a committed reduction would give back usage beyond the limit)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 404, description = "not-found", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 409, description = "usage-underflow (freeing would take in_use below zero)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, contention, shutting-down: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn release(
    State(state): State<AppState>,
    ctx: RequestContext,
    ReservationPath(project, id): ReservationPath,
    OptionalJsonBody(body): OptionalJsonBody<TransitionRequest>,
) -> Result<Json<ReservationResponse>, ApiError> {
    let meta = ctx.metadata(body.actor, body.request_id);
    let result = state
        .ledger
        .release(&project, id, &meta)
        .await
        .map_err(ApiError::from);
    super::count_decision("release", &result);
    Ok(Json(result?.into()))
}
