//! Rule 10: corrections of in_use.

use std::collections::BTreeMap;

use super::*;

#[test]
fn usage_corrections_set_in_use() {
    let mut g = Given::defaults(&[("cores", 10)]);
    g.ok(reserve_cmd(1, &[("cores", 4)]));
    g.ok(commit(1));
    let events = g.ok(Command::CorrectUsage {
        user: None,
        in_use: [(r("cores"), 1)].into(),
        reason: Reason::parse("hypervisor audit").unwrap(),
    });
    assert_eq!(
        events,
        vec![Event::UsageCorrected {
            user: None,
            resource: r("cores"),
            in_use_before: 4,
            in_use_after: 1,
            reason: "hypervisor audit".into()
        }]
    );
    assert_eq!(g.usage("cores").in_use, 1);
    assert!(matches!(
        g.when(&Command::CorrectUsage {
            user: None,
            in_use: [(r("cores"), -1)].into(),
            reason: Reason::parse("x").unwrap()
        })
        .answer,
        Err(Refusal::Invalid(InvalidInput::NegativeUsage(-1)))
    ));
}

/// Given a project with cores 4 and ram 8 in use, when an operator recounts cores 4, ram 2
/// and instances 1, then one event per changed resource is recorded (none for cores, which
/// was right), and usage follows them.
#[test]
fn a_correction_records_only_what_changes() {
    let mut g = Given::defaults(&[("cores", 10), ("ram", -1), ("instances", 5)]);
    g.ok(reserve_cmd(1, &[("cores", 4), ("ram", 8)]));
    g.ok(commit(1));
    let events = g.ok(Command::CorrectUsage {
        user: None,
        in_use: [(r("cores"), 4), (r("ram"), 2), (r("instances"), 1)].into(),
        reason: Reason::parse("recount").unwrap(),
    });
    let corrected: Vec<(ResourceName, i64, i64)> = events
        .iter()
        .map(|e| match e {
            Event::UsageCorrected {
                resource,
                in_use_before,
                in_use_after,
                ..
            } => (resource.clone(), *in_use_before, *in_use_after),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(corrected, vec![(r("instances"), 0, 1), (r("ram"), 8, 2)]);
    assert_eq!(g.usage("ram").in_use, 2);
    assert_eq!(g.usage("instances").in_use, 1);
    // The same recount again changes nothing and records nothing.
    let again = g.ok(Command::CorrectUsage {
        user: None,
        in_use: [(r("cores"), 4), (r("ram"), 2)].into(),
        reason: Reason::parse("recount").unwrap(),
    });
    assert!(again.is_empty());
}

/// When a correction names an unknown resource among known ones, or nothing, then it is
/// refused whole.
#[test]
fn a_correction_is_all_or_nothing() {
    let g = Given::defaults(&[("cores", 10)]);
    let refused = g.when(&Command::CorrectUsage {
        user: None,
        in_use: [(r("cores"), 1), (r("gpus"), 1)].into(),
        reason: Reason::parse("recount").unwrap(),
    });
    assert!(refused.events.is_empty());
    assert_eq!(
        refused.answer,
        Err(Refusal::UnknownResource(vec![r("gpus")]))
    );
    let empty = g.when(&Command::CorrectUsage {
        user: None,
        in_use: BTreeMap::new(),
        reason: Reason::parse("recount").unwrap(),
    });
    assert_eq!(
        empty.answer,
        Err(Refusal::Invalid(InvalidInput::EmptyCorrection))
    );
}
