//! State folded from events: the defaults, and one project's limits, usage and reservations.
//! Folding never fails and never panics: events were checked when they were decided, and a
//! stored event that makes no sense here (say, a commit of an unknown reservation) is ignored.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::held::Holds;
use crate::subtree::Subtree;
use crate::{
    Counted, Deltas, Event, Limit, Limits, ProjectId, ReleaseReason, ReservationId, ResourceName,
    Timestamp, UserId,
};

/// The position in a stream: `None` before its first event, then 0, 1, 2, ...
pub type StreamVersion = Option<u64>;

fn next_version(version: StreamVersion) -> u64 {
    version.map_or(0, |v| v + 1)
}

/// The default limits, folded from the defaults stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Defaults {
    pub version: StreamVersion,
    pub limits: Limits,
}

impl Defaults {
    pub fn apply(&mut self, event: &Event) {
        if let Event::DefaultLimitsSet { limits } = event {
            self.limits
                .extend(limits.iter().map(|(r, l)| (r.clone(), *l)));
        }
        self.version = Some(next_version(self.version));
    }

    pub fn limit(&self, resource: &ResourceName) -> Option<Limit> {
        self.limits.get(resource).copied()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReservationStatus {
    Held,
    Committed,
    Released(ReleaseReason),
}

impl ReservationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationStatus::Held => "held",
            ReservationStatus::Committed => "committed",
            ReservationStatus::Released(_) => "released",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub id: ReservationId,
    /// For a counted reserve, the unit's deltas times the count granted.
    pub deltas: Deltas,
    /// A counted reserve's range and grant; `None` for a plain one.
    pub count: Option<Counted>,
    /// The user inside the project it is for; `None` for the project alone.
    pub user: Option<UserId>,
    pub status: ReservationStatus,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    /// When the event that gave the current status was recorded.
    pub status_at: Timestamp,
    /// The stream version of the event that gave the current status.
    pub status_version: u64,
    /// The global position of that event, once it is known to be stored.
    pub position: Option<u64>,
}

impl Reservation {
    /// A held reservation counts against quota only until its expiry instant.
    pub fn is_live_hold(&self, now: Timestamp) -> bool {
        self.status == ReservationStatus::Held && now < self.expires_at
    }
}

/// Where one resource of a project stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub in_use: i64,
    /// The sum of the positive deltas of live holds.
    pub reserved: i64,
    /// The sum of the negative deltas of live holds (≤ 0).
    pub releasing: i64,
}

/// A user's part of a project (SPEC rule 8): its own overrides and its committed usage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserState {
    pub overrides: Limits,
    /// The stream version of the user's last limits event, and its global position once known.
    pub limits_version: StreamVersion,
    pub limits_position: Option<u64>,
    pub(crate) in_use: BTreeMap<ResourceName, i64>,
}

impl UserState {
    pub fn in_use(&self, resource: &ResourceName) -> i64 {
        self.in_use.get(resource).copied().unwrap_or(0)
    }
}

/// `in_use` after `delta` is taken out of it: never below zero (SPEC rule 10: a release after
/// a correction stops at zero).
pub(crate) fn taken_out(in_use: i64, delta: i64) -> i64 {
    in_use.saturating_sub(delta).max(0)
}

/// The resources a usage report shows, from [`ProjectState::usage_all`] or
/// [`ProjectState::user_usage_all`]: those with a limit or with usage. One with usage but no
/// limit (no default for it any more) shows as unlimited.
pub fn shown_usage(
    all: BTreeMap<ResourceName, (Option<Limit>, Usage)>,
) -> impl Iterator<Item = (ResourceName, Limit, Usage)> {
    all.into_iter().filter_map(|(resource, (limit, usage))| {
        let used = usage.in_use != 0 || usage.reserved != 0;
        let limit = limit.or(used.then_some(Limit::UNLIMITED))?;
        Some((resource, limit, usage))
    })
}

