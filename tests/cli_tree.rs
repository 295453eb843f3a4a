//! The `quota` command line and the tree of projects (SPEC rule 11 and "Command line"), on the
//! real binary against a real `quota serve`: `quota parent PROJECT [PARENT] [--force]` sets and
//! shows a parent and the ancestors, `--remove` makes a project a root again; `quota usage` of
//! a parent shows its subtree's totals, a row per child's subtree and the headroom the server
//! answers; an over-quota reserve in a child names the ancestor (`ancestor_overs`); `audit
//! --subtree` reads the descendants' entries too. A bad project id is refused before anything
//! is sent.

mod common;

use std::time::{Duration, Instant};

use common::{cli, json_of, postgres_store, sqlite_store, Server};
use serde_json::{json, Value};

/// The command's stdout, after checking that it succeeded.
async fn ok_out(url: &str, args: &[&str]) -> String {
    let (ok, out, err) = cli(url, args).await;
    assert!(ok, "quota {args:?} failed: {out}{err}");
    out
}

/// The command's (stdout, stderr), after checking that it failed.
async fn failed(url: &str, args: &[&str]) -> (String, String) {
    let (ok, out, err) = cli(url, args).await;
    assert!(!ok, "quota {args:?} succeeded: {out}");
    (out, err)
}

/// The cells of the first table row (or `name value` line) that starts with `first`.
fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{table}"))
}

/// The cells of the first table row that starts with the cells `first`.
fn row_of<'a>(table: &'a str, first: &[&str]) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.starts_with(first))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{table}"))
}

/// `--json reserve`: the reservation's id and the position of its grant.
async fn reserve(url: &str, project: &str, deltas: &str) -> (String, u64) {
    let held = json_of(&ok_out(url, &["--json", "reserve", project, deltas]).await);
    let id = held["reservation_id"].as_str().expect("an id").to_owned();
    (id, held["position"].as_u64().expect("a position"))
}

/// The strings of a JSON array.
fn strings(value: &Value) -> Vec<&str> {
    let items = value
        .as_array()
        .unwrap_or_else(|| panic!("an array: {value}"));
    items.iter().filter_map(Value::as_str).collect()
}

#[tokio::test]
async fn the_tree_on_the_command_line_sqlite() {
    let store = sqlite_store();
    let server = Server::start(&store);
    the_tree_on_the_command_line(&server.url).await;
}

#[tokio::test]
async fn the_tree_on_the_command_line_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let server = Server::start(&store);
    the_tree_on_the_command_line(&server.url).await;
}

