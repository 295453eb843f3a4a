//! The reference: a project and its users as SPEC.md describes them, in the plainest terms
//! (maps of numbers). It shares no code with `domain::decide`.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::commands::{named, user_name, Cmd, DEFAULTS, RESOURCES, USERS};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Held,
    Committed,
    Released(&'static str),
}

#[derive(Clone, Debug)]
struct ModelReservation {
    /// The unit's deltas times the count granted, for a counted reserve.
    deltas: BTreeMap<String, i64>,
    /// A counted reserve's (min, max, granted).
    count: Option<(u32, u32, u32)>,
    user: Option<String>,
    status: Status,
    created_ms: i64,
    expires_ms: i64,
}

/// A user's part of the project: its own overrides and its committed usage.
#[derive(Clone, Debug, Default)]
struct ModelUser {
    overrides: BTreeMap<String, i64>,
    in_use: BTreeMap<String, i64>,
}

#[derive(Clone, Debug, Default)]
pub struct Model {
    pub now_ms: i64,
    defaults: BTreeMap<String, i64>,
    overrides: BTreeMap<String, i64>,
    in_use: BTreeMap<String, i64>,
    users: BTreeMap<String, ModelUser>,
    reservations: BTreeMap<Uuid, ModelReservation>,
}

/// A resource named by a refusal, with (limit, in_use, reserved) where the refusal carries them.
pub type Named = (String, Option<(i64, i64, i64)>);

/// Effective limits: resource -> (limit, where it comes from: "user", "project" or "default").
pub type EffectiveLimits = BTreeMap<String, (i64, &'static str)>;

/// How an over-quota reserve for a user stood against the user's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserRefusal {
    pub user: String,
    /// Over the user's own limits, sorted.
    pub overs: Vec<String>,
    /// Every resource of the request: (the user's limit, the user's in_use, reserved).
    pub standing: Vec<(String, (i64, i64, i64))>,
}

/// An answer, in a form both the model and the implementations can produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Reservation {
        id: Uuid,
        status: Status,
        deltas: BTreeMap<String, i64>,
        expires_ms: i64,
        count: Option<u32>,
        user: Option<String>,
    },
    Limits(EffectiveLimits),
    Expired(usize),
    /// (resource, before, after) for each in_use that changed.
    Corrected(Vec<(String, i64, i64)>),
    Refused {
        code: &'static str,
        /// The resources it names, with (limit, in_use, reserved) where it carries them.
        resources: Vec<Named>,
        /// An over-quota's resources over the project's own limits.
        overs: Vec<String>,
        /// A counted reserve's over-quota: the largest count that would fit.
        max_count: Option<u32>,
        /// An over-quota reserve for a user.
        user: Option<UserRefusal>,
    },
}

pub fn refused(code: &'static str, names: Vec<String>) -> Answer {
    Answer::Refused {
        code,
        resources: names.into_iter().map(|n| (n, None)).collect(),
        overs: vec![],
        max_count: None,
        user: None,
    }
}

/// The final state compared after each case.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub overrides: BTreeMap<String, i64>,
    /// resource -> (in_use, reserved, releasing) at the final instant.
    pub usage: BTreeMap<String, (i64, i64, i64)>,
    /// user -> (its own overrides, resource -> (in_use, reserved, releasing)).
    pub users: BTreeMap<String, UserSnapshot>,
    /// id -> (status, user).
    pub reservations: BTreeMap<Uuid, Option<(Status, Option<String>)>>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct UserSnapshot {
    pub overrides: BTreeMap<String, i64>,
    pub usage: BTreeMap<String, (i64, i64, i64)>,
}

/// The deltas times `k`, as plain numbers.
fn times(deltas: &BTreeMap<String, i64>, k: u32) -> BTreeMap<String, i64> {
    deltas
        .iter()
        .map(|(r, d)| (r.clone(), d * i64::from(k)))
        .collect()
}

fn get(map: &BTreeMap<String, i64>, key: &str) -> i64 {
    map.get(key).copied().unwrap_or(0)
}

impl Model {
    pub fn new(now_ms: i64) -> Model {
        Model {
            now_ms,
            defaults: DEFAULTS.iter().map(|(r, l)| (r.to_string(), *l)).collect(),
            ..Model::default()
        }
    }

    // ---- reading the numbers ----

