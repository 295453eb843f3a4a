//! Each project's key in the audit view (sqlite-views/0008, postgres/0013): a small integer per
//! (generation, project) in `audit_projects`, which the audit's project-led indexes lead with
//! instead of the project's id. Keys are given in the order projects first appear in a
//! generation and never change; a rebuild's fresh generation gives its own.
//!
//! A query picks one project's entries by [`project_is`]: the key, looked up in the same
//! statement, for the index, and the id itself, so the id alone decides which rows match.

use std::collections::{BTreeSet, HashMap};

use sqlx::QueryBuilder;

use crate::limits::ROWS_PER_STATEMENT;
use crate::tables::{on_tx, Tx};
use crate::ProjectionError;

/// The SQL condition that `{alias}` is an entry of the project bound as `project` (a
/// placeholder such as `$2`) in the generation bound as `generation`.
pub(crate) fn project_is(alias: &str, generation: &str, project: &str) -> String {
    format!(
        "{alias}project_key = (SELECT project_key FROM audit_projects \
         WHERE generation = {generation} AND project = {project}) AND {alias}project = {project}"
    )
}

/// [`project_is`] for a statement put together with binds, after its `WHERE`.
pub(crate) fn push_project_is<'a, DB>(
    q: &mut QueryBuilder<'a, DB>,
    generation: i64,
    project: &'a str,
) where
    DB: sqlx::Database,
    i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    q.push("project_key = (SELECT project_key FROM audit_projects WHERE generation = ")
        .push_bind(generation)
        .push(" AND project = ")
        .push_bind(project)
        .push(") AND project = ")
        .push_bind(project);
}

impl Tx {
    /// The key of each of `projects` in `generation`, giving the next keys to those that have
    /// none yet (in the caller's transaction, so a rollback takes them back).
    pub(crate) async fn audit_project_keys<'p>(
        &mut self,
        generation: i64,
        projects: &BTreeSet<&'p str>,
    ) -> Result<HashMap<&'p str, i64>, ProjectionError> {
        let listed: Vec<&'p str> = projects.iter().copied().collect();
        let mut keys = HashMap::with_capacity(listed.len());
        for (project, key) in self.known_keys(generation, &listed).await? {
            if let Some(listed) = projects.get(project.as_str()) {
                keys.insert(*listed, key);
            }
        }
        let new: Vec<&'p str> = listed
            .into_iter()
            .filter(|p| !keys.contains_key(p))
            .collect();
        if new.is_empty() {
            return Ok(keys);
        }
        let last: i64 = on_tx!(self, |c, DB| sqlx::query_scalar(
            "SELECT COALESCE(MAX(project_key), 0) FROM audit_projects WHERE generation = $1"
        )
        .bind(generation)
        .fetch_one(&mut *c)
        .await?);
        let given: Vec<(&'p str, i64)> = new.into_iter().zip(last + 1..).collect();
        let insert = self.multi_row_insert();
        for chunk in given.chunks(ROWS_PER_STATEMENT) {
            on_tx!(self, |c, DB| {
                let mut q = QueryBuilder::<DB>::new(format!(
                    "{insert} audit_projects (generation, project, project_key) "
                ));
                q.push_values(chunk, |mut b, (project, key)| {
                    b.push_bind(generation).push_bind(*project).push_bind(*key);
                });
                q.build().execute(&mut *c).await?;
            });
        }
        keys.extend(given);
        Ok(keys)
    }

    /// The keys `projects` have already. PostgreSQL takes the names as one array, so the
    /// statement is the same whatever their number (and prepared once); SQLite, a list at a
    /// time.
    async fn known_keys(
        &mut self,
        generation: i64,
        projects: &[&str],
    ) -> Result<Vec<(String, i64)>, ProjectionError> {
        match self {
            Tx::Postgres(t) => Ok(sqlx::query_as(
                "SELECT project, project_key FROM audit_projects \
                 WHERE generation = $1 AND project = ANY($2)",
            )
            .bind(generation)
            .bind(projects)
            .fetch_all(&mut **t)
            .await?),
            Tx::Sqlite(t) => {
                let mut found = Vec::with_capacity(projects.len());
                for chunk in projects.chunks(ROWS_PER_STATEMENT) {
                    let mut q = QueryBuilder::<sqlx::Sqlite>::new(
                        "SELECT project, project_key FROM audit_projects WHERE generation = ",
                    );
                    q.push_bind(generation).push(" AND project IN (");
                    let mut list = q.separated(", ");
                    for project in chunk {
                        list.push_bind(*project);
                    }
                    q.push(")");
                    found.extend(
                        q.build_query_as::<(String, i64)>()
                            .fetch_all(&mut **t)
                            .await?,
                    );
                }
                Ok(found)
            }
        }
    }
}