async fn the_tree_on_the_command_line(url: &str) {
    ok_out(url, &["defaults", "set", "instances=10", "cores=20"]).await;
    ok_out(url, &["limits", "set", "acme", "instances=5"]).await;

    // A root project says so.
    let root = ok_out(url, &["parent", "acme"]).await;
    assert_eq!(row(&root, "parent"), ["parent", "-"], "{root}");
    assert!(root.contains("acme is a root project"), "{root}");

    // Setting a parent answers the project's place in the tree.
    let set = ok_out(url, &["parent", "acme-dev", "acme"]).await;
    assert_eq!(row(&set, "project"), ["project", "acme-dev"], "{set}");
    assert_eq!(row(&set, "parent"), ["parent", "acme"], "{set}");
    assert_eq!(row(&set, "ancestors"), ["ancestors", "acme"], "{set}");
    let grandchild = json_of(&ok_out(url, &["--json", "parent", "acme-dev-x", "acme-dev"]).await);
    assert_eq!(grandchild["project"], "acme-dev-x", "{grandchild}");
    assert_eq!(grandchild["parent"], "acme-dev", "{grandchild}");
    let mut ancestors = strings(&grandchild["ancestors"]);
    ancestors.sort_unstable();
    assert_eq!(ancestors, ["acme", "acme-dev"], "{grandchild}");

    // Showing it: the parent and every ancestor.
    let shown = ok_out(url, &["parent", "acme-dev-x"]).await;
    assert_eq!(row(&shown, "parent"), ["parent", "acme-dev"], "{shown}");
    let mut line: Vec<&str> = row(&shown, "ancestors")[1..]
        .iter()
        .map(|cell| cell.trim_end_matches(','))
        .collect();
    line.sort_unstable();
    assert_eq!(line, ["acme", "acme-dev"], "{shown}");
    let shown = json_of(&ok_out(url, &["--json", "parent", "acme-dev"]).await);
    assert_eq!(shown["project"], "acme-dev", "{shown}");
    assert_eq!(shown["parent"], "acme", "{shown}");
    assert_eq!(shown["ancestors"], json!(["acme"]), "{shown}");

    // A cycle is refused by the server.
    let (_, err) = failed(url, &["parent", "acme", "acme-dev-x"]).await;
    assert!(err.contains("invalid-request (400)"), "{err}");

    // Usage in the tree: 2 committed in the child, 1 held in the grandchild, 1 held in acme.
    let (child, _) = reserve(url, "acme-dev", "instances=2").await;
    ok_out(url, &["commit", "acme-dev", &child]).await;
    let (grandchild, _) = reserve(url, "acme-dev-x", "instances=1").await;
    let (_, last) = reserve(url, "acme", "instances=1").await;
    let last = last.to_string();
    let usage = ok_out(url, &["usage", "acme", "--min-position", &last]).await;
    let header = row(&usage, "RESOURCE");
    assert_eq!(
        header,
        [
            "RESOURCE",
            "LIMIT",
            "IN_USE",
            "RESERVED",
            "SUBTREE_IN_USE",
            "SUBTREE_RESERVED",
            "HEADROOM"
        ],
        "{usage}"
    );
    // Its own in_use 0 and reserved 1; the subtree's 2 and 2; headroom 5 - 2 - 2.
    assert_eq!(
        row(&usage, "instances"),
        ["instances", "5", "0", "1", "2", "2", "1"],
        "{usage}"
    );
    // Its one child, whose subtree holds the grandchild's reserve.
    assert_eq!(
        row_of(&usage, &["acme-dev", "instances"]),
        ["acme-dev", "instances", "2", "1"],
        "{usage}"
    );
    assert!(!usage.contains("acme-dev-x"), "only children: {usage}");
    assert!(
        usage.contains("headroom is the limit minus the subtree's"),
        "{usage}"
    );
    let json = json_of(&ok_out(url, &["--json", "usage", "acme", "--min-position", &last]).await);
    assert_eq!(
        json["subtree"]["instances"],
        json!({"in_use": 2, "reserved": 2})
    );
    let children = json["children"].as_object().expect("children");
    assert_eq!(children.keys().collect::<Vec<_>>(), ["acme-dev"], "{json}");
    assert_eq!(
        children["acme-dev"]["instances"],
        json!({"in_use": 2, "reserved": 1})
    );
    assert_eq!(json["resources"]["instances"]["headroom"], 1, "{json}");
    // A leaf's usage is as before: no subtree columns, no children.
    let leaf = ok_out(url, &["usage", "acme-dev-x", "--min-position", &last]).await;
    assert!(
        !leaf.contains("SUBTREE") && !leaf.contains("CHILD"),
        "{leaf}"
    );

    // Over an ancestor's limit: the refusal names the ancestor, and what to do.
    let (_, err) = failed(url, &["reserve", "acme-dev-x", "instances=2"]).await;
    for expected in [
        "over-quota (403)",
        "over acme's quota for instances",
        "ancestor_overs: {\"acme\":[\"instances\"]}",
        "quota usage ANCESTOR",
    ] {
        assert!(err.contains(expected), "{expected:?} missing:\n{err}");
    }
    let (out, _) = failed(url, &["--json", "reserve", "acme-dev", "instances=2"]).await;
    let problem = json_of(&out);
    assert_eq!(problem["status"], 403, "{problem}");
    assert_eq!(problem["overs"], json!([]), "{problem}");
    assert_eq!(
        problem["ancestor_overs"],
        json!({"acme": ["instances"]}),
        "{problem}"
    );
    let dry = ok_out(url, &["reserve", "acme-dev", "instances=2", "--dry-run"]).await;
    assert!(dry.starts_with("would be denied"), "{dry}");
    ok_out(url, &["reserve", "acme-dev-x", "instances=1"]).await;

    // audit --subtree: the descendants' entries too, with a PROJECT column.
    let audit = subtree_audit(url, &grandchild).await;
    let ids: Vec<&str> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|entry| entry["reservation_id"].as_str())
        .collect();
    assert!(ids.contains(&child.as_str()), "{audit}");
    let table = ok_out(url, &["audit", "acme", "--subtree"]).await;
    assert!(row(&table, "POSITION").contains(&"PROJECT"), "{table}");

    // Removing the parent: acme-dev is a root again, and acme has no children.
    let removed = ok_out(url, &["parent", "acme-dev", "--remove"]).await;
    assert!(removed.contains("acme-dev has no parent now"), "{removed}");
    let shown = ok_out(url, &["parent", "acme-dev"]).await;
    assert_eq!(row(&shown, "parent"), ["parent", "-"], "{shown}");
    let json = json_of(&ok_out(url, &["--json", "parent", "acme-dev-x", "--remove"]).await);
    assert_eq!(json["project"], "acme-dev-x", "{json}");
    assert!(json["parent"].is_null(), "{json}");
    // No ancestor caps acme-dev now: it reserves up to its own limit.
    let (_, last) = reserve(url, "acme-dev", "instances=5").await;
    let usage = ok_out(url, &["usage", "acme", "--min-position", &last.to_string()]).await;
    assert!(
        !usage.contains("SUBTREE") && !usage.contains("CHILD"),
        "{usage}"
    );
    assert_eq!(
        row(&usage, "instances"),
        ["instances", "5", "0", "1", "4"],
        "{usage}"
    );

    // A new parent whose limit is below the project's usage: refused unless forced.
    ok_out(url, &["limits", "set", "tiny", "instances=1"]).await;
    let (_, err) = failed(url, &["parent", "acme-dev", "tiny"]).await;
    assert!(
        err.contains("limit-below-usage") && err.contains("--force"),
        "{err}"
    );
    let forced = ok_out(url, &["parent", "acme-dev", "tiny", "--force"]).await;
    assert_eq!(row(&forced, "parent"), ["parent", "tiny"], "{forced}");
}

