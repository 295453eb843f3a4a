//! Writes of the usage view: what a batch changed, slices of a full state (rebuild), and
//! bounded deletes of a generation.

use domain::{LiveReservation, ReservationId, ResourceName, DEFAULTS_STREAM};
use sqlx::QueryBuilder;

use super::{on_tx, Tx};
use crate::fold::{Changes, ViewState};
use crate::limits::ROWS_PER_STATEMENT;
use crate::ProjectionError;

impl Tx {
    /// Writes back what a batch changed.
    pub(crate) async fn write_changes(
        &mut self,
        generation: i64,
        state: &ViewState,
        changes: &Changes,
    ) -> Result<(), ProjectionError> {
        let in_use: Vec<(&str, &ResourceName, i64)> = changes
            .in_use
            .iter()
            .map(|(p, r)| {
                (
                    p.as_str(),
                    r,
                    state.projects.get(p).map_or(0, |v| v.in_use(r)),
                )
            })
            .collect();
        self.upsert_in_use(generation, &in_use).await?;

        if !changes.limits.is_empty() {
            let owners: Vec<&str> = changes.limits.iter().map(String::as_str).collect();
            for chunk in owners.chunks(ROWS_PER_STATEMENT) {
                on_tx!(self, |c, DB| {
                    let mut q =
                        QueryBuilder::<DB>::new("DELETE FROM usage_limits WHERE generation = ");
                    q.push_bind(generation).push(" AND project IN (");
                    let mut list = q.separated(", ");
                    for p in chunk {
                        list.push_bind(*p);
                    }
                    q.push(")");
                    q.build().execute(&mut *c).await?;
                });
            }
            let limits: Vec<(&str, &ResourceName, i64)> = owners
                .iter()
                .flat_map(|owner| {
                    let limits = if *owner == DEFAULTS_STREAM {
                        Some(&state.defaults.limits)
                    } else {
                        state.projects.get(*owner).map(|v| &v.overrides)
                    };
                    limits
                        .into_iter()
                        .flatten()
                        .map(move |(r, l)| (*owner, r, l.value()))
                })
                .collect();
            self.insert_limits(generation, &limits).await?;
        }

        let mut gone: Vec<(&str, String)> = Vec::new();
        let mut kept: Vec<(&str, ReservationId, bool, &LiveReservation)> = Vec::new();
        for (project, id) in &changes.reservations {
            let view = state.projects.get(project);
            if let Some(k) = view.and_then(|v| v.held().get(id)) {
                kept.push((project, *id, true, k));
            } else if let Some(k) = view.and_then(|v| v.committed.get(id)) {
                kept.push((project, *id, false, k));
            } else {
                gone.push((project, id.to_string()));
            }
        }
        for chunk in gone.chunks(ROWS_PER_STATEMENT) {
            on_tx!(self, |c, DB| {
                delete_reservations::<DB>(generation, chunk)
                    .build()
                    .execute(&mut *c)
                    .await?;
            });
        }
        self.upsert_reservations(generation, &kept).await
    }

    /// Writes a whole folded state into an empty generation (a rebuild).
    pub(crate) async fn write_full_chunk(
        &mut self,
        generation: i64,
        part: &FullPart<'_>,
    ) -> Result<(), ProjectionError> {
        self.upsert_in_use(generation, &part.in_use).await?;
        self.insert_limits(generation, &part.limits).await?;
        self.upsert_reservations(generation, &part.reservations)
            .await
    }

    async fn upsert_in_use(
        &mut self,
        generation: i64,
        rows: &[(&str, &ResourceName, i64)],
    ) -> Result<(), ProjectionError> {
        self.upsert_resource_values("usage_in_use", "in_use", generation, rows)
            .await
    }

    async fn insert_limits(
        &mut self,
        generation: i64,
        rows: &[(&str, &ResourceName, i64)],
    ) -> Result<(), ProjectionError> {
        self.upsert_resource_values("usage_limits", "limit_value", generation, rows)
            .await
    }

