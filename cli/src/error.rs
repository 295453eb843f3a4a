//! A failed command: what it prints, and how a client's error reads on the command line.

use client::{ClientError, Problem};
use serde_json::Value;

/// A failed command: the message for stderr, and the problem for `--json`.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
    /// The server's problem document, printed verbatim with `--json`.
    pub problem: Option<Value>,
}

impl CliError {
    pub fn new(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            problem: None,
        }
    }
}

/// What an operator can do about a refusal, for the problems that have one remedy.
fn hint(problem: &Problem) -> Option<&'static str> {
    match (problem.status, problem.code.as_str()) {
        (401, _) => Some("set QUOTA_TOKEN or --token"),
        (_, "limit-below-usage") => Some(
            "to set it anyway, add --force: usage stays as it is, and reserves are refused \
             until it falls under the limit",
        ),
        (_, "unknown-resource") => Some(
            "a resource exists once it has a default limit: quota defaults set NAME=LIMIT \
             (-1 for unlimited)",
        ),
        (_, "over-quota") if over_an_ancestors_limits(problem) => Some(
            "ancestor_overs are over an ancestor's limits, which cap its whole subtree: quota \
             usage ANCESTOR shows each child's share, quota limits set ANCESTOR NAME=LIMIT \
             changes them",
        ),
        (_, "over-quota") if over_a_users_limits(problem) => Some(
            "user_overs are over the user's own limits: quota usage PROJECT --user USER shows \
             them, quota limits set PROJECT NAME=LIMIT --user USER changes them",
        ),
        _ => None,
    }
}

/// Whether an over-quota problem names an ancestor whose limits the reserve would go over.
fn over_an_ancestors_limits(problem: &Problem) -> bool {
    problem
        .over_quota()
        .is_some_and(|over| over.ancestor_overs.values().any(|r| !r.is_empty()))
}

/// Whether an over-quota problem names resources over the user's own limits (`user_overs`).
fn over_a_users_limits(problem: &Problem) -> bool {
    problem.extensions.iter().any(|(name, value)| {
        name == "user_overs" && value.as_array().is_some_and(|o| !o.is_empty())
    })
}

/// A client's error, with the hint an operator needs for the usual causes (no server at the
/// URL, no token).
impl From<ClientError> for CliError {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::Unreachable { .. } => CliError::new(format!(
                "{error} (is `quota serve` running? set QUOTA_URL or --url)"
            )),
            ClientError::Problem(problem) => {
                let mut message = problem.to_string();
                if let Some(hint) = hint(&problem) {
                    message.push_str("\n  (");
                    message.push_str(hint);
                    message.push(')');
                }
                CliError {
                    message,
                    problem: Some(problem.document),
                }
            }
            other => CliError::new(other.to_string()),
        }
    }
}
