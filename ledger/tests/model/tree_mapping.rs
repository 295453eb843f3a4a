//! The tree case in the implementations' types: project names, answers and each project's
//! state in the terms of the tree model.

use std::collections::BTreeMap;

use domain::{
    Command, Correction, Defaults, ProjectId, ProjectState, Refusal, Reservation, ReservationId,
    ResourceStanding, Timestamp, TreeRefusal,
};
use ledger::{LimitSource, LimitsView, ReservationView};
use uuid::Uuid;

use super::commands::RESOURCES;
use super::mapping::{count_of, deltas_of, in_use_of, limits_of, reason, res, status_of};
use super::tree_answers::{tree_refused, NodeSnapshot, TreeAnswer};
use super::tree_commands::{TreeCmd, PROJECTS};

/// The projects of one case: `{prefix}p0` … `{prefix}p4`.
#[derive(Clone, Debug)]
pub struct Names {
    prefix: String,
}

impl Names {
    pub fn new(prefix: &str) -> Names {
        Names {
            prefix: prefix.to_owned(),
        }
    }

    pub fn id(&self, p: usize) -> ProjectId {
        ProjectId::parse(&format!("{}p{p}", self.prefix)).unwrap()
    }

    pub fn all(&self) -> Vec<ProjectId> {
        (0..PROJECTS).map(|p| self.id(p)).collect()
    }

    pub fn index(&self, project: &ProjectId) -> usize {
        let rest = project
            .as_str()
            .strip_prefix(&self.prefix)
            .and_then(|s| s.strip_prefix('p'))
            .unwrap_or_else(|| panic!("{project} is not a project of this case"));
        rest.parse().unwrap()
    }
}

fn plain_deltas(deltas: &domain::Deltas) -> BTreeMap<String, i64> {
    deltas.iter().map(|(r, d)| (r.to_string(), d)).collect()
}

pub fn tree_reservation(r: &Reservation) -> TreeAnswer {
    TreeAnswer::Reservation {
        id: r.id.0,
        status: status_of(r.status),
        deltas: plain_deltas(&r.deltas),
        expires_ms: r.expires_at.timestamp_millis(),
        count: r.count.map(|c| c.granted),
    }
}

pub fn tree_view(view: &ReservationView) -> TreeAnswer {
    TreeAnswer::Reservation {
        id: view.reservation_id.0,
        status: status_of(view.status),
        deltas: plain_deltas(&view.deltas),
        expires_ms: view.expires_at.timestamp_millis(),
        count: view.count.map(|c| c.granted),
    }
}

