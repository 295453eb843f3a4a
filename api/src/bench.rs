//! `quota bench`: the load generator of SPEC.md ("Benchmark workloads").
//!
//! One **boot** is a reserve of `{"instances": 1, "cores": 2, "ram": 4096}` followed by its
//! commit: two separate durable decisions. Clients are closed-loop: each waits for its answer
//! before sending the next request. The run prints one JSON line on stdout and its progress on
//! stderr. `verified` is computed after the run, never assumed: the log is replayed and every
//! project checked against its limits at every position, and the usage view is compared with
//! the replay (in-process, or over HTTP with `--store` too); over HTTP alone the usage the
//! server reports is compared with what the acknowledged answers imply.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use domain::{
    Defaults, Deltas, Limit, Limits, ProjectId, ProjectState, Refusal, ReservationId, ResourceName,
    DEFAULTS_STREAM,
};
use ledger::{EventStore, Ledger, LedgerConfig, LedgerError, Metadata, SystemClock};
use rand::{rngs::StdRng, Rng, SeedableRng};
use serde_json::json;
use tokio::sync::Barrier;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// 1 project, 20 clients all at once, one reserve each, limit instances 10.
    Burst,
    /// 1 project, unlimited, boots in a closed loop.
    Hot,
    /// 1,000 projects picked uniformly, unlimited, boots in a closed loop.
    Fleet,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::Burst => "burst",
            Workload::Hot => "hot",
            Workload::Fleet => "fleet",
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    #[arg(long, value_enum)]
    pub workload: Workload,
    /// Concurrent closed-loop clients (default: 20 for burst, 16 otherwise).
    #[arg(long)]
    pub clients: Option<usize>,
    /// How long to drive load (ignored by burst, which sends one reserve per client).
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Run in-process on this store (sqlite://PATH or postgres://...); with --target, the store
    /// the server uses, read after the run to verify it. Default in-process: a new SQLite file
    /// in a temporary folder.
    #[arg(long)]
    pub store: Option<String>,
    /// Drive a running server over HTTP instead (e.g. http://127.0.0.1:8080).
    #[arg(long)]
    pub target: Option<String>,
    /// Bearer token for --target (an admin token: the bench sets limits).
    #[arg(long, env = "QUOTA_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Projects in the fleet workload.
    #[arg(long, default_value_t = 1000)]
    pub projects: usize,
    /// Do not verify after the run (`verified` is then false).
    #[arg(long)]
    pub skip_verify: bool,
    /// In-process: do not run the views during the load (they catch up before verifying), to
    /// measure the write side alone.
    #[arg(long)]
    pub no_views: bool,
}

/// The JSON line the bench prints.
#[derive(Debug, serde::Serialize)]
pub struct BenchReport {
    pub workload: &'static str,
    pub store: String,
    pub via: &'static str,
    pub clients: usize,
    pub boots_per_s: f64,
    pub decisions_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub conflicts: u64,
    pub denied: u64,
    pub oversubscribed: u64,
    pub verified: bool,
    pub seconds: f64,
    pub boots: u64,
    pub decisions: u64,
    pub errors: u64,
    /// In-process: how long a fresh process takes to load the busiest project's state (from
    /// its snapshot and the events after it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cold_load_ms: Option<f64>,
    /// In-process with views running: how many events the views had yet to apply when the load
    /// stopped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub views_behind_events: Option<u64>,
}

const BOOT: [(&str, i64); 3] = [("instances", 1), ("cores", 2), ("ram", 4096)];
const BURST_LIMIT: i64 = 10;

fn boot_deltas() -> Deltas {
    Deltas::new(
        BOOT.iter()
            .map(|(r, n)| (ResourceName::parse(r).expect("static name"), *n))
            .collect(),
    )
    .expect("static deltas")
}

enum Answer {
    Granted { id: ReservationId, position: u64 },
    Denied,
    Failed(String),
}

