//! `?dry_run=true` on a reserve: the decision a reserve would get now, from the project's
//! durable state, with nothing appended (not even a denial) and nothing held.

use std::collections::BTreeMap;

use domain::{decide, Command, Deltas, Refusal, ReservationId, ResourceName, ResourceStanding};
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
        expires_in_s: u32,
    ) -> Result<DryRun, LedgerError> {
        let command = Command::Reserve {
            reservation_id: reservation_id.unwrap_or_else(|| ReservationId(Uuid::now_v7())),
            deltas: deltas.clone(),
            expires_in_s,
        };
        let now = self.clock.now();
        let judged = self
            .read(project, |state, defaults| {
                let decision = decide(&command, state, defaults, now);
                let standing: BTreeMap<ResourceName, ResourceStanding> = deltas
                    .resources()
                    .filter_map(|resource| {
                        let limit = state.limit(defaults, resource)?;
                        let usage = state.usage(resource, now);
                        Some((resource.clone(), ResourceStanding::of(limit, &usage)))
                    })
                    .collect();
                (decision.answer, standing)
            })
            .await?;
        match judged {
            (Ok(_), standing) => Ok(DryRun {
                granted: true,
                overs: Vec::new(),
                standing,
            }),
            (Err(Refusal::OverQuota { overs, standing }), _) => Ok(DryRun {
                granted: false,
                overs,
                standing,
            }),
            (Err(refusal), _) => Err(refusal.into()),
        }
    }
}
