//! `GET /v1/projects/{p}/audit`: the project's history, filtered and paged (with
//! `?subtree=true`, merged with its descendants' in position order: the descendants are those
//! the audit view's parent links give, at most 3 levels below it, looked up again for each
//! page); and `GET /v1/defaults/audit`, the same for the default limits.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use domain::{ProjectId, ReservationId, EVENT_TYPES};
use projections::{AuditEntry, AuditQuery, MAX_AUDIT_PAGE};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::rfc3339;
use super::usage::{catch_up, running};
use crate::error::{truncate, ApiError};
use crate::extract::{page_size, parse_time, parse_user, ApiQuery, ProjectPath};
use crate::limits::MAX_PRINCIPAL_CHARS;
use crate::openapi::schemas::{
    AuditCursorSchema, AuditPageSizeSchema, ClientTextSchema, EventTypeSchema, PositionSchema,
    ProjectIdSchema, TimestampSchema, UserIdSchema,
};
use crate::problem::ProblemDocument;
use crate::server::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditParams {
    /// RFC 3339: entries recorded at or after this time.
    #[param(value_type = Option<TimestampSchema>)]
    pub since: Option<String>,
    /// RFC 3339: entries recorded at or before this time.
    #[param(value_type = Option<TimestampSchema>)]
    pub until: Option<String>,
    /// An event type, e.g. `ReservationDenied`.
    #[serde(rename = "type")]
    #[param(rename = "type", value_type = Option<EventTypeSchema>)]
    pub event_type: Option<String>,
    /// A reservation id.
    #[param(value_type = Option<Uuid>)]
    pub reservation: Option<String>,
    /// The actor recorded with the event.
    pub actor: Option<String>,
    /// The principal recorded with the event (who was authenticated: a token's name or role,
    /// `anonymous`, `system:sweeper`); 1 to 256 characters, no control characters.
    #[param(value_type = Option<ClientTextSchema>)]
    pub principal: Option<String>,
    /// Only entries about this user inside the project (its reserves, denials, corrections
    /// and limits).
    #[param(value_type = Option<UserIdSchema>)]
    pub user: Option<String>,
    /// `true`: the entries of the project and of all its descendants (SPEC rule 11), in
    /// position order, each naming its `project`. The defaults have no descendants.
    pub subtree: Option<bool>,
    /// Page size, 1 to 1000 (default 100).
    #[param(value_type = Option<AuditPageSizeSchema>)]
    pub limit: Option<u64>,
    /// The `next` of the previous page.
    #[param(value_type = Option<AuditCursorSchema>)]
    pub cursor: Option<String>,
    /// Wait (up to 5 s) until the views reflect this global position.
    #[param(value_type = Option<PositionSchema>)]
    pub min_position: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UsageAfterBody {
    pub in_use: i64,
    pub reserved: i64,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditEntryBody {
    #[schema(value_type = PositionSchema)]
    pub position: u64,
    /// The project whose event it is: the project asked for, or in a subtree's audit one of
    /// its descendants. Absent in the defaults' audit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ProjectIdSchema>, nullable = false)]
    pub project: Option<String>,
    /// The event's version in the project's stream.
    pub version: u64,
    /// RFC 3339 UTC.
    #[schema(value_type = TimestampSchema)]
    pub at: String,
    #[serde(rename = "type")]
    #[schema(rename = "type", value_type = EventTypeSchema, example = "ReservationRequested")]
    pub event_type: String,
    pub reservation_id: Option<Uuid>,
    pub deltas: Option<BTreeMap<String, i64>>,
    /// Who the client said it acts for (declared, not verified).
    pub actor: Option<String>,
    pub request_id: Option<String>,
    /// Who was authenticated when the event was appended: a token's name or role,
    /// `anonymous` on a server without tokens, `system:sweeper` for expiries; null for events
    /// stored before principals were recorded.
    pub principal: Option<String>,
    /// Releases: rolled_back, expired or freed; corrections: the operator's reason.
    pub reason: Option<String>,
    /// Usage the event left behind (for denials: the usage it was judged on).
    pub usage_after: BTreeMap<String, UsageAfterBody>,
    /// Limits events: the effective limits (-1 unlimited) of the resources the event
    /// names, just before it; a resource that had no limit is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<BTreeMap<String, i64>>,
    /// Limits events: the effective limits of the same resources just after it. Corrections
    /// (`UsageCorrected`): `{resource: in_use}` before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<BTreeMap<String, i64>>,
    /// `LimitsSet` and `ParentSet` only: whether `force` allowed going below usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// A counted reserve's `ReservationRequested` only: the count granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub count: Option<u32>,
    /// The user inside the project the event is about, where it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<UserIdSchema>, nullable = false)]
    pub user: Option<String>,
    /// `ParentSet` only: the new parent (absent when the parent was removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ProjectIdSchema>, nullable = false)]
    pub parent: Option<String>,
    /// An ancestor's `DescendantReserved`, `DescendantUsageChanged` (its `deltas`: the change
    /// of the descendant's in_use), `DescendantsJoined` (its `deltas`: the in_use the
    /// projects joining brought) or `DescendantsLeft` entry: the descendant it is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ProjectIdSchema>, nullable = false)]
    pub descendant: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditResponse {
    pub entries: Vec<AuditEntryBody>,
    /// Cursor of the next page; null on the last one.
    pub next: Option<String>,
}

impl From<AuditEntry> for AuditEntryBody {
    fn from(entry: AuditEntry) -> Self {
        let project = (entry.project != domain::DEFAULTS_STREAM).then_some(entry.project);
        AuditEntryBody {
            position: entry.position,
            project,
            parent: entry.parent.map(|p| p.to_string()),
            descendant: entry.descendant.map(|p| p.to_string()),
            version: entry.version,
            at: rfc3339(entry.at),
            event_type: entry.event_type,
            reservation_id: entry.reservation_id.map(|id| id.0),
            deltas: entry
                .deltas
                .map(|d| d.iter().map(|(r, n)| (r.to_string(), n)).collect()),
            actor: entry.actor,
            request_id: entry.request_id,
            principal: entry.principal,
            user: entry.user.map(|u| u.to_string()),
            reason: entry.reason,
            usage_after: entry
                .usage_after
                .into_iter()
                .map(|(r, u)| {
                    (
                        r.to_string(),
                        UsageAfterBody {
                            in_use: u.in_use,
                            reserved: u.reserved,
                        },
                    )
                })
                .collect(),
            before: entry.before.map(limits_body),
            after: entry.after.map(limits_body),
            force: entry.force,
            count: entry.count,
        }
    }
}

fn limits_body(limits: BTreeMap<domain::ResourceName, i64>) -> BTreeMap<String, i64> {
    limits
        .into_iter()
        .map(|(r, l)| (r.to_string(), l))
        .collect()
}

/// A `?principal=` filter: 1 to 256 characters, none a control character (no stored principal
/// can be otherwise, and a control character in a query is a client's mistake).
fn principal_filter(raw: String) -> Result<String, ApiError> {
    let length = raw.chars().count();
    if !(1..=MAX_PRINCIPAL_CHARS).contains(&length) || raw.chars().any(char::is_control) {
        return Err(ApiError::InvalidRequest(format!(
            "principal={:?} must be 1 to {MAX_PRINCIPAL_CHARS} characters, none a control \
             character",
            truncate(&raw)
        )));
    }
    Ok(raw)
}

fn audit_query(params: AuditParams) -> Result<AuditQuery, ApiError> {
    let since = params
        .since
        .as_deref()
        .map(|s| parse_time("since", s))
        .transpose()?;
    let until = params
        .until
        .as_deref()
        .map(|s| parse_time("until", s))
        .transpose()?;
    if let Some(event_type) = &params.event_type {
        if !EVENT_TYPES.contains(&event_type.as_str()) {
            return Err(ApiError::InvalidRequest(format!(
                "unknown event type {:?}; known are {}",
                truncate(event_type),
                EVENT_TYPES.join(", ")
            )));
        }
    }
    let reservation = params
        .reservation
        .as_deref()
        .map(ReservationId::parse)
        .transpose()
        .map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
    let limit = page_size(params.limit, MAX_AUDIT_PAGE)?;
    Ok(AuditQuery {
        since,
        until,
        event_type: params.event_type,
        reservation,
        actor: params.actor,
        principal: params.principal.map(principal_filter).transpose()?,
        user: params.user.as_deref().map(parse_user).transpose()?,
        subtree: params.subtree == Some(true),
        limit,
        cursor: params.cursor,
    })
}

/// A project's audit trail: every event with who (the authenticated principal and the declared
/// actor), why, the usage it left, and for limits events the limits before and after; with
/// `subtree=true`, its descendants' too.
#[utoipa::path(get, path = "/v1/projects/{p}/audit", tag = "usage",
    params(("p" = ProjectIdSchema, Path, description = "Project id"), AuditParams),
    responses(
        (status = 200, description = "One page of entries, oldest first", body = AuditResponse),
        (status = 400, description = "invalid-request (bad id, time, type, principal, limit or cursor)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 403, description = "forbidden", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "not-caught-up (with `min_position` and `position`), projections-unavailable, store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_audit(
    State(state): State<AppState>,
    ProjectPath(project): ProjectPath,
    ApiQuery(params): ApiQuery<AuditParams>,
) -> Result<Json<AuditResponse>, ApiError> {
    audit_page(&state, Some(&project), params).await
}

/// The audit trail of the default limits: every `DefaultLimitsSet`, with who set it and the
/// limits before and after. The same filters and paging as a project's audit.
#[utoipa::path(get, path = "/v1/defaults/audit", tag = "limits",
    params(AuditParams),
    responses(
        (status = 200, description = "One page of entries, oldest first", body = AuditResponse),
        (status = 400, description = "invalid-request (bad time, type, principal, limit or cursor)", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 401, description = "unauthorized", body = ProblemDocument, content_type = "application/problem+json"),
        (status = 503, description = "not-caught-up (with `min_position` and `position`), projections-unavailable, store-unavailable: retry (see Retry-After)", body = ProblemDocument, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn get_defaults_audit(
    State(state): State<AppState>,
    ApiQuery(params): ApiQuery<AuditParams>,
) -> Result<Json<AuditResponse>, ApiError> {
    audit_page(&state, None, params).await
}

/// One page of a project's audit, or of the defaults' (`None`): the query checked before
/// anything is read, then read once the views reflect `min_position`.
async fn audit_page(
    state: &AppState,
    project: Option<&ProjectId>,
    params: AuditParams,
) -> Result<Json<AuditResponse>, ApiError> {
    let min_position = params.min_position;
    let query = audit_query(params)?;
    let projections = running(state)?;
    catch_up(state, projections, min_position).await?;
    let page = match project {
        Some(project) => projections.audit(project, &query).await?,
        None => projections.defaults_audit(&query).await?,
    };
    Ok(Json(page.into()))
}

impl From<projections::AuditPage> for AuditResponse {
    fn from(page: projections::AuditPage) -> Self {
        AuditResponse {
            entries: page.entries.into_iter().map(Into::into).collect(),
            next: page.next,
        }
    }
}
