//! Given events, when a command, then events or a refusal: one test per rule of SPEC.md,
//! including the cases Nova's quota code got wrong.

use chrono::{Duration, TimeZone, Utc};
use uuid::Uuid;

use crate::*;

mod corrections;
mod counts;
mod tree;
mod users;

pub(crate) fn r(s: &str) -> ResourceName {
    ResourceName::parse(s).unwrap()
}

pub(crate) fn id(n: u128) -> ReservationId {
    ReservationId(Uuid::from_u128(n))
}

pub(crate) fn t0() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
}

pub(crate) fn deltas(pairs: &[(&str, i64)]) -> Deltas {
    Deltas::new(pairs.iter().map(|(k, v)| (r(k), *v)).collect()).unwrap()
}

pub(crate) fn limits(pairs: &[(&str, i64)]) -> Limits {
    pairs
        .iter()
        .map(|(k, v)| (r(k), Limit::new(*v).unwrap()))
        .collect()
}

/// A project with defaults, built by folding events as the ledger would.
pub(crate) struct Given {
    pub(crate) defaults: Defaults,
    pub(crate) state: ProjectState,
    pub(crate) now: Timestamp,
}

impl Given {
    pub(crate) fn defaults(pairs: &[(&str, i64)]) -> Self {
        let mut defaults = Defaults::default();
        defaults.apply(&Event::DefaultLimitsSet {
            limits: limits(pairs),
        });
        Given {
            defaults,
            state: ProjectState::new(ProjectId::parse("p").unwrap()),
            now: t0(),
        }
    }

    /// Decide and apply; panics unless granted.
    pub(crate) fn ok(&mut self, command: Command) -> Vec<Event> {
        let d = self.when(&command);
        assert!(d.answer.is_ok(), "{command:?} refused: {:?}", d.answer);
        self.apply(&d.events);
        d.events
    }

    pub(crate) fn apply(&mut self, events: &[Event]) {
        for e in events {
            self.state.apply(e, self.now);
        }
    }

    pub(crate) fn when(&self, command: &Command) -> Decision {
        decide(command, &self.state, &self.defaults, self.now)
    }

    fn reserve(&mut self, n: u128, pairs: &[(&str, i64)]) -> Decision {
        let d = self.when(&reserve_cmd(n, pairs));
        self.apply(&d.events);
        d
    }

    pub(crate) fn usage(&self, res: &str) -> Usage {
        self.state.usage(&r(res), self.now)
    }
}

pub(crate) fn reserve_cmd(n: u128, pairs: &[(&str, i64)]) -> Command {
    Command::Reserve {
        user: None,
        count: None,
        reservation_id: id(n),
        deltas: deltas(pairs),
        expires_in_s: 3600,
    }
}

pub(crate) fn commit(n: u128) -> Command {
    Command::Commit {
        reservation_id: id(n),
    }
}

pub(crate) fn release(n: u128) -> Command {
    Command::Release {
        reservation_id: id(n),
    }
}

// Rule 1: in_use + reserved + delta <= limit.

#[test]
fn reserve_within_limit_is_held() {
    let mut g = Given::defaults(&[("instances", 10)]);
    let events = g.ok(reserve_cmd(1, &[("instances", 3)]));
    assert_eq!(
        events,
        vec![Event::ReservationRequested {
            user: None,
            count: None,
            reservation_id: id(1),
            deltas: deltas(&[("instances", 3)]),
            expires_at: t0() + Duration::hours(1),
        }]
    );
    assert_eq!(
        g.usage("instances"),
        Usage {
            in_use: 0,
            reserved: 3,
            releasing: 0
        }
    );
}

#[test]
fn the_seed_bug_sequentially_twenty_boots_grant_exactly_ten() {
    let mut g = Given::defaults(&[("instances", 10)]);
    let granted = (0..20)
        .filter(|n| g.reserve(*n, &[("instances", 1)]).answer.is_ok())
        .count();
    assert_eq!(granted, 10);
    assert_eq!(g.usage("instances").reserved, 10);
}