/// Where decisions go: the ledger in this process, or a server over HTTP.
#[async_trait]
trait Driver: Send + Sync {
    async fn set_limits(&self, project: &ProjectId, limits: &Limits) -> Result<(), String>;
    async fn ensure_defaults(&self) -> Result<(), String>;
    async fn reserve(&self, project: &ProjectId) -> Answer;
    async fn commit(&self, project: &ProjectId, id: ReservationId) -> Answer;
    fn conflicts(&self) -> u64;
    /// A line about the write path, for the progress output.
    fn describe(&self) -> Option<String> {
        None
    }
}

struct InProcess {
    ledger: Arc<Ledger>,
}

#[async_trait]
impl Driver for InProcess {
    async fn ensure_defaults(&self) -> Result<(), String> {
        let defaults = self
            .ledger
            .refresh_defaults()
            .await
            .map_err(|e| e.to_string())?;
        let missing: Limits = BOOT
            .iter()
            .map(|(r, _)| ResourceName::parse(r).expect("static name"))
            .filter(|r| defaults.limit(r).is_none())
            .map(|r| (r, Limit::UNLIMITED))
            .collect();
        if !missing.is_empty() {
            self.ledger
                .set_defaults(&missing, &bench_meta())
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn set_limits(&self, project: &ProjectId, limits: &Limits) -> Result<(), String> {
        self.ledger
            .set_limits(project, limits.clone(), true, &bench_meta())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    async fn reserve(&self, project: &ProjectId) -> Answer {
        match self
            .ledger
            .reserve(project, None, boot_deltas(), 3600, &bench_meta())
            .await
        {
            Ok(view) => Answer::Granted {
                id: view.reservation_id,
                position: view.position,
            },
            Err(LedgerError::Refused(Refusal::OverQuota { .. })) => Answer::Denied,
            Err(e) => Answer::Failed(e.to_string()),
        }
    }

    async fn commit(&self, project: &ProjectId, id: ReservationId) -> Answer {
        match self.ledger.commit(project, id, &bench_meta()).await {
            Ok(view) => Answer::Granted {
                id,
                position: view.position,
            },
            Err(e) => Answer::Failed(e.to_string()),
        }
    }

    fn conflicts(&self) -> u64 {
        self.ledger.stats().conflicts.load(Ordering::Relaxed)
    }

    fn describe(&self) -> Option<String> {
        let stats = self.ledger.stats();
        let batches = stats.batches.load(Ordering::Relaxed).max(1);
        Some(format!(
            "{batches} group commits, {:.1} decisions and {:.1} events each, {:.2} ms each",
            stats.batch_appends.load(Ordering::Relaxed) as f64 / batches as f64,
            stats.batch_events.load(Ordering::Relaxed) as f64 / batches as f64,
            stats.batch_micros.load(Ordering::Relaxed) as f64 / batches as f64 / 1000.0,
        ))
    }
}

fn bench_meta() -> Metadata {
    Metadata {
        actor: Some("bench".into()),
        principal: Some("system:bench".into()),
        ..Metadata::default()
    }
}

struct OverHttp {
    client: reqwest::Client,
    base: String,
    token: Option<String>,
    conflicts: AtomicU64,
}

impl OverHttp {
    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let builder = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    async fn send(
        &self,
        builder: reqwest::RequestBuilder,
    ) -> Result<(u16, serde_json::Value), String> {
        let response = builder.send().await.map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(|e| e.to_string())?;
        let value = if body.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&body).map_err(|e| format!("status {status}: {e}"))?
        };
        Ok((status, value))
    }

    fn answer(&self, result: Result<(u16, serde_json::Value), String>) -> Answer {
        match result {
            Ok((200 | 201, body)) => {
                let id = body["reservation_id"]
                    .as_str()
                    .and_then(|s| ReservationId::parse(s).ok());
                match (id, body["position"].as_u64()) {
                    (Some(id), Some(position)) => Answer::Granted { id, position },
                    _ => Answer::Failed(format!("unexpected body {body}")),
                }
            }
            Ok((403, _)) => Answer::Denied,
            Ok((status, body)) => {
                if status == 503 || status == 409 {
                    self.conflicts.fetch_add(1, Ordering::Relaxed);
                }
                Answer::Failed(format!("status {status}: {body}"))
            }
            Err(e) => Answer::Failed(e),
        }
    }
}

#[async_trait]
impl Driver for OverHttp {
    async fn ensure_defaults(&self) -> Result<(), String> {
        let (status, body) = self
            .send(self.request(reqwest::Method::GET, "/v1/defaults"))
            .await?;
        if status != 200 {
            return Err(format!("GET /v1/defaults: status {status}: {body}"));
        }
        let missing: serde_json::Map<String, serde_json::Value> = BOOT
            .iter()
            .filter(|(r, _)| body["limits"].get(r).is_none())
            .map(|(r, _)| (r.to_string(), json!(-1)))
            .collect();
        if !missing.is_empty() {
            let (status, body) = self
                .send(
                    self.request(reqwest::Method::PUT, "/v1/defaults")
                        .json(&json!({ "limits": missing })),
                )
                .await?;
            if status != 200 {
                return Err(format!("PUT /v1/defaults: status {status}: {body}"));
            }
        }
        Ok(())
    }

