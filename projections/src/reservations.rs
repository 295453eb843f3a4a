//! A project's reservations, listed from the audit view: each reservation is its
//! `ReservationRequested` entry (its deltas, creation time and expiry), and its status is what
//! the entries after it say (a `ReservationCommitted`, a `ReservationReleased` with its reason).
//! Reading them from the audit view costs the views nothing more to write, and released
//! reservations, which the usage view drops, are listed too.
//!
//! Reservations are listed in the order they were made (their request's global position), a
//! page at a time with an opaque keyset cursor. A status filter may have to pass over many
//! reservations of other statuses; a page looks at no more than [`SCAN_RESERVATIONS`] of them
//! and, when it stops there, answers what it found with a cursor to go on from (possibly an
//! empty page with a `next`), so no request walks a project's whole history.

use std::collections::HashMap;

use domain::{ReleaseReason, ReservationId, ReservationStatus, UserId};
use sqlx::QueryBuilder;

use crate::audit_keys::project_is;
use crate::checkpoint::{AUDIT, AUDIT_CODE_VERSION};
use crate::fold::parse_deltas;
use crate::limits::{DEFAULT_RESERVATION_PAGE, MAX_RESERVATION_PAGE, SCAN_RESERVATIONS};
use crate::paging::{self, PageAsked};
use crate::tables::{on_tx, Tx};
use crate::{
    Inner, ListedReservation, ProjectionError, ReservationPage, ReservationQuery, StatusFilter,
};

/// Distinct from an audit cursor's prefix: one list's cursor is refused by the other.
const CURSOR_PREFIX: &str = "r1:";

/// A reservation's request entry, as read back.
#[derive(Debug, sqlx::FromRow)]
struct RequestRow {
    position: i64,
    reservation_id: String,
    at_ms: i64,
    deltas: Option<String>,
    expires_at_ms: Option<i64>,
    granted_count: Option<i64>,
    user_id: Option<String>,
}

/// An entry that changed a listed reservation's status.
#[derive(Debug, sqlx::FromRow)]
struct StatusRow {
    reservation_id: String,
    position: i64,
    event_type: String,
    reason: Option<String>,
}

/// The request entries a page may look at: one project's, after a cursor (`$3`), made before
/// a time (`$4`), the first `$5` of them, as the table `r`. `$1` is the generation, `$2` the
/// project. On SQLite, which keeps no statistics, the index is named.
fn window_sql(tx: &Tx) -> String {
    let index = match tx {
        Tx::Sqlite(_) => " INDEXED BY audit_by_type",
        Tx::Postgres(_) => "",
    };
    format!(
        "(SELECT generation, project, position, reservation_id, at_ms, deltas, expires_at_ms, \
         granted_count, user_id FROM audit_entries{index} WHERE generation = $1 AND {project} \
         AND event_type = 'ReservationRequested' AND position > $3 AND at_ms < $4 \
         ORDER BY position LIMIT $5) r",
        project = project_is("", "$1", "$2"),
    )
}

/// The SQL condition on a request entry `r` for each status: held has neither a commit nor a
/// release after it; committed has a commit and no release; released has a release. Each is a
/// probe of the reservation's own few entries.
fn status_sql(tx: &Tx, status: StatusFilter) -> String {
    let index = match tx {
        Tx::Sqlite(_) => " INDEXED BY audit_by_reservation",
        Tx::Postgres(_) => "",
    };
    let later = |types: &str| {
        format!(
            "EXISTS (SELECT 1 FROM audit_entries e{index} WHERE e.generation = r.generation \
             AND e.reservation_id = r.reservation_id AND e.project = r.project \
             AND e.position > r.position AND e.event_type IN ({types}))"
        )
    };
    let committed = later("'ReservationCommitted'");
    let released = later("'ReservationReleased'");
    match status {
        StatusFilter::Held => {
            format!(
                "NOT {}",
                later("'ReservationCommitted', 'ReservationReleased'")
            )
        }
        StatusFilter::Committed => format!("{committed} AND NOT {released}"),
        StatusFilter::Released => released,
    }
}

