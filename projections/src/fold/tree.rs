//! What the audit rows of the hierarchy's events (SPEC rule 11) say.
//!
//! - `ParentSet` (in the project's own stream): `parent`, the new parent (none when it was
//!   removed), and `force`. The views' parent links are kept from these rows.
//! - `DescendantReserved` (in each ancestor's stream): `descendant`, the hold's
//!   `reservation_id` and its `deltas` (what the subtree holds from now on).
//! - `DescendantUsageChanged`: `descendant`, the hold it ended (`reservation_id`, if any) and
//!   the change of the descendant's in_use as `deltas` (none when in_use did not move, as for a
//!   rolled-back hold).
//! - `DescendantsJoined`: `descendant`, the project that joined (its own descendants joined
//!   with it), and as `deltas` the in_use they all brought (none when they had none).
//! - `DescendantsLeft`: `descendant`, the project that left (with its descendants).
//!
//! None of them moves the project's own usage, which is what the views keep and `usage_after`
//! reports: their `usage_after` is empty. The descendant's own entry (at the same instant)
//! carries the descendant's usage after it, and the ancestor's usage answer its subtree's.

use std::collections::BTreeMap;

use domain::{Deltas, Event, ProjectId, ReservationId, ResourceName};

/// The columns of an audit row only the hierarchy's events fill.
#[derive(Debug, Default)]
pub(super) struct TreeFields {
    pub parent: Option<String>,
    pub descendant: Option<String>,
    pub deltas: Option<Deltas>,
    pub reservation_id: Option<ReservationId>,
}

impl TreeFields {
    pub(super) fn of(event: &Event) -> TreeFields {
        let name = |p: &ProjectId| Some(p.as_str().to_owned());
        match event {
            Event::ParentSet { parent, .. } => TreeFields {
                parent: parent.as_ref().and_then(name),
                ..TreeFields::default()
            },
            Event::DescendantReserved { descendant, hold } => TreeFields {
                descendant: name(descendant),
                deltas: Some(hold.deltas.clone()),
                reservation_id: Some(hold.reservation_id),
                ..TreeFields::default()
            },
            Event::DescendantUsageChanged {
                descendant,
                reservation_id,
                in_use,
            } => TreeFields {
                descendant: name(descendant),
                deltas: amounts(in_use.iter().map(|(r, n)| (r, *n))),
                reservation_id: *reservation_id,
                ..TreeFields::default()
            },
            Event::DescendantsJoined { members } => TreeFields {
                descendant: members.first().and_then(|m| name(&m.project)),
                deltas: amounts(
                    members
                        .iter()
                        .flat_map(|m| m.in_use.iter())
                        .map(|(r, n)| (r, *n)),
                ),
                ..TreeFields::default()
            },
            Event::DescendantsLeft { projects } => TreeFields {
                descendant: projects.first().and_then(name),
                ..TreeFields::default()
            },
            _ => TreeFields::default(),
        }
    }
}

/// The amounts summed per resource, zeros left out, as deltas; `None` when nothing is left (or
/// more resources than deltas hold, which no event of the ledger has).
fn amounts<'a>(amounts: impl Iterator<Item = (&'a ResourceName, i64)>) -> Option<Deltas> {
    let mut sums: BTreeMap<ResourceName, i64> = BTreeMap::new();
    for (resource, n) in amounts {
        let sum = sums.entry(resource.clone()).or_default();
        *sum = sum.saturating_add(n);
    }
    sums.retain(|_, n| *n != 0);
    Deltas::new(sums).ok()
}