    async fn set_limits(&self, project: &ProjectId, limits: &Limits) -> Result<(), String> {
        let limits: BTreeMap<&str, i64> = limits
            .iter()
            .map(|(r, l)| (r.as_str(), l.value()))
            .collect();
        let (status, body) = self
            .send(
                self.request(
                    reqwest::Method::PUT,
                    &format!("/v1/projects/{project}/limits"),
                )
                .json(&json!({ "limits": limits, "force": true })),
            )
            .await?;
        if status == 200 {
            Ok(())
        } else {
            Err(format!("PUT limits: status {status}: {body}"))
        }
    }

    async fn reserve(&self, project: &ProjectId) -> Answer {
        let deltas: BTreeMap<&str, i64> = BOOT.iter().copied().collect();
        let result = self
            .send(
                self.request(
                    reqwest::Method::POST,
                    &format!("/v1/projects/{project}/reservations"),
                )
                .json(&json!({ "deltas": deltas, "expires_in": 3600, "actor": "bench" })),
            )
            .await;
        self.answer(result)
    }

    async fn commit(&self, project: &ProjectId, id: ReservationId) -> Answer {
        let result = self
            .send(self.request(
                reqwest::Method::POST,
                &format!("/v1/projects/{project}/reservations/{id}/commit"),
            ))
            .await;
        self.answer(result)
    }

    fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }
}

/// What one client did.
#[derive(Default)]
struct ClientTally {
    boots: u64,
    decisions: u64,
    denied: u64,
    errors: u64,
    granted_reserves: u64,
    latencies_us: Vec<u32>,
    /// The highest position acknowledged.
    max_position: u64,
    first_error: Option<String>,
}

impl ClientTally {
    fn record(&mut self, started: Instant, answer: &Answer) {
        self.decisions += 1;
        self.latencies_us
            .push(started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
        match answer {
            Answer::Granted { position, .. } => {
                self.max_position = self.max_position.max(*position)
            }
            Answer::Denied => self.denied += 1,
            Answer::Failed(e) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| e.clone());
            }
        }
    }
}

/// Committed boots per project, by the project's index: shared by the clients, so that the
/// load generator's own bookkeeping stays a counter per project however long it runs (a map
/// per client grew towards clients × projects entries).
type CommittedBoots = Arc<Vec<AtomicU64>>;

async fn client_loop(
    driver: Arc<dyn Driver>,
    projects: Arc<Vec<ProjectId>>,
    committed: CommittedBoots,
    seed: u64,
    deadline: Instant,
    progress: Arc<AtomicU64>,
) -> ClientTally {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut tally = ClientTally::default();
    while Instant::now() < deadline {
        let index = rng.gen_range(0..projects.len());
        let project = &projects[index];
        let started = Instant::now();
        let answer = driver.reserve(project).await;
        tally.record(started, &answer);
        let Answer::Granted { id, .. } = answer else {
            continue;
        };
        tally.granted_reserves += 1;
        let started = Instant::now();
        let answer = driver.commit(project, id).await;
        tally.record(started, &answer);
        if let Answer::Granted { .. } = answer {
            tally.boots += 1;
            committed[index].fetch_add(1, Ordering::Relaxed);
            progress.fetch_add(1, Ordering::Relaxed);
        }
    }
    tally
}

