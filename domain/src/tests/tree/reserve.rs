//! Rule 11 for reserves: every ancestor's limit caps its subtree, for plain and counted
//! reserves, and for giving back a committed reduction.

use super::*;

fn counted_cmd(n: u128, pairs: &[(&str, i64)], min: u32, max: u32) -> Command {
    Command::Reserve {
        user: None,
        count: Some(CountRange::new(min, max).unwrap()),
        reservation_id: id(n),
        deltas: deltas(pairs),
        expires_in_s: 3600,
    }
}

impl Tree {
    fn reserve_counted(
        &mut self,
        name: &str,
        n: u128,
        unit: &[(&str, i64)],
        min: u32,
        max: u32,
    ) -> Decision {
        self.run(name, counted_cmd(n, unit, min, max))
    }
}

/// Given a parent with room for 5 and two children with room for 100 each, when twenty
/// reserves of one are spread over both children, then exactly 5 are granted; the denial names
/// the parent in `ancestor_overs` (its `overs`, the child's own limits, are empty) and is
/// audited with it, changing nothing.
#[test]
fn reserves_spread_over_the_children_grant_exactly_the_parents_room() {
    let mut t = Tree::new(&[("instances", 100)], &["org", "a", "b"]);
    t.set_parent("a", Some("org"), false);
    t.set_parent("b", Some("org"), false);
    t.set_limits("org", &[("instances", 5)]);
    let granted = (0..20)
        .filter(|n| {
            let child = if n % 2 == 0 { "a" } else { "b" };
            t.reserve(child, *n, &[("instances", 1)]).answer.is_ok()
        })
        .count();
    assert_eq!(granted, 5);
    assert_eq!(t.subtree("org", "instances"), (0, 5));
    assert_eq!(
        (t.own("a", "instances"), t.own("b", "instances")),
        ((0, 3), (0, 2))
    );
    assert_eq!(t.own("org", "instances"), (0, 0));

    let org_version = t.state("org").version;
    let d = t.reserve("b", 99, &[("instances", 1)]);
    let Err(Refusal::OverQuota {
        overs,
        standing,
        max_count,
        user,
        ancestor_overs: over,
    }) = &d.answer
    else {
        panic!("expected over quota, got {:?}", d.answer);
    };
    assert!(overs.is_empty(), "b's own limit is not the one over");
    assert_eq!(over, &ancestor_overs(&[("org", &["instances"])]));
    assert_eq!(
        standing[&r("instances")],
        ResourceStanding {
            limit: Limit::new(100).unwrap(),
            in_use: 0,
            reserved: 2
        }
    );
    assert_eq!((max_count, user), (&None, &None));
    assert!(matches!(
        d.events.as_slice(),
        [Event::ReservationDenied { overs, ancestor_overs: stored, reservation_id, .. }]
            if overs.is_empty() && stored == over && *reservation_id == id(99)
    ));
    assert!(
        t.mirrored.is_empty(),
        "a denial is not recorded by the ancestors"
    );
    assert_eq!(t.state("org").version, org_version);
    assert_eq!(t.state("b").reservation(&id(99)), None);
}

/// A grant in a child is recorded by each ancestor as the child's hold.
#[test]
fn a_grant_is_recorded_by_every_ancestor() {
    let mut t = Tree::new(&[("cores", 100)], &["g", "p", "c"]);
    t.set_parent("p", Some("g"), false);
    t.set_parent("c", Some("p"), false);
    t.ok("c", reserve_cmd(1, &[("cores", 3)]));
    let hold = DescendantHold {
        reservation_id: id(1),
        deltas: deltas(&[("cores", 3)]),
        expires_at: t0() + Duration::hours(1),
    };
    assert_eq!(
        t.mirrored,
        vec![Event::DescendantReserved {
            descendant: p("c"),
            hold
        }]
    );
    for ancestor in ["g", "p"] {
        assert_eq!(t.subtree(ancestor, "cores"), (0, 3));
        assert_eq!(t.own(ancestor, "cores"), (0, 0));
    }
}

