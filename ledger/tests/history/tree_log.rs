//! The log of a tree history run, read back in global order (see `tree`'s docs): each
//! position checked against the tree's sequential model, from the streams themselves.

use std::collections::BTreeMap;

use domain::{Deltas, Event, ProjectId, ReservationId};
use ledger::EventStore;

use super::super::{instances, St};
use super::{chain, id_place, owner, place, TreeSeq, LIMITS, NODES};

/// A change of a project's usage: a hold begun, or a hold ended with its in_use moved by so
/// much (a commit adds the amount, freeing a committed one takes it out, a rollback nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Change {
    Held,
    Ended(i64),
}

/// Replays every event in global order, checking each position; answers each tree's model
/// state at the end.
pub(super) async fn check_log(store: &dyn EventStore) -> BTreeMap<usize, TreeSeq> {
    let mut trees: BTreeMap<usize, TreeSeq> = BTreeMap::new();
    // (tree, node, id, change) -> the position of the project's own event.
    let mut own: BTreeMap<(usize, usize, u8, Change), u64> = BTreeMap::new();
    // (tree, ancestor, node, id, change) -> the positions of the ancestor's records of it.
    let mut mirrors: BTreeMap<(usize, usize, usize, u8, Change), Vec<u64>> = BTreeMap::new();
    let amount = |deltas: &Deltas| deltas.get(&instances());
    let mut after = 0;
    loop {
        let events = store
            .read_all(after, ledger::store::MAX_READ_COUNT)
            .await
            .unwrap();
        let Some(last) = events.last() else { break };
        after = last.position;
        for recorded in &events {
            let Some(project) = ProjectId::from_stream(&recorded.stream) else {
                continue;
            };
            let (t, node) = place(&project);
            let at = recorded.position;
            let seq = trees.entry(t).or_default();
            let id_in_tree = |id: &ReservationId| {
                let (tree, k) = id_place(id);
                assert_eq!(tree, t, "position {at}: a reservation of another tree");
                k
            };
            match recorded.decode().unwrap() {
                Event::ReservationRequested {
                    reservation_id,
                    deltas,
                    ..
                } => {
                    let k = id_in_tree(&reservation_id);
                    assert_eq!(owner(k), node);
                    let over = seq.overs(node, amount(&deltas));
                    assert_eq!(over, 0, "position {at}: granted over {over:#b} in tree {t}");
                    seq.0.insert(k, (amount(&deltas), St::Held));
                    own.insert((t, node, k, Change::Held), at);
                }
                Event::ReservationDenied {
                    reservation_id,
                    deltas,
                    overs,
                    ancestor_overs,
                    ..
                } => {
                    let k = id_in_tree(&reservation_id);
                    assert_eq!(owner(k), node);
                    let own_bit = if overs.is_empty() { 0 } else { 1 << node };
                    let named = ancestor_overs
                        .keys()
                        .fold(own_bit, |bits, a| bits | 1 << place(a).1);
                    let over = seq.overs(node, amount(&deltas));
                    assert!(over != 0, "position {at}: denied with room in tree {t}");
                    assert_eq!(named, over, "position {at}: the denial's overs, tree {t}");
                }
                Event::ReservationCommitted { reservation_id } => {
                    let k = id_in_tree(&reservation_id);
                    let (a, status) = seq.0[&k];
                    assert_eq!(status, St::Held, "position {at}: committed from {status:?}");
                    seq.0.insert(k, (a, St::Committed));
                    own.insert((t, node, k, Change::Ended(a)), at);
                }
                Event::ReservationReleased { reservation_id, .. } => {
                    let k = id_in_tree(&reservation_id);
                    let (a, status) = seq.0[&k];
                    assert_ne!(status, St::Released, "position {at}: released twice");
                    seq.0.insert(k, (a, St::Released));
                    let moved = if status == St::Committed { -a } else { 0 };
                    own.insert((t, node, k, Change::Ended(moved)), at);
                }
                Event::DescendantReserved { descendant, hold } => {
                    let k = id_in_tree(&hold.reservation_id);
                    let key = (t, node, place(&descendant).1, k, Change::Held);
                    mirrors.entry(key).or_default().push(at);
                }
                Event::DescendantUsageChanged {
                    descendant,
                    reservation_id,
                    in_use,
                } => {
                    let id = reservation_id.expect("only holds end in this test");
                    let k = id_in_tree(&id);
                    let moved = in_use.get(&instances()).copied().unwrap_or(0);
                    let key = (t, node, place(&descendant).1, k, Change::Ended(moved));
                    mirrors.entry(key).or_default().push(at);
                }
                _ => {}
            }
            for n in 0..NODES.len() {
                let used = seq.used(n);
                assert!(
                    used <= LIMITS[n],
                    "position {at}: tree {t} {} holds {used} over its {}",
                    NODES[n],
                    LIMITS[n]
                );
            }
        }
    }
    // Every ancestor recorded each change once, in the events right after it (the chain is
    // one linked append: the project's, then its parent's, then its grandparent's), and
    // nothing else.
    let mut expected = 0;
    for ((t, node, k, change), at) in &own {
        for (distance, ancestor) in chain(*node).into_iter().enumerate().skip(1) {
            let key = (*t, ancestor, *node, *k, *change);
            let positions = mirrors.get(&key).cloned().unwrap_or_default();
            assert_eq!(
                positions,
                vec![at + distance as u64],
                "tree {t}: {} records {change:?} of {k} in {} (at {at}) at {positions:?}",
                NODES[ancestor],
                NODES[*node]
            );
            expected += 1;
        }
    }
    assert_eq!(
        mirrors.len(),
        expected,
        "ancestors recorded changes that did not happen"
    );
    trees
}
