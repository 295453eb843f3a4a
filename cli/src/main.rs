//! `quota`: the one binary of quota-ledger. It runs the HTTP service (`serve`, from `api`), the
//! operators' clients over HTTP (through `client`), the views' tools that open a store directly
//! (`projections rebuild|verify`) and the load generator (`bench`). This crate is only the
//! command line: parsing, dispatch and printing; the work lives in those crates, and nothing
//! depends on this one.
//!
//! Project and user ids are checked as they are parsed, so a bad one is never sent.
//! Clients read `QUOTA_URL` (default http://127.0.0.1:8080) and `QUOTA_TOKEN`; they print tables
//! by default and the server's JSON with `--json`; a failure prints the problem and exits 1.

mod args;
mod error;
mod history;
mod limits;
mod output;
mod pages;
mod progress;
mod projections;
mod reservations;
mod table;
mod tree;
mod views;

use std::process::ExitCode;

use api::server::LogFormat;
use client::wire::{Correct, CountSpec, Reserve, Step, UsageQuery};
use client::Client;
use tracing_subscriber::EnvFilter;

use args::{Cli, Command, ProjectionsCommand};
use error::CliError;
use output::Output;

/// The service and the load generator allocate for every request (bodies, JSON, events,
/// futures) from many threads at once; mimalloc serves that pattern with less CPU than the
/// system allocator (the measurements are in docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // First, while no other thread can be using SQLite (its configuration is not thread-safe).
    ledger::store::install_page_cache();
    let cli = args::parse().unwrap_or_else(|error| error.exit());
    init_logs(&cli.command);
    match runtime() {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The async runtime, with a worker thread for each core but one (at least one). The views'
/// work runs on threads of their own, and with PostgreSQL the server shares the machine too: a
/// worker on every core would only contend with them for it. The embedded store's commits run
/// on the appending task's worker, and a second worker measured slower over HTTP all the same
/// (docs/BENCHMARKS.md, 2026-12-07, 11:40). `TOKIO_WORKER_THREADS`, where set, decides instead.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let workers = match std::env::var_os(WORKER_THREADS_VAR) {
        None => cores.saturating_sub(1).max(1),
        Some(text) => worker_threads(&text)?,
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(workers)
        .build()
        .map_err(|error| format!("cannot start the async runtime: {error}"))
}

const WORKER_THREADS_VAR: &str = "TOKIO_WORKER_THREADS";

/// Most async workers `TOKIO_WORKER_THREADS` may ask for: far more than any machine's cores,
/// few enough that a typo cannot exhaust the process's threads.
const MAX_WORKER_THREADS: usize = 1024;

/// `TOKIO_WORKER_THREADS` checked: a whole number from 1 to [`MAX_WORKER_THREADS`].
fn worker_threads(text: &std::ffi::OsStr) -> Result<usize, String> {
    text.to_str()
        .and_then(|t| t.trim().parse::<usize>().ok())
        .filter(|n| (1..=MAX_WORKER_THREADS).contains(n))
        .ok_or_else(|| {
            format!(
                "{WORKER_THREADS_VAR} must be a whole number from 1 to {MAX_WORKER_THREADS}, not {:?}",
                text.to_string_lossy()
            )
        })
}

/// Logs go to stderr so that `--json` output on stdout stays clean; clients log only warnings.
fn init_logs(command: &Command) {
    let (default_level, format) = match command {
        Command::Serve(args) => ("info", args.log_format),
        _ => ("warn", LogFormat::Text),
    };
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
}

/// Runs a parsed command line; the exit code is 0 on success, 1 on any failure.
async fn run(cli: Cli) -> ExitCode {
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
        Command::Serve(args) => api::server::serve(args).await.map_err(CliError::new),
        Command::Bench(args) => bench::run(args).await.map_err(CliError::new),
        Command::Defaults(command) => limits::defaults(&client()?, out, command).await,
        Command::Limits(command) => limits::limits(&client()?, out, command).await,
        Command::Reserve {
            project,
            deltas,
            expires_in,
            id,
            actor,
            count,
            dry_run,
            user,
        } => {
            let body = Reserve {
                deltas: deltas.into_iter().collect(),
                expires_in,
                reservation_id: id,
                actor,
                count: count.map(|(min, max)| CountSpec { min, max }),
                user,
            };
            if dry_run {
                reservations::dry_run(&client()?, out, project.as_str(), &body).await
            } else {
                reservations::reserve(&client()?, out, project.as_str(), &body).await
            }
        }
        Command::Commit { project, id, actor } => {
            let project = project.as_str();
            reservations::transition(&client()?, out, Step::Commit, project, &id, actor).await
        }
        Command::Release { project, id, actor } => {
            let project = project.as_str();
            reservations::transition(&client()?, out, Step::Release, project, &id, actor).await
        }
        Command::Reservation { project, id } => {
            reservations::show(&client()?, out, project.as_str(), &id).await
        }
        Command::Correct {
            project,
            counts,
            reason,
            user,
        } => {
            let body = Correct {
                in_use: counts.into_iter().collect(),
                reason,
                user,
            };
            views::correct(&client()?, out, project.as_str(), &body).await
        }
        Command::Reservations(args) => reservations::list(&client()?, out, args).await,
        Command::Usage {
            project,
            min_position,
            history: true,
            resource,
            since,
            ..
        } => {
            let args = history::HistoryArgs {
                resources: resource,
                since,
                min_position,
            };
            history::usage_history(&client()?, out, project.as_str(), args).await
        }
        Command::Usage {
            project,
            user,
            at,
            min_position,
            ..
        } => {
            let query = UsageQuery { at, min_position };
            views::usage(&client()?, out, project.as_str(), user.as_deref(), &query).await
        }
        Command::Audit(args) => views::audit(&client()?, out, args).await,
        Command::Parent(args) => tree::parent(&client()?, out, args).await,
        Command::Projections(ProjectionsCommand::Status) => {
            projections::status(&client()?, out).await
        }
        Command::Projections(ProjectionsCommand::Rebuild { name, store }) => {
            projections::rebuild(name, &store).await
        }
        Command::Projections(ProjectionsCommand::Verify { name, store }) => {
            projections::verify(name, &store, out.json).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_threads_are_a_whole_number_within_bounds() {
        assert_eq!(worker_threads("3".as_ref()), Ok(3));
        assert_eq!(worker_threads(" 1\n".as_ref()), Ok(1));
        for bad in ["0", "-1", "1025", "two", "", "1.5", "4\u{0}"] {
            let message = worker_threads(bad.as_ref()).unwrap_err();
            assert!(
                message.starts_with("TOKIO_WORKER_THREADS must be"),
                "{message}"
            );
        }
    }
}
