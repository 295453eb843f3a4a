//! Usage answers from the usage view, with holds past their expiry left out at query time.

use std::collections::BTreeSet;

use domain::{Limit, ProjectId, ResourceName, Timestamp};

use crate::checkpoint::{head_of, USAGE};
use crate::tables::ProjectRows;
use crate::{Inner, ProjectionError, ResourceUsage, UsageReport};

impl Inner {
    pub(crate) async fn usage(
        &self,
        project: &ProjectId,
        now: Timestamp,
    ) -> Result<UsageReport, ProjectionError> {
        // One snapshot for the generation, its checkpoint and its rows: a rebuild's swap
        // between two of these reads cannot mix two copies of the view.
        let mut tx = self.db.begin_read().await?;
        let heads = tx.heads().await?;
        let head = head_of(&heads, USAGE).cloned().ok_or_else(|| {
            ProjectionError::CorruptView("usage view bookkeeping is missing".into())
        })?;
        let rows = tx
            .project_usage(head.generation, project.as_str(), now.timestamp_millis())
            .await?;
        tx.rollback().await?;
        Ok(UsageReport {
            project: project.clone(),
            resources: report(&rows),
            position: head.position,
            subtree: None,
        })
    }
}

/// Every resource with a default, an override, usage or a live hold.
fn report(rows: &ProjectRows) -> std::collections::BTreeMap<ResourceName, ResourceUsage> {
    let mut names: BTreeSet<&ResourceName> = rows.defaults.keys().collect();
    names.extend(rows.overrides.keys());
    names.extend(rows.in_use.keys());
    for hold in &rows.holds {
        names.extend(hold.resources());
    }
    names
        .into_iter()
        .map(|resource| {
            let limit = rows
                .overrides
                .get(resource)
                .or_else(|| rows.defaults.get(resource))
                .and_then(|l| Limit::new(*l).ok())
                // A resource without any limit cannot be reserved (unknown-resource), so only
                // a corrupt or hand-edited store gets here: show it as unlimited, not hide it.
                .unwrap_or(Limit::UNLIMITED);
            let in_use = rows.in_use.get(resource).copied().unwrap_or(0);
            let reserved = rows
                .holds
                .iter()
                .map(|hold| hold.get(resource))
                .filter(|delta| *delta > 0)
                .fold(0i64, |sum, delta| sum.saturating_add(delta));
            (resource.clone(), resource_usage(limit, in_use, reserved))
        })
        .collect()
}

pub(crate) fn resource_usage(limit: Limit, in_use: i64, reserved: i64) -> ResourceUsage {
    ResourceUsage {
        limit,
        in_use,
        reserved,
        headroom: limit
            .cap()
            .map(|cap| cap.saturating_sub(in_use).saturating_sub(reserved)),
    }
}
