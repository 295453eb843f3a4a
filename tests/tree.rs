//! End-to-end: the hierarchy (SPEC rule 11) over HTTP. A project's parent
//! (`PUT`/`GET`/`DELETE /v1/projects/{p}/parent`: admin-only writes, reads scoped as the
//! project's limits; a cycle, a tree over 4 levels deep and bad input are 400s that record
//! nothing); rule 6 for a new ancestor (joining over its limit is a 409 unless forced); a reserve
//! in a child over its parent's limit (403 with `ancestor_overs`); a parent's usage with its
//! `subtree` and `children`, now and `?at=` (the children it had then); the project list's
//! `?parent=`; the audit's `?subtree=true`, paged; and the seed burst across a tree: 20
//! concurrent reserves spread over two children of a parent with room for 10 grant exactly 10,
//! on SQLite, PostgreSQL and two servers sharing one PostgreSQL schema. Each store ends with the
//! views caught up and `quota projections verify` clean.
//!
//! PostgreSQL tests need `QUOTA_TEST_POSTGRES_URL` and pass (skipped) without it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{
    cli, postgres_store, sqlite_store, store_head, tokens_file, views_caught_up, Api, Server,
    StoreUrl,
};
use serde_json::{json, Value};

const ADMIN: &str = "admin-secret-0123456789";
const AUDITOR: &str = "auditor-secret-0123456789";
const DEV: &str = "dev-secret-0123456789";
const TOKENS: &str = "admin-secret-0123456789 admin\n\
                      auditor-secret-0123456789 auditor\n\
                      dev-secret-0123456789 project:dev\n";

fn id_of(value: &Value) -> String {
    value["reservation_id"]
        .as_str()
        .expect("reservation_id")
        .to_owned()
}

fn parent_path(project: &str) -> String {
    format!("/v1/projects/{project}/parent")
}

async fn set_parent(api: &Api, project: &str, parent: &str) -> common::Answer {
    api.put(&parent_path(project), json!({ "parent": parent }))
        .await
}

/// Reserves and commits `n` instances in `project`.
async fn use_instances(api: &Api, project: &str, n: i64) {
    let held = api.reserve(project, json!({ "instances": n })).await;
    let id = id_of(held.assert_status(201));
    api.commit(project, &id).await.assert_status(200);
}

/// PUT/GET/DELETE of a parent: answers, who may, cycles, depth, bad input (nothing recorded).
async fn parent_rows(store: &StoreUrl, base: &str) {
    let admin = Api::new(base, Some(ADMIN));
    let auditor = Api::new(base, Some(AUDITOR));
    let dev = Api::new(base, Some(DEV));
    admin.set_defaults(json!({"instances": 100})).await;

    let set = set_parent(&admin, "dev", "dept").await;
    let set = set.assert_status(200).clone();
    assert_eq!(set["project"], "dev");
    assert_eq!(set["parent"], "dept");
    assert_eq!(set["ancestors"], json!(["dept"]));
    assert!(set["position"].as_u64().expect("position") > 0, "{set}");
    let dept = set_parent(&admin, "dept", "org").await;
    assert_eq!(dept.assert_status(200)["ancestors"], json!(["org"]));

    // GET: the parent and every ancestor, nearest first; the project's token and an auditor
    // may read it, another project's token may not.
    let expected = json!({"project": "dev", "parent": "dept", "ancestors": ["dept", "org"]});
    for reader in [&admin, &auditor, &dev] {
        assert_eq!(
            *reader.get(&parent_path("dev")).await.assert_status(200),
            expected
        );
    }
    let root = admin.get(&parent_path("org")).await;
    assert_eq!(
        *root.assert_status(200),
        json!({"project": "org", "parent": null, "ancestors": []})
    );
    dev.get(&parent_path("dept"))
        .await
        .assert_problem(403, "forbidden");
    // Writes are the admin's.
    for answer in [
        set_parent(&dev, "dev", "org").await,
        set_parent(&auditor, "dev", "org").await,
        dev.delete(&parent_path("dev")).await,
        auditor.delete(&parent_path("dev")).await,
    ] {
        answer.assert_problem(403, "forbidden");
    }

    // org > dept > dev > leaf: four levels, the most a tree has.
    set_parent(&admin, "leaf", "dev").await.assert_status(200);
    let head = store_head(store).await;
    for (project, parent) in [
        ("dev", "dev"),    // itself
        ("org", "dev"),    // a descendant: a cycle
        ("org", "leaf"),   // a cycle through three levels
        ("below", "leaf"), // a fifth level
        ("org", "top"),    // org's subtree moved under a new root: five levels
    ] {
        let refused = set_parent(&admin, project, parent).await;
        refused.assert_problem(400, "invalid-request");
    }
    // Wrong types and shapes where the parent belongs, and bad ids in the path.
    for body in [
        json!({"parent": 7}),
        json!({"parent": ["org"]}),
        json!({"parent": {"id": "org"}}),
        json!({"parent": true}),
        json!({"parent": null}),
        json!({"parent": ""}),
        json!({"parent": "a b"}),
        json!({"parent": "p".repeat(129)}),
        json!({"parent": "org", "force": "yes"}),
        json!({"parent": "org", "forced": true}),
        json!({}),
        json!(["org"]),
    ] {
        admin
            .put(&parent_path("solo"), body)
            .await
            .assert_problem(400, "invalid-request");
    }
    let long = "u".repeat(129);
    for project in ["a%20b", long.as_str(), "a%2Fb", "%C3%A9"] {
        let path = parent_path(project);
        for answer in [
            set_parent(&admin, project, "org").await,
            admin.get(&path).await,
            admin.delete(&path).await,
        ] {
            answer.assert_problem(400, "invalid-request");
        }
    }
    assert_eq!(store_head(store).await, head, "a refused write recorded");

    // DELETE makes it a root (its descendants stay under it), and again changes nothing.
    admin.delete(&parent_path("dev")).await.assert_status(204);
    let leaf = admin.get(&parent_path("leaf")).await;
    assert_eq!(leaf.assert_status(200)["ancestors"], json!(["dev"]));
    let head = store_head(store).await;
    admin.delete(&parent_path("dev")).await.assert_status(204);
    assert_eq!(store_head(store).await, head, "removing no parent recorded");
    let dev_now = admin.get(&parent_path("dev")).await;
    assert_eq!(dev_now.assert_status(200)["parent"], Value::Null);
}

