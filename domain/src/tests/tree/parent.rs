//! Rule 11, setting a parent: no cycle, at most 3 ancestors, rule 6 for every new ancestor;
//! what the old and new ancestors record of the move.

use super::*;

fn cycle(project: &str, parent: &str) -> Refusal {
    Refusal::Tree(TreeRefusal::Cycle {
        project: p(project),
        parent: p(parent),
    })
}

/// A chain a > b > c: a project under itself or under one of its descendants is a cycle,
/// forced or not.
#[test]
fn a_parent_that_is_the_project_or_a_descendant_is_a_cycle() {
    let mut t = Tree::new(&[("cores", 10)], &["a", "b", "c"]);
    t.set_parent("b", Some("a"), false);
    t.set_parent("c", Some("b"), false);
    for (child, parent) in [("a", "a"), ("a", "b"), ("a", "c"), ("b", "c"), ("c", "c")] {
        for force in [false, true] {
            assert_eq!(
                t.decide_parent(child, Some(parent), force),
                Err(cycle(child, parent)),
                "{child} under {parent}"
            );
        }
    }
}

/// Four levels are allowed; a fifth (a project under one with 3 ancestors, or a subtree of
/// height 2 under a project at depth 2) is too deep.
#[test]
fn more_than_three_ancestors_is_too_deep() {
    let names = ["p1", "p2", "p3", "p4", "p5", "x", "y", "z"];
    let mut t = Tree::new(&[("cores", 10)], &names);
    t.set_parent("p2", Some("p1"), false);
    t.set_parent("p3", Some("p2"), false);
    t.set_parent("p4", Some("p3"), false);
    assert_eq!(t.chain("p4").len(), 3);
    let too_deep = Err(Refusal::Tree(TreeRefusal::TooDeep { levels: 5 }));
    assert_eq!(t.decide_parent("p5", Some("p4"), true), too_deep);

    t.set_parent("y", Some("x"), false);
    t.set_parent("z", Some("y"), false);
    assert_eq!(t.state("x").subtree().height(&p("x")), 2);
    assert_eq!(t.decide_parent("x", Some("p2"), false), too_deep);
    assert_eq!(t.decide_parent("y", Some("p3"), false), too_deep);
    t.set_parent("x", Some("p1"), false);
    assert_eq!(t.chain("z").len(), 3);
    assert_eq!(t.state("p1").subtree().height(&p("p1")), 3);
}

/// Rule 6 for a new ancestor: joining a parent whose subtree would go over its limit is
/// refused unless forced; forced, `ParentSet{forced: true}` is recorded with what the child
/// brings, and new reserves under the parent are denied until usage falls. A new
/// grandparent's limit counts too.
#[test]
fn joining_a_parent_over_its_limit_needs_force() {
    let mut t = Tree::new(&[("cores", 100)], &["g", "org", "c"]);
    t.set_parent("org", Some("g"), false);
    t.set_limits("org", &[("cores", 4)]);
    t.ok("org", reserve_cmd(1, &[("cores", 1)]));
    t.ok("org", commit(1));
    t.ok("c", reserve_cmd(2, &[("cores", 2)]));
    t.ok("c", commit(2));
    t.ok("c", reserve_cmd(3, &[("cores", 2)]));

    let standing = ResourceStanding {
        limit: Limit::new(4).unwrap(),
        in_use: 3,
        reserved: 2,
    };
    assert_eq!(
        t.decide_parent("c", Some("org"), false),
        Err(Refusal::LimitBelowUsage([(r("cores"), standing)].into()))
    );
    let decision = t.set_parent("c", Some("org"), true);
    assert_eq!(
        decision.own,
        vec![Event::ParentSet {
            parent: Some(p("org")),
            forced: true
        }]
    );
    let joined = Event::DescendantsJoined {
        members: vec![SubtreeMember {
            project: p("c"),
            parent: p("org"),
            in_use: [(r("cores"), 2)].into(),
            holds: vec![DescendantHold {
                reservation_id: id(3),
                deltas: deltas(&[("cores", 2)]),
                expires_at: t0() + Duration::hours(1),
            }],
        }],
    };
    assert_eq!(
        decision.ancestors,
        vec![(p("org"), vec![joined.clone()]), (p("g"), vec![joined])]
    );
    assert_eq!(t.state("c").parent, Some(p("org")));
    assert_eq!(t.subtree("org", "cores"), (3, 2));
    assert_eq!(t.subtree("g", "cores"), (3, 2));

    // Over the forced limit: growth anywhere under org is denied.
    let d = t.reserve("c", 4, &[("cores", 1)]);
    assert!(matches!(
        &d.answer,
        Err(Refusal::OverQuota { overs, ancestor_overs: over, .. })
            if overs.is_empty() && over == &ancestor_overs(&[("org", &["cores"])])
    ));
    let d = t.reserve("org", 5, &[("cores", 1)]);
    assert!(matches!(
        &d.answer,
        Err(Refusal::OverQuota { overs, .. }) if overs == &vec![r("cores")]
    ));
    // Until usage falls: c gives its hold back, and there is room for one.
    t.ok("c", release(3));
    assert_eq!(t.subtree("org", "cores"), (3, 0));
    t.ok("c", reserve_cmd(6, &[("cores", 1)]));
    assert!(t.reserve("c", 7, &[("cores", 1)]).answer.is_err());

    // A new grandparent's limit: x (4 in use) cannot join under org's sibling below g.
    let mut t = Tree::new(&[("cores", 100)], &["g", "q", "x"]);
    t.set_parent("q", Some("g"), false);
    t.set_limits("g", &[("cores", 3)]);
    t.ok("x", reserve_cmd(1, &[("cores", 4)]));
    t.ok("x", commit(1));
    let standing = ResourceStanding {
        limit: Limit::new(3).unwrap(),
        in_use: 4,
        reserved: 0,
    };
    assert_eq!(
        t.decide_parent("x", Some("q"), false),
        Err(Refusal::LimitBelowUsage([(r("cores"), standing)].into()))
    );
}

