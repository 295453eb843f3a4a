//! The answers clients get (a reservation, a project's effective limits) and how each is built:
//! from the state a decision or a read saw, with the global positions its append wrote.

use std::collections::BTreeMap;

use domain::{
    Correction, Counted, Defaults, Deltas, Limit, Outcome, ProjectId, ProjectState, Reservation,
    ReservationId, ReservationStatus, ResourceName, StreamVersion, Timestamp, UserId,
};

use super::execute::Written;
use super::{Ledger, LedgerError};
use crate::store::Position;

/// A reservation as answered to clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationView {
    pub reservation_id: ReservationId,
    pub project: ProjectId,
    /// For a counted reserve, the unit's deltas times the count granted.
    pub deltas: Deltas,
    /// A counted reserve's range and grant.
    pub count: Option<Counted>,
    /// The user inside the project it is for.
    pub user: Option<UserId>,
    pub status: ReservationStatus,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub updated_at: Timestamp,
    /// Global position of the event that gave the reservation its status.
    pub position: Position,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitSource {
    /// A user's own override.
    User,
    Project,
    Default,
}

impl LimitSource {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitSource::User => "user",
            LimitSource::Project => "project",
            LimitSource::Default => "default",
        }
    }
}

/// A project's effective limits, or a user's (its own overrides, else the project's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitsView {
    pub project: ProjectId,
    pub user: Option<UserId>,
    pub limits: BTreeMap<ResourceName, (Limit, LimitSource)>,
    /// Position of the last limits event of the project, or of the user (0 if none).
    pub position: Position,
}

/// A project's effective limits as its state and the defaults make them, and which event last
/// set them: its version, and its position if the state knows it yet.
#[derive(Clone, Debug)]
pub(super) struct EffectiveLimits {
    user: Option<UserId>,
    limits: BTreeMap<ResourceName, (Limit, LimitSource)>,
    position: Option<Position>,
    version: StreamVersion,
}

impl EffectiveLimits {
    pub(super) fn of(state: &ProjectState, defaults: &Defaults) -> Self {
        let mut limits: BTreeMap<ResourceName, (Limit, LimitSource)> = defaults
            .limits
            .iter()
            .map(|(r, l)| (r.clone(), (*l, LimitSource::Default)))
            .collect();
        for (r, l) in &state.overrides {
            limits.insert(r.clone(), (*l, LimitSource::Project));
        }
        EffectiveLimits {
            user: None,
            limits,
            position: state.limits_position,
            version: state.limits_version,
        }
    }

    /// A user's: its own overrides over the project's effective limits, and its limits event.
    pub(super) fn of_user(state: &ProjectState, defaults: &Defaults, user: &UserId) -> Self {
        let mut effective = Self::of(state, defaults);
        let own = state.user(user);
        for (r, l) in own.into_iter().flat_map(|u| &u.overrides) {
            effective.limits.insert(r.clone(), (*l, LimitSource::User));
        }
        effective.user = Some(user.clone());
        effective.position = own.and_then(|u| u.limits_position);
        effective.version = own.and_then(|u| u.limits_version);
        effective
    }
}

/// A granted decision's outcome, with what its answer is about read from the state right after
/// its events were applied: under the slot lock, so no later decision's events are in it.
#[derive(Debug)]
pub(super) enum Granted {
    /// The reservation the command named (always in the state once granted; checked where the
    /// answer is built, after the append, so that a broken promise cannot strand speculation).
    Reservation(Option<Reservation>),
    Limits(EffectiveLimits),
    Expired(usize),
    UsageCorrected(Vec<Correction>),
}

impl Granted {
    pub(super) fn of(outcome: Outcome, state: &ProjectState, defaults: &Defaults) -> Granted {
        match outcome {
            Outcome::Reservation(id) => Granted::Reservation(state.reservation(&id).cloned()),
            Outcome::Limits => Granted::Limits(EffectiveLimits::of(state, defaults)),
            Outcome::UserLimits(user) => {
                Granted::Limits(EffectiveLimits::of_user(state, defaults, &user))
            }
            Outcome::Expired(count) => Granted::Expired(count),
            Outcome::UsageCorrected(corrections) => Granted::UsageCorrected(corrections),
        }
    }
}

impl Ledger {
    pub(super) async fn reservation_view(
        &self,
        project: &ProjectId,
        reservation: Reservation,
        written: &Written,
    ) -> Result<ReservationView, LedgerError> {
        let position = match reservation.position {
            Some(p) => p,
            None => {
                self.position_of(project, reservation.status_version, written)
                    .await?
            }
        };
        Ok(ReservationView {
            reservation_id: reservation.id,
            project: project.clone(),
            deltas: reservation.deltas,
            count: reservation.count,
            user: reservation.user,
            status: reservation.status,
            created_at: reservation.created_at,
            expires_at: reservation.expires_at,
            updated_at: reservation.status_at,
            position,
        })
    }

    pub(super) async fn limits_view(
        &self,
        project: &ProjectId,
        limits: EffectiveLimits,
        written: &Written,
    ) -> Result<LimitsView, LedgerError> {
        let position = match (limits.position, limits.version) {
            (Some(p), _) => p,
            (None, Some(v)) => self.position_of(project, v, written).await?,
            (None, None) => 0,
        };
        Ok(LimitsView {
            project: project.clone(),
            user: limits.user,
            limits: limits.limits,
            position,
        })
    }

    /// The global position of a project event the state does not know the position of yet:
    /// from this append if it wrote it, else from the store (rare: an answer given right after
    /// the append that wrote the event, before its position was noted in the state).
    async fn position_of(
        &self,
        project: &ProjectId,
        version: u64,
        written: &Written,
    ) -> Result<Position, LedgerError> {
        if let Some(position) = written.position_of(version) {
            return Ok(position);
        }
        let events = self
            .store
            .read_stream(&project.stream(), version, 1)
            .await?;
        Ok(events.first().map_or(0, |e| e.position))
    }
}
