//! End-to-end: counted reserves (issue 18, item 2; SPEC rule 9, Nova's min_count/max_count):
//! the largest count that fits is granted with its multiplied deltas, shown by every view of
//! the reservation; below `min` is a 403 with `max_count`; the count range is part of an
//! idempotent body; bad ranges are 400s that record nothing. On SQLite and PostgreSQL.

mod common;

use common::{cli, postgres_store, sqlite_store, store_head, Api, Server, StoreUrl};
use serde_json::json;

async fn counted_reserves(store: &StoreUrl, api: &Api) {
    api.set_defaults(json!({"instances": 10, "cores": 20, "ram": -1}))
        .await;
    let path = "/v1/projects/boots/reservations";
    let id = "0192f000-0000-7000-8000-000000000001";
    let body = json!({
        "deltas": {"instances": 1, "cores": 4, "ram": 512},
        "count": {"min": 2, "max": 8},
        "reservation_id": id,
    });

    let granted = api.post(path, body.clone()).await;
    let granted = granted.assert_status(201).clone();
    assert_eq!(granted["count"], 5, "cores allow 20 / 4 = 5: {granted}");
    assert_eq!(
        granted["deltas"],
        json!({"instances": 5, "cores": 20, "ram": 2560})
    );
    let position = granted["position"].as_u64().expect("position");

    // The same body again is the same reservation; another range with the id is a mismatch.
    let again = api.post(path, body.clone()).await;
    assert_eq!(again.assert_status(201), &granted);
    let mut other = body.clone();
    other["count"] = json!({"min": 1, "max": 8});
    api.post(path, other)
        .await
        .assert_problem(409, "idempotency-mismatch");

    // Every view of it shows the count.
    let one = api.get(&format!("{path}/{id}")).await;
    assert_eq!(one.assert_status(200)["count"], 5);
    let list = api.get(&format!("{path}?min_position={position}")).await;
    assert_eq!(list.assert_status(200)["reservations"][0]["count"], 5);
    let audit = api
        .get(&format!(
            "/v1/projects/boots/audit?type=ReservationRequested&min_position={position}"
        ))
        .await;
    assert_eq!(audit.assert_status(200)["entries"][0]["count"], 5);

    // Room for 5 instances and no cores is left: 1..3 of one instance and no cores gets 3 ...
    let small = api
        .post(
            path,
            json!({"deltas": {"instances": 1}, "count": {"min": 1, "max": 3}}),
        )
        .await;
    assert_eq!(small.assert_status(201)["count"], 3);
    // ... and at least 3 more is denied, saying 2 would fit.
    let denied = api
        .post(
            path,
            json!({"deltas": {"instances": 1}, "count": {"min": 3, "max": 4}}),
        )
        .await;
    denied.assert_problem(403, "over-quota");
    assert_eq!(denied.body["max_count"], 2, "{:?}", denied.body);
    assert_eq!(denied.body["overs"], json!(["instances"]));
    // A dry run says the same, recording nothing.
    let before = store_head(store).await;
    let dry = api
        .post(
            &format!("{path}?dry_run=true"),
            json!({"deltas": {"instances": 1}, "count": {"min": 1, "max": 4}}),
        )
        .await;
    let dry = dry.assert_status(200);
    assert_eq!(
        (dry["granted"].clone(), dry["count"].clone()),
        (json!(true), json!(2))
    );
    let dry = api
        .post(
            &format!("{path}?dry_run=true"),
            json!({"deltas": {"instances": 1}, "count": {"min": 3, "max": 4}}),
        )
        .await;
    assert_eq!(dry.assert_status(200)["max_count"], 2);

    // Bad ranges: 400, nothing recorded.
    for count in [
        json!({"min": 0, "max": 1}),
        json!({"min": 3, "max": 2}),
        json!({"min": 1, "max": 10001}),
        json!({"min": 1}),
        json!({"min": 1, "max": 2, "step": 1}),
        json!({"min": -1, "max": 2}),
        json!([1, 2]),
    ] {
        api.post(path, json!({"deltas": {"instances": 1}, "count": count}))
            .await
            .assert_problem(400, "invalid-request");
    }
    assert_eq!(
        store_head(store).await,
        before,
        "a dry run or a refusal recorded events"
    );
}

#[tokio::test]
async fn counted_reserves_sqlite() {
    let store = sqlite_store();
    let server = Server::start(&store);
    counted_reserves(&store, &server.client()).await;
}

#[tokio::test]
async fn counted_reserves_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let server = Server::start(&store);
    counted_reserves(&store, &server.client()).await;
}

/// `quota reserve --count MIN:MAX` prints the count granted.
#[tokio::test]
async fn quota_reserve_count() {
    let store = sqlite_store();
    let server = Server::start(&store);
    server.client().set_defaults(json!({"instances": 3})).await;
    let url = server.url.clone();
    let (ok, out, err) = cli(&url, ["reserve", "acme", "instances=1", "--count", "1:5"]).await;
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("count") && out.contains("instances=3"),
        "{out}"
    );
    let (ok, _, err) = cli(&url, ["reserve", "acme", "instances=1", "--count", "5"]).await;
    assert!(!ok && err.contains("MIN:MAX"), "{err}");
}