async fn burst_client(
    driver: Arc<dyn Driver>,
    project: ProjectId,
    start: Arc<Barrier>,
) -> ClientTally {
    let mut tally = ClientTally::default();
    start.wait().await;
    let started = Instant::now();
    let answer = driver.reserve(&project).await;
    tally.record(started, &answer);
    if let Answer::Granted { .. } = answer {
        tally.granted_reserves += 1;
    }
    tally
}

fn percentile_ms(sorted_us: &[u32], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted_us.len() as f64).ceil() as usize).clamp(1, sorted_us.len());
    f64::from(sorted_us[rank - 1]) / 1000.0
}

pub async fn run(args: BenchArgs) -> Result<(), String> {
    let report = execute(args).await?;
    println!(
        "{}",
        serde_json::to_string(&report).map_err(|e| e.to_string())?
    );
    Ok(())
}

/// Runs a workload and returns its report (the `quota bench` command prints it).
pub async fn execute(args: BenchArgs) -> Result<BenchReport, String> {
    let clients = args.clients.unwrap_or(if args.workload == Workload::Burst {
        20
    } else {
        16
    });
    if clients == 0 || clients > 10_000 {
        return Err("--clients must be 1 to 10000".into());
    }
    if args.projects == 0 || args.projects > 1_000_000 {
        return Err("--projects must be 1 to 1000000".into());
    }
    let _temp_dir;
    let store_url = match (&args.store, &args.target) {
        (Some(url), _) => Some(url.clone()),
        (None, Some(_)) => None,
        (None, None) => {
            let dir = tempfile::tempdir().map_err(|e| format!("temporary folder: {e}"))?;
            let url = format!("sqlite://{}", dir.path().join("bench.db").display());
            _temp_dir = dir;
            Some(url)
        }
    };
    let store = match &store_url {
        Some(url) => Some(ledger::store::open(url).await.map_err(|e| e.to_string())?),
        None => None,
    };
    let mut projections = None;
    let (driver, via, store_name): (Arc<dyn Driver>, &'static str, String) = match &args.target {
        Some(target) => (
            Arc::new(OverHttp {
                client: reqwest::Client::builder()
                    .pool_max_idle_per_host(clients * 2)
                    .timeout(Duration::from_secs(30))
                    .build()
                    .map_err(|e| e.to_string())?,
                base: target.trim_end_matches('/').to_owned(),
                token: args.token.clone(),
                conflicts: AtomicU64::new(0),
            }),
            "http",
            store.as_ref().map_or("server", |s| s.backend()).to_owned(),
        ),
        None => {
            let store = store.clone().expect("in-process runs always have a store");
            let ledger = Ledger::start(
                store.clone(),
                Arc::new(SystemClock),
                LedgerConfig::default(),
            )
            .await
            .map_err(|e| e.to_string())?;
            if !args.no_views {
                // The views follow the feed while the load runs, as they do in `quota serve`.
                projections = Some(
                    projections::Projections::start(store.clone())
                        .await
                        .map_err(|e| e.to_string())?,
                );
            }
            (
                Arc::new(InProcess { ledger }),
                "in-process",
                store.backend().to_owned(),
            )
        }
    };

    // Fresh project names per run, so earlier runs on the same store do not interfere.
    let run_id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let project_count = match args.workload {
        Workload::Fleet => args.projects,
        Workload::Hot | Workload::Burst => 1,
    };
    let projects: Vec<ProjectId> = (0..project_count)
        .map(|i| ProjectId::parse(&format!("bench-{run_id}-{i}")).expect("valid project id"))
        .collect();
    driver.ensure_defaults().await?;
    let limits: Limits = BOOT
        .iter()
        .map(|(r, _)| {
            let limit = if args.workload == Workload::Burst && *r == "instances" {
                Limit::new(BURST_LIMIT).expect("valid")
            } else {
                Limit::UNLIMITED
            };
            (ResourceName::parse(r).expect("static name"), limit)
        })
        .collect();
    setup_limits(&driver, &projects, &limits).await?;

    eprintln!(
        "bench: {} via {via} on {store_name}, {clients} clients, {} project(s)",
        args.workload.name(),
        projects.len()
    );
    let progress = Arc::new(AtomicU64::new(0));
    let committed_boots: CommittedBoots =
        Arc::new(projects.iter().map(|_| AtomicU64::new(0)).collect());
    let started = Instant::now();
    let tallies: Vec<ClientTally> = if args.workload == Workload::Burst {
        let start = Arc::new(Barrier::new(clients));
        let tasks: Vec<_> = (0..clients)
            .map(|_| {
                tokio::spawn(burst_client(
                    driver.clone(),
                    projects[0].clone(),
                    start.clone(),
                ))
            })
            .collect();
        join_all(tasks).await?
    } else {
        let deadline = started + Duration::from_secs(args.seconds.max(1));
        let projects = Arc::new(projects.clone());
        let reporter = tokio::spawn(report_progress(progress.clone(), started, deadline));
        let tasks: Vec<_> = (0..clients)
            .map(|i| {
                tokio::spawn(client_loop(
                    driver.clone(),
                    projects.clone(),
                    committed_boots.clone(),
                    i as u64,
                    deadline,
                    progress.clone(),
                ))
            })
            .collect();
        let tallies = join_all(tasks).await?;
        reporter.abort();
        tallies
    };
    let elapsed = started.elapsed().as_secs_f64();

    let mut latencies: Vec<u32> = tallies
        .iter()
        .flat_map(|t| t.latencies_us.iter().copied())
        .collect();
    latencies.sort_unstable();
    let boots: u64 = tallies.iter().map(|t| t.boots).sum();
    let decisions: u64 = tallies.iter().map(|t| t.decisions).sum();
    let denied: u64 = tallies.iter().map(|t| t.denied).sum();
    let errors: u64 = tallies.iter().map(|t| t.errors).sum();
    let granted: u64 = tallies.iter().map(|t| t.granted_reserves).sum();
    let max_position = tallies.iter().map(|t| t.max_position).max().unwrap_or(0);
    if let Some(e) = tallies.iter().find_map(|t| t.first_error.clone()) {
        eprintln!("bench: {errors} request(s) failed; first: {e}");
    }
    let committed: HashMap<ProjectId, u64> = projects
        .iter()
        .zip(committed_boots.iter())
        .map(|(project, boots)| (project.clone(), boots.load(Ordering::Relaxed)))
        .filter(|(_, boots)| *boots > 0)
        .collect();
    let oversubscribed = if args.workload == Workload::Burst {
        granted.saturating_sub(BURST_LIMIT as u64)
    } else {
        0
    };
    eprintln!("bench: {boots} boots, {decisions} decisions in {elapsed:.1} s; verifying");
    // The views follow the log at a lower priority than decisions: say how far behind the load
    // left them (they catch up before verifying).
    let views_behind_events = match &projections {
        Some(projections) => {
            let statuses = projections.status().await.map_err(|e| e.to_string())?;
            let behind = statuses.iter().map(|s| s.lag).max().unwrap_or(0);
            eprintln!(
                "bench: at the end of the load the views were {behind} events behind the log"
            );
            Some(behind)
        }
        None => None,
    };
    if let Some(line) = driver.describe() {
        eprintln!("bench: {line}");
    }

    let verified = if args.skip_verify {
        false
    } else {
        let mut ok = oversubscribed == 0 && errors == 0;
        if let Some(store) = &store {
            let replay = replay_checking_limits(&**store).await?;
            if replay.over_limit > 0 {
                eprintln!(
                    "verify: {} event(s) left a project over a limit",
                    replay.over_limit
                );
                ok = false;
            }
            for project in &projects {
                let implied = committed.get(project).copied().unwrap_or(0);
                let state = replay.states.get(project);
                let instances = state.map_or(0, |s| {
                    s.in_use(&ResourceName::parse("instances").expect("static"))
                });
                if instances != implied as i64 {
                    eprintln!("verify: {project}: replayed in_use {instances}, acknowledged commits {implied}");
                    ok = false;
                }
            }
            let projections = match projections.take() {
                Some(p) => p,
                None => projections::Projections::start(store.clone())
                    .await
                    .map_err(|e| e.to_string())?,
            };
            let head = store.head().await.map_err(|e| e.to_string())?;
            if let Err(e) = projections.wait_for(head, Duration::from_secs(120)).await {
                eprintln!("verify: views did not catch up: {e}");
                ok = false;
            }
            let differences = projections.verify().await.map_err(|e| e.to_string())?;
            for d in differences.iter().take(20) {
                eprintln!("verify: {d:?}");
            }
            ok &= differences.is_empty();
        } else if let Some(http) = args.target.as_ref() {
            ok &= verify_over_http(
                &driver,
                http,
                &args.token,
                &projects,
                &committed,
                max_position,
            )
            .await?;
        }
        ok
    };

    let mut verified = verified;
    let cold_load_ms = match (&store, args.target.is_none()) {
        (Some(store), true) => {
            let busiest = committed
                .iter()
                .max_by_key(|(_, n)| **n)
                .map_or(&projects[0], |(p, _)| p);
            let (ms, same) = time_cold_loads(&**store, busiest).await?;
            verified &= same;
            Some(ms)
        }
        _ => None,
    };

    Ok(BenchReport {
        workload: args.workload.name(),
        store: store_name,
        via,
        clients,
        boots_per_s: round2(boots as f64 / elapsed),
        decisions_per_s: round2(decisions as f64 / elapsed),
        p50_ms: percentile_ms(&latencies, 0.50),
        p99_ms: percentile_ms(&latencies, 0.99),
        conflicts: driver.conflicts(),
        denied,
        oversubscribed,
        verified,
        seconds: round2(elapsed),
        boots,
        decisions,
        errors,
        cold_load_ms,
        views_behind_events,
    })
}

