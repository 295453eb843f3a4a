//! Reads of the usage view: what folding a batch needs, whole generations for rebuild and
//! verify, and one project's rows for a usage query.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use domain::{LiveReservation, ReservationId, ResourceName, DEFAULTS_STREAM};
use sqlx::QueryBuilder;

use super::{corrupt, limit, on_tx, resource, NumberTable, StoredReservation, Tx};
use crate::fold::{parse_deltas, ViewState};
use crate::limits::ROWS_PER_STATEMENT;
use crate::ProjectionError;

impl Tx {
    /// Loads what folding a batch needs: the defaults, and for `projects` their usage, limits
    /// and holds, plus the named reservations (committed ones a release may free).
    pub(crate) async fn load(
        &mut self,
        generation: i64,
        projects: &BTreeSet<String>,
        reservations: &HashSet<(String, ReservationId)>,
    ) -> Result<ViewState, ProjectionError> {
        let mut state = ViewState::default();
        let mut with_defaults: Vec<&str> = projects.iter().map(String::as_str).collect();
        with_defaults.push(DEFAULTS_STREAM);
        for chunk in with_defaults.chunks(ROWS_PER_STATEMENT) {
            let rows = self
                .numbers_of(NumberTable::Limits, generation, chunk)
                .await?;
            for (project, name, value) in rows {
                if project == DEFAULTS_STREAM {
                    state
                        .defaults
                        .limits
                        .insert(resource(&name)?, limit(value)?);
                } else {
                    state
                        .projects
                        .entry(project)
                        .or_default()
                        .overrides
                        .insert(resource(&name)?, limit(value)?);
                }
            }
        }
        let projects: Vec<&str> = projects.iter().map(String::as_str).collect();
        for chunk in projects.chunks(ROWS_PER_STATEMENT) {
            let rows = self
                .numbers_of(NumberTable::InUse, generation, chunk)
                .await?;
            for (project, name, in_use) in rows {
                state
                    .projects
                    .entry(project)
                    .or_default()
                    .in_use
                    .insert(resource(&name)?, in_use);
            }
            for r in self.holds(generation, chunk).await? {
                file_reservation(&mut state, r);
            }
        }
        let named: Vec<&(String, ReservationId)> = reservations.iter().collect();
        for chunk in named.chunks(ROWS_PER_STATEMENT / 2) {
            for r in self.named_reservations(generation, chunk).await? {
                file_reservation(&mut state, r);
            }
        }
        Ok(state)
    }

    /// The (project, resource, value) rows of `table` for `projects`.
    async fn numbers_of(
        &mut self,
        table: NumberTable,
        generation: i64,
        projects: &[&str],
    ) -> Result<Vec<(String, String, i64)>, ProjectionError> {
        Ok(on_tx!(self, |c, DB| {
            let mut q = QueryBuilder::<DB>::new(table.select());
            q.push(" WHERE generation = ").push_bind(generation);
            q.push(" AND project IN (");
            let mut list = q.separated(", ");
            for p in projects {
                list.push_bind(*p);
            }
            q.push(")");
            q.build_query_as().fetch_all(&mut *c).await?
        }))
    }

    /// The held reservations of `projects`.
    async fn holds(
        &mut self,
        generation: i64,
        projects: &[&str],
    ) -> Result<Vec<StoredReservation>, ProjectionError> {
        let rows: Vec<(String, String, i64, i64, String)> = on_tx!(self, |c, DB| {
            let mut q = QueryBuilder::<DB>::new(
                "SELECT project, reservation_id, held, expires_at_ms, deltas FROM usage_reservations WHERE generation = ",
            );
            q.push_bind(generation).push(" AND project IN (");
            let mut list = q.separated(", ");
            for p in projects {
                list.push_bind(*p);
            }
            // The range (always true) makes SQLite search the partial index of holds; without
            // statistics it otherwise walks the primary key through every committed
            // reservation of the project, which only grows.
            q.push(") AND held = 1 AND expires_at_ms >= ")
                .push_bind(i64::MIN);
            q.build_query_as().fetch_all(&mut *c).await?
        });
        rows.into_iter().map(stored_reservation).collect()
    }

    /// The named reservations, held or committed: the (project, id) pairs joined to the
    /// table, one primary-key lookup each. (Separate `project IN` and `id IN` lists made SQLite
    /// try the product of the two lists, and a row-value `IN` made it scan the generation; both
    /// grew with the table, on every view batch.)
    async fn named_reservations(
        &mut self,
        generation: i64,
        named: &[&(String, ReservationId)],
    ) -> Result<Vec<StoredReservation>, ProjectionError> {
        let named: Vec<(&str, String)> = named
            .iter()
            .map(|(project, id)| (project.as_str(), id.to_string()))
            .collect();
        let rows: Vec<(String, String, i64, i64, String)> = on_tx!(self, |c, DB| {
            // Both backends name the columns of a VALUES list column1, column2.
            let mut q = QueryBuilder::<DB>::new(
                "SELECT r.project, r.reservation_id, r.held, r.expires_at_ms, r.deltas FROM (",
            );
            q.push_values(&named, |mut b, (project, id)| {
                b.push_bind(*project).push_bind(id.as_str());
            });
            q.push(") AS k JOIN usage_reservations r ON r.generation = ")
                .push_bind(generation)
                .push(" AND r.project = k.column1 AND r.reservation_id = k.column2");
            q.build_query_as().fetch_all(&mut *c).await?
        });
        rows.into_iter().map(stored_reservation).collect()
    }

