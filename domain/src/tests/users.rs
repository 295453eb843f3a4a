//! Rule 8 (users inside a project) and rule 10's floor at zero: given events, when command,
//! then events or refusal.

use super::*;

fn alice() -> UserId {
    UserId::parse("alice").unwrap()
}

fn bob() -> UserId {
    UserId::parse("bob").unwrap()
}

fn user_reserve(n: u128, user: &UserId, pairs: &[(&str, i64)]) -> Command {
    Command::Reserve {
        user: Some(user.clone()),
        count: None,
        reservation_id: id(n),
        deltas: deltas(pairs),
        expires_in_s: 3600,
    }
}

fn user_limits(user: &UserId, pairs: &[(&str, i64)], force: bool) -> Command {
    Command::SetUserLimits {
        user: user.clone(),
        limits: limits(pairs),
        force,
    }
}

fn user_usage(g: &Given, user: &UserId, res: &str) -> Usage {
    g.state.user_usage(user, &r(res), g.now)
}

/// Given instances 10 and alice capped at 2, when alice asks three times, then the third is
/// denied for alice alone (`user_overs`, not `overs`), and the denial is audited with its user.
#[test]
fn a_user_limit_caps_the_user_inside_the_project() {
    let mut g = Given::defaults(&[("instances", 10)]);
    g.ok(user_limits(&alice(), &[("instances", 2)], false));
    g.ok(user_reserve(1, &alice(), &[("instances", 1)]));
    g.ok(user_reserve(2, &alice(), &[("instances", 1)]));
    let denied = g.when(&user_reserve(3, &alice(), &[("instances", 1)]));
    let Err(Refusal::OverQuota { overs, user, .. }) = &denied.answer else {
        panic!("{:?}", denied.answer)
    };
    assert!(overs.is_empty());
    let user = user.as_ref().unwrap();
    assert_eq!(user.overs, vec![r("instances")]);
    let standing = user.standing[&r("instances")];
    assert_eq!((standing.limit.value(), standing.reserved), (2, 2));
    assert!(matches!(
        denied.events.as_slice(),
        [Event::ReservationDenied { user: Some(u), user_overs, overs, .. }]
            if u == &alice() && user_overs == &vec![r("instances")] && overs.is_empty()
    ));
    // A user without an override of its own has no cap but the project's.
    for n in 10..18 {
        g.ok(user_reserve(n, &bob(), &[("instances", 1)]));
    }
    let full = g.when(&user_reserve(18, &bob(), &[("instances", 1)]));
    assert!(matches!(
        full.answer,
        Err(Refusal::OverQuota { ref overs, .. }) if overs == &vec![r("instances")]
    ));
    assert_eq!(user_usage(&g, &bob(), "instances").reserved, 8);
    assert_eq!(g.usage("instances").reserved, 10);
}

/// The seed bug per user: twenty boots by one user with a user limit of 5 grant exactly 5.
#[test]
fn twenty_boots_by_one_user_grant_exactly_its_limit() {
    let mut g = Given::defaults(&[("instances", 100)]);
    g.ok(user_limits(&alice(), &[("instances", 5)], false));
    let granted = (0..20)
        .filter(|n| {
            let d = g.when(&user_reserve(*n, &alice(), &[("instances", 1)]));
            g.apply(&d.events);
            d.answer.is_ok()
        })
        .count();
    assert_eq!(granted, 5);
}

/// Rules 3 and 9 per user: a counted reserve takes the largest count that fits the user's
/// cap, and a user cannot give back more than it holds.
#[test]
fn counts_and_underflows_are_judged_per_user() {
    let mut g = Given::defaults(&[("cores", 100), ("ram", -1)]);
    g.ok(user_limits(&alice(), &[("cores", 7)], false));
    let counted = Command::Reserve {
        user: Some(alice()),
        count: Some(CountRange::new(1, 10).unwrap()),
        reservation_id: id(1),
        deltas: deltas(&[("cores", 2)]),
        expires_in_s: 3600,
    };
    g.ok(counted);
    assert_eq!(
        g.state.reservation(&id(1)).unwrap().deltas,
        deltas(&[("cores", 6)])
    );
    g.ok(commit(1));
    assert_eq!(user_usage(&g, &alice(), "cores").in_use, 6);
    // The project has 6 cores in use, but bob none: bob cannot give any back.
    assert_eq!(
        g.when(&user_reserve(2, &bob(), &[("cores", -1)])).answer,
        Err(Refusal::UsageUnderflow(vec![r("cores")]))
    );
    // Rule 2 per user: the refusal names every resource below zero, the project's (ram,
    // which nobody uses) and the user's (cores, which only alice uses).
    assert_eq!(
        g.when(&user_reserve(4, &bob(), &[("cores", -1), ("ram", -1)]))
            .answer,
        Err(Refusal::UsageUnderflow(vec![r("cores"), r("ram")]))
    );
    g.ok(user_reserve(3, &alice(), &[("cores", -6)]));
    g.ok(commit(3));
    assert_eq!(user_usage(&g, &alice(), "cores").in_use, 0);
    assert_eq!(g.usage("cores").in_use, 0);
}

