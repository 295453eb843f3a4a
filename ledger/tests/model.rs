//! Model-based tests: random command sequences (reserve with and without a client id, counted
//! or not, commit,
//! release, set and reset limits with and without force, expire, correct usage, and a driven
//! clock) run against (a) the domain's `decide` and (b) the real `Ledger` on SQLite and
//! PostgreSQL. Every answer and the final state are compared with `Model`, a deliberately plain
//! reference written from SPEC.md that shares no code with `domain::decide`.
//!
//! After each ledger case the project is also read back by a fresh `Ledger` on the same store,
//! so what was answered is what a restart replays.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use chrono::{TimeDelta, TimeZone, Utc};
use domain::{
    decide, Command, Defaults, Deltas, Event, Limit, Limits, Outcome, ProjectId, ProjectState,
    Refusal, ReleaseReason, ReservationId, ReservationStatus, ResourceName, Timestamp,
};
use ledger::{
    testing, Clock, EventStore, Ledger, LedgerConfig, LedgerError, ManualClock, Metadata,
    ReservationView,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use uuid::Uuid;

/// `zzz` never gets a default: reserving it must fail `unknown-resource`.
const RESOURCES: [&str; 4] = ["a", "b", "c", "zzz"];
const DEFAULTS: [(&str, i64); 3] = [("a", 4), ("b", 10), ("c", -1)];
/// Client-chosen ids shared by the commands of a case, so that retries and reuse happen.
const POOL: u128 = 3;

// ---- the reference model ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
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
    status: Status,
    created_ms: i64,
    expires_ms: i64,
}

/// A project as SPEC.md describes it, in the plainest terms: maps of numbers.
#[derive(Clone, Debug, Default)]
struct Model {
    now_ms: i64,
    defaults: BTreeMap<String, i64>,
    overrides: BTreeMap<String, i64>,
    in_use: BTreeMap<String, i64>,
    reservations: BTreeMap<Uuid, ModelReservation>,
}

/// A resource named by a refusal, with (limit, in_use, reserved) where the refusal carries them.
type Named = (String, Option<(i64, i64, i64)>);

/// An answer, in a form both the model and the implementations can produce.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    Reservation {
        id: Uuid,
        status: Status,
        deltas: BTreeMap<String, i64>,
        expires_ms: i64,
        count: Option<u32>,
    },
    Limits(BTreeMap<String, i64>),
    Expired(usize),
    Corrected,
    /// A refusal: its code, and the resources it names with (limit, in_use, reserved) where the
    /// refusal carries them.
    Refused {
        code: &'static str,
        resources: Vec<Named>,
        /// A counted reserve's over-quota: the largest count that would fit.
        max_count: Option<u32>,
    },
}

fn refused(code: &'static str, names: Vec<String>) -> Answer {
    Answer::Refused {
        code,
        resources: names.into_iter().map(|n| (n, None)).collect(),
        max_count: None,
    }
}

/// The deltas times `k`, as plain numbers.
fn times(deltas: &BTreeMap<String, i64>, k: u32) -> BTreeMap<String, i64> {
    deltas
        .iter()
        .map(|(r, d)| (r.clone(), d * i64::from(k)))
        .collect()
}

impl Model {
    fn new(now_ms: i64) -> Model {
        Model {
            now_ms,
            defaults: DEFAULTS.iter().map(|(r, l)| (r.to_string(), *l)).collect(),
            ..Model::default()
        }
    }

    fn limit(&self, resource: &str) -> Option<i64> {
        self.overrides
            .get(resource)
            .or_else(|| self.defaults.get(resource))
            .copied()
    }

    fn in_use(&self, resource: &str) -> i64 {
        self.in_use.get(resource).copied().unwrap_or(0)
    }

    fn live(&self, r: &ModelReservation) -> bool {
        r.status == Status::Held && self.now_ms < r.expires_ms
    }

