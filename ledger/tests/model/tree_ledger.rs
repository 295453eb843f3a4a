//! The tree cases (see `tree_run`) run against the real `Ledger` on SQLite and PostgreSQL:
//! every answer compared with `TreeModel`, every project's durable state held to the
//! invariants of `tree_invariants` after every step, and at the end each project's state and
//! `subtree` view compared with the model, once more through a fresh `Ledger` on the store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use chrono::TimeDelta;
use domain::{ProjectState, ReservationId};
use ledger::{
    testing, Clock, EventStore, Ledger, LedgerError, ManualClock, Metadata, ReserveRequest,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use uuid::Uuid;

use super::commands::RESOURCES;
use super::mapping::{count_of, deltas_of, in_use_of, limits_of, reason, res};
use super::tree_answers::TreeAnswer;
use super::tree_commands::{tree_commands, TreeCmd, PROJECTS};
use super::tree_invariants::{check_tree_step, implementation_levels};
use super::tree_mapping::{
    ids_of, node_snapshot, tree_ancestors, tree_corrected, tree_limits_view, tree_refusal,
    tree_view, Names,
};
use super::tree_reference::TreeModel;
use super::tree_run::{
    defaults, freeing_over_the_parent, note_granted, tree_pool, tree_target, Seen,
};
use super::{ledger_config, runtime, start_time};

fn tree_ledger_answer<T>(
    result: Result<T, LedgerError>,
    names: &Names,
    ok: impl FnOnce(T) -> TreeAnswer,
) -> TreeAnswer {
    match result {
        Ok(value) => ok(value),
        Err(LedgerError::Refused(refusal)) => tree_refusal(&refusal, names),
        Err(other) => panic!("the ledger failed: {other}"),
    }
}

async fn tree_ledger_run(
    ledger: &Ledger,
    names: &Names,
    command: &TreeCmd,
    target: (usize, Uuid),
    meta: &Metadata,
) -> TreeAnswer {
    let (p, id) = target;
    let view = |v: ledger::ReservationView| tree_view(&v);
    match command {
        TreeCmd::SetParent {
            project,
            parent,
            force,
        } => {
            let parent = parent.map(|q| names.id(q));
            let result = ledger
                .set_parent(&names.id(*project), parent, *force, meta)
                .await;
            tree_ledger_answer(result, names, |chain| tree_ancestors(&chain, names))
        }
        TreeCmd::Reserve {
            id: chosen,
            deltas,
            expires_in,
            count,
            ..
        } => {
            let request = ReserveRequest {
                reservation_id: chosen.map(|_| ReservationId(id)),
                deltas: deltas_of(deltas),
                count: count_of(*count),
                user: None,
                expires_in_s: *expires_in,
            };
            let result = ledger.reserve_with(&names.id(p), request, meta).await;
            tree_ledger_answer(result, names, view)
        }
        TreeCmd::Commit(_) => {
            let result = ledger.commit(&names.id(p), ReservationId(id), meta).await;
            tree_ledger_answer(result, names, view)
        }
        TreeCmd::Release(_) => {
            let result = ledger.release(&names.id(p), ReservationId(id), meta).await;
            tree_ledger_answer(result, names, view)
        }
        TreeCmd::SetLimits {
            project,
            limits,
            force,
        } => {
            let result = ledger
                .set_limits(&names.id(*project), limits_of(limits), *force, meta)
                .await;
            tree_ledger_answer(result, names, |v| tree_limits_view(&v))
        }
        TreeCmd::ResetLimits(project) => {
            let result = ledger.reset_limits(&names.id(*project), meta).await;
            tree_ledger_answer(result, names, |v| tree_limits_view(&v))
        }
        TreeCmd::Expire(project) => tree_ledger_answer(
            ledger.expire(&names.id(*project)).await,
            names,
            TreeAnswer::Expired,
        ),
        TreeCmd::Correct { project, in_use } => {
            let result = ledger
                .correct_usage(&names.id(*project), None, in_use_of(in_use), reason(), meta)
                .await;
            tree_ledger_answer(result, names, |(c, _)| tree_corrected(&c))
        }
        TreeCmd::Advance(_) => unreachable!("the clock is moved by the runner"),
    }
}

async fn ledger_states(ledger: &Ledger, names: &Names) -> Vec<ProjectState> {
    let mut states = vec![];
    for project in names.all() {
        states.push(ledger.project_state(&project).await.unwrap());
    }
    states
}

/// The ledger's `subtree` view of each project against the model.
async fn compare_subtree_views(
    ledger: &Ledger,
    names: &Names,
    model: &TreeModel,
) -> Result<(), TestCaseError> {
    let pair = |u: Option<&domain::Usage>| u.map_or((0, 0), |u| (u.in_use, u.reserved));
    for p in 0..PROJECTS {
        let view = ledger.subtree(&names.id(p)).await.unwrap();
        prop_assert_eq!(view.parent.map(|q| names.index(&q)), model.parent(p));
        let descendants: Vec<usize> = view.descendants.iter().map(|q| names.index(q)).collect();
        prop_assert_eq!(descendants, model.descendants(p));
        let children: Vec<usize> = view.children.keys().map(|q| names.index(q)).collect();
        let expected: Vec<usize> = (0..PROJECTS)
            .filter(|c| model.parent(*c) == Some(p))
            .collect();
        prop_assert_eq!(children, expected, "the children of p{}", p);
        for r in &RESOURCES[..3] {
            let usage = pair(view.subtree.get(&res(r)));
            prop_assert_eq!(usage, model.subtree(p, r), "p{}'s subtree of {}", p, r);
            for (child, usage) in &view.children {
                let c = names.index(child);
                let usage = pair(usage.get(&res(r)));
                prop_assert_eq!(usage, model.subtree(c, r), "p{}'s child p{} {}", p, c, r);
            }
        }
    }
    Ok(())
}

async fn check_tree_ledger(
    store: Arc<dyn EventStore>,
    names: Names,
    commands: &[TreeCmd],
    seen: &Seen,
) -> Result<(), TestCaseError> {
    let clock = Arc::new(ManualClock::new(start_time()));
    let ledger = Ledger::start(store.clone(), clock.clone(), ledger_config())
        .await
        .unwrap();
    let defaults = defaults();
    let meta = Metadata::default();
    let mut model = TreeModel::new(start_time().timestamp_millis());
    let mut known: Vec<(usize, Uuid)> = vec![];
    let states = ledger_states(&ledger, &names).await;
    let mut levels = implementation_levels(&states, &defaults, clock.now(), &names)?;
    for (step, command) in commands.iter().enumerate() {
        if let TreeCmd::Advance(s) = command {
            clock.advance(TimeDelta::seconds(i64::from(*s)));
            model.now_ms = clock.now().timestamp_millis();
            continue;
        }
        let target = tree_target(command, &known);
        let answer = tree_ledger_run(&ledger, &names, command, target, &meta).await;
        // A reserve without a client id: the model takes the id the ledger chose.
        let target = match (&answer, command) {
            (TreeAnswer::Reservation { id, .. }, TreeCmd::Reserve { id: None, .. }) => {
                (target.0, *id)
            }
            _ => target,
        };
        let expected = model.run(command, target);
        prop_assert_eq!(&answer, &expected, "step {}: {:?}", step, command);
        note_granted(&mut known, &answer, target.0);
        seen.note(command, &answer);
        // Every project's durable state, step by step (an `Advance` only lets holds lapse, so
        // it is checked with the command after it).
        let states = ledger_states(&ledger, &names).await;
        let after = implementation_levels(&states, &defaults, clock.now(), &names)?;
        check_tree_step(&levels, &after, command, "ledger")?;
        levels = after;
    }
    let now = clock.now();
    let live = ledger_states(&ledger, &names).await;
    compare_subtree_views(&ledger, &names, &model).await?;
    drop(ledger);
    // What a restart replays (through the snapshots too) is what was answered.
    let fresh = Ledger::start(store, clock.clone(), ledger_config())
        .await
        .unwrap();
    let replayed = ledger_states(&fresh, &names).await;
    for p in 0..PROJECTS {
        let ids = ids_of(p, &tree_pool(), &known);
        let expected = model.snapshot(p, &ids);
        prop_assert_eq!(node_snapshot(&live, p, now, &ids, &names), expected.clone());
        prop_assert_eq!(node_snapshot(&replayed, p, now, &ids, &names), expected);
    }
    Ok(())
}

fn run_tree_ledger_cases(
    runtime: &tokio::runtime::Runtime,
    store: Arc<dyn EventStore>,
    cases: u32,
    backend: &str,
) {
    runtime.block_on(async {
        let ledger = Ledger::start(
            store.clone(),
            Arc::new(ManualClock::new(start_time())),
            ledger_config(),
        )
        .await
        .unwrap();
        ledger
            .set_defaults(&defaults().limits, &Metadata::default())
            .await
            .unwrap();
    });
    // Each case (and each shrinking step) gets projects of its own on the one store.
    let next_case = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..Config::default()
    });
    let started = std::time::Instant::now();
    let seen = Seen::default();
    runner
        .run(&tree_commands(30), |commands| {
            let n = next_case.fetch_add(1, Ordering::Relaxed);
            let names = Names::new(&format!("tree{n}-"));
            runtime.block_on(check_tree_ledger(store.clone(), names, &commands, &seen))
        })
        .unwrap();
    seen.show(&format!("model tree {backend}"));
    eprintln!(
        "model tree {backend}: {cases} cases agree with the model in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn tree_sqlite_ledger_agrees_with_the_model() {
    let runtime = runtime();
    let (_dir, store) = runtime.block_on(testing::sqlite_store());
    run_tree_ledger_cases(&runtime, store, 500, "sqlite");
}

#[test]
fn tree_sqlite_ledger_freeing_over_the_parent() {
    let runtime = runtime();
    runtime.block_on(async {
        let (_dir, store) = testing::sqlite_store().await;
        let ledger = Ledger::start(
            store.clone(),
            Arc::new(ManualClock::new(start_time())),
            ledger_config(),
        )
        .await
        .unwrap();
        ledger
            .set_defaults(&defaults().limits, &Metadata::default())
            .await
            .unwrap();
        drop(ledger);
        let names = Names::new("freeing-");
        let commands = freeing_over_the_parent();
        check_tree_ledger(store, names, &commands, &Seen::default())
            .await
            .unwrap();
    });
}

#[test]
fn tree_postgres_ledger_agrees_with_the_model() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let runtime = runtime();
    let (_schema, store) = runtime.block_on(async {
        let schema = testing::postgres_schema(&url).await;
        let store = testing::postgres_store_in(&url, &schema).await;
        (schema, store)
    });
    run_tree_ledger_cases(&runtime, store, 150, "postgres");
}
