//! The reference for trees (SPEC rule 11), in the plainest terms: each project keeps its parent,
//! limits, own in_use and own reservations, and nothing else. What a subtree uses is summed
//! afresh over the projects below it every time it is asked, by following parents; no project
//! keeps a copy of its descendants' numbers (as the implementation's ancestors do). It shares no
//! code with the domain's decisions nor with its subtree bookkeeping.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::commands::{named, DEFAULTS, RESOURCES};
use super::reference::{Named, Status};
use super::tree_answers::{tree_refused, NodeSnapshot, TreeAnswer};

#[path = "tree_reference_admin.rs"]
mod admin;
use super::tree_commands::{TreeCmd, PROJECTS};

/// At most 3 ancestors: trees at most 4 levels deep.
const MAX_LEVELS: usize = 4;

#[derive(Clone, Debug)]
struct Hold {
    deltas: BTreeMap<String, i64>,
    /// A counted reserve's (min, max, granted).
    count: Option<(u32, u32, u32)>,
    status: Status,
    created_ms: i64,
    expires_ms: i64,
}

#[derive(Clone, Debug, Default)]
struct Node {
    parent: Option<usize>,
    overrides: BTreeMap<String, i64>,
    in_use: BTreeMap<String, i64>,
    reservations: BTreeMap<Uuid, Hold>,
}

pub(super) fn get(map: &BTreeMap<String, i64>, key: &str) -> i64 {
    map.get(key).copied().unwrap_or(0)
}

fn times(deltas: &BTreeMap<String, i64>, k: u32) -> BTreeMap<String, i64> {
    deltas
        .iter()
        .map(|(r, d)| (r.clone(), d * i64::from(k)))
        .collect()
}

#[derive(Clone, Debug)]
pub struct TreeModel {
    pub now_ms: i64,
    defaults: BTreeMap<String, i64>,
    nodes: Vec<Node>,
}

impl TreeModel {
    pub fn new(now_ms: i64) -> TreeModel {
        TreeModel {
            now_ms,
            defaults: DEFAULTS.iter().map(|(r, l)| (r.to_string(), *l)).collect(),
            nodes: vec![Node::default(); PROJECTS],
        }
    }

    // ---- the tree ----

    pub fn parent(&self, p: usize) -> Option<usize> {
        self.nodes[p].parent
    }

    /// The project's ancestors, nearest first.
    pub fn ancestors(&self, p: usize) -> Vec<usize> {
        let mut chain = vec![];
        let mut at = p;
        while let Some(parent) = self.nodes[at].parent {
            assert!(chain.len() < PROJECTS, "the model's parents make a cycle");
            chain.push(parent);
            at = parent;
        }
        chain
    }

    /// Every project below `p`, in index order.
    pub fn descendants(&self, p: usize) -> Vec<usize> {
        (0..PROJECTS)
            .filter(|q| self.ancestors(*q).contains(&p))
            .collect()
    }

    /// Levels below `p`: 0 without children.
    pub(super) fn height(&self, p: usize) -> usize {
        (0..PROJECTS)
            .filter(|c| self.nodes[*c].parent == Some(p))
            .map(|c| 1 + self.height(c))
            .max()
            .unwrap_or(0)
    }

    // ---- the numbers ----

    pub fn limit(&self, p: usize, resource: &str) -> i64 {
        self.nodes[p]
            .overrides
            .get(resource)
            .or_else(|| self.defaults.get(resource))
            .copied()
            .expect("only resources with a default are judged")
    }

    fn live(&self, hold: &Hold) -> bool {
        hold.status == Status::Held && self.now_ms < hold.expires_ms
    }

    /// The project's own (in_use, reserved, releasing).
    pub fn own(&self, p: usize, resource: &str) -> (i64, i64, i64) {
        let node = &self.nodes[p];
        let (mut reserved, mut releasing) = (0, 0);
        for hold in node.reservations.values().filter(|h| self.live(h)) {
            let d = get(&hold.deltas, resource);
            if d > 0 {
                reserved += d;
            } else {
                releasing += d;
            }
        }
        (get(&node.in_use, resource), reserved, releasing)
    }

    /// The (in_use, reserved) of `p` and every project below it, summed now.
    pub fn subtree(&self, p: usize, resource: &str) -> (i64, i64) {
        let mut members = self.descendants(p);
        members.push(p);
        members.iter().fold((0, 0), |(i, r), q| {
            let (in_use, reserved, _) = self.own(*q, resource);
            (i + in_use, r + reserved)
        })
    }

    /// Whether the positive `deltas` fit in `p`'s subtree and every ancestor's, now.
    fn fits(&self, p: usize, deltas: &BTreeMap<String, i64>) -> bool {
        let mut chain = vec![p];
        chain.extend(self.ancestors(p));
        chain.iter().all(|node| {
            deltas.iter().filter(|(_, d)| **d > 0).all(|(r, d)| {
                let limit = self.limit(*node, r);
                let (in_use, reserved) = self.subtree(*node, r);
                limit < 0 || in_use + reserved + d <= limit
            })
        })
    }

