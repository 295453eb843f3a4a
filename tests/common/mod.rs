//! The harness of the end-to-end tests: start `quota serve` (the real binary) on a free port over
//! a fresh SQLite file or PostgreSQL schema, wait until it answers, talk JSON to it, stop it.
//!
//! Each test file uses a different part of this module, hence the allowance for unused items.
#![allow(dead_code)]

pub mod scenarios;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::Value;

pub const BINARY: &str = env!("CARGO_BIN_EXE_quota");

/// Where a server keeps its events.
pub struct StoreUrl {
    pub url: String,
    /// The PostgreSQL server and schema, for tests that reach behind the service's back.
    pub postgres: Option<(String, String)>,
    /// Keeps the SQLite file's folder alive.
    _dir: Option<tempfile::TempDir>,
    /// Drops the PostgreSQL schema with the store; declare servers after their store so that
    /// they stop first.
    _schema: Option<ledger::testing::PostgresSchema>,
}

pub fn sqlite_store() -> StoreUrl {
    let dir = tempfile::tempdir().expect("temporary folder");
    let url = format!("sqlite://{}", dir.path().join("quota.db").display());
    StoreUrl {
        url,
        postgres: None,
        _dir: Some(dir),
        _schema: None,
    }
}

/// A new schema on the PostgreSQL server of `QUOTA_TEST_POSTGRES_URL`, dropped with the
/// returned store, or `None` (the test is skipped) when it is not set.
pub async fn postgres_store() -> Option<StoreUrl> {
    let server = ledger::testing::postgres_url()?;
    let schema = ledger::testing::postgres_schema(&server).await;
    Some(StoreUrl {
        url: ledger::testing::postgres_url_in(&server, &schema),
        postgres: Some((server, schema.name().to_owned())),
        _dir: None,
        _schema: Some(schema),
    })
}

/// A running `quota serve`, killed when dropped.
pub struct Server {
    child: Child,
    pub url: String,
    log: PathBuf,
    _log_dir: tempfile::TempDir,
}

pub struct ServerOptions<'a> {
    pub store: &'a str,
    pub tokens: Option<&'a Path>,
    pub extra: &'a [&'a str],
}

impl Server {
    pub fn start(store: &StoreUrl) -> Server {
        Server::start_with(ServerOptions {
            store: &store.url,
            tokens: None,
            extra: &[],
        })
    }

    pub fn start_with_tokens(store: &StoreUrl, tokens: &Path) -> Server {
        Server::start_with(ServerOptions {
            store: &store.url,
            tokens: Some(tokens),
            extra: &[],
        })
    }

    pub fn start_with(options: ServerOptions<'_>) -> Server {
        let log_dir = tempfile::tempdir().expect("log folder");
        let log = log_dir.path().join("server.log");
        let log_file = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(BINARY);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--store", options.store])
            .args(options.extra)
            .env("RUST_LOG", "info")
            .env_remove("QUOTA_TOKENS")
            .env_remove("QUOTA_LISTEN")
            .env_remove("QUOTA_STORE")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file));
        if let Some(tokens) = options.tokens {
            command.arg("--tokens").arg(tokens);
        }
        let mut child = command.spawn().expect("start quota serve");
        let stdout = child.stdout.take().expect("stdout of quota serve");
        // The server prints its address (port 0 picked a free one) once it listens.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("quota listening on ") {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "quota serve did not start; its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
        };
        let server = Server {
            child,
            url,
            log,
            _log_dir: log_dir,
        };
        server.wait_healthy();
        server
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if healthz_ok(&self.url) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "quota serve at {} never became healthy; log:\n{}",
            self.url,
            self.log_text()
        );
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the exit; returns whether it exited successfully.
    pub fn terminate(mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    pub fn client(&self) -> Api {
        Api::new(&self.url, None)
    }

    pub fn client_with_token(&self, token: &str) -> Api {
        Api::new(&self.url, Some(token))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- log of quota serve at {} ---\n{}",
                self.url,
                self.log_text()
            );
        }
    }
}

/// Whether `GET /healthz` answers 200: a plain-socket probe, since servers are started from
/// synchronous code.
fn healthz_ok(base: &str) -> bool {
    use std::io::{Read, Write};
    let Some(host) = base.strip_prefix("http://") else {
        return false;
    };
    let Ok(mut stream) = std::net::TcpStream::connect(host) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// An answer: status, headers and the body (JSON, or a string for anything else).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    async fn read(response: reqwest::Response) -> Answer {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let text = response.text().await.expect("response body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            status,
            content_type,
            headers,
            body,
        }
    }

    /// The problem code: the last segment of `type`.
    pub fn code(&self) -> &str {
        self.body["type"]
            .as_str()
            .and_then(|t| t.rsplit('/').next())
            .unwrap_or("")
    }

    /// Asserts a problem+json answer with this status and code.
    #[track_caller]
    pub fn assert_problem(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{self:?}");
        assert_eq!(self.code(), code, "{self:?}");
        assert!(
            self.content_type.starts_with("application/problem+json"),
            "content type {:?}",
            self.content_type
        );
        assert_eq!(self.body["status"], status, "{self:?}");
        assert!(
            self.body["title"].is_string() && self.body["detail"].is_string(),
            "{self:?}"
        );
    }

    #[track_caller]
    pub fn assert_status(&self, status: u16) -> &Value {
        assert_eq!(self.status, status, "{self:?}");
        &self.body
    }
}

