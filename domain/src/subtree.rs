//! A project's place in the tree (SPEC rule 11): its parent, and what its descendants use.
//!
//! Each project's stream records its own events and, for each of its descendants, the events
//! that move the descendant's usage (`Descendant*`), appended in the same atomic group as the
//! descendant's own. So an ancestor's state alone answers what its whole subtree uses, and a
//! decision in a child reads (and appends to) only the streams of its chain to the root.

use std::collections::{BTreeMap, BTreeSet};

use crate::state::taken_out;
use crate::{
    DescendantHold, Event, ProjectId, ProjectState, ReservationId, ResourceName, SubtreeMember,
    Timestamp, Usage,
};

/// One descendant, as an ancestor keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descendant {
    pub parent: ProjectId,
    pub in_use: BTreeMap<ResourceName, i64>,
    pub holds: BTreeMap<ReservationId, DescendantHold>,
}

impl Descendant {
    fn reserved(&self, resource: &ResourceName, now: Timestamp) -> i64 {
        self.holds
            .values()
            .filter(|hold| now < hold.expires_at)
            .map(|hold| hold.deltas.get(resource))
            .filter(|delta| *delta > 0)
            .fold(0i64, i64::saturating_add)
    }
}

/// A project's descendants: each one's parent, in_use and holds, and their in_use together.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subtree {
    pub(crate) members: BTreeMap<ProjectId, Descendant>,
    pub(crate) in_use: BTreeMap<ResourceName, i64>,
}

impl Subtree {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn contains(&self, project: &ProjectId) -> bool {
        self.members.contains_key(project)
    }

    pub fn members(&self) -> impl Iterator<Item = (&ProjectId, &Descendant)> {
        self.members.iter()
    }

    /// The descendants' usage of one resource at `now` (the project's own not included).
    pub fn usage(&self, resource: &ResourceName, now: Timestamp) -> Usage {
        let reserved = self
            .members
            .values()
            .map(|member| member.reserved(resource, now))
            .fold(0i64, i64::saturating_add);
        Usage {
            in_use: self.in_use.get(resource).copied().unwrap_or(0),
            reserved,
            releasing: 0,
        }
    }

    /// How many levels below `root` (the project this subtree is of) a member is: 1 for a child.
    pub fn depth(&self, root: &ProjectId, member: &ProjectId) -> usize {
        let mut depth = 1;
        let mut at = member;
        while let Some(parent) = self.members.get(at).map(|m| &m.parent) {
            if parent == root || depth > self.members.len() {
                break;
            }
            depth += 1;
            at = parent;
        }
        depth
    }

    /// Levels of descendants below `root`: 0 without any.
    pub fn height(&self, root: &ProjectId) -> usize {
        self.members
            .keys()
            .map(|member| self.depth(root, member))
            .max()
            .unwrap_or(0)
    }

    /// The children of `root`, in id order.
    pub fn children<'a>(&'a self, root: &'a ProjectId) -> impl Iterator<Item = &'a ProjectId> {
        self.members
            .iter()
            .filter(move |(_, m)| &m.parent == root)
            .map(|(id, _)| id)
    }

    /// `branch` and the members below it.
    pub fn branch(&self, root: &ProjectId, branch: &ProjectId) -> BTreeSet<&ProjectId> {
        self.members
            .keys()
            .filter(|member| self.is_under(root, branch, member))
            .collect()
    }

    fn is_under(&self, root: &ProjectId, branch: &ProjectId, member: &ProjectId) -> bool {
        let mut at = member;
        for _ in 0..=self.members.len() {
            if at == branch {
                return true;
            }
            match self.members.get(at) {
                Some(m) if &m.parent != root => at = &m.parent,
                _ => return false,
            }
        }
        false
    }

    /// The usage of `branch` and the members below it, for one resource at `now`.
    pub fn branch_usage(
        &self,
        root: &ProjectId,
        branch: &ProjectId,
        resource: &ResourceName,
        now: Timestamp,
    ) -> Usage {
        let mut usage = Usage::default();
        for member in self.branch(root, branch) {
            let m = &self.members[member];
            usage.in_use = usage
                .in_use
                .saturating_add(m.in_use.get(resource).copied().unwrap_or(0));
            usage.reserved = usage.reserved.saturating_add(m.reserved(resource, now));
        }
        usage
    }

