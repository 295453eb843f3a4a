//! `quota bench`: the load generator of SPEC.md ("Benchmark workloads").
//!
//! One **boot** is a reserve of `{"instances": 1, "cores": 2, "ram": 4096}` followed by its
//! commit: two separate durable decisions. Clients are closed-loop: each waits for its answer
//! before sending the next request. The run prints one JSON line on stdout and its progress on
//! stderr. `verified` is computed after the run, never assumed: the log is replayed and every
//! project checked against its limits at every position, and the usage view is compared with
//! the replay (in-process, or over HTTP with `--store` too); over HTTP alone the usage the
//! server reports is compared with what the acknowledged answers imply.
//!
//! It drives the ledger in-process (`ledger`, `projections`) or a server through `client`; it
//! may not depend on the server (`api`) or the command line: a bench measures the service from
//! outside its HTTP edge.
//!
//! - [`args`]: the command line of `quota bench`.
//! - `workload`: the boot, the projects and their limits.
//! - `driver`, `in_process`, `over_http`: where decisions go; `http1`: the load's own
//!   keep-alive HTTP/1.1 connections, for decisions over HTTP.
//! - `load`: the closed-loop clients and their tallies.
//! - `physical`: what bounds a figure (CPU time, the disk's sync time, the bound they give);
//!   `threads`: the CPU split by the part of the system each thread serves.
//! - `run`: one run, start to report; `verify` and [`replay`]: the checks behind `verified`.
//! - [`report`]: the JSON line.

pub mod args;
mod driver;
mod http1;
mod in_process;
mod load;
mod over_http;
mod physical;
pub mod replay;
pub mod report;
mod run;
mod threads;
mod verify;
mod workload;

pub use args::{BenchArgs, Workload};
pub use replay::{replay_checking_limits, Replay};
pub use report::BenchReport;
pub use run::execute;

/// Runs a workload and prints its report as one JSON line.
pub async fn run(args: BenchArgs) -> Result<(), String> {
    let report = execute(args).await?;
    println!(
        "{}",
        serde_json::to_string(&report).map_err(|e| e.to_string())?
    );
    Ok(())
}
