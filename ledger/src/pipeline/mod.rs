//! The command pipeline: load a project's state, decide at `now`, append with the expected
//! version, answer once the append is durable.
//!
//! How it stays correct and fast:
//! - **One writer per project in a process.** Each project has a slot: its folded state behind an
//!   async mutex. A decision is made under the mutex against the cached state, its events are
//!   applied to that state at once (speculatively) and queued for the appender; the mutex is then
//!   released, so the next request for the same project decides against the state including the
//!   queued events instead of conflicting with them. Requests for a hot project queue; they do
//!   not retry.
//! - **Group commit.** A single appender task drains every queued append into one batch and
//!   writes it in one durable transaction. Batches form by themselves while the previous one is
//!   being written; when idle, a request is written at once. Nothing is answered before its batch
//!   is on disk, including answers that append nothing (an idempotent commit, a not-found): those
//!   send an empty append that only checks the stream version, so they too are answered only
//!   from durable, current state.
//! - **Speculation is fenced.** A slot has a generation. When any append of a slot fails (a
//!   conflict with another node, or a store error) the appender bumps the generation before it
//!   takes the next batch; queued appends decided under the old generation are then refused
//!   without reaching the store, and the next decision reloads the state from the stream. A
//!   speculative event therefore never becomes the basis of a stored one unless it was stored.
//! - **Across nodes** the expected-version check guards every append. On a conflict the pipeline
//!   reloads the stream and decides again, at most `max_conflict_retries` times.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use domain::{
    decide, decide_defaults, Command, Decision, Defaults, Deltas, Event, Limit, Limits, Outcome,
    ProjectId, ProjectState, Reason, Refusal, Reservation, ReservationId, ReservationStatus,
    ResourceName, SnapshotError, StreamVersion, Timestamp, DEFAULTS_STREAM,
};
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::clock::Clock;
use crate::store::{
    AppendResult, EventData, EventStore, ExpectedVersion, Metadata, Position, StoreError,
    StreamAppend, MAX_BATCH_EVENTS, MAX_READ_COUNT,
};

#[derive(Clone, Debug)]
pub struct LedgerConfig {
    /// Decide again at most this many times after an expected-version conflict.
    pub max_conflict_retries: u32,
    /// Projects whose state stays cached; colder ones are evicted and reloaded on use.
    pub cache_capacity: usize,
    /// Reservations (of any status) the cached states may hold together; past it idle
    /// projects are evicted too. A state keeps every reservation its project ever had, so a
    /// bound on projects alone does not bound memory: see [`DEFAULT_CACHE_MAX_RESERVATIONS`].
    pub cache_max_reservations: usize,
    /// Most appends (decisions) in one group commit.
    pub max_batch_appends: usize,
    /// Appends waiting for the appender before new requests wait for room.
    pub queue_capacity: usize,
    /// A project's state is snapshotted once this many events, and at least as many as it has
    /// reservations, were appended since its last snapshot; see [`snapshot_due`].
    pub snapshot_min_events: u64,
}

/// Without this bound, `quota bench --workload fleet --projects 100000` grew by 8 MB/s at
/// 11,400 boots/s once every project was cached (about 0.7 KB a reservation, its deltas then a
/// B-tree map) and passed 512 MiB after 25 s. With it, and the deltas a slice, the same
/// workload peaked at 427 MiB over 90 s.
pub const DEFAULT_CACHE_MAX_RESERVATIONS: usize = 200_000;

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            max_conflict_retries: 16,
            cache_capacity: 100_000,
            cache_max_reservations: DEFAULT_CACHE_MAX_RESERVATIONS,
            max_batch_appends: 2_048,
            queue_capacity: 65_536,
            snapshot_min_events: 1_024,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("gave up on {stream} after {attempts} conflicting attempts")]
    Contention { stream: String, attempts: u32 },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("stored event {stream}@{version} is unreadable: {message}")]
    Undecodable {
        stream: String,
        version: u64,
        message: String,
    },
    #[error("the ledger is shutting down")]
    ShuttingDown,
}

/// A reservation as answered to clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationView {
    pub reservation_id: ReservationId,
    pub project: ProjectId,
    pub deltas: Deltas,
    pub status: ReservationStatus,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub updated_at: Timestamp,
    /// Global position of the event that gave the reservation its status.
    pub position: Position,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitSource {
    Project,
    Default,
}

