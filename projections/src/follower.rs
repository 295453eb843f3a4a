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
/// How long, after applying a batch, the follower lets new events gather before the next,
/// unless a reader waits for them (`Projections::wait_for`). Views lag the ledger by up to
/// this much under load, which SPEC.md allows; in exchange the views' file takes a few large
/// transactions a second instead of dozens. On a shared disk that matters to the ledger: a
/// view transaction's fsync writes megabytes, and the ledger's small fsyncs queue behind it.
/// Measured with `quota bench --workload fleet` (SQLite, 2 cores, 8 s, interleaved): with
/// 20 ms and 5,000-event batches the views wrote 106 MB/s of WAL and the ledger's WAL fsync
/// took 3.1 ms at p99; with 500 ms and 20,000-event batches 46 MB/s and 1.1 ms, and boots/s
/// rose from 9.5–9.9k to 10.8–11.1k.
const COALESCE_FOR: Duration = Duration::from_millis(500);
/// How often, while views are written, their WAL is copied back into their file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);
/// Wait after a failure before trying again (the database may be restarting).
const RETRY_AFTER: Duration = Duration::from_millis(200);

pub(crate) fn spawn(inner: Arc<Inner>, mut shutdown: watch::Receiver<bool>) {
    let mut head = inner.store.watch_head();
    let mut wanted = inner.wanted.subscribe();
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
                    // events: its fixed costs (loading the touched state, rewriting the
                    // leaves it touches, an fsync, and on PostgreSQL the views lock) are then
                    // shared, and the rows a batch changes twice (a hold, then its commit)
                    // are written once. Behind by more than a batch, or with a reader
                    // waiting for events not applied yet, go on at once instead.
                    let behind = head.borrow().saturating_sub(position);
                    let awaited = *wanted.borrow_and_update() > position;
                    if behind < crate::checkpoint::BATCH_EVENTS as u64 && !awaited {
                        tokio::select! {
                            _ = tokio::time::sleep(COALESCE_FOR) => {}
                            _ = wanted.changed() => {}
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
