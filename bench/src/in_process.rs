//! The driver that decides with a `Ledger` in this process, on the store itself.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use domain::{Limit, Limits, ProjectId, Refusal, ReservationId};
use ledger::{Ledger, LedgerError, Metadata};

use crate::driver::{Answer, Driver, WritePath};
use crate::report::round2;
use crate::workload::{boot_deltas, boot_resources, HOLD_SECONDS};

pub(crate) struct InProcess {
    pub(crate) ledger: Arc<Ledger>,
}

#[async_trait]
impl Driver for InProcess {
    async fn ensure_defaults(&self) -> Result<(), String> {
        let defaults = self
            .ledger
            .refresh_defaults()
            .await
            .map_err(|e| e.to_string())?;
        let missing: Limits = boot_resources()
            .filter(|r| defaults.limit(r).is_none())
            .map(|r| (r, Limit::UNLIMITED))
            .collect();
        if !missing.is_empty() {
            self.ledger
                .set_defaults(&missing, &bench_meta())
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn set_limits(&self, project: &ProjectId, limits: &Limits) -> Result<(), String> {
        self.ledger
            .set_limits(project, limits.clone(), true, &bench_meta())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn set_parent(&self, project: &ProjectId, parent: &ProjectId) -> Result<(), String> {
        self.ledger
            .set_parent(project, Some(parent.clone()), true, &bench_meta())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn reserve(&self, project: &ProjectId) -> Answer {
        match self
            .ledger
            .reserve(project, None, boot_deltas(), HOLD_SECONDS, &bench_meta())
            .await
        {
            Ok(view) => Answer::Granted {
                id: view.reservation_id,
                position: view.position,
            },
            Err(LedgerError::Refused(Refusal::OverQuota { .. })) => Answer::Denied,
            Err(e) => Answer::Failed(e.to_string()),
        }
    }

    async fn commit(&self, project: &ProjectId, id: ReservationId) -> Answer {
        match self.ledger.commit(project, id, &bench_meta()).await {
            Ok(view) => Answer::Granted {
                id,
                position: view.position,
            },
            Err(e) => Answer::Failed(e.to_string()),
        }
    }

    fn conflicts(&self) -> u64 {
        self.ledger.stats().conflicts.load(Ordering::Relaxed)
    }

    fn write_path(&self) -> Option<WritePath> {
        let stats = self.ledger.stats();
        let commits = stats.batches.load(Ordering::Relaxed);
        let decisions = stats.batch_appends.load(Ordering::Relaxed);
        Some(WritePath {
            commits,
            decisions_per_commit: round2(decisions as f64 / commits.max(1) as f64),
            commit_ms_p50: stats.commit_times.percentile_ms(0.50),
            commit_ms_p99: stats.commit_times.percentile_ms(0.99),
        })
    }

    fn describe(&self) -> Option<String> {
        let stats = self.ledger.stats();
        let batches = stats.batches.load(Ordering::Relaxed).max(1);
        Some(format!(
            "{batches} group commits, {:.1} decisions and {:.1} events each, {:.2} ms each",
            stats.batch_appends.load(Ordering::Relaxed) as f64 / batches as f64,
            stats.batch_events.load(Ordering::Relaxed) as f64 / batches as f64,
            stats.batch_micros.load(Ordering::Relaxed) as f64 / batches as f64 / 1000.0,
        ))
    }
}

/// The bench's decisions are recorded as its own, under a system principal.
fn bench_meta() -> Metadata {
    Metadata {
        actor: Some("bench".into()),
        principal: Some("system:bench".into()),
        ..Metadata::default()
    }
}
