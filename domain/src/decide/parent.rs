//! Setting or removing a project's parent (SPEC rule 11): no cycles, at most `MAX_ANCESTORS`
//! ancestors for any project of the moved subtree, and rule 6 for every new ancestor (joining
//! must not take its subtree over a limit unless forced).
//!
//! The project records `ParentSet`; each old ancestor records that the project and its
//! descendants left its subtree, each new one that they joined it with their usage and holds.

use std::collections::BTreeMap;

use super::{Refusal, ResourceStanding};
use crate::limits::{MAX_ANCESTORS, MAX_DESCENDANTS};
use crate::{Defaults, Event, ProjectId, ProjectState, ResourceName, Timestamp};

/// Why a parent cannot be set: a 400.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TreeRefusal {
    #[error("{parent} is {project} or one of its descendants: the tree would have a cycle")]
    Cycle {
        project: ProjectId,
        parent: ProjectId,
    },
    #[error("the tree would be {levels} levels deep; at most {} (3 ancestors)", MAX_ANCESTORS + 1)]
    TooDeep { levels: usize },
    #[error("{ancestor} would have {count} descendants; at most {MAX_DESCENDANTS}")]
    TooManyDescendants { ancestor: ProjectId, count: usize },
}

/// The events of a parent change: the project's own, and each ancestor's (old ones first, then
/// new ones; an ancestor that is both appears once, with both its events).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParentDecision {
    pub own: Vec<Event>,
    pub ancestors: Vec<(ProjectId, Vec<Event>)>,
}

/// Decide moving `state`'s project from under `old_chain` (its ancestors, nearest first) to
/// under `new_chain` (the new parent and its ancestors, nearest first; empty to remove it).
pub fn decide_parent(
    state: &ProjectState,
    old_chain: &[&ProjectState],
    new_chain: &[&ProjectState],
    force: bool,
    defaults: &Defaults,
    now: Timestamp,
) -> Result<ParentDecision, Refusal> {
    let project = &state.project;
    let parent = new_chain.first().map(|p| &p.project);
    if state.parent.as_ref() == parent {
        return Ok(ParentDecision::default());
    }
    if let Some(parent) = parent {
        if parent == project || state.subtree().contains(parent) {
            return Err(TreeRefusal::Cycle {
                project: project.clone(),
                parent: parent.clone(),
            }
            .into());
        }
    }
    let levels = 1 + new_chain.len() + state.subtree().height(project);
    if levels > MAX_ANCESTORS + 1 {
        return Err(TreeRefusal::TooDeep { levels }.into());
    }
    let is_old = |p: &ProjectId| old_chain.iter().any(|a| &a.project == p);
    let new_ancestors: Vec<&ProjectState> = new_chain
        .iter()
        .copied()
        .filter(|a| !is_old(&a.project))
        .collect();
    let moving = 1 + state.subtree().len();
    for ancestor in &new_ancestors {
        let count = ancestor.subtree().len() + moving;
        if count > MAX_DESCENDANTS {
            let ancestor = ancestor.project.clone();
            return Err(TreeRefusal::TooManyDescendants { ancestor, count }.into());
        }
    }
    let below = over_limits(state, &new_ancestors, defaults, now);
    if !below.is_empty() && !force {
        return Err(Refusal::LimitBelowUsage(below));
    }

    let leaving: Vec<ProjectId> = std::iter::once(project.clone())
        .chain(state.subtree().members().map(|(id, _)| id.clone()))
        .collect();
    let mut ancestors: Vec<(ProjectId, Vec<Event>)> = old_chain
        .iter()
        .map(|a| {
            let left = Event::DescendantsLeft {
                projects: leaving.clone(),
            };
            (a.project.clone(), vec![left])
        })
        .collect();
    if let Some(parent) = parent {
        let members = state.as_members(parent);
        for ancestor in new_chain {
            let joined = Event::DescendantsJoined {
                members: members.clone(),
            };
            match ancestors.iter_mut().find(|(p, _)| *p == ancestor.project) {
                Some((_, events)) => events.push(joined),
                None => ancestors.push((ancestor.project.clone(), vec![joined])),
            }
        }
    }
    let own = vec![Event::ParentSet {
        parent: parent.cloned(),
        forced: !below.is_empty(),
    }];
    Ok(ParentDecision { own, ancestors })
}

/// The resources the moving subtree would take over a new ancestor's limit (rule 6), with that
/// ancestor's limit and the usage its subtree would have. The first ancestor over names each.
fn over_limits(
    state: &ProjectState,
    new_ancestors: &[&ProjectState],
    defaults: &Defaults,
    now: Timestamp,
) -> BTreeMap<ResourceName, ResourceStanding> {
    let resources = state.subtree_resources(state.usage_all(defaults, now).into_keys());
    let mut below = BTreeMap::new();
    for resource in resources {
        let moving = state.subtree_usage(&resource, now);
        if moving.in_use == 0 && moving.reserved == 0 {
            continue;
        }
        for ancestor in new_ancestors {
            let Some(limit) = ancestor.limit(defaults, &resource) else {
                continue;
            };
            let Some(cap) = limit.cap() else { continue };
            let there = ancestor.subtree_usage(&resource, now);
            let after = crate::Usage {
                in_use: there.in_use.saturating_add(moving.in_use),
                reserved: there.reserved.saturating_add(moving.reserved),
                releasing: 0,
            };
            if after.in_use.saturating_add(after.reserved) > cap {
                below
                    .entry(resource.clone())
                    .or_insert(ResourceStanding::of(limit, &after));
            }
        }
    }
    below
}