/// One project's state: its overrides, usage, and every reservation it ever had.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectState {
    pub project: ProjectId,
    pub version: StreamVersion,
    pub overrides: Limits,
    /// The stream version of the last limits event, and its global position once known.
    pub limits_version: StreamVersion,
    pub limits_position: Option<u64>,
    pub(crate) in_use: BTreeMap<ResourceName, i64>,
    /// Boxed: the map only grows (every reservation is kept), and each time it doubles it
    /// moves its entries; a pointer moves in a sixth of the time a reservation would.
    pub(crate) reservations: HashMap<ReservationId, Box<Reservation>>,
    pub(crate) held: Holds,
    pub(crate) users: BTreeMap<UserId, UserState>,
    /// The project's parent, if it has one (SPEC rule 11).
    pub parent: Option<ProjectId>,
    /// The project's descendants and what they use.
    pub(crate) subtree: Subtree,
}

impl ProjectState {
    pub fn new(project: ProjectId) -> Self {
        ProjectState {
            project,
            version: None,
            overrides: Limits::new(),
            limits_version: None,
            limits_position: None,
            in_use: BTreeMap::new(),
            reservations: HashMap::new(),
            held: Holds::default(),
            users: BTreeMap::new(),
            parent: None,
            subtree: Subtree::default(),
        }
    }

    /// A user's overrides and usage, if it ever had any.
    pub fn user(&self, user: &UserId) -> Option<&UserState> {
        self.users.get(user)
    }

    /// Every user with overrides or usage of its own.
    pub fn users(&self) -> impl Iterator<Item = (&UserId, &UserState)> {
        self.users.iter()
    }

    /// The user's own override for a resource: its only cap besides the project's (rule 8).
    pub fn user_override(&self, user: &UserId, resource: &ResourceName) -> Option<Limit> {
        self.users
            .get(user)
            .and_then(|u| u.overrides.get(resource).copied())
    }

    /// A user's usage of one resource at `now`: its committed usage and its live holds.
    pub fn user_usage(&self, user: &UserId, resource: &ResourceName, now: Timestamp) -> Usage {
        let in_use = self.users.get(user).map_or(0, |u| u.in_use(resource));
        self.usage_of(in_use, Some(user), resource, now)
    }

    pub fn reservation(&self, id: &ReservationId) -> Option<&Reservation> {
        self.reservations.get(id).map(|r| &**r)
    }

    pub fn held(&self) -> impl Iterator<Item = &Reservation> {
        self.held.ids().filter_map(|id| self.reservation(id))
    }

    pub fn in_use(&self, resource: &ResourceName) -> i64 {
        self.in_use.get(resource).copied().unwrap_or(0)
    }

    /// The effective limit: the project's override, else the default, else none (unknown).
    pub fn limit(&self, defaults: &Defaults, resource: &ResourceName) -> Option<Limit> {
        self.overrides
            .get(resource)
            .copied()
            .or_else(|| defaults.limit(resource))
    }

    /// Usage of one resource at `now`. Sums saturate: the decisions check every sum before
    /// granting, so saturation can only show in a state no decision would have produced.
    pub fn usage(&self, resource: &ResourceName, now: Timestamp) -> Usage {
        self.usage_of(self.in_use(resource), None, resource, now)
    }

    /// `in_use` with the live holds of `user` (every hold when `None`) at `now`.
    fn usage_of(
        &self,
        in_use: i64,
        user: Option<&UserId>,
        resource: &ResourceName,
        now: Timestamp,
    ) -> Usage {
        if user.is_none() {
            if let Some(sums) = self.held.sums_if_all_live(resource, now) {
                return Usage {
                    in_use,
                    reserved: sums.reserved,
                    releasing: sums.releasing,
                };
            }
        }
        let mut usage = Usage {
            in_use,
            ..Usage::default()
        };
        let holds = self
            .held()
            .filter(|r| r.is_live_hold(now))
            .filter(|r| user.is_none() || r.user.as_ref() == user);
        for hold in holds {
            let delta = hold.deltas.get(resource);
            if delta > 0 {
                usage.reserved = usage.reserved.saturating_add(delta);
            } else {
                usage.releasing = usage.releasing.saturating_add(delta);
            }
        }
        usage
    }

