//! The tree of projects (SPEC rule 11): `quota parent` shows, sets or removes a project's
//! parent, and `quota usage` of a parent shows its children's subtrees with [`children_table`].

use std::collections::BTreeMap;

use client::wire::{ParentOf, SetParent, Standing};
use client::Client;

use crate::args::ParentArgs;
use crate::output::{or_dash, Output};
use crate::{table, CliError};

/// `quota parent PROJECT` shows its parent and ancestors; with PARENT it sets the parent
/// (`--force`: even below a new ancestor's usage); with `--remove` the project becomes a root.
pub async fn parent(client: &Client, out: Output, args: ParentArgs) -> Result<(), CliError> {
    let project = args.project.as_str();
    if args.remove {
        client.remove_parent(project).await?;
        if out.json {
            // The removal answers 204 with no body; a script gets the project's place now, as
            // `--json parent PROJECT` prints it.
            println!("{}", client.parent(project).await?.json);
        } else {
            println!("{project} has no parent now: a root project, capped by its own limits only");
        }
        return Ok(());
    }
    let answer = match &args.parent {
        Some(parent) => {
            let body = SetParent {
                parent: parent.as_str().to_owned(),
                force: args.force,
            };
            client.set_parent(project, &body).await?
        }
        None => client.parent(project).await?,
    };
    out.print(&answer, parent_text);
    Ok(())
}

/// One `name value` line each for the project, its parent and its ancestors; a root says so.
fn parent_text(answer: &ParentOf) -> String {
    let Some(parent) = &answer.parent else {
        return format!(
            "project    {}\nparent     -\n({} is a root project: only its own limits cap it)",
            answer.project, answer.project
        );
    };
    let ancestors = if answer.ancestors.is_empty() {
        parent.clone()
    } else {
        answer.ancestors.join(", ")
    };
    format!(
        "project    {}\nparent     {parent}\nancestors  {ancestors}\n(the limits of each ancestor \
         cap its whole subtree: a reserve here must fit them all)",
        answer.project
    )
}

/// A row per child and resource: the child's subtree (the child and all its descendants).
pub fn children_table(children: &BTreeMap<String, Standing>) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    for (child, standing) in children {
        if standing.is_empty() {
            rows.push(vec![child.clone(), or_dash(None::<&str>)]);
        }
        for (resource, usage) in standing {
            rows.push(vec![
                child.clone(),
                resource.clone(),
                usage.in_use.to_string(),
                usage.reserved.to_string(),
            ]);
        }
    }
    let table = table::render(
        &["CHILD", "RESOURCE", "SUBTREE_IN_USE", "SUBTREE_RESERVED"],
        &rows,
    );
    format!("children (each row is the child's whole subtree):\n{table}")
}

#[cfg(test)]
mod tests {
    use client::wire::UsageNumbers;

    use super::*;

    #[test]
    fn a_project_shows_its_parent_and_ancestors_and_a_root_says_so() {
        let child = ParentOf {
            project: "acme-dev".into(),
            parent: Some("acme".into()),
            ancestors: vec!["acme".into(), "org".into()],
        };
        let text = parent_text(&child);
        assert!(
            text.starts_with("project    acme-dev\nparent     acme\nancestors  acme, org\n"),
            "{text}"
        );
        let root = ParentOf {
            project: "org".into(),
            parent: None,
            ancestors: vec![],
        };
        let text = parent_text(&root);
        assert!(
            text.contains("parent     -\n(org is a root project"),
            "{text}"
        );
    }

    #[test]
    fn children_are_rows_of_their_subtrees() {
        let numbers = |in_use, reserved| UsageNumbers { in_use, reserved };
        let children = BTreeMap::from([
            (
                "acme-dev".to_owned(),
                Standing::from([("instances".to_owned(), numbers(2, 1))]),
            ),
            ("acme-ops".to_owned(), Standing::new()),
        ]);
        assert_eq!(
            children_table(&children),
            "children (each row is the child's whole subtree):\n\
             CHILD     RESOURCE   SUBTREE_IN_USE  SUBTREE_RESERVED\n\
             acme-dev  instances  2               1\n\
             acme-ops  -"
        );
    }
}
