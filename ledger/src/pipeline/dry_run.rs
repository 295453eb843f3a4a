//! `?dry_run=true` on a reserve: the decision a reserve would get now, from the project's
//! durable state, with nothing appended (not even a denial) and nothing held.

use std::collections::BTreeMap;

use domain::{
    decide_in_tree, Defaults, Event, ProjectId, ProjectState, Refusal, ResourceName,
    ResourceStanding, Timestamp, UserId, UserStanding,
};

use super::{Ledger, LedgerError, ReserveRequest};

/// What a reserve would be answered now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DryRun {
    /// Whether it would be granted (for a `reservation_id` already granted with the same
    /// request: the original would be answered).
    pub granted: bool,
    /// The resources over their limits, sorted; empty when granted.
    pub overs: Vec<ResourceName>,
    /// The limit and usage of every resource of the request, as it would be judged.
    pub standing: BTreeMap<ResourceName, ResourceStanding>,
    /// A counted reserve granted: the count it would get.
    pub count: Option<u32>,
    /// A counted reserve denied: the largest count that would fit (0 if none).
    pub max_count: Option<u32>,
    /// A reserve for a user: how it stands against the user's own limits.
    pub user: Option<UserStanding>,
    /// The ancestors whose limits it would go over, with those resources (SPEC rule 11).
    pub ancestor_overs: BTreeMap<ProjectId, Vec<ResourceName>>,
}

impl Ledger {
    /// Judges a reserve as [`Ledger::reserve`] would, without recording anything. Refusals other
    /// than over-quota (an unknown resource, an underflow, an idempotency mismatch) are errors,
    /// as they are for a reserve.
    pub async fn dry_run_reserve(
        &self,
        project: &domain::ProjectId,
        request: ReserveRequest,
    ) -> Result<DryRun, LedgerError> {
        let deltas = request.deltas.clone();
        let user = request.user.clone();
        let command = request.command();
        let domain::Command::Reserve { reservation_id, .. } = command else {
            unreachable!("a reserve request is a reserve command")
        };
        let ancestors = self.ancestor_states(project).await?;
        let ancestors: Vec<&ProjectState> = ancestors.iter().collect();
        let now = self.clock.now();
        let judged = self
            .read(project, |state, defaults| {
                let decision = decide_in_tree(&command, state, &ancestors, defaults, now);
                // A grant's count is the one its event records; an idempotent repeat records
                // nothing and would answer the original, with the original's count.
                let granted_count = match decision.events.first() {
                    Some(Event::ReservationRequested { count, .. }) => count.map(|c| c.granted),
                    _ => state
                        .reservation(&reservation_id)
                        .and_then(|r| r.count)
                        .map(|c| c.granted),
                };
                let project = standing(state, defaults, now, deltas.resources(), None);
                let user = user.as_ref().map(|user| UserStanding {
                    standing: standing(state, defaults, now, deltas.resources(), Some(user)),
                    user: user.clone(),
                    overs: vec![],
                });
                (decision.answer, project, granted_count, user)
            })
            .await?;
        match judged {
            (Ok(_), standing, count, user) => Ok(DryRun {
                granted: true,
                overs: Vec::new(),
                standing,
                count,
                max_count: None,
                user,
                ancestor_overs: BTreeMap::new(),
            }),
            (
                Err(Refusal::OverQuota {
                    overs,
                    standing,
                    max_count,
                    user,
                    ancestor_overs,
                }),
                _,
                _,
                granted_user,
            ) => Ok(DryRun {
                granted: false,
                overs,
                standing,
                count: None,
                max_count,
                user: user.map(|u| *u).or(granted_user),
                ancestor_overs,
            }),
            (Err(refusal), _, _, _) => Err(refusal.into()),
        }
    }
}

/// The limit and usage of each resource, the project's (`user` is `None`) or a user's.
fn standing<'a>(
    state: &ProjectState,
    defaults: &Defaults,
    now: Timestamp,
    resources: impl Iterator<Item = &'a ResourceName>,
    user: Option<&UserId>,
) -> BTreeMap<ResourceName, ResourceStanding> {
    resources
        .filter_map(|resource| {
            let limit = state.limit(defaults, resource)?;
            let (limit, usage) = match user {
                // A project's limit caps its subtree (SPEC rule 11).
                None => (limit, state.subtree_usage(resource, now)),
                Some(user) => (
                    state.user_override(user, resource).unwrap_or(limit),
                    state.user_usage(user, resource, now),
                ),
            };
            Some((resource.clone(), ResourceStanding::of(limit, &usage)))
        })
        .collect()
}