    /// Every resource the project has a limit, usage or hold for, with its usage at `now`.
    pub fn usage_all(
        &self,
        defaults: &Defaults,
        now: Timestamp,
    ) -> BTreeMap<ResourceName, (Option<Limit>, Usage)> {
        let mut names: BTreeSet<&ResourceName> = defaults.limits.keys().collect();
        names.extend(self.overrides.keys());
        names.extend(self.in_use.keys());
        for hold in self.held() {
            names.extend(hold.deltas.resources());
        }
        names
            .into_iter()
            .map(|r| (r.clone(), (self.limit(defaults, r), self.usage(r, now))))
            .collect()
    }

    /// A user's usage of every resource the project has a limit for or the user uses, with the
    /// user's limit: its own override, else the project's effective limit.
    pub fn user_usage_all(
        &self,
        user: &UserId,
        defaults: &Defaults,
        now: Timestamp,
    ) -> BTreeMap<ResourceName, (Option<Limit>, Usage)> {
        let own = self.users.get(user);
        let mut names: BTreeSet<&ResourceName> = defaults.limits.keys().collect();
        names.extend(self.overrides.keys());
        if let Some(own) = own {
            names.extend(own.overrides.keys());
            names.extend(own.in_use.keys());
        }
        for hold in self.held().filter(|h| h.user.as_ref() == Some(user)) {
            names.extend(hold.deltas.resources());
        }
        names
            .into_iter()
            .map(|r| {
                let limit = self
                    .user_override(user, r)
                    .or_else(|| self.limit(defaults, r));
                (r.clone(), (limit, self.user_usage(user, r, now)))
            })
            .collect()
    }

