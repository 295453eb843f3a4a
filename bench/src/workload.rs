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

/// The tree workload's parent limit of each boot resource: capped, so every boot is judged
/// against it, and never reached by a run.
pub(crate) const TREE_PARENT_LIMIT: i64 = 1 << 50;

/// The tree workload's parents, one per `CHILDREN_PER_PARENT` children, named after the first
/// child's run.
pub(crate) fn tree_parents(children: &[ProjectId]) -> Vec<(ProjectId, Vec<ProjectId>)> {
    children
        .chunks(crate::args::CHILDREN_PER_PARENT)
        .enumerate()
        .map(|(i, chunk)| {
            let name = format!("{}-parent-{i}", chunk[0].as_str());
            let parent = ProjectId::parse(&name[..name.len().min(128)]).expect("valid project id");
            (parent, chunk.to_vec())
        })
        .collect()
}

pub(crate) fn tree_parent_limits() -> Limits {
    boot_resources()
        .map(|r| (r, Limit::new(TREE_PARENT_LIMIT).expect("valid")))
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
