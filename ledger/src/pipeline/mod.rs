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
//! - **Speculation is fenced.** A slot has an epoch. When any append of a slot fails (a
//!   conflict with another node, or a store error) the appender bumps the epoch before it
//!   takes the next batch; queued appends decided under the old epoch are then refused
//!   without reaching the store, and the next decision reloads the state from the stream. A
//!   speculative event therefore never becomes the basis of a stored one unless it was stored.
//! - **Across nodes** the expected-version check guards every append. On a conflict the pipeline
//!   reloads the stream and decides again, at most `max_conflict_retries` times.
//! - **Reads are answered the same way.** A read (a reservation, the limits, the state) takes
//!   no decision: it reads the cached state under the mutex and answers once an empty append
//!   has checked the stream's version, so it never shows events that are not yet durable.
//!
//! Where each part lives: `execute` (a pass through the pipeline, and reads), `cache` (the
//! slots and their eviction), `appender` (group commit and fencing), `load` (a state from its
//! snapshot and tail; when to store a snapshot), `defaults` (the `$defaults` stream), `answers`
//! (what clients are answered), `dry_run` (a reserve judged without recording it), `users`
//! (a reserve's request; users' limits and usage), `tree` (decisions across a project's chain
//! of ancestors, appended as one linked chain; setting a parent), `subtree` (a parent's
//! descendants and their usage), `encode` (events as the store takes them), and `config`,
//! `error`, `stats`.

mod answers;
mod appender;
mod cache;
mod config;
mod defaults;
mod dry_run;
mod encode;
mod error;
mod execute;
mod load;
mod stats;
mod subtree;
mod tree;
mod users;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use domain::{
    Command, Correction, Defaults, Deltas, Limits, ProjectId, ProjectState, Reason, Refusal,
    ReservationId, ResourceName, UserId,
};

pub use answers::{LimitSource, LimitsView, ReservationView};
pub use config::{LedgerConfig, DEFAULT_CACHE_MAX_RESERVATIONS};
pub use dry_run::DryRun;
pub use error::LedgerError;
pub use load::load_project;
pub use stats::LedgerStats;
pub use subtree::SubtreeView;
pub use users::{ReserveRequest, UserUsage};

use answers::Granted;
use appender::Appender;
use cache::SlotCache;
use execute::{Executed, Written};

use crate::clock::Clock;
use crate::store::{EventStore, Metadata, Position};