/// Loads one project as a process that just started would, from its snapshot and the events
/// after it, and, for comparison, from all its events; reports both on stderr. Returns the
/// first in ms, and whether both gave the same state.
async fn time_cold_loads(
    store: &dyn EventStore,
    project: &ProjectId,
) -> Result<(f64, bool), String> {
    let started = Instant::now();
    let (state, snapshot_version) = ledger::load_project(store, project, true)
        .await
        .map_err(|e| e.to_string())?;
    let from_snapshot_ms = started.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    let (folded, _) = ledger::load_project(store, project, false)
        .await
        .map_err(|e| e.to_string())?;
    let from_events_ms = started.elapsed().as_secs_f64() * 1e3;
    let same = folded == state;
    if !same {
        eprintln!(
            "verify: {project}: the state loaded from its snapshot differs from its events' fold"
        );
    }
    let events = state.version.map_or(0, |v| v + 1);
    let tail = events - snapshot_version.map_or(0, |v| v + 1);
    eprintln!(
        "bench: loading {project} ({events} events, {} reservations): {from_snapshot_ms:.1} ms \
         from its snapshot and {tail} events after it, {from_events_ms:.1} ms from all its events",
        state.reservation_count()
    );
    Ok((round2(from_snapshot_ms), same))
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

async fn join_all(
    tasks: Vec<tokio::task::JoinHandle<ClientTally>>,
) -> Result<Vec<ClientTally>, String> {
    let mut tallies = Vec::with_capacity(tasks.len());
    for task in tasks {
        tallies.push(task.await.map_err(|e| format!("client task failed: {e}"))?);
    }
    Ok(tallies)
}

async fn setup_limits(
    driver: &Arc<dyn Driver>,
    projects: &[ProjectId],
    limits: &Limits,
) -> Result<(), String> {
    let chunks: Vec<Vec<ProjectId>> = projects
        .chunks(projects.len().div_ceil(16))
        .map(<[_]>::to_vec)
        .collect();
    let tasks: Vec<_> = chunks
        .into_iter()
        .map(|chunk| {
            let driver = driver.clone();
            let limits = limits.clone();
            tokio::spawn(async move {
                for project in &chunk {
                    driver.set_limits(project, &limits).await?;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

async fn report_progress(progress: Arc<AtomicU64>, started: Instant, deadline: Instant) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    while Instant::now() < deadline {
        tick.tick().await;
        let boots = progress.load(Ordering::Relaxed);
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "bench: {secs:>5.1} s  {boots:>9} boots  {:>9.0} boots/s",
            boots as f64 / secs
        );
    }
}

/// The result of replaying the whole log.
pub struct Replay {
    pub events: u64,
    /// Events after which some project was over a capped limit.
    pub over_limit: u64,
    pub states: HashMap<ProjectId, ProjectState>,
}

/// Folds every event in commit order, checking after each grant that the project is within
/// the capped limit of every resource the grant adds to, at that event's instant (a forced
/// lower limit may leave other usage above its limit; only new positive reserves are denied).
pub async fn replay_checking_limits(store: &dyn EventStore) -> Result<Replay, String> {
    let mut defaults = Defaults::default();
    let mut states: HashMap<ProjectId, ProjectState> = HashMap::new();
    let mut replay_events = 0;
    let mut over_limit = 0;
    let mut after = 0;
    loop {
        let events = store
            .read_all(after, ledger::store::MAX_READ_COUNT)
            .await
            .map_err(|e| e.to_string())?;
        if events.is_empty() {
            break;
        }
        for recorded in &events {
            after = recorded.position;
            replay_events += 1;
            let event = recorded
                .decode()
                .map_err(|e| format!("position {}: {e}", recorded.position))?;
            if recorded.stream == DEFAULTS_STREAM {
                defaults.apply(&event);
                continue;
            }
            let Some(project) = ProjectId::from_stream(&recorded.stream) else {
                continue;
            };
            let state = states
                .entry(project.clone())
                .or_insert_with(|| ProjectState::new(project));
            state.apply(&event, recorded.event.recorded_at);
            let domain::Event::ReservationRequested { deltas, .. } = &event else {
                continue;
            };
            // SPEC rule 1 bounds the resources a grant adds to; another resource may stand
            // above a limit lowered with force (or a lowered default) and only blocks new
            // positive reserves of itself.
            for (resource, (limit, usage)) in state.usage_all(&defaults, recorded.event.recorded_at)
            {
                if deltas.get(&resource) <= 0 {
                    continue;
                }
                let Some(cap) = limit.and_then(Limit::cap) else {
                    continue;
                };
                if usage.in_use.saturating_add(usage.reserved) > cap {
                    eprintln!(
                        "verify: {} over {resource} at position {}",
                        state.project, recorded.position
                    );
                    over_limit += 1;
                }
            }
        }
    }
    Ok(Replay {
        events: replay_events,
        over_limit,
        states,
    })
}

async fn verify_over_http(
    driver: &Arc<dyn Driver>,
    base: &str,
    token: &Option<String>,
    projects: &[ProjectId],
    committed: &HashMap<ProjectId, u64>,
    max_position: u64,
) -> Result<bool, String> {
    let _ = driver;
    let client = reqwest::Client::new();
    let mut ok = true;
    for project in projects {
        let mut request = client.get(format!(
            "{}/v1/projects/{project}/usage?min_position={max_position}",
            base.trim_end_matches('/')
        ));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        let body: serde_json::Value = response.json().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            eprintln!("verify: usage of {project}: {status} {body}");
            ok = false;
            continue;
        }
        let boots = committed.get(project).copied().unwrap_or(0) as i64;
        for (resource, per_boot) in BOOT {
            let row = &body["resources"][resource];
            let in_use = row["in_use"].as_i64().unwrap_or(-1);
            let reserved = row["reserved"].as_i64().unwrap_or(-1);
            if in_use != boots * per_boot || reserved != 0 {
                eprintln!("verify: {project} {resource}: in_use {in_use} reserved {reserved}, acknowledged {boots} boots");
                ok = false;
            }
            if let Some(headroom) = row["headroom"].as_i64() {
                ok &= headroom >= 0;
            }
        }
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let sorted: Vec<u32> = (1..=100).map(|ms| ms * 1000).collect();
        assert_eq!(percentile_ms(&sorted, 0.5), 50.0);
        assert_eq!(percentile_ms(&sorted, 0.99), 99.0);
        assert_eq!(percentile_ms(&[], 0.99), 0.0);
    }
}
