//! Rule 11 (hierarchy): given projects whose tree was built by deciding their parents, when a
//! command in one of them, then its events, what its ancestors record of them, or a refusal.
//!
//! Each project is folded from its own stream's events, as the ledger would: a decision in a
//! project reads the states of its chain to the root, and the mirror event that
//! [`ProjectState::apply_for_ancestors`] returns for each of its events is appended to every
//! ancestor.

use std::collections::BTreeMap;

use super::*;

mod parent;
mod reserve;
mod usage;

pub(crate) fn p(name: &str) -> ProjectId {
    ProjectId::parse(name).unwrap()
}

/// Several projects sharing the defaults, each with the state its own stream folds to.
pub(crate) struct Tree {
    defaults: Defaults,
    states: BTreeMap<ProjectId, ProjectState>,
    now: Timestamp,
    /// The mirror events the last command recorded in each ancestor, in order.
    mirrored: Vec<Event>,
}

impl Tree {
    pub(crate) fn new(default_limits: &[(&str, i64)], projects: &[&str]) -> Self {
        let given = Given::defaults(default_limits);
        let states = projects
            .iter()
            .map(|name| (p(name), ProjectState::new(p(name))))
            .collect();
        Tree {
            defaults: given.defaults,
            states,
            now: t0(),
            mirrored: vec![],
        }
    }

    pub(crate) fn state(&self, name: &str) -> &ProjectState {
        &self.states[&p(name)]
    }

    /// The project's ancestors, nearest first, found through their parents.
    pub(crate) fn chain(&self, name: &str) -> Vec<&ProjectState> {
        let mut chain = vec![];
        let mut at = self.state(name);
        while let Some(parent) = &at.parent {
            at = &self.states[parent];
            chain.push(at);
            assert!(chain.len() < 10, "the parents of {name} make a cycle");
        }
        chain
    }

    pub(crate) fn when(&self, name: &str, command: &Command) -> Decision {
        let chain = self.chain(name);
        decide_in_tree(command, self.state(name), &chain, &self.defaults, self.now)
    }

    /// Folds the project's events into its state, and the mirror of each into every ancestor.
    pub(crate) fn apply(&mut self, name: &str, events: &[Event]) {
        let ancestors: Vec<ProjectId> =
            self.chain(name).iter().map(|a| a.project.clone()).collect();
        self.mirrored.clear();
        for event in events {
            let state = self.states.get_mut(&p(name)).unwrap();
            let Some(mirror) = state.apply_for_ancestors(event, self.now) else {
                continue;
            };
            for ancestor in &ancestors {
                self.states
                    .get_mut(ancestor)
                    .unwrap()
                    .apply(&mirror, self.now);
            }
            self.mirrored.push(mirror);
        }
    }

    /// Decide and apply, whatever the answer.
    pub(crate) fn run(&mut self, name: &str, command: Command) -> Decision {
        let decision = self.when(name, &command);
        self.apply(name, &decision.events);
        decision
    }

    /// Decide and apply; panics unless granted.
    pub(crate) fn ok(&mut self, name: &str, command: Command) -> Vec<Event> {
        let decision = self.run(name, command.clone());
        assert!(
            decision.answer.is_ok(),
            "{command:?} in {name} refused: {:?}",
            decision.answer
        );
        decision.events
    }

    pub(crate) fn reserve(&mut self, name: &str, n: u128, pairs: &[(&str, i64)]) -> Decision {
        self.run(name, reserve_cmd(n, pairs))
    }

    pub(crate) fn set_limits(&mut self, name: &str, pairs: &[(&str, i64)]) {
        let limits = limits(pairs);
        self.ok(
            name,
            Command::SetLimits {
                limits,
                force: false,
            },
        );
    }

    pub(crate) fn correct(&mut self, name: &str, resource: &str, in_use: i64) -> Vec<Event> {
        self.ok(
            name,
            Command::CorrectUsage {
                in_use: [(r(resource), in_use)].into(),
                reason: Reason::parse("recount").unwrap(),
                user: None,
            },
        )
    }

    /// `decide_parent` for `child` under `parent` (or under none), with both chains' states.
    pub(crate) fn decide_parent(
        &self,
        child: &str,
        parent: Option<&str>,
        force: bool,
    ) -> Result<ParentDecision, Refusal> {
        let new_chain: Vec<&ProjectState> = match parent {
            Some(parent) => std::iter::once(self.state(parent))
                .chain(self.chain(parent))
                .collect(),
            None => vec![],
        };
        let old_chain = self.chain(child);
        let state = self.state(child);
        decide_parent(
            state,
            &old_chain,
            &new_chain,
            force,
            &self.defaults,
            self.now,
        )
    }

