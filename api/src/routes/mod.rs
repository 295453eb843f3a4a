//! The handlers, one module per resource, and the JSON shapes they answer with; [`table`]
//! registers each route with what it needs from the caller.

pub mod admin;
pub mod audit;
pub mod console;
pub mod corrections;
pub mod defaults;
pub mod history;
pub mod limits;
pub mod nova;
pub mod parent;
pub mod projects;
pub mod registry;
pub mod reservation_list;
pub mod reservations;
pub mod service;
pub mod table;
pub mod usage;
pub mod users;

use chrono::SecondsFormat;
use domain::Timestamp;

/// RFC 3339 in UTC with milliseconds (the store's precision), e.g. `2026-01-31T12:00:00.000Z`.
pub fn rfc3339(t: Timestamp) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Counts a decision for `/metrics`: which command, and `granted` or the problem code.
pub fn count_decision<T>(command: &'static str, result: &Result<T, crate::error::ApiError>) {
    let outcome = match result {
        Ok(_) => "granted",
        Err(error) => error.code().as_str(),
    };
    metrics::counter!("quota_decisions_total", "command" => command, "outcome" => outcome)
        .increment(1);
}
