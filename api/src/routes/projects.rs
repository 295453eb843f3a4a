//! `GET /v1/projects`: the projects the views know (every project with at least one event), in
//! id order, filtered by prefix and by parent (`?parent=q`: q's children, from their
//! `ParentSet` events), a page at a time, each with its parent. A project token sees only its
//! own project; admin and auditor tokens (and an open server) see them all.

use axum::extract::State;
use axum::Json;
use domain::ProjectId;
use projections::{ProjectPage, ProjectQuery};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::usage::{catch_up, running};
use crate::auth::{Caller, Role};
use crate::error::{truncate, ApiError};
use crate::extract::{page_size, ApiQuery, RequestContext};
use crate::openapi::schemas::{
    PositionSchema, ProjectCursorSchema, ProjectIdSchema, ProjectPageSizeSchema,
    ProjectPrefixSchema,
};
use crate::problem::ProblemDocument;
use crate::server::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ProjectListParams {
    /// Only ids that start with this (0 to 128 characters of the id alphabet).
    #[param(value_type = Option<ProjectPrefixSchema>)]
    pub prefix: Option<String>,
    /// Only the children of this project (its direct children, not their descendants).
    #[param(value_type = Option<ProjectIdSchema>)]
    pub parent: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[param(value_type = Option<ProjectPageSizeSchema>)]
    pub limit: Option<u64>,
    /// The `next` of the previous page.
    #[param(value_type = Option<ProjectCursorSchema>)]
    pub cursor: Option<String>,
    /// Wait (up to 5 s) until the views reflect this global position.
    #[param(value_type = Option<PositionSchema>)]
    pub min_position: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProjectEntry {
    #[schema(value_type = ProjectIdSchema)]
    pub project: String,
    /// Its parent; null for a root project.
    #[schema(value_type = Option<ProjectIdSchema>)]
    pub parent: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ProjectListResponse {
    /// In id order.
    pub projects: Vec<ProjectEntry>,
    /// Cursor of the next page; null on the last one.
    pub next: Option<String>,
}

fn query_of(params: ProjectListParams) -> Result<ProjectQuery, ApiError> {
    if let Some(prefix) = &params.prefix {
        // A prefix is a project id's beginning: the id alphabet, at most an id's length.
        let well_formed = prefix.is_empty() || ProjectId::parse(prefix).is_ok();
        if !well_formed {
            return Err(ApiError::InvalidRequest(format!(
                "prefix={:?} must be at most {} characters of A-Z a-z 0-9 . _ : -",
                truncate(prefix),
                ProjectId::MAX_LEN
            )));
        }
    }
    let limit = page_size(params.limit, projections::MAX_PROJECT_PAGE)?;
    Ok(ProjectQuery {
        prefix: params.prefix,
        limit,
        cursor: params.cursor,
    })
}

/// The projects, in id order; a project token sees only its own.
#[utoipa::path(get, path = "/v1/projects", tag = "usage",
    params(ProjectListParams),
    responses(
        (status = 200, description = "One page of projects, in id order", body = ProjectListResponse),
        (status = 400, description = "invalid-request (bad prefix, parent, limit or cursor)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "not-caught-up (with `min_position` and `position`), projections-unavailable, store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn list_projects(
    State(state): State<AppState>,
    ctx: RequestContext,
    ApiQuery(params): ApiQuery<ProjectListParams>,
) -> Result<Json<ProjectListResponse>, ApiError> {
    let min_position = params.min_position;
    let parent = params
        .parent
        .as_deref()
        .map(ProjectId::parse)
        .transpose()
        .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let query = query_of(params)?;
    let projections = running(&state)?;
    catch_up(&state, projections, min_position).await?;
    let own = match &ctx.caller {
        Caller::Token {
            role: Role::Project(own),
            ..
        } => Some(own.as_str()),
        _ => None,
    };
    let ProjectPage {
        projects,
        mut parents,
        next,
    } = match (&parent, own) {
        // A project token sees its own project only: looked up by its id, so neither the
        // page nor a cursor carries another project's name.
        (_, Some(own)) => {
            let asked = query.prefix.as_deref().unwrap_or_default();
            let mine = ProjectQuery {
                prefix: Some(own.to_owned()),
                limit: Some(1),
                cursor: None,
            };
            let found = match &parent {
                Some(parent) => projections.children(parent, &mine).await?,
                None => projections.projects(&mine).await?,
            };
            ProjectPage {
                projects: found
                    .projects
                    .into_iter()
                    .filter(|id| id == own && own.starts_with(asked))
                    .collect(),
                parents: found.parents,
                next: None,
            }
        }
        (Some(parent), None) => projections.children(parent, &query).await?,
        (None, None) => projections.projects(&query).await?,
    };
    let projects = projects
        .into_iter()
        .map(|project| ProjectEntry {
            parent: parents.remove(&project),
            project,
        })
        .collect();
    Ok(Json(ProjectListResponse { projects, next }))
}
