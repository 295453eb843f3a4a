//! Following the feed live: wake when this process appends (the store's head watch, which on
//! PostgreSQL also carries other nodes' NOTIFY), re-check periodically for anything missed,
//! and apply batch after batch until caught up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::checkpoint::Applied;
use crate::Inner;

/// How often the follower looks for events without being woken (other nodes, lost wakes).
const RECHECK_EVERY: Duration = Duration::from_millis(500);
/// How long new events may wait to be applied together with the ones that follow them.
const COALESCE_FOR: Duration = Duration::from_millis(20);
/// How often, while views are written, their WAL is copied back into their file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);
/// Wait after a failure before trying again (the database may be restarting).
const RETRY_AFTER: Duration = Duration::from_millis(200);

pub(crate) fn spawn(inner: Arc<Inner>, mut shutdown: watch::Receiver<bool>) {
    let mut head = inner.store.watch_head();
    crate::background::spawn(async move {
        let mut last_checkpoint = Instant::now();
        loop {
            if *shutdown.borrow() {
                return;
            }
            head.mark_unchanged();
            match inner.apply_next_batch().await {
                Ok(Applied::Advanced(position)) => {
                    if last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
                        inner.db.checkpoint_wal();
                        last_checkpoint = Instant::now();
                    }
                    // Under load, wait a moment so the next view transaction carries many
                    // events: its fixed costs (loading the touched state, an fsync, and on
                    // PostgreSQL the views lock) are then shared, and the rows a batch
                    // changes twice (a hold, then its commit) are written once. Behind by
                    // more than a batch, catch up at once instead.
                    let behind = head.borrow().saturating_sub(position);
                    if behind < crate::checkpoint::BATCH_EVENTS as u64 {
                        tokio::select! {
                            _ = tokio::time::sleep(COALESCE_FOR) => {}
                            _ = shutdown.changed() => return,
                        }
                    }
                    continue;
                }
                Ok(Applied::Raced) => continue,
                Ok(Applied::UpToDate) => {}
                Err(error) => {
                    tracing::warn!(error = ?error, "projection follower failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(RETRY_AFTER) => {}
                        _ = shutdown.changed() => return,
                    }
                    continue;
                }
            }
            tokio::select! {
                changed = head.changed() => {
                    if changed.is_err() {
                        // The store is gone; keep polling until shut down.
                        tokio::time::sleep(RECHECK_EVERY).await;
                    }
                }
                _ = tokio::time::sleep(RECHECK_EVERY) => {}
                _ = shutdown.changed() => return,
            }
        }
    });
}
