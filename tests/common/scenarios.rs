//! The checks of the end-to-end suite, written once and run against each store.

use std::collections::BTreeMap;

use reqwest::Method;
use serde_json::{json, Value};

use super::{Answer, Api, Body};

fn id_of(answer: &Answer) -> String {
    answer.body["reservation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no reservation_id in {answer:?}"))
        .to_owned()
}

fn is_rfc3339_utc(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| s.ends_with('Z') && chrono::DateTime::parse_from_rfc3339(s).is_ok())
}

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

/// The reservation rows: reserve, get, commit, release, and each of their errors.
pub async fn reservation_rows(api: &Api) {
    api.set_defaults(json!({"instances": 10, "cores": 20, "ram": -1}))
        .await;

    // A boot: reserve then commit.
    let reserved = api
        .reserve("acme", json!({"instances": 1, "cores": 2, "ram": 4096}))
        .await;
    let body = reserved.assert_status(201).clone();
    let id = id_of(&reserved);
    assert!(uuid::Uuid::parse_str(&id).is_ok());
    assert_eq!(body["project"], "acme");
    assert_eq!(
        body["deltas"],
        json!({"instances": 1, "cores": 2, "ram": 4096})
    );
    assert_eq!(body["status"], "held");
    assert!(
        is_rfc3339_utc(&body["created_at"]) && is_rfc3339_utc(&body["expires_at"]),
        "{body}"
    );
    let created =
        chrono::DateTime::parse_from_rfc3339(body["created_at"].as_str().unwrap_or_default())
            .expect("time");
    let expires =
        chrono::DateTime::parse_from_rfc3339(body["expires_at"].as_str().unwrap_or_default())
            .expect("time");
    assert_eq!((expires - created).num_seconds(), 86_400, "default expiry");
    assert!(body.get("reason").is_none());
    let reserve_position = body["position"].as_u64().expect("position");

    let got = api
        .get(&format!("/v1/projects/acme/reservations/{id}"))
        .await;
    assert_eq!(got.assert_status(200), &body);

    let committed = api.commit("acme", &id).await;
    let committed_body = committed.assert_status(200).clone();
    assert_eq!(committed_body["status"], "committed");
    assert!(committed_body["position"].as_u64().expect("position") > reserve_position);
    // Idempotent: the same answer, nothing recorded.
    assert_eq!(
        api.commit("acme", &id).await.assert_status(200),
        &committed_body
    );

    // Releasing a committed reservation frees its usage.
    let released = api.release("acme", &id).await;
    let released_body = released.assert_status(200).clone();
    assert_eq!(released_body["status"], "released");
    assert_eq!(released_body["reason"], "freed");
    assert_eq!(
        api.release("acme", &id).await.assert_status(200),
        &released_body
    );
    api.commit("acme", &id)
        .await
        .assert_problem(409, "reservation-released");

    // Roll back a hold; committing it afterwards is refused.
    let hold = api.reserve("acme", json!({"instances": 1})).await;
    let hold_id = id_of(&hold);
    let rolled_back = api.release("acme", &hold_id).await;
    assert_eq!(rolled_back.assert_status(200)["reason"], "rolled_back");
    api.commit("acme", &hold_id)
        .await
        .assert_problem(409, "reservation-released");

    // Commit and release accept an optional body with audit fields.
    let hold = api.reserve("acme", json!({"instances": 1})).await;
    let hold_id = id_of(&hold);
    let with_actor = api
        .post(
            &format!("/v1/projects/acme/reservations/{hold_id}/commit"),
            json!({"actor": "nova-compute-1"}),
        )
        .await;
    assert_eq!(with_actor.assert_status(200)["status"], "committed");

    // Client-chosen ids: the same body answers the original; another body is a mismatch.
    let chosen = uuid::Uuid::new_v4().to_string();
    let request = json!({"deltas": {"instances": 2}, "reservation_id": chosen, "expires_in": 600});
    let first = api
        .post("/v1/projects/acme/reservations", request.clone())
        .await;
    let first_body = first.assert_status(201).clone();
    assert_eq!(first_body["reservation_id"], chosen);
    let again = api.post("/v1/projects/acme/reservations", request).await;
    assert_eq!(again.assert_status(201), &first_body);
    api.post(
        "/v1/projects/acme/reservations",
        json!({"deltas": {"instances": 3}, "reservation_id": chosen, "expires_in": 600}),
    )
    .await
    .assert_problem(409, "idempotency-mismatch");

    // Not found.
    let missing = uuid::Uuid::new_v4();
    api.get(&format!("/v1/projects/acme/reservations/{missing}"))
        .await
        .assert_problem(404, "not-found");
    api.commit("acme", &missing.to_string())
        .await
        .assert_problem(404, "not-found");
    api.release("acme", &missing.to_string())
        .await
        .assert_problem(404, "not-found");
    // A reservation belongs to its project.
    api.get(&format!("/v1/projects/other/reservations/{chosen}"))
        .await
        .assert_problem(404, "not-found");

    // Unknown resource: a typo never becomes unlimited.
    let typo = api.reserve("acme", json!({"instancess": 1})).await;
    typo.assert_problem(400, "unknown-resource");
    assert_eq!(typo.body["resources"], json!(["instancess"]));

    // Negative deltas below zero in_use.
    let underflow = api.reserve("acme", json!({"cores": -100})).await;
    underflow.assert_problem(409, "usage-underflow");
}

