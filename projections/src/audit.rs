//! The audit view: its rows (written as batches are applied) and its queries: one project's
//! events, filtered, in position order, a page at a time with an opaque keyset cursor.
//!
//! A subtree's audit (`subtree`, SPEC rule 11) is the entries of the project and of all its
//! descendants, merged in position order. The descendants are read from the audit view's own
//! parent links (`tree`), in the same snapshot as the entries, at most `MAX_ANCESTORS` levels
//! below the project, so the whole answer is of one position of the views and asks nothing of
//! the ledger. Each project's next page is read through its own index range and the pages
//! merged, so a page costs (projects × page size) rows at most, however long the histories.
//! Each page looks the descendants up again: a project that joins or leaves between two pages
//! is in the later pages or not, and the cursor (a position) stays valid either way.

use std::collections::{BTreeMap, BTreeSet};

use domain::{Deltas, ProjectId, ReservationId, ResourceName, Timestamp, UserId};
use ledger::Position;
use sqlx::QueryBuilder;

use crate::audit_keys::push_project_is;
use crate::checkpoint::AUDIT;
use crate::fold::{parse_deltas, parse_limits, parse_usage_after, AuditRow};
use crate::limits::ROWS_PER_STATEMENT;
use crate::paging::{self, PageAsked};
use crate::tables::{on_tx, Tx};
use crate::{Inner, ProjectionError, DEFAULT_AUDIT_PAGE, MAX_AUDIT_PAGE};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditQuery {
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    pub event_type: Option<String>,
    pub reservation: Option<ReservationId>,
    pub actor: Option<String>,
    /// Only events appended by this principal.
    pub principal: Option<String>,
    /// Only events about this user inside the project.
    pub user: Option<UserId>,
    /// The entries of the project's descendants too (a project's audit only).
    pub subtree: bool,
    /// Page size, 1 to MAX_AUDIT_PAGE (DEFAULT_AUDIT_PAGE when None).
    pub limit: Option<usize>,
    /// Opaque cursor from a previous page's `next`.
    pub cursor: Option<String>,
}

/// Usage of one resource right after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsageAfter {
    pub in_use: i64,
    pub reserved: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    pub position: Position,
    /// The stream the event is in: a project id, or `$defaults`.
    pub project: String,
    pub version: u64,
    pub at: Timestamp,
    pub event_type: String,
    pub reservation_id: Option<ReservationId>,
    pub deltas: Option<Deltas>,
    pub actor: Option<String>,
    pub request_id: Option<String>,
    /// Who was authenticated when the event was appended; `None` for events stored before
    /// principals were recorded.
    pub principal: Option<String>,
    /// For releases: rolled_back, expired or freed; for corrections: the operator's reason.
    pub reason: Option<String>,
    /// The usage the event left behind (for denials: the usage it was judged on).
    pub usage_after: BTreeMap<ResourceName, UsageAfter>,
    /// Limits events: the effective limits of the resources the event names, just before and
    /// just after it (a resource without any limit is absent). `None` for other events.
    pub before: Option<BTreeMap<ResourceName, i64>>,
    pub after: Option<BTreeMap<ResourceName, i64>>,
    /// `LimitsSet` and `ParentSet`: whether `force` allowed going below usage. `None` for other
    /// events.
    pub force: Option<bool>,
    /// A counted reserve's request: the count granted.
    pub count: Option<u32>,
    /// The user inside the project the event is about (a reserve's, a correction's, a user's
    /// limits).
    pub user: Option<UserId>,
    /// `ParentSet`: the new parent (`None`: the parent was removed).
    pub parent: Option<ProjectId>,
    /// An ancestor's `Descendant*` entry: the descendant it is about.
    pub descendant: Option<ProjectId>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    pub next: Option<String>,
}

/// A query as the SQL sees it.
pub(crate) struct Filter {
    pub after: i64,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub event_type: Option<String>,
    pub reservation: Option<String>,
    pub actor: Option<String>,
    pub principal: Option<String>,
    pub user: Option<String>,
    /// Rows to fetch: one more than the page, to know whether another page follows.
    pub limit: i64,
}

const CURSOR_PREFIX: &str = "a1:";

/// Parameters an audit row binds, and rows per insert: half the usual rows keep a statement as
/// far below the backends' parameter limits (see [`ROWS_PER_STATEMENT`]).
const AUDIT_PARAMETERS_PER_ROW: usize = 22;
const AUDIT_ROWS_PER_STATEMENT: usize = ROWS_PER_STATEMENT / 2;
const _: () = assert!(AUDIT_ROWS_PER_STATEMENT * AUDIT_PARAMETERS_PER_ROW <= 32_766);