/// Given g (room 6) above p above c1 and c2, the grandparent's limit caps the grandchildren,
/// and a parent's own reserve is judged on its subtree's usage, not its own alone.
#[test]
fn a_grandparents_limit_caps_the_grandchildren() {
    let mut t = Tree::new(&[("cores", 100)], &["g", "p", "c1", "c2"]);
    t.set_parent("p", Some("g"), false);
    t.set_parent("c1", Some("p"), false);
    t.set_parent("c2", Some("p"), false);
    t.set_limits("g", &[("cores", 6)]);
    t.ok("c1", reserve_cmd(1, &[("cores", 4)]));
    let d = t.reserve("c2", 2, &[("cores", 3)]);
    assert!(matches!(
        &d.answer,
        Err(Refusal::OverQuota { overs, ancestor_overs: over, .. })
            if overs.is_empty() && over == &ancestor_overs(&[("g", &["cores"])])
    ));
    t.ok("c2", reserve_cmd(3, &[("cores", 2)]));
    assert_eq!(t.subtree("g", "cores"), (0, 6));
    assert_eq!(t.subtree("p", "cores"), (0, 6));

    // With p at exactly its subtree's usage too, the denial names both ancestors.
    t.set_limits("p", &[("cores", 6)]);
    let d = t.reserve("c2", 4, &[("cores", 1)]);
    assert!(matches!(
        &d.answer,
        Err(Refusal::OverQuota { ancestor_overs: over, .. })
            if over == &ancestor_overs(&[("g", &["cores"]), ("p", &["cores"])])
    ));

    // Over its own limit as well: `overs` and `ancestor_overs` together.
    t.set_limits("c2", &[("cores", 2)]);
    let d = t.reserve("c2", 9, &[("cores", 1)]);
    assert!(matches!(
        &d.answer,
        Err(Refusal::OverQuota { overs, ancestor_overs: over, .. })
            if overs == &vec![r("cores")]
                && over == &ancestor_overs(&[("g", &["cores"]), ("p", &["cores"])])
    ));

    // p's own reserve: p holds nothing itself, but its subtree fills its limit.
    let d = t.reserve("p", 5, &[("cores", 1)]);
    let Err(Refusal::OverQuota {
        overs,
        standing,
        ancestor_overs: over,
        ..
    }) = &d.answer
    else {
        panic!("expected over quota, got {:?}", d.answer);
    };
    assert_eq!(overs, &vec![r("cores")]);
    assert_eq!(
        standing[&r("cores")],
        ResourceStanding {
            limit: Limit::new(6).unwrap(),
            in_use: 0,
            reserved: 6
        }
    );
    assert_eq!(over, &ancestor_overs(&[("g", &["cores"])]));

    // Once c1 gives its hold back, p's subtree has room 4 under both limits.
    t.ok("c1", release(1));
    assert!(t.reserve("p", 6, &[("cores", 5)]).answer.is_err());
    t.ok("p", reserve_cmd(7, &[("cores", 4)]));
    assert_eq!(t.subtree("g", "cores"), (0, 6));
    assert_eq!(t.own("p", "cores"), (0, 4));
    // And the root's own reserve is judged on the whole tree.
    let d = t.reserve("g", 8, &[("cores", 1)]);
    assert!(matches!(
        &d.answer,
        Err(Refusal::OverQuota { overs, ancestor_overs: over, .. })
            if overs == &vec![r("cores")] && over.is_empty()
    ));
}

/// Freeing a committed reduction in a child gives usage back, so it must fit every
/// ancestor's limit (rule 1 across the tree), as a reserve would.
#[test]
fn freeing_a_childs_committed_reduction_must_fit_the_ancestors() {
    let mut t = Tree::new(&[("cores", 100)], &["org", "a", "b"]);
    t.set_parent("a", Some("org"), false);
    t.set_parent("b", Some("org"), false);
    t.ok("a", reserve_cmd(1, &[("cores", 4)]));
    t.ok("a", commit(1));
    t.ok("a", reserve_cmd(2, &[("cores", -1)]));
    t.ok("a", commit(2));
    t.set_limits("org", &[("cores", 5)]);
    t.ok("b", reserve_cmd(3, &[("cores", 2)]));
    assert_eq!(t.subtree("org", "cores"), (3, 2));
    let d = t.when("a", &release(2));
    // The parent is named (the child itself has room), as for a reserve.
    assert!(
        matches!(&d.answer, Err(Refusal::OverQuota { overs, ancestor_overs: over, .. })
            if overs.is_empty() && over == &ancestor_overs(&[("org", &["cores"])])),
        "{:?}",
        d.answer
    );
    assert!(d.events.is_empty());
    t.ok("b", release(3));
    t.ok("a", release(2));
    assert_eq!(t.subtree("org", "cores"), (4, 0));
}

/// A counted reserve in a child takes the largest count that fits the ancestors' rooms too;
/// below its minimum it is denied with `max_count` and the ancestor that is over.
#[test]
fn a_counted_reserve_in_a_child_fits_the_ancestors_room() {
    let mut t = Tree::new(&[("cores", 100)], &["g", "org", "a", "b"]);
    t.set_parent("org", Some("g"), false);
    t.set_parent("a", Some("org"), false);
    t.set_parent("b", Some("org"), false);
    t.set_limits("org", &[("cores", 10)]);
    t.ok("a", reserve_cmd(1, &[("cores", 3)]));
    let events = t.ok("b", counted_cmd(2, &[("cores", 2)], 1, 8));
    assert!(matches!(
        events.as_slice(),
        [Event::ReservationRequested { deltas: asked, count: Some(c), .. }]
            if asked == &deltas(&[("cores", 6)]) && c.granted == 3
    ));
    assert_eq!(t.subtree("org", "cores"), (0, 9));

    t.ok("a", release(1));
    let d = t.reserve_counted("b", 3, &[("cores", 2)], 3, 4);
    let Err(Refusal::OverQuota {
        overs,
        max_count,
        ancestor_overs: over,
        ..
    }) = &d.answer
    else {
        panic!("expected over quota, got {:?}", d.answer);
    };
    assert!(overs.is_empty());
    assert_eq!(*max_count, Some(2));
    assert_eq!(over, &ancestor_overs(&[("org", &["cores"])]));
    assert!(matches!(
        d.events.as_slice(),
        [Event::ReservationDenied { deltas: asked, count: Some(range), ancestor_overs: stored, .. }]
            if asked == &deltas(&[("cores", 6)]) && range.min() == 3 && stored == over
    ));
    assert_eq!(t.subtree("org", "cores"), (0, 6));

    // A grandparent tighter than the parent bounds the count instead.
    t.set_limits("g", &[("cores", 7)]);
    let events = t.ok("a", counted_cmd(4, &[("cores", 1)], 1, 10));
    assert!(matches!(
        events.as_slice(),
        [Event::ReservationRequested { count: Some(c), .. }] if c.granted == 1
    ));
    let d = t.reserve_counted("a", 5, &[("cores", 1)], 1, 10);
    assert!(matches!(
        &d.answer,
        Err(Refusal::OverQuota { max_count: Some(0), ancestor_overs: over, .. })
            if over == &ancestor_overs(&[("g", &["cores"])])
    ));
}
