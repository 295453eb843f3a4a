//! The limits rows: defaults and per-project limits.

use serde_json::json;

use super::super::Api;

/// `PUT /v1/defaults`, `GET /v1/defaults`.
pub async fn defaults_rows(api: &Api) {
    let all = api
        .set_defaults(json!({"instances": 10, "cores": 20}))
        .await;
    assert_eq!(all, json!({"limits": {"instances": 10, "cores": 20}}));
    // Merged: resources not named keep their default.
    let all = api.set_defaults(json!({"ram": -1, "cores": 40})).await;
    assert_eq!(
        all,
        json!({"limits": {"instances": 10, "cores": 40, "ram": -1}})
    );
    let got = api.get("/v1/defaults").await;
    assert_eq!(got.assert_status(200), &all);
    assert!(got.content_type.starts_with("application/json"));

    for bad in [
        json!({"limits": {"instances": -2}}),
        json!({"limits": {}}),
        json!({"limits": {"bad name": 1}}),
        json!({"limits": {"instances": 1.5}}),
        json!({"limits": {"instances": "10"}}),
        json!({"limits": {"instances": 1}, "extra": true}),
        json!({"limit": {"instances": 1}}),
        json!([1, 2]),
    ] {
        api.put("/v1/defaults", bad.clone())
            .await
            .assert_problem(400, "invalid-request");
    }
    assert_eq!(
        api.get("/v1/defaults").await.body,
        all,
        "refused requests changed nothing"
    );
}

/// `PUT|GET|DELETE /v1/projects/{p}/limits`.
pub async fn limits_rows(api: &Api) {
    api.set_defaults(json!({"instances": 10, "cores": 20, "ram": -1}))
        .await;
    let set = api
        .put(
            "/v1/projects/acme/limits",
            json!({"limits": {"instances": 5}}),
        )
        .await;
    let body = set.assert_status(200);
    assert_eq!(body["project"], "acme");
    assert_eq!(
        body["limits"],
        json!({"instances": 5, "cores": 20, "ram": -1})
    );
    let position = body["position"].as_u64().expect("position");
    assert!(position > 0);

    let got = api.get("/v1/projects/acme/limits").await;
    let body = got.assert_status(200);
    assert_eq!(body["project"], "acme");
    assert_eq!(
        body["limits"],
        json!({
            "instances": {"limit": 5, "source": "project"},
            "cores": {"limit": 20, "source": "default"},
            "ram": {"limit": -1, "source": "default"},
        })
    );

    // Unknown resource: 400, nothing set.
    let unknown = api
        .put("/v1/projects/acme/limits", json!({"limits": {"gpus": 1}}))
        .await;
    unknown.assert_problem(400, "unknown-resource");
    assert_eq!(unknown.body["resources"], json!(["gpus"]));

    // Lowering below usage: 409 with `resources`, unless forced.
    let held = api.reserve("acme", json!({"instances": 4})).await;
    held.assert_status(201);
    let below = api
        .put(
            "/v1/projects/acme/limits",
            json!({"limits": {"instances": 3}}),
        )
        .await;
    below.assert_problem(409, "limit-below-usage");
    assert!(
        below.body["resources"].get("instances").is_some(),
        "{below:?}"
    );
    assert_eq!(
        api.get("/v1/projects/acme/limits").await.body["limits"]["instances"]["limit"],
        5
    );
    let forced = api
        .put(
            "/v1/projects/acme/limits",
            json!({"limits": {"instances": 3}, "force": true}),
        )
        .await;
    assert_eq!(forced.assert_status(200)["limits"]["instances"], 3);
    // A forced lower limit denies new positive reserves until usage falls.
    api.reserve("acme", json!({"instances": 1}))
        .await
        .assert_problem(403, "over-quota");

    // DELETE: back to the defaults.
    let deleted = api.delete("/v1/projects/acme/limits").await;
    assert_eq!(deleted.status, 204, "{deleted:?}");
    let body = api.get("/v1/projects/acme/limits").await.body;
    assert_eq!(
        body["limits"]["instances"],
        json!({"limit": 10, "source": "default"})
    );
    // A project never configured answers the defaults.
    let fresh = api.get("/v1/projects/fresh-project/limits").await;
    assert_eq!(
        fresh.assert_status(200)["limits"]["cores"],
        json!({"limit": 20, "source": "default"})
    );
}
