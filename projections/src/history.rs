//! A project's usage of one resource over time (`GET /v1/projects/{p}/usage/history`), from
//! the audit view alone: every entry carries the usage its event left behind (`usage_after`),
//! and the limits entries the effective limits they set.
//!
//! Without a step, a change that another follows within its millisecond has a point of its
//! own, with the usage its entry reported and the limit as of that entry. Every other point is
//! the usage as `usage?at=` replays it at the end of that instant:
//! - in_use and reserved: the last entry at or before the instant that reports the resource
//!   (denials report what they were judged on, which is the same, so they are skipped), less
//!   the holds that were held then and passed their expiry between that entry and the instant
//!   (a hold stops counting at its expiry, whether or not an event records it);
//! - the limit: the project's override if its last limits entry set one, else the defaults
//!   then, else unlimited.
//!
//! A point costs one or two index seeks, and the instants are bounded ([`MAX_HISTORY_POINTS`]),
//! so the answer's cost does not grow with the project's history: without a `step`, the changes
//! are listed only while they fit, and a longer range is bucketed by a step that fits.

use domain::{Deltas, Limit, ProjectId, ResourceName, Timestamp, DEFAULTS_STREAM};
use ledger::Position;

use crate::audit_keys::project_is;
use crate::checkpoint::AUDIT;
use crate::fold::{parse_deltas, parse_limits, parse_usage_after};
use crate::limits::MAX_HISTORY_POINTS;
use crate::tables::{on_tx, Tx};
use crate::{Inner, ProjectionError};

/// What to chart: one resource of a project, from `since` (default: the project's first event)
/// to `until`, at every change or every `step_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryQuery {
    pub resource: ResourceName,
    pub since: Option<Timestamp>,
    pub until: Timestamp,
    /// Bucket width in milliseconds (at least 1); `None`: one point per change.
    pub step_ms: Option<i64>,
}

/// The usage of the resource at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryPoint {
    pub at: Timestamp,
    pub in_use: i64,
    pub reserved: i64,
    pub limit: Limit,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct History {
    pub project: ProjectId,
    pub resource: ResourceName,
    /// In time order; the first at `since`, the last at `until`.
    pub points: Vec<HistoryPoint>,
    /// The global position of the audit view the points were read at.
    pub position: Position,
}

/// The instants of a range cut by a step: `since`, every `step_ms` after it, and `until`;
/// `None` when that is more than [`MAX_HISTORY_POINTS`].
pub fn step_instants(since_ms: i64, until_ms: i64, step_ms: i64) -> Option<Vec<i64>> {
    assert!(step_ms >= 1 && since_ms <= until_ms);
    let span_ms = until_ms - since_ms;
    let steps = span_ms / step_ms + i64::from(span_ms % step_ms != 0);
    if usize::try_from(steps).ok()? >= MAX_HISTORY_POINTS {
        return None;
    }
    let mut instants: Vec<i64> = (0..steps).map(|k| since_ms + k * step_ms).collect();
    instants.push(until_ms);
    Some(instants)
}

/// The smallest step that cuts the range into at most [`MAX_HISTORY_POINTS`] points.
fn fitting_step_ms(since_ms: i64, until_ms: i64) -> i64 {
    let buckets = i64::try_from(MAX_HISTORY_POINTS - 1).unwrap_or(i64::MAX);
    ((until_ms - since_ms) / buckets + 1).max(1)
}

