//! Reads and writes of the view tables, in one transaction type for both backends.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use domain::{Limit, LiveReservation, ReservationId, ResourceName, DEFAULTS_STREAM};
use sqlx::{Postgres, QueryBuilder, Sqlite, Transaction};

use crate::db::{Db, ROWS_PER_STATEMENT};
use crate::fold::{parse_deltas, Changes, ViewState};
use crate::ProjectionError;

/// A transaction on the views' database: a writer's (exclusive among view writers) or a
/// reader's snapshot.
pub(crate) enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

/// Runs `$body` with `$conn` bound to the transaction's connection and `$DB` to its database.
macro_rules! on_tx {
    ($tx:expr, |$conn:ident, $DB:ident| $body:expr) => {
        match $tx {
            Tx::Sqlite(t) => {
                #[allow(dead_code)]
                type $DB = sqlx::Sqlite;
                let $conn = &mut **t;
                $body
            }
            Tx::Postgres(t) => {
                #[allow(dead_code)]
                type $DB = sqlx::Postgres;
                let $conn = &mut **t;
                $body
            }
        }
    };
}
pub(crate) use on_tx;

/// Where a view stands: the generation readers use and the position it has applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ViewHead {
    pub name: String,
    pub generation: i64,
    pub position: u64,
    pub code_version: i64,
}

/// A stored reservation of the usage view.
pub(crate) struct StoredReservation {
    pub project: String,
    pub id: ReservationId,
    pub held: bool,
    pub kept: LiveReservation,
}

fn corrupt(what: &str) -> ProjectionError {
    ProjectionError::CorruptView(what.to_owned())
}

fn limit(value: i64) -> Result<Limit, ProjectionError> {
    Limit::new(value).map_err(|_| corrupt("limit"))
}

fn resource(name: &str) -> Result<ResourceName, ProjectionError> {
    ResourceName::parse(name).map_err(|_| corrupt("resource name"))
}

impl Db {
    pub(crate) async fn begin_write(&self) -> Result<Tx, ProjectionError> {
        Ok(match self {
            Db::Sqlite { write, .. } => Tx::Sqlite(write.begin_with("BEGIN IMMEDIATE").await?),
            Db::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(crate::db::VIEWS_LOCK_KEY)
                    .execute(&mut *tx)
                    .await?;
                Tx::Postgres(tx)
            }
        })
    }

    /// A write transaction for a rebuild's fresh generation, which no one else writes: it
    /// does not take the live views' lock.
    pub(crate) async fn begin_unlocked(&self) -> Result<Tx, ProjectionError> {
        Ok(match self {
            Db::Sqlite { write, .. } => Tx::Sqlite(write.begin_with("BEGIN IMMEDIATE").await?),
            Db::Postgres(pool) => Tx::Postgres(pool.begin().await?),
        })
    }

    pub(crate) async fn begin_read(&self) -> Result<Tx, ProjectionError> {
        Ok(match self {
            Db::Sqlite { read, .. } => Tx::Sqlite(read.begin().await?),
            Db::Postgres(pool) => Tx::Postgres(
                pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .await?,
            ),
        })
    }
}

