//! What a ledger operation can fail with.

use domain::Refusal;

use crate::store::StoreError;

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
