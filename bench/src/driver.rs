//! Where decisions go: the ledger in this process ([`crate::in_process`]) or a server over
//! HTTP ([`crate::over_http`]).

use async_trait::async_trait;
use domain::{Limits, ProjectId, ReservationId};

/// The ledger's group commits during a run: how many, how full, how long in the store.
pub(crate) struct WritePath {
    pub commits: u64,
    pub decisions_per_commit: f64,
    pub commit_ms_p50: Option<f64>,
    pub commit_ms_p99: Option<f64>,
}

/// The answer to one decision, as the load counts it.
pub(crate) enum Answer {
    Granted { id: ReservationId, position: u64 },
    Denied,
    Failed(String),
}

#[async_trait]
pub(crate) trait Driver: Send + Sync {
    async fn set_limits(&self, project: &ProjectId, limits: &Limits) -> Result<(), String>;
    /// Puts `project` under `parent` (SPEC rule 11).
    async fn set_parent(&self, project: &ProjectId, parent: &ProjectId) -> Result<(), String>;
    /// Makes sure every resource of a boot has a default limit (unlimited where missing).
    async fn ensure_defaults(&self) -> Result<(), String>;
    async fn reserve(&self, project: &ProjectId) -> Answer;
    async fn commit(&self, project: &ProjectId, id: ReservationId) -> Answer;
    fn conflicts(&self) -> u64;
    /// A line about the write path, for the progress output.
    fn describe(&self) -> Option<String> {
        None
    }
    /// The write path's figures, where the driver sees the ledger (in-process).
    fn write_path(&self) -> Option<WritePath> {
        None
    }
}
