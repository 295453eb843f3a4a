//! One run of `quota bench`: set up where the decisions go, drive the load, verify, report.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::ProjectId;
use ledger::{EventStore, Ledger, LedgerConfig, SystemClock};
use projections::Projections;
use tokio::sync::Barrier;

use crate::args::{BenchArgs, Workload};
use crate::driver::Driver;
use crate::in_process::InProcess;
use crate::load::{
    burst_client, client_loop, join_all, report_progress, setup_limits, setup_tree, ClientTally,
    CommittedBoots,
};
use crate::over_http::OverHttp;
use crate::physical;
use crate::report::{percentile_ms, round2, round3, BenchReport, Totals};
use crate::threads;
use crate::verify::{time_cold_loads, verify_store};
use crate::workload::{
    fresh_projects, project_limits, tree_parent_limits, tree_parents, BURST_LIMIT,
};

/// Where the run's decisions go, and what it reads afterwards.
struct Setup {
    driver: Arc<dyn Driver>,
    /// Over HTTP: the driver, whose server also answers the usage check.
    http: Option<Arc<OverHttp>>,
    via: &'static str,
    store_name: String,
    /// The store to verify: in-process always, over HTTP when `--store` names the server's.
    store: Option<Arc<dyn EventStore>>,
    /// In-process: the views, running during the load unless `--no-views`.
    projections: Option<Arc<Projections>>,
    /// A SQLite store's folder, where the disk's sync time is probed.
    sync_folder: Option<PathBuf>,
    /// Holds the default in-process store's folder until the run is over.
    _temp_dir: Option<tempfile::TempDir>,
}

impl Setup {
    async fn open(args: &BenchArgs, clients: usize) -> Result<Setup, String> {
        let mut temp_dir = None;
        let store_url = match (&args.store, &args.target) {
            (Some(url), _) => Some(url.clone()),
            (None, Some(_)) => None,
            (None, None) => {
                let dir = tempfile::tempdir().map_err(|e| format!("temporary folder: {e}"))?;
                let url = format!("sqlite://{}", dir.path().join("bench.db").display());
                temp_dir = Some(dir);
                Some(url)
            }
        };
        let store = match &store_url {
            Some(url) => Some(ledger::store::open(url).await.map_err(|e| e.to_string())?),
            None => None,
        };
        let mut setup = match (&args.target, store) {
            (Some(target), store) => Setup::over_http(args, target, clients, store)?,
            (None, Some(store)) => Setup::in_process(args, store).await?,
            (None, None) => unreachable!("in-process runs always have a store"),
        };
        setup._temp_dir = temp_dir;
        setup.sync_folder = store_url.as_deref().and_then(physical::sqlite_folder);
        Ok(setup)
    }

    fn over_http(
        args: &BenchArgs,
        target: &str,
        clients: usize,
        store: Option<Arc<dyn EventStore>>,
    ) -> Result<Setup, String> {
        let http = Arc::new(OverHttp::new(target, args.token.clone(), clients)?);
        Ok(Setup {
            driver: http.clone(),
            http: Some(http),
            via: "http",
            store_name: store.as_ref().map_or("server", |s| s.backend()).to_owned(),
            store,
            projections: None,
            sync_folder: None,
            _temp_dir: None,
        })
    }

