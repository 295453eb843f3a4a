//! The hierarchy (SPEC rule 11) on the read side: each project's parent link, kept in
//! `project_parents` from the `ParentSet` audit rows (so it belongs to the audit view, with its
//! generation, and is written in the same transactions as the entries); the children of a
//! project as a page of the project list; the descendants a subtree's audit covers; and a
//! parent's subtree usage at a past instant, from its own stream's state.

use std::collections::{BTreeMap, BTreeSet};

use domain::{ProjectId, ProjectState, ResourceName, SubtreeUsage, Timestamp, MAX_ANCESTORS};
use sqlx::QueryBuilder;

use crate::checkpoint::AUDIT;
use crate::fold::AuditRow;
use crate::limits::{DEFAULT_PROJECT_PAGE, MAX_PROJECT_PAGE, ROWS_PER_STATEMENT};
use crate::projects::{decode_cursor, encode_cursor, ABOVE_EVERY_ID};
use crate::tables::{on_tx, Tx};
use crate::{Inner, ProjectPage, ProjectQuery, ProjectionError};

/// The subtree of `state`'s project at `at`, over `shown` and the resources its descendants
/// use or hold; `None` for a project without descendants.
pub(crate) fn subtree_at(
    state: &ProjectState,
    shown: impl IntoIterator<Item = ResourceName>,
    at: Timestamp,
) -> Option<SubtreeUsage> {
    (!state.subtree().is_empty()).then(|| state.subtree_report(shown, at))
}

impl Inner {
    /// The children of `parent`, in id order, filtered by prefix, a page at a time (the
    /// cursors of [`Inner::projects`]).
    pub(crate) async fn children(
        &self,
        parent: &ProjectId,
        query: &ProjectQuery,
    ) -> Result<ProjectPage, ProjectionError> {
        let after = match query.cursor.as_deref() {
            Some(cursor) => decode_cursor(cursor)?,
            None => String::new(),
        };
        let size = query
            .limit
            .unwrap_or(DEFAULT_PROJECT_PAGE)
            .clamp(1, MAX_PROJECT_PAGE);
        let prefix = query.prefix.as_deref().unwrap_or_default();
        let high = format!("{prefix}{ABOVE_EVERY_ID}");
        let mut tx = self.db.begin_read().await?;
        let head = tx.head(AUDIT).await?;
        let fetch = i64::try_from(size + 1).unwrap_or(i64::MAX);
        let mut names: Vec<String> = on_tx!(&mut tx, |c, DB| sqlx::query_scalar::<DB, String>(
            "SELECT project FROM project_parents WHERE generation = $1 AND parent = $2 \
             AND project > $3 AND project >= $4 AND project < $5 ORDER BY project LIMIT $6"
        )
        .bind(head.generation)
        .bind(parent.as_str())
        .bind(&after)
        .bind(prefix)
        .bind(&high)
        .bind(fetch)
        .fetch_all(&mut *c)
        .await?);
        tx.rollback().await?;
        let next = if names.len() > size {
            names.truncate(size);
            names.last().map(|last| encode_cursor(last))
        } else {
            None
        };
        let parents = names
            .iter()
            .map(|n| (n.clone(), parent.as_str().to_owned()))
            .collect();
        Ok(ProjectPage {
            projects: names,
            parents,
            next,
        })
    }
}

