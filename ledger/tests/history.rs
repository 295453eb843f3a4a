//! History check: concurrent clients reserve, commit and release against the real `Ledger`
//! while every call is recorded with its real-time bounds (invoke and complete instants). Each
//! project's history is then checked for linearizability against a sequential model of the
//! reservation rules, with a small Wing & Gong search (memoised on the set of linearised calls and
//! the model state, as in Lowe's WGL).
//!
//! Histories are kept small (at most `MAX_CALLS_PER_PROJECT` calls from a few clients per
//! project), so the search finishes in milliseconds; many projects give many histories.
//!
//! `tree` does the same for trees (SPEC rule 11): clients reserve, commit and release in the
//! projects of a small tree at once, and each tree's history is checked against a sequential
//! model of the whole tree; then the log itself is replayed in global order to show that no
//! project's subtree was ever over its limit, that every grant fit its whole chain and every
//! denial was due at its position, and that every ancestor recorded each change of its
//! descendants' usage, in the same atomic append.

#[path = "history/tree.rs"]
mod tree;

use std::collections::{BTreeMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use domain::{Deltas, Limit, ProjectId, Refusal, ReservationId, ReservationStatus, ResourceName};
use ledger::{testing, EventStore, Ledger, LedgerConfig, LedgerError, Metadata, SystemClock};
use rand::{rngs::StdRng, Rng, SeedableRng};
use uuid::Uuid;

const PROJECTS: usize = 100;
const CLIENTS_PER_PROJECT: usize = 4;
const CALLS_PER_CLIENT: usize = 8;
const MAX_CALLS_PER_PROJECT: usize = CLIENTS_PER_PROJECT * CALLS_PER_CLIENT;
/// Reservation ids per project; clients commit and release each other's, so order matters.
const IDS_PER_PROJECT: usize = 10;
const LIMIT: i64 = 3;

// ---- the sequential model ----

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Call {
    Reserve { id: u8, amount: i64 },
    Commit { id: u8 },
    Release { id: u8 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Ret {
    Held,
    Committed,
    Released,
    OverQuota,
    NotFound,
    AlreadyReleased,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum St {
    Held,
    Committed,
    Released,
}

/// One project: the reservations by id index, each (amount, status). Holds do not expire
/// within a run (they are taken for ten minutes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Seq(BTreeMap<u8, (i64, St)>);

impl Seq {
    fn used(&self) -> i64 {
        self.0
            .values()
            .filter(|(_, s)| matches!(s, St::Held | St::Committed))
            .map(|(a, _)| a)
            .sum()
    }

    fn step(&self, call: Call) -> (Ret, Seq) {
        let mut next = self.clone();
        let ret = match call {
            Call::Reserve { id, amount } => match self.0.get(&id) {
                // Every reserve in the run uses a fresh id, so a repeat never happens; a second
                // reserve of an id would answer the original.
                Some(_) => unreachable!("ids are reserved once"),
                None if self.used() + amount > LIMIT => Ret::OverQuota,
                None => {
                    next.0.insert(id, (amount, St::Held));
                    Ret::Held
                }
            },
            Call::Commit { id } => match self.0.get(&id) {
                None => Ret::NotFound,
                Some((_, St::Released)) => Ret::AlreadyReleased,
                Some((a, _)) => {
                    next.0.insert(id, (*a, St::Committed));
                    Ret::Committed
                }
            },
            Call::Release { id } => match self.0.get(&id) {
                None => Ret::NotFound,
                Some((a, _)) => {
                    next.0.insert(id, (*a, St::Released));
                    Ret::Released
                }
            },
        };
        (ret, next)
    }
}

/// A sequential specification that histories are checked against: one state, and what each
/// call answers from it and leaves behind.
trait Sequential: Clone + Default + Eq + Hash {
    type Call: Copy + Debug;
    type Ret: Copy + Debug + PartialEq;

    fn step(&self, call: Self::Call) -> (Self::Ret, Self);
}

impl Sequential for Seq {
    type Call = Call;
    type Ret = Ret;

    fn step(&self, call: Call) -> (Ret, Seq) {
        Seq::step(self, call)
    }
}

#[derive(Clone, Debug)]
struct Op<C = Call, R = Ret> {
    call: C,
    ret: R,
    invoke: Instant,
    complete: Instant,
}

/// Whether some order of `ops` that respects real time (an op that completed before another
/// was invoked comes first) makes every answer the model's.
fn linearizable(ops: &[Op]) -> bool {
    linearizable_in::<Seq>(ops)
}

/// As [`linearizable`], against any sequential specification.
fn linearizable_in<S: Sequential>(ops: &[Op<S::Call, S::Ret>]) -> bool {
    assert!(
        ops.len() <= 64,
        "the search keeps linearised calls in a u64"
    );
    let all = if ops.len() == 64 {
        u64::MAX
    } else {
        (1u64 << ops.len()) - 1
    };
    let mut seen: HashSet<(u64, S)> = HashSet::new();
    search(ops, all, 0, S::default(), &mut seen)
}

fn search<S: Sequential>(
    ops: &[Op<S::Call, S::Ret>],
    all: u64,
    done: u64,
    state: S,
    seen: &mut HashSet<(u64, S)>,
) -> bool {
    if done == all {
        return true;
    }
    if !seen.insert((done, state.clone())) {
        return false; // this configuration was explored already and led nowhere
    }
    let pending = || (0..ops.len()).filter(move |i| done & (1 << i) == 0);
    // A call may be linearised next only if it was invoked before every pending call completed.
    let first_completion = pending().map(|i| ops[i].complete).min().unwrap();
    for i in pending() {
        if ops[i].invoke > first_completion {
            continue;
        }
        let (ret, next) = state.step(ops[i].call);
        if ret == ops[i].ret && search(ops, all, done | (1 << i), next, seen) {
            return true;
        }
    }
    false
}

#[test]
fn the_checker_rejects_what_no_order_explains() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let op = |call, ret, from, to| Op {
        call,
        ret,
        invoke: at(from),
        complete: at(to),
    };
    // Sequential: 2 held, then 2 more held with a limit of 3: impossible.
    let over = [
        op(Call::Reserve { id: 0, amount: 2 }, Ret::Held, 0, 1),
        op(Call::Reserve { id: 1, amount: 2 }, Ret::Held, 2, 3),
    ];
    assert!(!linearizable(&over));
    // Overlapping with a release of the first, both can be held (reserve, release, reserve)...
    let freed = [
        op(Call::Reserve { id: 0, amount: 2 }, Ret::Held, 0, 10),
        op(Call::Reserve { id: 1, amount: 2 }, Ret::Held, 1, 10),
        op(Call::Release { id: 0 }, Ret::Released, 2, 10),
    ];
    assert!(linearizable(&freed));
    // ...but not if the release found nothing: it came before the reserve it names.
    let still_over = [
        op(Call::Reserve { id: 0, amount: 2 }, Ret::Held, 0, 10),
        op(Call::Reserve { id: 1, amount: 2 }, Ret::Held, 1, 10),
        op(Call::Release { id: 0 }, Ret::NotFound, 2, 10),
    ];
    assert!(!linearizable(&still_over));
    // A commit that found nothing overlapping the reserve: the commit went first.
    let overlap = [
        op(Call::Reserve { id: 0, amount: 1 }, Ret::Held, 0, 10),
        op(Call::Commit { id: 0 }, Ret::NotFound, 1, 5),
    ];
    assert!(linearizable(&overlap));
    // ...but not once the reserve had completed before the commit started.
    let stale = [
        op(Call::Reserve { id: 0, amount: 1 }, Ret::Held, 0, 1),
        op(Call::Commit { id: 0 }, Ret::NotFound, 2, 5),
    ];
    assert!(!linearizable(&stale));
    // A denial is explained by a concurrent grant that took the room.
    let denial = [
        op(Call::Reserve { id: 0, amount: 3 }, Ret::Held, 0, 10),
        op(Call::Reserve { id: 1, amount: 1 }, Ret::OverQuota, 1, 9),
    ];
    assert!(linearizable(&denial));
}

// ---- recording histories from a stress run ----

fn instances() -> ResourceName {
    ResourceName::parse("instances").unwrap()
}

fn project(i: usize) -> ProjectId {
    ProjectId::parse(&format!("history-{i}")).unwrap()
}

/// The id of index `k` in project `p`: stable, so all clients of a project share them.
fn id_of(p: usize, k: u8) -> ReservationId {
    ReservationId(Uuid::from_u128(((p as u128) << 16) | (u128::from(k) + 1)))
}

async fn client(ledgers: Vec<Arc<Ledger>>, p: usize, c: usize, reserve_ids: Vec<u8>) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64((p * 100 + c) as u64);
    let meta = Metadata::default();
    let project = project(p);
    let mut ops = vec![];
    let mut mine = reserve_ids.into_iter();
    for n in 0..CALLS_PER_CLIENT {
        // Spread a project's clients over the ledgers (nodes) when there are several.
        let ledger = &ledgers[(c + n) % ledgers.len()];
        let call = match (rng.gen_range(0..10), mine.len()) {
            (0..=4, 1..) => Call::Reserve {
                id: mine.next().unwrap(),
                amount: rng.gen_range(1..=2),
            },
            (0..=6, _) => Call::Commit {
                id: rng.gen_range(0..IDS_PER_PROJECT as u8),
            },
            _ => Call::Release {
                id: rng.gen_range(0..IDS_PER_PROJECT as u8),
            },
        };
        let invoke = Instant::now();
        let answer = match call {
            Call::Reserve { id, amount } => {
                let deltas = Deltas::new([(instances(), amount)].into()).unwrap();
                ledger
                    .reserve(&project, Some(id_of(p, id)), deltas, 600, &meta)
                    .await
            }
            Call::Commit { id } => ledger.commit(&project, id_of(p, id), &meta).await,
            Call::Release { id } => ledger.release(&project, id_of(p, id), &meta).await,
        };
        let complete = Instant::now();
        let ret = match answer {
            Ok(view) => match view.status {
                ReservationStatus::Held => Ret::Held,
                ReservationStatus::Committed => Ret::Committed,
                ReservationStatus::Released(_) => Ret::Released,
            },
            Err(LedgerError::Refused(Refusal::OverQuota { .. })) => Ret::OverQuota,
            Err(LedgerError::Refused(Refusal::NotFound)) => Ret::NotFound,
            Err(LedgerError::Refused(Refusal::ReservationReleased)) => Ret::AlreadyReleased,
            Err(other) => panic!("{call:?}: {other}"),
        };
        ops.push(Op {
            call,
            ret,
            invoke,
            complete,
        });
    }
    ops
}

async fn record_and_check(ledgers: Vec<Arc<Ledger>>, backend: &str) {
    ledgers[0]
        .set_defaults(
            &[(instances(), Limit::new(LIMIT).unwrap())].into(),
            &Metadata::default(),
        )
        .await
        .unwrap();
    for l in &ledgers[1..] {
        l.refresh_defaults().await.unwrap();
    }
    let started = Instant::now();
    let mut tasks = vec![];
    for p in 0..PROJECTS {
        // Each id is reserved by exactly one client, at most once.
        let mut ids: Vec<u8> = (0..IDS_PER_PROJECT as u8).collect();
        for c in 0..CLIENTS_PER_PROJECT {
            let share: Vec<u8> = ids
                .drain(..(IDS_PER_PROJECT / CLIENTS_PER_PROJECT).min(ids.len()))
                .collect();
            tasks.push((p, tokio::spawn(client(ledgers.clone(), p, c, share))));
        }
    }
    let mut histories: BTreeMap<usize, Vec<Op>> = BTreeMap::new();
    for (p, task) in tasks {
        histories.entry(p).or_default().extend(task.await.unwrap());
    }
    let recorded = started.elapsed();
    let checking = Instant::now();
    let mut calls = 0;
    for (p, ops) in &histories {
        assert!(ops.len() <= MAX_CALLS_PER_PROJECT);
        calls += ops.len();
        assert!(
            linearizable(ops),
            "project {p}: no sequential order explains this history: {ops:#?}"
        );
    }
    eprintln!(
        "history {backend}: {} histories ({calls} calls) linearizable; recorded in {:.1} s, \
         checked in {:.2} s",
        histories.len(),
        recorded.as_secs_f64(),
        checking.elapsed().as_secs_f64()
    );
}

async fn ledger(store: Arc<dyn EventStore>) -> Arc<Ledger> {
    Ledger::start(store, Arc::new(SystemClock), LedgerConfig::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_histories_are_linearizable() {
    let (_dir, store) = testing::sqlite_store().await;
    record_and_check(vec![ledger(store).await], "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_histories_over_two_ledgers_are_linearizable() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let schema = testing::postgres_schema(&url).await;
    let a = ledger(testing::postgres_store_in(&url, &schema).await).await;
    let b = ledger(testing::postgres_store_in(&url, &schema).await).await;
    record_and_check(vec![a, b], "postgres").await;
}
