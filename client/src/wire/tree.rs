//! The hierarchy's bodies (SPEC rule 11): a project's parent, the project list, and the
//! over-quota problem with the ancestors a reserve would go over.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::UsageNumbers;

/// `{resource: {in_use, reserved}}`: a subtree's totals, or one child's subtree.
pub type Standing = BTreeMap<String, UsageNumbers>;

/// `PUT /v1/projects/{project}/parent`.
#[derive(Debug, Clone, Serialize)]
pub struct SetParent {
    pub parent: String,
    /// Attach it even if that puts a new ancestor below its subtree's usage (rule 6).
    pub force: bool,
}

/// A project's place in the tree (`GET`/`PUT /v1/projects/{project}/parent`).
#[derive(Debug, Clone, Deserialize)]
pub struct ParentOf {
    pub project: String,
    /// Absent or null for a root project.
    #[serde(default)]
    pub parent: Option<String>,
    /// Every ancestor, as the server lists them (the parent first).
    #[serde(default)]
    pub ancestors: Vec<String>,
}

/// The query of `GET /v1/projects`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProjectListQuery {
    /// Only ids that start with this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Only the children of this project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Page size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// A previous page's `next`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// One page of the projects, in id order.
#[derive(Debug, Clone, Deserialize)]
pub struct ProjectList {
    pub projects: Vec<ProjectEntry>,
    /// The cursor of the next page, if there is one.
    #[serde(default)]
    pub next: Option<String>,
}

/// A project of the list, and its parent if it has one.
#[derive(Debug, Clone, Deserialize)]
pub struct ProjectEntry {
    pub project: String,
    #[serde(default)]
    pub parent: Option<String>,
}

/// The members of an `over-quota` problem (403) that say what is over, and whose limits.
#[derive(Debug, Clone, Deserialize)]
pub struct OverQuota {
    /// Over the project's own limits.
    #[serde(default)]
    pub overs: Vec<String>,
    /// A reserve for a user: over the user's own limits.
    #[serde(default)]
    pub user_overs: Option<Vec<String>>,
    /// Over an ancestor's limit (its subtree's usage counts against it): `{ancestor:
    /// [resources]}`; empty when no ancestor is over.
    #[serde(default)]
    pub ancestor_overs: BTreeMap<String, Vec<String>>,
    /// A counted reserve: the largest count that would fit.
    #[serde(default)]
    pub max_count: Option<u32>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::wire::{AuditQuery, DryRun, Usage};

    #[test]
    fn a_parent_is_sent_with_force_and_read_with_its_ancestors() {
        let body = SetParent {
            parent: "acme".into(),
            force: false,
        };
        assert_eq!(
            serde_json::to_value(&body).expect("JSON"),
            json!({"parent": "acme", "force": false})
        );
        let answer: ParentOf = serde_json::from_value(
            json!({"project": "acme-dev", "parent": "acme", "ancestors": ["acme", "org"]}),
        )
        .expect("a parent");
        assert_eq!(answer.parent.as_deref(), Some("acme"));
        assert_eq!(answer.ancestors, ["acme", "org"]);
        let root: ParentOf =
            serde_json::from_value(json!({"project": "org", "parent": null, "ancestors": []}))
                .expect("a root");
        assert!(root.parent.is_none() && root.ancestors.is_empty());
    }

    #[test]
    fn a_parents_usage_reads_its_subtree_and_children() {
        let leaf = json!({"project": "acme-dev", "position": 4, "resources":
            {"instances": {"limit": 5, "in_use": 1, "reserved": 0, "headroom": 4}}});
        let usage: Usage = serde_json::from_value(leaf.clone()).expect("a leaf's usage");
        assert!(usage.subtree.is_none() && usage.children.is_none());

        let mut parent = leaf;
        parent["subtree"] = json!({"instances": {"in_use": 3, "reserved": 2}});
        parent["children"] = json!({"acme-dev": {"instances": {"in_use": 2, "reserved": 2}}});
        let usage: Usage = serde_json::from_value(parent).expect("a parent's usage");
        let subtree = &usage.subtree.expect("subtree")["instances"];
        assert_eq!((subtree.in_use, subtree.reserved), (3, 2));
        let child = &usage.children.expect("children")["acme-dev"]["instances"];
        assert_eq!((child.in_use, child.reserved), (2, 2));
    }

    #[test]
    fn the_audit_asks_for_the_subtree_only_when_told() {
        let plain = AuditQuery::default();
        assert_eq!(serde_json::to_value(&plain).expect("JSON"), json!({}));
        let subtree = AuditQuery {
            subtree: true,
            ..AuditQuery::default()
        };
        assert_eq!(
            serde_json::to_value(&subtree).expect("JSON"),
            json!({"subtree": true})
        );
        let list = ProjectListQuery {
            parent: Some("acme".into()),
            ..ProjectListQuery::default()
        };
        assert_eq!(
            serde_json::to_value(&list).expect("JSON"),
            json!({"parent": "acme"})
        );
    }

    #[test]
    fn over_quota_and_dry_runs_name_the_ancestors_over() {
        let problem: OverQuota = serde_json::from_value(json!({"overs": [],
            "ancestor_overs": {"acme": ["instances"]}, "limits": {"instances": 5}}))
        .expect("an over-quota problem");
        assert!(problem.overs.is_empty());
        assert_eq!(
            problem.ancestor_overs,
            BTreeMap::from([("acme".to_owned(), vec!["instances".to_owned()])])
        );
        let dry: DryRun = serde_json::from_value(json!({"granted": false, "overs": [],
            "ancestor_overs": {"acme": ["instances"]}, "limits": {"instances": 5},
            "usage": {"instances": {"in_use": 0, "reserved": 0}}, "headroom": {}}))
        .expect("a dry run");
        assert_eq!(
            dry.ancestor_overs.expect("ancestor_overs")["acme"],
            ["instances"]
        );
    }
}