impl LimitSource {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitSource::Project => "project",
            LimitSource::Default => "default",
        }
    }
}

/// A project's effective limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitsView {
    pub project: ProjectId,
    pub limits: BTreeMap<ResourceName, (Limit, LimitSource)>,
    /// Position of the last limits event of the project (0 if it never had one).
    pub position: Position,
}

/// Counters for metrics and the benchmark.
#[derive(Debug, Default)]
pub struct LedgerStats {
    pub decisions: AtomicU64,
    pub conflicts: AtomicU64,
    pub batches: AtomicU64,
    pub batch_appends: AtomicU64,
    pub batch_events: AtomicU64,
    pub batch_micros: AtomicU64,
}

struct Slot {
    /// Bumped by the appender when an append of this slot fails; see the module docs.
    generation: AtomicU64,
    /// The reservations in `inner.state` when last counted: this slot's part of
    /// [`Ledger::cached_reservations`].
    reservations: AtomicUsize,
    inner: tokio::sync::Mutex<SlotState>,
}

/// The cached project states.
#[derive(Default)]
struct Cache {
    slots: HashMap<ProjectId, Arc<Slot>>,
    /// The total after the last eviction that could not get under its target because the
    /// rest was in use; the next waits for the total to grow by a hundredth of the bound, so
    /// that a cache over its bound is not scanned on every request.
    futile_eviction_at: Option<usize>,
}

struct SlotState {
    state: ProjectState,
    /// The generation `state` was built under; a mismatch means it must be reloaded.
    generation: u64,
    loaded: bool,
    /// The version of the project's latest snapshot, stored or queued with an append.
    snapshot_version: StreamVersion,
}

struct AppendRequest {
    append: StreamAppend,
    fence: Option<(Arc<Slot>, u64)>,
    reply: oneshot::Sender<Result<AppendResult, StoreError>>,
}

/// What one pass through the pipeline produced.
struct Executed<T> {
    decision: Decision,
    snapshot: T,
    versions: Vec<u64>,
    positions: Vec<Position>,
}

pub struct Ledger {
    store: Arc<dyn EventStore>,
    clock: Arc<dyn Clock>,
    config: LedgerConfig,
    cache: Mutex<Cache>,
    /// The sum of every cached slot's `reservations`: an atomic, so that counting after a
    /// decision takes no lock. Eviction subtracts only idle slots, which nobody counts.
    cached_reservations: AtomicUsize,
    defaults_writer: tokio::sync::Mutex<Defaults>,
    defaults: RwLock<Arc<Defaults>>,
    appender: mpsc::Sender<AppendRequest>,
    stats: Arc<LedgerStats>,
}

impl Ledger {
    /// Starts the appender task; it stops when the ledger is dropped.
    pub async fn start(
        store: Arc<dyn EventStore>,
        clock: Arc<dyn Clock>,
        config: LedgerConfig,
    ) -> Result<Arc<Ledger>, LedgerError> {
        assert!(config.max_batch_appends > 0 && config.queue_capacity > 0);
        let (tx, rx) = mpsc::channel(config.queue_capacity);
        let stats = Arc::new(LedgerStats::default());
        tokio::spawn(run_appender(
            store.clone(),
            rx,
            config.max_batch_appends,
            stats.clone(),
        ));
        let ledger = Arc::new(Ledger {
            store,
            clock,
            config,
            cache: Mutex::new(Cache::default()),
            cached_reservations: AtomicUsize::new(0),
            defaults_writer: tokio::sync::Mutex::new(Defaults::default()),
            defaults: RwLock::new(Arc::new(Defaults::default())),
            appender: tx,
            stats,
        });
        ledger.refresh_defaults().await?;
        Ok(ledger)
    }

