//! The `quota` command line: `serve`, the HTTP clients for operators, `projections` (which opens
//! the store directly) and `bench`.
//!
//! Clients read `QUOTA_URL` (default http://127.0.0.1:8080) and `QUOTA_TOKEN`; they print tables
//! by default and the server's JSON with `--json`; a failure prints the problem and exits 1.

mod client;
mod projections;
mod table;

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};

use crate::server::{ServeArgs, DEFAULT_STORE};
use client::Client;

#[derive(Debug, Parser)]
#[command(
    name = "quota",
    version,
    about = "An event-sourced quota service and its clients"
)]
pub struct Cli {
    /// The server's base URL.
    #[arg(
        long,
        global = true,
        env = "QUOTA_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// Bearer token (prefer the environment variable: command lines are visible to others).
    #[arg(long, global = true, env = "QUOTA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the server's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP service.
    Serve(ServeArgs),
    /// Default limits (they also define which resources exist).
    #[command(subcommand)]
    Defaults(DefaultsCommand),
    /// A project's limits.
    #[command(subcommand)]
    Limits(LimitsCommand),
    /// Reserve deltas for a project: `quota reserve acme instances=1 cores=2 ram=4096`.
    Reserve {
        project: String,
        /// RESOURCE=AMOUNT pairs.
        #[arg(required = true, value_parser = parse_pair)]
        deltas: Vec<(String, i64)>,
        /// Seconds until an uncommitted hold expires (1 to 2592000; server default 86400).
        #[arg(long)]
        expires_in: Option<i64>,
        /// A reservation id of your choosing (UUID), for idempotent retries.
        #[arg(long)]
        id: Option<String>,
        /// Who asks, for the audit.
        #[arg(long)]
        actor: Option<String>,
    },
    /// Commit a held reservation.
    Commit {
        project: String,
        id: String,
        #[arg(long)]
        actor: Option<String>,
    },
    /// Release a reservation (roll back a hold, or free committed usage).
    Release {
        project: String,
        id: String,
        #[arg(long)]
        actor: Option<String>,
    },
    /// Show a reservation.
    Reservation { project: String, id: String },
    /// A project's usage, now or at a past time.
    Usage {
        project: String,
        /// RFC 3339 time, e.g. 2026-01-31T12:00:00Z.
        #[arg(long)]
        at: Option<String>,
        /// Wait until the view reflects this position.
        #[arg(long)]
        min_position: Option<u64>,
    },
    /// A project's audit trail.
    Audit {
        project: String,
        #[arg(long)]
        since: Option<String>,
        #[arg(long)]
        until: Option<String>,
        /// Event type, e.g. ReservationDenied.
        #[arg(long = "type")]
        event_type: Option<String>,
        #[arg(long)]
        reservation: Option<String>,
        #[arg(long)]
        actor: Option<String>,
        /// Page size (1 to 1000).
        #[arg(long)]
        limit: Option<u64>,
        /// Continue from a previous page's `next`.
        #[arg(long)]
        cursor: Option<String>,
        /// Follow `next` and print every page.
        #[arg(long)]
        all: bool,
    },
    /// The usage and audit views.
    #[command(subcommand)]
    Projections(ProjectionsCommand),
    /// The load generator.
    Bench(crate::bench::BenchArgs),
}

#[derive(Debug, Subcommand)]
pub enum DefaultsCommand {
    Get,
    /// Set default limits: `quota defaults set instances=10 cores=20 ram=-1`.
    Set {
        #[arg(required = true, value_parser = parse_pair)]
        limits: Vec<(String, i64)>,
    },
}

#[derive(Debug, Subcommand)]
pub enum LimitsCommand {
    Get {
        project: String,
    },
    /// Set some of a project's limits: `quota limits set acme instances=5`.
    Set {
        project: String,
        #[arg(required = true, value_parser = parse_pair)]
        limits: Vec<(String, i64)>,
        /// Lower a limit below current usage anyway.
        #[arg(long)]
        force: bool,
    },
    /// Remove the project's own limits: back to the defaults.
    Reset {
        project: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ProjectionsCommand {
    /// Progress of each view, from the server (admin token).
    Status,
    /// Rebuild views from the events, directly on the store, with a progress bar.
    Rebuild {
        /// One view (`usage` or `audit`); all when left out.
        #[arg(long)]
        name: Option<String>,
        #[arg(long, env = "QUOTA_STORE", default_value = DEFAULT_STORE)]
        store: String,
    },
    /// Replay the events and print every difference from the stored views; exit 1 if any.
    Verify {
        /// Only this view's differences (`usage` or `audit`).
        #[arg(long)]
        name: Option<String>,
        #[arg(long, env = "QUOTA_STORE", default_value = DEFAULT_STORE)]
        store: String,
    },
}

fn parse_pair(s: &str) -> Result<(String, i64), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("expected RESOURCE=NUMBER, got {s:?}"))?;
    let value = value
        .parse::<i64>()
        .map_err(|e| format!("{name}: {value:?} is not a 64-bit integer: {e}"))?;
    Ok((name.to_owned(), value))
}

