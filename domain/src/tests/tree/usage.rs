//! Rule 11 for what a child's usage does to its ancestors: commits, releases, expiries and
//! corrections move their subtree totals; rule 6 on a parent's subtree; snapshots.

use super::*;

/// Commit, release (rolled back, freed), expiry and corrections in a grandchild move each
/// ancestor's subtree totals by exactly as much as the grandchild's own.
#[test]
fn a_childs_commits_releases_expiries_and_corrections_move_its_ancestors() {
    let mut t = Tree::new(&[("cores", 100)], &["g", "p", "c"]);
    t.set_parent("p", Some("g"), false);
    t.set_parent("c", Some("p"), false);
    let both = |t: &Tree| [t.subtree("g", "cores"), t.subtree("p", "cores")];
    t.ok("c", reserve_cmd(1, &[("cores", 5)]));
    t.ok("c", commit(1));
    assert_eq!(
        t.mirrored,
        vec![Event::DescendantUsageChanged {
            descendant: p("c"),
            reservation_id: Some(id(1)),
            in_use: [(r("cores"), 5)].into(),
        }]
    );
    assert_eq!(both(&t), [(5, 0); 2]);

    // Rolled back: the hold ends, in_use stays.
    t.ok("c", reserve_cmd(2, &[("cores", 3)]));
    assert_eq!(both(&t), [(5, 3); 2]);
    t.ok("c", release(2));
    assert_eq!(
        t.mirrored,
        vec![Event::DescendantUsageChanged {
            descendant: p("c"),
            reservation_id: Some(id(2)),
            in_use: BTreeMap::new(),
        }]
    );
    assert_eq!(both(&t), [(5, 0); 2]);

    // Freed: in_use falls.
    t.ok("c", release(1));
    assert_eq!(
        t.mirrored[0],
        Event::DescendantUsageChanged {
            descendant: p("c"),
            reservation_id: Some(id(1)),
            in_use: [(r("cores"), -5)].into(),
        }
    );
    assert_eq!(both(&t), [(0, 0); 2]);

    // Expiry: a hold past its expiry stops counting in every ancestor at once, before the
    // sweeper records anything; the sweeper's release then ends it there too.
    let short = Command::Reserve {
        user: None,
        count: None,
        reservation_id: id(3),
        deltas: deltas(&[("cores", 4)]),
        expires_in_s: 60,
    };
    t.ok("c", short);
    t.ok("c", reserve_cmd(4, &[("cores", 2)]));
    assert_eq!(both(&t), [(0, 6); 2]);
    t.now += Duration::seconds(60);
    assert_eq!(both(&t), [(0, 2); 2]);
    let versions = (t.state("g").version, t.state("p").version);
    let expired = t.ok("c", Command::Expire);
    assert_eq!(
        expired,
        vec![Event::ReservationReleased {
            reservation_id: id(3),
            reason: ReleaseReason::Expired
        }]
    );
    assert_eq!(t.state("g").version, versions.0.map(|v| v + 1));
    assert_eq!(t.state("p").version, versions.1.map(|v| v + 1));
    for ancestor in ["g", "p"] {
        let (_, c) = t
            .state(ancestor)
            .subtree()
            .members()
            .find(|(id, _)| **id == p("c"))
            .unwrap();
        assert_eq!(c.holds.keys().collect::<Vec<_>>(), vec![&id(4)]);
    }
    assert_eq!(both(&t), [(0, 2); 2]);

    // Corrections: the ancestors move by the difference; an equal value records nothing.
    t.ok("c", reserve_cmd(5, &[("cores", 3)]));
    t.ok("c", commit(5));
    assert_eq!(both(&t), [(3, 2); 2]);
    t.correct("c", "cores", 7);
    assert_eq!(
        t.mirrored,
        vec![Event::DescendantUsageChanged {
            descendant: p("c"),
            reservation_id: None,
            in_use: [(r("cores"), 4)].into(),
        }]
    );
    assert_eq!(both(&t), [(7, 2); 2]);
    assert!(t.correct("c", "cores", 7).is_empty());
    assert!(t.mirrored.is_empty());
    t.correct("c", "cores", 1);
    assert_eq!(both(&t), [(1, 2); 2]);
    // Freeing the 3 committed after the correction stops at zero, in the ancestors too.
    t.ok("c", release(5));
    assert_eq!(t.own("c", "cores"), (0, 2));
    assert_eq!(both(&t), [(0, 2); 2]);
    // A user's correction moves the project, and so the ancestors, by as much.
    t.ok(
        "c",
        Command::CorrectUsage {
            in_use: [(r("cores"), 2)].into(),
            reason: Reason::parse("recount").unwrap(),
            user: Some(UserId::parse("alice").unwrap()),
        },
    );
    assert_eq!(both(&t), [(2, 2); 2]);
    assert_eq!(t.own("p", "cores"), (0, 0));
}