/// Rule 5 per user: the user is part of a reserve's body.
#[test]
fn the_user_is_part_of_an_idempotent_reserve() {
    let mut g = Given::defaults(&[("cores", 10)]);
    g.ok(user_reserve(1, &alice(), &[("cores", 1)]));
    assert!(g.ok(user_reserve(1, &alice(), &[("cores", 1)])).is_empty());
    assert_eq!(
        g.when(&user_reserve(1, &bob(), &[("cores", 1)])).answer,
        Err(Refusal::IdempotencyMismatch)
    );
    assert_eq!(
        g.when(&reserve_cmd(1, &[("cores", 1)])).answer,
        Err(Refusal::IdempotencyMismatch)
    );
}

/// Rule 6 per user: lowering a user's limit below its usage needs force; a reset removes the
/// user's overrides (and records nothing when it has none).
#[test]
fn a_user_limit_below_its_usage_needs_force() {
    let mut g = Given::defaults(&[("cores", 10)]);
    g.ok(user_reserve(1, &alice(), &[("cores", 4)]));
    assert!(matches!(
        g.when(&user_limits(&alice(), &[("cores", 3)], false)).answer,
        Err(Refusal::LimitBelowUsage(ref below)) if below.contains_key(&r("cores"))
    ));
    // Bob uses nothing: the same limit is fine for him.
    g.ok(user_limits(&bob(), &[("cores", 3)], false));
    let forced = g.ok(user_limits(&alice(), &[("cores", 3)], true));
    assert!(matches!(
        forced.as_slice(),
        [Event::UserLimitsSet { forced: true, .. }]
    ));
    assert!(g
        .when(&user_reserve(2, &alice(), &[("cores", 1)]))
        .answer
        .is_err());
    let reset = g.ok(Command::ResetUserLimits { user: alice() });
    assert_eq!(reset, vec![Event::UserLimitsReset { user: alice() }]);
    assert_eq!(g.state.user_override(&alice(), &r("cores")), None);
    assert!(g.ok(Command::ResetUserLimits { user: alice() }).is_empty());
    g.ok(user_reserve(2, &alice(), &[("cores", 1)]));
}

/// Rule 10 for a user: the user's in_use is set, the project's moves by as much, and an equal
/// value records nothing.
#[test]
fn a_user_correction_moves_the_project_by_as_much() {
    let mut g = Given::defaults(&[("cores", 10)]);
    g.ok(user_reserve(1, &alice(), &[("cores", 4)]));
    g.ok(commit(1));
    g.ok(reserve_cmd(2, &[("cores", 3)]));
    g.ok(commit(2));
    let correct = |n: i64| Command::CorrectUsage {
        user: Some(alice()),
        in_use: [(r("cores"), n)].into(),
        reason: Reason::parse("recount").unwrap(),
    };
    let events = g.ok(correct(1));
    assert_eq!(
        events,
        vec![Event::UsageCorrected {
            resource: r("cores"),
            in_use_before: 4,
            in_use_after: 1,
            reason: "recount".into(),
            user: Some(alice()),
        }]
    );
    assert_eq!(user_usage(&g, &alice(), "cores").in_use, 1);
    assert_eq!(g.usage("cores").in_use, 4);
    assert!(g.ok(correct(1)).is_empty());
}

/// Rule 10: a release after a correction stops at zero, for the project and for the user.
#[test]
fn a_release_after_a_correction_stops_at_zero() {
    let mut g = Given::defaults(&[("cores", 10)]);
    g.ok(user_reserve(1, &alice(), &[("cores", 3)]));
    g.ok(commit(1));
    g.ok(Command::CorrectUsage {
        user: None,
        in_use: [(r("cores"), 1)].into(),
        reason: Reason::parse("recount").unwrap(),
    });
    g.ok(release(1));
    assert_eq!(g.usage("cores").in_use, 0);
    assert_eq!(user_usage(&g, &alice(), "cores").in_use, 0);
}
