//! Properties asserted on the implementations' own state after every step, whatever the model
//! says: in_use never below zero (rule 10), and no live usage above a cap (rules 1, 6, 8)
//! except where an operator put it there.

use std::collections::BTreeMap;

use domain::{Limit, ProjectState, Timestamp};
use proptest::prelude::*;

use super::commands::{Cmd, DEFAULTS, RESOURCES, USERS};
use super::mapping::{res, user_id};

/// For one owner (the project, or a user) and resource: its cap, in_use and live usage
/// (in_use + reserved).
#[derive(Clone, Copy, Debug)]
struct Level {
    cap: Option<i64>,
    in_use: i64,
    used: i64,
}

impl Level {
    fn over(&self) -> bool {
        self.cap.is_some_and(|cap| self.used > cap)
    }
}

/// (user or `None` for the project, resource) -> its level.
#[derive(Clone, Debug)]
pub struct Levels(BTreeMap<(Option<&'static str>, &'static str), Level>);

pub fn levels(state: &ProjectState, now: Timestamp) -> Levels {
    let mut all = BTreeMap::new();
    for (r, default) in DEFAULTS {
        let resource = res(r);
        let limit = state
            .overrides
            .get(&resource)
            .map_or(default, |l| l.value());
        let usage = state.usage(&resource, now);
        let project = Level {
            cap: (limit >= 0).then_some(limit),
            in_use: usage.in_use,
            used: usage.in_use + usage.reserved,
        };
        all.insert((None, r), project);
        for (u, name) in USERS.iter().enumerate() {
            let user = user_id(u);
            let usage = state.user_usage(&user, &resource, now);
            // A user is capped by its own override only (rule 8); the project's cap is above.
            let own = Level {
                cap: state.user_override(&user, &resource).and_then(Limit::cap),
                in_use: usage.in_use,
                used: usage.in_use + usage.reserved,
            };
            all.insert((Some(*name), r), own);
        }
    }
    debug_assert_eq!(all.len(), (USERS.len() + 1) * (RESOURCES.len() - 1));
    Levels(all)
}

/// Checks the step from `before` to `after` made by `command`: every in_use is at least zero;
/// and a live usage above its cap after a step that cannot exceed caps (every command but a
/// forced limit, a reset to the defaults, a correction) was above it before and did not grow.
pub fn check(before: &Levels, after: &Levels, command: &Cmd) -> Result<(), TestCaseError> {
    for (key, now) in &after.0 {
        prop_assert!(now.in_use >= 0, "{:?}: in_use below zero: {:?}", key, now);
        if now.over() && !command.may_exceed_caps() {
            let was = before.0[key];
            prop_assert!(
                was.over() && now.used <= was.used,
                "{:?} went over its cap or grew over it: {:?} -> {:?} by {:?}",
                key,
                was,
                now,
                command
            );
        }
    }
    Ok(())
}
