//! `POST /v1/projects/{p}/usage/corrections`: an operator sets a project's (or a user's) in_use
//! to the real count measured elsewhere, with a reason (SPEC rule 10; Nova's
//! `quota_usage_refresh`). A user's correction moves the project's in_use by as much.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use domain::{Actor, ClientRequestId, Reason, ResourceName, UserId};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::extract::{JsonBody, ProjectPath, RequestContext};
use crate::openapi::schemas::{
    ClientTextSchema, CountsSchema, PositionSchema, ProjectIdSchema, ResourceNameSchema,
    UserIdSchema,
};
use crate::problem::ProblemDocument;
use crate::server::AppState;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CorrectionRequest {
    /// `{resource: in_use}`: the real count of each resource named, 0 or more.
    #[schema(value_type = CountsSchema, example = json!({"instances": 3}))]
    pub in_use: BTreeMap<ResourceName, i64>,
    /// Why, for the audit (required): 1 to 256 characters, no control characters.
    #[schema(value_type = ClientTextSchema)]
    pub reason: Reason,
    /// Correct this user's in_use (and the project's by as much) instead of the project's.
    #[schema(value_type = Option<UserIdSchema>)]
    pub user: Option<UserId>,
    /// Who did it, for the audit (defaults to the token's role).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub actor: Option<Actor>,
    /// The client's request id, for the audit (defaults to the HTTP x-request-id).
    #[schema(value_type = Option<ClientTextSchema>)]
    pub request_id: Option<ClientRequestId>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CorrectionBody {
    #[schema(value_type = ResourceNameSchema)]
    pub resource: String,
    pub before: i64,
    pub after: i64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CorrectionResponse {
    /// One per resource whose in_use changed; a resource already at its count is left out.
    pub corrections: Vec<CorrectionBody>,
    /// A global position the views reflect the correction at (pass it as `min_position`).
    #[schema(value_type = PositionSchema)]
    pub position: u64,
}

/// Set a project's in_use to the real counts, recording one `UsageCorrected` per resource that
/// changes (admin).
#[utoipa::path(post, path = "/v1/projects/{p}/usage/corrections", tag = "usage",
    params(("p" = ProjectIdSchema, Path, description = "Project id")),
    request_body = CorrectionRequest,
    responses(
        (status = 200, description = "The corrections recorded (none if every count was already right)", body = CorrectionResponse),
        (status = 400, description = "invalid-request (a negative count, no reason), unknown-resource", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "store-unavailable, contention, shutting-down: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn correct_usage(
    State(state): State<AppState>,
    ctx: RequestContext,
    ProjectPath(project): ProjectPath,
    JsonBody(body): JsonBody<CorrectionRequest>,
) -> Result<Json<CorrectionResponse>, ApiError> {
    let meta = ctx.metadata(body.actor, body.request_id);
    let (corrections, position) = state
        .ledger
        .correct_usage(&project, body.user, body.in_use, body.reason, &meta)
        .await?;
    Ok(Json(CorrectionResponse {
        corrections: corrections
            .into_iter()
            .map(|c| CorrectionBody {
                resource: c.resource.to_string(),
                before: c.before,
                after: c.after,
            })
            .collect(),
        position,
    }))
}
