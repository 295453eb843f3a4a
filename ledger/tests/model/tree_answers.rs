//! What the tree cases compare: the answers, and each project's state at the end, in a form
//! the model and the implementations can both produce.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::reference::{Named, Status};

/// An answer, in a form the model and the implementations can both produce. Projects are
/// named by their index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeAnswer {
    Reservation {
        id: Uuid,
        status: Status,
        deltas: BTreeMap<String, i64>,
        expires_ms: i64,
        count: Option<u32>,
    },
    /// Effective limits: resource -> (limit, "project" or "default").
    Limits(BTreeMap<String, (i64, &'static str)>),
    Expired(usize),
    /// (resource, before, after) for each in_use that changed.
    Corrected(Vec<(String, i64, i64)>),
    /// A parent set or removed: the project's ancestors now, nearest first.
    Ancestors(Vec<usize>),
    Refused {
        code: &'static str,
        /// Resources named, with (limit, in_use, reserved) where the refusal carries them.
        standing: Vec<Named>,
        /// Over the project's own limits (which cap its subtree).
        overs: Vec<String>,
        /// The ancestors whose subtree limits it would go over, with those resources.
        ancestor_overs: BTreeMap<usize, Vec<String>>,
        max_count: Option<u32>,
    },
}

pub fn tree_refused(code: &'static str, names: Vec<String>) -> TreeAnswer {
    TreeAnswer::Refused {
        code,
        standing: names.into_iter().map(|n| (n, None)).collect(),
        overs: vec![],
        ancestor_overs: BTreeMap::new(),
        max_count: None,
    }
}

/// What is compared at the end of a case, for each project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSnapshot {
    pub parent: Option<usize>,
    pub overrides: BTreeMap<String, i64>,
    /// resource -> its own (in_use, reserved, releasing).
    pub own: BTreeMap<String, (i64, i64, i64)>,
    /// resource -> its subtree's (in_use, reserved): its own and all its descendants'.
    pub subtree: BTreeMap<String, (i64, i64)>,
    /// Every descendant, in index order.
    pub descendants: Vec<usize>,
    /// id -> status, for the ids asked about.
    pub reservations: BTreeMap<Uuid, Option<Status>>,
}