    pub fn store(&self) -> &Arc<dyn EventStore> {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn stats(&self) -> &LedgerStats {
        &self.stats
    }

    pub fn cached_projects(&self) -> usize {
        self.lock_cache().slots.len()
    }

    /// Reservations held by the cached project states, together.
    pub fn cached_reservations(&self) -> usize {
        self.cached_reservations.load(Ordering::Relaxed)
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records how many reservations `slot`'s state holds now (called with the slot locked,
    /// after each change of its state).
    fn count_reservations(&self, slot: &Slot, state: &ProjectState) {
        let now = state.reservation_count();
        let before = slot.reservations.swap(now, Ordering::Relaxed);
        if now >= before {
            self.cached_reservations
                .fetch_add(now - before, Ordering::Relaxed);
        } else {
            self.cached_reservations
                .fetch_sub(before - now, Ordering::Relaxed);
        }
    }

    /// Drops cached projects nobody is using until the cache is 10% under both its bounds,
    /// the number of projects and the reservations they hold. Nobody can start using a slot
    /// meanwhile: slots are handed out under the same lock.
    fn evict_idle(&self, cache: &mut Cache) {
        let config = &self.config;
        let mut projects = cache.slots.len();
        let mut reservations = self.cached_reservations();
        // A bound not reached sets no target.
        let target_projects = if projects >= config.cache_capacity {
            config.cache_capacity - config.cache_capacity / 10
        } else {
            usize::MAX
        };
        let target_reservations = if reservations > config.cache_max_reservations {
            config.cache_max_reservations - config.cache_max_reservations / 10
        } else {
            usize::MAX
        };
        let mut idle: Vec<ProjectId> = Vec::new();
        for (project, slot) in &cache.slots {
            if projects <= target_projects && reservations <= target_reservations {
                break;
            }
            if Arc::strong_count(slot) == 1 {
                idle.push(project.clone());
                projects -= 1;
                reservations =
                    reservations.saturating_sub(slot.reservations.load(Ordering::Relaxed));
            }
        }
        for project in idle {
            if let Some(slot) = cache.slots.remove(&project) {
                self.cached_reservations
                    .fetch_sub(slot.reservations.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        cache.futile_eviction_at = (reservations > target_reservations).then_some(reservations);
    }

    // ---- defaults ----

    /// The defaults as this process last saw them.
    pub fn defaults(&self) -> Arc<Defaults> {
        self.defaults
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Re-reads the defaults stream's tail; other nodes may have changed it.
    pub async fn refresh_defaults(&self) -> Result<Arc<Defaults>, LedgerError> {
        let mut defaults = self.defaults_writer.lock().await;
        self.catch_up_defaults(&mut defaults).await?;
        Ok(self.publish_defaults(&defaults))
    }

    fn publish_defaults(&self, defaults: &Defaults) -> Arc<Defaults> {
        let snapshot = Arc::new(defaults.clone());
        *self.defaults.write().unwrap_or_else(|p| p.into_inner()) = snapshot.clone();
        snapshot
    }

    async fn catch_up_defaults(&self, defaults: &mut Defaults) -> Result<(), LedgerError> {
        loop {
            let from = defaults.version.map_or(0, |v| v + 1);
            let events = self
                .store
                .read_stream(DEFAULTS_STREAM, from, MAX_READ_COUNT)
                .await?;
            let done = events.len() < MAX_READ_COUNT;
            for recorded in &events {
                let event = recorded.decode().map_err(|e| LedgerError::Undecodable {
                    stream: recorded.stream.clone(),
                    version: recorded.version,
                    message: e.to_string(),
                })?;
                defaults.apply(&event);
            }
            if done {
                return Ok(());
            }
        }
    }

    /// Merges `limits` into the defaults; answers all defaults.
    pub async fn set_defaults(
        &self,
        limits: &Limits,
        meta: &Metadata,
    ) -> Result<Arc<Defaults>, LedgerError> {
        for _ in 0..=self.config.max_conflict_retries {
            let mut defaults = self.defaults_writer.lock().await;
            self.catch_up_defaults(&mut defaults).await?;
            let events = decide_defaults(limits, &defaults)?;
            let now = self.clock.now();
            let append = StreamAppend::new(
                DEFAULTS_STREAM,
                ExpectedVersion::from_version(defaults.version),
                events.iter().map(|e| event_data(e, meta, now)).collect(),
            );
            match self.send(append, None).await? {
                AppendResult::Appended { .. } => {
                    for event in &events {
                        defaults.apply(event);
                    }
                    return Ok(self.publish_defaults(&defaults));
                }
                AppendResult::Conflict { .. } => {
                    self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Err(LedgerError::Contention {
            stream: DEFAULTS_STREAM.to_owned(),
            attempts: self.config.max_conflict_retries + 1,
        })
    }

    // ---- project commands ----

    /// Reserve `deltas`; `reservation_id` makes retries idempotent (a new id is chosen if none).
    pub async fn reserve(
        &self,
        project: &ProjectId,
        reservation_id: Option<ReservationId>,
        deltas: Deltas,
        expires_in_s: u32,
        meta: &Metadata,
    ) -> Result<ReservationView, LedgerError> {
        let reservation_id = reservation_id.unwrap_or_else(|| ReservationId(Uuid::now_v7()));
        self.reservation_command(
            project,
            Command::Reserve {
                reservation_id,
                deltas,
                expires_in_s,
            },
            reservation_id,
            meta,
        )
        .await
    }

    pub async fn commit(
        &self,
        project: &ProjectId,
        reservation_id: ReservationId,
        meta: &Metadata,
    ) -> Result<ReservationView, LedgerError> {
        self.reservation_command(
            project,
            Command::Commit { reservation_id },
            reservation_id,
            meta,
        )
        .await
    }

    pub async fn release(
        &self,
        project: &ProjectId,
        reservation_id: ReservationId,
        meta: &Metadata,
    ) -> Result<ReservationView, LedgerError> {
        self.reservation_command(
            project,
            Command::Release { reservation_id },
            reservation_id,
            meta,
        )
        .await
    }

    /// The reservation as it durably stands.
    pub async fn reservation(
        &self,
        project: &ProjectId,
        reservation_id: ReservationId,
    ) -> Result<ReservationView, LedgerError> {
        let done = self
            .execute(
                project,
                &Metadata::default(),
                |_, _, _| Decision {
                    events: vec![],
                    answer: Ok(Outcome::Reservation(reservation_id)),
                },
                |state, _| state.reservation(&reservation_id).cloned(),
            )
            .await?;
        let reservation = done.snapshot.clone().ok_or(Refusal::NotFound)?;
        self.reservation_view(project, reservation, &done).await
    }

    async fn reservation_command(
        &self,
        project: &ProjectId,
        command: Command,
        reservation_id: ReservationId,
        meta: &Metadata,
    ) -> Result<ReservationView, LedgerError> {
        let done = self
            .execute(
                project,
                meta,
                |state, defaults, now| decide(&command, state, defaults, now),
                |state, _| state.reservation(&reservation_id).cloned(),
            )
            .await?;
        if let Err(refusal) = &done.decision.answer {
            return Err(refusal.clone().into());
        }
        let reservation = done
            .snapshot
            .clone()
            .expect("a granted reservation command leaves the reservation in the state");
        self.reservation_view(project, reservation, &done).await
    }

    async fn reservation_view<T>(
        &self,
        project: &ProjectId,
        reservation: Reservation,
        done: &Executed<T>,
    ) -> Result<ReservationView, LedgerError> {
        let position = match reservation.position {
            Some(p) => p,
            None => {
                self.position_of(project, reservation.status_version, done)
                    .await?
            }
        };
        Ok(ReservationView {
            reservation_id: reservation.id,
            project: project.clone(),
            deltas: reservation.deltas,
            status: reservation.status,
            created_at: reservation.created_at,
            expires_at: reservation.expires_at,
            updated_at: reservation.status_at,
            position,
        })
    }

    /// The global position of a project event: from this append if it wrote it, else from the
    /// store (rare: an idempotent answer right after the original).
    async fn position_of<T>(
        &self,
        project: &ProjectId,
        version: u64,
        done: &Executed<T>,
    ) -> Result<Position, LedgerError> {
        if let Some(i) = done.versions.iter().position(|v| *v == version) {
            return Ok(done.positions[i]);
        }
        let events = self
            .store
            .read_stream(&project.stream(), version, 1)
            .await?;
        Ok(events.first().map_or(0, |e| e.position))
    }

    pub async fn set_limits(
        &self,
        project: &ProjectId,
        limits: Limits,
        force: bool,
        meta: &Metadata,
    ) -> Result<LimitsView, LedgerError> {
        let command = Command::SetLimits { limits, force };
        self.limits_command(project, |s, d, now| decide(&command, s, d, now), meta)
            .await
    }

    pub async fn reset_limits(
        &self,
        project: &ProjectId,
        meta: &Metadata,
    ) -> Result<LimitsView, LedgerError> {
        self.limits_command(
            project,
            |s, d, now| decide(&Command::ResetLimits, s, d, now),
            meta,
        )
        .await
    }

    pub async fn limits(&self, project: &ProjectId) -> Result<LimitsView, LedgerError> {
        self.limits_command(
            project,
            |_, _, _| Decision {
                events: vec![],
                answer: Ok(Outcome::Limits),
            },
            &Metadata::default(),
        )
        .await
    }

    async fn limits_command(
        &self,
        project: &ProjectId,
        decide_fn: impl Fn(&ProjectState, &Defaults, Timestamp) -> Decision,
        meta: &Metadata,
    ) -> Result<LimitsView, LedgerError> {
        let done = self
            .execute(project, meta, decide_fn, |state, defaults| {
                let mut limits: BTreeMap<ResourceName, (Limit, LimitSource)> = defaults
                    .limits
                    .iter()
                    .map(|(r, l)| (r.clone(), (*l, LimitSource::Default)))
                    .collect();
                for (r, l) in &state.overrides {
                    limits.insert(r.clone(), (*l, LimitSource::Project));
                }
                (limits, state.limits_position, state.limits_version)
            })
            .await?;
        if let Err(refusal) = &done.decision.answer {
            return Err(refusal.clone().into());
        }
        let (limits, known_position, version) = done.snapshot.clone();
        let position = match (known_position, version) {
            (Some(p), _) => p,
            (None, Some(v)) => self.position_of(project, v, &done).await?,
            (None, None) => 0,
        };
        Ok(LimitsView {
            project: project.clone(),
            limits,
            position,
        })
    }

    /// Records the release of the project's holds past their expiry, as the sweeper (principal
    /// [`SWEEPER_PRINCIPAL`](crate::sweeper::SWEEPER_PRINCIPAL)); returns how many.
    pub async fn expire(&self, project: &ProjectId) -> Result<usize, LedgerError> {
        let done = self
            .execute(
                project,
                &Metadata {
                    actor: Some("sweeper".into()),
                    principal: Some(crate::sweeper::SWEEPER_PRINCIPAL.into()),
                    ..Metadata::default()
                },
                |s, d, now| decide(&Command::Expire, s, d, now),
                |_, _| (),
            )
            .await?;
        match done.decision.answer {
            Ok(Outcome::Expired(n)) => Ok(n),
            Ok(_) => Ok(0),
            Err(refusal) => Err(refusal.into()),
        }
    }

    /// An operator's correction of in_use.
    pub async fn correct_usage(
        &self,
        project: &ProjectId,
        resource: ResourceName,
        in_use: i64,
        reason: Reason,
        meta: &Metadata,
    ) -> Result<(), LedgerError> {
        let command = Command::CorrectUsage {
            resource,
            in_use,
            reason,
        };
        let done = self
            .execute(
                project,
                meta,
                |s, d, now| decide(&command, s, d, now),
                |_, _| (),
            )
            .await?;
        done.decision.answer.map(|_| ()).map_err(Into::into)
    }

    /// A copy of the project's durable state (for checks and tests).
    pub async fn project_state(&self, project: &ProjectId) -> Result<ProjectState, LedgerError> {
        let done = self
            .execute(
                project,
                &Metadata::default(),
                |_, _, _| Decision {
                    events: vec![],
                    answer: Ok(Outcome::Limits),
                },
                |state, _| state.clone(),
            )
            .await?;
        Ok(done.snapshot)
    }

    // ---- the pipeline ----

    fn slot(&self, project: &ProjectId) -> Arc<Slot> {
        let mut cache = self.lock_cache();
        let reservations = self.cached_reservations();
        let over_bound = reservations > self.config.cache_max_reservations
            && cache
                .futile_eviction_at
                .is_none_or(|at| reservations > at + self.config.cache_max_reservations / 100);
        // Held while evicting, so the project about to be used is not among the evicted.
        let cached = cache.slots.get(project).cloned();
        if over_bound {
            self.evict_idle(&mut cache);
        }
        if let Some(slot) = cached {
            return slot;
        }
        if cache.slots.len() >= self.config.cache_capacity {
            self.evict_idle(&mut cache);
        }
        let slot = Arc::new(Slot {
            generation: AtomicU64::new(0),
            reservations: AtomicUsize::new(0),
            inner: tokio::sync::Mutex::new(SlotState {
                state: ProjectState::new(project.clone()),
                generation: 0,
                loaded: false,
                snapshot_version: None,
            }),
        });
        cache.slots.insert(project.clone(), slot.clone());
        slot
    }

    async fn load(
        &self,
        project: &ProjectId,
    ) -> Result<(ProjectState, StreamVersion), LedgerError> {
        load_project(&*self.store, project, true).await
    }

    async fn execute<T>(
        &self,
        project: &ProjectId,
        meta: &Metadata,
        decide_fn: impl Fn(&ProjectState, &Defaults, Timestamp) -> Decision,
        snapshot_fn: impl Fn(&ProjectState, &Defaults) -> T,
    ) -> Result<Executed<T>, LedgerError> {
        let stream = project.stream();
        let mut defaults_refreshed = false;
        let mut attempts = 0;
        while attempts <= self.config.max_conflict_retries {
            attempts += 1;
            let slot = self.slot(project);
            // Read once: the same value decides whether the state is current and fences the
            // append, so a failure the appender records meanwhile cannot slip between them.
            let generation = slot.generation.load(Ordering::SeqCst);
            let (decision, snapshot, reply) = {
                let mut inner = slot.inner.lock().await;
                if inner.generation != generation || !inner.loaded {
                    inner.loaded = false;
                    let (state, snapshot_version) = self.load(project).await?;
                    inner.state = state;
                    inner.snapshot_version = snapshot_version;
                    inner.generation = generation;
                    inner.loaded = true;
                    self.count_reservations(&slot, &inner.state);
                }
                let defaults = self.defaults();
                let now = self.clock.now();
                let decision = decide_fn(&inner.state, &defaults, now);
                if matches!(decision.answer, Err(Refusal::UnknownResource(_)))
                    && !defaults_refreshed
                {
                    // Another node may have just added the default: look before refusing.
                    drop(inner);
                    defaults_refreshed = true;
                    attempts -= 1;
                    self.refresh_defaults().await?;
                    continue;
                }
                let expected = ExpectedVersion::from_version(inner.state.version);
                for event in &decision.events {
                    inner.state.apply(event, now);
                }
                if !decision.events.is_empty() {
                    self.count_reservations(&slot, &inner.state);
                }
                let snapshot = snapshot_fn(&inner.state, &defaults);
                let mut append = StreamAppend::new(
                    stream.clone(),
                    expected,
                    decision
                        .events
                        .iter()
                        .map(|e| event_data(e, meta, now))
                        .collect(),
                );
                if !append.events.is_empty()
                    && snapshot_due(
                        &inner.state,
                        inner.snapshot_version,
                        self.config.snapshot_min_events,
                    )
                {
                    // Rides with the append: stored only if these events are. Should they fail,
                    // the slot is reloaded and `snapshot_version` read again.
                    append.snapshot = inner.state.to_snapshot();
                    inner.snapshot_version = inner.state.version;
                }
                let reply = self
                    .enqueue(append, Some((slot.clone(), generation)))
                    .await?;
                (decision, snapshot, reply)
            };
            self.stats.decisions.fetch_add(1, Ordering::Relaxed);
            match reply.await.map_err(|_| LedgerError::ShuttingDown)?? {
                AppendResult::Appended {
                    versions,
                    positions,
                    ..
                } => {
                    if !positions.is_empty() {
                        let mut inner = slot.inner.lock().await;
                        if inner.generation == generation {
                            for ((event, version), position) in
                                decision.events.iter().zip(&versions).zip(&positions)
                            {
                                inner.state.note_position(event, *version, *position);
                            }
                        }
                    }
                    return Ok(Executed {
                        decision,
                        snapshot,
                        versions,
                        positions,
                    });
                }
                AppendResult::Conflict { .. } => {
                    self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%stream, attempts, "expected-version conflict; deciding again");
                    if attempts > 1 {
                        // Another node keeps winning this stream: back off a random, growing
                        // while so that the nodes stop colliding in lockstep.
                        let ceiling_us = 100u64 << attempts.min(7);
                        let pause_us = rand::random::<u64>() % ceiling_us;
                        tokio::time::sleep(Duration::from_micros(pause_us)).await;
                    }
                }
            }
        }
        Err(LedgerError::Contention {
            stream,
            attempts: self.config.max_conflict_retries + 1,
        })
    }

    async fn enqueue(
        &self,
        append: StreamAppend,
        fence: Option<(Arc<Slot>, u64)>,
    ) -> Result<oneshot::Receiver<Result<AppendResult, StoreError>>, LedgerError> {
        let (reply, rx) = oneshot::channel();
        self.appender
            .send(AppendRequest {
                append,
                fence,
                reply,
            })
            .await
            .map_err(|_| LedgerError::ShuttingDown)?;
        Ok(rx)
    }

    async fn send(
        &self,
        append: StreamAppend,
        fence: Option<(Arc<Slot>, u64)>,
    ) -> Result<AppendResult, LedgerError> {
        let rx = self.enqueue(append, fence).await?;
        Ok(rx.await.map_err(|_| LedgerError::ShuttingDown)??)
    }
}

/// A project's durable state, from its latest snapshot (when `from_snapshot` and it has one this
/// code reads) and the events after it; and the version of that snapshot.
pub async fn load_project(
    store: &dyn EventStore,
    project: &ProjectId,
    from_snapshot: bool,
) -> Result<(ProjectState, StreamVersion), LedgerError> {
    let stream = project.stream();
    let mut state = ProjectState::new(project.clone());
    let snapshot = if from_snapshot {
        store.read_snapshot(&stream).await?
    } else {
        None
    };
    if let Some(snapshot) = snapshot {
        match ProjectState::from_snapshot(project.clone(), &snapshot) {
            Ok(snapshotted) => state = snapshotted,
            // Written by an older release: folded anew below, and snapshotted again.
            Err(SnapshotError::OtherFormat(format)) => {
                tracing::debug!(%stream, format, "snapshot of another format not used");
            }
            Err(error) => {
                tracing::warn!(%stream, %error, "unreadable snapshot not used");
            }
        }
    }
    let snapshot_version = state.version;
    let mut from = state.version.map_or(0, |v| v + 1);
    // A snapshot taken while its last events were being appended lacks their positions:
    // those few events are read again for them.
    if let Some(version) = state.first_version_without_position() {
        from = from.min(version);
    }
    loop {
        let events = store.read_stream(&stream, from, MAX_READ_COUNT).await?;
        let done = events.len() < MAX_READ_COUNT;
        for recorded in &events {
            let event = recorded.decode().map_err(|e| LedgerError::Undecodable {
                stream: stream.clone(),
                version: recorded.version,
                message: e.to_string(),
            })?;
            if Some(recorded.version) > snapshot_version {
                state.apply(&event, recorded.event.recorded_at);
            }
            state.note_position(&event, recorded.version, recorded.position);
            from = recorded.version + 1;
        }
        if done {
            return Ok((state, snapshot_version));
        }
    }
}

/// Whether to snapshot a state that was last snapshotted at `snapshot_version`. A snapshot holds
/// every reservation the project ever had, so one is taken only after at least as many events
/// as it holds reservations (and `min_events`): writing snapshots then costs at most about one
/// reservation's bytes per event appended, and a load never folds more events after its
/// snapshot than that snapshot holds reservations. (Every quarter of that was tried: loads of
/// the `hot` bench's project fell from ~550 to ~120 ms, but boots/s fell 15%.)
fn snapshot_due(state: &ProjectState, snapshot_version: StreamVersion, min_events: u64) -> bool {
    let count = |v: StreamVersion| v.map_or(0, |v| v + 1);
    let since = count(state.version).saturating_sub(count(snapshot_version));
    since >= min_events.max(state.reservation_count() as u64)
}

const MAX_METADATA_LEN: usize = 256;

fn bounded(value: &Option<String>) -> Option<String> {
    value
        .as_ref()
        .map(|s| s.chars().take(MAX_METADATA_LEN).collect())
}

fn event_data(event: &Event, meta: &Metadata, now: Timestamp) -> EventData {
    let encoded = domain::encode(event);
    EventData {
        event_id: Uuid::now_v7(),
        event_type: encoded.event_type.to_owned(),
        schema_version: encoded.schema_version,
        data: encoded.data,
        metadata: Metadata {
            actor: bounded(&meta.actor),
            request_id: bounded(&meta.request_id),
            correlation_id: bounded(&meta.correlation_id),
            principal: bounded(&meta.principal),
        },
        recorded_at: now,
    }
}

/// How often the appender lets other tasks run between batches.
const APPENDER_YIELDS: usize = 4;

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
            if let Some((slot, generation)) = &request.fence {
                if slot.generation.load(Ordering::SeqCst) != *generation {
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

fn fail_fence(fence: &Option<(Arc<Slot>, u64)>) {
    if let Some((slot, generation)) = fence {
        // Only the first failure of a generation moves it on.
        let _ = slot.generation.compare_exchange(
            *generation,
            generation + 1,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}
