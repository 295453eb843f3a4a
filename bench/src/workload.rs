//! What the workloads ask for: the boot, the projects it goes to and their limits.

use domain::{Deltas, Limit, Limits, ProjectId, ResourceName};

use crate::args::{BenchArgs, Workload};

/// One boot's reserve: an instance with its cores and memory.
pub(crate) const BOOT: [(&str, i64); 3] = [("instances", 1), ("cores", 2), ("ram", 4096)];
/// The burst workload's instances limit: 20 clients race for room for 10.
pub(crate) const BURST_LIMIT: i64 = 10;
/// How long a boot's hold would last uncommitted; the bench commits it at once.
pub(crate) const HOLD_SECONDS: u32 = 3600;

pub(crate) fn boot_resources() -> impl Iterator<Item = ResourceName> {
    BOOT.iter()
        .map(|(r, _)| ResourceName::parse(r).expect("static name"))
}

pub(crate) fn boot_deltas() -> Deltas {
    Deltas::new(
        BOOT.iter()
            .map(|(r, n)| (ResourceName::parse(r).expect("static name"), *n))
            .collect(),
    )
    .expect("static deltas")
}

/// Fresh project names per run, so earlier runs on the same store do not interfere.
pub(crate) fn fresh_projects(count: usize) -> Vec<ProjectId> {
    let run_id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    (0..count)
        .map(|i| ProjectId::parse(&format!("bench-{run_id}-{i}")).expect("valid project id"))
        .collect()
}

/// Every project's limits: unlimited, but for the burst's instances.
pub(crate) fn project_limits(args: &BenchArgs) -> Limits {
    BOOT.iter()
        .map(|(r, _)| {
            let limit = if args.workload == Workload::Burst && *r == "instances" {
                Limit::new(BURST_LIMIT).expect("valid")
            } else {
                Limit::UNLIMITED
            };
            (ResourceName::parse(r).expect("static name"), limit)
        })
        .collect()
}
