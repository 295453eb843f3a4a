//! How the views are doing, for `/healthz` and `/metrics`: a view whose last batch failed is
//! degraded, with the reason, until a batch succeeds; every failure is counted.

use std::sync::Mutex;

use crate::{ProjectionError, PROJECTION_NAMES};

/// One view's health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewHealth {
    pub name: String,
    /// Batches that failed since this process started (each was tried again).
    pub failures: u64,
    /// Why the view is not following the events, while it is not; `None` when it is.
    pub degraded: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    failures: u64,
    reason: Option<String>,
}

/// Shared by the follower, which reports, and the handle, which answers.
#[derive(Debug, Default)]
pub(crate) struct Health {
    state: Mutex<State>,
}

impl Health {
    /// A batch failed: every view is applied in each batch, so all of them are held up.
    pub(crate) fn failed(&self, error: &ProjectionError) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.failures = state.failures.saturating_add(1);
        state.reason = Some(reason(error));
    }

    pub(crate) fn recovered(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).reason = None;
    }

    pub(crate) fn report(&self) -> Vec<ViewHealth> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        PROJECTION_NAMES
            .iter()
            .map(|name| ViewHealth {
                name: (*name).to_owned(),
                failures: state.failures,
                degraded: state.reason.clone(),
            })
            .collect()
    }
}

/// A reason fit for an unauthenticated `/healthz`: what failed and where, never the stored
/// data or a database's message (those go to the log).
fn reason(error: &ProjectionError) -> String {
    match error {
        ProjectionError::Undecodable { position, .. } => format!(
            "the event at position {position} does not decode; the views wait there and retry"
        ),
        ProjectionError::Store(_) => "the event store is unavailable; retrying".into(),
        ProjectionError::Database(_) => "the views' database is unavailable; retrying".into(),
        ProjectionError::CorruptView(_) => "the view tables are corrupt; retrying".into(),
        ProjectionError::UnknownProjection(_)
        | ProjectionError::Outdated(_)
        | ProjectionError::InvalidCursor
        | ProjectionError::TooManyPoints(_)
        | ProjectionError::Timeout { .. } => "a view batch failed; retrying".into(),
    }
}