/// `--json audit acme --subtree`, once the audit view has the grandchild's reserve (the views
/// may lag the writes by a few seconds).
async fn subtree_audit(url: &str, grandchild: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let audit = json_of(&ok_out(url, &["--json", "audit", "acme", "--subtree"]).await);
        if audit.to_string().contains(grandchild) {
            return audit;
        }
        assert!(Instant::now() < deadline, "never in the audit: {audit}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A bad PROJECT or PARENT is refused by the command line itself, in the server's words, before
/// any request (the URL here reaches no server).
#[tokio::test]
async fn a_bad_project_id_is_refused_before_anything_is_sent() {
    let nowhere = "http://127.0.0.1:9";
    for args in [
        &["parent", "acme-dev", "acme/x"][..],
        &["parent", "acme-dev", "acme/x", "--force"],
        &["parent", "acme/x", "acme"],
        &["parent", "acme/x"],
        &["usage", "acme/x"],
        &["audit", "acme/x", "--subtree"],
    ] {
        let (out, err) = failed(nowhere, args).await;
        assert!(
            err.contains("invalid project id: contains '/'; allowed are A-Z a-z 0-9 . _ : -"),
            "{args:?}: {err}"
        );
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(!err.contains("cannot reach"), "nothing was sent: {err}");
    }
    let long = "p".repeat(129);
    let (_, err) = failed(nowhere, &["parent", "acme-dev", &long]).await;
    assert!(
        err.contains("invalid project id: must be 1 to 128 characters long (got 129)"),
        "{err}"
    );
    let (_, err) = failed(nowhere, &["parent", "acme-dev", ""]).await;
    assert!(err.contains("invalid project id"), "{err}");
    // --remove takes no PARENT, and --force only goes with one.
    let (_, err) = failed(nowhere, &["parent", "acme-dev", "acme", "--remove"]).await;
    assert!(err.contains("--remove"), "{err}");
    let (_, err) = failed(nowhere, &["parent", "acme-dev", "--force"]).await;
    assert!(
        err.contains("[PARENT]") || err.contains("<PARENT>"),
        "{err}"
    );
}
