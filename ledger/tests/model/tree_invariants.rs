//! Properties of a tree held after every step, whatever the answers: each project's record of
//! its subtree (the `Descendant*` events in its own stream) agrees with its descendants' own
//! streams; the tree has no cycle and at most 4 levels; and no subtree's live usage goes above
//! its project's cap, except where an operator put it there (a forced limit or parent, a reset,
//! a correction), and then it does not grow while over.
//!
//! The same step check is held against the model (with its own numbers) and against the
//! implementations (with theirs), so the reference itself is shown never to oversubscribe.

use std::collections::BTreeMap;

use domain::{Defaults, Limit, ProjectState, Timestamp};
use proptest::prelude::*;

use super::commands::RESOURCES;
use super::mapping::res;
use super::tree_commands::{TreeCmd, PROJECTS};
use super::tree_mapping::Names;
use super::tree_reference::TreeModel;

/// One project's subtree for one resource: the project's cap, and the subtree's in_use and
/// live usage (in_use + reserved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Level {
    cap: Option<i64>,
    in_use: i64,
    used: i64,
}

impl Level {
    fn over(&self) -> bool {
        self.cap.is_some_and(|cap| self.used > cap)
    }
}

#[derive(Clone, Debug)]
pub struct TreeLevels(BTreeMap<(usize, &'static str), Level>);

pub fn model_levels(model: &TreeModel) -> TreeLevels {
    let mut all = BTreeMap::new();
    for p in 0..PROJECTS {
        for r in &RESOURCES[..3] {
            let limit = model.limit(p, r);
            let (in_use, reserved) = model.subtree(p, r);
            let level = Level {
                cap: (limit >= 0).then_some(limit),
                in_use,
                used: in_use + reserved,
            };
            all.insert((p, *r), level);
        }
    }
    TreeLevels(all)
}

/// The implementation's ancestors of `p` by the parent each project's own state records.
fn linked_ancestors(
    states: &[ProjectState],
    p: usize,
    names: &Names,
) -> Result<Vec<usize>, TestCaseError> {
    let mut chain = vec![];
    let mut at = p;
    while let Some(parent) = &states[at].parent {
        at = names.index(parent);
        chain.push(at);
        prop_assert!(
            chain.len() <= 3,
            "p{} has more than 3 ancestors: {:?}",
            p,
            chain
        );
    }
    Ok(chain)
}

/// Checks that each project's subtree, as its own state records it, is what its descendants'
/// own states say (members, their parents, in_use and holds); then gives every subtree's level.
pub fn implementation_levels(
    states: &[ProjectState],
    defaults: &Defaults,
    now: Timestamp,
    names: &Names,
) -> Result<TreeLevels, TestCaseError> {
    let mut chains = vec![];
    for p in 0..PROJECTS {
        chains.push(linked_ancestors(states, p, names)?);
    }
    let mut all = BTreeMap::new();
    for p in 0..PROJECTS {
        let below: Vec<usize> = (0..PROJECTS).filter(|q| chains[*q].contains(&p)).collect();
        let recorded: Vec<usize> = states[p]
            .subtree()
            .members()
            .map(|(q, _)| names.index(q))
            .collect();
        prop_assert_eq!(&recorded, &below, "the descendants p{} records", p);
        for (q, member) in states[p].subtree().members() {
            let q = names.index(q);
            prop_assert_eq!(
                Some(names.index(&member.parent)),
                chains[q].first().copied(),
                "p{} records p{} under another parent",
                p,
                q
            );
            for r in &RESOURCES[..3] {
                let recorded = member.in_use.get(&res(r)).copied().unwrap_or(0);
                prop_assert_eq!(recorded, states[q].in_use(&res(r)), "p{}'s p{} {}", p, q, r);
            }
            let mut holds: Vec<_> = member.holds.keys().copied().collect();
            let mut own: Vec<_> = states[q].held().map(|h| h.id).collect();
            holds.sort();
            own.sort();
            prop_assert_eq!(holds, own, "the holds of p{} that p{} records", q, p);
        }
        for r in &RESOURCES[..3] {
            let resource = res(r);
            let recorded = states[p].subtree_usage(&resource, now);
            let (mut in_use, mut reserved) = (0, 0);
            for q in below.iter().chain([&p]) {
                let own = states[*q].usage(&resource, now);
                prop_assert!(own.in_use >= 0, "p{} in_use of {} below zero", q, r);
                in_use += own.in_use;
                reserved += own.reserved;
            }
            prop_assert_eq!(
                (recorded.in_use, recorded.reserved),
                (in_use, reserved),
                "p{}'s subtree usage of {} against its descendants' own",
                p,
                r
            );
            let cap = states[p].limit(defaults, &resource).and_then(Limit::cap);
            let level = Level {
                cap,
                in_use,
                used: in_use + reserved,
            };
            all.insert((p, *r), level);
        }
    }
    Ok(TreeLevels(all))
}

/// A subtree above its cap after a step that cannot exceed caps was above it before and did
/// not grow (so no positive reserve under it was granted).
pub fn check_tree_step(
    before: &TreeLevels,
    after: &TreeLevels,
    command: &TreeCmd,
    who: &str,
) -> Result<(), TestCaseError> {
    for (key, now) in &after.0 {
        prop_assert!(now.in_use >= 0, "{}: {:?} in_use below zero", who, key);
        if now.over() && !command.may_exceed_caps() {
            let was = before.0[key];
            prop_assert!(
                was.over() && now.used <= was.used,
                "{}: the subtree of p{} went over its cap for {} or grew over it: {:?} -> {:?} \
                 by {:?}",
                who,
                key.0,
                key.1,
                was,
                now,
                command
            );
        }
    }
    Ok(())
}
