//! The commands a case is made of, and how they are generated.

use std::collections::BTreeMap;

use proptest::prelude::*;

/// `zzz` never gets a default: reserving it must fail `unknown-resource`.
pub const RESOURCES: [&str; 4] = ["a", "b", "c", "zzz"];
pub const DEFAULTS: [(&str, i64); 3] = [("a", 4), ("b", 10), ("c", -1)];
/// The users inside the project (SPEC rule 8).
pub const USERS: [&str; 2] = ["alice", "bob"];
/// Client-chosen ids shared by the commands of a case, so that retries and reuse happen.
pub const POOL: u128 = 3;

#[derive(Clone, Debug)]
pub enum Cmd {
    /// `id`: an index into the shared pool, or `None` for an id chosen by the ledger.
    Reserve {
        id: Option<usize>,
        deltas: Vec<(usize, i64)>,
        expires_in: u32,
        /// A counted reserve's (min, max).
        count: Option<(u32, u32)>,
        /// An index into `USERS`, or `None` for the project alone.
        user: Option<usize>,
    },
    /// Index into the ids known so far (the pool, then ledger-chosen ones).
    Commit(usize),
    Release(usize),
    SetLimits {
        limits: Vec<(usize, i64)>,
        force: bool,
    },
    ResetLimits,
    SetUserLimits {
        user: usize,
        limits: Vec<(usize, i64)>,
        force: bool,
    },
    ResetUserLimits(usize),
    /// Seconds to move the clock.
    Advance(u32),
    Expire,
    /// An operator's recount (SPEC rule 10): of the project's in_use, or of a user's.
    Correct {
        user: Option<usize>,
        in_use: Vec<(usize, i64)>,
    },
}

impl Cmd {
    /// Whether the command may leave usage above a cap: rule 6's `force`, rule 10's
    /// corrections, and a reset to the defaults (which may be lower than the overrides were).
    pub fn may_exceed_caps(&self) -> bool {
        match self {
            Cmd::SetLimits { force, .. } | Cmd::SetUserLimits { force, .. } => *force,
            Cmd::ResetLimits | Cmd::Correct { .. } => true,
            _ => false,
        }
    }
}

pub fn named(pairs: &[(usize, i64)]) -> BTreeMap<String, i64> {
    pairs
        .iter()
        .map(|(i, v)| (RESOURCES[*i].to_owned(), *v))
        .collect()
}

pub fn user_name(user: Option<usize>) -> Option<String> {
    user.map(|u| USERS[u].to_owned())
}

fn command() -> impl Strategy<Value = Cmd> {
    // Mostly known resources; `zzz` (index 3) now and then.
    let resource = prop_oneof![8 => 0usize..3, 1 => Just(3usize)];
    let deltas = prop::collection::vec((resource.clone(), -3i64..=5), 1..=2);
    let limits = prop::collection::vec((resource.clone(), -1i64..=8), 1..=2);
    // A user's own caps: mostly below the project's, so that they bind.
    let user_limits = prop::collection::vec((resource.clone(), -1i64..=5), 1..=2);
    let corrections = prop::collection::vec((resource, 0i64..=6), 1..=2);
    let user = prop::option::weighted(0.6, 0..USERS.len());
    let expires_in = prop_oneof![
        3 => Just(1u32),
        3 => Just(30),
        3 => Just(60),
        3 => Just(600),
        1 => Just(0u32), // invalid
    ];
    // A counted reserve now and then, over small ranges that straddle the room left.
    let count = prop::option::weighted(
        0.3,
        (1u32..=3, 0u32..=2).prop_map(|(min, extra)| (min, min + extra)),
    );
    prop_oneof![
        6 => (prop::option::weighted(0.7, 0..POOL as usize), deltas, expires_in, count, user.clone())
            .prop_map(|(id, deltas, expires_in, count, user)| Cmd::Reserve {
                id,
                deltas,
                expires_in,
                count,
                user,
            }),
        4 => (0usize..8).prop_map(Cmd::Commit),
        2 => (0usize..8).prop_map(Cmd::Release),
        1 => (limits, any::<bool>()).prop_map(|(limits, force)| Cmd::SetLimits { limits, force }),
        1 => Just(Cmd::ResetLimits),
        2 => (0..USERS.len(), user_limits, any::<bool>())
            .prop_map(|(user, limits, force)| Cmd::SetUserLimits { user, limits, force }),
        1 => (0..USERS.len()).prop_map(Cmd::ResetUserLimits),
        // Steps that land exactly on an expiry instant as well as between them.
        2 => prop_oneof![Just(0u32), Just(1), Just(30), 1u32..=45, Just(601)].prop_map(Cmd::Advance),
        1 => Just(Cmd::Expire),
        2 => (prop::option::weighted(0.5, 0..USERS.len()), corrections)
            .prop_map(|(user, in_use)| Cmd::Correct { user, in_use }),
    ]
}

pub fn commands(max: usize) -> impl Strategy<Value = Vec<Cmd>> {
    prop::collection::vec(command(), 1..=max)
}