    /// Decide a parent and apply its events: the child's own, and each ancestor's.
    pub(crate) fn set_parent(
        &mut self,
        child: &str,
        parent: Option<&str>,
        force: bool,
    ) -> ParentDecision {
        let decision = self
            .decide_parent(child, parent, force)
            .unwrap_or_else(|refusal| panic!("{child} under {parent:?} refused: {refusal:?}"));
        for event in &decision.own {
            self.states
                .get_mut(&p(child))
                .unwrap()
                .apply(event, self.now);
        }
        for (ancestor, events) in &decision.ancestors {
            for event in events {
                self.states
                    .get_mut(ancestor)
                    .unwrap()
                    .apply(event, self.now);
            }
        }
        decision
    }

    /// The project's and its descendants' `(in_use, reserved)` of one resource, now.
    pub(crate) fn subtree(&self, name: &str, resource: &str) -> (i64, i64) {
        let usage = self.state(name).subtree_usage(&r(resource), self.now);
        (usage.in_use, usage.reserved)
    }

    /// The project's own `(in_use, reserved)` of one resource, now.
    pub(crate) fn own(&self, name: &str, resource: &str) -> (i64, i64) {
        let usage = self.state(name).usage(&r(resource), self.now);
        (usage.in_use, usage.reserved)
    }
}

pub(crate) fn ancestor_overs(pairs: &[(&str, &[&str])]) -> BTreeMap<ProjectId, Vec<ResourceName>> {
    pairs
        .iter()
        .map(|(project, resources)| (p(project), resources.iter().map(|s| r(s)).collect()))
        .collect()
}

mod model {
    //! Property: over any sequence of commands in any project of a small tree (and moves of
    //! one of its projects), every project's subtree usage is the sum of its own and its
    //! descendants' own usage, no limit is ever exceeded, and every state round-trips through a
    //! snapshot.

    use super::*;
    use proptest::prelude::*;

    const PROJECTS: [&str; 4] = ["g", "a", "b", "c"];

    fn tree() -> Tree {
        let mut t = Tree::new(&[("cores", 100)], &PROJECTS);
        t.set_parent("a", Some("g"), false);
        t.set_parent("b", Some("g"), false);
        t.set_parent("c", Some("a"), false);
        t.set_limits("g", &[("cores", 8)]);
        t.set_limits("a", &[("cores", 5)]);
        t
    }

    /// `name`'s own usage plus that of every project whose chain holds it.
    fn summed(t: &Tree, name: &str) -> (i64, i64) {
        PROJECTS
            .iter()
            .filter(|other| **other == name || t.chain(other).iter().any(|a| a.project == p(name)))
            .map(|other| t.own(other, "cores"))
            .fold((0, 0), |(i, r), (oi, or)| (i + oi, r + or))
    }

    fn step() -> impl Strategy<Value = (usize, u8, u128, i64, u32, i64)> {
        (0usize..4, 0u8..7, 0u128..5, -2i64..4, 1u32..60, 0i64..20)
    }

    proptest! {
        #[test]
        fn subtree_totals_are_the_sums_and_never_over_a_limit(
            steps in proptest::collection::vec(step(), 1..60)
        ) {
            let mut t = tree();
            let mut corrected = false;
            for (at, kind, n, amount, expires, advance_s) in steps {
                t.now += Duration::seconds(advance_s);
                let name = PROJECTS[at];
                let reservation_id = id(n + 10 * at as u128);
                let command = match kind {
                    0 | 1 => Command::Reserve {
                        user: None,
                        count: None,
                        reservation_id,
                        deltas: deltas(&[("cores", amount)]),
                        expires_in_s: expires,
                    },
                    2 => Command::Commit { reservation_id },
                    3 => Command::Release { reservation_id },
                    4 => Command::Expire,
                    5 => {
                        corrected = true;
                        Command::CorrectUsage {
                            in_use: [(r("cores"), amount.max(0))].into(),
                            reason: Reason::parse("recount").unwrap(),
                            user: None,
                        }
                    }
                    _ => {
                        // Move c (never forced): under a, under b, under g or to the root.
                        let parent = [Some("a"), Some("b"), Some("g"), None][n as usize % 4];
                        if t.decide_parent("c", parent, false).is_ok() {
                            t.set_parent("c", parent, false);
                        }
                        continue;
                    }
                };
                t.run(name, command);
                for name in PROJECTS {
                    let total = t.subtree(name, "cores");
                    prop_assert_eq!(total, summed(&t, name), "subtree of {}", name);
                    let cap = t.state(name).limit(&t.defaults, &r("cores")).unwrap().cap().unwrap();
                    prop_assert!(corrected || total.0 + total.1 <= cap, "{} over: {:?}", name, total);
                }
            }
            for name in PROJECTS {
                let state = t.state(name);
                let snapshot = state.to_snapshot().unwrap();
                let back = ProjectState::from_snapshot(p(name), &snapshot);
                prop_assert_eq!(back.as_ref(), Ok(state));
            }
        }
    }
}
