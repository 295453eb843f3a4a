//! `/healthz`, `/metrics`, `/openapi.json`, and the answers for unknown routes and methods.

use axum::extract::{OriginalUri, State};
use axum::http::{header, Method};
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{truncate, ApiError};
use crate::server::AppState;

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok` while the server is serving and its views follow the events; `degraded` while a
    /// view on this node cannot apply the next events (it keeps retrying; `views` says which
    /// and why). Decisions are taken either way, so the answer stays 200.
    pub status: String,
    /// `sqlite` or `postgres`.
    pub store: String,
    /// Whether the usage and audit views run on this node.
    pub projections: bool,
    /// The views that are degraded, with the reason; empty when there are none.
    pub views: Vec<DegradedView>,
}

/// A view that is not following the events, and why.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DegradedView {
    /// `usage` or `audit`.
    pub name: String,
    pub reason: String,
}

/// Liveness, and whether the views follow the events; needs no token.
#[utoipa::path(get, path = "/healthz", tag = "service",
    responses((status = 200, description = "Serving (`status` says whether degraded)", body = Health)))]
pub async fn healthz(State(state): State<AppState>) -> Json<Health> {
    let views: Vec<DegradedView> = state
        .projections
        .iter()
        .flat_map(|projections| projections.health())
        .filter_map(|view| {
            Some(DegradedView {
                reason: view.degraded?,
                name: view.name,
            })
        })
        .collect();
    Json(Health {
        status: if views.is_empty() { "ok" } else { "degraded" }.into(),
        store: state.ledger.store().backend().into(),
        projections: state.projections.is_some(),
        views,
    })
}

/// Prometheus text: requests by route and status, decisions by outcome, append batches,
/// conflicts, projection lag. Needs no token (it carries no project names).
#[utoipa::path(get, path = "/metrics", tag = "service",
    responses((status = 200, description = "Prometheus text exposition", body = String, content_type = "text/plain; version=0.0.4")))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let text = crate::metrics::render(&state).await;
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
}

/// This document; needs no token.
#[utoipa::path(get, path = "/openapi.json", tag = "service",
    responses((status = 200, description = "The OpenAPI 3 document", body = Object)))]
pub async fn openapi() -> impl IntoResponse {
    Json(crate::openapi::document())
}

pub async fn route_not_found(method: Method, OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::NotFound(format!("no route {method} {}", truncate(uri.path())))
}

pub async fn method_not_allowed(method: Method, OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::MethodNotAllowed(format!(
        "{method} is not allowed on {}",
        truncate(uri.path())
    ))
}