#[test]
fn holds_and_in_use_both_count() {
    let mut g = Given::defaults(&[("cores", 8)]);
    g.ok(reserve_cmd(1, &[("cores", 4)]));
    g.ok(commit(1));
    g.ok(reserve_cmd(2, &[("cores", 3)]));
    let d = g.when(&reserve_cmd(3, &[("cores", 2)]));
    assert!(matches!(d.answer, Err(Refusal::OverQuota { .. })));
    assert!(g.when(&reserve_cmd(4, &[("cores", 1)])).answer.is_ok());
}

#[test]
fn exactly_at_the_limit_is_allowed() {
    let mut g = Given::defaults(&[("gpus", 2)]);
    g.ok(reserve_cmd(1, &[("gpus", 2)]));
    assert_eq!(g.usage("gpus").reserved, 2);
}

#[test]
fn zero_limit_denies_any_positive_delta() {
    let g = Given::defaults(&[("gpus", 0)]);
    assert!(matches!(
        g.when(&reserve_cmd(1, &[("gpus", 1)])).answer,
        Err(Refusal::OverQuota { .. })
    ));
    // A zero delta asks for nothing.
    assert!(g.when(&reserve_cmd(2, &[("gpus", 0)])).answer.is_ok());
}

#[test]
fn unlimited_never_denies() {
    let mut g = Given::defaults(&[("ram", -1)]);
    g.ok(reserve_cmd(1, &[("ram", i64::MAX / 2)]));
    g.ok(reserve_cmd(2, &[("ram", i64::MAX / 4)]));
}

#[test]
fn overflow_is_an_invalid_input_not_a_wrap() {
    let mut g = Given::defaults(&[("ram", -1)]);
    g.ok(reserve_cmd(1, &[("ram", i64::MAX)]));
    let d = g.when(&reserve_cmd(2, &[("ram", 1)]));
    assert_eq!(
        d.answer,
        Err(Refusal::Invalid(InvalidInput::Overflow(r("ram"))))
    );
    assert!(d.events.is_empty());
}

// Rule 2: all-or-nothing; the denial names every resource over, sorted, and is audited.

#[test]
fn over_on_several_resources_lists_all_and_reserves_nothing() {
    let mut g = Given::defaults(&[("instances", 10), ("cores", 20), ("ram", 51200)]);
    g.ok(reserve_cmd(
        1,
        &[("instances", 9), ("cores", 19), ("ram", 1000)],
    ));
    let d = g.when(&reserve_cmd(
        2,
        &[("instances", 2), ("cores", 2), ("ram", 1)],
    ));
    let Err(Refusal::OverQuota {
        overs, standing, ..
    }) = &d.answer
    else {
        panic!("expected over-quota, got {:?}", d.answer);
    };
    assert_eq!(overs, &vec![r("cores"), r("instances")]);
    assert_eq!(
        standing[&r("cores")],
        ResourceStanding {
            limit: Limit::new(20).unwrap(),
            in_use: 0,
            reserved: 19
        }
    );
    assert_eq!(standing[&r("cores")].headroom(), Some(1));
    assert_eq!(standing[&r("ram")].headroom(), Some(50200));
    // The denial is recorded, and applying it reserves nothing.
    assert!(matches!(
        d.events.as_slice(),
        [Event::ReservationDenied { overs, .. }] if overs == &vec![r("cores"), r("instances")]
    ));
    g.apply(&d.events);
    assert_eq!(g.usage("ram").reserved, 1000);
    assert_eq!(g.state.reservation(&id(2)), None);
}

// Rule 3: negative deltas are never denied for quota; underflow is refused.

