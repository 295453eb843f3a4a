//! The usage state the views are made of, folded in memory: committed usage, limits, and the
//! reservations that still matter. The live follower loads the part a batch touches from the
//! view tables, folds the batch and writes back what changed; a rebuild folds the whole log.
//!
//! The rules are the domain's: a project is folded with [`domain::ProjectUsage::apply`]
//! (property-tested there against `ProjectState::apply`) and the defaults with
//! [`domain::Defaults::apply`]. This module only decides what to write back and what the audit
//! rows say.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use domain::{
    Defaults, Deltas, Event, Judged, ProjectId, ProjectUsage, ReservationId, ResourceName,
    DEFAULTS_STREAM,
};

use crate::feed::FeedEvent;

use crate::UsageAfter;

mod tree;

/// What a batch changed, so only those rows are written back.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    pub in_use: BTreeSet<(String, ResourceName)>,
    pub reservations: BTreeSet<(String, ReservationId)>,
    /// Projects (or `$defaults`) whose limits changed.
    pub limits: BTreeSet<String>,
}

/// One audit row, ready to insert.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct AuditRow {
    pub position: i64,
    pub project: String,
    pub version: i64,
    pub at_ms: i64,
    pub event_type: &'static str,
    pub reservation_id: Option<String>,
    pub deltas: Option<String>,
    pub actor: Option<String>,
    pub request_id: Option<String>,
    pub principal: Option<String>,
    pub reason: Option<String>,
    pub usage_after: String,
    pub change: LimitsChange,
    /// `ReservationRequested` only: when the hold expires.
    pub expires_at_ms: Option<i64>,
    /// `ReservationRequested` of a counted reserve only: the count granted.
    pub granted_count: Option<i64>,
    /// The user inside the project the event is about, if any.
    pub user: Option<String>,
    /// `ParentSet`: the new parent (`None`: removed). Also what the parent links are kept from.
    pub parent: Option<String>,
    /// An ancestor's `Descendant*` entry: the descendant it is about.
    pub descendant: Option<String>,
}

/// What a limits event changed: the effective limits (the project's override, else the
/// default; for the defaults, the defaults) of the resources it names, just before and just
/// after it, as `{resource: limit}` JSON; a resource without any limit is left out. `forced`
/// only for `LimitsSet` and `ParentSet`. For a `UsageCorrected`, `{resource: in_use}` before and after. All
/// `None` for other events.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LimitsChange {
    pub before: Option<String>,
    pub after: Option<String>,
    pub forced: Option<bool>,
}

/// Whose event it is.
pub(crate) enum Owner<'a> {
    Defaults,
    /// A project stream; the id is checked (`ProjectId::parse`) where it is first kept.
    Project(&'a str),
    /// A stream this crate does not project.
    Other,
}

pub(crate) fn owner(stream: &str) -> Owner<'_> {
    if stream == DEFAULTS_STREAM {
        Owner::Defaults
    } else if let Some(project) = stream.strip_prefix(domain::PROJECT_STREAM_PREFIX) {
        Owner::Project(project)
    } else {
        Owner::Other
    }
}

#[derive(Debug, Default)]
pub(crate) struct ViewState {
    pub defaults: Defaults,
    pub projects: HashMap<String, ProjectUsage>,
    /// Tracked only when the state will be written back as a diff.
    pub changes: Option<Changes>,
}

impl ViewState {
    /// Folds one event; returns its audit row when `audit` is asked for.
    pub fn apply(&mut self, recorded: &FeedEvent, audit: bool) -> Option<AuditRow> {
        let event = &recorded.event;
        match owner(&recorded.stream) {
            Owner::Other => None,
            Owner::Defaults => {
                let named = limits_named(None, event);
                let before = limits_before(&self.defaults, None, named.as_deref(), audit);
                self.defaults.apply(event);
                if let (Event::DefaultLimitsSet { .. }, Some(changes)) = (event, &mut self.changes)
                {
                    changes.limits.insert(DEFAULTS_STREAM.to_owned());
                }
                audit.then(|| {
                    let change = limits_change(event, before, &self.defaults, None, named);
                    audit_row(
                        recorded,
                        event,
                        DEFAULTS_STREAM.to_owned(),
                        None,
                        String::from("{}"),
                        change,
                    )
                })
            }
            Owner::Project(project) => {
                if !self.projects.contains_key(project) {
                    if ProjectId::parse(project).is_err() {
                        return None;
                    }
                    self.projects
                        .insert(project.to_owned(), ProjectUsage::default());
                }
                let view = self.projects.get_mut(project)?;
                let before = audit.then(|| touched_before(view, event));
                let named = limits_named(Some(view), event);
                let limits_before =
                    limits_before(&self.defaults, Some(view), named.as_deref(), audit);
                let change = view.apply(event);
                if let Some(changes) = &mut self.changes {
                    for resource in change.in_use {
                        changes.in_use.insert((project.to_owned(), resource));
                    }
                    if let Some(id) = change.reservation {
                        changes.reservations.insert((project.to_owned(), id));
                    }
                    if change.limits {
                        changes.limits.insert(project.to_owned());
                    }
                }
                let (kept_deltas, touched) = before?;
                let change = limits_change(event, limits_before, &self.defaults, Some(view), named);
                let usage_after = match event {
                    Event::ReservationDenied { judged, .. } => {
                        usage_json(judged.iter().map(|(r, j)| (r, judged_usage(j))))
                    }
                    _ => usage_json(touched.iter().map(|r| {
                        (
                            r,
                            UsageAfter {
                                in_use: view.in_use(r),
                                reserved: view.reserved_at(r, recorded.recorded_at),
                            },
                        )
                    })),
                };
                Some(audit_row(
                    recorded,
                    event,
                    project.to_owned(),
                    kept_deltas,
                    usage_after,
                    change,
                ))
            }
        }
    }
}