    /// (reserved, releasing): positive and negative deltas of live holds.
    fn held(&self, resource: &str) -> (i64, i64) {
        let mut reserved = 0;
        let mut releasing = 0;
        for r in self.reservations.values().filter(|r| self.live(r)) {
            let d = r.deltas.get(resource).copied().unwrap_or(0);
            if d > 0 {
                reserved += d;
            } else {
                releasing += d;
            }
        }
        (reserved, releasing)
    }

    fn effective_limits(&self) -> BTreeMap<String, i64> {
        let mut all = self.defaults.clone();
        all.extend(self.overrides.clone());
        all
    }

    fn answer_for(&self, id: Uuid) -> Answer {
        let r = &self.reservations[&id];
        Answer::Reservation {
            id,
            status: r.status,
            deltas: r.deltas.clone(),
            expires_ms: r.expires_ms,
            count: r.count.map(|(_, _, granted)| granted),
        }
    }

    fn unknown<'a>(&self, names: impl Iterator<Item = &'a String>) -> Vec<String> {
        names
            .filter(|n| !self.defaults.contains_key(*n))
            .cloned()
            .collect()
    }

    /// Whether `deltas` fit every limit now (rule 1 for the positive deltas).
    fn fits(&self, deltas: &BTreeMap<String, i64>) -> bool {
        deltas.iter().all(|(resource, delta)| {
            let limit = self.limit(resource).unwrap();
            let (reserved, _) = self.held(resource);
            *delta <= 0 || limit < 0 || self.in_use(resource) + reserved + delta <= limit
        })
    }

    fn reserve(
        &mut self,
        id: Uuid,
        unit: &BTreeMap<String, i64>,
        expires_in: u32,
        count: Option<(u32, u32)>,
    ) -> Answer {
        if !(1..=2_592_000).contains(&expires_in) {
            return refused("invalid", vec![]);
        }
        let expires_in_ms = i64::from(expires_in) * 1000;
        if let Some(existing) = self.reservations.get(&id) {
            let granted = existing.count.map_or(1, |(_, _, k)| k);
            let range = existing.count.map(|(min, max, _)| (min, max));
            return if existing.deltas == times(unit, granted)
                && range == count
                && existing.expires_ms - existing.created_ms == expires_in_ms
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
        // Rule 9: the largest k in min..=max that fits; below min, judged on min.
        let (k, max_count) = match count {
            None => (1, None),
            Some((min, max)) => {
                let fit = (0..=max)
                    .rev()
                    .find(|k| self.fits(&times(unit, *k)))
                    .unwrap_or(0);
                (fit.max(min), Some(fit))
            }
        };
        let deltas = &times(unit, k);
        let mut underflows = vec![];
        let mut overs = vec![];
        let mut standing = vec![];
        for (resource, delta) in deltas {
            let limit = self.limit(resource).unwrap();
            let in_use = self.in_use(resource);
            let (reserved, releasing) = self.held(resource);
            standing.push((resource.clone(), Some((limit, in_use, reserved))));
            if *delta < 0 && in_use + releasing + delta < 0 {
                underflows.push(resource.clone());
            }
            if *delta > 0 && limit >= 0 && in_use + reserved + delta > limit {
                overs.push(resource.clone());
            }
        }
        if !underflows.is_empty() {
            return refused("usage-underflow", underflows);
        }
        if !overs.is_empty() {
            return Answer::Refused {
                code: "over-quota",
                resources: standing,
                max_count,
            };
        }
        self.reservations.insert(
            id,
            ModelReservation {
                deltas: deltas.clone(),
                count: count.map(|(min, max)| (min, max, k)),
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
                let underflows: Vec<String> = r
                    .deltas
                    .iter()
                    .filter(|(res, d)| self.in_use(res) + **d < 0)
                    .map(|(res, _)| res.clone())
                    .collect();
                if !underflows.is_empty() {
                    return refused("usage-underflow", underflows);
                }
                for (res, d) in &r.deltas {
                    *self.in_use.entry(res.clone()).or_default() += d;
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
                let underflows: Vec<String> = r
                    .deltas
                    .iter()
                    .filter(|(res, d)| self.in_use(res) - **d + self.held(res).1 < 0)
                    .map(|(res, _)| res.clone())
                    .collect();
                if !underflows.is_empty() {
                    return refused("usage-underflow", underflows);
                }
                // Freeing a committed reduction gives usage back: it must fit under the limit.
                let overs: Vec<String> = r
                    .deltas
                    .iter()
                    .filter(|(res, d)| {
                        let limit = self.limit(res).unwrap_or(-1);
                        **d < 0 && limit >= 0 && self.in_use(res) - **d + self.held(res).0 > limit
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
                                let limit = self.limit(res).unwrap_or(-1);
                                (
                                    res.clone(),
                                    Some((limit, self.in_use(res), self.held(res).0)),
                                )
                            })
                            .collect(),
                        max_count: None,
                    };
                }
                for (res, d) in &r.deltas {
                    *self.in_use.entry(res.clone()).or_default() -= d;
                }
                "freed"
            }
        };
        self.reservations.get_mut(&id).unwrap().status = Status::Released(reason);
        self.answer_for(id)
    }

    fn set_limits(&mut self, limits: &BTreeMap<String, i64>, force: bool) -> Answer {
        let unknown = self.unknown(limits.keys());
        if !unknown.is_empty() {
            return refused("unknown-resource", unknown);
        }
        let mut below = vec![];
        for (resource, new) in limits {
            if *new < 0 {
                continue;
            }
            let old = self.limit(resource).unwrap();
            let lowering = old < 0 || *new < old;
            let in_use = self.in_use(resource);
            let reserved = self.held(resource).0;
            if lowering && *new < in_use + reserved {
                below.push((resource.clone(), Some((*new, in_use, reserved))));
            }
        }
        if !below.is_empty() && !force {
            return Answer::Refused {
                code: "limit-below-usage",
                resources: below,
                max_count: None,
            };
        }
        self.overrides.extend(limits.clone());
        Answer::Limits(self.effective_limits())
    }

    fn reset_limits(&mut self) -> Answer {
        self.overrides.clear();
        Answer::Limits(self.effective_limits())
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

    fn correct(&mut self, resource: &str, in_use: i64) -> Answer {
        if !self.defaults.contains_key(resource) {
            return refused("unknown-resource", vec![resource.to_owned()]);
        }
        self.in_use.insert(resource.to_owned(), in_use);
        Answer::Corrected
    }

    fn run(&mut self, command: &Cmd, id: Uuid) -> Answer {
        match command {
            Cmd::Reserve {
                deltas,
                expires_in,
                count,
                ..
            } => self.reserve(id, &named(deltas), *expires_in, *count),
            Cmd::Commit(_) => self.commit(id),
            Cmd::Release(_) => self.release(id),
            Cmd::SetLimits { limits, force } => self.set_limits(&named(limits), *force),
            Cmd::ResetLimits => self.reset_limits(),
            Cmd::Expire => self.expire(),
            Cmd::Correct { resource, in_use } => self.correct(RESOURCES[*resource], *in_use),
            Cmd::Advance(_) => unreachable!("the clock is moved by the runner"),
        }
    }

    fn snapshot(&self, ids: &[Uuid]) -> Snapshot {
        Snapshot {
            overrides: self.overrides.clone(),
            usage: RESOURCES[..3]
                .iter()
                .map(|r| {
                    let (reserved, releasing) = self.held(r);
                    (r.to_string(), (self.in_use(r), reserved, releasing))
                })
                .collect(),
            reservations: ids
                .iter()
                .map(|id| (*id, self.reservations.get(id).map(|r| r.status)))
                .collect(),
        }
    }
}

