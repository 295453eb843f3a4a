//! The command line of `quota`: every command, option and help text.

use api::server::{ServeArgs, DEFAULT_STORE};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

mod values;

pub use values::ProjectId;
use values::{parse_count, parse_pair, parse_project, parse_user};

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
        default_value = "http://127.0.0.1:8080",
        display_order = CLIENT_OPTIONS_ORDER
    )]
    pub url: String,
    /// Bearer token (prefer the environment variable: command lines are visible to others).
    #[arg(
        long,
        global = true,
        env = "QUOTA_TOKEN",
        hide_env_values = true,
        display_order = CLIENT_OPTIONS_ORDER + 1
    )]
    pub token: Option<String>,
    /// Print the server's JSON instead of a table.
    #[arg(long, global = true, display_order = CLIENT_OPTIONS_ORDER + 2)]
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
    /// A project's limits, or with `--user` a user's inside it.
    #[command(subcommand)]
    Limits(LimitsCommand),
    /// Reserve deltas for a project: `quota reserve acme instances=1 cores=2 ram=4096`; with
    /// `--user alice` for a user inside it, whose own limits cap the reserve too.
    Reserve {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        #[arg(value_parser = parse_project)]
        project: ProjectId,
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
        /// A counted reserve, MIN:MAX (1 <= MIN <= MAX <= 10000): the deltas are per unit, and
        /// the largest count in the range that fits every limit is granted.
        #[arg(long, value_parser = parse_count)]
        count: Option<(u32, u32)>,
        /// Only say what the reserve would get now (granted or over which limits, with the
        /// numbers it would be judged on); nothing is held or recorded.
        #[arg(long)]
        dry_run: bool,
        /// The user inside the project the reserve is for (the project id grammar): besides
        /// the project's limits, it must fit the user's own limits, where it has some.
        #[arg(long, value_parser = parse_user)]
        user: Option<String>,
    },
    /// Commit a held reservation.
    Commit {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        #[arg(value_parser = parse_project)]
        project: ProjectId,
        /// The reservation id (a UUID, as `reserve` printed it).
        id: String,
        /// Who asks, for the audit.
        #[arg(long)]
        actor: Option<String>,
    },
    /// Release a reservation (roll back a hold, or free committed usage).
    Release {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        #[arg(value_parser = parse_project)]
        project: ProjectId,
        /// The reservation id (a UUID, as `reserve` printed it).
        id: String,
        /// Who asks, for the audit.
        #[arg(long)]
        actor: Option<String>,
    },
    /// Show a reservation.
    Reservation {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        #[arg(value_parser = parse_project)]
        project: ProjectId,
        /// The reservation id (a UUID, as `reserve` printed it).
        id: String,
    },
    /// A project's reservations, oldest first: find orphaned holds with
    /// `quota reservations acme --status held --older-than 2026-01-31T00:00:00Z`.
    Reservations(ReservationsArgs),
    /// Set a project's in_use to the real counts measured elsewhere, with a reason (admin):
    /// `quota correct acme instances=3 cores=6 --reason "hypervisor recount"`.
    Correct {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        #[arg(value_parser = parse_project)]
        project: ProjectId,
        /// RESOURCE=IN_USE pairs, each 0 or more.
        #[arg(required = true, value_parser = parse_pair)]
        counts: Vec<(String, i64)>,
        /// Why, for the audit (1 to 256 characters).
        #[arg(long)]
        reason: String,
        /// A user's in_use instead of the project's (the project's in_use moves by as much).
        #[arg(long, value_parser = parse_user)]
        user: Option<String>,
    },
    /// A project's usage, now or at a past time; with `--user`, a user's inside it.
    Usage {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        #[arg(value_parser = parse_project)]
        project: ProjectId,
        /// A user's usage inside the project: per resource its limit (its own, else the
        /// project's), in_use, reserved and headroom.
        #[arg(long, value_parser = parse_user)]
        user: Option<String>,
        /// RFC 3339 time, e.g. 2026-01-31T12:00:00Z.
        #[arg(long)]
        at: Option<String>,
        /// Wait until the view reflects this position.
        #[arg(long)]
        min_position: Option<u64>,
        /// Usage over time instead: a sparkline per resource of in_use + reserved, with its
        /// min and max, from `--since` (default: the project's first event) to now.
        #[arg(long, conflicts_with_all = ["user", "at"])]
        history: bool,
        /// With `--history`: only this resource (repeat for more); default: every resource.
        #[arg(long, requires = "history")]
        resource: Vec<String>,
        /// With `--history`: RFC 3339 time of the first point.
        #[arg(long, requires = "history")]
        since: Option<String>,
    },
    /// A project's audit trail; with `--subtree`, its descendants' too.
    Audit(AuditArgs),
    /// A project's parent in the tree of projects: `quota parent acme-dev` shows it and every
    /// ancestor; `quota parent acme-dev acme` sets it (admin; a parent's limits cap its whole
    /// subtree); `quota parent acme-dev --remove` makes the project a root again.
    Parent(ParentArgs),
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
    /// Show a project's effective limits and where each comes from (project or default); with
    /// `--user`, a user's (user, project or default).
    Get {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        #[arg(value_parser = parse_project)]
        project: ProjectId,
        /// A user's limits inside the project instead of the project's.
        #[arg(long, value_parser = parse_user)]
        user: Option<String>,
    },
    /// Set some of a project's limits: `quota limits set acme instances=5`; a user's own
    /// limits with `--user`: `quota limits set acme instances=2 --user alice` (admin).
    Set {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        #[arg(value_parser = parse_project)]
        project: ProjectId,
        /// RESOURCE=LIMIT pairs; -1 is unlimited. Resources left out keep their limit.
        #[arg(required = true, value_parser = parse_pair)]
        limits: Vec<(String, i64)>,
        /// Lower a limit below current usage (the user's, with --user) anyway.
        #[arg(long)]
        force: bool,
        /// Set the user's own limits inside the project instead of the project's.
        #[arg(long, value_parser = parse_user)]
        user: Option<String>,
    },
    /// Remove the project's own limits: back to the defaults. With `--user`, remove the user's
    /// own limits: no cap but the project's.
    Reset {
        /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
        #[arg(value_parser = parse_project)]
        project: ProjectId,
        /// Remove the user's own limits instead of the project's.
        #[arg(long, value_parser = parse_user)]
        user: Option<String>,
    },
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("whose").required(true).args(["project", "defaults"])))]
pub struct AuditArgs {
    /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
    #[arg(value_parser = parse_project)]
    pub project: Option<ProjectId>,
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
    /// Only the entries about this user inside the project (its reserves, denials,
    /// corrections and limits).
    #[arg(long, value_parser = parse_user)]
    pub user: Option<String>,
    /// The entries of the project and of all its descendants (its children, theirs, ...),
    /// with a PROJECT column.
    #[arg(long, conflicts_with = "defaults")]
    pub subtree: bool,
    #[command(flatten)]
    pub pages: PageArgs,
}

