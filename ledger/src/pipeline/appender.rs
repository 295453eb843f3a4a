//! Group commit: one task takes every queued append (up to the batch bounds), writes them in one
//! transaction, and answers each request with its own result. Fencing lives here too: a failed
//! append moves its slot's epoch on, so appends decided on that slot's speculation are
//! refused before they reach the store.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::cache::Slot;
use super::{LedgerError, LedgerStats};
use crate::limits::APPENDER_YIELDS;
use crate::store::{AppendResult, EventStore, StoreError, StreamAppend, MAX_BATCH_EVENTS};

/// The slot an append was decided on, and the epoch its state had then: the append is
/// written only if the slot is still at that epoch when its batch is formed.
pub(super) struct Fence {
    pub(super) slot: Arc<Slot>,
    pub(super) epoch: u64,
}

type Reply = oneshot::Sender<Result<AppendResult, StoreError>>;

struct AppendRequest {
    append: StreamAppend,
    fence: Option<Fence>,
    reply: Reply,
}

/// The queue into the appender task; the task stops once this is dropped.
pub(super) struct Appender {
    queue: mpsc::Sender<AppendRequest>,
}

impl Appender {
    /// Spawns the appender task.
    pub(super) fn start(
        store: Arc<dyn EventStore>,
        queue_capacity: usize,
        max_batch_appends: usize,
        stats: Arc<LedgerStats>,
    ) -> Appender {
        let (queue, requests) = mpsc::channel(queue_capacity);
        tokio::spawn(run_appender(store, requests, max_batch_appends, stats));
        Appender { queue }
    }

    /// Queues `append`; the receiver answers once its batch is written (or refused).
    pub(super) async fn enqueue(
        &self,
        append: StreamAppend,
        fence: Option<Fence>,
    ) -> Result<oneshot::Receiver<Result<AppendResult, StoreError>>, LedgerError> {
        let (reply, rx) = oneshot::channel();
        self.queue
            .send(AppendRequest {
                append,
                fence,
                reply,
            })
            .await
            .map_err(|_| LedgerError::ShuttingDown)?;
        Ok(rx)
    }

    /// Queues `append` and waits for its result.
    pub(super) async fn send(
        &self,
        append: StreamAppend,
        fence: Option<Fence>,
    ) -> Result<AppendResult, LedgerError> {
        let rx = self.enqueue(append, fence).await?;
        Ok(rx.await.map_err(|_| LedgerError::ShuttingDown)??)
    }
}

/// The group-commit loop: takes everything queued (up to the batch bounds), writes it in one
/// transaction, answers each request with its own result.
async fn run_appender(
    store: Arc<dyn EventStore>,
    mut queue: mpsc::Receiver<AppendRequest>,
    max_batch_appends: usize,
    stats: Arc<LedgerStats>,
) {
    let mut held_over: Option<AppendRequest> = None;
    loop {
        // The clients just answered are about to send their next request; let them run first,
        // so it joins the next batch instead of waiting for the one after. Costs nothing idle.
        for _ in 0..APPENDER_YIELDS {
            tokio::task::yield_now().await;
        }
        let first = match held_over.take() {
            Some(request) => request,
            None => match queue.recv().await {
                Some(request) => request,
                None => return,
            },
        };
        let mut batch = vec![first];
        let mut events = batch[0].append.events.len();
        while batch.len() < max_batch_appends {
            match queue.try_recv() {
                Ok(request) => {
                    if events + request.append.events.len() > MAX_BATCH_EVENTS {
                        held_over = Some(request);
                        break;
                    }
                    events += request.append.events.len();
                    batch.push(request);
                }
                Err(_) => break,
            }
        }

        let mut appends = Vec::with_capacity(batch.len());
        let mut waiters = Vec::with_capacity(batch.len());
        for request in batch {
            if let Some(fence) = &request.fence {
                if fence.slot.epoch.load(Ordering::SeqCst) != fence.epoch {
                    // Decided on speculation that failed: never write it.
                    let _ = request.reply.send(Ok(AppendResult::Conflict {
                        expected: request.append.expected,
                        actual: None,
                    }));
                    continue;
                }
            }
            appends.push(request.append);
            waiters.push((request.fence, request.reply));
        }
        if appends.is_empty() {
            continue;
        }

        let started = std::time::Instant::now();
        let outcome = store.append(&appends).await;
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats
            .batch_appends
            .fetch_add(appends.len() as u64, Ordering::Relaxed);
        stats
            .batch_events
            .fetch_add(events as u64, Ordering::Relaxed);
        stats
            .batch_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        match outcome {
            Ok(results) => {
                debug_assert_eq!(results.len(), waiters.len());
                for ((fence, reply), result) in waiters.into_iter().zip(results) {
                    if result.is_conflict() {
                        fail_fence(&fence);
                    }
                    let _ = reply.send(Ok(result));
                }
            }
            Err(error) => {
                tracing::warn!(%error, appends = appends.len(), "group commit failed");
                for (fence, reply) in waiters {
                    fail_fence(&fence);
                    let _ = reply.send(Err(error.clone()));
                }
                if matches!(error, StoreError::Unavailable(_)) {
                    // Do not spin on a store that is down; requests keep failing fast meanwhile.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
    }
}

fn fail_fence(fence: &Option<Fence>) {
    if let Some(Fence { slot, epoch }) = fence {
        // Only the first failure of an epoch moves it on.
        let _ = slot
            .epoch
            .compare_exchange(*epoch, epoch + 1, Ordering::SeqCst, Ordering::SeqCst);
    }
}