/// 403 over-quota with its fields, and all-or-nothing.
pub async fn over_quota_row(api: &Api) {
    api.set_defaults(json!({"instances": 10, "cores": 20, "ram": -1}))
        .await;
    let first = api
        .reserve("boot", json!({"instances": 8, "cores": 4}))
        .await;
    first.assert_status(201);
    let denied = api
        .reserve("boot", json!({"instances": 3, "cores": 30, "ram": 1}))
        .await;
    denied.assert_problem(403, "over-quota");
    let body = &denied.body;
    assert_eq!(
        body["overs"],
        json!(["cores", "instances"]),
        "sorted: {body}"
    );
    assert_eq!(body["limits"]["instances"], 10);
    assert_eq!(body["limits"]["cores"], 20);
    assert_eq!(body["limits"]["ram"], -1);
    assert_eq!(
        body["usage"]["instances"],
        json!({"in_use": 0, "reserved": 8})
    );
    assert_eq!(body["usage"]["cores"], json!({"in_use": 0, "reserved": 4}));
    assert_eq!(body["headroom"]["instances"], 2);
    assert_eq!(body["headroom"]["cores"], 16);
    assert!(
        body["headroom"].get("ram").is_none(),
        "no headroom when unlimited: {body}"
    );
    // Nothing was reserved: the exact remaining room is still grantable.
    api.reserve("boot", json!({"instances": 2, "cores": 16}))
        .await
        .assert_status(201);
    api.reserve("boot", json!({"instances": 1}))
        .await
        .assert_problem(403, "over-quota");
}

/// A hold past its expiry stops counting at once, and committing it is refused.
pub async fn expiry_row(api: &Api) {
    api.set_defaults(json!({"instances": 1})).await;
    let short = api
        .post(
            "/v1/projects/late/reservations",
            json!({"deltas": {"instances": 1}, "expires_in": 1}),
        )
        .await;
    let id = id_of(&short);
    assert_eq!(short.assert_status(201)["status"], "held");
    api.reserve("late", json!({"instances": 1}))
        .await
        .assert_problem(403, "over-quota");
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    // The room is back, whether or not the sweeper has recorded the expiry.
    let next = api.reserve("late", json!({"instances": 1})).await;
    next.assert_status(201);
    api.commit("late", &id)
        .await
        .assert_problem(409, "reservation-expired");
    let expired = api
        .get(&format!("/v1/projects/late/reservations/{id}"))
        .await;
    let body = expired.assert_status(200);
    assert_eq!(body["status"], "released");
    assert_eq!(body["reason"], "expired");
}