/// The final state compared after each case.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    overrides: BTreeMap<String, i64>,
    /// resource -> (in_use, reserved, releasing) at the final instant.
    usage: BTreeMap<String, (i64, i64, i64)>,
    reservations: BTreeMap<Uuid, Option<Status>>,
}

// ---- commands ----

#[derive(Clone, Debug)]
enum Cmd {
    /// `id`: an index into the shared pool, or `None` for an id chosen by the ledger.
    Reserve {
        id: Option<usize>,
        deltas: Vec<(usize, i64)>,
        expires_in: u32,
        /// A counted reserve's (min, max).
        count: Option<(u32, u32)>,
    },
    /// Index into the ids known so far (the pool, then ledger-chosen ones).
    Commit(usize),
    Release(usize),
    SetLimits {
        limits: Vec<(usize, i64)>,
        force: bool,
    },
    ResetLimits,
    /// Seconds to move the clock.
    Advance(u32),
    Expire,
    Correct {
        resource: usize,
        in_use: i64,
    },
}

fn named(pairs: &[(usize, i64)]) -> BTreeMap<String, i64> {
    pairs
        .iter()
        .map(|(i, v)| (RESOURCES[*i].to_owned(), *v))
        .collect()
}

fn command() -> impl Strategy<Value = Cmd> {
    // Mostly known resources; `zzz` (index 3) now and then.
    let resource = prop_oneof![8 => 0usize..3, 1 => Just(3usize)];
    let deltas = prop::collection::vec((resource.clone(), -3i64..=5), 1..=2);
    let limits = prop::collection::vec((resource.clone(), -1i64..=8), 1..=2);
    let expires_in = prop_oneof![
        3 => Just(1u32),
        3 => Just(30),
        3 => Just(60),
        3 => Just(600),
        1 => Just(0u32), // invalid
    ];
    // A counted reserve now and then, over small ranges that straddle the room left.
    let count = prop::option::weighted(
        0.3,
        (1u32..=3, 0u32..=2).prop_map(|(min, extra)| (min, min + extra)),
    );
    prop_oneof![
        6 => (prop::option::weighted(0.7, 0..POOL as usize), deltas, expires_in, count)
            .prop_map(|(id, deltas, expires_in, count)| Cmd::Reserve { id, deltas, expires_in, count }),
        4 => (0usize..8).prop_map(Cmd::Commit),
        2 => (0usize..8).prop_map(Cmd::Release),
        1 => (limits, any::<bool>()).prop_map(|(limits, force)| Cmd::SetLimits { limits, force }),
        1 => Just(Cmd::ResetLimits),
        // Steps that land exactly on an expiry instant as well as between them.
        2 => prop_oneof![Just(0u32), Just(1), Just(30), 1u32..=45, Just(601)].prop_map(Cmd::Advance),
        1 => Just(Cmd::Expire),
        1 => (0usize..4, 0i64..=6).prop_map(|(resource, in_use)| Cmd::Correct { resource, in_use }),
    ]
}

