//! Following the feed live: wake when this process appends (the store's head watch, which on
//! PostgreSQL also carries other nodes' NOTIFY), re-check periodically for anything missed,
//! and apply batch after batch until caught up.
//!
//! A batch that fails (an event that does not decode, a database error) is never passed over:
//! the follower tries it again, waiting longer after each failure (100 ms doubling to 30 s),
//! and until one succeeds the views report themselves degraded, with the reason (see
//! [`crate::ViewHealth`]); every failure is counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::checkpoint::Applied;
use crate::limits::{COALESCE_FOR, RECHECK_EVERY, RETRY_AT_MOST, RETRY_FIRST, WAL_FLUSH_EVERY};
use crate::Inner;

/// The wait before the next try after `failures` failures in a row (at least 1).
pub(crate) fn retry_after(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RETRY_FIRST
        .saturating_mul(1 << doublings)
        .min(RETRY_AT_MOST)
}

pub(crate) fn spawn(inner: Arc<Inner>, mut shutdown: watch::Receiver<bool>) {
    let mut head = inner.store.watch_head();
    let mut wanted = inner.wanted.subscribe();
    crate::background::spawn(async move {
        let mut last_wal_flush = Instant::now();
        let mut failures_in_a_row = 0u32;
        loop {
            if *shutdown.borrow() {
                return;
            }
            head.mark_unchanged();
            let applied = inner.apply_next_batch().await;
            if applied.is_ok() && failures_in_a_row > 0 {
                failures_in_a_row = 0;
                inner.health.recovered();
                tracing::info!("the views follow the events again");
            }
            match applied {
                Ok(Applied::Advanced(position)) => {
                    if last_wal_flush.elapsed() >= WAL_FLUSH_EVERY {
                        inner.db.flush_wal();
                        last_wal_flush = Instant::now();
                    }
                    // Under load, wait a moment so the next view transaction carries many
                    // events: its fixed costs (loading the touched state, rewriting the
                    // leaves it touches, an fsync, and on PostgreSQL the views lock) are then
                    // shared, and the rows a batch changes twice (a hold, then its commit)
                    // are written once. Behind by more than a batch, or with a reader
                    // waiting for events not applied yet, go on at once instead.
                    let behind = head.borrow().saturating_sub(position);
                    let awaited = *wanted.borrow_and_update() > position;
                    if behind < crate::limits::BATCH_EVENTS as u64 && !awaited {
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
                    failures_in_a_row = failures_in_a_row.saturating_add(1);
                    let pause = retry_after(failures_in_a_row);
                    inner.health.failed(&error);
                    tracing::error!(
                        error = %error,
                        detail = ?error,
                        retry_in_ms = pause.as_millis() as u64,
                        "a view batch failed; the views wait here and try it again"
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_100_ms_to_30_s() {
        let waits: Vec<u64> = [1, 2, 3, 4, 9, 10, 11, 1000, u32::MAX]
            .into_iter()
            .map(|n| retry_after(n).as_millis() as u64)
            .collect();
        assert_eq!(
            waits,
            [100, 200, 400, 800, 25_600, 30_000, 30_000, 30_000, 30_000]
        );
    }
}