#[test]
fn reductions_are_allowed_while_over_quota() {
    let mut g = Given::defaults(&[("instances", 10)]);
    g.ok(reserve_cmd(1, &[("instances", 8)]));
    g.ok(commit(1));
    g.ok(Command::SetLimits {
        limits: limits(&[("instances", 2)]),
        force: true,
    });
    // Over quota now: growth is denied, shrinking is not.
    assert!(g.when(&reserve_cmd(2, &[("instances", 1)])).answer.is_err());
    g.ok(reserve_cmd(3, &[("instances", -3)]));
    // Negative deltas change nothing until commit.
    assert_eq!(g.usage("instances").in_use, 8);
    g.ok(commit(3));
    assert_eq!(g.usage("instances").in_use, 5);
}

#[test]
fn usage_underflow_counts_other_held_reductions() {
    let mut g = Given::defaults(&[("cores", 10)]);
    g.ok(reserve_cmd(1, &[("cores", 4)]));
    g.ok(commit(1));
    g.ok(reserve_cmd(2, &[("cores", -3)]));
    let d = g.when(&reserve_cmd(3, &[("cores", -2)]));
    assert_eq!(d.answer, Err(Refusal::UsageUnderflow(vec![r("cores")])));
    assert!(d.events.is_empty());
    assert!(g.when(&reserve_cmd(4, &[("cores", -1)])).answer.is_ok());
}

#[test]
fn freeing_or_committing_never_takes_in_use_below_zero() {
    let mut g = Given::defaults(&[("cores", 10)]);
    g.ok(reserve_cmd(1, &[("cores", 1)]));
    g.ok(commit(1));
    g.ok(reserve_cmd(2, &[("cores", -1)]));
    // Freeing the +1 would leave the held -1 with nothing to reduce.
    assert_eq!(
        g.when(&release(1)).answer,
        Err(Refusal::UsageUnderflow(vec![r("cores")]))
    );
    // A correction to zero, then committing the -1, would go below zero too.
    g.ok(Command::CorrectUsage {
        user: None,
        in_use: [(r("cores"), 0)].into(),
        reason: Reason::parse("recount").unwrap(),
    });
    assert_eq!(
        g.when(&commit(2)).answer,
        Err(Refusal::UsageUnderflow(vec![r("cores")]))
    );
}

#[test]
fn underflow_from_nothing() {
    let g = Given::defaults(&[("cores", 10)]);
    assert_eq!(
        g.when(&reserve_cmd(1, &[("cores", -1)])).answer,
        Err(Refusal::UsageUnderflow(vec![r("cores")]))
    );
}

// Rule 4: expired holds stop counting at once; commit after expiry is refused.

#[test]
fn expired_holds_do_not_count() {
    let mut g = Given::defaults(&[("instances", 1)]);
    g.ok(reserve_cmd(1, &[("instances", 1)]));
    assert!(g.when(&reserve_cmd(2, &[("instances", 1)])).answer.is_err());
    g.now += Duration::hours(1);
    assert_eq!(g.usage("instances").reserved, 0);
    assert!(g.when(&reserve_cmd(2, &[("instances", 1)])).answer.is_ok());
}

#[test]
fn commit_after_expiry_is_refused_and_the_expiry_recorded() {
    let mut g = Given::defaults(&[("instances", 5)]);
    g.ok(reserve_cmd(1, &[("instances", 1)]));
    g.now += Duration::hours(2);
    let d = g.when(&commit(1));
    assert_eq!(d.answer, Err(Refusal::ReservationExpired));
    assert_eq!(
        d.events,
        vec![Event::ReservationReleased {
            reservation_id: id(1),
            reason: ReleaseReason::Expired
        }]
    );
    g.apply(&d.events);
    // Still refused once the release is recorded, and nothing more is appended.
    let again = g.when(&commit(1));
    assert_eq!(again.answer, Err(Refusal::ReservationExpired));
    assert!(again.events.is_empty());
    assert_eq!(g.usage("instances").in_use, 0);
}

