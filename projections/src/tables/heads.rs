//! A view's bookkeeping: its rows in `projection_state` and `projection_checkpoints` (the
//! generation readers use, the position each generation has applied), and rebuild swaps.

use super::{on_tx, Tx, ViewHead};
use crate::ProjectionError;

impl Tx {
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

    /// One view's head; a view without its bookkeeping rows is corrupt.
    pub(crate) async fn head(&mut self, name: &str) -> Result<ViewHead, ProjectionError> {
        let heads = self.heads().await?;
        crate::checkpoint::head_of(&heads, name)
            .cloned()
            .ok_or_else(|| {
                ProjectionError::CorruptView(format!("{name} view bookkeeping is missing"))
            })
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
}
