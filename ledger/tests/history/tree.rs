//! History check over trees (SPEC rule 11). Each tree is five projects: `root` (limit 5) with
//! children `mid` (limit 4) and `c`, and `mid` with children `a` and `b` (the leaves take the
//! default, 3). Clients reserve, commit and release at once in `a`, `b`, `c` and `mid`, through
//! several ledgers on one store, and each call is recorded with its real-time bounds.
//!
//! Then, per tree, the history must be linearizable against `TreeSeq`, a sequential model of
//! the whole tree: a reserve is granted only if it fits its project's subtree and every
//! ancestor's, and a denial names exactly the projects of the chain that were over.
//!
//! And the log, read back in global order, must show the same from the streams themselves: at
//! no position is any subtree over its limit; each grant fit its whole chain, and each denial's
//! overs (its own and its ancestors') are those of the chain at its position; and each change
//! of a project's usage (a hold begun, a hold committed or released) is recorded by every
//! ancestor, by one `Descendant*` event each, in the same linked append (the events that
//! directly follow it), and no ancestor records one that did not happen.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use domain::{Deltas, Limit, ProjectId, Refusal, ReservationId, ReservationStatus};
use ledger::{EventStore, Ledger, LedgerError, Metadata};
use rand::{rngs::StdRng, Rng, SeedableRng};
use uuid::Uuid;

use super::{instances, linearizable_in, Op, Sequential, St};

#[path = "tree_log.rs"]
mod log;

use log::check_log;

const TREES: usize = 100;
const CLIENTS_PER_TREE: usize = 6;
const CALLS_PER_CLIENT: usize = 8;
/// Reservation ids per tree; id `k` is a reservation in `owner(k)`.
const IDS_PER_TREE: usize = 18;

/// The projects of a tree, by index.
const NODES: [&str; 5] = ["root", "mid", "a", "b", "c"];
const PARENT: [Option<usize>; 5] = [None, Some(0), Some(1), Some(1), Some(0)];
/// Each project's limit: root's and mid's own, the default for the others.
const LIMITS: [i64; 5] = [5, 4, DEFAULT_LIMIT, DEFAULT_LIMIT, DEFAULT_LIMIT];
const DEFAULT_LIMIT: i64 = 3;
/// The projects reservations are made in, in turn by id.
const OWNERS: [usize; 4] = [2, 3, 1, 4];

fn owner(id: u8) -> usize {
    OWNERS[usize::from(id) % OWNERS.len()]
}

/// `node` and its ancestors, nearest first.
fn chain(node: usize) -> Vec<usize> {
    let mut chain = vec![node];
    while let Some(parent) = PARENT[*chain.last().unwrap()] {
        chain.push(parent);
    }
    chain
}

fn project(t: usize, node: usize) -> ProjectId {
    ProjectId::parse(&format!("htree{t}-{}", NODES[node])).unwrap()
}

/// (tree, node) of a project of this test.
fn place(project: &ProjectId) -> (usize, usize) {
    let (tree, node) = project
        .as_str()
        .strip_prefix("htree")
        .and_then(|rest| rest.split_once('-'))
        .unwrap_or_else(|| panic!("not a tree project: {project}"));
    let node = NODES.iter().position(|n| *n == node).unwrap();
    (tree.parse().unwrap(), node)
}

fn id_of(t: usize, k: u8) -> ReservationId {
    ReservationId(Uuid::from_u128(((t as u128) << 16) | (u128::from(k) + 1)))
}

/// (tree, id index) of a reservation id of this test.
fn id_place(id: &ReservationId) -> (usize, u8) {
    let n = id.0.as_u128();
    ((n >> 16) as usize, ((n & 0xffff) - 1) as u8)
}