impl Inner {
    pub(crate) async fn reservations(
        &self,
        project: &str,
        query: &ReservationQuery,
    ) -> Result<ReservationPage, ProjectionError> {
        let PageAsked { after, size: page } = PageAsked::new(
            CURSOR_PREFIX,
            query.cursor.as_deref(),
            query.limit,
            DEFAULT_RESERVATION_PAGE,
            MAX_RESERVATION_PAGE,
        )?;
        let mut tx = self.db.begin_read().await?;
        let head = tx.head(AUDIT).await?;
        if head.code_version < AUDIT_CODE_VERSION {
            // Built before request entries kept their expiry; the rebuild started at launch
            // replaces it.
            return Err(ProjectionError::Outdated(AUDIT.into()));
        }
        let window = Window {
            generation: head.generation,
            project,
            after,
            older_than_ms: query.older_than.map(|t| t.timestamp_millis()),
        };
        let wanted = Wanted {
            status: query.status,
            user: query.user.as_ref().map(|u| u.as_str()),
        };
        let mut requests = tx.reservation_requests(&window, &wanted, page).await?;
        let mut next = None;
        if requests.len() > page {
            requests.truncate(page);
            next = requests
                .last()
                .map(|r| paging::encode(CURSOR_PREFIX, r.position));
        } else if wanted.filters() {
            // The scan may have stopped short of the project's end: go on from where it did.
            next = tx
                .scan_end(&window)
                .await?
                .map(|position| paging::encode(CURSOR_PREFIX, position));
        }
        let ids: Vec<&str> = requests.iter().map(|r| r.reservation_id.as_str()).collect();
        let changes = tx.status_changes(head.generation, project, &ids).await?;
        tx.rollback().await?;
        let reservations = requests
            .into_iter()
            .map(|request| listed(request, &changes))
            .collect::<Result<_, _>>()?;
        Ok(ReservationPage { reservations, next })
    }
}

/// A reservation from its request and the entries that changed it, in position order.
fn listed(
    request: RequestRow,
    changes: &HashMap<String, Vec<StatusRow>>,
) -> Result<ListedReservation, ProjectionError> {
    let corrupt = |what: &str| ProjectionError::CorruptView(format!("reservation list: {what}"));
    let mut status = ReservationStatus::Held;
    let mut position = request.position;
    for change in changes.get(&request.reservation_id).into_iter().flatten() {
        position = change.position;
        status = match change.event_type.as_str() {
            "ReservationCommitted" => ReservationStatus::Committed,
            _ => ReservationStatus::Released(
                change
                    .reason
                    .as_deref()
                    .and_then(ReleaseReason::parse)
                    .ok_or_else(|| corrupt("release reason"))?,
            ),
        };
    }
    let time = |ms: i64| chrono::DateTime::from_timestamp_millis(ms).ok_or_else(|| corrupt("time"));
    Ok(ListedReservation {
        reservation_id: ReservationId::parse(&request.reservation_id)
            .map_err(|_| corrupt("reservation id"))?,
        deltas: request
            .deltas
            .as_deref()
            .and_then(parse_deltas)
            .ok_or_else(|| corrupt("deltas"))?,
        count: request.granted_count.and_then(|n| u32::try_from(n).ok()),
        user: match request.user_id {
            Some(user) => Some(UserId::parse(&user).map_err(|_| corrupt("user"))?),
            None => None,
        },
        status,
        created_at: time(request.at_ms)?,
        expires_at: time(request.expires_at_ms.ok_or_else(|| corrupt("expiry"))?)?,
        position: crate::db::to_u64(position),
    })
}

/// What a page keeps of the window's reservations.
struct Wanted<'a> {
    status: Option<StatusFilter>,
    user: Option<&'a str>,
}

impl Wanted<'_> {
    /// Whether the page may pass over reservations (and so is bounded by its scan).
    fn filters(&self) -> bool {
        self.status.is_some() || self.user.is_some()
    }
}

/// The request entries a page may look at.
struct Window<'a> {
    generation: i64,
    project: &'a str,
    after: i64,
    older_than_ms: Option<i64>,
}

