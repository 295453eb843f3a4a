//! The expiry sweeper: follows the global feed to know every live hold (of every node), and
//! records `ReservationReleased{reason: expired}` for those past their expiry.
//!
//! The sweeper only makes expiry visible in the log; correctness does not wait for it: the
//! domain already stops counting a hold at its expiry instant. Several nodes may sweep the same
//! hold; the expected-version check lets one record it and the others find nothing to do.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use domain::{Event, ProjectId, ReservationId, Timestamp};

use crate::pipeline::{Ledger, LedgerError};
use crate::store::{Position, MAX_READ_COUNT};

/// The principal of the expiries the sweeper records: the server acting on its own.
pub const SWEEPER_PRINCIPAL: &str = "system:sweeper";

pub struct Sweeper {
    ledger: Arc<Ledger>,
    position: Position,
    holds: HashMap<(ProjectId, ReservationId), Timestamp>,
    by_expiry: BTreeSet<(Timestamp, ProjectId, ReservationId)>,
}

impl Sweeper {
    pub fn new(ledger: Arc<Ledger>) -> Self {
        Sweeper {
            ledger,
            position: 0,
            holds: HashMap::new(),
            by_expiry: BTreeSet::new(),
        }
    }

    /// Live holds known from the feed so far.
    pub fn holds(&self) -> usize {
        self.holds.len()
    }

    /// Reads the feed up to its head, noting holds made and ended.
    pub async fn catch_up(&mut self) -> Result<(), LedgerError> {
        loop {
            // The lean feed, as the views read it: on SQLite, read and turned into events on
            // the feed's own thread, not decoded from rows on the runtime's.
            let events = self
                .ledger
                .store()
                .read_feed(self.position, MAX_READ_COUNT)
                .await?;
            for recorded in &events {
                self.position = recorded.position;
                let Some(project) = ProjectId::from_stream(&recorded.stream) else {
                    continue;
                };
                let Ok(event) = recorded.decode() else {
                    // The pipeline reports undecodable events where it folds them.
                    continue;
                };
                match event {
                    Event::ReservationRequested {
                        reservation_id,
                        expires_at,
                        ..
                    } => {
                        self.holds
                            .insert((project.clone(), reservation_id), expires_at);
                        self.by_expiry.insert((expires_at, project, reservation_id));
                    }
                    Event::ReservationCommitted { reservation_id }
                    | Event::ReservationReleased { reservation_id, .. } => {
                        if let Some(expires_at) =
                            self.holds.remove(&(project.clone(), reservation_id))
                        {
                            self.by_expiry
                                .remove(&(expires_at, project, reservation_id));
                        }
                    }
                    _ => {}
                }
            }
            if events.len() < MAX_READ_COUNT {
                return Ok(());
            }
        }
    }

    /// One pass: catch up, then expire every project with a hold due at the ledger's `now`.
    /// Returns how many holds were released.
    pub async fn sweep(&mut self) -> Result<usize, LedgerError> {
        self.catch_up().await?;
        let now = self.ledger.clock().now();
        let due: BTreeSet<ProjectId> = self
            .by_expiry
            .iter()
            .take_while(|(expires_at, _, _)| *expires_at <= now)
            .map(|(_, project, _)| project.clone())
            .collect();
        let mut released = 0;
        for project in due {
            match self.ledger.expire(&project).await {
                Ok(n) => released += n,
                Err(error) => tracing::warn!(%project, %error, "expiry sweep failed; will retry"),
            }
        }
        Ok(released)
    }

    /// The next instant a known hold expires.
    pub fn next_expiry(&self) -> Option<Timestamp> {
        self.by_expiry.first().map(|(t, _, _)| *t)
    }

    /// Sweeps until `shutdown` resolves: at the next expiry, on new events, or every
    /// `max_interval` at the latest.
    pub async fn run(
        mut self,
        max_interval: Duration,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let mut head = self.ledger.store().watch_head();
        tokio::pin!(shutdown);
        loop {
            if let Err(error) = self.sweep().await {
                tracing::warn!(%error, "expiry sweep failed; will retry");
            }
            let wait = self
                .next_expiry()
                .map(|t| (t - self.ledger.clock().now()).to_std().unwrap_or_default())
                .unwrap_or(max_interval)
                .clamp(Duration::from_millis(10), max_interval);
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(wait) => {}
                changed = head.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // Under load the head moves on every batch; one sweep per pause is enough.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}