fn commands(max: usize) -> impl Strategy<Value = Vec<Cmd>> {
    prop::collection::vec(command(), 1..=max)
}

// ---- mapping the implementations' answers ----

fn res(name: &str) -> ResourceName {
    ResourceName::parse(name).unwrap()
}

fn deltas_of(pairs: &[(usize, i64)]) -> Deltas {
    Deltas::new(
        named(pairs)
            .into_iter()
            .map(|(r, d)| (res(&r), d))
            .collect(),
    )
    .unwrap()
}

fn limits_of(pairs: &[(usize, i64)]) -> Limits {
    named(pairs)
        .into_iter()
        .map(|(r, l)| (res(&r), Limit::new(l).unwrap()))
        .collect()
}

fn status_of(status: ReservationStatus) -> Status {
    match status {
        ReservationStatus::Held => Status::Held,
        ReservationStatus::Committed => Status::Committed,
        ReservationStatus::Released(reason) => Status::Released(match reason {
            ReleaseReason::RolledBack => "rolled_back",
            ReleaseReason::Expired => "expired",
            ReleaseReason::Freed => "freed",
        }),
    }
}

fn plain_deltas(deltas: &Deltas) -> BTreeMap<String, i64> {
    deltas.iter().map(|(r, d)| (r.to_string(), d)).collect()
}

