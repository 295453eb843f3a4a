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
                if problem.status == 401 {
                    message.push_str("\n  (set QUOTA_TOKEN or --token)");
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