pub struct Ledger {
    store: Arc<dyn EventStore>,
    clock: Arc<dyn Clock>,
    config: LedgerConfig,
    cache: SlotCache,
    defaults_writer: tokio::sync::Mutex<Defaults>,
    defaults: RwLock<Arc<Defaults>>,
    appender: Appender,
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
        let stats = Arc::new(LedgerStats::default());
        let appender = Appender::start(
            store.clone(),
            config.queue_capacity,
            config.max_batch_appends,
            stats.clone(),
        );
        let ledger = Arc::new(Ledger {
            store,
            clock,
            cache: SlotCache::new(config.cache_capacity, config.cache_max_reservations),
            config,
            defaults_writer: tokio::sync::Mutex::new(Defaults::default()),
            defaults: RwLock::new(Arc::new(Defaults::default())),
            appender,
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
        self.cache.projects()
    }

    /// Reservations held by the cached project states, together.
    pub fn cached_reservations(&self) -> usize {
        self.cache.reservations()
    }

    // ---- reservations ----

    /// Reserve `deltas`; `reservation_id` makes retries idempotent (a new id is chosen if none).
    pub async fn reserve(
        &self,
        project: &ProjectId,
        reservation_id: Option<ReservationId>,
        deltas: Deltas,
        expires_in_s: u32,
        meta: &Metadata,
    ) -> Result<ReservationView, LedgerError> {
        let request = ReserveRequest {
            reservation_id,
            deltas,
            count: None,
            user: None,
            expires_in_s,
        };
        self.reserve_with(project, request, meta).await
    }

    /// Reserve as [`Ledger::reserve`], for a user inside the project and with a count range if
    /// the request names them (SPEC rules 8 and 9).
    pub async fn reserve_with(
        &self,
        project: &ProjectId,
        request: ReserveRequest,
        meta: &Metadata,
    ) -> Result<ReservationView, LedgerError> {
        let command = request.command();
        self.reservation_command(project, &command, meta).await
    }

    pub async fn commit(
        &self,
        project: &ProjectId,
        reservation_id: ReservationId,
        meta: &Metadata,
    ) -> Result<ReservationView, LedgerError> {
        let command = Command::Commit { reservation_id };
        self.reservation_command(project, &command, meta).await
    }

    pub async fn release(
        &self,
        project: &ProjectId,
        reservation_id: ReservationId,
        meta: &Metadata,
    ) -> Result<ReservationView, LedgerError> {
        let command = Command::Release { reservation_id };
        self.reservation_command(project, &command, meta).await
    }

    /// The reservation as it durably stands.
    pub async fn reservation(
        &self,
        project: &ProjectId,
        reservation_id: ReservationId,
    ) -> Result<ReservationView, LedgerError> {
        let reservation = self
            .read(project, |state, _| {
                state.reservation(&reservation_id).cloned()
            })
            .await?
            .ok_or(Refusal::NotFound)?;
        self.reservation_view(project, reservation, &Written::default())
            .await
    }

    async fn reservation_command(
        &self,
        project: &ProjectId,
        command: &Command,
        meta: &Metadata,
    ) -> Result<ReservationView, LedgerError> {
        let Executed { answer, written } = self.execute(project, command, meta).await?;
        let reservation = match answer? {
            Granted::Reservation(reservation) => reservation
                .expect("a granted reservation command leaves the reservation in the state"),
            other => unreachable!("a reservation command was answered with {other:?}"),
        };
        self.reservation_view(project, reservation, &written).await
    }

    // ---- limits ----

    pub async fn set_limits(
        &self,
        project: &ProjectId,
        limits: Limits,
        force: bool,
        meta: &Metadata,
    ) -> Result<LimitsView, LedgerError> {
        self.limits_command(project, &Command::SetLimits { limits, force }, meta)
            .await
    }

    pub async fn reset_limits(
        &self,
        project: &ProjectId,
        meta: &Metadata,
    ) -> Result<LimitsView, LedgerError> {
        self.limits_command(project, &Command::ResetLimits, meta)
            .await
    }

    /// The project's effective limits as they durably stand.
    pub async fn limits(&self, project: &ProjectId) -> Result<LimitsView, LedgerError> {
        let limits = self.read(project, answers::EffectiveLimits::of).await?;
        self.limits_view(project, limits, &Written::default()).await
    }

    pub(super) async fn limits_command(
        &self,
        project: &ProjectId,
        command: &Command,
        meta: &Metadata,
    ) -> Result<LimitsView, LedgerError> {
        let Executed { answer, written } = self.execute(project, command, meta).await?;
        match answer? {
            Granted::Limits(limits) => self.limits_view(project, limits, &written).await,
            other => unreachable!("a limits command was answered with {other:?}"),
        }
    }

    // ---- usage ----

    /// Records the release of the project's holds past their expiry, as the sweeper (principal
    /// [`SWEEPER_PRINCIPAL`](crate::sweeper::SWEEPER_PRINCIPAL)); returns how many.
    pub async fn expire(&self, project: &ProjectId) -> Result<usize, LedgerError> {
        let meta = Metadata {
            actor: Some("sweeper".into()),
            principal: Some(crate::sweeper::SWEEPER_PRINCIPAL.into()),
            ..Metadata::default()
        };
        let done = self.execute(project, &Command::Expire, &meta).await?;
        match done.answer? {
            Granted::Expired(count) => Ok(count),
            _ => Ok(0),
        }
    }

    /// An operator's recount of in_use (SPEC rule 10): the corrections it recorded, one per
    /// resource whose count changed, and a global position the views reflect it at (its last
    /// event's, or the log's head when nothing changed).
    pub async fn correct_usage(
        &self,
        project: &ProjectId,
        user: Option<UserId>,
        in_use: BTreeMap<ResourceName, i64>,
        reason: Reason,
        meta: &Metadata,
    ) -> Result<(Vec<Correction>, Position), LedgerError> {
        let command = Command::CorrectUsage {
            in_use,
            reason,
            user,
        };
        let Executed { answer, written } = self.execute(project, &command, meta).await?;
        match answer? {
            Granted::UsageCorrected(corrections) => {
                let position = match written.last_position() {
                    Some(position) => position,
                    None => self.store.head().await?,
                };
                Ok((corrections, position))
            }
            other => unreachable!("a correction was answered with {other:?}"),
        }
    }

    /// A copy of the project's durable state (for checks and tests).
    pub async fn project_state(&self, project: &ProjectId) -> Result<ProjectState, LedgerError> {
        self.read(project, |state, _| state.clone()).await
    }
}
