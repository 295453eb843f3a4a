//! End-to-end: `POST /v1/projects/{p}/usage/corrections` and `quota correct` (issue 18, item
//! 4; SPEC rule 10): an admin sets in_use to the real counts with a reason; one
//! `UsageCorrected` per resource that changes, shown in the audit with before, after and
//! reason; equal counts record nothing; bad input changes nothing. On SQLite and PostgreSQL.

mod common;

use common::{cli, postgres_store, sqlite_store, store_head, Api, Server, StoreUrl};
use serde_json::json;

async fn corrections_are_recorded_and_audited(store: &StoreUrl, api: &Api) {
    api.set_defaults(json!({"instances": 10, "cores": 20}))
        .await;
    let held = api
        .reserve("fix", json!({"instances": 2, "cores": 4}))
        .await;
    let id = held.assert_status(201)["reservation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    api.commit("fix", &id).await.assert_status(200);
    let path = "/v1/projects/fix/usage/corrections";

    let done = api
        .post(
            path,
            json!({"in_use": {"instances": 3, "cores": 4}, "reason": "hypervisor recount", "actor": "ops-ann"}),
        )
        .await;
    let done = done.assert_status(200).clone();
    assert_eq!(
        done["corrections"],
        json!([{"resource": "instances", "before": 2, "after": 3}]),
        "cores was right: no correction for it"
    );
    let position = done["position"].as_u64().expect("position");

    let usage = api
        .get(&format!("/v1/projects/fix/usage?min_position={position}"))
        .await;
    let usage = usage.assert_status(200);
    assert_eq!(usage["resources"]["instances"]["in_use"], 3);
    assert_eq!(usage["resources"]["cores"]["in_use"], 4);

    let audit = api
        .get(&format!(
            "/v1/projects/fix/audit?type=UsageCorrected&min_position={position}"
        ))
        .await;
    let entries = audit.assert_status(200)["entries"].clone();
    assert_eq!(entries.as_array().map(Vec::len), Some(1), "{entries}");
    let entry = &entries[0];
    assert_eq!(entry["reason"], "hypervisor recount");
    assert_eq!(entry["actor"], "ops-ann");
    assert_eq!(entry["before"], json!({"instances": 2}));
    assert_eq!(entry["after"], json!({"instances": 3}));

    // The same counts again record nothing.
    let before = store_head(store).await;
    let again = api
        .post(path, json!({"in_use": {"instances": 3}, "reason": "again"}))
        .await;
    assert_eq!(again.assert_status(200)["corrections"], json!([]));
    assert_eq!(store_head(store).await, before);

    // Bad input: refused whole, nothing recorded.
    for (body, status, code) in [
        (
            json!({"in_use": {"instances": -1}, "reason": "x"}),
            400,
            "invalid-request",
        ),
        (json!({"in_use": {"instances": 1}}), 400, "invalid-request"),
        (
            json!({"in_use": {"instances": 1}, "reason": ""}),
            400,
            "invalid-request",
        ),
        (
            json!({"in_use": {"instances": 1}, "reason": "a\u{7}b"}),
            400,
            "invalid-request",
        ),
        (json!({"in_use": {}, "reason": "x"}), 400, "invalid-request"),
        (
            json!({"in_use": {"instances": 1, "gpus": 1}, "reason": "x"}),
            400,
            "unknown-resource",
        ),
        (
            json!({"in_use": {"instances": 1}, "reason": "x", "user": "no spaces"}),
            400,
            "invalid-request",
        ),
    ] {
        api.post(path, body.clone())
            .await
            .assert_problem(status, code);
    }
    assert_eq!(
        store_head(store).await,
        before,
        "a refused correction recorded events"
    );
}

#[tokio::test]
async fn corrections_sqlite() {
    let store = sqlite_store();
    let server = Server::start(&store);
    corrections_are_recorded_and_audited(&store, &server.client()).await;
}

#[tokio::test]
async fn corrections_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let server = Server::start(&store);
    corrections_are_recorded_and_audited(&store, &server.client()).await;
}

/// `quota correct` prints what changed, and says when nothing did.
#[tokio::test]
async fn quota_correct_prints_the_corrections() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(json!({"instances": 10})).await;
    let url = server.url.clone();
    let args = ["correct", "acme", "instances=4", "--reason", "recount"];
    let (ok, out, err) = cli(&url, args).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("instances") && out.contains('4'), "{out}");
    let (ok, out, _) = cli(&url, args).await;
    assert!(ok && out.contains("nothing to correct"), "{out}");
    let (ok, _, err) = cli(&url, ["correct", "acme", "instances=1"]).await;
    assert!(!ok && err.contains("--reason"), "{err}");
}