#[test]
fn the_sweeper_releases_exactly_the_expired_holds() {
    let mut g = Given::defaults(&[("instances", 5)]);
    g.ok(Command::Reserve {
        user: None,
        count: None,
        reservation_id: id(1),
        deltas: deltas(&[("instances", 1)]),
        expires_in_s: 10,
    });
    g.ok(Command::Reserve {
        user: None,
        count: None,
        reservation_id: id(2),
        deltas: deltas(&[("instances", 1)]),
        expires_in_s: 100,
    });
    g.ok(reserve_cmd(3, &[("instances", 1)]));
    g.ok(commit(3));
    g.now += Duration::seconds(10);
    let events = g.ok(Command::Expire);
    assert_eq!(
        events,
        vec![Event::ReservationReleased {
            reservation_id: id(1),
            reason: ReleaseReason::Expired
        }]
    );
    assert!(g.when(&Command::Expire).events.is_empty());
}

// Rule 5: idempotent commit, release and reserve-with-id.

#[test]
fn commit_and_release_are_idempotent() {
    let mut g = Given::defaults(&[("instances", 5)]);
    g.ok(reserve_cmd(1, &[("instances", 2)]));
    assert_eq!(g.ok(commit(1)).len(), 1);
    assert!(g.ok(commit(1)).is_empty());
    assert_eq!(g.usage("instances").in_use, 2);
    let freed = g.ok(release(1));
    assert_eq!(
        freed,
        vec![Event::ReservationReleased {
            reservation_id: id(1),
            reason: ReleaseReason::Freed
        }]
    );
    assert!(g.ok(release(1)).is_empty());
    assert_eq!(g.usage("instances").in_use, 0);
}

/// Freeing a committed reduction gives its usage back, so rule 1 bounds it like a grant: it
/// must fit under the limit with what is reserved (found by the model property below: shrink
/// by 1, fill the room, then free the shrink).
#[test]
fn freeing_a_committed_reduction_must_fit_under_the_limit() {
    let mut g = Given::defaults(&[("cores", 6)]);
    g.ok(reserve_cmd(1, &[("cores", 4)]));
    g.ok(commit(1));
    g.ok(reserve_cmd(2, &[("cores", -1)]));
    g.ok(commit(2));
    g.ok(reserve_cmd(3, &[("cores", 3)]));
    assert_eq!((g.usage("cores").in_use, g.usage("cores").reserved), (3, 3));

    let d = g.when(&release(2));
    assert!(d.events.is_empty());
    let Err(Refusal::OverQuota {
        overs, standing, ..
    }) = d.answer
    else {
        panic!("expected over quota, got {:?}", d.answer);
    };
    assert_eq!(overs, vec![r("cores")]);
    assert_eq!(standing[&r("cores")].headroom(), Some(0));

    // Once the room is there, the reduction can be freed.
    g.ok(release(3));
    g.ok(release(2));
    assert_eq!(g.usage("cores").in_use, 4);
}

#[test]
fn release_of_a_hold_rolls_back_and_commit_then_fails() {
    let mut g = Given::defaults(&[("instances", 5)]);
    g.ok(reserve_cmd(1, &[("instances", 2)]));
    assert_eq!(
        g.ok(release(1)),
        vec![Event::ReservationReleased {
            reservation_id: id(1),
            reason: ReleaseReason::RolledBack
        }]
    );
    assert_eq!(g.usage("instances").reserved, 0);
    assert_eq!(g.when(&commit(1)).answer, Err(Refusal::ReservationReleased));
}

#[test]
fn reserve_with_the_same_id_and_body_returns_the_original() {
    let mut g = Given::defaults(&[("instances", 1)]);
    g.ok(reserve_cmd(1, &[("instances", 1)]));
    // The quota is full, but the retry is the same request: granted, nothing appended.
    let d = g.when(&reserve_cmd(1, &[("instances", 1)]));
    assert_eq!(d.answer, Ok(Outcome::Reservation(id(1))));
    assert!(d.events.is_empty());
    // Even after commit.
    g.ok(commit(1));
    assert!(g.when(&reserve_cmd(1, &[("instances", 1)])).answer.is_ok());
}