/// Rule 6 for a parent: its limit caps its subtree, so lowering it below the subtree's usage
/// (not just its own) is refused unless forced; a child's own limit is judged on its own.
#[test]
fn lowering_a_parents_limit_below_its_subtrees_usage_needs_force() {
    let mut t = Tree::new(&[("cores", 100)], &["org", "a", "b"]);
    t.set_parent("a", Some("org"), false);
    t.set_parent("b", Some("org"), false);
    t.ok("a", reserve_cmd(1, &[("cores", 3)]));
    t.ok("a", commit(1));
    t.ok("b", reserve_cmd(2, &[("cores", 2)]));
    let lower = |n: i64, force: bool| Command::SetLimits {
        limits: limits(&[("cores", n)]),
        force,
    };
    let d = t.when("org", &lower(4, false));
    assert_eq!(
        d.answer,
        Err(Refusal::LimitBelowUsage(
            [(
                r("cores"),
                ResourceStanding {
                    limit: Limit::new(4).unwrap(),
                    in_use: 3,
                    reserved: 2
                }
            )]
            .into()
        ))
    );
    assert!(d.events.is_empty());
    assert_eq!(
        t.ok("org", lower(5, false)),
        vec![Event::LimitsSet {
            limits: limits(&[("cores", 5)]),
            forced: false
        }]
    );
    assert_eq!(
        t.ok("org", lower(3, true)),
        vec![Event::LimitsSet {
            limits: limits(&[("cores", 3)]),
            forced: true
        }]
    );
    assert!(t.reserve("b", 3, &[("cores", 1)]).answer.is_err());
    // a's own limit is judged on a's usage alone.
    t.ok("a", lower(3, false));
}

/// A snapshot of a parent with descendants (holds, in_use, a grandchild, a child that left)
/// loads back as the state folded from its events.
#[test]
fn a_parents_snapshot_round_trips() {
    let resources = [("cores", 100), ("ram", -1), ("gpus", 8)];
    let mut t = Tree::new(&resources, &["org", "a", "b", "gc"]);
    t.set_parent("a", Some("org"), false);
    t.set_parent("b", Some("org"), false);
    t.set_parent("gc", Some("a"), false);
    t.ok("org", reserve_cmd(1, &[("cores", 1)]));
    t.ok("a", reserve_cmd(2, &[("cores", 2), ("ram", 512)]));
    t.ok("a", commit(2));
    t.ok("gc", reserve_cmd(3, &[("cores", 4)]));
    t.ok("b", reserve_cmd(4, &[("gpus", 2)]));
    t.ok("b", commit(4));
    t.set_parent("b", None, false);
    let org = t.state("org");
    assert_eq!(org.subtree().len(), 2);
    let snapshot = org.to_snapshot().unwrap();
    let back = ProjectState::from_snapshot(p("org"), &snapshot);
    assert_eq!(back.as_ref(), Ok(org));
    let back = back.unwrap();
    assert_eq!(
        back.subtree_usage(&r("cores"), t.now),
        org.subtree_usage(&r("cores"), t.now)
    );
    assert_eq!(back.to_snapshot().unwrap(), snapshot);
}