/// The resources whose limits a limits event changes: those it sets, or for a reset the
/// project's overrides (before it applies). `None` for other events.
fn limits_named(view: Option<&ProjectUsage>, event: &Event) -> Option<Vec<ResourceName>> {
    match event {
        Event::LimitsSet { limits, .. } | Event::DefaultLimitsSet { limits } => {
            Some(limits.keys().cloned().collect())
        }
        Event::LimitsReset => {
            Some(view.map_or_else(Vec::new, |v| v.overrides.keys().cloned().collect()))
        }
        _ => None,
    }
}

/// The effective limits of `named` before a limits event applies, when its audit row is made.
fn limits_before(
    defaults: &Defaults,
    project: Option<&ProjectUsage>,
    named: Option<&[ResourceName]>,
    audit: bool,
) -> Option<String> {
    named
        .filter(|_| audit)
        .map(|named| effective_limits(defaults, project, named))
}

/// `{resource: limit}` JSON of the effective limits of `named`: the project's override, else
/// the default (only the defaults when there is no project).
fn effective_limits(
    defaults: &Defaults,
    project: Option<&ProjectUsage>,
    named: &[ResourceName],
) -> String {
    let limits: BTreeMap<&str, i64> = named
        .iter()
        .filter_map(|resource| {
            project
                .and_then(|view| view.overrides.get(resource).copied())
                .or_else(|| defaults.limit(resource))
                .map(|limit| (resource.as_str(), limit.value()))
        })
        .collect();
    serde_json::to_string(&limits).unwrap_or_else(|_| String::from("{}"))
}

/// The change a limits event made, from the limits before it and the state after it; for a
/// correction, the resource's in_use before and after it.
fn limits_change(
    event: &Event,
    before: Option<String>,
    defaults: &Defaults,
    project: Option<&ProjectUsage>,
    named: Option<Vec<ResourceName>>,
) -> LimitsChange {
    if let Event::UsageCorrected {
        resource,
        in_use_before,
        in_use_after,
        ..
    } = event
    {
        let one = |in_use: i64| serde_json::json!({ resource.as_str(): in_use }).to_string();
        return LimitsChange {
            before: Some(one(*in_use_before)),
            after: Some(one(*in_use_after)),
            forced: None,
        };
    }
    if let Event::UserLimitsSet { limits, forced, .. } = event {
        // The user's own limits as set; the views keep no user's limits to show before them.
        let set: BTreeMap<&str, i64> = limits
            .iter()
            .map(|(r, l)| (r.as_str(), l.value()))
            .collect();
        return LimitsChange {
            before: None,
            after: serde_json::to_string(&set).ok(),
            forced: Some(*forced),
        };
    }
    if let Event::ParentSet { forced, .. } = event {
        return LimitsChange {
            before: None,
            after: None,
            forced: Some(*forced),
        };
    }
    let (Some(before), Some(named)) = (before, named) else {
        return LimitsChange::default();
    };
    LimitsChange {
        before: Some(before),
        after: Some(effective_limits(defaults, project, &named)),
        forced: match event {
            Event::LimitsSet { forced, .. } => Some(*forced),
            _ => None,
        },
    }
}

pub(crate) fn parse_limits(text: &str) -> Option<BTreeMap<ResourceName, i64>> {
    let map: BTreeMap<String, i64> = serde_json::from_str(text).ok()?;
    map.into_iter()
        .map(|(r, limit)| Some((ResourceName::parse(&r).ok()?, limit)))
        .collect()
}

fn judged_usage(judged: &Judged) -> UsageAfter {
    UsageAfter {
        in_use: judged.in_use,
        reserved: judged.reserved,
    }
}

