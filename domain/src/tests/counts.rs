//! Rule 9: counted reserves.

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

/// Given instances 10 (3 held) and cores 20, when a reserve of 1 instance and 4 cores a unit
/// asks for 1 to 8 units, then 5 are granted (cores allow 20 / 4 = 5, instances 7): the
/// reservation records count 5 and the multiplied deltas.
#[test]
fn a_counted_reserve_gets_the_largest_count_that_fits() {
    let mut g = Given::defaults(&[("instances", 10), ("cores", 20)]);
    g.ok(reserve_cmd(1, &[("instances", 3)]));
    let events = g.ok(counted_cmd(2, &[("instances", 1), ("cores", 4)], 1, 8));
    assert_eq!(
        events,
        vec![Event::ReservationRequested {
            user: None,
            reservation_id: id(2),
            deltas: deltas(&[("instances", 5), ("cores", 20)]),
            expires_at: t0() + Duration::hours(1),
            count: Some(Counted {
                range: CountRange::new(1, 8).unwrap(),
                granted: 5,
            }),
        }]
    );
    assert_eq!(g.usage("instances").reserved, 8);
    // Room for 2 instances is left: a range up to 3 gets 2; up to 1 gets 1.
    let events = g.ok(counted_cmd(3, &[("instances", 1)], 1, 3));
    let Event::ReservationRequested { count, .. } = &events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(count.map(|c| c.granted), Some(2));
}

/// When even `min` units do not fit, then the reserve is denied (and audited) with the
/// largest count that would fit, 0 if none.
#[test]
fn a_counted_reserve_below_its_minimum_is_denied_with_max_count() {
    let g = Given::defaults(&[("instances", 10)]);
    let d = g.when(&counted_cmd(1, &[("instances", 3)], 4, 6));
    let Err(Refusal::OverQuota {
        overs, max_count, ..
    }) = &d.answer
    else {
        panic!("{:?}", d.answer)
    };
    assert_eq!(overs, &vec![r("instances")]);
    assert_eq!(*max_count, Some(3));
    let Event::ReservationDenied {
        deltas: asked,
        count,
        ..
    } = &d.events[0]
    else {
        panic!("{:?}", d.events)
    };
    assert_eq!(
        asked,
        &deltas(&[("instances", 12)]),
        "judged on the minimum"
    );
    assert_eq!(*count, Some(CountRange::new(4, 6).unwrap()));
    let none = g.when(&counted_cmd(2, &[("instances", 11)], 1, 2));
    assert!(matches!(
        none.answer,
        Err(Refusal::OverQuota {
            max_count: Some(0),
            ..
        })
    ));
}

/// A counted reserve is idempotent with its `reservation_id`, the count range part of the body.
#[test]
fn a_counted_reserve_repeats_only_with_the_same_range() {
    let mut g = Given::defaults(&[("instances", 10)]);
    g.ok(counted_cmd(1, &[("instances", 2)], 1, 3));
    assert!(g.ok(counted_cmd(1, &[("instances", 2)], 1, 3)).is_empty());
    for other in [
        counted_cmd(1, &[("instances", 2)], 1, 4),
        counted_cmd(1, &[("instances", 6)], 1, 3),
        reserve_cmd(1, &[("instances", 6)]),
    ] {
        assert_eq!(g.when(&other).answer, Err(Refusal::IdempotencyMismatch));
    }
}

#[test]
fn count_ranges_are_checked() {
    assert!(CountRange::new(1, 1).is_ok());
    assert!(CountRange::new(1, crate::limits::MAX_COUNT).is_ok());
    for (min, max) in [(0, 1), (2, 1), (1, crate::limits::MAX_COUNT + 1)] {
        assert_eq!(
            CountRange::new(min, max),
            Err(InvalidInput::Count { min, max })
        );
    }
}
