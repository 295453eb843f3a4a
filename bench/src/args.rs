//! What `quota bench` takes on the command line.

/// The tree workload's children under each parent.
pub(crate) const CHILDREN_PER_PARENT: usize = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// 1 project, 20 clients all at once, one reserve each, limit instances 10.
    Burst,
    /// 1 project, unlimited, boots in a closed loop.
    Hot,
    /// 1,000 projects picked uniformly, unlimited, boots in a closed loop.
    Fleet,
    /// 100 parents with 10 children each (1,000 children, `--projects`), boots in a closed loop
    /// in children picked uniformly; each boot's chain is the child and its parent (SPEC rule
    /// 11), under a parent limit that is never reached.
    Tree,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Burst => "burst",
            Workload::Hot => "hot",
            Workload::Fleet => "fleet",
            Workload::Tree => "tree",
        }
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// What load to drive (SPEC.md's benchmark workloads).
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
    /// Projects in the fleet workload; children in the tree workload (a multiple of 10).
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

impl BenchArgs {
    /// Checks `--clients` and `--projects`; answers the number of clients (20 for burst and 16
    /// otherwise unless given).
    pub(crate) fn validated_clients(&self) -> Result<usize, String> {
        let clients = self.clients.unwrap_or(if self.workload == Workload::Burst {
            20
        } else {
            16
        });
        if clients == 0 || clients > 10_000 {
            return Err("--clients must be 1 to 10000".into());
        }
        if self.projects == 0 || self.projects > 1_000_000 {
            return Err("--projects must be 1 to 1000000".into());
        }
        if self.workload == Workload::Tree && !self.projects.is_multiple_of(CHILDREN_PER_PARENT) {
            return Err(format!(
                "--projects must be a multiple of {CHILDREN_PER_PARENT} for the tree workload"
            ));
        }
        Ok(clients)
    }

    /// How many projects the workload spreads its load over.
    pub(crate) fn project_count(&self) -> usize {
        match self.workload {
            Workload::Fleet | Workload::Tree => self.projects,
            Workload::Hot | Workload::Burst => 1,
        }
    }
}
