//! Rebuilding views without downtime (blue/green): fold the whole log in memory into a fresh
//! generation beside the live one, catch it up, then switch readers and the follower to it in
//! one transaction, and delete the old generation afterwards. Readers use the live generation
//! until the switch and the new one after; they never see a half-built view.

use std::sync::Arc;

use ledger::Position;

use crate::checkpoint::{applied_position, code_version, head_of, Applied, AUDIT, USAGE};
use crate::db::Db;
use crate::feed::{Feed, FeedEvent};
use crate::fold::ViewState;
use crate::limits::{
    BATCH_EVENTS, DELETES_PER_TRANSACTION, PAGES_AHEAD, PAGE_EVENTS, ROWS_PER_TRANSACTION,
};
use crate::tables::{FullPart, ViewHead};
use crate::{Inner, ProjectionError};

/// The tables of each view, with their keys (for bounded deletes).
fn tables(view: &str) -> &'static [(&'static str, &'static str)] {
    if view == AUDIT {
        &[
            ("audit_entries", "generation, position"),
            ("audit_projects", "generation, project"),
            ("project_parents", "generation, project"),
        ]
    } else {
        &[
            ("usage_in_use", "generation, project, resource"),
            ("usage_limits", "generation, project, resource"),
            ("usage_reservations", "generation, project, reservation_id"),
        ]
    }
}

pub(crate) type Progress<'a> = &'a (dyn Fn(u64, u64) + Send + Sync);

/// The fresh copy being built.
struct Target {
    name: &'static str,
    generation: i64,
    old_generation: i64,
}

/// A page being read and decoded in the background.
type PageRead =
    tokio::task::JoinHandle<Result<(Vec<FeedEvent>, Option<Position>), ProjectionError>>;

/// Reads the feed page by page, fetching the next pages while the caller folds the current.
/// Pages are position ranges, so several can be read and decoded at once (on SQLite, on
/// separate read connections).
pub(crate) struct Pages {
    feed: Feed,
    ahead: std::collections::VecDeque<PageRead>,
    /// The end of the last range requested.
    requested: Position,
    until: Position,
}

impl Pages {
    pub(crate) fn new(feed: Feed, after: Position, until: Position) -> Pages {
        let mut pages = Pages {
            feed,
            ahead: Default::default(),
            requested: after,
            until,
        };
        pages.fill();
        pages
    }

    fn fill(&mut self) {
        while self.ahead.len() < PAGES_AHEAD && self.requested < self.until {
            let after = self.requested;
            let to = after.saturating_add(PAGE_EVENTS as u64).min(self.until);
            self.requested = to;
            let feed = self.feed.clone();
            self.ahead.push_back(tokio::spawn(async move {
                // Every event of the range, or an error: a page is never cut short.
                feed.read(after, to, PAGE_EVENTS, false).await
            }));
        }
    }

    /// The next page (possibly empty), or `None` at the end.
    pub(crate) async fn next(&mut self) -> Result<Option<Vec<FeedEvent>>, ProjectionError> {
        let Some(handle) = self.ahead.pop_front() else {
            return Ok(None);
        };
        let (page, _) = handle
            .await
            .map_err(|_| ProjectionError::Database("event reader task failed".into()))??;
        self.fill();
        Ok(Some(page))
    }
}

impl Drop for Pages {
    fn drop(&mut self) {
        for handle in &self.ahead {
            handle.abort();
        }
    }
}

