//! Where decisions go: the ledger in this process ([`crate::in_process`]) or a server over
//! HTTP ([`crate::over_http`]).

use async_trait::async_trait;
use domain::{Limits, ProjectId, ReservationId};

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
}
