//! Tree cases (SPEC rule 11) run against the domain (`decide_in_tree`, `decide_parent`, each
//! project folded from its own events and each ancestor from the `Descendant*` events the
//! ledger appends to it; `tree_ledger` runs them against the real `Ledger`): every answer is
//! compared with `TreeModel`, the invariants of `tree_invariants` are held after every step (by
//! the model and by the implementation), and at the end every project's parent, limits, own
//! usage, subtree usage, descendants and reservations are compared. The parts both runners
//! share live here too.

use std::collections::BTreeMap;

use chrono::TimeDelta;
use domain::{
    decide_in_tree, decide_parent, Defaults, Event, Limit, Outcome, ProjectState, Timestamp,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use uuid::Uuid;

use super::commands::DEFAULTS;
use super::mapping::res;
use super::start_time;
use super::tree_answers::TreeAnswer;
use super::tree_commands::{tree_commands, TreeCmd, PROJECTS, TREE_POOL};
use super::tree_invariants::{check_tree_step, implementation_levels, model_levels};
use super::tree_mapping::{
    ids_of, node_snapshot, tree_corrected, tree_domain_command, tree_limits, tree_refusal,
    tree_reservation, Names,
};
use super::tree_reference::TreeModel;

pub(super) fn tree_pool() -> Vec<Uuid> {
    (1..=TREE_POOL).map(Uuid::from_u128).collect()
}

/// The (project, id) a reserve, commit or release is about; (0, nil) for the other commands.
pub(super) fn tree_target(command: &TreeCmd, known: &[(usize, Uuid)]) -> (usize, Uuid) {
    match command {
        TreeCmd::Reserve {
            project,
            id: Some(i),
            ..
        } => (*project, tree_pool()[*i]),
        TreeCmd::Reserve { project, .. } => (*project, Uuid::new_v4()),
        TreeCmd::Commit(i) | TreeCmd::Release(i) if !known.is_empty() => known[*i % known.len()],
        _ => (0, Uuid::nil()),
    }
}

/// Remembers a granted reservation so that later commits and releases can name it.
pub(super) fn note_granted(known: &mut Vec<(usize, Uuid)>, answer: &TreeAnswer, project: usize) {
    if let TreeAnswer::Reservation { id, .. } = answer {
        if !known.contains(&(project, *id)) {
            known.push((project, *id));
        }
    }
}

/// How often each kind of answer came up (over every case of a test), to show what the cases
/// reach: e.g. "reserve over-quota (ancestor)", "set-parent cycle".
#[derive(Default)]
pub(super) struct Seen(std::sync::Mutex<BTreeMap<String, u64>>);

impl Seen {
    pub(super) fn note(&self, command: &TreeCmd, answer: &TreeAnswer) {
        let verb = match command {
            TreeCmd::SetParent { .. } => "set-parent",
            TreeCmd::Reserve { count: Some(_), .. } => "counted reserve",
            TreeCmd::Reserve { .. } => "reserve",
            TreeCmd::Commit(_) => "commit",
            TreeCmd::Release(_) => "release",
            TreeCmd::SetLimits { .. } => "set-limits",
            TreeCmd::ResetLimits(_) => "reset-limits",
            TreeCmd::Expire(_) => "expire",
            TreeCmd::Correct { .. } => "correct",
            TreeCmd::Advance(_) => "advance",
        };
        let how = match answer {
            TreeAnswer::Refused {
                code,
                ancestor_overs,
                ..
            } if !ancestor_overs.is_empty() => format!("{code} (ancestor)"),
            TreeAnswer::Refused { code, .. } => code.to_string(),
            TreeAnswer::Ancestors(chain) if chain.is_empty() => "root".into(),
            TreeAnswer::Ancestors(chain) => format!("{} ancestors", chain.len()),
            _ => "ok".into(),
        };
        *self
            .0
            .lock()
            .unwrap()
            .entry(format!("{verb}: {how}"))
            .or_default() += 1;
    }

    pub(super) fn show(&self, test: &str) {
        let seen = self.0.lock().unwrap();
        let all: Vec<String> = seen.iter().map(|(k, n)| format!("{k} {n}")).collect();
        eprintln!("{test}: answers seen: {}", all.join("; "));
    }
}

pub(super) fn defaults() -> Defaults {
    let mut defaults = Defaults::default();
    defaults.apply(&Event::DefaultLimitsSet {
        limits: DEFAULTS
            .iter()
            .map(|(r, l)| (res(r), Limit::new(*l).unwrap()))
            .collect(),
    });
    defaults
}

// ---- (a) the domain ----

/// Each project's state, folded from the events its own stream would hold.
struct DomainTree {
    names: Names,
    defaults: Defaults,
    states: Vec<ProjectState>,
    now: Timestamp,
}

impl DomainTree {
    fn ancestors(&self, p: usize) -> Vec<usize> {
        let mut chain = vec![];
        let mut at = p;
        while let Some(parent) = &self.states[at].parent {
            at = self.names.index(parent);
            chain.push(at);
            assert!(chain.len() < PROJECTS, "a cycle of parents");
        }
        chain
    }

    fn set_parent(&mut self, p: usize, parent: Option<usize>, force: bool) -> TreeAnswer {
        let old: Vec<usize> = self.ancestors(p);
        let new: Vec<usize> = parent
            .map(|q| std::iter::once(q).chain(self.ancestors(q)).collect())
            .unwrap_or_default();
        let decision = {
            let old: Vec<&ProjectState> = old.iter().map(|a| &self.states[*a]).collect();
            let new: Vec<&ProjectState> = new.iter().map(|a| &self.states[*a]).collect();
            decide_parent(&self.states[p], &old, &new, force, &self.defaults, self.now)
        };
        match decision {
            Err(refusal) => tree_refusal(&refusal, &self.names),
            Ok(decision) => {
                for event in &decision.own {
                    self.states[p].apply(event, self.now);
                }
                for (ancestor, events) in &decision.ancestors {
                    let a = self.names.index(ancestor);
                    for event in events {
                        self.states[a].apply(event, self.now);
                    }
                }
                TreeAnswer::Ancestors(new)
            }
        }
    }

    fn run(&mut self, command: &TreeCmd, target: (usize, Uuid)) -> TreeAnswer {
        let p = match command {
            TreeCmd::SetParent {
                project,
                parent,
                force,
            } => return self.set_parent(*project, *parent, *force),
            TreeCmd::SetLimits { project, .. }
            | TreeCmd::ResetLimits(project)
            | TreeCmd::Expire(project)
            | TreeCmd::Correct { project, .. } => *project,
            _ => target.0,
        };
        let chain = self.ancestors(p);
        let decision = {
            let ancestors: Vec<&ProjectState> = chain.iter().map(|a| &self.states[*a]).collect();
            let command = tree_domain_command(command, target.1);
            decide_in_tree(
                &command,
                &self.states[p],
                &ancestors,
                &self.defaults,
                self.now,
            )
        };
        for event in &decision.events {
            let mirrored = self.states[p].apply_for_ancestors(event, self.now);
            for a in &chain {
                if let Some(mirror) = &mirrored {
                    self.states[*a].apply(mirror, self.now);
                }
            }
        }
        let state = &self.states[p];
        match &decision.answer {
            Err(refusal) => tree_refusal(refusal, &self.names),
            Ok(Outcome::Reservation(id)) => tree_reservation(state.reservation(id).unwrap()),
            Ok(Outcome::Limits) => tree_limits(state, &self.defaults),
            Ok(Outcome::Expired(n)) => TreeAnswer::Expired(*n),
            Ok(Outcome::UsageCorrected(corrections)) => tree_corrected(corrections),
            Ok(other) => panic!("unexpected outcome {other:?}"),
        }
    }
}

fn check_tree_domain(commands: &[TreeCmd], seen: &Seen) -> Result<(), TestCaseError> {
    let names = Names::new("");
    let mut tree = DomainTree {
        states: names.all().into_iter().map(ProjectState::new).collect(),
        names,
        defaults: defaults(),
        now: start_time(),
    };
    let mut model = TreeModel::new(start_time().timestamp_millis());
    let mut known: Vec<(usize, Uuid)> = vec![];
    let mut levels = implementation_levels(&tree.states, &tree.defaults, tree.now, &tree.names)?;
    let mut model_before = model_levels(&model);
    for (step, command) in commands.iter().enumerate() {
        if let TreeCmd::Advance(s) = command {
            tree.now += TimeDelta::seconds(i64::from(*s));
            model.now_ms = tree.now.timestamp_millis();
        } else {
            let target = tree_target(command, &known);
            let answer = tree.run(command, target);
            let expected = model.run(command, target);
            prop_assert_eq!(&answer, &expected, "step {}: {:?}", step, command);
            note_granted(&mut known, &answer, target.0);
            seen.note(command, &answer);
        }
        let after = implementation_levels(&tree.states, &tree.defaults, tree.now, &tree.names)?;
        check_tree_step(&levels, &after, command, "domain")?;
        levels = after;
        let model_after = model_levels(&model);
        check_tree_step(&model_before, &model_after, command, "model")?;
        model_before = model_after;
    }
    for p in 0..PROJECTS {
        let ids = ids_of(p, &tree_pool(), &known);
        prop_assert_eq!(
            node_snapshot(&tree.states, p, tree.now, &ids, &tree.names),
            model.snapshot(p, &ids),
            "p{} at the end",
            p
        );
    }
    Ok(())
}

#[test]
fn tree_domain_agrees_with_the_model() {
    let cases = 2000;
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let started = std::time::Instant::now();
    let seen = Seen::default();
    runner
        .run(&tree_commands(40), |commands| {
            check_tree_domain(&commands, &seen)
        })
        .unwrap();
    seen.show("model tree domain");
    eprintln!(
        "model tree domain: {cases} cases agree with the model in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// A case the random ones rarely reach: freeing a committed reduction in a child gives usage
/// back, which its parent's limit must still hold (the parent is named, as for a reserve).
pub(super) fn freeing_over_the_parent() -> Vec<TreeCmd> {
    let a = |n: i64| vec![(0usize, n)];
    let reserve = |project: usize, id: usize, n: i64| TreeCmd::Reserve {
        project,
        id: Some(id),
        deltas: a(n),
        expires_in: 600,
        count: None,
    };
    vec![
        TreeCmd::SetParent {
            project: 1,
            parent: Some(0),
            force: false,
        },
        TreeCmd::Correct {
            project: 1,
            in_use: a(3),
        },
        reserve(1, 0, -2),
        TreeCmd::Commit(0),
        reserve(0, 1, 3),
        TreeCmd::Release(0),
    ]
}

#[test]
fn tree_domain_freeing_over_the_parent() {
    check_tree_domain(&freeing_over_the_parent(), &Seen::default()).unwrap();
}