/// Before applying: the deltas of the reservation the event names (commits and releases do
/// not carry them) and the resources whose usage the audit row reports.
fn touched_before(view: &ProjectUsage, event: &Event) -> (Option<Deltas>, Vec<ResourceName>) {
    let kept = event
        .reservation_id()
        .and_then(|id| view.reservation(&id))
        .map(|kept| kept.deltas.clone());
    let touched = match event {
        Event::ReservationRequested { deltas, .. } | Event::ReservationDenied { deltas, .. } => {
            deltas.resources().cloned().collect()
        }
        Event::ReservationCommitted { .. } | Event::ReservationReleased { .. } => kept
            .as_ref()
            .map(|d| d.resources().cloned().collect())
            .unwrap_or_default(),
        Event::LimitsSet { limits, .. }
        | Event::DefaultLimitsSet { limits }
        | Event::UserLimitsSet { limits, .. } => limits.keys().cloned().collect(),
        Event::LimitsReset => view.overrides.keys().cloned().collect(),
        Event::UserLimitsReset { .. } => vec![],
        Event::UsageCorrected { resource, .. } => vec![resource.clone()],
        // The views keep each project's own usage, which none of these moves: a descendant's
        // change shows in its own entry (and in the ancestor's usage, from the ledger).
        Event::ParentSet { .. }
        | Event::DescendantReserved { .. }
        | Event::DescendantUsageChanged { .. }
        | Event::DescendantsJoined { .. }
        | Event::DescendantsLeft { .. } => vec![],
    };
    (kept, touched)
}

fn audit_row(
    recorded: &FeedEvent,
    event: &Event,
    project: String,
    kept_deltas: Option<Deltas>,
    usage_after: String,
    change: LimitsChange,
) -> AuditRow {
    let tree = tree::TreeFields::of(event);
    let deltas = match event {
        Event::ReservationRequested { deltas, .. } | Event::ReservationDenied { deltas, .. } => {
            Some(deltas.clone())
        }
        _ => kept_deltas.or(tree.deltas),
    };
    let (expires_at_ms, granted_count) = match event {
        Event::ReservationRequested {
            expires_at, count, ..
        } => (
            Some(expires_at.timestamp_millis()),
            count.map(|c| i64::from(c.granted)),
        ),
        _ => (None, None),
    };
    let reason = match event {
        Event::ReservationReleased { reason, .. } => Some(reason.as_str().to_owned()),
        Event::UsageCorrected { reason, .. } => Some(reason.clone()),
        _ => None,
    };
    AuditRow {
        position: crate::db::to_i64(recorded.position),
        project,
        version: crate::db::to_i64(recorded.version),
        at_ms: recorded.recorded_at.timestamp_millis(),
        event_type: event.type_name(),
        reservation_id: event
            .reservation_id()
            .or(tree.reservation_id)
            .map(|id| id.to_string()),
        deltas: deltas.map(|d| deltas_json(&d)),
        actor: recorded.metadata.actor.clone(),
        request_id: recorded.metadata.request_id.clone(),
        principal: recorded.metadata.principal.clone(),
        reason,
        usage_after,
        change,
        expires_at_ms,
        granted_count,
        user: event.user().map(|u| u.as_str().to_owned()),
        parent: tree.parent,
        descendant: tree.descendant,
    }
}

pub(crate) fn deltas_json(deltas: &Deltas) -> String {
    serde_json::to_string(deltas).unwrap_or_else(|_| String::from("{}"))
}

pub(crate) fn parse_deltas(text: &str) -> Option<Deltas> {
    serde_json::from_str(text).ok()
}

/// `{"cores": [in_use, reserved], ...}`: compact, and decoded only for the rows a page returns.
fn usage_json<'a>(usage: impl Iterator<Item = (&'a ResourceName, UsageAfter)>) -> String {
    let map: BTreeMap<&str, [i64; 2]> = usage
        .map(|(r, u)| (r.as_str(), [u.in_use, u.reserved]))
        .collect();
    serde_json::to_string(&map).unwrap_or_else(|_| String::from("{}"))
}

pub(crate) fn parse_usage_after(text: &str) -> BTreeMap<ResourceName, UsageAfter> {
    let map: BTreeMap<String, [i64; 2]> = serde_json::from_str(text).unwrap_or_default();
    map.into_iter()
        .filter_map(|(r, [in_use, reserved])| {
            Some((
                ResourceName::parse(&r).ok()?,
                UsageAfter { in_use, reserved },
            ))
        })
        .collect()
}

/// The projects, and the reservations released or committed, that a batch names: what the
/// follower loads before folding it.
pub(crate) fn batch_keys(
    events: &[FeedEvent],
) -> (BTreeSet<String>, HashSet<(String, ReservationId)>) {
    let mut projects = BTreeSet::new();
    let mut reservations = HashSet::new();
    for recorded in events {
        if let Owner::Project(project) = owner(&recorded.stream) {
            if ProjectId::parse(project).is_err() {
                continue;
            }
            if let Some(id) = recorded.event.reservation_id() {
                reservations.insert((project.to_owned(), id));
            }
            projects.insert(project.to_owned());
        }
    }
    (projects, reservations)
}

#[cfg(test)]
mod tests;
