//! `/compute/v2.1/os-quota-sets/{p}`: a project's quota set (its effective limits), its detail
//! (limits with in_use and reserved, from the usage view), the defaults, an update (rule 6:
//! below usage without `force` is a 400, as in Nova) and a delete (back to the defaults). With
//! `?user_id=`, each is about the user: its limits, its usage (from the ledger's state, as
//! `/v1/projects/{p}/users/{u}/usage`), its overrides set or removed.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{defaults_object, parse_bool, parse_limits, project_object, UserQuery};
use crate::error::ApiError;
use crate::extract::{ApiQuery, JsonBody, ProjectPath, RequestContext};
use crate::routes::usage::running;
use crate::server::AppState;

/// `PUT`'s body: `{"quota_set": {resource: limit, …, "force": bool}}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaSetUpdate {
    pub quota_set: Map<String, Value>,
}

/// `GET /os-quota-sets/{p}`: `{"quota_set": {"id": p, resource: limit, …}}`.
pub async fn show(
    State(state): State<AppState>,
    ProjectPath(project): ProjectPath,
    ApiQuery(query): ApiQuery<UserQuery>,
) -> Result<Json<Value>, ApiError> {
    state.ledger.refresh_defaults().await?;
    let view = match query.user()? {
        None => state.ledger.limits(&project).await?,
        Some(user) => state.ledger.user_limits(&project, &user).await?,
    };
    let mut set = project_object(&view);
    set.insert("id".into(), json!(project.as_str()));
    Ok(Json(json!({ "quota_set": set })))
}

/// `GET /os-quota-sets/{p}/detail`: each resource's `in_use`, `limit` and `reserved`.
pub async fn detail(
    State(state): State<AppState>,
    ProjectPath(project): ProjectPath,
    ApiQuery(query): ApiQuery<UserQuery>,
) -> Result<Json<Value>, ApiError> {
    let numbers = |limit: i64, in_use: i64, reserved: i64| json!({"in_use": in_use, "limit": limit, "reserved": reserved});
    let mut set: Map<String, Value> = match query.user()? {
        Some(user) => {
            let usage = state.ledger.user_usage(&project, &user).await?;
            usage
                .resources
                .into_iter()
                .map(|(r, (limit, u))| {
                    (r.to_string(), numbers(limit.value(), u.in_use, u.reserved))
                })
                .collect()
        }
        None => {
            let projections = running(&state)?;
            crate::routes::usage::catch_up(&state, projections, None).await?;
            let report = projections
                .usage(&project, state.ledger.clock().now())
                .await?;
            report
                .resources
                .into_iter()
                .map(|(r, u)| {
                    (
                        r.to_string(),
                        numbers(u.limit.value(), u.in_use, u.reserved),
                    )
                })
                .collect()
        }
    };
    set.insert("id".into(), json!(project.as_str()));
    Ok(Json(json!({ "quota_set": set })))
}

/// `GET /os-quota-sets/{p}/defaults`: the default limits.
pub async fn defaults(
    State(state): State<AppState>,
    ProjectPath(project): ProjectPath,
) -> Result<Json<Value>, ApiError> {
    let defaults = state.ledger.refresh_defaults().await?;
    let mut set = defaults_object(&defaults);
    set.insert("id".into(), json!(project.as_str()));
    Ok(Json(json!({ "quota_set": set })))
}

/// `PUT /os-quota-sets/{p}`: sets some limits; answers the project's quota set without `id`
/// (as Nova does).
pub async fn update(
    State(state): State<AppState>,
    ctx: RequestContext,
    ProjectPath(project): ProjectPath,
    ApiQuery(query): ApiQuery<UserQuery>,
    JsonBody(body): JsonBody<QuotaSetUpdate>,
) -> Result<Json<Value>, ApiError> {
    let user = query.user()?;
    let mut values = body.quota_set;
    let force = match values.remove("force") {
        Some(value) => parse_bool("force", &value)?,
        None => false,
    };
    let limits = parse_limits(values)?;
    let meta = ctx.metadata(None, None);
    state.ledger.refresh_defaults().await?;
    let (result, decision) = match user {
        None => (
            state
                .ledger
                .set_limits(&project, limits, force, &meta)
                .await,
            "set_limits",
        ),
        Some(user) => (
            (state.ledger)
                .set_user_limits(&project, user, limits, force, &meta)
                .await,
            "set_user_limits",
        ),
    };
    let result = result.map_err(ApiError::from);
    crate::routes::count_decision(decision, &result);
    let view = result.map_err(below_usage_is_a_bad_request)?;
    let set = project_object(&view);
    Ok(Json(json!({ "quota_set": set })))
}

/// Nova answers a limit below usage without `force` with a 400, in its own words.
fn below_usage_is_a_bad_request(error: ApiError) -> ApiError {
    match error {
        ApiError::LimitBelowUsage(below) => {
            let reasons: Vec<String> = below
                .iter()
                .map(|(resource, s)| {
                    format!(
                        "Quota limit {} for {resource} must be greater than or equal to already \
                         used and reserved {}.",
                        s.limit.value(),
                        s.in_use.saturating_add(s.reserved)
                    )
                })
                .collect();
            ApiError::InvalidRequest(reasons.join(" "))
        }
        other => other,
    }
}

/// `DELETE /os-quota-sets/{p}`: the project's own limits removed; 202 with no body.
pub async fn delete(
    State(state): State<AppState>,
    ctx: RequestContext,
    ProjectPath(project): ProjectPath,
    ApiQuery(query): ApiQuery<UserQuery>,
) -> Result<Response, ApiError> {
    let meta = ctx.metadata(None, None);
    let (result, decision) = match query.user()? {
        None => (
            state.ledger.reset_limits(&project, &meta).await,
            "reset_limits",
        ),
        Some(user) => (
            state.ledger.reset_user_limits(&project, user, &meta).await,
            "reset_user_limits",
        ),
    };
    let result = result.map_err(ApiError::from);
    crate::routes::count_decision(decision, &result);
    result?;
    Ok(StatusCode::ACCEPTED.into_response())
}