#[derive(Debug, clap::Args)]
pub struct ParentArgs {
    /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
    #[arg(value_parser = parse_project)]
    pub project: ProjectId,
    /// Its new parent (the project id grammar); leave out to show the current one. A tree is
    /// at most 4 levels deep, and a project cannot be its own ancestor.
    #[arg(value_parser = parse_project, conflicts_with = "remove")]
    pub parent: Option<ProjectId>,
    /// With PARENT: attach it even where the new ancestors' limits are below their subtree's
    /// usage (reserves under them are then refused until usage falls).
    #[arg(long, requires = "parent")]
    pub force: bool,
    /// Detach the project from its parent: it becomes a root, capped by its own limits only.
    #[arg(long)]
    pub remove: bool,
}

/// Paging, as the audit and the reservation list take it.
#[derive(Debug, clap::Args)]
pub struct PageArgs {
    /// Page size (1 to 1000; the server's default is 100).
    #[arg(long)]
    pub limit: Option<u64>,
    /// Continue from a previous page's `next`.
    #[arg(long)]
    pub cursor: Option<String>,
    /// Follow `next` through every page and print one table of all the rows (with --json, one
    /// JSON array of every row, instead of one page document).
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, clap::Args)]
pub struct ReservationsArgs {
    /// The project id (1-128 characters of A-Z a-z 0-9 . _ : -).
    #[arg(value_parser = parse_project)]
    pub project: ProjectId,
    /// Only reservations with this status.
    #[arg(long, value_parser = ["held", "committed", "released"])]
    pub status: Option<String>,
    /// Only reservations made for this user.
    #[arg(long, value_parser = parse_user)]
    pub user: Option<String>,
    /// Only reservations made before this RFC 3339 time, e.g. 2026-01-31T12:00:00Z.
    #[arg(long)]
    pub older_than: Option<String>,
    #[command(flatten)]
    pub pages: PageArgs,
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

/// Where the client options show in a command's help: after the command's own options.
const CLIENT_OPTIONS_ORDER: usize = 1000;

/// The options of the commands that talk to a server over HTTP. clap gives them to every
/// command (so `quota --json usage acme` and `quota usage acme --json` both work).
const CLIENT_OPTIONS: [&str; 3] = ["url", "token", "json"];

/// The commands that talk to no server, by their path under `quota`, and the client options
/// each still uses (`projections verify --json` prints JSON; `bench --target` has a `--token`
/// of its own).
const SERVERLESS: [(&[&str], &[&str]); 4] = [
    (&["serve"], &[]),
    (&["bench"], &["token"]),
    (&["projections", "rebuild"], &[]),
    (&["projections", "verify"], &["json"]),
];

/// `quota`'s command line: [`Cli`]'s, with the client options hidden from the help of each
/// serverless command that does not use them. Each such command gets hidden copies of them
/// before clap hands the originals down, and clap does not hand an option to a command that
/// already has one of that name.
pub fn command() -> clap::Command {
    let mut command = Cli::command();
    let hidden: Vec<clap::Arg> = command
        .get_arguments()
        .filter(|arg| CLIENT_OPTIONS.contains(&arg.get_id().as_str()))
        .map(|arg| arg.clone().hide(true))
        .collect();
    for (path, used) in SERVERLESS {
        command = mut_at(command, path, &|mut sub| {
            for arg in &hidden {
                if !used.contains(&arg.get_id().as_str()) {
                    sub = sub.arg(arg.clone());
                }
            }
            sub
        });
    }
    command
}

fn mut_at(
    command: clap::Command,
    path: &[&str],
    change: &dyn Fn(clap::Command) -> clap::Command,
) -> clap::Command {
    match path {
        [] => change(command),
        [first, rest @ ..] => {
            let first = first.to_string();
            command.mut_subcommand(first, |sub| mut_at(sub, rest, change))
        }
    }
}

/// Parses the process's arguments. A client option given on the command line to a command
/// that does not use it is refused, never silently ignored (`quota serve --url …` listens
/// where `--listen` says; `quota bench` goes over HTTP with `--target`).
pub fn parse() -> Result<Cli, clap::Error> {
    let mut command = command();
    let matches = command.try_get_matches_from_mut(std::env::args_os())?;
    let cli = Cli::from_arg_matches(&matches)?;
    if let Some((path, option)) = unused_client_option(&matches) {
        let hint = match path.as_str() {
            "bench" => " (a benchmark over HTTP takes --target URL)",
            "serve" => " (the server listens where --listen says)",
            _ => "",
        };
        return Err(command.error(
            clap::error::ErrorKind::ArgumentConflict,
            format!("`quota {path}` talks to no server: --{option} does not apply{hint}"),
        ));
    }
    Ok(cli)
}

/// The first serverless command given a client option it does not use on the command line
/// (an environment variable such as `QUOTA_URL` is fine: it is meant for every command).
fn unused_client_option(matches: &ArgMatches) -> Option<(String, &'static str)> {
    SERVERLESS.iter().find_map(|(path, used)| {
        let mut at = matches;
        for name in *path {
            at = match at.subcommand() {
                Some((sub, sub_matches)) if sub == *name => sub_matches,
                _ => return None,
            };
        }
        CLIENT_OPTIONS
            .into_iter()
            .filter(|o| !used.contains(o))
            .find(|o| at.value_source(o) == Some(ValueSource::CommandLine))
            .map(|option| (path.join(" "), option))
    })
}

#[cfg(test)]
mod tests;
