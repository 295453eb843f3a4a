//! The Compute API's quota resources under `/compute/v2.1` (SPEC: "Nova-compatible quota
//! API"), so OpenStack tooling (python-novaclient, `openstack quota`) can use the ledger as it
//! is: quota sets ([`sets`]) and the default quota class ([`classes`]), in Nova's JSON shapes;
//! errors in Nova's body ([`faults`]). They are thin: each one is a call the `/v1` API makes
//! too (limits, defaults, the usage view), answered in Nova's words.
//!
//! `?user_id=u` makes a quota set about the user's limits inside the project (SPEC rule 8): its
//! own overrides over the project's, and its own usage.

pub mod classes;
pub mod faults;
pub mod sets;

use std::collections::BTreeMap;

use domain::{Defaults, Limit, Limits, ResourceName, UserId};
use ledger::LimitsView;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{truncate, ApiError};
use crate::extract::parse_user;

/// Where the Compute API is mounted.
pub const PREFIX: &str = "/compute/v2.1";

/// The query every quota-set route takes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserQuery {
    pub user_id: Option<String>,
}

impl UserQuery {
    /// The user the request is about, validated (the project id grammar).
    pub fn user(&self) -> Result<Option<UserId>, ApiError> {
        self.user_id.as_deref().map(parse_user).transpose()
    }
}

/// `{resource: limit}` as Nova writes it (integers, -1 unlimited).
fn limits_object<'a>(
    limits: impl IntoIterator<Item = (&'a ResourceName, &'a Limit)>,
) -> Map<String, Value> {
    limits
        .into_iter()
        .map(|(r, l)| (r.to_string(), Value::from(l.value())))
        .collect()
}

/// The default limits, as Nova writes a quota set or class.
pub fn defaults_object(defaults: &Defaults) -> Map<String, Value> {
    limits_object(&defaults.limits)
}

/// A project's effective limits, as Nova writes its quota set.
pub fn project_object(view: &LimitsView) -> Map<String, Value> {
    limits_object(view.limits.iter().map(|(r, (l, _))| (r, l)))
}

/// The limits of a Nova update body (`quota_set` or `quota_class_set`): each value an integer,
/// or a string of one (Nova accepts both); `force` is taken out by the caller first.
pub fn parse_limits(values: Map<String, Value>) -> Result<Limits, ApiError> {
    let mut limits = BTreeMap::new();
    for (name, value) in values {
        let resource =
            ResourceName::parse(&name).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
        let number = match &value {
            Value::Number(n) => n.as_i64(),
            Value::String(s) if s.trim().parse::<i64>().is_ok() => s.trim().parse().ok(),
            _ => None,
        };
        let number = number.ok_or_else(|| {
            ApiError::InvalidRequest(format!(
                "quota value for {name:?} must be an integer, not {}",
                truncate(&value.to_string())
            ))
        })?;
        let limit = Limit::new(number).map_err(|e| ApiError::InvalidRequest(e.to_string()))?;
        limits.insert(resource, limit);
    }
    Ok(limits)
}

/// A boolean as Nova reads one: `true`/`false`, or their string forms.
pub fn parse_bool(name: &str, value: &Value) -> Result<bool, ApiError> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(false),
        other => Err(ApiError::InvalidRequest(format!(
            "{name} must be a boolean, not {}",
            truncate(&other.to_string())
        ))),
    }
}