fn refusal_answer(refusal: &Refusal) -> Answer {
    let names = |v: &[ResourceName]| v.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    let standing = |s: &BTreeMap<ResourceName, domain::ResourceStanding>| {
        s.iter()
            .map(|(r, s)| (r.to_string(), Some((s.limit.value(), s.in_use, s.reserved))))
            .collect()
    };
    match refusal {
        Refusal::Invalid(_) => refused("invalid", vec![]),
        Refusal::UnknownResource(v) => refused("unknown-resource", names(v)),
        Refusal::OverQuota {
            standing: s,
            max_count,
            ..
        } => Answer::Refused {
            code: "over-quota",
            resources: standing(s),
            max_count: *max_count,
        },
        Refusal::UsageUnderflow(v) => refused("usage-underflow", names(v)),
        Refusal::IdempotencyMismatch => refused("idempotency-mismatch", vec![]),
        Refusal::NotFound => refused("not-found", vec![]),
        Refusal::ReservationExpired => refused("reservation-expired", vec![]),
        Refusal::ReservationReleased => refused("reservation-released", vec![]),
        Refusal::LimitBelowUsage(s) => Answer::Refused {
            code: "limit-below-usage",
            resources: standing(s),
            max_count: None,
        },
    }
}

fn count_of(count: Option<(u32, u32)>) -> Option<domain::CountRange> {
    count.map(|(min, max)| domain::CountRange::new(min, max).unwrap())
}

fn domain_command(command: &Cmd, id: Uuid) -> Command {
    let reservation_id = ReservationId(id);
    match command {
        Cmd::Reserve {
            deltas,
            expires_in,
            count,
            ..
        } => Command::Reserve {
            user: None,
            reservation_id,
            deltas: deltas_of(deltas),
            expires_in_s: *expires_in,
            count: count_of(*count),
        },
        Cmd::Commit(_) => Command::Commit { reservation_id },
        Cmd::Release(_) => Command::Release { reservation_id },
        Cmd::SetLimits { limits, force } => Command::SetLimits {
            limits: limits_of(limits),
            force: *force,
        },
        Cmd::ResetLimits => Command::ResetLimits,
        Cmd::Expire => Command::Expire,
        Cmd::Correct { resource, in_use } => Command::CorrectUsage {
            user: None,
            in_use: [(res(RESOURCES[*resource]), *in_use)].into(),
            reason: domain::Reason::parse("model test").unwrap(),
        },
        Cmd::Advance(_) => unreachable!(),
    }
}

fn state_snapshot(state: &ProjectState, now: Timestamp, ids: &[Uuid]) -> Snapshot {
    Snapshot {
        overrides: state
            .overrides
            .iter()
            .map(|(r, l)| (r.to_string(), l.value()))
            .collect(),
        usage: RESOURCES[..3]
            .iter()
            .map(|r| {
                let u = state.usage(&res(r), now);
                (r.to_string(), (u.in_use, u.reserved, u.releasing))
            })
            .collect(),
        reservations: ids
            .iter()
            .map(|id| {
                (
                    *id,
                    state
                        .reservation(&ReservationId(*id))
                        .map(|r| status_of(r.status)),
                )
            })
            .collect(),
    }
}

fn start_time() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap()
}

fn pool() -> Vec<Uuid> {
    (1..=POOL).map(Uuid::from_u128).collect()
}

/// The id a command is about: a pool id, a known id, or (reserve without id) a fresh one.
fn target_id(command: &Cmd, known: &[Uuid]) -> Uuid {
    match command {
        Cmd::Reserve { id: Some(i), .. } => known[*i],
        Cmd::Reserve { id: None, .. } => Uuid::new_v4(),
        Cmd::Commit(i) | Cmd::Release(i) => known[*i % known.len()],
        _ => Uuid::nil(),
    }
}

// ---- (a) the domain ----