    /// The project's limit: its override, else the default.
    fn limit(&self, resource: &str) -> i64 {
        self.overrides
            .get(resource)
            .or_else(|| self.defaults.get(resource))
            .copied()
            .expect("only resources with a default are judged")
    }

    /// The user's own override, if it set one (its only cap besides the project's).
    fn own_limit(&self, user: &str, resource: &str) -> Option<i64> {
        self.users.get(user)?.overrides.get(resource).copied()
    }

    /// The user's own cap: its override when that is not unlimited.
    fn own_cap(&self, user: &str, resource: &str) -> Option<i64> {
        self.own_limit(user, resource).filter(|l| *l >= 0)
    }

    fn in_use(&self, resource: &str) -> i64 {
        get(&self.in_use, resource)
    }

    fn user_in_use(&self, user: &str, resource: &str) -> i64 {
        self.users.get(user).map_or(0, |u| get(&u.in_use, resource))
    }

    fn live(&self, r: &ModelReservation) -> bool {
        r.status == Status::Held && self.now_ms < r.expires_ms
    }

    /// (reserved, releasing): positive and negative deltas of the live holds, of every hold
    /// when `user` is `None`, else of that user's.
    fn held(&self, resource: &str, user: Option<&str>) -> (i64, i64) {
        let mut reserved = 0;
        let mut releasing = 0;
        let holds = self.reservations.values().filter(|r| self.live(r));
        for r in holds.filter(|r| user.is_none() || r.user.as_deref() == user) {
            let d = get(&r.deltas, resource);
            if d > 0 {
                reserved += d;
            } else {
                releasing += d;
            }
        }
        (reserved, releasing)
    }

    fn reserved(&self, resource: &str) -> i64 {
        self.held(resource, None).0
    }

    fn user_reserved(&self, user: &str, resource: &str) -> i64 {
        self.held(resource, Some(user)).0
    }

    fn project_limits(&self) -> EffectiveLimits {
        let mut all: EffectiveLimits = self
            .defaults
            .iter()
            .map(|(r, l)| (r.clone(), (*l, "default")))
            .collect();
        all.extend(
            self.overrides
                .iter()
                .map(|(r, l)| (r.clone(), (*l, "project"))),
        );
        all
    }

    /// A user's limits: its own overrides over the project's effective limits.
    pub fn user_limits(&self, user: &str) -> EffectiveLimits {
        let mut all = self.project_limits();
        if let Some(u) = self.users.get(user) {
            all.extend(u.overrides.iter().map(|(r, l)| (r.clone(), (*l, "user"))));
        }
        all
    }

    /// What a user's usage answers for each known resource: (limit, in_use, reserved).
    pub fn user_usage(&self, user: &str) -> BTreeMap<String, (i64, i64, i64)> {
        self.user_limits(user)
            .into_iter()
            .map(|(r, (limit, _))| {
                let numbers = (
                    limit,
                    self.user_in_use(user, &r),
                    self.user_reserved(user, &r),
                );
                (r, numbers)
            })
            .collect()
    }

    fn answer_for(&self, id: Uuid) -> Answer {
        let r = &self.reservations[&id];
        Answer::Reservation {
            id,
            status: r.status,
            deltas: r.deltas.clone(),
            expires_ms: r.expires_ms,
            count: r.count.map(|(_, _, granted)| granted),
            user: r.user.clone(),
        }
    }