impl Tx {
    /// Up to `page + 1` request entries of the window with the wanted status, in order.
    async fn reservation_requests(
        &mut self,
        window: &Window<'_>,
        wanted: &Wanted<'_>,
        page: usize,
    ) -> Result<Vec<RequestRow>, ProjectionError> {
        let fetch = i64::try_from(page + 1).unwrap_or(i64::MAX);
        // Without a filter every entry of the window is wanted: the scan is the page.
        let scan = if wanted.filters() {
            i64::try_from(SCAN_RESERVATIONS).unwrap_or(i64::MAX)
        } else {
            fetch
        };
        let mut conditions: Vec<String> = wanted
            .status
            .map(|status| status_sql(self, status))
            .into_iter()
            .collect();
        if wanted.user.is_some() {
            conditions.push("r.user_id = $7".into());
        }
        let condition = match conditions.is_empty() {
            true => String::new(),
            false => format!(" WHERE {}", conditions.join(" AND ")),
        };
        let sql = format!(
            "SELECT r.position, r.reservation_id, r.at_ms, r.deltas, r.expires_at_ms, \
             r.granted_count, r.user_id FROM {}{condition} ORDER BY r.position LIMIT $6",
            window_sql(self)
        );
        Ok(on_tx!(self, |c, DB| {
            let mut query = sqlx::query_as::<DB, RequestRow>(&sql)
                .bind(window.generation)
                .bind(window.project)
                .bind(window.after)
                .bind(window.older_than_ms.unwrap_or(i64::MAX))
                .bind(scan)
                .bind(fetch);
            if let Some(user) = wanted.user {
                query = query.bind(user);
            }
            query.fetch_all(&mut *c).await?
        }))
    }

    /// The last request entry a filtered page looked at, if the page stopped at its scan bound
    /// (the window may go on); `None` if the window ended first.
    async fn scan_end(&mut self, window: &Window<'_>) -> Result<Option<i64>, ProjectionError> {
        let scan = i64::try_from(SCAN_RESERVATIONS).unwrap_or(i64::MAX);
        let sql = format!("SELECT COUNT(*), MAX(r.position) FROM {}", window_sql(self));
        let (count, last): (i64, Option<i64>) = on_tx!(self, |c, DB| sqlx::query_as::<DB, _>(&sql)
            .bind(window.generation)
            .bind(window.project)
            .bind(window.after)
            .bind(window.older_than_ms.unwrap_or(i64::MAX))
            .bind(scan)
            .fetch_one(&mut *c)
            .await?);
        Ok(last.filter(|_| count >= scan))
    }

    /// The commits and releases of the given reservations, in position order.
    async fn status_changes(
        &mut self,
        generation: i64,
        project: &str,
        ids: &[&str],
    ) -> Result<HashMap<String, Vec<StatusRow>>, ProjectionError> {
        let mut changes: HashMap<String, Vec<StatusRow>> = HashMap::new();
        if ids.is_empty() {
            return Ok(changes);
        }
        // On SQLite, which keeps no statistics, the entries are found through the reservation
        // index (sqlite-views/0002), not by walking the project's.
        let index = match self {
            Tx::Sqlite(_) => " INDEXED BY audit_by_reservation",
            Tx::Postgres(_) => "",
        };
        let rows: Vec<StatusRow> = on_tx!(self, |c, DB| {
            let mut q = QueryBuilder::<DB>::new(format!(
                "SELECT reservation_id, position, event_type, reason FROM audit_entries{index} \
                 WHERE generation = "
            ));
            q.push_bind(generation).push(" AND reservation_id IN (");
            let mut list = q.separated(", ");
            for id in ids {
                list.push_bind(*id);
            }
            q.push(") AND project = ").push_bind(project).push(
                " AND event_type IN ('ReservationCommitted', 'ReservationReleased') \
                     ORDER BY position",
            );
            q.build_query_as::<StatusRow>().fetch_all(&mut *c).await?
        });
        for row in rows {
            changes
                .entry(row.reservation_id.clone())
                .or_default()
                .push(row);
        }
        Ok(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_are_not_audit_cursors() {
        let decode = |cursor: &str| paging::decode(CURSOR_PREFIX, cursor);
        assert_eq!(decode(&paging::encode(CURSOR_PREFIX, 42)).unwrap(), 42);
        assert!(decode(&crate::encode_cursor(42)).is_err());
        assert!(decode("zz").is_err());
        assert!(decode(&hex::encode("r1:-1")).is_err());
    }
}