pub fn tree_limits(state: &ProjectState, defaults: &Defaults) -> TreeAnswer {
    let mut all: BTreeMap<String, (i64, &'static str)> = defaults
        .limits
        .iter()
        .map(|(r, l)| (r.to_string(), (l.value(), "default")))
        .collect();
    for (r, l) in &state.overrides {
        all.insert(r.to_string(), (l.value(), "project"));
    }
    TreeAnswer::Limits(all)
}

pub fn tree_limits_view(view: &LimitsView) -> TreeAnswer {
    TreeAnswer::Limits(
        view.limits
            .iter()
            .map(|(r, (l, source))| {
                let source = match source {
                    LimitSource::User => "user",
                    LimitSource::Project => "project",
                    LimitSource::Default => "default",
                };
                (r.to_string(), (l.value(), source))
            })
            .collect(),
    )
}

pub fn tree_corrected(corrections: &[Correction]) -> TreeAnswer {
    TreeAnswer::Corrected(
        corrections
            .iter()
            .map(|c| (c.resource.to_string(), c.before, c.after))
            .collect(),
    )
}

pub fn tree_ancestors(chain: &[ProjectId], names: &Names) -> TreeAnswer {
    TreeAnswer::Ancestors(chain.iter().map(|p| names.index(p)).collect())
}

pub fn tree_refusal(refusal: &Refusal, names: &Names) -> TreeAnswer {
    let strings = |v: &[domain::ResourceName]| v.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    let standing = |s: &BTreeMap<domain::ResourceName, ResourceStanding>| {
        s.iter()
            .map(|(r, s)| (r.to_string(), Some((s.limit.value(), s.in_use, s.reserved))))
            .collect()
    };
    match refusal {
        Refusal::Invalid(_) => tree_refused("invalid", vec![]),
        Refusal::UnknownResource(v) => tree_refused("unknown-resource", strings(v)),
        Refusal::OverQuota {
            overs,
            standing: s,
            max_count,
            user,
            ancestor_overs,
        } => {
            assert!(user.is_none(), "the tree cases have no users");
            TreeAnswer::Refused {
                code: "over-quota",
                standing: standing(s),
                overs: strings(overs),
                ancestor_overs: ancestor_overs
                    .iter()
                    .map(|(a, o)| (names.index(a), strings(o)))
                    .collect(),
                max_count: *max_count,
            }
        }
        Refusal::Tree(TreeRefusal::Cycle { .. }) => tree_refused("cycle", vec![]),
        Refusal::Tree(TreeRefusal::TooDeep { .. }) => tree_refused("too-deep", vec![]),
        Refusal::Tree(TreeRefusal::TooManyDescendants { .. }) => {
            tree_refused("too-many-descendants", vec![])
        }
        Refusal::UsageUnderflow(v) => tree_refused("usage-underflow", strings(v)),
        Refusal::IdempotencyMismatch => tree_refused("idempotency-mismatch", vec![]),
        Refusal::NotFound => tree_refused("not-found", vec![]),
        Refusal::ReservationExpired => tree_refused("reservation-expired", vec![]),
        Refusal::ReservationReleased => tree_refused("reservation-released", vec![]),
        Refusal::LimitBelowUsage(s) => TreeAnswer::Refused {
            code: "limit-below-usage",
            standing: standing(s),
            overs: vec![],
            ancestor_overs: BTreeMap::new(),
            max_count: None,
        },
    }
}

/// The project `p` as its own state (`states[p]`, folded from its own stream) says.
pub fn node_snapshot(
    states: &[ProjectState],
    p: usize,
    now: Timestamp,
    ids: &[Uuid],
    names: &Names,
) -> NodeSnapshot {
    let state = &states[p];
    NodeSnapshot {
        parent: state.parent.as_ref().map(|q| names.index(q)),
        overrides: state
            .overrides
            .iter()
            .map(|(r, l)| (r.to_string(), l.value()))
            .collect(),
        own: RESOURCES[..3]
            .iter()
            .map(|r| {
                let u = state.usage(&res(r), now);
                (r.to_string(), (u.in_use, u.reserved, u.releasing))
            })
            .collect(),
        subtree: RESOURCES[..3]
            .iter()
            .map(|r| {
                let u = state.subtree_usage(&res(r), now);
                (r.to_string(), (u.in_use, u.reserved))
            })
            .collect(),
        descendants: {
            let mut all: Vec<usize> = state
                .subtree()
                .members()
                .map(|(q, _)| names.index(q))
                .collect();
            all.sort();
            all
        },
        reservations: ids
            .iter()
            .map(|id| {
                let r = state.reservation(&ReservationId(*id));
                (*id, r.map(|r| status_of(r.status)))
            })
            .collect(),
    }
}

/// The ids a project's snapshot asks about: the pool's and those granted in it.
pub fn ids_of(p: usize, pool: &[Uuid], known: &[(usize, Uuid)]) -> Vec<Uuid> {
    let mut ids = pool.to_vec();
    ids.extend(known.iter().filter(|(q, _)| *q == p).map(|(_, id)| *id));
    ids.sort();
    ids.dedup();
    ids
}

/// A tree command other than `SetParent` and `Advance` as the domain's command; `id` is the
/// reservation a reserve, commit or release is about.
pub fn tree_domain_command(command: &TreeCmd, id: Uuid) -> Command {
    let reservation_id = ReservationId(id);
    match command {
        TreeCmd::Reserve {
            deltas,
            expires_in,
            count,
            ..
        } => Command::Reserve {
            reservation_id,
            deltas: deltas_of(deltas),
            expires_in_s: *expires_in,
            count: count_of(*count),
            user: None,
        },
        TreeCmd::Commit(_) => Command::Commit { reservation_id },
        TreeCmd::Release(_) => Command::Release { reservation_id },
        TreeCmd::SetLimits { limits, force, .. } => Command::SetLimits {
            limits: limits_of(limits),
            force: *force,
        },
        TreeCmd::ResetLimits(_) => Command::ResetLimits,
        TreeCmd::Expire(_) => Command::Expire,
        TreeCmd::Correct { in_use, .. } => Command::CorrectUsage {
            in_use: in_use_of(in_use),
            reason: reason(),
            user: None,
        },
        TreeCmd::SetParent { .. } | TreeCmd::Advance(_) => unreachable!("not a domain command"),
    }
}
