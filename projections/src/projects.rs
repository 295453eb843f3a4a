//! The projects the views know (every project with at least one event), in id order, a page at
//! a time, each with its parent (from the parent links, `tree`): for the project list
//! (`GET /v1/projects`) and the console's search.
//!
//! Read from the audit view's project index without scanning a project's entries: each next
//! name is one index seek (`MIN(project) > the last one`), so a page costs its size in seeks
//! whatever the projects' histories.

use domain::DEFAULTS_STREAM;

use crate::checkpoint::AUDIT;
use crate::limits::{DEFAULT_PROJECT_PAGE, MAX_PROJECT_PAGE};
use crate::paging;
use crate::tables::{on_tx, Tx};
use crate::{Inner, ProjectPage, ProjectQuery, ProjectionError};

/// Distinct from the other lists' prefixes: one list's cursor is refused by another.
const CURSOR_PREFIX: &str = "p1:";

/// Past every project id that starts with a prefix: ids are ASCII below DEL (`A-Z a-z 0-9 . _ :
/// -`), so `prefix + DEL` is above all of them.
pub(crate) const ABOVE_EVERY_ID: char = '\u{7f}';

impl Inner {
    pub(crate) async fn projects(
        &self,
        query: &ProjectQuery,
    ) -> Result<ProjectPage, ProjectionError> {
        // The cursor is the last id listed, hex-encoded after the prefix (ids are ASCII).
        let after = match query.cursor.as_deref() {
            Some(cursor) => decode_cursor(cursor)?,
            None => String::new(),
        };
        let size = query
            .limit
            .unwrap_or(DEFAULT_PROJECT_PAGE)
            .clamp(1, MAX_PROJECT_PAGE);
        let prefix = query.prefix.as_deref().unwrap_or_default();
        let low = if after.as_str() >= prefix {
            after
        } else {
            String::new()
        };
        let high = format!("{prefix}{ABOVE_EVERY_ID}");
        let mut tx = self.db.begin_read().await?;
        let head = tx.head(AUDIT).await?;
        let fetch = i64::try_from(size + 1).unwrap_or(i64::MAX);
        let mut names = tx
            .project_names(head.generation, &low, prefix, &high, fetch)
            .await?;
        let next = if names.len() > size {
            names.truncate(size);
            names.last().map(|last| encode_cursor(last))
        } else {
            None
        };
        let parents = tx.parents_of(head.generation, &names).await?;
        tx.rollback().await?;
        Ok(ProjectPage {
            projects: names,
            parents,
            next,
        })
    }
}

pub(crate) fn encode_cursor(last: &str) -> String {
    paging::encode_text(CURSOR_PREFIX, last)
}

/// The last id a cursor names; only a project id is one.
pub(crate) fn decode_cursor(cursor: &str) -> Result<String, ProjectionError> {
    paging::decode_text(CURSOR_PREFIX, cursor)
        .ok()
        .filter(|id| domain::ProjectId::parse(id).is_ok())
        .ok_or(ProjectionError::InvalidCursor)
}

impl Tx {
    /// Up to `fetch` project ids in `[prefix, high)` after `low`, in order; never the
    /// defaults' stream.
    async fn project_names(
        &mut self,
        generation: i64,
        low: &str,
        prefix: &str,
        high: &str,
        fetch: i64,
    ) -> Result<Vec<String>, ProjectionError> {
        // A loose index scan as a recursive query: each step seeks the next project after the
        // last. SQLite stops the recursion at the LIMIT inside it; PostgreSQL evaluates only
        // the rows the outer LIMIT fetches.
        let (inner_limit, outer_limit) = match self {
            Tx::Sqlite(_) => (" LIMIT $6", ""),
            Tx::Postgres(_) => ("", " LIMIT $6"),
        };
        // The audit view's projects, by their primary key (sqlite-views/0008).
        let next_after = |after: &str| {
            format!(
                "SELECT MIN(project) FROM audit_projects WHERE generation = $1 \
                 AND project > {after} AND project >= $3 AND project < $4 AND project <> $5"
            )
        };
        let sql = format!(
            "WITH RECURSIVE names(project) AS ({first} UNION ALL \
             SELECT ({step}) FROM names WHERE names.project IS NOT NULL{inner_limit}) \
             SELECT project FROM names WHERE project IS NOT NULL{outer_limit}",
            first = next_after("$2"),
            step = next_after("names.project"),
        );
        Ok(on_tx!(self, |c, DB| sqlx::query_scalar::<DB, String>(&sql)
            .bind(generation)
            .bind(low)
            .bind(prefix)
            .bind(high)
            .bind(DEFAULTS_STREAM)
            .bind(fetch)
            .fetch_all(&mut *c)
            .await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_only_name_project_ids() {
        assert_eq!(decode_cursor(&encode_cursor("acme")).unwrap(), "acme");
        assert!(decode_cursor(&hex::encode("p1:not an id")).is_err());
        assert!(decode_cursor(&crate::encode_cursor(4)).is_err());
    }
}