/// A failed command: the message for stderr, and the problem for `--json`.
#[derive(Debug)]
pub struct CliError {
    pub message: String,
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

/// Runs a parsed command line; the exit code is 0 on success, 1 on any failure.
pub async fn run(cli: Cli) -> ExitCode {
    let json_output = cli.json;
    match dispatch(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if let (true, Some(problem)) = (json_output, &error.problem) {
                println!("{problem}");
            }
            eprintln!("error: {}", error.message);
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> Result<(), CliError> {
    let client = || Client::new(&cli.url, cli.token.clone());
    let out = Output { json: cli.json };
    match cli.command {
        Command::Serve(args) => crate::server::serve(args).await.map_err(CliError::new),
        Command::Bench(args) => crate::bench::run(args).await.map_err(CliError::new),
        Command::Defaults(DefaultsCommand::Get) => {
            let answer = client()?
                .send(Method::GET, "/v1/defaults", &[], None)
                .await?;
            out.limits_map(&answer)
        }
        Command::Defaults(DefaultsCommand::Set { limits }) => {
            let body = json!({ "limits": pairs(limits) });
            let answer = client()?
                .send(Method::PUT, "/v1/defaults", &[], Some(&body))
                .await?;
            out.limits_map(&answer)
        }
        Command::Limits(LimitsCommand::Get { project }) => {
            let path = format!("/v1/projects/{}/limits", segment(&project));
            let answer = client()?.send(Method::GET, &path, &[], None).await?;
            out.project_limits(&answer)
        }
        Command::Limits(LimitsCommand::Set {
            project,
            limits,
            force,
        }) => {
            let path = format!("/v1/projects/{}/limits", segment(&project));
            let body = json!({ "limits": pairs(limits), "force": force });
            let answer = client()?.send(Method::PUT, &path, &[], Some(&body)).await?;
            out.limits_map(&answer)
        }
        Command::Limits(LimitsCommand::Reset { project }) => {
            let path = format!("/v1/projects/{}/limits", segment(&project));
            client()?.send(Method::DELETE, &path, &[], None).await?;
            if !out.json {
                println!("{project} is back on the default limits");
            }
            Ok(())
        }
        Command::Reserve {
            project,
            deltas,
            expires_in,
            id,
            actor,
        } => {
            let path = format!("/v1/projects/{}/reservations", segment(&project));
            let mut body = json!({ "deltas": pairs(deltas) });
            if let Some(seconds) = expires_in {
                body["expires_in"] = json!(seconds);
            }
            if let Some(id) = id {
                body["reservation_id"] = json!(id);
            }
            if let Some(actor) = actor {
                body["actor"] = json!(actor);
            }
            let answer = client()?
                .send(Method::POST, &path, &[], Some(&body))
                .await?;
            out.reservation(&answer)
        }
        Command::Commit { project, id, actor } => {
            transition(&client()?, &out, "commit", &project, &id, actor).await
        }
        Command::Release { project, id, actor } => {
            transition(&client()?, &out, "release", &project, &id, actor).await
        }
        Command::Reservation { project, id } => {
            let path = format!(
                "/v1/projects/{}/reservations/{}",
                segment(&project),
                segment(&id)
            );
            let answer = client()?.send(Method::GET, &path, &[], None).await?;
            out.reservation(&answer)
        }
        Command::Usage {
            project,
            at,
            min_position,
        } => {
            let path = format!("/v1/projects/{}/usage", segment(&project));
            let mut query = vec![];
            if let Some(at) = at {
                query.push(("at", at));
            }
            if let Some(position) = min_position {
                query.push(("min_position", position.to_string()));
            }
            let answer = client()?.send(Method::GET, &path, &query, None).await?;
            out.usage(&answer)
        }
        Command::Audit {
            project,
            since,
            until,
            event_type,
            reservation,
            actor,
            limit,
            mut cursor,
            all,
        } => {
            let path = format!("/v1/projects/{}/audit", segment(&project));
            let client = client()?;
            loop {
                let mut query: Vec<(&str, String)> = vec![];
                let optional = [
                    ("since", &since),
                    ("until", &until),
                    ("type", &event_type),
                    ("reservation", &reservation),
                    ("actor", &actor),
                    ("cursor", &cursor),
                ];
                for (name, value) in optional {
                    if let Some(value) = value {
                        query.push((name, value.clone()));
                    }
                }
                if let Some(limit) = limit {
                    query.push(("limit", limit.to_string()));
                }
                let answer = client.send(Method::GET, &path, &query, None).await?;
                out.audit(&answer)?;
                cursor = answer
                    .get("next")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if !all || cursor.is_none() {
                    return Ok(());
                }
            }
        }
        Command::Projections(ProjectionsCommand::Status) => {
            let answer = client()?
                .send(Method::GET, "/v1/admin/projections", &[], None)
                .await?;
            out.projections(&answer)
        }
        Command::Projections(ProjectionsCommand::Rebuild { name, store }) => {
            projections::rebuild(name, &store).await
        }
        Command::Projections(ProjectionsCommand::Verify { name, store }) => {
            projections::verify(name, &store, out.json).await
        }
    }
}

async fn transition(
    client: &Client,
    out: &Output,
    action: &str,
    project: &str,
    id: &str,
    actor: Option<String>,
) -> Result<(), CliError> {
    let path = format!(
        "/v1/projects/{}/reservations/{}/{action}",
        segment(project),
        segment(id)
    );
    let body = actor.map(|a| json!({ "actor": a }));
    let answer = client.send(Method::POST, &path, &[], body.as_ref()).await?;
    out.reservation(&answer)
}

fn pairs(items: Vec<(String, i64)>) -> BTreeMap<String, i64> {
    items.into_iter().collect()
}

/// Percent-encodes a path segment, so an odd project id reaches the server intact (and is
/// refused there with a clear message rather than routed elsewhere).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~' | b':') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Prints answers as tables, or as the server's JSON.
struct Output {
    json: bool,
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn pairs_text(value: &Value) -> String {
    match value.as_object() {
        Some(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", text(v)))
            .collect::<Vec<_>>()
            .join(" "),
        None => text(value),
    }
}

impl Output {
    fn emit(&self, answer: &Value, human: impl FnOnce() -> String) -> Result<(), CliError> {
        if self.json {
            println!("{answer}");
        } else {
            println!("{}", human());
        }
        Ok(())
    }

    fn limits_map(&self, answer: &Value) -> Result<(), CliError> {
        self.emit(answer, || {
            let rows: Vec<Vec<String>> = answer["limits"]
                .as_object()
                .map(|m| m.iter().map(|(r, l)| vec![r.clone(), text(l)]).collect())
                .unwrap_or_default();
            table::render(&["RESOURCE", "LIMIT"], &rows)
        })
    }

    fn project_limits(&self, answer: &Value) -> Result<(), CliError> {
        self.emit(answer, || {
            let rows: Vec<Vec<String>> = answer["limits"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(r, e)| vec![r.clone(), text(&e["limit"]), text(&e["source"])])
                        .collect()
                })
                .unwrap_or_default();
            table::render(&["RESOURCE", "LIMIT", "SOURCE"], &rows)
        })
    }

    fn reservation(&self, answer: &Value) -> Result<(), CliError> {
        self.emit(answer, || {
            let mut rows = vec![
                vec!["reservation".into(), text(&answer["reservation_id"])],
                vec!["project".into(), text(&answer["project"])],
                vec!["status".into(), text(&answer["status"])],
            ];
            if let Some(reason) = answer.get("reason") {
                rows.push(vec!["reason".into(), text(reason)]);
            }
            rows.extend([
                vec!["deltas".into(), pairs_text(&answer["deltas"])],
                vec!["created_at".into(), text(&answer["created_at"])],
                vec!["expires_at".into(), text(&answer["expires_at"])],
                vec!["position".into(), text(&answer["position"])],
            ]);
            rows.iter()
                .map(|r| format!("{:<12} {}", r[0], r[1]))
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    fn usage(&self, answer: &Value) -> Result<(), CliError> {
        self.emit(answer, || {
            let rows: Vec<Vec<String>> = answer["resources"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(r, u)| {
                            let limit = u["limit"].as_i64();
                            vec![
                                r.clone(),
                                if limit == Some(-1) {
                                    "unlimited".into()
                                } else {
                                    text(&u["limit"])
                                },
                                text(&u["in_use"]),
                                text(&u["reserved"]),
                                u.get("headroom").map(text).unwrap_or_else(|| "-".into()),
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "{}\n(as of position {})",
                table::render(
                    &["RESOURCE", "LIMIT", "IN_USE", "RESERVED", "HEADROOM"],
                    &rows
                ),
                text(&answer["position"])
            )
        })
    }

    fn audit(&self, answer: &Value) -> Result<(), CliError> {
        self.emit(answer, || {
            let rows: Vec<Vec<String>> = answer["entries"]
                .as_array()
                .map(|entries| {
                    entries
                        .iter()
                        .map(|e| {
                            vec![
                                text(&e["position"]),
                                text(&e["at"]),
                                text(&e["type"]),
                                text(&e["reservation_id"]),
                                pairs_text(&e["deltas"]),
                                text(&e["actor"]),
                                text(&e["reason"]),
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
            let mut out = table::render(
                &[
                    "POSITION",
                    "AT",
                    "TYPE",
                    "RESERVATION",
                    "DELTAS",
                    "ACTOR",
                    "REASON",
                ],
                &rows,
            );
            if let Some(next) = answer["next"].as_str() {
                out.push_str(&format!("\n(more: --cursor {next})"));
            }
            out
        })
    }

    fn projections(&self, answer: &Value) -> Result<(), CliError> {
        self.emit(answer, || {
            let rows: Vec<Vec<String>> = answer
                .as_array()
                .map(|views| {
                    views
                        .iter()
                        .map(|v| {
                            vec![
                                text(&v["name"]),
                                text(&v["position"]),
                                text(&v["head"]),
                                text(&v["lag"]),
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
            table::render(&["NAME", "POSITION", "HEAD", "LAG"], &rows)
        })
    }
}
