//! A reserve as a client asks it (for a user, counted), and what the ledger does for the users
//! inside a project (SPEC rule 8): their own limits and their usage.

use std::collections::BTreeMap;

use domain::{
    shown_usage, Command, CountRange, Deltas, Limit, Limits, ProjectId, ReservationId,
    ResourceName, Usage, UserId,
};
use uuid::Uuid;

use super::answers::EffectiveLimits;
use super::{Ledger, LedgerError, LimitsView};
use crate::store::{Metadata, Position};

/// A reserve: its deltas (per unit when counted), for whom, and for how long.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReserveRequest {
    /// Makes retries idempotent; a new id is chosen if none.
    pub reservation_id: Option<ReservationId>,
    pub deltas: Deltas,
    /// A counted reserve (rule 9): `deltas` are per unit.
    pub count: Option<CountRange>,
    /// The user inside the project (rule 8): its own limits cap the reserve too.
    pub user: Option<UserId>,
    pub expires_in_s: u32,
}

impl ReserveRequest {
    pub(super) fn command(self) -> Command {
        Command::Reserve {
            reservation_id: self
                .reservation_id
                .unwrap_or_else(|| ReservationId(Uuid::now_v7())),
            deltas: self.deltas,
            expires_in_s: self.expires_in_s,
            count: self.count,
            user: self.user,
        }
    }
}

/// A user's usage now: per resource, the user's limit (its own override, else the project's
/// effective limit) and the user's in_use and reserved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserUsage {
    pub resources: BTreeMap<ResourceName, (Limit, Usage)>,
    /// A global position the answer reflects every event up to.
    pub position: Position,
}

impl Ledger {
    pub async fn set_user_limits(
        &self,
        project: &ProjectId,
        user: UserId,
        limits: Limits,
        force: bool,
        meta: &Metadata,
    ) -> Result<LimitsView, LedgerError> {
        let command = Command::SetUserLimits {
            user,
            limits,
            force,
        };
        self.limits_command(project, &command, meta).await
    }

    pub async fn reset_user_limits(
        &self,
        project: &ProjectId,
        user: UserId,
        meta: &Metadata,
    ) -> Result<LimitsView, LedgerError> {
        self.limits_command(project, &Command::ResetUserLimits { user }, meta)
            .await
    }

    /// A user's effective limits as they durably stand.
    pub async fn user_limits(
        &self,
        project: &ProjectId,
        user: &UserId,
    ) -> Result<LimitsView, LedgerError> {
        let limits = self
            .read(project, |state, defaults| {
                EffectiveLimits::of_user(state, defaults, user)
            })
            .await?;
        self.limits_view(project, limits, &Default::default()).await
    }

    /// A user's usage, from the project's durable state: the views keep no per-user rows, and
    /// this state is at least as new as any write acknowledged before the call.
    pub async fn user_usage(
        &self,
        project: &ProjectId,
        user: &UserId,
    ) -> Result<UserUsage, LedgerError> {
        // Read first: the state read after it holds every event up to this position.
        let position = self.store.head().await?;
        let now = self.clock.now();
        let resources = self
            .read(project, |state, defaults| {
                shown_usage(state.user_usage_all(user, defaults, now))
                    .map(|(resource, limit, usage)| (resource, (limit, usage)))
                    .collect()
            })
            .await?;
        Ok(UserUsage {
            resources,
            position,
        })
    }
}