/// The cursor after `position`: opaque to clients, versioned for us.
pub fn encode_cursor(position: u64) -> String {
    paging::encode(CURSOR_PREFIX, crate::db::to_i64(position))
}

pub fn decode_cursor(cursor: &str) -> Result<u64, ProjectionError> {
    paging::decode(CURSOR_PREFIX, cursor).map(crate::db::to_u64)
}

impl Inner {
    /// One page of the audit of `owner`: a project id, or `$defaults` for the defaults.
    pub(crate) async fn audit(
        &self,
        owner: &str,
        query: &AuditQuery,
    ) -> Result<AuditPage, ProjectionError> {
        let PageAsked { after, size: page } = PageAsked::new(
            CURSOR_PREFIX,
            query.cursor.as_deref(),
            query.limit,
            DEFAULT_AUDIT_PAGE,
            MAX_AUDIT_PAGE,
        )?;
        let filter = Filter {
            after,
            since_ms: query.since.map(|t| t.timestamp_millis()),
            until_ms: query.until.map(|t| t.timestamp_millis()),
            event_type: query.event_type.clone(),
            reservation: query.reservation.map(|r| r.to_string()),
            actor: query.actor.clone(),
            principal: query.principal.clone(),
            user: query.user.as_ref().map(|u| u.as_str().to_owned()),
            limit: i64::try_from(page + 1).unwrap_or(i64::MAX),
        };
        let mut tx = self.db.begin_read().await?;
        let head = tx.head(AUDIT).await?;
        let mut records = tx.audit_page(head.generation, owner, &filter).await?;
        if query.subtree {
            for descendant in tx.descendants(head.generation, owner).await? {
                records.extend(tx.audit_page(head.generation, &descendant, &filter).await?);
            }
            // Each project's first `page + 1` after the cursor hold the subtree's.
            records.sort_unstable_by_key(|r| r.position);
            records.truncate(page + 1);
        }
        tx.rollback().await?;
        let more = records.len() > page;
        records.truncate(page);
        let next = if more {
            records
                .last()
                .map(|r| encode_cursor(crate::db::to_u64(r.position)))
        } else {
            None
        };
        Ok(AuditPage {
            entries: records.into_iter().map(entry).collect(),
            next,
        })
    }
}

fn entry(record: AuditRecord) -> AuditEntry {
    AuditEntry {
        position: crate::db::to_u64(record.position),
        project: record.project,
        version: crate::db::to_u64(record.version),
        at: chrono::DateTime::from_timestamp_millis(record.at_ms).unwrap_or_default(),
        event_type: record.event_type,
        reservation_id: record
            .reservation_id
            .as_deref()
            .and_then(|r| ReservationId::parse(r).ok()),
        deltas: record
            .deltas
            .as_deref()
            .and_then(parse_deltas)
            .map(|d: Deltas| d),
        actor: record.actor,
        request_id: record.request_id,
        principal: record.principal,
        reason: record.reason,
        usage_after: parse_usage_after(&record.usage_after),
        before: record.before_values.as_deref().and_then(parse_limits),
        after: record.after_values.as_deref().and_then(parse_limits),
        force: record.forced.map(|forced| forced != 0),
        count: record.granted_count.and_then(|n| u32::try_from(n).ok()),
        user: record.user_id.and_then(|u| domain::UserId::parse(&u).ok()),
        parent: record.parent.and_then(|p| ProjectId::parse(&p).ok()),
        descendant: record.descendant.and_then(|p| ProjectId::parse(&p).ok()),
    }
}

impl Tx {
    pub(crate) async fn audit_positions(
        &mut self,
        generation: i64,
    ) -> Result<Vec<i64>, ProjectionError> {
        Ok(on_tx!(self, |c, DB| sqlx::query_scalar(
            "SELECT position FROM audit_entries WHERE generation = $1 ORDER BY position"
        )
        .bind(generation)
        .fetch_all(&mut *c)
        .await?))
    }

