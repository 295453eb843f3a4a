//! The checks of the end-to-end suite, written once and run against each store.

mod auth;
mod bad_inputs;
mod limits;
mod reservations;
mod service;

// Each test binary calls only some of these (like the `dead_code` allowance of `super`).
#[allow(unused_imports)]
pub use self::{
    auth::{auth_scoping, TOKENS},
    bad_inputs::bad_inputs,
    limits::{defaults_rows, limits_rows},
    reservations::{expiry_row, over_quota_row, reservation_rows, seed_burst},
    service::service_rows,
};

use serde_json::Value;

use super::Answer;

fn id_of(answer: &Answer) -> String {
    answer.body["reservation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no reservation_id in {answer:?}"))
        .to_owned()
}

fn is_rfc3339_utc(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| s.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(s).is_ok())
}
