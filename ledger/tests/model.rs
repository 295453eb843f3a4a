//! Model-based tests: random command sequences (reserve with and without a client id, counted
//! or not, for the project alone or for one of its users; commit, release; set and reset the
//! project's limits and a user's, with and without force; expire; correct the project's or a
//! user's usage; and a driven clock) run against (a) the domain's `decide` and (b) the real
//! `Ledger` on SQLite and PostgreSQL. Every answer and the final state (the project's and each
//! user's usage and overrides) are compared with `Model`, a deliberately plain reference written
//! from SPEC.md that shares no code with `domain::decide`. After every step the
//! implementation's own state is also held to the invariants of `invariants`: in_use never
//! below zero, and no live usage of the project or of a user above a cap unless an operator put
//! it there (a forced limit, a reset, a correction).
//!
//! After each ledger case the project is also read back by a fresh `Ledger` on the same store,
//! so what was answered is what a restart replays (the ledgers snapshot often, so the read-back
//! goes through a snapshot as well as the events after it).
//!
//! The parts: `commands` (what a case is made of), `reference` (the model), `mapping` (the
//! implementations' types in the model's terms), `invariants` (the properties on the state).
//!
//! Trees (SPEC rule 11) have cases of their own, over five projects whose parents are set,
//! removed and moved at random: `tree_commands`, `tree_reference` (a plain model that sums
//! every subtree afresh from its projects' own numbers), `tree_answers`, `tree_mapping`,
//! `tree_invariants`, `tree_run` (the domain's runner) and `tree_ledger` (the ledger's).

#[path = "model/commands.rs"]
mod commands;
#[path = "model/invariants.rs"]
mod invariants;
#[path = "model/mapping.rs"]
mod mapping;
#[path = "model/reference.rs"]
mod reference;
#[path = "model/tree_answers.rs"]
mod tree_answers;
#[path = "model/tree_commands.rs"]
mod tree_commands;
#[path = "model/tree_invariants.rs"]
mod tree_invariants;
#[path = "model/tree_ledger.rs"]
mod tree_ledger;
#[path = "model/tree_mapping.rs"]
mod tree_mapping;
#[path = "model/tree_reference.rs"]
mod tree_reference;
#[path = "model/tree_run.rs"]
mod tree_run;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use chrono::{TimeDelta, TimeZone, Utc};
use domain::{
    decide, Defaults, Event, Limit, Outcome, ProjectId, ProjectState, ReservationId, Timestamp,
};
use ledger::{
    testing, Clock, EventStore, Ledger, LedgerConfig, LedgerError, ManualClock, Metadata,
    ReserveRequest,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use uuid::Uuid;

use commands::{commands, Cmd, DEFAULTS, POOL, USERS};
use mapping::{
    corrected_answer, count_of, deltas_of, in_use_of, limits_answer, limits_of, reason,
    refusal_answer, res, reservation_answer, state_limits, state_snapshot, user_id, view_answer,
};
use reference::{Answer, Model};

fn start_time() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
}

fn pool() -> Vec<Uuid> {
    (1..=POOL).map(Uuid::from_u128).collect()
}

/// The id a command is about: a pool id, a known id, or (reserve without id) a fresh one.
fn target_id(command: &Cmd, known: &[Uuid]) -> Uuid {
    match command {
        Cmd::Reserve { id: Some(i), .. } => known[*i],
        Cmd::Reserve { id: None, .. } => Uuid::new_v4(),
        Cmd::Commit(i) | Cmd::Release(i) => known[*i % known.len()],
        _ => Uuid::nil(),
    }
}

// ---- (a) the domain ----

