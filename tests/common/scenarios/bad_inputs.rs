//! Bad inputs: each is a 4xx problem+json, and nothing changes.

use reqwest::Method;
use serde_json::{json, Value};

use super::super::{Api, Body};
use super::id_of;

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