#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Api {
    pub fn new(base: &str, token: Option<&str>) -> Api {
        Api {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("HTTP client"),
            base: base.to_owned(),
            token: token.map(str::to_owned),
        }
    }

    /// Sends `body` as JSON if it is a `Value`, or raw text if it is a string.
    pub async fn send(&self, method: Method, path: &str, body: Option<Body>) -> Answer {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        match body {
            Some(Body::Json(value)) => request = request.json(&value),
            Some(Body::Raw(text)) => {
                request = request
                    .header("content-type", "application/json")
                    .body(text)
            }
            None => {}
        }
        let response = request.send().await.expect("request reaches the server");
        Answer::read(response).await
    }

    pub async fn get_with_header(&self, path: &str, name: &str, value: &str) -> Answer {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header(name, value)
            .send()
            .await
            .expect("request reaches the server");
        Answer::read(response).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(Method::GET, path, None).await
    }

    pub async fn put(&self, path: &str, body: Value) -> Answer {
        self.send(Method::PUT, path, Some(Body::Json(body))).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Answer {
        self.send(Method::POST, path, Some(Body::Json(body))).await
    }

    pub async fn post_empty(&self, path: &str) -> Answer {
        self.send(Method::POST, path, None).await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.send(Method::DELETE, path, None).await
    }

    // Shorthands for the common calls.

    pub async fn set_defaults(&self, limits: Value) -> Value {
        self.put("/v1/defaults", serde_json::json!({ "limits": limits }))
            .await
            .assert_status(200)
            .clone()
    }

    pub async fn reserve(&self, project: &str, deltas: Value) -> Answer {
        self.post(
            &format!("/v1/projects/{project}/reservations"),
            serde_json::json!({ "deltas": deltas }),
        )
        .await
    }

    pub async fn commit(&self, project: &str, id: &str) -> Answer {
        self.post_empty(&format!("/v1/projects/{project}/reservations/{id}/commit"))
            .await
    }

    pub async fn release(&self, project: &str, id: &str) -> Answer {
        self.post_empty(&format!("/v1/projects/{project}/reservations/{id}/release"))
            .await
    }
}

pub enum Body {
    Json(Value),
    Raw(String),
}

/// Writes a tokens file into `dir`.
pub fn tokens_file(dir: &Path, lines: &str) -> PathBuf {
    let path = dir.join("tokens");
    std::fs::write(&path, lines).expect("write tokens file");
    path
}

/// Runs the `quota` command line against `url`, with no token or store from the environment;
/// returns (exit success, stdout, stderr). Blocking: async tests use [`cli`].
pub fn quota<S: AsRef<str>>(url: &str, args: &[S]) -> (bool, String, String) {
    let output = Command::new(BINARY)
        .args(args.iter().map(AsRef::as_ref))
        .env("QUOTA_URL", url)
        .env_remove("QUOTA_TOKEN")
        .env_remove("QUOTA_STORE")
        .output()
        .expect("run quota");
    outcome(&output)
}

/// A finished command as (exit success, stdout, stderr).
pub fn outcome(output: &std::process::Output) -> (bool, String, String) {
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// [`quota`], off the async runtime's threads (the command blocks until it exits).
pub async fn cli<S: AsRef<str>>(
    url: &str,
    args: impl IntoIterator<Item = S>,
) -> (bool, String, String) {
    let url = url.to_owned();
    let args: Vec<String> = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
    tokio::task::spawn_blocking(move || quota(&url, &args))
        .await
        .expect("run quota")
}

/// A command's stdout as JSON.
pub fn json_of(stdout: &str) -> Value {
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// The store's head (global position of its last event), read directly: whether a request
/// recorded anything.
pub async fn store_head(store: &StoreUrl) -> u64 {
    let store = ledger::store::open(&store.url)
        .await
        .expect("open the store");
    store.head().await.expect("head")
}

/// Raw SQL on the server's events, behind its back (as an operator, or a newer build, would).
pub async fn execute_on_events(store: &StoreUrl, sql: &str) {
    match &store.postgres {
        Some((server, schema)) => {
            let url = ledger::testing::postgres_url_in(server, schema);
            let pool = sqlx::PgPool::connect(&url).await.expect("connect");
            sqlx::query(sql).execute(&pool).await.expect("raw SQL");
            pool.close().await;
        }
        None => {
            let pool = sqlx::SqlitePool::connect(&store.url).await.expect("open");
            sqlx::query(sql).execute(&pool).await.expect("raw SQL");
            pool.close().await;
        }
    }
}

/// Stalls the server's views for good: appends an event they cannot decode, then a real
/// reserve of one `instances` in `project` after it, and answers that reserve's position
/// (which the views never reach).
pub async fn stall_the_views(store: &StoreUrl, api: &Api, project: &str) -> u64 {
    let backend = if store.postgres.is_some() {
        "postgres"
    } else {
        "sqlite"
    };
    execute_on_events(
        store,
        &ledger::testing::undecodable_event_sql(
            backend,
            "(SELECT COALESCE(MAX(position), 0) + 1 FROM events)",
        ),
    )
    .await;
    let after = api
        .reserve(project, serde_json::json!({"instances": 1}))
        .await;
    after.assert_status(201)["position"]
        .as_u64()
        .expect("position")
}

/// Waits past the current millisecond, so that what follows is recorded at a later instant (a
/// usage history's point is a millisecond: changes within one share it).
pub async fn next_millisecond() {
    tokio::time::sleep(Duration::from_millis(2)).await;
}

/// Waits (up to 30 s) until every view has applied the whole log, as `/v1/admin/projections`
/// reports it; fails the test if they stop following it.
pub async fn views_caught_up(api: &Api) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = api.get("/v1/admin/projections").await;
        let views = answer
            .assert_status(200)
            .as_array()
            .expect("a list")
            .clone();
        if views.iter().all(|view| view["lag"] == 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the views stopped following the log: {views:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