/// Rule 6 for a new ancestor, a child's reserve over its parent's limit, the parent's usage
/// (now and at a past instant) and the project list's `?parent=`.
async fn limits_usage_and_list(store: &StoreUrl, api: &Api) {
    api.set_defaults(json!({"instances": 100, "cores": 100}))
        .await;
    api.put(
        "/v1/projects/div/limits",
        json!({"limits": {"instances": 4}}),
    )
    .await
    .assert_status(200);
    use_instances(api, "team", 3).await;
    use_instances(api, "team2", 2).await;
    let before_any = chrono::Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;
    set_parent(api, "team", "div").await.assert_status(200);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let with_one = chrono::Utc::now();
    tokio::time::sleep(Duration::from_millis(20)).await;

    // team2 would take div's subtree to 5 instances, over its 4: refused unless forced.
    let head = store_head(store).await;
    let over = set_parent(api, "team2", "div").await;
    over.assert_problem(409, "limit-below-usage");
    assert_eq!(
        over.body["resources"],
        json!({"instances": {"limit": 4, "in_use": 5, "reserved": 0}}),
        "{:?}",
        over.body
    );
    assert_eq!(store_head(store).await, head, "a refused join recorded");
    let forced = api
        .put(
            &parent_path("team2"),
            json!({"parent": "div", "force": true}),
        )
        .await;
    assert_eq!(forced.assert_status(200)["ancestors"], json!(["div"]));

    // A reserve in a child is over its parent's limit: 403, named in `ancestor_overs` only.
    let denied = api
        .reserve("team", json!({"instances": 1, "cores": 1}))
        .await;
    denied.assert_problem(403, "over-quota");
    assert_eq!(denied.body["overs"], json!([]), "{:?}", denied.body);
    assert_eq!(
        denied.body["ancestor_overs"],
        json!({"div": ["instances"]}),
        "{:?}",
        denied.body
    );
    let dry = api
        .post(
            "/v1/projects/team/reservations?dry_run=true",
            json!({"deltas": {"instances": 1}}),
        )
        .await;
    let dry = dry.assert_status(200);
    assert_eq!(dry["granted"], false, "{dry}");
    assert_eq!(
        dry["ancestor_overs"],
        json!({"div": ["instances"]}),
        "{dry}"
    );
    // Cores are not over anywhere: granted, and held in the parent's subtree.
    let cores = api.reserve("team2", json!({"cores": 2})).await;
    cores.assert_status(201);

    // The parent's usage: its subtree, each child's, and headroom of the subtree.
    let usage = api.get("/v1/projects/div/usage").await;
    let usage = usage.assert_status(200);
    assert_eq!(
        usage["resources"]["instances"],
        json!({"limit": 4, "in_use": 0, "reserved": 0, "headroom": -1}),
        "{usage}"
    );
    assert_eq!(usage["resources"]["cores"]["headroom"], 98, "{usage}");
    let numbers = |in_use: i64, reserved: i64| json!({"in_use": in_use, "reserved": reserved});
    let (none, five, two_held) = (numbers(0, 0), numbers(5, 0), numbers(0, 2));
    assert_eq!(
        usage["subtree"],
        json!({"cores": two_held, "instances": five})
    );
    assert_eq!(
        usage["children"],
        json!({"team": {"cores": none, "instances": numbers(3, 0)},
               "team2": {"cores": two_held, "instances": numbers(2, 0)}})
    );
    let leaf = api.get("/v1/projects/team/usage").await;
    let leaf = leaf.assert_status(200);
    assert!(
        leaf.get("subtree").is_none() && leaf.get("children").is_none(),
        "{leaf}"
    );

    // At a past instant: the children it had then, and none before the first joined.
    let at = |t: chrono::DateTime<chrono::Utc>| {
        format!(
            "/v1/projects/div/usage?at={}",
            t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        )
    };
    let then = api.get(&at(with_one)).await;
    let then = then.assert_status(200);
    assert_eq!(
        then["subtree"]["instances"],
        json!({"in_use": 3, "reserved": 0})
    );
    let children: Vec<&String> = then["children"]
        .as_object()
        .expect("children")
        .keys()
        .collect();
    assert_eq!(children, ["team"], "{then}");
    assert_eq!(then["resources"]["instances"]["headroom"], 1, "{then}");
    let earlier = api.get(&at(before_any)).await;
    let earlier = earlier.assert_status(200);
    assert!(earlier.get("subtree").is_none(), "{earlier}");

    // The project list: the children of div, paged; every entry with its parent.
    let list = api.get("/v1/projects?parent=div").await;
    assert_eq!(
        list.assert_status(200)["projects"],
        json!([{"project": "team", "parent": "div"}, {"project": "team2", "parent": "div"}])
    );
    let first = api.get("/v1/projects?parent=div&limit=1").await;
    let first = first.assert_status(200).clone();
    assert_eq!(
        first["projects"],
        json!([{"project": "team", "parent": "div"}])
    );
    let cursor = first["next"].as_str().expect("a next page");
    let second = api
        .get(&format!("/v1/projects?parent=div&limit=1&cursor={cursor}"))
        .await;
    let second = second.assert_status(200);
    assert_eq!(
        second["projects"],
        json!([{"project": "team2", "parent": "div"}])
    );
    assert_eq!(second["next"], Value::Null);
    let all = api.get("/v1/projects?prefix=team").await;
    assert_eq!(
        all.assert_status(200)["projects"],
        json!([{"project": "team", "parent": "div"}, {"project": "team2", "parent": "div"}])
    );
    let none = api.get("/v1/projects?parent=team").await;
    assert_eq!(none.assert_status(200)["projects"], json!([]));
    api.get("/v1/projects?parent=a%20b")
        .await
        .assert_problem(400, "invalid-request");
}