impl Inner {
    pub(crate) async fn history(
        &self,
        project: &ProjectId,
        query: &HistoryQuery,
    ) -> Result<History, ProjectionError> {
        let until_ms = query.until.timestamp_millis();
        let mut tx = self.db.begin_read().await?;
        let head = tx.head(AUDIT).await?;
        let reader = Reader {
            generation: head.generation,
            project: project.as_str(),
            needle: format!("\"{}\":", query.resource),
        };
        let since_ms = match query.since {
            Some(since) => since.timestamp_millis(),
            None => reader.first_at_ms(&mut tx).await?.unwrap_or(until_ms),
        }
        .min(until_ms);
        let limits = LimitTimeline {
            overrides: reader.overrides(&mut tx, &query.resource, until_ms).await?,
            defaults: reader.defaults(&mut tx, &query.resource, until_ms).await?,
        };
        let Changes { instants, within } = match query.step_ms {
            Some(step_ms) => Changes {
                instants: step_instants(since_ms, until_ms, step_ms)
                    .ok_or(ProjectionError::TooManyPoints(MAX_HISTORY_POINTS))?,
                within: Vec::new(),
            },
            None => {
                reader
                    .changes(&mut tx, &query.resource, &limits, since_ms, until_ms)
                    .await?
            }
        };
        let mut points: Vec<(Moment, HistoryPoint)> =
            Vec::with_capacity(instants.len() + within.len());
        let mut last: Option<Reported> = None;
        for &at_ms in instants.iter().rev() {
            // The last report at or before a later instant serves an earlier one it precedes.
            if last.as_ref().is_none_or(|r| r.at_ms > at_ms) {
                last = reader.reported_at(&mut tx, &query.resource, at_ms).await?;
            }
            let (in_use, reserved) = match &last {
                None => (0, 0),
                Some(report) => {
                    let lapsed = reader
                        .lapsed(&mut tx, &query.resource, report.at_ms, at_ms)
                        .await?;
                    (report.in_use, report.reserved.saturating_sub(lapsed).max(0))
                }
            };
            let moment = (at_ms, END_OF_MS);
            points.push((moment, point(moment, in_use, reserved, &limits)));
        }
        tx.rollback().await?;
        points.extend(within.iter().map(|change| {
            let moment = (change.at_ms, change.position);
            (
                moment,
                point(moment, change.in_use, change.reserved, &limits),
            )
        }));
        points.sort_by_key(|(moment, _)| *moment);
        Ok(History {
            project: project.clone(),
            resource: query.resource.clone(),
            points: points.into_iter().map(|(_, point)| point).collect(),
            position: head.position,
        })
    }
}

/// A place in the audit: a millisecond and, within it, an entry's global position.
type Moment = (i64, i64);

/// After every entry of its millisecond: the state `usage?at=` answers for it.
const END_OF_MS: i64 = i64::MAX;

fn point(moment: Moment, in_use: i64, reserved: i64, limits: &LimitTimeline) -> HistoryPoint {
    HistoryPoint {
        at: chrono::DateTime::from_timestamp_millis(moment.0).unwrap_or_default(),
        in_use,
        reserved,
        limit: limits.at(moment),
    }
}

/// The points to give without a step: one at the end of each instant, and one for each change
/// that another change follows within its millisecond.
struct Changes {
    instants: Vec<i64>,
    within: Vec<Reported>,
}

/// The usage one entry reported for the resource, and where it is.
#[derive(Clone, Copy)]
struct Reported {
    at_ms: i64,
    position: i64,
    in_use: i64,
    reserved: i64,
}

impl Reported {
    /// From an entry's `(at_ms, position, usage_after)`; `None` if it does not report the
    /// resource.
    fn from_row(
        (at_ms, position, usage_after): (i64, i64, String),
        resource: &ResourceName,
    ) -> Option<Self> {
        let usage = *parse_usage_after(&usage_after).get(resource)?;
        Some(Reported {
            at_ms,
            position,
            in_use: usage.in_use,
            reserved: usage.reserved,
        })
    }
}

/// The effective limit of one resource over time.
struct LimitTimeline {
    /// `(moment, override)`: the project's override of the resource from then on (`None`:
    /// reset), in order.
    overrides: Vec<(Moment, Option<i64>)>,
    /// `(moment, default)`: the resource's default from then on, in order.
    defaults: Vec<(Moment, i64)>,
}

impl LimitTimeline {
    fn at(&self, moment: Moment) -> Limit {
        let overridden = self.overrides[..self.overrides.partition_point(|(m, _)| *m <= moment)]
            .last()
            .and_then(|(_, l)| *l);
        let default = self.defaults[..self.defaults.partition_point(|(m, _)| *m <= moment)]
            .last()
            .map(|(_, l)| *l);
        overridden
            .or(default)
            .and_then(|l| Limit::new(l).ok())
            .unwrap_or(Limit::UNLIMITED)
    }

