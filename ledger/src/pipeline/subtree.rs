//! What a parent's descendants use (SPEC rule 11), read from the parent's own state: its
//! stream records every change of its descendants' usage, so no other stream is read.

use std::collections::BTreeMap;

use domain::{ProjectId, ResourceName, SubtreeUsage, Usage};

use super::{Ledger, LedgerError};

/// A project's place in the tree and its subtree's usage, as it durably stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubtreeView {
    pub parent: Option<ProjectId>,
    /// The project's and all its descendants' usage, per resource any of them uses or holds.
    pub subtree: BTreeMap<ResourceName, Usage>,
    /// Each child's subtree usage.
    pub children: BTreeMap<ProjectId, BTreeMap<ResourceName, Usage>>,
    /// Every descendant, in id order.
    pub descendants: Vec<ProjectId>,
}

impl Ledger {
    /// The project's subtree: empty maps for a project without descendants.
    pub async fn subtree(&self, project: &ProjectId) -> Result<SubtreeView, LedgerError> {
        let now = self.clock.now();
        self.read(project, |state, defaults| {
            let shown = state.usage_all(defaults, now).into_keys();
            let SubtreeUsage { subtree, children } = state.subtree_report(shown, now);
            SubtreeView {
                parent: state.parent.clone(),
                subtree,
                children,
                descendants: state
                    .subtree()
                    .members()
                    .map(|(id, _)| id.clone())
                    .collect(),
            }
        })
        .await
    }
}