    pub(super) fn unknown<'a>(&self, names: impl Iterator<Item = &'a String>) -> Vec<String> {
        names
            .filter(|n| !self.defaults.contains_key(*n))
            .cloned()
            .collect()
    }

    fn answer_for(&self, p: usize, id: Uuid) -> TreeAnswer {
        let hold = &self.nodes[p].reservations[&id];
        TreeAnswer::Reservation {
            id,
            status: hold.status,
            deltas: hold.deltas.clone(),
            expires_ms: hold.expires_ms,
            count: hold.count.map(|(_, _, k)| k),
        }
    }

    /// Every resource of `deltas` with the project's limit and its subtree's usage.
    fn standing(&self, p: usize, deltas: &BTreeMap<String, i64>) -> Vec<Named> {
        deltas
            .keys()
            .map(|r| {
                let (in_use, reserved) = self.subtree(p, r);
                (r.clone(), Some((self.limit(p, r), in_use, reserved)))
            })
            .collect()
    }

    pub(super) fn effective_limits(&self, p: usize) -> TreeAnswer {
        let mut all: BTreeMap<String, (i64, &'static str)> = self
            .defaults
            .iter()
            .map(|(r, l)| (r.clone(), (*l, "default")))
            .collect();
        for (r, l) in &self.nodes[p].overrides {
            all.insert(r.clone(), (*l, "project"));
        }
        TreeAnswer::Limits(all)
    }

    // ---- the commands ----

    fn reserve(
        &mut self,
        p: usize,
        id: Uuid,
        unit: &BTreeMap<String, i64>,
        expires_in: u32,
        count: Option<(u32, u32)>,
    ) -> TreeAnswer {
        if !(1..=2_592_000).contains(&expires_in) {
            return tree_refused("invalid", vec![]);
        }
        let expires_in_ms = i64::from(expires_in) * 1000;
        if let Some(existing) = self.nodes[p].reservations.get(&id) {
            let granted = existing.count.map_or(1, |(_, _, k)| k);
            let range = existing.count.map(|(min, max, _)| (min, max));
            let same = existing.deltas == times(unit, granted)
                && range == count
                && existing.expires_ms - existing.created_ms == expires_in_ms;
            return if same {
                self.answer_for(p, id)
            } else {
                tree_refused("idempotency-mismatch", vec![])
            };
        }
        let unknown = self.unknown(unit.keys());
        if !unknown.is_empty() {
            return tree_refused("unknown-resource", unknown);
        }
        // Rule 9: the largest k up to max that fits the whole chain; below min, judged on min.
        let (k, max_count) = match count {
            None => (1, None),
            Some((min, max)) => {
                let fit = (0..=max)
                    .rev()
                    .find(|k| self.fits(p, &times(unit, *k)))
                    .unwrap_or(0);
                (fit.max(min), Some(fit))
            }
        };
        let deltas = times(unit, k);
        // Rule 3 is about the project's own in_use and its own held reductions.
        let underflows: Vec<String> = deltas
            .iter()
            .filter(|(r, d)| {
                let (in_use, _, releasing) = self.own(p, r);
                **d < 0 && in_use + releasing + **d < 0
            })
            .map(|(r, _)| r.clone())
            .collect();
        if !underflows.is_empty() {
            return tree_refused("usage-underflow", underflows);
        }
        let over = |node: usize| -> Vec<String> {
            deltas
                .iter()
                .filter(|(r, d)| {
                    let limit = self.limit(node, r);
                    let (in_use, reserved) = self.subtree(node, r);
                    **d > 0 && limit >= 0 && in_use + reserved + **d > limit
                })
                .map(|(r, _)| r.clone())
                .collect()
        };
        let overs = over(p);
        let ancestor_overs: BTreeMap<usize, Vec<String>> = self
            .ancestors(p)
            .into_iter()
            .map(|a| (a, over(a)))
            .filter(|(_, o)| !o.is_empty())
            .collect();
        if !overs.is_empty() || !ancestor_overs.is_empty() {
            return TreeAnswer::Refused {
                code: "over-quota",
                standing: self.standing(p, &deltas),
                overs,
                ancestor_overs,
                max_count,
            };
        }
        let hold = Hold {
            deltas,
            count: count.map(|(min, max)| (min, max, k)),
            status: Status::Held,
            created_ms: self.now_ms,
            expires_ms: self.now_ms + expires_in_ms,
        };
        self.nodes[p].reservations.insert(id, hold);
        self.answer_for(p, id)
    }

    fn commit(&mut self, p: usize, id: Uuid) -> TreeAnswer {
        let Some(hold) = self.nodes[p].reservations.get(&id).cloned() else {
            return tree_refused("not-found", vec![]);
        };
        match hold.status {
            Status::Committed => self.answer_for(p, id),
            Status::Released("expired") => tree_refused("reservation-expired", vec![]),
            Status::Released(_) => tree_refused("reservation-released", vec![]),
            Status::Held if self.now_ms >= hold.expires_ms => {
                self.set_status(p, id, Status::Released("expired"));
                tree_refused("reservation-expired", vec![])
            }
            Status::Held => {
                let underflows: Vec<String> = hold
                    .deltas
                    .iter()
                    .filter(|(r, d)| self.own(p, r).0 + **d < 0)
                    .map(|(r, _)| r.clone())
                    .collect();
                if !underflows.is_empty() {
                    return tree_refused("usage-underflow", underflows);
                }
                for (r, d) in &hold.deltas {
                    *self.nodes[p].in_use.entry(r.clone()).or_default() += d;
                }
                self.set_status(p, id, Status::Committed);
                self.answer_for(p, id)
            }
        }
    }

    fn set_status(&mut self, p: usize, id: Uuid, status: Status) {
        self.nodes[p].reservations.get_mut(&id).unwrap().status = status;
    }

    fn release(&mut self, p: usize, id: Uuid) -> TreeAnswer {
        let Some(hold) = self.nodes[p].reservations.get(&id).cloned() else {
            return tree_refused("not-found", vec![]);
        };
        let reason = match hold.status {
            Status::Released(_) => return self.answer_for(p, id),
            Status::Held if self.now_ms < hold.expires_ms => "rolled_back",
            Status::Held => "expired",
            Status::Committed => {
                // Freed usage stops at zero; the reductions held must still fit (rule 3).
                let underflows: Vec<String> = hold
                    .deltas
                    .iter()
                    .filter(|(r, d)| {
                        let (in_use, _, releasing) = self.own(p, r);
                        (in_use - **d).max(0) + releasing < 0
                    })
                    .map(|(r, _)| r.clone())
                    .collect();
                if !underflows.is_empty() {
                    return tree_refused("usage-underflow", underflows);
                }
                // Freeing a committed reduction gives usage back: like a grant, it must fit the
                // project's subtree and every ancestor's.
                let over = |node: usize| -> Vec<String> {
                    hold.deltas
                        .iter()
                        .filter(|(r, d)| {
                            let limit = self.limit(node, r);
                            let (in_use, reserved) = self.subtree(node, r);
                            **d < 0 && limit >= 0 && in_use - **d + reserved > limit
                        })
                        .map(|(r, _)| r.clone())
                        .collect()
                };
                let overs = over(p);
                let ancestor_overs: BTreeMap<usize, Vec<String>> = self
                    .ancestors(p)
                    .into_iter()
                    .map(|a| (a, over(a)))
                    .filter(|(_, o)| !o.is_empty())
                    .collect();
                if !overs.is_empty() || !ancestor_overs.is_empty() {
                    return TreeAnswer::Refused {
                        code: "over-quota",
                        standing: self.standing(p, &hold.deltas),
                        overs,
                        ancestor_overs,
                        max_count: None,
                    };
                }
                for (r, d) in &hold.deltas {
                    let used = self.nodes[p].in_use.entry(r.clone()).or_default();
                    *used = (*used - d).max(0);
                }
                "freed"
            }
        };
        self.set_status(p, id, Status::Released(reason));
        self.answer_for(p, id)
    }

    /// Runs a command; `target` is the (project, id) a reserve, commit or release is about.
    pub fn run(&mut self, command: &TreeCmd, target: (usize, Uuid)) -> TreeAnswer {
        let (p, id) = target;
        match command {
            TreeCmd::SetParent {
                project,
                parent,
                force,
            } => self.set_parent(*project, *parent, *force),
            TreeCmd::Reserve {
                deltas,
                expires_in,
                count,
                ..
            } => self.reserve(p, id, &named(deltas), *expires_in, *count),
            TreeCmd::Commit(_) => self.commit(p, id),
            TreeCmd::Release(_) => self.release(p, id),
            TreeCmd::SetLimits {
                project,
                limits,
                force,
            } => self.set_limits(*project, &named(limits), *force),
            TreeCmd::ResetLimits(project) => {
                self.nodes[*project].overrides.clear();
                self.effective_limits(*project)
            }
            TreeCmd::Expire(project) => self.expire(*project),
            TreeCmd::Correct { project, in_use } => self.correct(*project, &named(in_use)),
            TreeCmd::Advance(_) => unreachable!("the clock is moved by the runner"),
        }
    }

    pub fn snapshot(&self, p: usize, ids: &[Uuid]) -> NodeSnapshot {
        let node = &self.nodes[p];
        NodeSnapshot {
            parent: node.parent,
            overrides: node.overrides.clone(),
            own: RESOURCES[..3]
                .iter()
                .map(|r| (r.to_string(), self.own(p, r)))
                .collect(),
            subtree: RESOURCES[..3]
                .iter()
                .map(|r| (r.to_string(), self.subtree(p, r)))
                .collect(),
            descendants: self.descendants(p),
            reservations: ids
                .iter()
                .map(|id| (*id, node.reservations.get(id).map(|h| h.status)))
                .collect(),
        }
    }
}