#[test]
fn reserve_with_the_same_id_and_another_body_is_a_mismatch() {
    let mut g = Given::defaults(&[("instances", 5)]);
    g.ok(reserve_cmd(1, &[("instances", 1)]));
    assert_eq!(
        g.when(&reserve_cmd(1, &[("instances", 2)])).answer,
        Err(Refusal::IdempotencyMismatch)
    );
    let other_expiry = Command::Reserve {
        user: None,
        count: None,
        reservation_id: id(1),
        deltas: deltas(&[("instances", 1)]),
        expires_in_s: 60,
    };
    assert_eq!(
        g.when(&other_expiry).answer,
        Err(Refusal::IdempotencyMismatch)
    );
}

#[test]
fn unknown_reservations_are_not_found() {
    let g = Given::defaults(&[("instances", 5)]);
    assert_eq!(g.when(&commit(9)).answer, Err(Refusal::NotFound));
    assert_eq!(g.when(&release(9)).answer, Err(Refusal::NotFound));
}

// Rule 6: lowering a limit below usage needs force.

#[test]
fn lowering_below_usage_without_force_is_refused() {
    let mut g = Given::defaults(&[("cores", 10)]);
    g.ok(reserve_cmd(1, &[("cores", 4)]));
    g.ok(commit(1));
    g.ok(reserve_cmd(2, &[("cores", 2)]));
    let d = g.when(&Command::SetLimits {
        limits: limits(&[("cores", 5)]),
        force: false,
    });
    let Err(Refusal::LimitBelowUsage(resources)) = &d.answer else {
        panic!("{:?}", d.answer)
    };
    assert_eq!(resources.keys().collect::<Vec<_>>(), vec![&r("cores")]);
    assert!(d.events.is_empty());
    // Down to usage is fine.
    g.ok(Command::SetLimits {
        limits: limits(&[("cores", 6)]),
        force: false,
    });
}

#[test]
fn forced_lower_limit_denies_growth_until_usage_falls() {
    let mut g = Given::defaults(&[("cores", 10)]);
    g.ok(reserve_cmd(1, &[("cores", 6)]));
    g.ok(commit(1));
    let events = g.ok(Command::SetLimits {
        limits: limits(&[("cores", 4)]),
        force: true,
    });
    assert_eq!(
        events,
        vec![Event::LimitsSet {
            limits: limits(&[("cores", 4)]),
            forced: true
        }]
    );
    assert!(g.when(&reserve_cmd(2, &[("cores", 1)])).answer.is_err());
    g.ok(release(1));
    g.ok(reserve_cmd(3, &[("cores", 4)]));
}

#[test]
fn raising_a_limit_is_never_refused() {
    let mut g = Given::defaults(&[("cores", 10)]);
    g.ok(reserve_cmd(1, &[("cores", 8)]));
    g.ok(Command::SetLimits {
        limits: limits(&[("cores", 2)]),
        force: true,
    });
    // Still below usage, but higher than the current limit: not a lowering.
    g.ok(Command::SetLimits {
        limits: limits(&[("cores", 5)]),
        force: false,
    });
}

#[test]
fn overrides_win_over_defaults_and_reset_restores_them() {
    let mut g = Given::defaults(&[("instances", 1)]);
    g.ok(Command::SetLimits {
        limits: limits(&[("instances", 3)]),
        force: false,
    });
    g.ok(reserve_cmd(1, &[("instances", 3)]));
    g.ok(release(1));
    assert_eq!(g.ok(Command::ResetLimits), vec![Event::LimitsReset]);
    assert!(g.when(&reserve_cmd(2, &[("instances", 2)])).answer.is_err());
    assert!(
        g.ok(Command::ResetLimits).is_empty(),
        "reset twice appends nothing"
    );
}

// Rule 7: unknown resources are refused, never unlimited.

