//! Group commit: one task takes every queued append (up to the batch bounds), writes them in one
//! transaction, and answers each request with its own result. Fencing lives here too: a failed
//! append moves its slot's epoch on, so appends decided on that slot's speculation are
//! refused before they reach the store.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot::error::RecvError;
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

type Reply = oneshot::Sender<Result<Vec<AppendResult>, StoreError>>;

/// One append, or a chain of linked appends (a decision whose consistency boundary spans
/// several streams), each with the fence of the slot it was decided on.
struct AppendRequest {
    appends: Vec<StreamAppend>,
    fences: Vec<Option<Fence>>,
    reply: Reply,
}

impl AppendRequest {
    fn events(&self) -> usize {
        self.appends.iter().map(|a| a.events.len()).sum()
    }

    /// Whether every slot the request was decided on is still at the epoch it was decided in.
    fn is_fenced_in(&self) -> bool {
        self.fences
            .iter()
            .flatten()
            .all(|fence| fence.slot.epoch.load(Ordering::SeqCst) == fence.epoch)
    }
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

    /// Queues `append`; the future answers once its batch is written (or refused).
    pub(super) async fn enqueue(
        &self,
        append: StreamAppend,
        fence: Option<Fence>,
    ) -> Result<
        impl std::future::Future<Output = Result<Result<AppendResult, StoreError>, RecvError>>,
        LedgerError,
    > {
        let rx = self.enqueue_chain(vec![append], vec![fence]).await?;
        Ok(async move {
            let results = rx.await?;
            Ok(results.map(|mut results| results.pop().expect("one result per append")))
        })
    }

    /// Queues `appends` as one linked chain: written whole or not at all, in one batch. The
    /// receiver answers each append's result, in order.
    pub(super) async fn enqueue_chain(
        &self,
        mut appends: Vec<StreamAppend>,
        fences: Vec<Option<Fence>>,
    ) -> Result<oneshot::Receiver<Result<Vec<AppendResult>, StoreError>>, LedgerError> {
        assert!(!appends.is_empty() && appends.len() == fences.len());
        let last = appends.len() - 1;
        for (i, append) in appends.iter_mut().enumerate() {
            append.linked = i < last;
        }
        let (reply, rx) = oneshot::channel();
        self.queue
            .send(AppendRequest {
                appends,
                fences,
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
        let pending = self.enqueue(append, fence).await?;
        Ok(pending.await.map_err(|_| LedgerError::ShuttingDown)??)
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
        let mut events = batch[0].events();
        while batch.len() < max_batch_appends {
            match queue.try_recv() {
                Ok(request) => {
                    if events + request.events() > MAX_BATCH_EVENTS {
                        held_over = Some(request);
                        break;
                    }
                    events += request.events();
                    batch.push(request);
                }
                Err(_) => break,
            }
        }

        let mut appends = Vec::with_capacity(batch.len());
        let mut waiters = Vec::with_capacity(batch.len());
        for request in batch {
            if !request.is_fenced_in() {
                // Decided on speculation that failed: never write it. A chain's other slots
                // hold its events too (applied when it was decided) at an epoch that has not
                // moved: move it, so they are reloaded rather than taken as written.
                request.fences.iter().for_each(fail_fence);
                let refused = request
                    .appends
                    .iter()
                    .map(|append| AppendResult::Conflict {
                        expected: append.expected,
                        actual: None,
                    })
                    .collect();
                let _ = request.reply.send(Ok(refused));
                continue;
            }
            let count = request.appends.len();
            appends.extend(request.appends);
            waiters.push((request.fences, count, request.reply));
        }
        if appends.is_empty() {
            continue;
        }

        let appended = appends.len();
        let started = std::time::Instant::now();
        let outcome = store.append(appends).await;
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats
            .batch_appends
            .fetch_add(appended as u64, Ordering::Relaxed);
        stats
            .batch_events
            .fetch_add(events as u64, Ordering::Relaxed);
        let commit_micros = started.elapsed().as_micros() as u64;
        stats
            .batch_micros
            .fetch_add(commit_micros, Ordering::Relaxed);
        stats.commit_times.record(commit_micros);
        match outcome {
            Ok(results) => {
                debug_assert_eq!(results.len(), appended);
                let mut results = results.into_iter();
                for (fences, count, reply) in waiters {
                    let chain: Vec<AppendResult> = results.by_ref().take(count).collect();
                    if chain.iter().any(AppendResult::is_conflict) {
                        fences.iter().for_each(fail_fence);
                    }
                    let _ = reply.send(Ok(chain));
                }
            }
            Err(error) => {
                tracing::warn!(%error, appends = appended, "group commit failed");
                for (fences, _, reply) in waiters {
                    fences.iter().for_each(fail_fence);
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