fn check_domain(commands: &[Cmd]) -> Result<(), TestCaseError> {
    let mut model = Model::new(start_time().timestamp_millis());
    let mut now = start_time();
    let mut defaults = Defaults::default();
    defaults.apply(&Event::DefaultLimitsSet {
        limits: DEFAULTS
            .iter()
            .map(|(r, l)| (res(r), Limit::new(*l).unwrap()))
            .collect(),
    });
    let mut state = ProjectState::new(ProjectId::parse("model").unwrap());
    let mut known = pool();
    for (step, command) in commands.iter().enumerate() {
        let before = invariants::levels(&state, now);
        if let Cmd::Advance(s) = command {
            now += TimeDelta::seconds(i64::from(*s));
            model.now_ms = now.timestamp_millis();
            invariants::check(&before, &invariants::levels(&state, now), command)?;
            continue;
        }
        let id = target_id(command, &known);
        let decision = decide(
            &mapping::domain_command(command, id),
            &state,
            &defaults,
            now,
        );
        for event in &decision.events {
            state.apply(event, now);
        }
        let answer = match &decision.answer {
            Err(refusal) => refusal_answer(refusal),
            Ok(Outcome::Reservation(rid)) => reservation_answer(state.reservation(rid).unwrap()),
            Ok(Outcome::Limits) => state_limits(&state, &defaults, None),
            Ok(Outcome::UserLimits(user)) => state_limits(&state, &defaults, Some(user)),
            Ok(Outcome::Expired(n)) => Answer::Expired(*n),
            Ok(Outcome::UsageCorrected(corrections)) => corrected_answer(corrections),
        };
        let expected = model.run(command, id);
        prop_assert_eq!(&answer, &expected, "step {}: {:?}", step, command);
        invariants::check(&before, &invariants::levels(&state, now), command)?;
        if matches!(command, Cmd::Reserve { id: None, .. })
            && matches!(answer, Answer::Reservation { .. })
        {
            known.push(id);
        }
    }
    prop_assert_eq!(state_snapshot(&state, now, &known), model.snapshot(&known));
    Ok(())
}