    /// Upserts one number per (project, resource) into a view table keyed by
    /// (generation, project, resource). `table` and `column` are this module's own names.
    async fn upsert_resource_values(
        &mut self,
        table: &'static str,
        column: &'static str,
        generation: i64,
        rows: &[(&str, &ResourceName, i64)],
    ) -> Result<(), ProjectionError> {
        let insert = self.multi_row_insert();
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            on_tx!(self, |c, DB| {
                let mut q = QueryBuilder::<DB>::new(format!(
                    "{insert} {table} (generation, project, resource, {column}) "
                ));
                q.push_values(chunk, |mut b, (p, r, v)| {
                    b.push_bind(generation)
                        .push_bind(*p)
                        .push_bind(r.as_str())
                        .push_bind(*v);
                });
                q.push(format!(
                    " ON CONFLICT (generation, project, resource) DO UPDATE SET {column} = excluded.{column}"
                ));
                q.build().execute(&mut *c).await?;
            });
        }
        Ok(())
    }

    async fn upsert_reservations(
        &mut self,
        generation: i64,
        rows: &[(&str, ReservationId, bool, &LiveReservation)],
    ) -> Result<(), ProjectionError> {
        let insert = self.multi_row_insert();
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            on_tx!(self, |c, DB| {
                let mut q = QueryBuilder::<DB>::new(format!(
                    "{insert} usage_reservations (generation, project, reservation_id, held, expires_at_ms, deltas) ",
                ));
                q.push_values(chunk, |mut b, (p, id, held, kept)| {
                    b.push_bind(generation)
                        .push_bind(*p)
                        .push_bind(id.to_string())
                        .push_bind(i64::from(*held))
                        .push_bind(kept.expires_at.timestamp_millis())
                        .push_bind(crate::fold::deltas_json(&kept.deltas));
                });
                q.push(
                    " ON CONFLICT (generation, project, reservation_id) DO UPDATE SET held = excluded.held, \
                     expires_at_ms = excluded.expires_at_ms, deltas = excluded.deltas",
                );
                q.build().execute(&mut *c).await?;
            });
        }
        Ok(())
    }

    /// Deletes up to `max` rows of `generation` from one view table; returns how many.
    pub(crate) async fn delete_generation_rows(
        &mut self,
        table: &str,
        key: &str,
        generation: i64,
        max: i64,
    ) -> Result<u64, ProjectionError> {
        // Bounded deletes keep each transaction short on SQLite's single writer.
        let sql = format!(
            "DELETE FROM {table} WHERE generation = $1 AND ({key}) IN \
             (SELECT {key} FROM {table} WHERE generation = $1 LIMIT $2)"
        );
        Ok(on_tx!(self, |c, DB| sqlx::query(&sql)
            .bind(generation)
            .bind(max)
            .execute(&mut *c)
            .await?
            .rows_affected()))
    }
}

/// Deletes the named (project, reservation id) pairs of a generation. The SQLite this builds
/// with looks each pair up by primary key (a test below checks the plan). SQLite 3.40 did
/// not: it searched by generation alone, reading every reservation of the generation on each
/// view batch that releases one (docs/BENCHMARKS.md, "Figures behind the code").
fn delete_reservations<'a, DB>(
    generation: i64,
    pairs: &'a [(&'a str, String)],
) -> QueryBuilder<'a, DB>
where
    DB: sqlx::Database,
    i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let mut q = QueryBuilder::<DB>::new("DELETE FROM usage_reservations WHERE generation = ");
    q.push_bind(generation)
        .push(" AND (project, reservation_id) IN (");
    q.push_values(pairs, |mut b, (project, id)| {
        b.push_bind(*project).push_bind(id.as_str());
    });
    q.push(")");
    q
}

/// One slice of a full state to write.
#[derive(Default)]
pub(crate) struct FullPart<'a> {
    pub in_use: Vec<(&'a str, &'a ResourceName, i64)>,
    pub limits: Vec<(&'a str, &'a ResourceName, i64)>,
    pub reservations: Vec<(&'a str, ReservationId, bool, &'a LiveReservation)>,
}

#[cfg(test)]
mod tests {
    use sqlx::sqlite::SqlitePoolOptions;
    use sqlx::Sqlite;

    /// A planner that searched by generation alone would read every reservation on each view
    /// batch with a release: a cost that grows with the table, invisible in small tests.
    #[tokio::test]
    async fn sqlite_deletes_reservations_by_primary_key_lookups() {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        sqlx::migrate!("../migrations/sqlite-views")
            .run(&pool)
            .await
            .unwrap();
        let pairs = [("a", "r1".to_owned()), ("b", "r2".to_owned())];
        let delete = super::delete_reservations::<Sqlite>(7, &pairs);
        let sql = format!("EXPLAIN QUERY PLAN {}", delete.sql());
        let mut plan = sqlx::query_as::<_, (i64, i64, i64, String)>(&sql).bind(7_i64);
        for value in ["a", "r1", "b", "r2"] {
            plan = plan.bind(value);
        }
        let steps: Vec<String> = plan
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .map(|step| step.3)
            .collect();
        assert!(
            steps.iter().any(|step| step
                .contains("USING PRIMARY KEY (generation=? AND project=? AND reservation_id=?)")),
            "{steps:?}"
        );
    }
}
