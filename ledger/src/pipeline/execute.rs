//! One pass through the pipeline, under the project's slot lock: bring the cached state up to
//! date, decide the command at `now` (or read the state), apply the events at once, queue the
//! append; then, the lock released, wait for the append and retry on a conflict.

use std::sync::atomic::Ordering;
use std::time::Duration;

use domain::{decide, Command, Decision, Defaults, ProjectId, ProjectState, Refusal};
use tokio::sync::MutexGuard;

use super::answers::Granted;
use super::appender::Fence;
use super::cache::{Slot, SlotState};
use super::encode::event_data;
use super::load::{load_project, snapshot_due};
use super::tree;
use super::{Ledger, LedgerError};
use crate::store::{AppendResult, ExpectedVersion, Metadata, Position, StreamAppend};

/// What a command's pass through the pipeline produced, once its append is durable.
pub(super) struct Executed {
    pub(super) answer: Result<Granted, Refusal>,
    pub(super) written: Written,
}

/// The stream versions and global positions of the events an append wrote, in order; none if
/// it wrote nothing (a read's version check, or a decision without events).
#[derive(Debug, Default)]
pub(super) struct Written {
    versions: Vec<u64>,
    positions: Vec<Position>,
}

impl Written {
    pub(super) fn new(versions: Vec<u64>, positions: Vec<Position>) -> Self {
        Written {
            versions,
            positions,
        }
    }

    /// The global position of the last event written, if any.
    pub(super) fn last_position(&self) -> Option<Position> {
        self.positions.last().copied()
    }

    pub(super) fn position_of(&self, version: u64) -> Option<Position> {
        let index = self.versions.iter().position(|v| *v == version)?;
        Some(self.positions[index])
    }
}

impl Ledger {
    /// Decides `command` on the project's cached state and appends its events with the
    /// version that state was folded to; decides again after a conflict.
    pub(super) async fn execute(
        &self,
        project: &ProjectId,
        command: &Command,
        meta: &Metadata,
    ) -> Result<Executed, LedgerError> {
        let mut defaults_refreshed = false;
        let mut attempts = 0;
        while attempts <= self.config.max_conflict_retries {
            attempts += 1;
            let slot = self.cache.slot(project);
            // Read once: the same value decides whether the state is current and fences the
            // append, so a failure the appender records meanwhile cannot slip between them.
            let epoch = slot.epoch.load(Ordering::SeqCst);
            let (events, answer, reply) = {
                let mut inner = self.lock_current(project, &slot, epoch).await?;
                if inner.state.parent.is_some() && tree::reads_ancestors(command) {
                    drop(inner);
                    return self.execute_in_tree(project, command, meta).await;
                }
                let defaults = self.defaults();
                let now = self.clock.now();
                let Decision { events, answer } = decide(command, &inner.state, &defaults, now);
                if matches!(answer, Err(Refusal::UnknownResource(_))) && !defaults_refreshed {
                    // Another node may have just added the default: look before refusing.
                    drop(inner);
                    defaults_refreshed = true;
                    attempts -= 1;
                    self.refresh_defaults().await?;
                    continue;
                }
                let expected = ExpectedVersion::from_version(inner.state.version);
                for event in &events {
                    inner.state.apply(event, now);
                }
                let answer = answer.map(|outcome| Granted::of(outcome, &inner.state, &defaults));
                let append = self.append_of(&slot, &mut inner, expected, &events, meta, now);
                let fence = Fence {
                    slot: slot.clone(),
                    epoch,
                };
                let reply = self.appender.enqueue(append, Some(fence)).await?;
                (events, answer, reply)
            };
            self.stats.decisions.fetch_add(1, Ordering::Relaxed);
            match reply.await.map_err(|_| LedgerError::ShuttingDown)?? {
                AppendResult::Appended {
                    versions,
                    positions,
                    ..
                } => {
                    let written = Written::new(versions, positions);
                    self.note_positions(&slot, epoch, &events, &written).await;
                    return Ok(Executed { answer, written });
                }
                AppendResult::Conflict { .. } | AppendResult::LinkedFailed => {
                    let stream = project.stream();
                    tracing::debug!(%stream, attempts, "expected-version conflict; deciding again");
                    self.after_conflict(attempts).await;
                }
            }
        }
        Err(LedgerError::Contention {
            stream: project.stream(),
            attempts: self.config.max_conflict_retries + 1,
        })
    }

