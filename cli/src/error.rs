//! A failed command: what it prints, and how a client's error reads on the command line.

use client::ClientError;
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
fn hint(status: u16, code: &str) -> Option<&'static str> {
    match (status, code) {
        (401, _) => Some("set QUOTA_TOKEN or --token"),
        (_, "limit-below-usage") => Some(
            "to set it anyway, add --force: usage stays as it is, and reserves are refused \
             until it falls under the limit",
        ),
        (_, "unknown-resource") => Some(
            "a resource exists once it has a default limit: quota defaults set NAME=LIMIT \
             (-1 for unlimited)",
        ),
        _ => None,
    }
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
                if let Some(hint) = hint(problem.status, &problem.code) {
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