    fn moments(&self) -> impl Iterator<Item = Moment> + '_ {
        let overrides = self.overrides.iter().map(|(m, _)| *m);
        overrides.chain(self.defaults.iter().map(|(m, _)| *m))
    }

    /// Whether the limit moves after `moment` within its millisecond.
    fn moves_later_in_ms(&self, moment: Moment) -> bool {
        fn next_is_in_ms<T>(timeline: &[(Moment, T)], moment: Moment) -> bool {
            let next = timeline.partition_point(|(m, _)| *m <= moment);
            timeline.get(next).is_some_and(|(m, _)| m.0 == moment.0)
        }
        next_is_in_ms(&self.overrides, moment) || next_is_in_ms(&self.defaults, moment)
    }
}

/// The queries of one history, on one generation of the audit view.
struct Reader<'a> {
    generation: i64,
    project: &'a str,
    /// The resource as a key of the entries' JSON (`"cores":`): names are of the id alphabet,
    /// which JSON never escapes.
    needle: String,
}

/// The SQL of a substring test on each backend.
fn contains(tx: &Tx, column: &str, parameter: &str) -> String {
    match tx {
        Tx::Sqlite(_) => format!("instr({column}, {parameter}) > 0"),
        Tx::Postgres(_) => format!("strpos({column}, {parameter}) > 0"),
    }
}

/// ` INDEXED BY index` on SQLite, which plans without statistics (see `limits_entries`);
/// nothing on PostgreSQL, whose planner has them.
fn sqlite_index(tx: &Tx, index: &str) -> String {
    match tx {
        Tx::Sqlite(_) => format!(" INDEXED BY {index}"),
        Tx::Postgres(_) => String::new(),
    }
}

/// The held amount of a resource in a reservation's deltas (negative deltas hold nothing).
fn held(deltas: Option<&str>, resource: &ResourceName) -> i64 {
    deltas
        .and_then(parse_deltas)
        .map_or(0, |d: Deltas| d.get(resource).max(0))
}