impl Tx {
    /// The verb of a multi-row insert. On SQLite, `OR FAIL`: a statement that may abort
    /// halfway must first copy every page it changes into a statement journal, to undo just
    /// itself; with 16 KiB pages that journal spills to a temporary file, a cost on every view
    /// batch (docs/BENCHMARKS.md, "Figures behind the code"). `OR FAIL` keeps the rows
    /// written before a failing one; every caller drops the whole transaction on any error,
    /// so nothing of a failed statement is ever committed.
    pub(crate) fn multi_row_insert(&self) -> &'static str {
        match self {
            Tx::Sqlite(_) => "INSERT OR FAIL INTO",
            Tx::Postgres(_) => "INSERT INTO",
        }
    }

    pub(crate) async fn commit(self) -> Result<(), ProjectionError> {
        match self {
            Tx::Sqlite(t) => t.commit().await?,
            Tx::Postgres(t) => t.commit().await?,
        }
        Ok(())
    }

    pub(crate) async fn rollback(self) -> Result<(), ProjectionError> {
        match self {
            Tx::Sqlite(t) => t.rollback().await?,
            Tx::Postgres(t) => t.rollback().await?,
        }
        Ok(())
    }

    /// Creates a view's bookkeeping rows on first use.
    pub(crate) async fn ensure_view(&mut self, name: &str) -> Result<(), ProjectionError> {
        on_tx!(self, |c, DB| {
            sqlx::query(
                "INSERT INTO projection_state (name, active_generation, code_version) VALUES ($1, 1, $2) \
                 ON CONFLICT (name) DO NOTHING",
            )
            .bind(name)
            .bind(crate::checkpoint::code_version(name))
            .execute(&mut *c)
            .await?;
            sqlx::query(
                "INSERT INTO projection_checkpoints (name, generation, position) \
                 SELECT name, active_generation, 0 FROM projection_state WHERE name = $1 \
                 ON CONFLICT (name, generation) DO NOTHING",
            )
            .bind(name)
            .execute(&mut *c)
            .await?;
        });
        Ok(())
    }

    pub(crate) async fn heads(&mut self) -> Result<Vec<ViewHead>, ProjectionError> {
        let rows: Vec<(String, i64, i64, i64)> = on_tx!(self, |c, DB| sqlx::query_as(
            "SELECT s.name, s.active_generation, s.code_version, COALESCE(c.position, 0) \
             FROM projection_state s LEFT JOIN projection_checkpoints c \
             ON c.name = s.name AND c.generation = s.active_generation ORDER BY s.name"
        )
        .fetch_all(&mut *c)
        .await?);
        Ok(rows
            .into_iter()
            .map(|(name, generation, code_version, position)| ViewHead {
                name,
                generation,
                position: crate::db::to_u64(position),
                code_version,
            })
            .collect())
    }

    /// Moves a checkpoint from `from` to `to`; false (and nothing written) when it was not at
    /// `from`: another writer applied those events first.
    pub(crate) async fn advance_checkpoint(
        &mut self,
        name: &str,
        generation: i64,
        from: u64,
        to: u64,
    ) -> Result<bool, ProjectionError> {
        let updated = on_tx!(self, |c, DB| {
            sqlx::query(
            "UPDATE projection_checkpoints SET position = $1 WHERE name = $2 AND generation = $3 AND position = $4"
        )
        .bind(crate::db::to_i64(to))
        .bind(name)
        .bind(generation)
        .bind(crate::db::to_i64(from))
        .execute(&mut *c)
        .await?
        .rows_affected()
        });
        Ok(updated == 1)
    }

    pub(crate) async fn set_checkpoint(
        &mut self,
        name: &str,
        generation: i64,
        position: u64,
    ) -> Result<(), ProjectionError> {
        on_tx!(self, |c, DB| {
            sqlx::query(
            "INSERT INTO projection_checkpoints (name, generation, position) VALUES ($1, $2, $3) \
             ON CONFLICT (name, generation) DO UPDATE SET position = excluded.position"
        )
        .bind(name)
        .bind(generation)
        .bind(crate::db::to_i64(position))
        .execute(&mut *c)
        .await?;
        });
        Ok(())
    }

    pub(crate) async fn delete_checkpoint(
        &mut self,
        name: &str,
        generation: i64,
    ) -> Result<(), ProjectionError> {
        on_tx!(self, |c, DB| {
            sqlx::query("DELETE FROM projection_checkpoints WHERE name = $1 AND generation = $2")
                .bind(name)
                .bind(generation)
                .execute(&mut *c)
                .await?;
        });
        Ok(())
    }

    /// Switches readers and the follower to `generation`: the swap of a rebuild.
    pub(crate) async fn activate(
        &mut self,
        name: &str,
        generation: i64,
        code_version: i64,
    ) -> Result<(), ProjectionError> {
        on_tx!(self, |c, DB| {
            sqlx::query(
            "UPDATE projection_state SET active_generation = $1, code_version = $2 WHERE name = $3"
        )
        .bind(generation)
        .bind(code_version)
        .bind(name)
        .execute(&mut *c)
        .await?;
        });
        Ok(())
    }

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
            let rows: Vec<(String, String, i64)> = on_tx!(self, |c, DB| {
                let mut q = QueryBuilder::<DB>::new(
                    "SELECT project, resource, limit_value FROM usage_limits WHERE generation = ",
                );
                q.push_bind(generation).push(" AND project IN (");
                let mut list = q.separated(", ");
                for p in chunk {
                    list.push_bind(*p);
                }
                q.push(")");
                q.build_query_as().fetch_all(&mut *c).await?
            });
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
            let rows: Vec<(String, String, i64)> = on_tx!(self, |c, DB| {
                let mut q = QueryBuilder::<DB>::new(
                    "SELECT project, resource, in_use FROM usage_in_use WHERE generation = ",
                );
                q.push_bind(generation).push(" AND project IN (");
                let mut list = q.separated(", ");
                for p in chunk {
                    list.push_bind(*p);
                }
                q.push(")");
                q.build_query_as().fetch_all(&mut *c).await?
            });
            for (project, name, in_use) in rows {
                state
                    .projects
                    .entry(project)
                    .or_default()
                    .in_use
                    .insert(resource(&name)?, in_use);
            }
            let held = self.holds(generation, chunk).await?;
            for r in held {
                let view = state.projects.entry(r.project).or_default();
                if r.held {
                    view.held.insert(r.id, r.kept);
                } else {
                    view.committed.insert(r.id, r.kept);
                }
            }
        }
        let named: Vec<&(String, ReservationId)> = reservations.iter().collect();
        for chunk in named.chunks(ROWS_PER_STATEMENT / 2) {
            for r in self.named_reservations(generation, chunk).await? {
                let view = state.projects.entry(r.project).or_default();
                if r.held {
                    view.held.insert(r.id, r.kept);
                } else {
                    view.committed.insert(r.id, r.kept);
                }
            }
        }
        Ok(state)
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
        let sql = match table {
            NumberTable::InUse => {
                "SELECT project, resource, in_use FROM usage_in_use WHERE generation = $1"
            }
            NumberTable::Limits => {
                "SELECT project, resource, limit_value FROM usage_limits WHERE generation = $1"
            }
        };
        Ok(on_tx!(self, |c, DB| sqlx::query_as(sql)
            .bind(generation)
            .fetch_all(&mut *c)
            .await?))
    }

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
            if let Some(k) = view.and_then(|v| v.held.get(id)) {
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

    /// The generations that have rows in `table`.
    pub(crate) async fn generations_in_use(
        &mut self,
        table: &str,
    ) -> Result<Vec<i64>, ProjectionError> {
        let sql = format!("SELECT DISTINCT generation FROM {table}");
        Ok(on_tx!(self, |c, DB| sqlx::query_scalar(&sql)
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

#[derive(Clone, Copy, Debug)]
pub(crate) enum NumberTable {
    InUse,
    Limits,
}

/// One slice of a full state to write.
#[derive(Default)]
pub(crate) struct FullPart<'a> {
    pub in_use: Vec<(&'a str, &'a ResourceName, i64)>,
    pub limits: Vec<(&'a str, &'a ResourceName, i64)>,
    pub reservations: Vec<(&'a str, ReservationId, bool, &'a LiveReservation)>,
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