/// Setting the parent a project already has (or removing none) records nothing; a parent that
/// fits is recorded unforced even when force is asked.
#[test]
fn setting_the_same_parent_again_records_nothing() {
    let mut t = Tree::new(&[("cores", 10)], &["org", "c"]);
    assert_eq!(
        t.decide_parent("c", None, false),
        Ok(ParentDecision::default())
    );
    let decision = t.set_parent("c", Some("org"), true);
    assert_eq!(
        decision.own,
        vec![Event::ParentSet {
            parent: Some(p("org")),
            forced: false
        }]
    );
    for force in [false, true] {
        assert_eq!(
            t.decide_parent("c", Some("org"), force),
            Ok(ParentDecision::default())
        );
    }
}

/// Removing a parent records `DescendantsLeft` in each old ancestor (the project and its
/// descendants), and their subtree totals drop by what left.
#[test]
fn removing_the_parent_takes_the_usage_out_of_every_old_ancestor() {
    let mut t = Tree::new(&[("cores", 100)], &["g", "p", "c"]);
    t.set_parent("p", Some("g"), false);
    t.set_parent("c", Some("p"), false);
    t.ok("g", reserve_cmd(1, &[("cores", 1)]));
    t.ok("p", reserve_cmd(2, &[("cores", 2)]));
    t.ok("p", commit(2));
    t.ok("c", reserve_cmd(3, &[("cores", 3)]));
    t.ok("c", commit(3));
    t.ok("c", reserve_cmd(4, &[("cores", 1)]));
    assert_eq!(t.subtree("g", "cores"), (5, 2));
    assert_eq!(t.subtree("p", "cores"), (5, 1));

    let decision = t.set_parent("c", None, false);
    let left = |names: &[&str]| Event::DescendantsLeft {
        projects: names.iter().map(|n| p(n)).collect(),
    };
    assert_eq!(
        decision,
        ParentDecision {
            own: vec![Event::ParentSet {
                parent: None,
                forced: false
            }],
            ancestors: vec![(p("p"), vec![left(&["c"])]), (p("g"), vec![left(&["c"])])],
        }
    );
    assert_eq!(t.state("c").parent, None);
    assert_eq!(t.subtree("g", "cores"), (2, 1));
    assert_eq!(t.subtree("p", "cores"), (2, 0));
    assert!(!t.state("g").subtree().contains(&p("c")));
    // What c does now is its own business: its old ancestors record nothing of it.
    let versions = (t.state("g").version, t.state("p").version);
    t.ok("c", commit(4));
    assert_eq!((t.state("g").version, t.state("p").version), versions);
    assert_eq!(t.subtree("g", "cores"), (2, 1));

    // Back under p, then p leaves g: g loses p and c with all they use.
    t.set_parent("c", Some("p"), false);
    assert_eq!(t.subtree("g", "cores"), (6, 1));
    let decision = t.set_parent("p", None, false);
    assert_eq!(decision.ancestors, vec![(p("g"), vec![left(&["p", "c"])])]);
    assert_eq!(t.subtree("g", "cores"), (0, 1));
    assert!(t.state("g").subtree().is_empty());
    assert_eq!(t.subtree("p", "cores"), (6, 0));
}

