//! The commands of a tree case (SPEC rule 11) and how they are generated: a handful of projects
//! whose parents are set, removed and moved at random (cycles and too-deep trees included,
//! which must be refused), with limits on any of them, and reserves (plain and counted),
//! commits, releases, expiries and corrections in any of them.

use proptest::prelude::*;

/// The projects of a case: `p0` … `p4` (five, so a chain of all of them is too deep).
pub const PROJECTS: usize = 5;
/// Client-chosen reservation ids of a case (each project has its own reservations by them).
pub const TREE_POOL: u128 = 3;

#[derive(Clone, Debug)]
pub enum TreeCmd {
    /// Set (or with `None` remove) the parent of `project`.
    SetParent {
        project: usize,
        parent: Option<usize>,
        force: bool,
    },
    /// `id`: an index into the pool, or `None` for an id chosen by the implementation.
    Reserve {
        project: usize,
        id: Option<usize>,
        deltas: Vec<(usize, i64)>,
        expires_in: u32,
        count: Option<(u32, u32)>,
    },
    /// An index into the (project, reservation) pairs granted so far.
    Commit(usize),
    Release(usize),
    SetLimits {
        project: usize,
        limits: Vec<(usize, i64)>,
        force: bool,
    },
    ResetLimits(usize),
    /// Seconds to move the clock.
    Advance(u32),
    Expire(usize),
    Correct {
        project: usize,
        in_use: Vec<(usize, i64)>,
    },
}

impl TreeCmd {
    /// Whether the command may leave a subtree above a cap: rule 6's `force` (for a limit or a
    /// parent), a reset to the defaults, and a correction (rule 10).
    pub fn may_exceed_caps(&self) -> bool {
        match self {
            TreeCmd::SetLimits { force, .. } | TreeCmd::SetParent { force, .. } => *force,
            TreeCmd::ResetLimits(_) | TreeCmd::Correct { .. } => true,
            _ => false,
        }
    }
}

fn command() -> impl Strategy<Value = TreeCmd> {
    let project = 0..PROJECTS;
    // Mostly known resources; `zzz` (index 3, no default) now and then.
    let resource = prop_oneof![10 => 0usize..3, 1 => Just(3usize)];
    // Mostly growth; reductions (rule 3) now and then, after corrections gave something to shrink.
    let delta = prop_oneof![3 => 1i64..=4, 1 => -3i64..=0];
    let deltas = prop::collection::vec((resource.clone(), delta), 1..=2);
    let limits = prop::collection::vec((resource.clone(), -1i64..=9), 1..=2);
    let corrections = prop::collection::vec((resource, 0i64..=6), 1..=2);
    let expires_in = prop_oneof![
        3 => Just(1u32),
        3 => Just(30),
        3 => Just(600),
        1 => Just(0u32), // invalid
    ];
    let count = prop::option::weighted(
        0.3,
        (1u32..=3, 0u32..=3).prop_map(|(min, extra)| (min, min + extra)),
    );
    prop_oneof![
        4 => (project.clone(), prop::option::weighted(0.9, 0..PROJECTS), prop::bool::weighted(0.3))
            .prop_map(|(project, parent, force)| TreeCmd::SetParent { project, parent, force }),
        // Along the line p0 <- p1 <- ... <- p4, so deep trees (and too deep ones) come up.
        2 => (1..PROJECTS, prop::bool::weighted(0.3)).prop_map(|(project, force)| {
            TreeCmd::SetParent { project, parent: Some(project - 1), force }
        }),
        8 => (
            project.clone(),
            prop::option::weighted(0.5, 0..TREE_POOL as usize),
            deltas,
            expires_in,
            count,
        )
            .prop_map(|(project, id, deltas, expires_in, count)| TreeCmd::Reserve {
                project,
                id,
                deltas,
                expires_in,
                count,
            }),
        4 => (0usize..16).prop_map(TreeCmd::Commit),
        2 => (0usize..16).prop_map(TreeCmd::Release),
        2 => (project.clone(), limits, prop::bool::weighted(0.3))
            .prop_map(|(project, limits, force)| TreeCmd::SetLimits { project, limits, force }),
        1 => project.clone().prop_map(TreeCmd::ResetLimits),
        2 => prop_oneof![Just(0u32), Just(1), Just(30), 1u32..=45, Just(601)].prop_map(TreeCmd::Advance),
        1 => project.clone().prop_map(TreeCmd::Expire),
        2 => (project, corrections).prop_map(|(project, in_use)| TreeCmd::Correct { project, in_use }),
    ]
}

pub fn tree_commands(max: usize) -> impl Strategy<Value = Vec<TreeCmd>> {
    prop::collection::vec(command(), 1..=max)
}