/// Every entry of a project's audit, page by page (`limit` a page); each page's `next` goes on.
async fn audit_entries(api: &Api, query: &str, limit: usize) -> Vec<Value> {
    let mut entries = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/projects/div/audit?{query}&limit={limit}");
        if let Some(cursor) = &cursor {
            path.push_str(&format!("&cursor={cursor}"));
        }
        let page = api.get(&path).await;
        let page = page.assert_status(200).clone();
        let got = page["entries"].as_array().expect("entries").clone();
        assert!(got.len() <= limit);
        entries.extend(got);
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return entries,
        }
    }
}

/// The audit of div's subtree: its own entries and its children's, in position order, each
/// naming its project; paged the same at any page size. The hierarchy's own entries say what
/// they are about.
async fn subtree_audit(api: &Api) {
    views_caught_up(api).await;
    let own = audit_entries(api, "subtree=false", 1000).await;
    assert!(own.iter().all(|e| e["project"] == "div"), "{own:?}");
    let all = audit_entries(api, "subtree=true", 1000).await;
    let paged = audit_entries(api, "subtree=true", 2).await;
    assert_eq!(all, paged, "paging a subtree's audit");
    let positions: Vec<u64> = all
        .iter()
        .map(|e| e["position"].as_u64().unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    let mut per_project: BTreeMap<String, usize> = BTreeMap::new();
    for entry in &all {
        *per_project
            .entry(entry["project"].as_str().expect("project").to_owned())
            .or_default() += 1;
    }
    assert_eq!(per_project["div"], own.len());
    assert!(
        per_project["team"] >= 4 && per_project["team2"] >= 4,
        "{per_project:?}"
    );
    assert_eq!(per_project.len(), 3, "{per_project:?}");
    // team's ParentSet, div's DescendantsJoined for it, and the denial over div's limit.
    let of = |project: &str, kind: &str| -> Vec<&Value> {
        all.iter()
            .filter(|e| e["project"] == project && e["type"] == kind)
            .collect()
    };
    let parent_set = of("team", "ParentSet");
    assert_eq!(parent_set.len(), 1);
    assert_eq!(parent_set[0]["parent"], "div");
    assert_eq!(parent_set[0]["force"], false);
    assert_eq!(of("team2", "ParentSet")[0]["force"], true);
    let joined = of("div", "DescendantsJoined");
    assert_eq!(joined.len(), 2, "{joined:?}");
    assert_eq!(joined[0]["descendant"], "team");
    assert_eq!(joined[0]["deltas"], json!({"instances": 3}));
    assert_eq!(of("team", "ReservationDenied").len(), 1);
    let held = of("div", "DescendantReserved");
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["descendant"], "team2");
    assert_eq!(held[0]["deltas"], json!({"cores": 2}));
    let reservation = held[0]["reservation_id"].as_str().expect("the hold's id");
    let requested = of("team2", "ReservationRequested");
    assert!(requested.iter().any(|e| e["reservation_id"] == reservation));
    // Filters apply to the whole subtree.
    let denials = audit_entries(api, "subtree=true&type=ReservationDenied", 1000).await;
    assert_eq!(denials.len(), 1, "{denials:?}");
    assert_eq!(denials[0]["project"], "team");
}