/// Re-parenting c (with in_use and a hold) from a to its sibling b under the same org: a's
/// subtree loses them, b's gains them, and org's totals do not move (org, at its limit, is not
/// a new ancestor, so rule 6 does not stop the move).
#[test]
fn re_parenting_moves_holds_and_usage_to_the_new_parent() {
    let mut t = Tree::new(&[("cores", 100)], &["org", "a", "b", "c"]);
    t.set_parent("a", Some("org"), false);
    t.set_parent("b", Some("org"), false);
    t.set_parent("c", Some("a"), false);
    t.ok("c", reserve_cmd(1, &[("cores", 3)]));
    t.ok("c", commit(1));
    t.ok("c", reserve_cmd(2, &[("cores", 2)]));
    t.set_limits("org", &[("cores", 5)]);
    t.set_limits("b", &[("cores", 5)]);
    assert_eq!(t.subtree("a", "cores"), (3, 2));

    let decision = t.set_parent("c", Some("b"), false);
    let member = SubtreeMember {
        project: p("c"),
        parent: p("b"),
        in_use: [(r("cores"), 3)].into(),
        holds: vec![DescendantHold {
            reservation_id: id(2),
            deltas: deltas(&[("cores", 2)]),
            expires_at: t0() + Duration::hours(1),
        }],
    };
    let joined = Event::DescendantsJoined {
        members: vec![member],
    };
    let left = Event::DescendantsLeft {
        projects: vec![p("c")],
    };
    assert_eq!(
        decision.ancestors,
        vec![
            (p("a"), vec![left.clone()]),
            (p("org"), vec![left, joined.clone()]),
            (p("b"), vec![joined]),
        ]
    );
    assert_eq!(t.subtree("a", "cores"), (0, 0));
    assert_eq!(t.subtree("b", "cores"), (3, 2));
    assert_eq!(t.subtree("org", "cores"), (3, 2));
    let (_, c) = t
        .state("org")
        .subtree()
        .members()
        .find(|(id, _)| **id == p("c"))
        .unwrap();
    assert_eq!(c.parent, p("b"));

    // c's next commit moves b and org, not a.
    t.ok("c", commit(2));
    assert_eq!(t.subtree("a", "cores"), (0, 0));
    assert_eq!(t.subtree("b", "cores"), (5, 0));
    assert_eq!(t.subtree("org", "cores"), (5, 0));
}

/// Moving p (with its child c) from g1 to g2: rule 6 judges g2 on what the whole moving
/// subtree uses; once allowed, g1 loses both and g2 gains both, two levels deep.
#[test]
fn moving_a_subtree_to_another_root_brings_its_descendants() {
    let mut t = Tree::new(&[("cores", 100)], &["g1", "g2", "p", "c"]);
    t.set_parent("p", Some("g1"), false);
    t.set_parent("c", Some("p"), false);
    t.ok("p", reserve_cmd(1, &[("cores", 1)]));
    t.ok("p", commit(1));
    t.ok("c", reserve_cmd(2, &[("cores", 3)]));
    t.ok("c", commit(2));
    t.ok("c", reserve_cmd(3, &[("cores", 1)]));
    t.set_limits("g2", &[("cores", 4)]);
    let standing = ResourceStanding {
        limit: Limit::new(4).unwrap(),
        in_use: 4,
        reserved: 1,
    };
    assert_eq!(
        t.decide_parent("p", Some("g2"), false),
        Err(Refusal::LimitBelowUsage([(r("cores"), standing)].into()))
    );
    t.set_limits("g2", &[("cores", 5)]);
    t.set_parent("p", Some("g2"), false);
    assert_eq!(t.subtree("g1", "cores"), (0, 0));
    assert!(t.state("g1").subtree().is_empty());
    assert_eq!(t.subtree("g2", "cores"), (4, 1));
    assert_eq!(t.state("g2").subtree().height(&p("g2")), 2);
    // The grandchild is capped by its new grandparent.
    let d = t.reserve("c", 4, &[("cores", 1)]);
    assert!(matches!(
        &d.answer,
        Err(Refusal::OverQuota { ancestor_overs: over, .. })
            if over == &ancestor_overs(&[("g2", &["cores"])])
    ));
    t.ok("c", release(3));
    t.ok("c", reserve_cmd(5, &[("cores", 1)]));
    assert_eq!(t.subtree("g2", "cores"), (4, 1));
}

/// A project may have at most `MAX_DESCENDANTS` descendants: one more is refused, naming it.
#[test]
fn too_many_descendants_is_refused() {
    let names: Vec<String> = (0..=MAX_DESCENDANTS).map(|n| format!("c{n}")).collect();
    let mut all: Vec<&str> = names.iter().map(String::as_str).collect();
    all.push("org");
    let mut t = Tree::new(&[("cores", 10)], &all);
    for child in &names[..MAX_DESCENDANTS] {
        t.set_parent(child, Some("org"), false);
    }
    assert_eq!(t.state("org").subtree().len(), MAX_DESCENDANTS);
    assert_eq!(
        t.decide_parent(&names[MAX_DESCENDANTS], Some("org"), true),
        Err(Refusal::Tree(TreeRefusal::TooManyDescendants {
            ancestor: p("org"),
            count: MAX_DESCENDANTS + 1
        }))
    );
}