    /// The resources any descendant uses or holds.
    pub fn resources(&self) -> BTreeSet<&ResourceName> {
        let mut names: BTreeSet<&ResourceName> = self.in_use.keys().collect();
        for member in self.members.values() {
            for hold in member.holds.values() {
                names.extend(hold.deltas.resources());
            }
        }
        names
    }

    /// Folds one `Descendant*` event; other events change nothing here.
    pub(crate) fn apply(&mut self, event: &Event) {
        match event {
            Event::DescendantReserved { descendant, hold } => {
                if let Some(member) = self.members.get_mut(descendant) {
                    member.holds.insert(hold.reservation_id, hold.clone());
                }
            }
            Event::DescendantUsageChanged {
                descendant,
                reservation_id,
                in_use,
            } => {
                let Some(member) = self.members.get_mut(descendant) else {
                    return;
                };
                if let Some(id) = reservation_id {
                    member.holds.remove(id);
                }
                for (resource, change) in in_use {
                    let own = member.in_use.entry(resource.clone()).or_default();
                    *own = own.saturating_add(*change).max(0);
                    let all = self.in_use.entry(resource.clone()).or_default();
                    *all = all.saturating_add(*change).max(0);
                }
            }
            Event::DescendantsJoined { members } => {
                for joining in members {
                    self.remove(&joining.project);
                    for (resource, n) in &joining.in_use {
                        let all = self.in_use.entry(resource.clone()).or_default();
                        *all = all.saturating_add(*n);
                    }
                    let holds = joining
                        .holds
                        .iter()
                        .map(|h| (h.reservation_id, h.clone()))
                        .collect();
                    let member = Descendant {
                        parent: joining.parent.clone(),
                        in_use: joining.in_use.clone(),
                        holds,
                    };
                    self.members.insert(joining.project.clone(), member);
                }
            }
            Event::DescendantsLeft { projects } => {
                for project in projects {
                    self.remove(project);
                }
            }
            _ => {}
        }
    }

    fn remove(&mut self, project: &ProjectId) {
        if let Some(gone) = self.members.remove(project) {
            for (resource, n) in gone.in_use {
                let still_counted = self
                    .members
                    .values()
                    .any(|m| m.in_use.contains_key(&resource));
                if still_counted {
                    let all = self.in_use.entry(resource).or_default();
                    *all = taken_out(*all, n);
                } else {
                    // No member counts it any more: drop it rather than keep a 0, as the sum a
                    // snapshot's members load back to has none (the fold and it must agree).
                    self.in_use.remove(&resource);
                }
            }
        }
    }
}

impl SubtreeMember {
    /// A descendant as a member joining a subtree (a snapshot's, or a new ancestor's).
    pub(crate) fn from_descendant(project: ProjectId, descendant: Descendant) -> Self {
        SubtreeMember {
            project,
            parent: descendant.parent,
            in_use: descendant.in_use,
            holds: descendant.holds.into_values().collect(),
        }
    }
}

/// A project's subtree usage (its own and all its descendants') and each child's subtree
/// usage, per resource.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubtreeUsage {
    pub subtree: BTreeMap<ResourceName, Usage>,
    pub children: BTreeMap<ProjectId, BTreeMap<ResourceName, Usage>>,
}

impl ProjectState {
    /// `shown` and every resource a descendant uses or holds.
    pub fn subtree_resources(
        &self,
        shown: impl IntoIterator<Item = ResourceName>,
    ) -> BTreeSet<ResourceName> {
        let mut resources: BTreeSet<ResourceName> = shown.into_iter().collect();
        resources.extend(self.subtree.resources().into_iter().cloned());
        resources
    }