// ---- the sequential model of one tree ----

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum TreeCall {
    Reserve { id: u8, amount: i64 },
    Commit { id: u8 },
    Release { id: u8 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum TreeRet {
    Held,
    Committed,
    Released,
    /// Denied: the projects of the chain that were over, as a set of bits by index.
    OverQuota(u8),
    NotFound,
    AlreadyReleased,
}

/// One tree: the reservations by id index, each (amount, status). Holds do not expire within
/// a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct TreeSeq(BTreeMap<u8, (i64, St)>);

impl TreeSeq {
    /// What the subtree of `node` holds and uses.
    fn used(&self, node: usize) -> i64 {
        self.0
            .iter()
            .filter(|(id, (_, s))| {
                matches!(s, St::Held | St::Committed) && chain(owner(**id)).contains(&node)
            })
            .map(|(_, (a, _))| a)
            .sum()
    }

    /// The projects of `node`'s chain that `amount` more would take over their limit.
    fn overs(&self, node: usize, amount: i64) -> u8 {
        chain(node)
            .into_iter()
            .filter(|n| self.used(*n) + amount > LIMITS[*n])
            .fold(0, |bits, n| bits | 1 << n)
    }
}

impl Sequential for TreeSeq {
    type Call = TreeCall;
    type Ret = TreeRet;

    fn step(&self, call: TreeCall) -> (TreeRet, TreeSeq) {
        let mut next = self.clone();
        let ret = match call {
            TreeCall::Reserve { id, amount } => match self.0.get(&id) {
                Some(_) => unreachable!("ids are reserved once"),
                None => match self.overs(owner(id), amount) {
                    0 => {
                        next.0.insert(id, (amount, St::Held));
                        TreeRet::Held
                    }
                    over => TreeRet::OverQuota(over),
                },
            },
            TreeCall::Commit { id } => match self.0.get(&id) {
                None => TreeRet::NotFound,
                Some((_, St::Released)) => TreeRet::AlreadyReleased,
                Some((a, _)) => {
                    next.0.insert(id, (*a, St::Committed));
                    TreeRet::Committed
                }
            },
            TreeCall::Release { id } => match self.0.get(&id) {
                None => TreeRet::NotFound,
                Some((a, _)) => {
                    next.0.insert(id, (*a, St::Released));
                    TreeRet::Released
                }
            },
        };
        (ret, next)
    }
}

#[test]
fn the_tree_checker_rejects_what_no_order_explains() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
    let op = |call, ret, from, to| Op {
        call,
        ret,
        invoke: at(from),
        complete: at(to),
    };
    let a = |id: u8| id * 4; // ids in `a`
    let b = |id: u8| id * 4 + 1; // ids in `b`
                                 // a and b have room for 3 each, but mid (their parent) for 4 together.
    let over_mid = [
        op(
            TreeCall::Reserve {
                id: a(0),
                amount: 2,
            },
            TreeRet::Held,
            0,
            1,
        ),
        op(
            TreeCall::Reserve {
                id: b(0),
                amount: 2,
            },
            TreeRet::Held,
            2,
            3,
        ),
        op(
            TreeCall::Reserve {
                id: a(1),
                amount: 1,
            },
            TreeRet::Held,
            4,
            5,
        ),
    ];
    assert!(!linearizable_in::<TreeSeq>(&over_mid));
    let denied = [
        over_mid[0].clone(),
        over_mid[1].clone(),
        op(
            TreeCall::Reserve {
                id: a(1),
                amount: 1,
            },
            TreeRet::OverQuota(1 << 1),
            4,
            5,
        ),
    ];
    assert!(linearizable_in::<TreeSeq>(&denied));
    // The denial must name mid, and only mid: a itself has room.
    let wrongly_named = [
        denied[0].clone(),
        denied[1].clone(),
        op(
            TreeCall::Reserve {
                id: a(1),
                amount: 1,
            },
            TreeRet::OverQuota(1 << 1 | 1 << 2),
            4,
            5,
        ),
    ];
    assert!(!linearizable_in::<TreeSeq>(&wrongly_named));
    // A release of b's hold overlapping the third reserve explains its grant.
    let freed = [
        over_mid[0].clone(),
        over_mid[1].clone(),
        op(
            TreeCall::Reserve {
                id: a(1),
                amount: 1,
            },
            TreeRet::Held,
            4,
            10,
        ),
        op(TreeCall::Release { id: b(0) }, TreeRet::Released, 5, 9),
    ];
    assert!(linearizable_in::<TreeSeq>(&freed));
}

// ---- recording ----

async fn tree_client(
    ledgers: Vec<Arc<Ledger>>,
    t: usize,
    c: usize,
    reserve_ids: Vec<u8>,
) -> Vec<Op<TreeCall, TreeRet>> {
    let mut rng = StdRng::seed_from_u64((1_000 + t * 100 + c) as u64);
    let meta = Metadata::default();
    let mut ops = vec![];
    let mut mine = reserve_ids.into_iter();
    for n in 0..CALLS_PER_CLIENT {
        let ledger = &ledgers[(c + n) % ledgers.len()];
        let call = match (rng.gen_range(0..10), mine.len()) {
            (0..=4, 1..) => TreeCall::Reserve {
                id: mine.next().unwrap(),
                amount: rng.gen_range(1..=2),
            },
            (0..=6, _) => TreeCall::Commit {
                id: rng.gen_range(0..IDS_PER_TREE as u8),
            },
            _ => TreeCall::Release {
                id: rng.gen_range(0..IDS_PER_TREE as u8),
            },
        };
        let invoke = Instant::now();
        let answer = match call {
            TreeCall::Reserve { id, amount } => {
                let deltas = Deltas::new([(instances(), amount)].into()).unwrap();
                let project = project(t, owner(id));
                ledger
                    .reserve(&project, Some(id_of(t, id)), deltas, 600, &meta)
                    .await
            }
            TreeCall::Commit { id } => {
                let project = project(t, owner(id));
                ledger.commit(&project, id_of(t, id), &meta).await
            }
            TreeCall::Release { id } => {
                let project = project(t, owner(id));
                ledger.release(&project, id_of(t, id), &meta).await
            }
        };
        let complete = Instant::now();
        let ret = match answer {
            Ok(view) => match view.status {
                ReservationStatus::Held => TreeRet::Held,
                ReservationStatus::Committed => TreeRet::Committed,
                ReservationStatus::Released(_) => TreeRet::Released,
            },
            Err(LedgerError::Refused(Refusal::OverQuota {
                overs,
                ancestor_overs,
                ..
            })) => {
                let TreeCall::Reserve { id, .. } = call else {
                    panic!("{call:?} answered over-quota");
                };
                let own = if overs.is_empty() { 0 } else { 1 << owner(id) };
                let above = ancestor_overs.keys().fold(0, |bits, a| {
                    let (tree, node) = place(a);
                    assert_eq!(tree, t);
                    bits | 1 << node
                });
                TreeRet::OverQuota(own | above)
            }
            Err(LedgerError::Refused(Refusal::NotFound)) => TreeRet::NotFound,
            Err(LedgerError::Refused(Refusal::ReservationReleased)) => TreeRet::AlreadyReleased,
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

async fn build_trees(ledger: &Ledger) {
    let meta = Metadata::default();
    let limit = |n: i64| [(instances(), Limit::new(n).unwrap())].into();
    ledger
        .set_defaults(&limit(DEFAULT_LIMIT), &meta)
        .await
        .unwrap();
    for t in 0..TREES {
        for (node, own) in LIMITS.iter().enumerate() {
            if *own != DEFAULT_LIMIT {
                ledger
                    .set_limits(&project(t, node), limit(*own), false, &meta)
                    .await
                    .unwrap();
            }
        }
        for (node, parent) in PARENT.iter().enumerate() {
            if let Some(parent) = *parent {
                let parent = Some(project(t, parent));
                ledger
                    .set_parent(&project(t, node), parent, false, &meta)
                    .await
                    .unwrap();
            }
        }
    }
}

pub(super) async fn record_and_check_trees(ledgers: Vec<Arc<Ledger>>, backend: &str) {
    build_trees(&ledgers[0]).await;
    for l in &ledgers[1..] {
        l.refresh_defaults().await.unwrap();
    }
    let started = Instant::now();
    let mut tasks = vec![];
    for t in 0..TREES {
        // Each id is reserved by exactly one client, at most once.
        let mut ids: Vec<u8> = (0..IDS_PER_TREE as u8).collect();
        for c in 0..CLIENTS_PER_TREE {
            let share: Vec<u8> = ids
                .drain(..(IDS_PER_TREE / CLIENTS_PER_TREE).min(ids.len()))
                .collect();
            tasks.push((t, tokio::spawn(tree_client(ledgers.clone(), t, c, share))));
        }
    }
    let mut histories: BTreeMap<usize, Vec<Op<TreeCall, TreeRet>>> = BTreeMap::new();
    for (t, task) in tasks {
        histories.entry(t).or_default().extend(task.await.unwrap());
    }
    let recorded = started.elapsed();
    let checking = Instant::now();
    let (mut calls, mut denials) = (0, 0);
    for (t, ops) in &histories {
        calls += ops.len();
        denials += ops
            .iter()
            .filter(|o| matches!(o.ret, TreeRet::OverQuota(_)))
            .count();
        assert!(
            linearizable_in::<TreeSeq>(ops),
            "tree {t}: no sequential order explains this history: {ops:#?}"
        );
    }
    let checked = checking.elapsed();
    let store = ledgers[0].store().clone();
    let finals = check_log(&*store).await;
    // What a fresh ledger reads from each ancestor's own stream is what the log says.
    let fresh = Ledger::start(
        store,
        Arc::new(ledger::SystemClock),
        ledger::LedgerConfig::default(),
    )
    .await
    .unwrap();
    let now = chrono::Utc::now();
    for (t, seq) in &finals {
        for node in 0..NODES.len() {
            let state = fresh.project_state(&project(*t, node)).await.unwrap();
            let usage = state.subtree_usage(&instances(), now);
            assert_eq!(
                usage.in_use + usage.reserved,
                seq.used(node),
                "tree {t} {node}"
            );
        }
    }
    eprintln!(
        "history trees {backend}: {} tree histories ({calls} calls, {denials} denied) \
         linearizable; the log agrees; recorded in {:.1} s, checked in {:.2} s",
        histories.len(),
        recorded.as_secs_f64(),
        checked.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_tree_histories_over_two_ledgers_are_linearizable() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("trees.db").display());
    let mut ledgers = vec![];
    for _ in 0..2 {
        let store: Arc<dyn EventStore> =
            Arc::new(ledger::store::SqliteStore::open(&url).await.unwrap());
        ledgers.push(super::ledger(store).await);
    }
    record_and_check_trees(ledgers, "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tree_histories_over_three_ledgers_are_linearizable() {
    let Some(url) = ledger::testing::postgres_url() else {
        return;
    };
    let schema = ledger::testing::postgres_schema(&url).await;
    let mut ledgers = vec![];
    for _ in 0..3 {
        ledgers.push(super::ledger(ledger::testing::postgres_store_in(&url, &schema).await).await);
    }
    record_and_check_trees(ledgers, "postgres").await;
}