    /// Fold one event recorded at `at` into the state.
    pub fn apply(&mut self, event: &Event, at: Timestamp) {
        let version = next_version(self.version);
        self.version = Some(version);
        match event {
            Event::DefaultLimitsSet { .. } | Event::ReservationDenied { .. } => {}
            Event::LimitsSet { limits, .. } => {
                self.overrides
                    .extend(limits.iter().map(|(r, l)| (r.clone(), *l)));
                self.limits_version = Some(version);
                self.limits_position = None;
            }
            Event::LimitsReset => {
                self.overrides.clear();
                self.limits_version = Some(version);
                self.limits_position = None;
            }
            Event::ReservationRequested {
                reservation_id,
                deltas,
                expires_at,
                count,
                user,
            } => {
                // A request under an id still held stands in for the hold (the decisions
                // never make one; a stored log is folded as it is).
                if let Some(old) = self.reservations.get(reservation_id) {
                    self.held
                        .take_out(reservation_id, &old.deltas, old.expires_at);
                }
                self.held.put_in(*reservation_id, deltas, *expires_at);
                self.reservations.insert(
                    *reservation_id,
                    Box::new(Reservation {
                        id: *reservation_id,
                        deltas: deltas.clone(),
                        count: *count,
                        user: user.clone(),
                        status: ReservationStatus::Held,
                        created_at: at,
                        expires_at: *expires_at,
                        status_at: at,
                        status_version: version,
                        position: None,
                    }),
                );
            }
            Event::ReservationCommitted { reservation_id } => {
                let Some(r) = self.reservations.get_mut(reservation_id) else {
                    return;
                };
                if r.status != ReservationStatus::Held {
                    return;
                }
                r.status = ReservationStatus::Committed;
                r.status_at = at;
                r.status_version = version;
                r.position = None;
                self.held.take_out(reservation_id, &r.deltas, r.expires_at);
                let user = r
                    .user
                    .as_ref()
                    .map(|u| self.users.entry(u.clone()).or_default());
                let mut user_in_use = user.map(|u| &mut u.in_use);
                for (resource, delta) in r.deltas.iter() {
                    let used = self.in_use.entry(resource.clone()).or_default();
                    *used = used.saturating_add(delta);
                    if let Some(user_in_use) = user_in_use.as_deref_mut() {
                        let used = user_in_use.entry(resource.clone()).or_default();
                        *used = used.saturating_add(delta);
                    }
                }
            }
            Event::ReservationReleased {
                reservation_id,
                reason,
            } => {
                let Some(r) = self.reservations.get_mut(reservation_id) else {
                    return;
                };
                let was = r.status;
                if matches!(was, ReservationStatus::Released(_)) {
                    return;
                }
                r.status = ReservationStatus::Released(*reason);
                r.status_at = at;
                r.status_version = version;
                r.position = None;
                self.held.take_out(reservation_id, &r.deltas, r.expires_at);
                if was == ReservationStatus::Committed {
                    let user = r
                        .user
                        .as_ref()
                        .map(|u| self.users.entry(u.clone()).or_default());
                    let mut user_in_use = user.map(|u| &mut u.in_use);
                    for (resource, delta) in r.deltas.iter() {
                        let used = self.in_use.entry(resource.clone()).or_default();
                        *used = taken_out(*used, delta);
                        if let Some(user_in_use) = user_in_use.as_deref_mut() {
                            let used = user_in_use.entry(resource.clone()).or_default();
                            *used = taken_out(*used, delta);
                        }
                    }
                }
            }
            Event::UsageCorrected {
                resource,
                in_use_before,
                in_use_after,
                user,
                ..
            } => match user {
                None => {
                    self.in_use.insert(resource.clone(), *in_use_after);
                }
                Some(user) => {
                    let user = self.users.entry(user.clone()).or_default();
                    user.in_use.insert(resource.clone(), *in_use_after);
                    let used = self.in_use.entry(resource.clone()).or_default();
                    *used = taken_out(*used, in_use_before.saturating_sub(*in_use_after));
                }
            },
            Event::UserLimitsSet { user, limits, .. } => {
                let user = self.users.entry(user.clone()).or_default();
                user.overrides
                    .extend(limits.iter().map(|(r, l)| (r.clone(), *l)));
                user.limits_version = Some(version);
                user.limits_position = None;
            }
            Event::UserLimitsReset { user } => {
                let user = self.users.entry(user.clone()).or_default();
                user.overrides.clear();
                user.limits_version = Some(version);
                user.limits_position = None;
            }
            Event::ParentSet { parent, .. } => self.parent = parent.clone(),
            Event::DescendantReserved { .. }
            | Event::DescendantUsageChanged { .. }
            | Event::DescendantsJoined { .. }
            | Event::DescendantsLeft { .. } => self.subtree.apply(event),
        }
    }

    /// Record that the event at stream `version` is stored at global `position`, so that later
    /// answers about the reservation (or limits) it touched can name that position.
    pub fn note_position(&mut self, event: &Event, version: u64, position: u64) {
        match event {
            Event::LimitsSet { .. } | Event::LimitsReset => {
                if self.limits_version == Some(version) {
                    self.limits_position = Some(position);
                }
            }
            Event::UserLimitsSet { user, .. } | Event::UserLimitsReset { user } => {
                if let Some(user) = self.users.get_mut(user) {
                    if user.limits_version == Some(version) {
                        user.limits_position = Some(position);
                    }
                }
            }
            _ => {
                if let Some(r) = event
                    .reservation_id()
                    .and_then(|id| self.reservations.get_mut(&id))
                {
                    if r.status_version == version {
                        r.position = Some(position);
                    }
                }
            }
        }
    }

    /// The earliest stream version whose event gave a reservation (or the limits) its current
    /// state but whose position was never noted: a state folded from stored events has none; a
    /// snapshot taken while its last events were still being appended has a few at its end.
    pub fn first_version_without_position(&self) -> Option<u64> {
        let limits = self
            .limits_version
            .filter(|_| self.limits_position.is_none());
        let user_limits = self
            .users
            .values()
            .filter(|u| u.limits_position.is_none())
            .filter_map(|u| u.limits_version);
        self.reservations
            .values()
            .filter(|r| r.position.is_none())
            .map(|r| r.status_version)
            .chain(limits)
            .chain(user_limits)
            .min()
    }

    pub fn reservation_count(&self) -> usize {
        self.reservations.len()
    }
}
