//! Problem answers (RFC 9457) as a typed error, and the error of every client call.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::wire::OverQuota;

/// A problem answer of the server.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The HTTP status of the answer.
    pub status: u16,
    /// The last segment of the problem's `type`, e.g. `over-quota` (`error` when it has none).
    pub code: String,
    /// This occurrence, for people (empty when the server gave none).
    pub detail: String,
    /// The members beyond `type`, `title`, `status` and `detail`, in the server's order.
    pub extensions: Vec<(String, Value)>,
    /// The whole document as the server sent it: `quota --json` prints it verbatim.
    pub document: Value,
}

impl Problem {
    /// Reads a problem from an error answer's JSON object.
    fn from_object(status: u16, members: Map<String, Value>) -> Problem {
        let code = members
            .get("type")
            .and_then(Value::as_str)
            .and_then(|t| t.rsplit('/').next())
            .unwrap_or("error")
            .to_owned();
        let detail = members
            .get("detail")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let extensions = members
            .iter()
            .filter(|(name, _)| !matches!(name.as_str(), "type" | "title" | "status" | "detail"))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        Problem {
            status,
            code,
            detail,
            extensions,
            document: Value::Object(members),
        }
    }

    /// An `over-quota` problem's members: what is over, the project's, the user's or an
    /// ancestor's (`ancestor_overs`). `None` for any other problem.
    pub fn over_quota(&self) -> Option<OverQuota> {
        if self.code != "over-quota" {
            return None;
        }
        OverQuota::deserialize(&self.document).ok()
    }
}

/// `over-quota (403): over quota for instances`, then each extension on a line of its own.
impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.status, self.detail)?;
        for (name, value) in &self.extensions {
            write!(f, "\n  {name}: {value}")?;
        }
        Ok(())
    }
}

/// Why a call of the quota API failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot build the HTTP client: {0}")]
    Build(#[source] reqwest::Error),
    #[error("cannot reach {base}: {source}")]
    Unreachable {
        base: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("reading the answer of {method} {path}: {source}")]
    Read {
        method: reqwest::Method,
        path: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{method} {path}: the answer is not JSON: {source}")]
    NotJson {
        method: reqwest::Method,
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{method} {path}: the answer is not of the expected shape: {source}")]
    UnexpectedShape {
        method: reqwest::Method,
        path: String,
        #[source]
        source: serde_json::Error,
    },
    /// The server answered with a problem document.
    #[error("{0}")]
    Problem(Problem),
    /// An error status whose body is not a problem document (a proxy's page, say).
    #[error("the server answered {status}: {excerpt}")]
    NotProblem {
        status: reqwest::StatusCode,
        /// The start of the body (200 characters).
        excerpt: String,
    },
}

impl ClientError {
    /// The error answer's HTTP status, when the server answered with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Problem(problem) => Some(problem.status),
            ClientError::NotProblem { status, .. } => Some(status.as_u16()),
            _ => None,
        }
    }

    /// The error of an answer with a status other than 2xx, from its body.
    pub fn from_answer(status: reqwest::StatusCode, text: &str) -> ClientError {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(members)) => {
                ClientError::Problem(Problem::from_object(status.as_u16(), members))
            }
            _ => ClientError::NotProblem {
                status,
                excerpt: text.chars().take(200).collect(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_reads_as_its_code_detail_and_extensions() {
        let text = r#"{"type":"https://quota-ledger.dev/problems/over-quota","title":"Over quota",
            "status":403,"detail":"over quota for instances","overs":["instances"]}"#;
        let error = ClientError::from_answer(reqwest::StatusCode::FORBIDDEN, text);
        assert_eq!(error.status(), Some(403));
        assert_eq!(
            error.to_string(),
            "over-quota (403): over quota for instances\n  overs: [\"instances\"]"
        );
    }

    #[test]
    fn a_users_over_quota_names_the_users_overs() {
        let text = r#"{"type":"https://quota-ledger.dev/problems/over-quota","title":"Over quota",
            "status":403,"detail":"over the user's quota for instances","overs":[],
            "user_overs":["instances"]}"#;
        let error = ClientError::from_answer(reqwest::StatusCode::FORBIDDEN, text);
        assert_eq!(
            error.to_string(),
            "over-quota (403): over the user's quota for instances\n  overs: []\n  \
             user_overs: [\"instances\"]"
        );
    }

    #[test]
    fn an_over_quota_problem_names_the_ancestors_over() {
        let text = r#"{"type":"https://quota-ledger.dev/problems/over-quota","title":"Over quota",
            "status":403,"detail":"over acme's quota for instances","overs":[],
            "ancestor_overs":{"acme":["instances"]}}"#;
        let ClientError::Problem(problem) =
            ClientError::from_answer(reqwest::StatusCode::FORBIDDEN, text)
        else {
            panic!("a problem");
        };
        let over = problem.over_quota().expect("an over-quota problem");
        assert!(over.overs.is_empty() && over.user_overs.is_none());
        assert_eq!(over.ancestor_overs["acme"], ["instances"]);
        let text = problem.to_string();
        assert!(
            text.starts_with("over-quota (403): over acme's quota for instances\n")
                && text.contains("\n  ancestor_overs: {\"acme\":[\"instances\"]}"),
            "{text}"
        );
        let other = r#"{"type":"https://quota-ledger.dev/problems/not-found","status":404}"#;
        let ClientError::Problem(other) =
            ClientError::from_answer(reqwest::StatusCode::NOT_FOUND, other)
        else {
            panic!("a problem");
        };
        assert!(other.over_quota().is_none());
    }

    #[test]
    fn a_body_that_is_not_a_problem_is_quoted() {
        let error = ClientError::from_answer(reqwest::StatusCode::BAD_GATEWAY, "<html>");
        assert_eq!(
            error.to_string(),
            "the server answered 502 Bad Gateway: <html>"
        );
    }
}
