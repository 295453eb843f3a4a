//! Applying a batch of events to the live views: load the state the batch touches, fold it,
//! write what changed and move the checkpoints, all in one transaction; so a crash at any
//! instant leaves the views either before or after the whole batch, never in between.

use std::sync::atomic::Ordering;

use ledger::Position;

use crate::fold::{batch_keys, ViewState};
use crate::limits::BATCH_EVENTS;
use crate::tables::ViewHead;
use crate::{Inner, ProjectionError};

pub(crate) const USAGE: &str = "usage";
pub(crate) const AUDIT: &str = "audit";

/// Bump when a view's rows would come out differently from the same events: at start, a view
/// built by another code version is rebuilt beside the live one.
pub(crate) const USAGE_CODE_VERSION: i64 = 1;
/// Audit 2: entries carry the principal, and limits entries what they changed. Audit 3:
/// request entries carry the reservation's expiry (the reservation list reads it), and
/// corrections their in_use before and after. Audit 4: entries carry their user. Audit 5: the
/// hierarchy's entries carry their parent or descendant (and deltas, reservation id), and the
/// view keeps each project's parent link (`project_parents`).
pub(crate) const AUDIT_CODE_VERSION: i64 = 5;

pub(crate) fn code_version(name: &str) -> i64 {
    if name == AUDIT {
        AUDIT_CODE_VERSION
    } else {
        USAGE_CODE_VERSION
    }
}

/// What one attempt to apply achieved.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Nothing new to apply.
    UpToDate,
    /// Applied events up to this position.
    Advanced(Position),
    /// Another writer moved the views first; read again.
    Raced,
}

pub(crate) fn head_of<'a>(heads: &'a [ViewHead], name: &str) -> Option<&'a ViewHead> {
    heads.iter().find(|h| h.name == name)
}

/// The lowest position every view has applied.
pub(crate) fn applied_position(heads: &[ViewHead]) -> Position {
    heads.iter().map(|h| h.position).min().unwrap_or(0)
}

impl Inner {
    /// Applies the next batch of events to the live views.
    pub(crate) async fn apply_next_batch(&self) -> Result<Applied, ProjectionError> {
        let mut reader = self.db.begin_read().await?;
        let hint = reader.heads().await?;
        reader.rollback().await?;
        let from = applied_position(&hint);
        // A batch ends before an event that does not decode; the next one fails on it.
        let (decoded, last) = self
            .feed
            .read(from, Position::MAX >> 1, BATCH_EVENTS, true)
            .await?;
        let Some(last) = last else {
            return Ok(Applied::UpToDate);
        };

        let mut tx = self.db.begin_write().await?;
        let heads = tx.heads().await?;
        if heads != hint {
            tx.rollback().await?;
            return Ok(Applied::Raced);
        }
        let (Some(usage), Some(audit)) = (
            head_of(&heads, crate::checkpoint::USAGE),
            head_of(&heads, AUDIT),
        ) else {
            tx.rollback().await?;
            return Err(ProjectionError::CorruptView(
                "projection bookkeeping rows are missing".into(),
            ));
        };
        let (projects, reservations) = batch_keys(&decoded);
        let mut state: ViewState = tx.load(usage.generation, &projects, &reservations).await?;
        state.changes = Some(Default::default());
        // An entry per event, sized once: grown by doubling, a batch of thousands of rows of a
        // few hundred bytes each was copied and faulted in anew several times over.
        let mut audit_rows = Vec::with_capacity(decoded.len());
        for recorded in &decoded {
            // The views move together; should one ever be behind the other, each applies only
            // what it has not seen.
            if recorded.position <= usage.position {
                continue;
            }
            let row = state.apply(recorded, recorded.position > audit.position);
            audit_rows.extend(row);
        }
        let changes = state.changes.take().unwrap_or_default();
        tx.write_changes(usage.generation, &state, &changes).await?;
        tx.insert_audit(audit.generation, &audit_rows).await?;
        if self.fail_before_checkpoint.swap(false, Ordering::SeqCst) {
            // Fault injection for tests: the rows are written, the checkpoint is not; dropping
            // the transaction rolls both back, as a crash here would.
            drop(tx);
            return Err(ProjectionError::Database(
                "injected fault before the checkpoint".into(),
            ));
        }
        for view in [usage, audit] {
            if !tx
                .advance_checkpoint(
                    &view.name,
                    view.generation,
                    view.position,
                    last.max(view.position),
                )
                .await?
            {
                tx.rollback().await?;
                return Ok(Applied::Raced);
            }
        }
        tx.commit().await?;
        // Healthy again before the position is published: whoever sees the views reach a
        // position also sees them no longer degraded.
        self.health.recovered();
        ledger::store::advance_position(&self.applied, last);
        Ok(Applied::Advanced(last))
    }
}
