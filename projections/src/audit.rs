//! The audit view's queries: one project's events, filtered, in position order, a page at a
//! time with an opaque keyset cursor.

use domain::{Deltas, ProjectId, ReservationId};

use crate::checkpoint::{head_of, AUDIT};
use crate::fold::{parse_deltas, parse_usage_after};
use crate::tables::AuditRecord;
use crate::{
    AuditEntry, AuditPage, AuditQuery, Inner, ProjectionError, DEFAULT_AUDIT_PAGE, MAX_AUDIT_PAGE,
};

/// A query as the SQL sees it.
pub(crate) struct Filter {
    pub after: i64,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub event_type: Option<String>,
    pub reservation: Option<String>,
    pub actor: Option<String>,
    /// Rows to fetch: one more than the page, to know whether another page follows.
    pub limit: i64,
}

const CURSOR_PREFIX: &str = "a1:";

/// The cursor after `position`: opaque to clients, versioned for us.
pub fn encode_cursor(position: u64) -> String {
    hex::encode(format!("{CURSOR_PREFIX}{position}"))
}

pub fn decode_cursor(cursor: &str) -> Result<u64, ProjectionError> {
    let bytes = hex::decode(cursor).map_err(|_| ProjectionError::InvalidCursor)?;
    let text = std::str::from_utf8(&bytes).map_err(|_| ProjectionError::InvalidCursor)?;
    text.strip_prefix(CURSOR_PREFIX)
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|n| i64::try_from(*n).is_ok())
        .ok_or(ProjectionError::InvalidCursor)
}

impl Inner {
    pub(crate) async fn audit(
        &self,
        project: &ProjectId,
        query: &AuditQuery,
    ) -> Result<AuditPage, ProjectionError> {
        let after = query
            .cursor
            .as_deref()
            .map(decode_cursor)
            .transpose()?
            .unwrap_or(0);
        let page = query
            .limit
            .unwrap_or(DEFAULT_AUDIT_PAGE)
            .clamp(1, MAX_AUDIT_PAGE);
        let filter = Filter {
            after: crate::db::to_i64(after),
            since_ms: query.since.map(|t| t.timestamp_millis()),
            until_ms: query.until.map(|t| t.timestamp_millis()),
            event_type: query.event_type.clone(),
            reservation: query.reservation.map(|r| r.to_string()),
            actor: query.actor.clone(),
            limit: i64::try_from(page + 1).unwrap_or(i64::MAX),
        };
        let mut tx = self.db.begin_read().await?;
        let heads = tx.heads().await?;
        let head = head_of(&heads, AUDIT).cloned().ok_or_else(|| {
            ProjectionError::CorruptView("audit view bookkeeping is missing".into())
        })?;
        let mut records = tx
            .audit_page(head.generation, project.as_str(), &filter)
            .await?;
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
        reason: record.reason,
        usage_after: parse_usage_after(&record.usage_after),
    }
}
