//! `/compute/v2.1/os-quota-class-sets/default`: Nova's default quota class is the ledger's
//! default limits. Only the `default` class exists (as in Nova, where no other is used).

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{defaults_object, parse_limits};
use crate::error::ApiError;
use crate::extract::{JsonBody, NamePath, RequestContext};
use crate::server::AppState;

/// `PUT`'s body: `{"quota_class_set": {resource: limit, …}}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaClassUpdate {
    pub quota_class_set: Map<String, Value>,
}

fn default_class(name: &str) -> Result<(), ApiError> {
    if name == "default" {
        Ok(())
    } else {
        Err(ApiError::NotFound(format!(
            "no quota class {:?}: only \"default\" exists",
            crate::error::truncate(name)
        )))
    }
}

/// `GET /os-quota-class-sets/default`: `{"quota_class_set": {"id": "default", resource: n}}`.
pub async fn show(
    State(state): State<AppState>,
    NamePath(name): NamePath,
) -> Result<Json<Value>, ApiError> {
    default_class(&name)?;
    let defaults = state.ledger.refresh_defaults().await?;
    let mut set = defaults_object(&defaults);
    set.insert("id".into(), json!("default"));
    Ok(Json(json!({ "quota_class_set": set })))
}

/// `PUT /os-quota-class-sets/default`: merges into the defaults; answers them without `id`.
pub async fn update(
    State(state): State<AppState>,
    ctx: RequestContext,
    NamePath(name): NamePath,
    JsonBody(body): JsonBody<QuotaClassUpdate>,
) -> Result<Json<Value>, ApiError> {
    default_class(&name)?;
    let limits = parse_limits(body.quota_class_set)?;
    let meta = ctx.metadata(None, None);
    let result = state
        .ledger
        .set_defaults(&limits, &meta)
        .await
        .map_err(ApiError::from);
    crate::routes::count_decision("set_defaults", &result);
    let defaults = result?;
    let set = defaults_object(&defaults);
    Ok(Json(json!({ "quota_class_set": set })))
}