fn check_domain(commands: &[Cmd]) -> Result<(), TestCaseError> {
    let mut model = Model::new(start_time().timestamp_millis());
    let mut now = start_time();
    let mut defaults = Defaults::default();
    defaults.apply(&Event::DefaultLimitsSet {
        limits: DEFAULTS
            .iter()
            .map(|(r, l)| (res(r), Limit::new(*l).unwrap()))
            .collect(),
    });
    let mut state = ProjectState::new(ProjectId::parse("model").unwrap());
    let mut known = pool();
    for (step, command) in commands.iter().enumerate() {
        if let Cmd::Advance(s) = command {
            now += TimeDelta::seconds(i64::from(*s));
            model.now_ms = now.timestamp_millis();
            continue;
        }
        let id = target_id(command, &known);
        let decision = decide(&domain_command(command, id), &state, &defaults, now);
        for event in &decision.events {
            state.apply(event, now);
        }
        let answer = match &decision.answer {
            Err(refusal) => refusal_answer(refusal),
            Ok(Outcome::Reservation(rid)) => {
                let r = state.reservation(rid).unwrap();
                Answer::Reservation {
                    id: rid.0,
                    status: status_of(r.status),
                    deltas: plain_deltas(&r.deltas),
                    expires_ms: r.expires_at.timestamp_millis(),
                    count: r.count.map(|c| c.granted),
                }
            }
            Ok(Outcome::Limits) => {
                let mut all: BTreeMap<String, i64> = defaults
                    .limits
                    .iter()
                    .map(|(r, l)| (r.to_string(), l.value()))
                    .collect();
                all.extend(
                    state
                        .overrides
                        .iter()
                        .map(|(r, l)| (r.to_string(), l.value())),
                );
                Answer::Limits(all)
            }
            Ok(Outcome::Expired(n)) => Answer::Expired(*n),
            Ok(Outcome::UsageCorrected(_)) => Answer::Corrected,
        };
        let expected = model.run(command, id);
        prop_assert_eq!(&answer, &expected, "step {}: {:?}", step, command);
        if matches!(command, Cmd::Reserve { id: None, .. })
            && matches!(answer, Answer::Reservation { .. })
        {
            known.push(id);
        }
    }
    prop_assert_eq!(state_snapshot(&state, now, &known), model.snapshot(&known));
    Ok(())
}

