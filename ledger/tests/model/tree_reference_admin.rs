//! The reference's operator commands and tree moves: limits (rule 6 on the subtree), parents
//! (rule 11), expiries and corrections. A part of `tree_reference`, in a file of its own.

use std::collections::BTreeMap;

use super::super::commands::RESOURCES;
use super::super::reference::Status;
use super::super::tree_answers::{tree_refused, TreeAnswer};
use super::{get, TreeModel, MAX_LEVELS};

impl TreeModel {
    /// Rule 6: a project's limit caps its subtree.
    pub(super) fn set_limits(
        &mut self,
        p: usize,
        limits: &BTreeMap<String, i64>,
        force: bool,
    ) -> TreeAnswer {
        let unknown = self.unknown(limits.keys());
        if !unknown.is_empty() {
            return tree_refused("unknown-resource", unknown);
        }
        let mut below = vec![];
        for (r, new) in limits.iter().filter(|(_, new)| **new >= 0) {
            let old = self.limit(p, r);
            let (in_use, reserved) = self.subtree(p, r);
            if (old < 0 || *new < old) && *new < in_use + reserved {
                below.push((r.clone(), Some((*new, in_use, reserved))));
            }
        }
        if !below.is_empty() && !force {
            return TreeAnswer::Refused {
                code: "limit-below-usage",
                standing: below,
                overs: vec![],
                ancestor_overs: BTreeMap::new(),
                max_count: None,
            };
        }
        self.nodes[p].overrides.extend(limits.clone());
        self.effective_limits(p)
    }

    /// Rule 11: no cycle, at most 4 levels, and rule 6 for every new ancestor: the moving
    /// subtree must fit under each (the first one it would go over is named), unless forced.
    pub(super) fn set_parent(
        &mut self,
        p: usize,
        parent: Option<usize>,
        force: bool,
    ) -> TreeAnswer {
        let new_chain: Vec<usize> = match parent {
            Some(q) => std::iter::once(q).chain(self.ancestors(q)).collect(),
            None => vec![],
        };
        if self.nodes[p].parent == parent {
            return TreeAnswer::Ancestors(new_chain);
        }
        if parent.is_some_and(|q| q == p || self.descendants(p).contains(&q)) {
            return tree_refused("cycle", vec![]);
        }
        if 1 + new_chain.len() + self.height(p) > MAX_LEVELS {
            return tree_refused("too-deep", vec![]);
        }
        let old_chain = self.ancestors(p);
        let joining: Vec<usize> = new_chain
            .iter()
            .copied()
            .filter(|a| !old_chain.contains(a))
            .collect();
        let mut below = vec![];
        for r in &RESOURCES[..3] {
            let (in_use, reserved) = self.subtree(p, r);
            if in_use == 0 && reserved == 0 {
                continue;
            }
            let first_over = joining.iter().find_map(|a| {
                let limit = self.limit(*a, r);
                let (there_in_use, there_reserved) = self.subtree(*a, r);
                let after = (there_in_use + in_use, there_reserved + reserved);
                (limit >= 0 && after.0 + after.1 > limit).then_some((limit, after.0, after.1))
            });
            if let Some(numbers) = first_over {
                below.push((r.to_string(), Some(numbers)));
            }
        }
        if !below.is_empty() && !force {
            return TreeAnswer::Refused {
                code: "limit-below-usage",
                standing: below,
                overs: vec![],
                ancestor_overs: BTreeMap::new(),
                max_count: None,
            };
        }
        self.nodes[p].parent = parent;
        TreeAnswer::Ancestors(new_chain)
    }

    pub(super) fn expire(&mut self, p: usize) -> TreeAnswer {
        let now = self.now_ms;
        let mut count = 0;
        for hold in self.nodes[p].reservations.values_mut() {
            if hold.status == Status::Held && now >= hold.expires_ms {
                hold.status = Status::Released("expired");
                count += 1;
            }
        }
        TreeAnswer::Expired(count)
    }

    pub(super) fn correct(&mut self, p: usize, in_use: &BTreeMap<String, i64>) -> TreeAnswer {
        let unknown = self.unknown(in_use.keys());
        if !unknown.is_empty() {
            return tree_refused("unknown-resource", unknown);
        }
        let mut corrections = vec![];
        for (r, after) in in_use {
            let before = get(&self.nodes[p].in_use, r);
            if before != *after {
                corrections.push((r.clone(), before, *after));
                self.nodes[p].in_use.insert(r.clone(), *after);
            }
        }
        TreeAnswer::Corrected(corrections)
    }
}
