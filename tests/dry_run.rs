//! End-to-end: `POST /v1/projects/{p}/reservations?dry_run=true` (issue 18, item 3) answers
//! what a reserve would get now, with the numbers it would be judged on, and records nothing
//! at all: not a hold, not a denial, not a position. On SQLite and PostgreSQL.

mod common;

use common::{postgres_store, sqlite_store, store_head, Api, Server, StoreUrl};
use serde_json::json;

async fn dry_runs_judge_and_record_nothing(store: &StoreUrl, api: &Api) {
    api.set_defaults(json!({"instances": 3, "cores": 8, "ram": -1}))
        .await;
    let held = api
        .reserve("dry", json!({"instances": 2, "cores": 2}))
        .await;
    held.assert_status(201);
    let before = store_head(store).await;
    let path = "/v1/projects/dry/reservations?dry_run=true";

    let fits = api
        .post(path, json!({"deltas": {"instances": 1, "ram": 512}}))
        .await;
    let fits = fits.assert_status(200);
    assert_eq!(
        fits,
        &json!({
            "granted": true,
            "overs": [],
            "limits": {"instances": 3, "ram": -1},
            "usage": {"instances": {"in_use": 0, "reserved": 2}, "ram": {"in_use": 0, "reserved": 0}},
            "headroom": {"instances": 1},
        })
    );

    let over = api
        .post(path, json!({"deltas": {"instances": 2, "cores": 7}}))
        .await;
    let over = over.assert_status(200);
    assert_eq!(over["granted"], false);
    assert_eq!(over["overs"], json!(["cores", "instances"]));
    assert_eq!(over["headroom"], json!({"cores": 6, "instances": 1}));

    // What a reserve refuses outright, a dry run refuses the same way.
    api.post(path, json!({"deltas": {"gpus": 1}}))
        .await
        .assert_problem(400, "unknown-resource");
    api.post(path, json!({"deltas": {"instances": -1}}))
        .await
        .assert_problem(409, "usage-underflow");

    assert_eq!(
        store_head(store).await,
        before,
        "a dry run recorded an event"
    );
    let audit = api
        .get("/v1/projects/dry/audit?type=ReservationDenied")
        .await;
    assert_eq!(audit.assert_status(200)["entries"], json!([]));
    let usage = api.get("/v1/projects/dry/usage").await;
    let usage = usage.assert_status(200);
    assert_eq!(
        usage["resources"]["instances"]["reserved"], 2,
        "a dry run holds nothing: {usage}"
    );

    // The real reserve is judged as the dry run said.
    api.reserve("dry", json!({"instances": 2, "cores": 7}))
        .await
        .assert_problem(403, "over-quota");
    api.reserve("dry", json!({"instances": 1, "ram": 512}))
        .await
        .assert_status(201);
}

#[tokio::test]
async fn dry_runs_judge_and_record_nothing_sqlite() {
    let store = sqlite_store();
    let server = Server::start(&store);
    dry_runs_judge_and_record_nothing(&store, &server.client()).await;
}

#[tokio::test]
async fn dry_runs_judge_and_record_nothing_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let server = Server::start(&store);
    dry_runs_judge_and_record_nothing(&store, &server.client()).await;
}
