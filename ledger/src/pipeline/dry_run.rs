//! `?dry_run=true` on a reserve: the decision a reserve would get now, from the project's
//! durable state, with nothing appended (not even a denial) and nothing held.

use std::collections::BTreeMap;

use domain::{
    decide, Command, CountRange, Deltas, Event, Refusal, ReservationId, ResourceName,
    ResourceStanding,
};
use uuid::Uuid;

use super::{Ledger, LedgerError};

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
}

impl Ledger {
    /// Judges a reserve as [`Ledger::reserve`] would, without recording anything. Refusals other
    /// than over-quota (an unknown resource, an underflow, an idempotency mismatch) are errors,
    /// as they are for a reserve.
    pub async fn dry_run_reserve(
        &self,
        project: &domain::ProjectId,
        reservation_id: Option<ReservationId>,
        deltas: Deltas,
        count: Option<CountRange>,
        expires_in_s: u32,
    ) -> Result<DryRun, LedgerError> {
        let reservation_id = reservation_id.unwrap_or_else(|| ReservationId(Uuid::now_v7()));
        let command = Command::Reserve {
            count,
            reservation_id,
            deltas: deltas.clone(),
            expires_in_s,
        };
        let now = self.clock.now();
        let judged = self
            .read(project, |state, defaults| {
                let decision = decide(&command, state, defaults, now);
                // A grant's count is the one its event records; an idempotent repeat records
                // nothing and would answer the original, with the original's count.
                let granted_count = match decision.events.first() {
                    Some(Event::ReservationRequested { count, .. }) => count.map(|c| c.granted),
                    _ => state
                        .reservation(&reservation_id)
                        .and_then(|r| r.count)
                        .map(|c| c.granted),
                };
                let standing: BTreeMap<ResourceName, ResourceStanding> = deltas
                    .resources()
                    .filter_map(|resource| {
                        let limit = state.limit(defaults, resource)?;
                        let usage = state.usage(resource, now);
                        Some((resource.clone(), ResourceStanding::of(limit, &usage)))
                    })
                    .collect();
                (decision.answer, standing, granted_count)
            })
            .await?;
        match judged {
            (Ok(_), standing, count) => Ok(DryRun {
                granted: true,
                overs: Vec::new(),
                standing,
                count,
                max_count: None,
            }),
            (
                Err(Refusal::OverQuota {
                    overs,
                    standing,
                    max_count,
                }),
                _,
                _,
            ) => Ok(DryRun {
                granted: false,
                overs,
                standing,
                count: None,
                max_count,
            }),
            (Err(refusal), _, _) => Err(refusal.into()),
        }
    }
}
