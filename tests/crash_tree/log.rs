//! The crash test's check of the log (see `crash_tree`): every chain whole, every grant within
//! every subtree of its chain, read afresh from the store.

use std::collections::BTreeMap;

use domain::{Deltas, Event, ProjectId, ReservationId, Timestamp};
use uuid::Uuid;

use super::{ancestors, limit, place, NODES};

/// A change of a project's usage as an ancestor records it: a hold begun, or a hold ended with
/// the project's in_use moved by so much per resource.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Change {
    Held,
    Ended(Vec<(String, i64)>),
}

/// (tree, ancestor, descendant, reservation, change).
type Record = (usize, usize, usize, Uuid, Change);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Held,
    Committed,
    Released,
}

struct Hold {
    deltas: Deltas,
    expires_at: Timestamp,
    status: Status,
}

#[derive(Default)]
pub struct LogReport {
    pub events: u64,
    /// Changes of a child's usage, each recorded by every ancestor.
    pub changes: u64,
    pub grants: u64,
}

fn plain(deltas: &Deltas, sign: i64) -> Vec<(String, i64)> {
    deltas
        .iter()
        .map(|(r, d)| (r.to_string(), sign * d))
        .collect()
}

/// Reads the whole log afresh and checks every chain and every grant (see the module docs).
pub async fn check_log(store_url: &str) -> LogReport {
    let store = ledger::store::open_existing(store_url).await.unwrap();
    let mut report = LogReport::default();
    // Each project's own reservations and in_use, from its own events only.
    let mut holds: BTreeMap<(usize, usize), BTreeMap<ReservationId, Hold>> = BTreeMap::new();
    let mut in_use: BTreeMap<(usize, usize, String), i64> = BTreeMap::new();
    // What the ancestors must record (with the position of the change), and what they did.
    let mut expected: BTreeMap<Record, u64> = BTreeMap::new();
    let mut recorded: BTreeMap<Record, Vec<u64>> = BTreeMap::new();
    let mut after = 0;
    loop {
        let events = store
            .read_all(after, ledger::store::MAX_READ_COUNT)
            .await
            .unwrap();
        let Some(last) = events.last() else { break };
        after = last.position;
        for e in &events {
            report.events += 1;
            let Some(project) = ProjectId::from_stream(&e.stream) else {
                continue;
            };
            let (t, node) = place(&project);
            let at = e.position;
            let mut change = None;
            let own = holds.entry((t, node)).or_default();
            match e.decode().unwrap() {
                Event::ReservationRequested {
                    reservation_id,
                    deltas,
                    expires_at,
                    ..
                } => {
                    let hold = Hold {
                        deltas: deltas.clone(),
                        expires_at,
                        status: Status::Held,
                    };
                    own.insert(reservation_id, hold);
                    change = Some((reservation_id, Change::Held));
                    report.grants += 1;
                    check_grant(&holds, &in_use, t, node, &deltas, e.event.recorded_at, at);
                }
                Event::ReservationCommitted { reservation_id } => {
                    let hold = own.get_mut(&reservation_id).expect("committed unknown");
                    assert!(hold.status == Status::Held, "position {at}: not held");
                    hold.status = Status::Committed;
                    for (r, d) in hold.deltas.iter() {
                        *in_use.entry((t, node, r.to_string())).or_default() += d;
                    }
                    let moved = plain(&hold.deltas, 1);
                    change = Some((reservation_id, Change::Ended(moved)));
                }
                Event::ReservationReleased { reservation_id, .. } => {
                    let hold = own.get_mut(&reservation_id).expect("released unknown");
                    let moved = match hold.status {
                        Status::Held => vec![],
                        Status::Committed => plain(&hold.deltas, -1),
                        Status::Released => panic!("position {at}: released twice"),
                    };
                    if hold.status == Status::Committed {
                        for (r, d) in hold.deltas.iter() {
                            *in_use.entry((t, node, r.to_string())).or_default() -= d;
                        }
                    }
                    hold.status = Status::Released;
                    change = Some((reservation_id, Change::Ended(moved)));
                }
                Event::DescendantReserved { descendant, hold } => {
                    let key = (
                        t,
                        node,
                        place(&descendant).1,
                        hold.reservation_id.0,
                        Change::Held,
                    );
                    recorded.entry(key).or_default().push(at);
                }
                Event::DescendantUsageChanged {
                    descendant,
                    reservation_id,
                    in_use: moved,
                } => {
                    let id = reservation_id.expect("no corrections in this test");
                    let moved = moved.iter().map(|(r, n)| (r.to_string(), *n)).collect();
                    let key = (t, node, place(&descendant).1, id.0, Change::Ended(moved));
                    recorded.entry(key).or_default().push(at);
                }
                _ => {}
            }
            if let Some((id, change)) = change {
                report.changes += 1;
                for ancestor in ancestors(node) {
                    let key = (t, ancestor, node, id.0, change.clone());
                    assert!(expected.insert(key, at).is_none(), "a change twice: {id:?}");
                }
            }
        }
    }
    for (key, at) in &expected {
        let positions = recorded.remove(key).unwrap_or_default();
        assert!(
            positions.len() == 1 && positions[0] > *at,
            "{key:?} (position {at}) is recorded by the ancestor at {positions:?}"
        );
    }
    assert!(
        recorded.is_empty(),
        "ancestors recorded changes no descendant made: {recorded:?}"
    );
    report
}

/// At a grant (at `now`, in `node`): every subtree of its chain, summed from its projects' own
/// events, within its limits for each resource the grant adds to.
fn check_grant(
    holds: &BTreeMap<(usize, usize), BTreeMap<ReservationId, Hold>>,
    in_use: &BTreeMap<(usize, usize, String), i64>,
    t: usize,
    node: usize,
    deltas: &Deltas,
    now: Timestamp,
    at: u64,
) {
    let mut chain = vec![node];
    chain.extend(ancestors(node));
    for n in chain {
        let members: Vec<usize> = (0..NODES.len())
            .filter(|m| *m == n || ancestors(*m).contains(&n))
            .collect();
        for (resource, delta) in deltas.iter().filter(|(_, d)| *d > 0) {
            let mut used = 0;
            for m in &members {
                used += in_use
                    .get(&(t, *m, resource.to_string()))
                    .copied()
                    .unwrap_or(0);
                let live = holds.get(&(t, *m)).into_iter().flat_map(|h| h.values());
                used += live
                    .filter(|h| h.status == Status::Held && now < h.expires_at)
                    .map(|h| h.deltas.get(resource).max(0))
                    .sum::<i64>();
            }
            let cap = limit(n, resource.as_str());
            assert!(
                used <= cap,
                "position {at}: a grant of {delta} {resource} in ct{t}-{} took ct{t}-{}'s \
                 subtree to {used}, over its {cap}",
                NODES[node],
                NODES[n]
            );
        }
    }
}
