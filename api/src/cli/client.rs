//! A small HTTP client for the `quota` commands: bearer token, JSON in and out, and problem
//! answers turned into readable errors.

use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::CliError;

pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    pub fn new(base: &str, token: Option<String>) -> Result<Client, CliError> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| CliError::new(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: token.filter(|t| !t.is_empty()),
        })
    }

    /// Sends a request; answers the JSON body of a 2xx (`Null` for 204), or the problem as an
    /// error.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<Value, CliError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method.clone(), &url).query(query);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| {
            CliError::new(format!(
                "cannot reach {}: {e} (is `quota serve` running? set QUOTA_URL or --url)",
                self.base
            ))
        })?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| CliError::new(format!("reading the answer of {method} {path}: {e}")))?;
        if status.is_success() {
            if status == StatusCode::NO_CONTENT || text.trim().is_empty() {
                return Ok(Value::Null);
            }
            return serde_json::from_str(&text).map_err(|e| {
                CliError::new(format!("{method} {path}: the answer is not JSON: {e}"))
            });
        }
        Err(problem_error(status, &text))
    }
}

/// A readable error from a problem answer: `over-quota (403): over quota for instances`, plus
/// the problem's extra members, and the whole problem for `--json` users.
fn problem_error(status: StatusCode, text: &str) -> CliError {
    let Ok(Value::Object(problem)) = serde_json::from_str::<Value>(text) else {
        return CliError::new(format!(
            "the server answered {status}: {}",
            text.chars().take(200).collect::<String>()
        ));
    };
    let code = problem
        .get("type")
        .and_then(Value::as_str)
        .and_then(|t| t.rsplit('/').next())
        .unwrap_or("error");
    let detail = problem
        .get("detail")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut message = format!("{code} ({}): {detail}", status.as_u16());
    for (name, value) in &problem {
        if !matches!(name.as_str(), "type" | "title" | "status" | "detail") {
            message.push_str(&format!("\n  {name}: {value}"));
        }
    }
    if status == StatusCode::UNAUTHORIZED {
        message.push_str("\n  (set QUOTA_TOKEN or --token)");
    }
    CliError {
        message,
        problem: Some(Value::Object(problem)),
    }
}
