//! Following the feed live: wake when this process appends (the store's head watch, which on
//! PostgreSQL also carries other nodes' NOTIFY), re-check periodically for anything missed,
//! and apply batch after batch until caught up.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::checkpoint::Applied;
use crate::Inner;

/// How often the follower looks for events without being woken (other nodes, lost wakes).
const RECHECK_EVERY: Duration = Duration::from_millis(500);
/// Wait after a failure before trying again (the database may be restarting).
const RETRY_AFTER: Duration = Duration::from_millis(200);

pub(crate) fn spawn(inner: Arc<Inner>, mut shutdown: watch::Receiver<bool>) {
    let mut head = inner.store.watch_head();
    tokio::spawn(async move {
        loop {
            if *shutdown.borrow() {
                return;
            }
            head.mark_unchanged();
            match inner.apply_next_batch().await {
                Ok(Applied::Advanced(_)) | Ok(Applied::Raced) => continue,
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
