//! The command line of `quota`: every command, option and help text.

use api::server::{ServeArgs, DEFAULT_STORE};
use clap::{Parser, Subcommand};

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
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        project: String,
        /// RESOURCE=AMOUNT pairs, e.g. instances=1 cores=2.
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
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        project: String,
        /// The reservation id (a UUID, as `reserve` printed it).
        id: String,
        /// Who asks, for the audit.
        #[arg(long)]
        actor: Option<String>,
    },
    /// Release a reservation (roll back a hold, or free committed usage).
    Release {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        project: String,
        /// The reservation id (a UUID, as `reserve` printed it).
        id: String,
        /// Who asks, for the audit.
        #[arg(long)]
        actor: Option<String>,
    },
    /// Show a reservation.
    Reservation {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        project: String,
        /// The reservation id (a UUID, as `reserve` printed it).
        id: String,
    },
    /// A project's reservations, oldest first: find orphaned holds with
    /// `quota reservations acme --status held --older-than 2026-01-31T00:00:00Z`.
    Reservations(ReservationsArgs),
    /// A project's usage, now or at a past time.
    Usage {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        project: String,
        /// RFC 3339 time, e.g. 2026-01-31T12:00:00Z.
        #[arg(long)]
        at: Option<String>,
        /// Wait until the view reflects this position.
        #[arg(long)]
        min_position: Option<u64>,
    },
    /// A project's audit trail.
    Audit(AuditArgs),
    /// The usage and audit views.
    #[command(subcommand)]
    Projections(ProjectionsCommand),
    /// The load generator.
    Bench(bench::BenchArgs),
}

#[derive(Debug, Subcommand)]
pub enum DefaultsCommand {
    /// Show the default limits (every resource that exists).
    Get,
    /// Set default limits: `quota defaults set instances=10 cores=20 ram=-1`.
    Set {
        /// RESOURCE=LIMIT pairs; -1 is unlimited. Resources left out keep their default.
        #[arg(required = true, value_parser = parse_pair)]
        limits: Vec<(String, i64)>,
    },
}

#[derive(Debug, Subcommand)]
pub enum LimitsCommand {
    /// Show a project's effective limits and where each comes from (project or default).
    Get {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        project: String,
    },
    /// Set some of a project's limits: `quota limits set acme instances=5`.
    Set {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        project: String,
        /// RESOURCE=LIMIT pairs; -1 is unlimited. Resources left out keep their limit.
        #[arg(required = true, value_parser = parse_pair)]
        limits: Vec<(String, i64)>,
        /// Lower a limit below current usage anyway.
        #[arg(long)]
        force: bool,
    },
    /// Remove the project's own limits: back to the defaults.
    Reset {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        project: String,
    },
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("whose").required(true).args(["project", "defaults"])))]
pub struct AuditArgs {
    /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
    pub project: Option<String>,
    /// The audit of the default limits instead of a project's.
    #[arg(long)]
    pub defaults: bool,
    /// Only entries recorded at or after this RFC 3339 time, e.g. 2026-01-31T12:00:00Z.
    #[arg(long)]
    pub since: Option<String>,
    /// Only entries recorded before this RFC 3339 time.
    #[arg(long)]
    pub until: Option<String>,
    /// Event type, e.g. ReservationDenied.
    #[arg(long = "type")]
    pub event_type: Option<String>,
    /// Only the entries of this reservation (its id).
    #[arg(long)]
    pub reservation: Option<String>,
    /// Only the entries whose request named this actor.
    #[arg(long)]
    pub actor: Option<String>,
    /// Page size (1 to 1000; the server's default is 100).
    #[arg(long)]
    pub limit: Option<u64>,
    /// Continue from a previous page's `next`.
    #[arg(long)]
    pub cursor: Option<String>,
    /// Follow `next` through every page and print one table of all the entries (with --json,
    /// one JSON array of every entry, instead of one page document).
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, clap::Args)]
pub struct ReservationsArgs {
    /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
    pub project: String,
    /// Only reservations with this status.
    #[arg(long, value_parser = ["held", "committed", "released"])]
    pub status: Option<String>,
    /// Only reservations made for this user.
    #[arg(long)]
    pub user: Option<String>,
    /// Only reservations made before this RFC 3339 time, e.g. 2026-01-31T12:00:00Z.
    #[arg(long)]
    pub older_than: Option<String>,
    /// Page size (1 to 1000; the server's default is 100).
    #[arg(long)]
    pub limit: Option<u64>,
    /// Continue from a previous page's `next`.
    #[arg(long)]
    pub cursor: Option<String>,
    /// Follow `next` through every page and print one table of all the reservations (with
    /// --json, one JSON array of every reservation, instead of one page document).
    #[arg(long)]
    pub all: bool,
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
        /// The event store: sqlite://PATH (an existing file) or postgres://...
        #[arg(long, env = "QUOTA_STORE", default_value = DEFAULT_STORE)]
        store: String,
    },
    /// Replay the events and print every difference from the stored views; exit 1 if any.
    /// Says which views were compared (with --json: `{"views": [...], "differences": [...]}`).
    Verify {
        /// Only this view's differences (`usage` or `audit`).
        #[arg(long)]
        name: Option<String>,
        /// The event store: sqlite://PATH (an existing file) or postgres://...
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every command, argument and option says what it is (issue 17): walks the whole tree.
    #[test]
    fn every_argument_and_option_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                let path = format!("{path} {}", sub.get_name());
                if sub.get_about().is_none() && sub.get_name() != "help" {
                    missing.push(path.clone());
                }
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "quota", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