    fn unknown<'a>(&self, names: impl Iterator<Item = &'a String>) -> Vec<String> {
        names
            .filter(|n| !self.defaults.contains_key(*n))
            .cloned()
            .collect()
    }

    /// Whether the positive `deltas` fit every cap now: the project's (rule 1) and, for a
    /// user, the user's own (rule 8).
    fn fits(&self, deltas: &BTreeMap<String, i64>, user: Option<&str>) -> bool {
        deltas.iter().filter(|(_, d)| **d > 0).all(|(r, d)| {
            let limit = self.limit(r);
            let project = limit < 0 || self.in_use(r) + self.reserved(r) + d <= limit;
            let own = user.and_then(|u| Some((u, self.own_cap(u, r)?)));
            let user = own.is_none_or(|(u, cap)| {
                self.user_in_use(u, r) + self.user_reserved(u, r) + d <= cap
            });
            project && user
        })
    }

    // ---- the commands ----

    fn reserve(
        &mut self,
        id: Uuid,
        unit: &BTreeMap<String, i64>,
        expires_in: u32,
        count: Option<(u32, u32)>,
        user: Option<String>,
    ) -> Answer {
        if !(1..=2_592_000).contains(&expires_in) {
            return refused("invalid", vec![]);
        }
        let expires_in_ms = i64::from(expires_in) * 1000;
        if let Some(existing) = self.reservations.get(&id) {
            // Rule 5: the same body (the user is part of it) repeats; another is a mismatch.
            let granted = existing.count.map_or(1, |(_, _, k)| k);
            let range = existing.count.map(|(min, max, _)| (min, max));
            return if existing.deltas == times(unit, granted)
                && range == count
                && existing.expires_ms - existing.created_ms == expires_in_ms
                && existing.user == user
            {
                self.answer_for(id)
            } else {
                refused("idempotency-mismatch", vec![])
            };
        }
        let unknown = self.unknown(unit.keys());
        if !unknown.is_empty() {
            return refused("unknown-resource", unknown);
        }
        let who = user.as_deref();
        // Rule 9: the largest k in min..=max that fits; below min, judged on min.
        let (k, max_count) = match count {
            None => (1, None),
            Some((min, max)) => {
                let fit = (0..=max)
                    .rev()
                    .find(|k| self.fits(&times(unit, *k), who))
                    .unwrap_or(0);
                (fit.max(min), Some(fit))
            }
        };
        let deltas = times(unit, k);
        // Rule 3, for the project and (rule 8) for the user: a reduction below zero, counting
        // the reductions already held, is refused. The refusal names every resource that would
        // go below zero, for the project or for the user (as rule 2 names every resource over).
        let underflows: Vec<String> = deltas
            .iter()
            .filter(|(r, d)| {
                let project = self.in_use(r) + self.held(r, None).1 + **d < 0;
                let user =
                    who.is_some_and(|u| self.user_in_use(u, r) + self.held(r, Some(u)).1 + **d < 0);
                **d < 0 && (project || user)
            })
            .map(|(r, _)| r.clone())
            .collect();
        if !underflows.is_empty() {
            return refused("usage-underflow", underflows);
        }
        // Rules 1 and 2 for the project.
        let mut overs = vec![];
        let mut standing = vec![];
        for (r, d) in &deltas {
            let (limit, in_use, reserved) = (self.limit(r), self.in_use(r), self.reserved(r));
            standing.push((r.clone(), Some((limit, in_use, reserved))));
            if *d > 0 && limit >= 0 && in_use + reserved + d > limit {
                overs.push(r.clone());
            }
        }
        // Rule 8: the user's own caps; its standing shows the project's limit where it has none.
        let user_refusal = who.map(|u| {
            let mut user_overs = vec![];
            let mut user_standing = vec![];
            for (r, d) in &deltas {
                let in_use = self.user_in_use(u, r);
                let reserved = self.user_reserved(u, r);
                let shown = self.own_limit(u, r).unwrap_or_else(|| self.limit(r));
                user_standing.push((r.clone(), (shown, in_use, reserved)));
                if *d > 0
                    && self
                        .own_cap(u, r)
                        .is_some_and(|cap| in_use + reserved + d > cap)
                {
                    user_overs.push(r.clone());
                }
            }
            UserRefusal {
                user: u.to_owned(),
                overs: user_overs,
                standing: user_standing,
            }
        });
        if !overs.is_empty() || user_refusal.as_ref().is_some_and(|u| !u.overs.is_empty()) {
            return Answer::Refused {
                code: "over-quota",
                resources: standing,
                overs,
                max_count,
                user: user_refusal,
            };
        }
        self.reservations.insert(
            id,
            ModelReservation {
                deltas,
                count: count.map(|(min, max)| (min, max, k)),
                user,
                status: Status::Held,
                created_ms: self.now_ms,
                expires_ms: self.now_ms + expires_in_ms,
            },
        );
        self.answer_for(id)
    }

    fn commit(&mut self, id: Uuid) -> Answer {
        let Some(r) = self.reservations.get(&id).cloned() else {
            return refused("not-found", vec![]);
        };
        match r.status {
            Status::Committed => self.answer_for(id),
            Status::Released("expired") => refused("reservation-expired", vec![]),
            Status::Released(_) => refused("reservation-released", vec![]),
            Status::Held if self.now_ms >= r.expires_ms => {
                // The expiry is recorded by the refused commit itself.
                self.reservations.get_mut(&id).unwrap().status = Status::Released("expired");
                refused("reservation-expired", vec![])
            }
            Status::Held => {
                // Never below zero, for the project nor for the user.
                let user = r.user.as_deref();
                let underflows: Vec<String> = r
                    .deltas
                    .iter()
                    .filter(|(res, d)| {
                        self.in_use(res) + **d < 0
                            || user.is_some_and(|u| self.user_in_use(u, res) + **d < 0)
                    })
                    .map(|(res, _)| res.clone())
                    .collect();
                if !underflows.is_empty() {
                    return refused("usage-underflow", underflows);
                }
                for (res, d) in &r.deltas {
                    *self.in_use.entry(res.clone()).or_default() += d;
                    if let Some(u) = &r.user {
                        let user = self.users.entry(u.clone()).or_default();
                        *user.in_use.entry(res.clone()).or_default() += d;
                    }
                }
                self.reservations.get_mut(&id).unwrap().status = Status::Committed;
                self.answer_for(id)
            }
        }
    }

    fn release(&mut self, id: Uuid) -> Answer {
        let Some(r) = self.reservations.get(&id).cloned() else {
            return refused("not-found", vec![]);
        };
        let reason = match r.status {
            Status::Released(_) => return self.answer_for(id),
            Status::Held if self.now_ms < r.expires_ms => "rolled_back",
            Status::Held => "expired",
            Status::Committed => {
                // Rule 10: freed usage stops at zero; the reductions held must still fit.
                let underflows: Vec<String> = r
                    .deltas
                    .iter()
                    .filter(|(res, d)| (self.in_use(res) - **d).max(0) + self.held(res, None).1 < 0)
                    .map(|(res, _)| res.clone())
                    .collect();
                if !underflows.is_empty() {
                    return refused("usage-underflow", underflows);
                }
                // Freeing a committed reduction gives usage back: it must fit under the
                // project's limit and the user's own, with what is reserved.
                let user = r.user.as_deref();
                let overs: Vec<String> = r
                    .deltas
                    .iter()
                    .filter(|(res, d)| {
                        let limit = self.limit(res);
                        let project =
                            limit >= 0 && self.in_use(res) - **d + self.reserved(res) > limit;
                        let own = user.and_then(|u| Some((u, self.own_cap(u, res)?)));
                        let user = own.is_some_and(|(u, cap)| {
                            self.user_in_use(u, res) - **d + self.user_reserved(u, res) > cap
                        });
                        **d < 0 && (project || user)
                    })
                    .map(|(res, _)| res.clone())
                    .collect();
                if !overs.is_empty() {
                    return Answer::Refused {
                        code: "over-quota",
                        resources: r
                            .deltas
                            .keys()
                            .map(|res| {
                                let numbers =
                                    (self.limit(res), self.in_use(res), self.reserved(res));
                                (res.clone(), Some(numbers))
                            })
                            .collect(),
                        overs,
                        max_count: None,
                        user: None,
                    };
                }
                for (res, d) in &r.deltas {
                    let used = self.in_use.entry(res.clone()).or_default();
                    *used = (*used - d).max(0);
                    if let Some(u) = &r.user {
                        let user = self.users.entry(u.clone()).or_default();
                        let used = user.in_use.entry(res.clone()).or_default();
                        *used = (*used - d).max(0);
                    }
                }
                "freed"
            }
        };
        self.reservations.get_mut(&id).unwrap().status = Status::Released(reason);
        self.answer_for(id)
    }

    /// Rule 6 for the project (`user` is `None`) or for a user's own limits (rule 8).
    fn set_limits(
        &mut self,
        user: Option<&str>,
        limits: &BTreeMap<String, i64>,
        force: bool,
    ) -> Answer {
        let unknown = self.unknown(limits.keys());
        if !unknown.is_empty() {
            return refused("unknown-resource", unknown);
        }
        let mut below = vec![];
        for (r, new) in limits.iter().filter(|(_, new)| **new >= 0) {
            // The owner's limit before: the project's effective one, or the user's own.
            let old = match user {
                None => Some(self.limit(r)),
                Some(u) => self.own_limit(u, r),
            };
            let lowering = old.is_none_or(|old| old < 0 || *new < old);
            let (in_use, reserved) = match user {
                None => (self.in_use(r), self.reserved(r)),
                Some(u) => (self.user_in_use(u, r), self.user_reserved(u, r)),
            };
            if lowering && *new < in_use + reserved {
                below.push((r.clone(), Some((*new, in_use, reserved))));
            }
        }
        if !below.is_empty() && !force {
            return Answer::Refused {
                code: "limit-below-usage",
                resources: below,
                overs: vec![],
                max_count: None,
                user: None,
            };
        }
        match user {
            None => {
                self.overrides.extend(limits.clone());
                Answer::Limits(self.project_limits())
            }
            Some(u) => {
                let own = self.users.entry(u.to_owned()).or_default();
                own.overrides.extend(limits.clone());
                Answer::Limits(self.user_limits(u))
            }
        }
    }

    fn reset_limits(&mut self) -> Answer {
        self.overrides.clear();
        Answer::Limits(self.project_limits())
    }

    fn reset_user_limits(&mut self, user: &str) -> Answer {
        if let Some(u) = self.users.get_mut(user) {
            u.overrides.clear();
        }
        Answer::Limits(self.user_limits(user))
    }

    fn expire(&mut self) -> Answer {
        let now = self.now_ms;
        let mut count = 0;
        for r in self.reservations.values_mut() {
            if r.status == Status::Held && now >= r.expires_ms {
                r.status = Status::Released("expired");
                count += 1;
            }
        }
        Answer::Expired(count)
    }

    /// Rule 10: set the project's in_use, or a user's (which moves the project's by as much,
    /// never below zero). Equal values record nothing.
    fn correct(&mut self, user: Option<&str>, in_use: &BTreeMap<String, i64>) -> Answer {
        let unknown = self.unknown(in_use.keys());
        if !unknown.is_empty() {
            return refused("unknown-resource", unknown);
        }
        let mut corrections = vec![];
        for (r, after) in in_use {
            let before = match user {
                None => self.in_use(r),
                Some(u) => self.user_in_use(u, r),
            };
            if before == *after {
                continue;
            }
            corrections.push((r.clone(), before, *after));
            match user {
                None => {
                    self.in_use.insert(r.clone(), *after);
                }
                Some(u) => {
                    let own = self.users.entry(u.to_owned()).or_default();
                    own.in_use.insert(r.clone(), *after);
                    let project = self.in_use.entry(r.clone()).or_default();
                    *project = (*project + after - before).max(0);
                }
            }
        }
        Answer::Corrected(corrections)
    }

    pub fn run(&mut self, command: &Cmd, id: Uuid) -> Answer {
        match command {
            Cmd::Reserve {
                deltas,
                expires_in,
                count,
                user,
                ..
            } => self.reserve(id, &named(deltas), *expires_in, *count, user_name(*user)),
            Cmd::Commit(_) => self.commit(id),
            Cmd::Release(_) => self.release(id),
            Cmd::SetLimits { limits, force } => self.set_limits(None, &named(limits), *force),
            Cmd::ResetLimits => self.reset_limits(),
            Cmd::SetUserLimits {
                user,
                limits,
                force,
            } => self.set_limits(Some(USERS[*user]), &named(limits), *force),
            Cmd::ResetUserLimits(user) => self.reset_user_limits(USERS[*user]),
            Cmd::Expire => self.expire(),
            Cmd::Correct { user, in_use } => self.correct(user.map(|u| USERS[u]), &named(in_use)),
            Cmd::Advance(_) => unreachable!("the clock is moved by the runner"),
        }
    }

    pub fn snapshot(&self, ids: &[Uuid]) -> Snapshot {
        let usage = |user: Option<&str>| {
            RESOURCES[..3]
                .iter()
                .map(|r| {
                    let in_use = user.map_or(self.in_use(r), |u| self.user_in_use(u, r));
                    let (reserved, releasing) = self.held(r, user);
                    (r.to_string(), (in_use, reserved, releasing))
                })
                .collect()
        };
        Snapshot {
            overrides: self.overrides.clone(),
            usage: usage(None),
            users: USERS
                .iter()
                .map(|u| {
                    let own = UserSnapshot {
                        overrides: self
                            .users
                            .get(*u)
                            .map(|x| x.overrides.clone())
                            .unwrap_or_default(),
                        usage: usage(Some(u)),
                    };
                    (u.to_string(), own)
                })
                .collect(),
            reservations: ids
                .iter()
                .map(|id| {
                    let r = self.reservations.get(id);
                    (*id, r.map(|r| (r.status, r.user.clone())))
                })
                .collect(),
        }
    }
}