    async fn in_process(args: &BenchArgs, store: Arc<dyn EventStore>) -> Result<Setup, String> {
        let ledger = Ledger::start(
            store.clone(),
            Arc::new(SystemClock),
            LedgerConfig::default(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let projections = if args.no_views {
            None
        } else {
            // The views follow the feed while the load runs, as they do in `quota serve`.
            Some(
                Projections::start(store.clone())
                    .await
                    .map_err(|e| e.to_string())?,
            )
        };
        Ok(Setup {
            driver: Arc::new(InProcess { ledger }),
            http: None,
            via: "in-process",
            store_name: store.backend().to_owned(),
            store: Some(store),
            projections,
            sync_folder: None,
            _temp_dir: None,
        })
    }
}

/// What the load did: every client's tally added up, and the boots each project got.
struct Load {
    totals: Totals,
    committed: HashMap<ProjectId, u64>,
    elapsed_s: f64,
}

/// Runs a workload and returns its report (the `quota bench` command prints it).
pub async fn execute(args: BenchArgs) -> Result<BenchReport, String> {
    let clients = args.validated_clients()?;
    let mut setup = Setup::open(&args, clients).await?;
    let projects = fresh_projects(args.project_count());
    setup.driver.ensure_defaults().await?;
    setup_limits(&setup.driver, &projects, &project_limits(&args)).await?;
    let tree = if args.workload == Workload::Tree {
        tree_parents(&projects)
    } else {
        vec![]
    };
    setup_tree(&setup.driver, &tree, &tree_parent_limits()).await?;
    eprintln!(
        "bench: {} via {} on {}, {clients} clients, {} project(s)",
        args.workload.name(),
        setup.via,
        setup.store_name,
        projects.len()
    );
    let fsync_ms = match setup.sync_folder.clone() {
        Some(folder) => Some(
            tokio::task::spawn_blocking(move || physical::fsync_ms(&folder))
                .await
                .map_err(|e| e.to_string())??,
        ),
        None => None,
    };
    let cpu_before_us = physical::cpu_time_us();
    let threads_before = threads::thread_times();
    let load = drive(&args, &setup.driver, &projects, clients).await?;
    let threads_after = threads::thread_times();
    let cpu_us = cpu_before_us
        .zip(physical::cpu_time_us())
        .map(|(a, b)| b - a);
    let totals = &load.totals;
    if let Some(e) = &totals.first_error {
        eprintln!("bench: {} request(s) failed; first: {e}", totals.errors);
    }
    let oversubscribed = if args.workload == Workload::Burst {
        totals.granted_reserves.saturating_sub(BURST_LIMIT as u64)
    } else {
        0
    };
    eprintln!(
        "bench: {} boots, {} decisions in {:.1} s; verifying",
        totals.boots, totals.decisions, load.elapsed_s
    );
    let views_behind_events = views_behind(setup.projections.as_deref()).await?;
    if let Some(line) = setup.driver.describe() {
        eprintln!("bench: {line}");
    }
    let mut verified = if args.skip_verify {
        false
    } else {
        // The checks run even when the counts already fail: their messages say what went wrong.
        let checked = verify(&mut setup, &projects, &tree, &load).await?;
        oversubscribed == 0 && load.totals.errors == 0 && checked
    };
    let cold_load_ms = match (&setup.store, args.target.is_none()) {
        (Some(store), true) => {
            let busiest = load
                .committed
                .iter()
                .max_by_key(|(_, n)| **n)
                .map_or(&projects[0], |(p, _)| p);
            let (ms, same) = time_cold_loads(&**store, busiest).await?;
            verified &= same;
            Some(ms)
        }
        _ => None,
    };
    let boots_per_s = round2(totals.boots as f64 / load.elapsed_s);
    let bound = fsync_ms.map(|ms| physical::bound_boots_per_s(clients, ms));
    let write_path = setup.driver.write_path();
    Ok(BenchReport {
        workload: args.workload.name(),
        store: setup.store_name,
        via: setup.via,
        clients,
        boots_per_s,
        decisions_per_s: round2(totals.decisions as f64 / load.elapsed_s),
        p50_ms: percentile_ms(&totals.latencies_us, 0.50),
        p99_ms: percentile_ms(&totals.latencies_us, 0.99),
        conflicts: setup.driver.conflicts(),
        denied: totals.denied,
        oversubscribed,
        verified,
        seconds: round2(load.elapsed_s),
        boots: totals.boots,
        decisions: totals.decisions,
        errors: totals.errors,
        cold_load_ms,
        views_behind_events,
        // Over HTTP the process is only the clients: its CPU says nothing of the server's.
        cpu_us_per_boot: cpu_us
            .filter(|_| args.target.is_none())
            .map(|us| round2(us as f64 / totals.boots.max(1) as f64)),
        cpu_us_per_boot_by_part: match (&threads_before, &threads_after, cpu_us) {
            (Some(before), Some(after), Some(us)) if args.target.is_none() => {
                Some(threads::per_boot_by_part(before, after, us, totals.boots))
            }
            _ => None,
        },
        commits: write_path.as_ref().map(|w| w.commits),
        decisions_per_commit: write_path.as_ref().map(|w| w.decisions_per_commit),
        commit_ms_p50: write_path.as_ref().and_then(|w| w.commit_ms_p50),
        commit_ms_p99: write_path.as_ref().and_then(|w| w.commit_ms_p99),
        fsync_ms: fsync_ms.map(round3),
        bound_boots_per_s: bound.map(round2),
        bound_fraction: bound.map(|b| round3(boots_per_s / b)),
    })
}

/// Runs the clients: the burst's all at once, the others in closed loops until the deadline.
async fn drive(
    args: &BenchArgs,
    driver: &Arc<dyn Driver>,
    projects: &[ProjectId],
    clients: usize,
) -> Result<Load, String> {
    let committed = CommittedBoots::new(projects.len());
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
        let progress = Arc::new(AtomicU64::new(0));
        let shared_projects = Arc::new(projects.to_vec());
        let reporter = tokio::spawn(report_progress(progress.clone(), started, deadline));
        let tasks: Vec<_> = (0..clients)
            .map(|i| {
                tokio::spawn(client_loop(
                    driver.clone(),
                    shared_projects.clone(),
                    committed.clone(),
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
    let elapsed_s = started.elapsed().as_secs_f64();
    Ok(Load {
        totals: Totals::of(&tallies),
        committed: committed.by_project(projects),
        elapsed_s,
    })
}

/// The views follow the log at a lower priority than decisions: how far behind the load left
/// them (they catch up before verifying).
async fn views_behind(projections: Option<&Projections>) -> Result<Option<u64>, String> {
    let Some(projections) = projections else {
        return Ok(None);
    };
    let statuses = projections.status().await.map_err(|e| e.to_string())?;
    let behind = statuses.iter().map(|s| s.lag).max().unwrap_or(0);
    eprintln!("bench: at the end of the load the views were {behind} events behind the log");
    Ok(Some(behind))
}

/// Checks the run's outcome on the store when there is one, else with the server's usage.
async fn verify(
    setup: &mut Setup,
    projects: &[ProjectId],
    tree: &[(ProjectId, Vec<ProjectId>)],
    load: &Load,
) -> Result<bool, String> {
    if let Some(store) = &setup.store {
        let projections = setup.projections.take();
        verify_store(store, projections, projects, tree, &load.committed).await
    } else if let Some(http) = &setup.http {
        http.verify_usage(projects, &load.committed, load.totals.max_position)
            .await
    } else {
        Ok(true)
    }
}