impl Reader<'_> {
    async fn first_at_ms(&self, tx: &mut Tx) -> Result<Option<i64>, ProjectionError> {
        let sql = format!(
            "SELECT MIN(at_ms) FROM audit_entries WHERE generation = $1 AND {}",
            project_is("", "$1", "$2")
        );
        Ok(on_tx!(tx, |c, DB| sqlx::query_scalar(&sql)
            .bind(self.generation)
            .bind(self.project)
            .fetch_one(&mut *c)
            .await?))
    }

    /// The project's limits entries naming the resource, up to `until_ms`, in order.
    async fn overrides(
        &self,
        tx: &mut Tx,
        resource: &ResourceName,
        until_ms: i64,
    ) -> Result<Vec<(Moment, Option<i64>)>, ProjectionError> {
        let rows = self
            .limits_entries(tx, self.project, "LimitsSet", "LimitsReset", until_ms)
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(at_ms, position, event_type, before, after)| {
                let after = after.as_deref().and_then(parse_limits).unwrap_or_default();
                let before = before.as_deref().and_then(parse_limits).unwrap_or_default();
                let moment = (at_ms, position);
                match event_type.as_str() {
                    "LimitsSet" => after.get(resource).map(|l| (moment, Some(*l))),
                    _ => (before.contains_key(resource) || after.contains_key(resource))
                        .then_some((moment, None)),
                }
            })
            .collect())
    }

    /// The defaults' entries setting the resource, up to `until_ms`, in order.
    async fn defaults(
        &self,
        tx: &mut Tx,
        resource: &ResourceName,
        until_ms: i64,
    ) -> Result<Vec<(Moment, i64)>, ProjectionError> {
        let rows = self
            .limits_entries(
                tx,
                DEFAULTS_STREAM,
                "DefaultLimitsSet",
                "DefaultLimitsSet",
                until_ms,
            )
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|(at_ms, position, _, _, after)| {
                let after = after.as_deref().and_then(parse_limits)?;
                after.get(resource).map(|l| ((at_ms, position), *l))
            })
            .collect())
    }

    async fn limits_entries(
        &self,
        tx: &mut Tx,
        owner: &str,
        type_a: &str,
        type_b: &str,
        until_ms: i64,
    ) -> Result<LimitsRows, ProjectionError> {
        // SQLite keeps no statistics: left alone it walks the project's entries by time (the
        // whole history) rather than its few limits entries by type.
        let sql = format!(
            "SELECT at_ms, position, event_type, before_values, after_values FROM audit_entries{} \
             WHERE generation = $1 AND {} AND event_type IN ($3, $4) AND at_ms <= $5 \
             ORDER BY at_ms, position",
            sqlite_index(tx, "audit_by_type"),
            project_is("", "$1", "$2")
        );
        Ok(on_tx!(tx, |c, DB| sqlx::query_as(&sql)
            .bind(self.generation)
            .bind(owner)
            .bind(type_a)
            .bind(type_b)
            .bind(until_ms)
            .fetch_all(&mut *c)
            .await?))
    }

    /// `since`, every instant in `(since, until]` at which the resource's usage or limit moved,
    /// and `until`, with a point for each change another follows within its millisecond; or,
    /// when they are more than [`MAX_HISTORY_POINTS`], the range cut by the smallest step that
    /// fits.
    async fn changes(
        &self,
        tx: &mut Tx,
        resource: &ResourceName,
        limits: &LimitTimeline,
        since_ms: i64,
        until_ms: i64,
    ) -> Result<Changes, ProjectionError> {
        let fitting = || {
            step_instants(since_ms, until_ms, fitting_step_ms(since_ms, until_ms))
                .map(|instants| Changes {
                    instants,
                    within: Vec::new(),
                })
                .ok_or(ProjectionError::TooManyPoints(MAX_HISTORY_POINTS))
        };
        let bound = i64::try_from(MAX_HISTORY_POINTS).unwrap_or(i64::MAX);
        let reported = self
            .reports(tx, resource, since_ms, until_ms, bound)
            .await?;
        if reported.len() >= MAX_HISTORY_POINTS {
            return fitting();
        }
        let lapses = self.lapse_instants(tx, since_ms, until_ms, bound).await?;
        let mut instants = vec![since_ms, until_ms];
        instants.extend(reported.iter().map(|r| r.at_ms).filter(|t| *t > since_ms));
        instants.extend(lapses);
        instants.extend(limits.moments().map(|(t, _)| t).filter(|t| *t > since_ms));
        instants.sort_unstable();
        instants.dedup();
        // The last change of a millisecond shows in the instant's point.
        let followed = |i: usize, r: &Reported| {
            reported
                .get(i + 1)
                .is_some_and(|next| next.at_ms == r.at_ms)
                || limits.moves_later_in_ms((r.at_ms, r.position))
        };
        let within: Vec<Reported> = reported
            .iter()
            .enumerate()
            .filter(|(i, r)| followed(*i, r))
            .map(|(_, r)| *r)
            .collect();
        if instants.len() + within.len() > MAX_HISTORY_POINTS {
            return fitting();
        }
        Ok(Changes { instants, within })
    }

    /// The entries in `[since, until]` that report the resource's usage, in order, at most
    /// `bound` of them.
    async fn reports(
        &self,
        tx: &mut Tx,
        resource: &ResourceName,
        since_ms: i64,
        until_ms: i64,
        bound: i64,
    ) -> Result<Vec<Reported>, ProjectionError> {
        let sql = format!(
            "SELECT at_ms, position, usage_after FROM audit_entries WHERE generation = $1 \
             AND {} AND at_ms >= $3 AND at_ms <= $4 AND event_type <> 'ReservationDenied' \
             AND {} ORDER BY at_ms, position LIMIT $6",
            project_is("", "$1", "$2"),
            contains(tx, "usage_after", "$5")
        );
        let rows: Vec<(i64, i64, String)> = on_tx!(tx, |c, DB| sqlx::query_as(&sql)
            .bind(self.generation)
            .bind(self.project)
            .bind(since_ms)
            .bind(until_ms)
            .bind(&self.needle)
            .bind(bound)
            .fetch_all(&mut *c)
            .await?);
        Ok(rows
            .into_iter()
            .filter_map(|row| Reported::from_row(row, resource))
            .collect())
    }

    /// The expiries in `(since, until]` of holds of the resource that were still held when
    /// they expired.
    async fn lapse_instants(
        &self,
        tx: &mut Tx,
        since_ms: i64,
        until_ms: i64,
        bound: i64,
    ) -> Result<Vec<i64>, ProjectionError> {
        let sql = format!(
            "SELECT r.expires_at_ms FROM audit_entries r{} WHERE r.generation = $1 \
             AND {} AND r.expires_at_ms > $3 AND r.expires_at_ms <= $4 AND {} \
             AND NOT EXISTS (SELECT 1 FROM audit_entries e{} WHERE e.generation = $1 \
             AND e.reservation_id = r.reservation_id AND e.project = $2 \
             AND e.event_type IN ('ReservationCommitted', 'ReservationReleased') \
             AND e.at_ms < r.expires_at_ms) ORDER BY r.expires_at_ms LIMIT $6",
            sqlite_index(tx, "audit_by_expiry"),
            project_is("r.", "$1", "$2"),
            contains(tx, "r.deltas", "$5"),
            sqlite_index(tx, "audit_by_reservation")
        );
        Ok(on_tx!(tx, |c, DB| sqlx::query_scalar(&sql)
            .bind(self.generation)
            .bind(self.project)
            .bind(since_ms)
            .bind(until_ms)
            .bind(&self.needle)
            .bind(bound)
            .fetch_all(&mut *c)
            .await?))
    }

    /// The last entry at or before `at_ms` that reports the resource's usage.
    async fn reported_at(
        &self,
        tx: &mut Tx,
        resource: &ResourceName,
        at_ms: i64,
    ) -> Result<Option<Reported>, ProjectionError> {
        let sql = format!(
            "SELECT at_ms, position, usage_after FROM audit_entries WHERE generation = $1 AND {} \
             AND at_ms <= $3 AND event_type <> 'ReservationDenied' AND {} \
             ORDER BY at_ms DESC, position DESC LIMIT 1",
            project_is("", "$1", "$2"),
            contains(tx, "usage_after", "$4")
        );
        let row: Option<(i64, i64, String)> = on_tx!(tx, |c, DB| sqlx::query_as(&sql)
            .bind(self.generation)
            .bind(self.project)
            .bind(at_ms)
            .bind(&self.needle)
            .fetch_optional(&mut *c)
            .await?);
        Ok(row.and_then(|row| Reported::from_row(row, resource)))
    }

    /// The resource held by holds that were held at `reported_ms` and expired by `at_ms`.
    async fn lapsed(
        &self,
        tx: &mut Tx,
        resource: &ResourceName,
        reported_ms: i64,
        at_ms: i64,
    ) -> Result<i64, ProjectionError> {
        if at_ms <= reported_ms {
            return Ok(0);
        }
        let sql = format!(
            "SELECT r.deltas FROM audit_entries r{} WHERE r.generation = $1 AND {} \
             AND r.expires_at_ms > $3 AND r.expires_at_ms <= $4 AND r.at_ms <= $3 \
             AND NOT EXISTS (SELECT 1 FROM audit_entries e{} WHERE e.generation = $1 \
             AND e.reservation_id = r.reservation_id AND e.project = $2 \
             AND e.event_type IN ('ReservationCommitted', 'ReservationReleased') \
             AND e.at_ms <= $3)",
            sqlite_index(tx, "audit_by_expiry"),
            project_is("r.", "$1", "$2"),
            sqlite_index(tx, "audit_by_reservation")
        );
        let deltas: Vec<Option<String>> = on_tx!(tx, |c, DB| sqlx::query_scalar(&sql)
            .bind(self.generation)
            .bind(self.project)
            .bind(reported_ms)
            .bind(at_ms)
            .fetch_all(&mut *c)
            .await?);
        Ok(deltas
            .iter()
            .map(|d| held(d.as_deref(), resource))
            .fold(0i64, i64::saturating_add))
    }
}

type LimitsRows = Vec<(i64, i64, String, Option<String>, Option<String>)>;