    /// The subtree's usage and each child's at `at`, over [`ProjectState::subtree_resources`].
    pub fn subtree_report(
        &self,
        shown: impl IntoIterator<Item = ResourceName>,
        at: Timestamp,
    ) -> SubtreeUsage {
        let resources = self.subtree_resources(shown);
        let root = &self.project;
        let children = self
            .subtree
            .children(root)
            .map(|child| {
                let usage = resources
                    .iter()
                    .map(|r| (r.clone(), self.subtree.branch_usage(root, child, r, at)))
                    .collect();
                (child.clone(), usage)
            })
            .collect();
        let subtree = resources
            .iter()
            .map(|r| (r.clone(), self.subtree_usage(r, at)))
            .collect();
        SubtreeUsage { subtree, children }
    }

    /// The project's and its descendants' usage of one resource at `now`: what its limit caps
    /// (rule 11). `releasing` is the project's own (rule 3 is the project's alone).
    pub fn subtree_usage(&self, resource: &ResourceName, now: Timestamp) -> Usage {
        let own = self.usage(resource, now);
        let below = self.subtree.usage(resource, now);
        Usage {
            in_use: own.in_use.saturating_add(below.in_use),
            reserved: own.reserved.saturating_add(below.reserved),
            releasing: own.releasing,
        }
    }

    /// The project's descendants.
    pub fn subtree(&self) -> &Subtree {
        &self.subtree
    }

    /// The project as a member of an ancestor's subtree, under `parent`, followed by its
    /// descendants: what `DescendantsJoined` carries when it joins a new parent.
    pub fn as_members(&self, parent: &ProjectId) -> Vec<SubtreeMember> {
        let holds = self
            .held()
            .map(|r| DescendantHold {
                reservation_id: r.id,
                deltas: r.deltas.clone(),
                expires_at: r.expires_at,
            })
            .collect();
        let own_in_use = self.in_use.iter().filter(|(_, n)| **n != 0);
        let mut members = vec![SubtreeMember {
            project: self.project.clone(),
            parent: parent.clone(),
            in_use: own_in_use.map(|(r, n)| (r.clone(), *n)).collect(),
            holds,
        }];
        members.extend(self.subtree.members.iter().map(|(id, d)| SubtreeMember {
            project: id.clone(),
            parent: d.parent.clone(),
            in_use: d.in_use.clone(),
            holds: d.holds.values().cloned().collect(),
        }));
        members
    }

    /// Folds `event` as [`ProjectState::apply`] does and returns what the project's ancestors
    /// record of it, if anything: a hold begun, or a hold ended and in_use moved.
    pub fn apply_for_ancestors(&mut self, event: &Event, at: Timestamp) -> Option<Event> {
        let touched: Vec<ResourceName> = match event {
            Event::ReservationCommitted { reservation_id }
            | Event::ReservationReleased { reservation_id, .. } => self
                .reservation(reservation_id)
                .map(|r| r.deltas.resources().cloned().collect())
                .unwrap_or_default(),
            Event::UsageCorrected { resource, .. } => vec![resource.clone()],
            _ => vec![],
        };
        let before: Vec<i64> = touched.iter().map(|r| self.in_use(r)).collect();
        self.apply(event, at);
        let moved = || -> BTreeMap<ResourceName, i64> {
            touched
                .iter()
                .zip(&before)
                .map(|(r, was)| (r.clone(), self.in_use(r).saturating_sub(*was)))
                .filter(|(_, change)| *change != 0)
                .collect()
        };
        let descendant = self.project.clone();
        match event {
            Event::ReservationRequested {
                reservation_id,
                deltas,
                expires_at,
                ..
            } => Some(Event::DescendantReserved {
                descendant,
                hold: DescendantHold {
                    reservation_id: *reservation_id,
                    deltas: deltas.clone(),
                    expires_at: *expires_at,
                },
            }),
            Event::ReservationCommitted { reservation_id }
            | Event::ReservationReleased { reservation_id, .. } => {
                Some(Event::DescendantUsageChanged {
                    descendant,
                    reservation_id: Some(*reservation_id),
                    in_use: moved(),
                })
            }
            Event::UsageCorrected { .. } => {
                let in_use = moved();
                (!in_use.is_empty()).then_some(Event::DescendantUsageChanged {
                    descendant,
                    reservation_id: None,
                    in_use,
                })
            }
            _ => None,
        }
    }
}