#[test]
fn domain_agrees_with_the_model() {
    let mut runner = TestRunner::new(Config {
        cases: 3000,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&commands(40), |commands| check_domain(&commands))
        .unwrap();
    eprintln!("model domain: 3000 cases agree with the model");
}

// ---- (b) the ledger on each backend ----

fn ledger_answer<T>(result: Result<T, LedgerError>, ok: impl FnOnce(T) -> Answer) -> Answer {
    match result {
        Ok(value) => ok(value),
        Err(LedgerError::Refused(refusal)) => refusal_answer(&refusal),
        Err(other) => panic!("the ledger failed: {other}"),
    }
}

/// Snapshot often, so that a fresh ledger loads from a snapshot and the events after it.
fn ledger_config() -> LedgerConfig {
    LedgerConfig {
        snapshot_min_events: 8,
        ..LedgerConfig::default()
    }
}

/// One command through the ledger (not `Advance`), answered in the model's terms.
async fn ledger_run(
    ledger: &Ledger,
    project: &ProjectId,
    command: &Cmd,
    id: Uuid,
    meta: &Metadata,
) -> Answer {
    match command {
        Cmd::Reserve {
            id: chosen,
            deltas,
            expires_in,
            count,
            user,
        } => {
            let request = ReserveRequest {
                reservation_id: chosen.map(|_| ReservationId(id)),
                deltas: deltas_of(deltas),
                count: count_of(*count),
                user: user.map(user_id),
                expires_in_s: *expires_in,
            };
            ledger_answer(ledger.reserve_with(project, request, meta).await, |v| {
                view_answer(&v)
            })
        }
        Cmd::Commit(_) => {
            ledger_answer(ledger.commit(project, ReservationId(id), meta).await, |v| {
                view_answer(&v)
            })
        }
        Cmd::Release(_) => ledger_answer(
            ledger.release(project, ReservationId(id), meta).await,
            |v| view_answer(&v),
        ),
        Cmd::SetLimits { limits, force } => ledger_answer(
            ledger
                .set_limits(project, limits_of(limits), *force, meta)
                .await,
            |v| limits_answer(&v),
        ),
        Cmd::ResetLimits => ledger_answer(ledger.reset_limits(project, meta).await, |v| {
            limits_answer(&v)
        }),
        Cmd::SetUserLimits {
            user,
            limits,
            force,
        } => ledger_answer(
            ledger
                .set_user_limits(project, user_id(*user), limits_of(limits), *force, meta)
                .await,
            |v| limits_answer(&v),
        ),
        Cmd::ResetUserLimits(user) => ledger_answer(
            ledger
                .reset_user_limits(project, user_id(*user), meta)
                .await,
            |v| limits_answer(&v),
        ),
        Cmd::Expire => ledger_answer(ledger.expire(project).await, Answer::Expired),
        Cmd::Correct { user, in_use } => ledger_answer(
            ledger
                .correct_usage(
                    project,
                    user.map(user_id),
                    in_use_of(in_use),
                    reason(),
                    meta,
                )
                .await,
            |(corrections, _)| corrected_answer(&corrections),
        ),
        Cmd::Advance(_) => unreachable!("the clock is moved by the runner"),
    }
}

async fn check_ledger(
    store: Arc<dyn EventStore>,
    project: ProjectId,
    commands: &[Cmd],
) -> Result<(), TestCaseError> {
    let clock = Arc::new(ManualClock::new(start_time()));
    let ledger = Ledger::start(store.clone(), clock.clone(), ledger_config())
        .await
        .unwrap();
    let meta = Metadata::default();
    let mut model = Model::new(start_time().timestamp_millis());
    let mut known = pool();
    let mut levels = invariants::levels(&ProjectState::new(project.clone()), clock.now());
    for (step, command) in commands.iter().enumerate() {
        if let Cmd::Advance(s) = command {
            clock.advance(TimeDelta::seconds(i64::from(*s)));
            model.now_ms = clock.now().timestamp_millis();
            continue;
        }
        let id = target_id(command, &known);
        let answer = ledger_run(&ledger, &project, command, id, &meta).await;
        // A reserve without a client id: the model takes the id the ledger chose.
        let model_id = match (&answer, command) {
            (Answer::Reservation { id: chosen, .. }, Cmd::Reserve { id: None, .. }) => *chosen,
            _ => id,
        };
        let expected = model.run(command, model_id);
        prop_assert_eq!(&answer, &expected, "step {}: {:?}", step, command);
        if matches!(command, Cmd::Reserve { id: None, .. })
            && matches!(answer, Answer::Reservation { .. })
        {
            known.push(model_id);
        }
        // The invariants on the ledger's durable state, step by step (an `Advance` only lets
        // holds lapse, so it is checked with the command after it).
        let state = ledger.project_state(&project).await.unwrap();
        let after = invariants::levels(&state, clock.now());
        invariants::check(&levels, &after, command)?;
        levels = after;
    }
    let now = clock.now();
    let live = ledger.project_state(&project).await.unwrap();
    prop_assert_eq!(state_snapshot(&live, now, &known), model.snapshot(&known));
    // The users' limits and usage as the ledger answers them.
    for (u, name) in USERS.iter().enumerate() {
        let limits = ledger.user_limits(&project, &user_id(u)).await.unwrap();
        prop_assert_eq!(
            limits_answer(&limits),
            Answer::Limits(model.user_limits(name))
        );
        let usage = ledger.user_usage(&project, &user_id(u)).await.unwrap();
        let usage: std::collections::BTreeMap<String, (i64, i64, i64)> = usage
            .resources
            .iter()
            .map(|(r, (l, u))| (r.to_string(), (l.value(), u.in_use, u.reserved)))
            .collect();
        prop_assert_eq!(usage, model.user_usage(name), "the usage of {}", name);
    }
    drop(ledger);
    // What a restart replays is what was answered.
    let fresh = Ledger::start(store, clock.clone(), ledger_config())
        .await
        .unwrap();
    let replayed = fresh.project_state(&project).await.unwrap();
    prop_assert_eq!(
        state_snapshot(&replayed, now, &known),
        model.snapshot(&known)
    );
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn run_ledger_cases(
    runtime: &tokio::runtime::Runtime,
    store: Arc<dyn EventStore>,
    cases: u32,
    backend: &str,
) {
    runtime.block_on(async {
        let ledger = Ledger::start(
            store.clone(),
            Arc::new(ManualClock::new(start_time())),
            LedgerConfig::default(),
        )
        .await
        .unwrap();
        ledger
            .set_defaults(
                &DEFAULTS
                    .iter()
                    .map(|(r, l)| (res(r), Limit::new(*l).unwrap()))
                    .collect(),
                &Metadata::default(),
            )
            .await
            .unwrap();
    });
    // Each case (and each shrinking step) gets a project of its own on the one store.
    let next_project = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..Config::default()
    });
    let started = std::time::Instant::now();
    runner
        .run(&commands(30), |commands| {
            let n = next_project.fetch_add(1, Ordering::Relaxed);
            let project = ProjectId::parse(&format!("model-{n}")).unwrap();
            runtime.block_on(check_ledger(store.clone(), project, &commands))
        })
        .unwrap();
    eprintln!(
        "model {backend}: {cases} cases agree with the model in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn sqlite_ledger_agrees_with_the_model() {
    let runtime = runtime();
    let (_dir, store) = runtime.block_on(testing::sqlite_store());
    run_ledger_cases(&runtime, store, 400, "sqlite");
}

#[test]
fn postgres_ledger_agrees_with_the_model() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let runtime = runtime();
    let (_schema, store) = runtime.block_on(async {
        let schema = testing::postgres_schema(&url).await;
        let store = testing::postgres_store_in(&url, &schema).await;
        (schema, store)
    });
    run_ledger_cases(&runtime, store, 200, "postgres");
}