#[test]
fn a_resource_without_default_is_unknown() {
    let g = Given::defaults(&[("instances", 10)]);
    let d = g.when(&reserve_cmd(
        1,
        &[("instances", 1), ("zebras", 1), ("gpu", 1)],
    ));
    assert_eq!(
        d.answer,
        Err(Refusal::UnknownResource(vec![r("gpu"), r("zebras")]))
    );
    assert!(d.events.is_empty());
    assert!(matches!(
        g.when(&Command::SetLimits {
            limits: limits(&[("zebras", 1)]),
            force: false
        })
        .answer,
        Err(Refusal::UnknownResource(_))
    ));
}

#[test]
fn expiry_bounds_are_checked() {
    let g = Given::defaults(&[("cores", 10)]);
    for bad in [0, MAX_EXPIRES_IN_S + 1] {
        let d = g.when(&Command::Reserve {
            user: None,
            count: None,
            reservation_id: id(1),
            deltas: deltas(&[("cores", 1)]),
            expires_in_s: bad,
        });
        assert!(matches!(
            d.answer,
            Err(Refusal::Invalid(InvalidInput::ExpiresIn(_)))
        ));
    }
}

#[test]
fn defaults_merge_and_skip_no_ops() {
    let mut defaults = Defaults::default();
    let events = decide_defaults(&limits(&[("instances", 10)]), &defaults).unwrap();
    for e in &events {
        defaults.apply(e);
    }
    let events = decide_defaults(&limits(&[("cores", 20)]), &defaults).unwrap();
    for e in &events {
        defaults.apply(e);
    }
    assert_eq!(defaults.limits, limits(&[("cores", 20), ("instances", 10)]));
    assert!(decide_defaults(&limits(&[("cores", 20)]), &defaults)
        .unwrap()
        .is_empty());
}

#[test]
fn positions_attach_to_the_status_event() {
    let mut g = Given::defaults(&[("cores", 10)]);
    let events = g.ok(reserve_cmd(1, &[("cores", 1)]));
    g.state.note_position(&events[0], 0, 41);
    assert_eq!(g.state.reservation(&id(1)).unwrap().position, Some(41));
    let events = g.ok(commit(1));
    assert_eq!(g.state.reservation(&id(1)).unwrap().position, None);
    g.state.note_position(&events[0], 1, 57);
    assert_eq!(g.state.reservation(&id(1)).unwrap().position, Some(57));
}

mod model {
    //! Property: over any sequence of commands at any times, the folded state never has a live
    //! positive usage above a capped limit unless a forced limit put it there.

    use super::*;
    use proptest::prelude::*;

    fn command() -> impl Strategy<Value = (u8, u128, i64, u32)> {
        (0u8..5, 0u128..6, -3i64..5, 1u32..50)
    }

    proptest! {
        #[test]
        fn no_sequence_oversubscribes(steps in proptest::collection::vec((command(), 0i64..20), 1..80)) {
            let mut g = Given::defaults(&[("cores", 6)]);
            for ((kind, n, amount, expires), advance_s) in steps {
                g.now += Duration::seconds(advance_s);
                let cmd = match kind {
                    0 | 1 => Command::Reserve { user: None, count: None, reservation_id: id(n), deltas: deltas(&[("cores", amount)]), expires_in_s: expires },
                    2 => commit(n),
                    3 => release(n),
                    _ => Command::Expire,
                };
                let d = g.when(&cmd);
                g.apply(&d.events);
                let u = g.usage("cores");
                prop_assert!(u.in_use >= 0, "in_use below zero: {u:?}");
                prop_assert!(u.in_use + u.reserved <= 6, "oversubscribed: {u:?}");
            }
            // Whatever the history, a snapshot of the state loads back as the same state.
            if let Some(snapshot) = g.state.to_snapshot() {
                let back = ProjectState::from_snapshot(g.state.project.clone(), &snapshot);
                prop_assert_eq!(back.as_ref(), Ok(&g.state));
            }
        }
    }
}
