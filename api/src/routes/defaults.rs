//! `GET|PUT /v1/defaults`: the default limits, which also define which resources exist.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use domain::{Actor, ClientRequestId, Defaults, Limits};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::extract::{JsonBody, RequestContext};
use crate::openapi::schemas::{ClientTextSchema, LimitsSchema};
use crate::problem::ProblemDocument;
use crate::server::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DefaultsRequest {
    /// Limits to merge into the defaults: `{resource: limit}`, -1 unlimited; 1 to 64 resources.
    #[schema(value_type = LimitsSchema, example = json!({"instances": 10, "cores": 20}))]
    pub limits: Limits,
    /// Who made the change, for the audit (defaults to the token's role).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub actor: Option<Actor>,
    /// The client's request id, for the audit (defaults to the HTTP x-request-id).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub request_id: Option<ClientRequestId>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DefaultsResponse {
    /// Every default limit.
    pub limits: BTreeMap<String, i64>,
}

impl From<&Defaults> for DefaultsResponse {
    fn from(defaults: &Defaults) -> Self {
        DefaultsResponse {
            limits: defaults
                .limits
                .iter()
                .map(|(r, l)| (r.to_string(), l.value()))
                .collect(),
        }
    }
}

/// Set default limits (merged: resources not named keep theirs). A resource exists once it has
/// a default.
#[utoipa::path(put, path = "/v1/defaults", tag = "limits",
    request_body = DefaultsRequest,
    responses(
        (status = 200, description = "All default limits", body = DefaultsResponse),
        (status = 400, description = "invalid-request", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden (admin only)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, contention, shutting-down: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn put_defaults(
    State(state): State<AppState>,
    ctx: RequestContext,
    JsonBody(body): JsonBody<DefaultsRequest>,
) -> Result<Json<DefaultsResponse>, ApiError> {
    let meta = ctx.metadata(body.actor, body.request_id);
    let result = state
        .ledger
        .set_defaults(&body.limits, &meta)
        .await
        .map_err(ApiError::from);
    super::count_decision("set_defaults", &result);
    Ok(Json(DefaultsResponse::from(result?.as_ref())))
}

/// The default limits.
#[utoipa::path(get, path = "/v1/defaults", tag = "limits",
    responses(
        (status = 200, description = "All default limits", body = DefaultsResponse),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_defaults(
    State(state): State<AppState>,
) -> Result<Json<DefaultsResponse>, ApiError> {
    // Another node may have changed them: read the stream's tail first.
    let defaults = state.ledger.refresh_defaults().await?;
    Ok(Json(DefaultsResponse::from(defaults.as_ref())))
}