    /// Reads the project's cached state with `read`, answering only once an empty append has
    /// checked, durably, that the stream is still at the version read (so a read never answers
    /// speculative events, nor state another node has moved past); reads again after a conflict.
    pub(super) async fn read<T>(
        &self,
        project: &ProjectId,
        read: impl Fn(&ProjectState, &Defaults) -> T,
    ) -> Result<T, LedgerError> {
        let stream = project.stream();
        let mut attempts = 0;
        while attempts <= self.config.max_conflict_retries {
            attempts += 1;
            let slot = self.cache.slot(project);
            // Read once, as in `execute`.
            let epoch = slot.epoch.load(Ordering::SeqCst);
            let (value, reply) = {
                let inner = self.lock_current(project, &slot, epoch).await?;
                let value = read(&inner.state, &self.defaults());
                let expected = ExpectedVersion::from_version(inner.state.version);
                let check = StreamAppend::new(stream.clone(), expected, Vec::new());
                let fence = Fence {
                    slot: slot.clone(),
                    epoch,
                };
                let reply = self.appender.enqueue(check, Some(fence)).await?;
                (value, reply)
            };
            // See `LedgerStats::decisions`: a read's version check has always been counted.
            self.stats.decisions.fetch_add(1, Ordering::Relaxed);
            match reply.await.map_err(|_| LedgerError::ShuttingDown)?? {
                AppendResult::Appended { .. } => return Ok(value),
                AppendResult::Conflict { .. } | AppendResult::LinkedFailed => {
                    tracing::debug!(%stream, attempts, "expected-version conflict; reading again");
                    self.after_conflict(attempts).await;
                }
            }
        }
        Err(LedgerError::Contention {
            stream,
            attempts: self.config.max_conflict_retries + 1,
        })
    }

    /// Locks the slot, reloading its state from the store unless it is loaded and was built
    /// under `epoch`.
    pub(super) async fn lock_current<'a>(
        &self,
        project: &ProjectId,
        slot: &'a Slot,
        epoch: u64,
    ) -> Result<MutexGuard<'a, SlotState>, LedgerError> {
        let mut inner = slot.inner.lock().await;
        if inner.epoch != epoch || !inner.loaded {
            inner.loaded = false;
            let (state, snapshot_version) = load_project(&*self.store, project, true).await?;
            inner.state = state;
            inner.snapshot_version = snapshot_version;
            inner.epoch = epoch;
            inner.loaded = true;
            self.cache.count_reservations(slot, &inner.state);
        }
        Ok(inner)
    }

    /// The append of `events`, already applied to the slot's state, under the version that
    /// state was read at (a bare version check when there are none). It carries a snapshot of
    /// the state when one is due: stored only if these events are; should they fail, the slot
    /// is reloaded and `snapshot_version` read again.
    pub(super) fn append_of(
        &self,
        slot: &Slot,
        inner: &mut SlotState,
        expected: ExpectedVersion,
        events: &[domain::Event],
        meta: &Metadata,
        now: domain::Timestamp,
    ) -> StreamAppend {
        let data = events.iter().map(|e| event_data(e, meta, now)).collect();
        let mut append = StreamAppend::new(inner.state.project.stream(), expected, data);
        if !events.is_empty() {
            self.cache.count_reservations(slot, &inner.state);
            let min_events = self.config.snapshot_min_events;
            if snapshot_due(&inner.state, inner.snapshot_version, min_events) {
                append.snapshot = inner.state.to_snapshot();
                inner.snapshot_version = inner.state.version;
            }
        }
        append
    }

    /// Records in the slot's state where its just-written events are stored, unless the slot
    /// was reloaded meanwhile (a reloaded state knows from the store).
    pub(super) async fn note_positions(
        &self,
        slot: &Slot,
        epoch: u64,
        events: &[domain::Event],
        written: &Written,
    ) {
        if written.positions.is_empty() {
            return;
        }
        let mut inner = slot.inner.lock().await;
        if inner.epoch == epoch {
            for ((event, version), position) in
                events.iter().zip(&written.versions).zip(&written.positions)
            {
                inner.state.note_position(event, *version, *position);
            }
        }
    }

    pub(super) async fn after_conflict(&self, attempts: u32) {
        self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
        if attempts > 1 {
            // Another node keeps winning this stream: back off a random, growing while so that
            // the nodes stop colliding in lockstep.
            let ceiling_us = 100u64 << attempts.min(7);
            let pause_us = rand::random::<u64>() % ceiling_us;
            tokio::time::sleep(Duration::from_micros(pause_us)).await;
        }
    }
}