impl Tx {
    /// Keeps the parent links of the `ParentSet` rows among `rows` (in position order: the
    /// last one of a project wins): a row per project with a parent, none without.
    pub(crate) async fn keep_parent_links(
        &mut self,
        generation: i64,
        rows: &[AuditRow],
    ) -> Result<(), ProjectionError> {
        let mut links: BTreeMap<&str, Option<&str>> = BTreeMap::new();
        for row in rows.iter().filter(|r| r.event_type == "ParentSet") {
            links.insert(row.project.as_str(), row.parent.as_deref());
        }
        let set: Vec<(&str, &str)> = links
            .iter()
            .filter_map(|(p, parent)| parent.map(|parent| (*p, parent)))
            .collect();
        let removed: Vec<&str> = links
            .iter()
            .filter(|(_, parent)| parent.is_none())
            .map(|(p, _)| *p)
            .collect();
        let insert = self.multi_row_insert();
        for chunk in set.chunks(ROWS_PER_STATEMENT) {
            on_tx!(self, |c, DB| {
                let mut q = QueryBuilder::<DB>::new(format!(
                    "{insert} project_parents (generation, project, parent) "
                ));
                q.push_values(chunk, |mut b, (project, parent)| {
                    b.push_bind(generation)
                        .push_bind(*project)
                        .push_bind(*parent);
                });
                q.push(" ON CONFLICT (generation, project) DO UPDATE SET parent = excluded.parent");
                q.build().execute(&mut *c).await?;
            });
        }
        for chunk in removed.chunks(ROWS_PER_STATEMENT) {
            on_tx!(self, |c, DB| {
                let mut q =
                    QueryBuilder::<DB>::new("DELETE FROM project_parents WHERE generation = ");
                q.push_bind(generation).push(" AND project IN (");
                let mut list = q.separated(", ");
                for project in chunk {
                    list.push_bind(*project);
                }
                q.push(")");
                q.build().execute(&mut *c).await?;
            });
        }
        Ok(())
    }

    /// Every (project, parent) link of a generation (for verify).
    pub(crate) async fn all_parent_links(
        &mut self,
        generation: i64,
    ) -> Result<Vec<(String, String)>, ProjectionError> {
        Ok(on_tx!(self, |c, DB| sqlx::query_as(
            "SELECT project, parent FROM project_parents WHERE generation = $1"
        )
        .bind(generation)
        .fetch_all(&mut *c)
        .await?))
    }

    /// The parents of those of `projects` that have one.
    pub(crate) async fn parents_of(
        &mut self,
        generation: i64,
        projects: &[String],
    ) -> Result<BTreeMap<String, String>, ProjectionError> {
        let mut parents = BTreeMap::new();
        for chunk in projects.chunks(ROWS_PER_STATEMENT) {
            let rows: Vec<(String, String)> = on_tx!(self, |c, DB| {
                let mut q = QueryBuilder::<DB>::new(
                    "SELECT project, parent FROM project_parents WHERE generation = ",
                );
                q.push_bind(generation).push(" AND project IN (");
                let mut list = q.separated(", ");
                for project in chunk {
                    list.push_bind(project.as_str());
                }
                q.push(")");
                q.build_query_as().fetch_all(&mut *c).await?
            });
            parents.extend(rows);
        }
        Ok(parents)
    }

    /// The descendants of `project` by the parent links, level by level, at most
    /// `MAX_ANCESTORS` levels below it (the deepest a tree goes), each once, in no order.
    pub(crate) async fn descendants(
        &mut self,
        generation: i64,
        project: &str,
    ) -> Result<Vec<String>, ProjectionError> {
        let mut seen: BTreeSet<String> = BTreeSet::from([project.to_owned()]);
        let mut level = vec![project.to_owned()];
        let mut all = Vec::new();
        for _ in 0..MAX_ANCESTORS {
            let mut next = Vec::new();
            for chunk in level.chunks(ROWS_PER_STATEMENT) {
                let rows: Vec<String> = on_tx!(self, |c, DB| {
                    let mut q = QueryBuilder::<DB>::new(
                        "SELECT project FROM project_parents WHERE generation = ",
                    );
                    q.push_bind(generation).push(" AND parent IN (");
                    let mut list = q.separated(", ");
                    for parent in chunk {
                        list.push_bind(parent.as_str());
                    }
                    q.push(")");
                    q.build_query_scalar().fetch_all(&mut *c).await?
                });
                next.extend(rows.into_iter().filter(|p| seen.insert(p.clone())));
            }
            if next.is_empty() {
                break;
            }
            all.extend(next.iter().cloned());
            level = next;
        }
        Ok(all)
    }
}