#[test]
fn domain_agrees_with_the_model() {
    let mut runner = TestRunner::new(Config {
        cases: 3000,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&commands(40), |commands| check_domain(&commands))
        .unwrap();
    eprintln!("model domain: 3000 cases agree with the model");
}

// ---- (b) the ledger on each backend ----

fn view_answer(view: &ReservationView) -> Answer {
    Answer::Reservation {
        id: view.reservation_id.0,
        status: status_of(view.status),
        deltas: plain_deltas(&view.deltas),
        expires_ms: view.expires_at.timestamp_millis(),
        count: view.count.map(|c| c.granted),
    }
}

fn ledger_answer<T>(result: Result<T, LedgerError>, ok: impl FnOnce(T) -> Answer) -> Answer {
    match result {
        Ok(value) => ok(value),
        Err(LedgerError::Refused(refusal)) => refusal_answer(&refusal),
        Err(other) => panic!("the ledger failed: {other}"),
    }
}

async fn check_ledger(
    store: Arc<dyn EventStore>,
    project: ProjectId,
    commands: &[Cmd],
) -> Result<(), TestCaseError> {
    let clock = Arc::new(ManualClock::new(start_time()));
    let ledger = Ledger::start(store.clone(), clock.clone(), LedgerConfig::default())
        .await
        .unwrap();
    let meta = Metadata::default();
    let mut model = Model::new(start_time().timestamp_millis());
    let mut known = pool();
    for (step, command) in commands.iter().enumerate() {
        let id = target_id(command, &known);
        let answer = match command {
            Cmd::Advance(s) => {
                clock.advance(TimeDelta::seconds(i64::from(*s)));
                model.now_ms = clock.now().timestamp_millis();
                continue;
            }
            Cmd::Reserve {
                id: chosen,
                deltas,
                expires_in,
                count,
            } => {
                let client_id = chosen.map(|_| ReservationId(id));
                ledger_answer(
                    ledger
                        .reserve_counted(
                            &project,
                            client_id,
                            deltas_of(deltas),
                            count_of(*count),
                            *expires_in,
                            &meta,
                        )
                        .await,
                    |v| view_answer(&v),
                )
            }
            Cmd::Commit(_) => ledger_answer(
                ledger.commit(&project, ReservationId(id), &meta).await,
                |v| view_answer(&v),
            ),
            Cmd::Release(_) => ledger_answer(
                ledger.release(&project, ReservationId(id), &meta).await,
                |v| view_answer(&v),
            ),
            Cmd::SetLimits { limits, force } => ledger_answer(
                ledger
                    .set_limits(&project, limits_of(limits), *force, &meta)
                    .await,
                |v| {
                    Answer::Limits(
                        v.limits
                            .iter()
                            .map(|(r, (l, _))| (r.to_string(), l.value()))
                            .collect(),
                    )
                },
            ),
            Cmd::ResetLimits => ledger_answer(ledger.reset_limits(&project, &meta).await, |v| {
                Answer::Limits(
                    v.limits
                        .iter()
                        .map(|(r, (l, _))| (r.to_string(), l.value()))
                        .collect(),
                )
            }),
            Cmd::Expire => ledger_answer(ledger.expire(&project).await, Answer::Expired),
            Cmd::Correct { resource, in_use } => ledger_answer(
                ledger
                    .correct_usage(
                        &project,
                        [(res(RESOURCES[*resource]), *in_use)].into(),
                        domain::Reason::parse("model test").unwrap(),
                        &meta,
                    )
                    .await,
                |_| Answer::Corrected,
            ),
        };
        // A reserve without a client id: the model takes the id the ledger chose.
        let model_id = match (&answer, command) {
            (Answer::Reservation { id: chosen, .. }, Cmd::Reserve { id: None, .. }) => *chosen,
            _ => id,
        };
        let expected = model.run(command, model_id);
        prop_assert_eq!(&answer, &expected, "step {}: {:?}", step, command);
        if matches!(command, Cmd::Reserve { id: None, .. })
            && matches!(answer, Answer::Reservation { .. })
        {
            known.push(model_id);
        }
    }
    let now = clock.now();
    let live = ledger.project_state(&project).await.unwrap();
    prop_assert_eq!(state_snapshot(&live, now, &known), model.snapshot(&known));
    drop(ledger);
    // What a restart replays is what was answered.
    let fresh = Ledger::start(store, clock.clone(), LedgerConfig::default())
        .await
        .unwrap();
    let replayed = fresh.project_state(&project).await.unwrap();
    prop_assert_eq!(
        state_snapshot(&replayed, now, &known),
        model.snapshot(&known)
    );
    Ok(())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn run_ledger_cases(
    runtime: &tokio::runtime::Runtime,
    store: Arc<dyn EventStore>,
    cases: u32,
    backend: &str,
) {
    runtime.block_on(async {
        let ledger = Ledger::start(
            store.clone(),
            Arc::new(ManualClock::new(start_time())),
            LedgerConfig::default(),
        )
        .await
        .unwrap();
        ledger
            .set_defaults(
                &DEFAULTS
                    .iter()
                    .map(|(r, l)| (res(r), Limit::new(*l).unwrap()))
                    .collect(),
                &Metadata::default(),
            )
            .await
            .unwrap();
    });
    // Each case (and each shrinking step) gets a project of its own on the one store.
    let next_project = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..Config::default()
    });
    let started = std::time::Instant::now();
    runner
        .run(&commands(30), |commands| {
            let n = next_project.fetch_add(1, Ordering::Relaxed);
            let project = ProjectId::parse(&format!("model-{n}")).unwrap();
            runtime.block_on(check_ledger(store.clone(), project, &commands))
        })
        .unwrap();
    eprintln!(
        "model {backend}: {cases} cases agree with the model in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn sqlite_ledger_agrees_with_the_model() {
    let runtime = runtime();
    let (_dir, store) = runtime.block_on(testing::sqlite_store());
    run_ledger_cases(&runtime, store, 400, "sqlite");
}

#[test]
fn postgres_ledger_agrees_with_the_model() {
    let Some(url) = testing::postgres_url() else {
        return;
    };
    let runtime = runtime();
    let (_schema, store) = runtime.block_on(async {
        let schema = testing::postgres_schema(&url).await;
        let store = testing::postgres_store_in(&url, &schema).await;
        (schema, store)
    });
    run_ledger_cases(&runtime, store, 200, "postgres");
}