async fn verify(store: &StoreUrl) {
    let (ok, out, err) = cli(
        "http://127.0.0.1:9",
        ["projections", "verify", "--store", &store.url],
    )
    .await;
    assert!(ok, "verify: {out}{err}");
}

/// The seed bug across a tree: a parent with room for 10 instances, two children capped at 10
/// each, 20 concurrent reserves of one instance, the first child's sent to `apis[0]`, the
/// second's to the last of `apis`: exactly 10 granted, each denial over the parent's limit.
async fn tree_burst(apis: &[Api], root: &str) {
    let admin = &apis[0];
    admin.set_defaults(json!({"instances": 100})).await;
    let children = [format!("{root}-a"), format!("{root}-b")];
    let limits = |n: i64| json!({"limits": {"instances": n}});
    admin
        .put(&format!("/v1/projects/{root}/limits"), limits(10))
        .await
        .assert_status(200);
    for child in &children {
        admin
            .put(&format!("/v1/projects/{child}/limits"), limits(10))
            .await
            .assert_status(200);
        set_parent(admin, child, root).await.assert_status(200);
    }
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let api = if i % 2 == 0 {
                &apis[0]
            } else {
                &apis[apis.len() - 1]
            };
            let (api, child) = (api.clone(), children[i % 2].clone());
            tokio::spawn(async move { api.reserve(&child, json!({"instances": 1})).await })
        })
        .collect();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for task in tasks {
        let answer = task.await.expect("task");
        if answer.status == 403 {
            answer.assert_problem(403, "over-quota");
            assert_eq!(answer.body["overs"], json!([]), "{answer:?}");
            assert_eq!(
                answer.body["ancestor_overs"],
                json!({ root: ["instances"] }),
                "{answer:?}"
            );
        }
        *statuses.entry(answer.status).or_default() += 1;
    }
    assert_eq!(
        statuses,
        BTreeMap::from([(201, 10), (403, 10)]),
        "exactly the parent's 10 granted"
    );
    for api in apis {
        // The views tell which projects have children: on another node, once they follow.
        views_caught_up(api).await;
        let usage = api.get(&format!("/v1/projects/{root}/usage")).await;
        let usage = usage.assert_status(200);
        assert_eq!(
            usage["subtree"]["instances"],
            json!({"in_use": 0, "reserved": 10})
        );
        assert_eq!(usage["resources"]["instances"]["headroom"], 0, "{usage}");
    }
}

/// The rows, the limits and usage, the audit and a burst on one server; then the views and
/// `verify`.
async fn tree_on(store: StoreUrl) {
    let dir = tempfile::tempdir().expect("temporary folder");
    let tokens = tokens_file(dir.path(), TOKENS);
    let server = Server::start_with_tokens(&store, &tokens);
    let admin = Api::new(&server.url, Some(ADMIN));
    parent_rows(&store, &server.url).await;
    limits_usage_and_list(&store, &admin).await;
    subtree_audit(&admin).await;
    tree_burst(std::slice::from_ref(&admin), "burst").await;
    views_caught_up(&admin).await;
    assert!(server.terminate(), "the server shuts down cleanly");
    verify(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tree_sqlite() {
    tree_on(sqlite_store()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tree_postgres() {
    if let Some(store) = postgres_store().await {
        tree_on(store).await;
    }
}

/// Two `quota serve` processes on one PostgreSQL schema, each child's reserves sent to its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tree_burst_two_nodes_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let first = Server::start(&store);
    let second = Server::start(&store);
    let apis = [first.client(), second.client()];
    tree_burst(&apis, "burst-2").await;
    views_caught_up(&apis[0]).await;
    views_caught_up(&apis[1]).await;
    assert!(first.terminate() && second.terminate());
    verify(&store).await;
}