    pub(crate) async fn insert_audit(
        &mut self,
        generation: i64,
        rows: &[AuditRow],
    ) -> Result<(), ProjectionError> {
        let insert = self.multi_row_insert();
        // Project by project (a stable sort: each project's entries stay in position order): the
        // audit's indexes lead with the project's key (`audit_keys`), and each entry inserted
        // seeks its leaf in every one of them. Consecutive entries of one project find those
        // leaves in the CPU's cache; entries in log order jump to another project's leaves at
        // every row.
        let mut by_project: Vec<&AuditRow> = rows.iter().collect();
        by_project.sort_by(|a, b| a.project.cmp(&b.project));
        let projects: BTreeSet<&str> = rows.iter().map(|r| r.project.as_str()).collect();
        let keys = self.audit_project_keys(generation, &projects).await?;
        for chunk in by_project.chunks(AUDIT_ROWS_PER_STATEMENT) {
            on_tx!(self, |c, DB| {
                let mut q = QueryBuilder::<DB>::new(format!(
                    "{insert} audit_entries (generation, position, project, version, at_ms, event_type, \
                     reservation_id, deltas, actor, request_id, reason, usage_after, principal, \
                     before_values, after_values, forced, expires_at_ms, granted_count, user_id, \
                     parent, descendant, project_key) ",
                ));
                q.push_values(chunk, |mut b, row| {
                    b.push_bind(generation)
                        .push_bind(row.position)
                        .push_bind(row.project.as_str())
                        .push_bind(row.version)
                        .push_bind(row.at_ms)
                        .push_bind(row.event_type)
                        .push_bind(row.reservation_id.as_deref())
                        .push_bind(row.deltas.as_deref())
                        .push_bind(row.actor.as_deref())
                        .push_bind(row.request_id.as_deref())
                        .push_bind(row.reason.as_deref())
                        .push_bind(row.usage_after.as_str())
                        .push_bind(row.principal.as_deref())
                        .push_bind(row.change.before.as_deref())
                        .push_bind(row.change.after.as_deref())
                        .push_bind(row.change.forced.map(i64::from))
                        .push_bind(row.expires_at_ms)
                        .push_bind(row.granted_count)
                        .push_bind(row.user.as_deref())
                        .push_bind(row.parent.as_deref())
                        .push_bind(row.descendant.as_deref())
                        .push_bind(keys[row.project.as_str()]);
                });
                q.build().execute(&mut *c).await?;
            });
        }
        self.keep_parent_links(generation, rows).await
    }

    pub(crate) async fn audit_page(
        &mut self,
        generation: i64,
        project: &str,
        filter: &Filter,
    ) -> Result<Vec<AuditRecord>, ProjectionError> {
        // On SQLite, which keeps no statistics, a reservation's few entries are found through
        // its own index (sqlite-views/0002), not by walking the project's.
        let index = match (&*self, &filter.reservation) {
            (Tx::Sqlite(_), Some(_)) => " INDEXED BY audit_by_reservation",
            _ => "",
        };
        Ok(on_tx!(self, |c, DB| {
            let mut q = QueryBuilder::<DB>::new(format!(
                "SELECT position, project, version, at_ms, event_type, reservation_id, deltas, actor, \
                 request_id, reason, usage_after, principal, before_values, after_values, forced, \
                 granted_count, user_id, parent, descendant FROM audit_entries{index} WHERE generation = ",
            ));
            q.push_bind(generation).push(" AND ");
            push_project_is(&mut q, generation, project);
            q.push(" AND position > ").push_bind(filter.after);
            if let Some(since) = filter.since_ms {
                q.push(" AND at_ms >= ").push_bind(since);
            }
            if let Some(until) = filter.until_ms {
                q.push(" AND at_ms <= ").push_bind(until);
            }
            if let Some(t) = &filter.event_type {
                q.push(" AND event_type = ").push_bind(t.as_str());
            }
            if let Some(r) = &filter.reservation {
                q.push(" AND reservation_id = ").push_bind(r.as_str());
            }
            if let Some(a) = &filter.actor {
                q.push(" AND actor = ").push_bind(a.as_str());
            }
            if let Some(p) = &filter.principal {
                q.push(" AND principal = ").push_bind(p.as_str());
            }
            if let Some(u) = &filter.user {
                q.push(" AND user_id = ").push_bind(u.as_str());
            }
            q.push(" ORDER BY position LIMIT ").push_bind(filter.limit);
            q.build_query_as::<AuditRecord>().fetch_all(&mut *c).await?
        }))
    }
}

/// An audit row as read back.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AuditRecord {
    pub position: i64,
    pub project: String,
    pub version: i64,
    pub at_ms: i64,
    pub event_type: String,
    pub reservation_id: Option<String>,
    pub deltas: Option<String>,
    pub actor: Option<String>,
    pub request_id: Option<String>,
    pub reason: Option<String>,
    pub usage_after: String,
    pub principal: Option<String>,
    /// `{resource: limit}` JSON (see [`crate::fold::LimitsChange`]).
    pub before_values: Option<String>,
    pub after_values: Option<String>,
    /// 0 or 1, for `LimitsSet` only.
    pub forced: Option<i64>,
    /// A counted reserve's request only.
    pub granted_count: Option<i64>,
    pub user_id: Option<String>,
    /// `ParentSet` only: the new parent.
    pub parent: Option<String>,
    /// `Descendant*` only: the descendant.
    pub descendant: Option<String>,
}