/// The seed bug (Nova 938317): 20 concurrent reserves against room for 10 grant exactly 10.
/// The requests are spread round-robin over `apis` (several nodes on one database).
pub async fn seed_burst(apis: &[Api], project: &str) {
    apis[0]
        .set_defaults(json!({"instances": 10, "cores": 1000, "ram": -1}))
        .await;
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let api = apis[i % apis.len()].clone();
            let project = project.to_owned();
            tokio::spawn(async move {
                api.reserve(&project, json!({"instances": 1, "cores": 2, "ram": 4096}))
                    .await
            })
        })
        .collect();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for task in tasks {
        let answer = task.await.expect("task");
        if answer.status == 403 {
            answer.assert_problem(403, "over-quota");
        }
        *statuses.entry(answer.status).or_default() += 1;
    }
    assert_eq!(
        statuses,
        BTreeMap::from([(201, 10), (403, 10)]),
        "exactly 10 granted"
    );
    // And the ledger agrees: no room left on any node.
    for api in apis {
        api.reserve(project, json!({"instances": 1}))
            .await
            .assert_problem(403, "over-quota");
    }
}

/// Bad inputs: each is a 4xx problem+json, and nothing changes.
pub async fn bad_inputs(api: &Api) {
    api.set_defaults(json!({"instances": 2, "cores": 4})).await;
    api.put("/v1/projects/bad/limits", json!({"limits": {"cores": 3}}))
        .await
        .assert_status(200);
    let defaults_before = api.get("/v1/defaults").await.body;
    let limits_before = api.get("/v1/projects/bad/limits").await.body;
    let held = api.reserve("bad", json!({"instances": 1})).await;
    let held_id = id_of(&held);
    let reservation_before = api
        .get(&format!("/v1/projects/bad/reservations/{held_id}"))
        .await
        .body;

    let raw = |s: &str| Some(Body::Raw(s.to_owned()));
    let js = |v: Value| Some(Body::Json(v));
    let huge = format!(
        r#"{{"deltas": {{"instances": 1}}, "actor": "{}"}}"#,
        "x".repeat(70 * 1024)
    );
    let cases: Vec<(Method, String, Option<Body>, u16, &str)> = vec![
        // Bodies.
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            raw("{\"deltas\": "),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            raw("not json"),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            raw(""),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            js(json!({"deltas": {"instances": "1"}})),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            js(json!({"deltas": {"instances": 1.5}})),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            js(json!({"deltas": {}})),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            js(json!({"deltas": {"a b": 1}})),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            js(json!({"deltas": {"instances": 1}, "unknown": 1})),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            js(json!({"delta": {"instances": 1}})),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            js(json!({"deltas": {"instances": 1}, "expires_in": 0})),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            js(json!({"deltas": {"instances": 1}, "expires_in": 2_592_001})),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            js(json!({"deltas": {"instances": 1}, "expires_in": -5})),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            js(json!({"deltas": {"instances": 1}, "reservation_id": "nope"})),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            raw(r#"{"deltas": {"instances": 99999999999999999999}}"#),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            js(json!({"deltas": {"instances": i64::MAX}})),
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations".into(),
            raw(&huge),
            413,
            "payload-too-large",
        ),
        (
            Method::POST,
            format!("/v1/projects/bad/reservations/{held_id}/commit"),
            js(json!({"bogus": true})),
            400,
            "invalid-request",
        ),
        (
            Method::PUT,
            "/v1/projects/bad/limits".into(),
            js(json!({"limits": {"cores": -7}})),
            400,
            "invalid-request",
        ),
        (
            Method::PUT,
            "/v1/projects/bad/limits".into(),
            js(json!({"limits": {"cores": 1}, "force": "yes"})),
            400,
            "invalid-request",
        ),
        (
            Method::PUT,
            "/v1/defaults".into(),
            js(json!({"limits": {"instances": null}})),
            400,
            "invalid-request",
        ),
        // Path ids.
        (
            Method::POST,
            "/v1/projects/bad%20id/reservations".into(),
            js(json!({"deltas": {"instances": 1}})),
            400,
            "invalid-request",
        ),
        (
            Method::GET,
            format!("/v1/projects/{}/limits", "p".repeat(129)),
            None,
            400,
            "invalid-request",
        ),
        (
            Method::GET,
            "/v1/projects/bad/reservations/not-a-uuid".into(),
            None,
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations/not-a-uuid/commit".into(),
            None,
            400,
            "invalid-request",
        ),
        (
            Method::POST,
            "/v1/projects/bad/reservations/123/release".into(),
            None,
            400,
            "invalid-request",
        ),
        // Query strings.
        (
            Method::GET,
            "/v1/projects/bad/usage?at=yesterday".into(),
            None,
            400,
            "invalid-request",
        ),
        (
            Method::GET,
            "/v1/projects/bad/usage?min_position=-1".into(),
            None,
            400,
            "invalid-request",
        ),
        (
            Method::GET,
            "/v1/projects/bad/usage?bogus=1".into(),
            None,
            400,
            "invalid-request",
        ),
        (
            Method::GET,
            "/v1/projects/bad/audit?limit=0".into(),
            None,
            400,
            "invalid-request",
        ),
        (
            Method::GET,
            "/v1/projects/bad/audit?limit=abc".into(),
            None,
            400,
            "invalid-request",
        ),
        (
            Method::GET,
            "/v1/projects/bad/audit?since=2026-13-01".into(),
            None,
            400,
            "invalid-request",
        ),
        (
            Method::GET,
            "/v1/projects/bad/audit?type=NoSuchEvent".into(),
            None,
            400,
            "invalid-request",
        ),
        (
            Method::GET,
            "/v1/projects/bad/audit?reservation=xyz".into(),
            None,
            400,
            "invalid-request",
        ),
        // Routes and methods.
        (
            Method::GET,
            "/v1/nothing-here".into(),
            None,
            404,
            "not-found",
        ),
        (Method::GET, "/v2/defaults".into(), None, 404, "not-found"),
        (
            Method::DELETE,
            "/v1/defaults".into(),
            None,
            405,
            "method-not-allowed",
        ),
        // GET lists a project's reservations (SPEC); DELETE is no method of it.
        (
            Method::DELETE,
            "/v1/projects/bad/reservations".into(),
            None,
            405,
            "method-not-allowed",
        ),
        (
            Method::PATCH,
            "/v1/projects/bad/limits".into(),
            js(json!({})),
            405,
            "method-not-allowed",
        ),
        (
            Method::POST,
            "/v1/admin/projections/nope/rebuild".into(),
            None,
            404,
            "not-found",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let answer = api.send(method.clone(), &path, body).await;
        assert_eq!(
            (answer.status, answer.code()),
            (status, code),
            "{method} {}: {answer:?}",
            path.chars().take(100).collect::<String>()
        );
        answer.assert_problem(status, code);
        let text = answer.body.to_string();
        for leak in ["sqlx", "SELECT", "panicked", "/src/", ".rs:"] {
            assert!(
                !text.contains(leak),
                "{method} {path}: leaks {leak:?}: {text}"
            );
        }
    }

    assert_eq!(api.get("/v1/defaults").await.body, defaults_before);
    assert_eq!(api.get("/v1/projects/bad/limits").await.body, limits_before);
    assert_eq!(
        api.get(&format!("/v1/projects/bad/reservations/{held_id}"))
            .await
            .body,
        reservation_before
    );
    // Exactly the one held instance counts: the last one of the limit is still free, then none.
    api.reserve("bad", json!({"instances": 1}))
        .await
        .assert_status(201);
    api.reserve("bad", json!({"instances": 1}))
        .await
        .assert_problem(403, "over-quota");
}

/// `/healthz`, `/openapi.json` and `/metrics`.
pub async fn service_rows(api: &Api) {
    let health = api.get("/healthz").await;
    assert_eq!(health.assert_status(200)["status"], "ok");
    assert_eq!(health.body["projections"], true);
    assert!(health.headers.get("x-request-id").is_some());

    let doc = api.get("/openapi.json").await;
    let doc = doc.assert_status(200);
    assert!(
        doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")),
        "{doc}"
    );
    for path in [
        "/v1/defaults",
        "/v1/projects/{p}/limits",
        "/v1/projects/{p}/reservations",
        "/v1/projects/{p}/reservations/{id}",
        "/v1/projects/{p}/reservations/{id}/commit",
        "/v1/projects/{p}/reservations/{id}/release",
        "/v1/projects/{p}/usage",
        "/v1/projects/{p}/audit",
        "/v1/admin/projections",
        "/v1/admin/projections/{name}/rebuild",
        "/healthz",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(doc["paths"].get(path).is_some(), "OpenAPI lacks {path}");
    }

    // Generate some traffic, then scrape.
    api.set_defaults(json!({"instances": 1})).await;
    api.reserve("metered", json!({"instances": 1}))
        .await
        .assert_status(201);
    api.reserve("metered", json!({"instances": 1})).await;
    let metrics = api.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.content_type.starts_with("text/plain"),
        "{}",
        metrics.content_type
    );
    let text = metrics.body.as_str().expect("metrics text").to_owned();
    for name in [
        "quota_http_requests_total",
        "quota_decisions_total",
        "quota_ledger_append_batches_total",
        "quota_ledger_conflicts_total",
        "quota_ledger_append_batch_size_mean",
        "quota_projection_lag",
    ] {
        assert!(text.contains(name), "metrics lack {name}:\n{text}");
    }
    assert!(text.contains(r#"outcome="over-quota""#), "{text}");
    assert!(
        text.contains(r#"route="/v1/projects/{p}/reservations""#),
        "{text}"
    );

    // A request id given by the client comes back.
    let echoed = api
        .get_with_header("/healthz", "x-request-id", "trace-me-42")
        .await;
    assert_eq!(
        echoed
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
        Some("trace-me-42")
    );
}

/// Auth: who may do what, with the tokens of `super::TOKENS`.
pub async fn auth_scoping(base: &str) {
    let admin = Api::new(base, Some("admin-secret-0123456789"));
    let auditor = Api::new(base, Some("auditor-secret-0123456789"));
    let acme = Api::new(base, Some("acme-secret-0123456789"));
    let anonymous = Api::new(base, None);
    let wrong = Api::new(base, Some("not-a-token"));

    // No token or an unknown one: 401 everywhere but the open endpoints.
    for api in [&anonymous, &wrong] {
        let answer = api.get("/v1/defaults").await;
        answer.assert_problem(401, "unauthorized");
        assert!(answer.headers.get("www-authenticate").is_some());
        api.reserve("acme", json!({"instances": 1}))
            .await
            .assert_problem(401, "unauthorized");
        api.get("/v1/projects/acme/limits")
            .await
            .assert_problem(401, "unauthorized");
        assert_eq!(api.get("/healthz").await.status, 200);
        assert_eq!(api.get("/openapi.json").await.status, 200);
        assert_eq!(api.get("/metrics").await.status, 200);
    }
    // A malformed Authorization header is a 401 too.
    anonymous
        .get_with_header("/v1/defaults", "authorization", "Basic YWRtaW46YWRtaW4=")
        .await
        .assert_problem(401, "unauthorized");

    // Admin: everything.
    admin
        .set_defaults(json!({"instances": 10, "cores": 20}))
        .await;
    admin
        .put(
            "/v1/projects/acme/limits",
            json!({"limits": {"instances": 5}}),
        )
        .await
        .assert_status(200);
    let held = admin.reserve("acme", json!({"instances": 1})).await;
    let admin_hold = id_of(&held);

    // A project token: reserve, commit, release and read its own project only.
    assert_eq!(acme.get("/v1/defaults").await.status, 200);
    let own = acme.reserve("acme", json!({"instances": 1})).await;
    let own_id = id_of(&own);
    acme.commit("acme", &own_id).await.assert_status(200);
    acme.release("acme", &own_id).await.assert_status(200);
    acme.release("acme", &admin_hold).await.assert_status(200);
    acme.get(&format!("/v1/projects/acme/reservations/{own_id}"))
        .await
        .assert_status(200);
    acme.get("/v1/projects/acme/limits")
        .await
        .assert_status(200);
    assert_ne!(acme.get("/v1/projects/acme/usage").await.status, 403);
    assert_ne!(acme.get("/v1/projects/acme/audit").await.status, 403);
    for answer in [
        acme.reserve("other", json!({"instances": 1})).await,
        acme.get("/v1/projects/other/limits").await,
        acme.get("/v1/projects/other/usage").await,
        acme.get("/v1/projects/other/audit").await,
        acme.get(&format!("/v1/projects/other/reservations/{own_id}"))
            .await,
        acme.commit("other", &own_id).await,
        acme.put(
            "/v1/projects/acme/limits",
            json!({"limits": {"instances": 50}}),
        )
        .await,
        acme.delete("/v1/projects/acme/limits").await,
        acme.put("/v1/defaults", json!({"limits": {"instances": 50}}))
            .await,
        acme.get("/v1/admin/projections").await,
        acme.post_empty("/v1/admin/projections/usage/rebuild").await,
        // Out of scope is refused before the body is even looked at.
        acme.send(
            Method::POST,
            "/v1/projects/other/reservations",
            Some(Body::Raw("garbage".into())),
        )
        .await,
    ] {
        answer.assert_problem(403, "forbidden");
    }

    // The auditor reads everything and writes nothing.
    auditor.get("/v1/defaults").await.assert_status(200);
    auditor
        .get("/v1/projects/acme/limits")
        .await
        .assert_status(200);
    auditor
        .get("/v1/projects/other/limits")
        .await
        .assert_status(200);
    auditor
        .get(&format!("/v1/projects/acme/reservations/{own_id}"))
        .await
        .assert_status(200);
    assert_ne!(auditor.get("/v1/projects/other/usage").await.status, 403);
    assert_ne!(auditor.get("/v1/projects/other/audit").await.status, 403);
    for answer in [
        auditor.reserve("acme", json!({"instances": 1})).await,
        auditor.commit("acme", &own_id).await,
        auditor.release("acme", &own_id).await,
        auditor
            .put(
                "/v1/projects/acme/limits",
                json!({"limits": {"instances": 1}}),
            )
            .await,
        auditor.delete("/v1/projects/acme/limits").await,
        auditor
            .put("/v1/defaults", json!({"limits": {"instances": 1}}))
            .await,
        auditor
            .post_empty("/v1/admin/projections/usage/rebuild")
            .await,
    ] {
        answer.assert_problem(403, "forbidden");
    }
    // Nothing the refused requests tried took effect.
    let limits = admin.get("/v1/projects/acme/limits").await;
    assert_eq!(limits.assert_status(200)["limits"]["instances"]["limit"], 5);
    assert_eq!(
        admin.get("/v1/defaults").await.body["limits"]["instances"],
        10
    );
    admin.delete("/v1/projects/acme/limits").await;
    assert_eq!(
        admin.get("/v1/projects/acme/limits").await.body["limits"]["instances"]["source"],
        "default"
    );
}

/// The tokens file used by [`auth_scoping`].
pub const TOKENS: &str = "# test tokens\n\
    admin-secret-0123456789 admin\n\
    auditor-secret-0123456789 auditor\n\
    acme-secret-0123456789 project:acme   # the acme tenant\n\
    other-secret-0123456789 project:other\n";