    /// Every reservation of a generation (verify).
    pub(crate) async fn all_reservations(
        &mut self,
        generation: i64,
    ) -> Result<Vec<StoredReservation>, ProjectionError> {
        let rows: Vec<(String, String, i64, i64, String)> = on_tx!(self, |c, DB| {
            sqlx::query_as(
            "SELECT project, reservation_id, held, expires_at_ms, deltas FROM usage_reservations WHERE generation = $1"
        )
        .bind(generation)
        .fetch_all(&mut *c)
        .await?
        });
        rows.into_iter().map(stored_reservation).collect()
    }

    /// Every (project, resource, value) row of `usage_in_use` or `usage_limits` (verify).
    pub(crate) async fn all_numbers(
        &mut self,
        table: NumberTable,
        generation: i64,
    ) -> Result<Vec<(String, String, i64)>, ProjectionError> {
        let sql = format!("{} WHERE generation = $1", table.select());
        Ok(on_tx!(self, |c, DB| sqlx::query_as(&sql)
            .bind(generation)
            .fetch_all(&mut *c)
            .await?))
    }

    /// Rows of the usage view for one project: in_use, limits (its own and the defaults) and
    /// the holds live at `now_ms`.
    pub(crate) async fn project_usage(
        &mut self,
        generation: i64,
        project: &str,
        now_ms: i64,
    ) -> Result<ProjectRows, ProjectionError> {
        let in_use: Vec<(String, i64)> = on_tx!(self, |c, DB| sqlx::query_as(
            "SELECT resource, in_use FROM usage_in_use WHERE generation = $1 AND project = $2"
        )
        .bind(generation)
        .bind(project)
        .fetch_all(&mut *c)
        .await?);
        let limits: Vec<(String, String, i64)> = on_tx!(self, |c, DB| {
            sqlx::query_as(
            "SELECT project, resource, limit_value FROM usage_limits WHERE generation = $1 AND project IN ($2, $3)"
        )
        .bind(generation)
        .bind(project)
        .bind(DEFAULTS_STREAM)
        .fetch_all(&mut *c)
        .await?
        });
        let holds: Vec<(String,)> = on_tx!(self, |c, DB| {
            sqlx::query_as(
            "SELECT deltas FROM usage_reservations WHERE generation = $1 AND project = $2 AND held = 1 AND expires_at_ms > $3"
        )
        .bind(generation)
        .bind(project)
        .bind(now_ms)
        .fetch_all(&mut *c)
        .await?
        });
        let mut rows = ProjectRows::default();
        for (name, value) in in_use {
            rows.in_use.insert(resource(&name)?, value);
        }
        for (owner, name, value) in limits {
            let target = if owner == DEFAULTS_STREAM {
                &mut rows.defaults
            } else {
                &mut rows.overrides
            };
            target.insert(resource(&name)?, value);
        }
        for (deltas,) in holds {
            rows.holds
                .push(parse_deltas(&deltas).ok_or_else(|| corrupt("reservation deltas"))?);
        }
        Ok(rows)
    }
}

#[derive(Debug, Default)]
pub(crate) struct ProjectRows {
    pub in_use: BTreeMap<ResourceName, i64>,
    pub overrides: BTreeMap<ResourceName, i64>,
    pub defaults: BTreeMap<ResourceName, i64>,
    pub holds: Vec<domain::Deltas>,
}

fn stored_reservation(
    (project, id, held, expires_at_ms, deltas): (String, String, i64, i64, String),
) -> Result<StoredReservation, ProjectionError> {
    Ok(StoredReservation {
        project,
        id: ReservationId::parse(&id).map_err(|_| corrupt("reservation id"))?,
        held: held != 0,
        kept: LiveReservation {
            expires_at: chrono::DateTime::from_timestamp_millis(expires_at_ms)
                .ok_or_else(|| corrupt("reservation expiry"))?,
            deltas: parse_deltas(&deltas).ok_or_else(|| corrupt("reservation deltas"))?,
        },
    })
}

/// Files a stored reservation under its project, as held or committed.
fn file_reservation(state: &mut ViewState, r: StoredReservation) {
    let view = state.projects.entry(r.project).or_default();
    if r.held {
        view.hold(r.id, r.kept);
    } else {
        view.committed.insert(r.id, r.kept);
    }
}