/// Holds the cluster-wide rebuild lock on PostgreSQL for as long as it lives: a connection of
/// its own, closed (and so unlocked) when dropped, even if the rebuild is cancelled.
struct RebuildLock(#[allow(dead_code)] Option<sqlx::PgConnection>);

async fn rebuild_lock(db: &Db) -> Result<RebuildLock, ProjectionError> {
    match db {
        Db::Sqlite { .. } => Ok(RebuildLock(None)),
        Db::Postgres(pool) => {
            let mut conn = pool.acquire().await?.detach();
            sqlx::query("SELECT pg_advisory_lock($1)")
                .bind(crate::db::REBUILD_LOCK_KEY)
                .execute(&mut conn)
                .await?;
            Ok(RebuildLock(Some(conn)))
        }
    }
}

impl Inner {
    /// Rebuilds `views` (all when `outdated_only` finds them built by other code) and returns
    /// once readers use the new copies.
    pub(crate) async fn rebuild(
        self: &Arc<Self>,
        views: &[&'static str],
        outdated_only: bool,
        progress: Progress<'_>,
    ) -> Result<(), ProjectionError> {
        let _local = self.rebuild_lock.lock().await;
        let _cluster = rebuild_lock(&self.db).await?;

        let mut tx = self.db.begin_read().await?;
        let heads = tx.heads().await?;
        tx.rollback().await?;
        let mut targets = Vec::new();
        for name in views {
            let head = head_of(&heads, name).ok_or_else(|| {
                ProjectionError::CorruptView("projection bookkeeping rows are missing".into())
            })?;
            if outdated_only && head.code_version == code_version(name) {
                continue;
            }
            targets.push(Target {
                name,
                generation: head.generation + 1,
                old_generation: head.generation,
            });
        }
        if targets.is_empty() {
            return Ok(());
        }
        for target in &targets {
            self.drop_generations(target.name, |g| g != target.old_generation)
                .await?;
            let mut tx = self.db.begin_unlocked().await?;
            tx.set_checkpoint(target.name, target.generation, 0).await?;
            tx.commit().await?;
        }
        let rebuild_all = targets.len() == crate::PROJECTION_NAMES.len();
        let usage_gen = targets
            .iter()
            .find(|t| t.name == USAGE)
            .map(|t| t.generation);
        let audit_gen = targets
            .iter()
            .find(|t| t.name == AUDIT)
            .map(|t| t.generation);

        // 1. Fold the log up to its head in memory; audit rows are written as they come.
        let total = self.store.head().await?;
        let mut state = ViewState::default();
        let phase = std::time::Instant::now();
        let mut position = self.fold(&mut state, 0, total, audit_gen, progress).await?;
        tracing::info!(
            elapsed_ms = phase.elapsed().as_millis() as u64,
            position,
            "rebuild: folded the log"
        );
        let phase = std::time::Instant::now();

        // 2. Write the folded usage state in bulk.
        if let Some(generation) = usage_gen {
            self.write_full(generation, &state).await?;
        }
        self.set_checkpoints(&targets, position).await?;
        self.db.flush_wal();
        tracing::info!(
            elapsed_ms = phase.elapsed().as_millis() as u64,
            "rebuild: wrote the folded state"
        );
        let phase = std::time::Instant::now();

        // 3. Catch up beside the live views, then switch in one transaction at the position the
        //    live views have reached, so no view ever moves backwards.
        state.changes = Some(Default::default());
        loop {
            let mut tx = self.db.begin_read().await?;
            let live = applied_position(&tx.heads().await?);
            tx.rollback().await?;
            if live < position && !rebuild_all {
                // The views not rebuilt must reach the new copy's position before the switch,
                // since the follower applies all views together.
                match self.apply_next_batch().await? {
                    Applied::UpToDate => {
                        return Err(ProjectionError::Database(
                            "the live views cannot reach the rebuilt position".into(),
                        ));
                    }
                    Applied::Advanced(_) | Applied::Raced => continue,
                }
            }
            if live > position + BATCH_EVENTS as u64 {
                position = self
                    .fold(&mut state, position, live, audit_gen, progress)
                    .await?;
                self.write_changes(&mut state, usage_gen, &targets, position)
                    .await?;
                continue;
            }
            if self
                .switch(
                    &mut state,
                    &mut position,
                    &targets,
                    rebuild_all,
                    audit_gen,
                    usage_gen,
                )
                .await?
            {
                break;
            }
        }
        progress(position, position.max(total));
        tracing::info!(
            elapsed_ms = phase.elapsed().as_millis() as u64,
            "rebuild: caught up and switched"
        );

        // 4. The old copies are no longer read: delete them in the background. Should the
        //    process stop first, the next rebuild deletes what is left (any generation that
        //    is not active).
        let old: Vec<(&'static str, i64)> =
            targets.iter().map(|t| (t.name, t.old_generation)).collect();
        let inner = self.clone();
        tokio::spawn(async move {
            for (name, generation) in old {
                if let Err(error) = inner.drop_old_copy(name, generation).await {
                    tracing::warn!(error = ?error, view = name, "deleting the old copy of a view failed");
                }
            }
        });
        Ok(())
    }

    async fn drop_old_copy(&self, name: &str, generation: i64) -> Result<(), ProjectionError> {
        let phase = std::time::Instant::now();
        self.drop_generations(name, |g| g == generation).await?;
        let mut tx = self.db.begin_unlocked().await?;
        tx.delete_checkpoint(name, generation).await?;
        tx.commit().await?;
        self.db.flush_wal();
        tracing::info!(
            elapsed_ms = phase.elapsed().as_millis() as u64,
            view = name,
            "rebuild: deleted the old copy"
        );
        Ok(())
    }

    /// The switch: under the live views' lock, fold what they have applied beyond the new
    /// copy, then make the new generations active. False when the live views are behind.
    async fn switch(
        &self,
        state: &mut ViewState,
        position: &mut Position,
        targets: &[Target],
        rebuild_all: bool,
        audit_gen: Option<i64>,
        usage_gen: Option<i64>,
    ) -> Result<bool, ProjectionError> {
        let mut tx = self.db.begin_write().await?;
        let heads: Vec<ViewHead> = tx.heads().await?;
        let live = applied_position(&heads);
        if live < *position && !rebuild_all {
            tx.rollback().await?;
            return Ok(false);
        }
        let to = live.max(*position);
        let mut audit_rows = Vec::new();
        let mut pages = Pages::new(self.feed.clone(), *position, to);
        while let Some(page) = pages.next().await? {
            for recorded in &page {
                audit_rows.extend(state.apply(recorded, audit_gen.is_some()));
            }
        }
        if let Some(generation) = usage_gen {
            let changes = state
                .changes
                .replace(Default::default())
                .unwrap_or_default();
            tx.write_changes(generation, state, &changes).await?;
        }
        if let Some(generation) = audit_gen {
            tx.insert_audit(generation, &audit_rows).await?;
        }
        for target in targets {
            tx.set_checkpoint(target.name, target.generation, to)
                .await?;
            tx.activate(target.name, target.generation, code_version(target.name))
                .await?;
        }
        tx.commit().await?;
        *position = to;
        ledger::store::advance_position(&self.applied, to);
        Ok(true)
    }

    /// Folds events in (`after`, `until`] into `state`, writing audit rows to `audit_gen` as it
    /// goes; returns the last position folded.
    async fn fold(
        &self,
        state: &mut ViewState,
        after: Position,
        until: Position,
        audit_gen: Option<i64>,
        progress: Progress<'_>,
    ) -> Result<Position, ProjectionError> {
        let mut position = after;
        let mut pages = Pages::new(self.feed.clone(), after, until);
        let mut pages_written = 0u64;
        while let Some(page) = pages.next().await? {
            // An entry per event, sized once (as a live batch's, see `checkpoint`).
            let mut audit_rows = Vec::with_capacity(page.len());
            for recorded in &page {
                audit_rows.extend(state.apply(recorded, audit_gen.is_some()));
                position = recorded.position;
            }
            if let Some(generation) = audit_gen {
                let mut tx = self.db.begin_unlocked().await?;
                tx.insert_audit(generation, &audit_rows).await?;
                tx.commit().await?;
                pages_written += 1;
                if pages_written.is_multiple_of(10) {
                    self.db.flush_wal();
                }
            }
            progress(position, until);
        }
        // Every range up to `until` was read (positions have no gaps, and a read fails rather
        // than leave out an event it cannot decode).
        Ok(until.max(after))
    }

    async fn write_changes(
        &self,
        state: &mut ViewState,
        usage_gen: Option<i64>,
        targets: &[Target],
        position: Position,
    ) -> Result<(), ProjectionError> {
        let changes = state
            .changes
            .replace(Default::default())
            .unwrap_or_default();
        let mut tx = self.db.begin_unlocked().await?;
        if let Some(generation) = usage_gen {
            tx.write_changes(generation, state, &changes).await?;
        }
        for target in targets {
            tx.set_checkpoint(target.name, target.generation, position)
                .await?;
        }
        tx.commit().await
    }

    async fn set_checkpoints(
        &self,
        targets: &[Target],
        position: Position,
    ) -> Result<(), ProjectionError> {
        let mut tx = self.db.begin_unlocked().await?;
        for target in targets {
            tx.set_checkpoint(target.name, target.generation, position)
                .await?;
        }
        tx.commit().await
    }

    /// Writes a whole folded usage state into an empty generation, a bounded slice per
    /// transaction.
    async fn write_full(&self, generation: i64, state: &ViewState) -> Result<(), ProjectionError> {
        let defaults = domain::DEFAULTS_STREAM;
        let mut part = FullPart::default();
        part.limits.extend(
            state
                .defaults
                .limits
                .iter()
                .map(|(r, l)| (defaults, r, l.value())),
        );
        // In key order, so every insert appends to the tables' B-trees.
        let mut projects: Vec<(&String, &domain::ProjectUsage)> = state.projects.iter().collect();
        projects.sort_unstable_by_key(|(project, _)| *project);
        for (project, view) in projects {
            let p = project.as_str();
            part.in_use
                .extend(view.in_use.iter().map(|(r, v)| (p, r, *v)));
            part.limits
                .extend(view.overrides.iter().map(|(r, l)| (p, r, l.value())));
            let first = part.reservations.len();
            part.reservations
                .extend(view.held().iter().map(|(id, k)| (p, *id, true, k)));
            part.reservations
                .extend(view.committed.iter().map(|(id, k)| (p, *id, false, k)));
            part.reservations[first..].sort_unstable_by_key(|(_, id, _, _)| *id);
            if part.in_use.len() + part.limits.len() + part.reservations.len()
                >= ROWS_PER_TRANSACTION
            {
                let mut tx = self.db.begin_unlocked().await?;
                tx.write_full_chunk(generation, &part).await?;
                tx.commit().await?;
                part = FullPart::default();
            }
        }
        let mut tx = self.db.begin_unlocked().await?;
        tx.write_full_chunk(generation, &part).await?;
        tx.commit().await
    }

    /// Deletes the rows of a view's generations that `doomed` picks, in bounded transactions.
    async fn drop_generations(
        &self,
        view: &str,
        doomed: impl Fn(i64) -> bool,
    ) -> Result<(), ProjectionError> {
        for (table, key) in tables(view) {
            let mut tx = self.db.begin_read().await?;
            let generations = tx.generations_in_use(table).await?;
            tx.rollback().await?;
            for generation in generations.into_iter().filter(|g| doomed(*g)) {
                loop {
                    let mut tx = self.db.begin_unlocked().await?;
                    let deleted = tx
                        .delete_generation_rows(table, key, generation, DELETES_PER_TRANSACTION)
                        .await?;
                    tx.commit().await?;
                    if deleted < DELETES_PER_TRANSACTION as u64 {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}
