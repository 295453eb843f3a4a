//! SPEC.md "Input and transport rules", the input half, on SQLite and PostgreSQL: free text
//! (`actor`, `request_id`) of 1-256 characters without control characters, JSON bodies that are
//! objects without duplicated keys, no unknown query parameter on any route, and
//! `Content-Type: application/json` on every body. Each refusal is a problem answered before
//! anything is decided: the store's head does not move.

mod common;

use common::{postgres_store, sqlite_store, store_head, Answer, Server, StoreUrl};
use reqwest::Method;
use serde_json::{json, Value};

/// Sends `body` as is, with the given content type (none if `None`).
async fn send_raw(
    base: &str,
    method: Method,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .body(body.to_owned());
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let response = request.send().await.expect("request reaches the server");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn code(body: &Value) -> &str {
    body["type"]
        .as_str()
        .and_then(|t| t.rsplit('/').next())
        .unwrap_or("")
}

/// Values every free-text field refuses.
fn bad_texts() -> Vec<String> {
    vec![
        "ev\u{1e}il".into(),
        "ev\u{1f}il".into(),
        "nul\u{0}".into(),
        "next\u{85}line".into(),
        "del\u{7f}".into(),
        "new\nline".into(),
        String::new(),
        "x".repeat(257),
    ]
}

fn id_of(answer: &Answer) -> String {
    answer.body["reservation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no reservation id in {answer:?}"))
        .to_owned()
}

async fn free_text_is_validated(server: &Server, store: &StoreUrl) {
    let api = server.client();
    api.set_defaults(json!({"instances": 100})).await;
    let held = id_of(&api.reserve("text", json!({"instances": 1})).await);
    let before = store_head(store).await;

    for field in ["actor", "request_id"] {
        for bad in bad_texts() {
            let writes: [(Method, String, Value); 6] = [
                (
                    Method::POST,
                    "/v1/projects/text/reservations".into(),
                    json!({"deltas": {"instances": 1}, field: bad}),
                ),
                (
                    Method::POST,
                    format!("/v1/projects/text/reservations/{held}/commit"),
                    json!({ field: bad }),
                ),
                (
                    Method::POST,
                    format!("/v1/projects/text/reservations/{held}/release"),
                    json!({ field: bad }),
                ),
                (
                    Method::PUT,
                    "/v1/defaults".into(),
                    json!({"limits": {"instances": 100}, field: bad}),
                ),
                (
                    Method::PUT,
                    "/v1/projects/text/limits".into(),
                    json!({"limits": {"instances": 50}, field: bad}),
                ),
                (
                    Method::DELETE,
                    "/v1/projects/text/limits".into(),
                    json!({ field: bad }),
                ),
            ];
            for (method, path, body) in writes {
                let answer = api
                    .send(method.clone(), &path, Some(common::Body::Json(body)))
                    .await;
                assert_eq!(
                    (answer.status, answer.code()),
                    (400, "invalid-request"),
                    "{method} {path} with {field}={:?}: {answer:?}",
                    bad.chars().take(20).collect::<String>()
                );
                assert!(
                    answer.body["detail"].as_str().unwrap_or("").contains(field),
                    "the detail names the field: {answer:?}"
                );
            }
        }
    }
    assert_eq!(
        store_head(store).await,
        before,
        "a refused request recorded events"
    );
    let reservation = api
        .get(&format!("/v1/projects/text/reservations/{held}"))
        .await;
    assert_eq!(reservation.body["status"], "held", "{reservation:?}");

    // Any other Unicode is text like any other, and is stored as sent.
    for good in [
        "a\u{2028}b",
        "🦀 crab",
        "用户",
        "zero\u{200b}width",
        &"x".repeat(256),
    ] {
        api.post(
            "/v1/projects/text/reservations",
            json!({"deltas": {"instances": 1}, "actor": good, "request_id": good}),
        )
        .await
        .assert_status(201);
    }
}

#[tokio::test]
async fn free_text_is_validated_sqlite() {
    let store = sqlite_store();
    let server = Server::start(&store);
    free_text_is_validated(&server, &store).await;
}

#[tokio::test]
async fn free_text_is_validated_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let server = Server::start(&store);
    free_text_is_validated(&server, &store).await;
}

async fn bodies_are_objects_without_duplicated_keys(server: &Server, store: &StoreUrl) {
    let api = server.client();
    api.set_defaults(json!({"instances": 100})).await;
    let held = id_of(&api.reserve("shape", json!({"instances": 1})).await);
    let before = store_head(store).await;
    let json_type = Some("application/json");
    let refused: [(Method, String, &str); 12] = [
        // serde's derives read a struct from a sequence of its fields in order.
        (
            Method::POST,
            "/v1/projects/shape/reservations".into(),
            r#"[{"instances":1},null,null,null,null]"#,
        ),
        (
            Method::POST,
            "/v1/projects/shape/reservations".into(),
            r#"[{"instances":1}]"#,
        ),
        (
            Method::POST,
            "/v1/projects/shape/reservations".into(),
            "null",
        ),
        (Method::POST, "/v1/projects/shape/reservations".into(), "1"),
        (
            Method::POST,
            "/v1/projects/shape/reservations".into(),
            r#"{"deltas":{"instances":1,"instances":7}}"#,
        ),
        (
            Method::POST,
            "/v1/projects/shape/reservations".into(),
            r#"{"deltas":{"instances":1},"deltas":{"instances":2}}"#,
        ),
        (
            Method::POST,
            "/v1/projects/shape/reservations".into(),
            r#"{"deltas":{"instances":1},"actor":"a","actor":"b"}"#,
        ),
        (
            Method::POST,
            format!("/v1/projects/shape/reservations/{held}/commit"),
            r#"[null,null]"#,
        ),
        (
            Method::POST,
            format!("/v1/projects/shape/reservations/{held}/release"),
            r#""actor""#,
        ),
        (
            Method::PUT,
            "/v1/defaults".into(),
            r#"{"limits":{"instances":100,"instances":1}}"#,
        ),
        (
            Method::PUT,
            "/v1/projects/shape/limits".into(),
            r#"{"limits":{"instances":5,"\u0069nstances":50}}"#,
        ),
        (Method::DELETE, "/v1/projects/shape/limits".into(), "[]"),
    ];
    for (method, path, body) in refused {
        let (status, answer) = send_raw(&server.url, method.clone(), &path, json_type, body).await;
        assert_eq!(
            (status, code(&answer)),
            (400, "invalid-request"),
            "{method} {path} {body}: {answer}"
        );
    }
    assert_eq!(
        store_head(store).await,
        before,
        "a refused body recorded events"
    );
}

#[tokio::test]
async fn bodies_are_objects_without_duplicated_keys_sqlite() {
    let store = sqlite_store();
    let server = Server::start(&store);
    bodies_are_objects_without_duplicated_keys(&server, &store).await;
}

#[tokio::test]
async fn bodies_are_objects_without_duplicated_keys_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let server = Server::start(&store);
    bodies_are_objects_without_duplicated_keys(&server, &store).await;
}

#[tokio::test]
async fn unknown_query_parameters_are_refused_on_every_route() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(json!({"instances": 100})).await;
    let held = id_of(&api.reserve("query", json!({"instances": 1})).await);
    let before = store_head(&store).await;

    // A misspelt `dry_run` must not become a real reserve.
    let reserve = api
        .post(
            "/v1/projects/query/reservations?dryrun=true",
            json!({"deltas": {"instances": 1}}),
        )
        .await;
    reserve.assert_problem(400, "invalid-request");
    assert!(
        reserve.body["detail"].as_str().unwrap().contains("dryrun"),
        "{reserve:?}"
    );
    api.post(
        "/v1/projects/query/reservations?dry_run=maybe",
        json!({"deltas": {"instances": 1}}),
    )
    .await
    .assert_problem(400, "invalid-request");
    api.post_empty(&format!(
        "/v1/projects/query/reservations/{held}/commit?force=1"
    ))
    .await
    .assert_problem(400, "invalid-request");
    api.put(
        "/v1/defaults?merge=false",
        json!({"limits": {"instances": 1}}),
    )
    .await
    .assert_problem(400, "invalid-request");
    api.delete("/v1/projects/query/limits?all")
        .await
        .assert_problem(400, "invalid-request");
    assert_eq!(
        store_head(&store).await,
        before,
        "a refused request recorded events"
    );

    for path in [
        "/v1/defaults?x=1",
        "/v1/projects/query/limits?verbose",
        "/v1/admin/projections?x=",
        "/healthz?probe=1",
        "/metrics?format=json",
        "/openapi.json?v=2",
        "/v1/projects/query/usage?min_position=0&junk=1",
        "/v1/projects/query/audit?actor=x&junk=1",
    ] {
        api.get(path).await.assert_problem(400, "invalid-request");
    }
    api.get(&format!("/v1/projects/query/reservations/{held}?a=b"))
        .await
        .assert_problem(400, "invalid-request");

    // The parameters a route declares still work, and an empty query string is no query.
    api.get("/v1/projects/query/usage?min_position=0")
        .await
        .assert_status(200);
    api.get("/v1/projects/query/audit?limit=5&type=ReservationRequested")
        .await
        .assert_status(200);
    api.get("/healthz?").await.assert_status(200);
}

#[tokio::test]
async fn bodies_must_say_they_are_json() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(json!({"instances": 100})).await;
    let held = id_of(&api.reserve("media", json!({"instances": 1})).await);
    let before = store_head(&store).await;
    let reserve = r#"{"deltas": {"instances": 1}}"#;
    let reservations = "/v1/projects/media/reservations";
    let commit = format!("/v1/projects/media/reservations/{held}/commit");

    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonx"),
        Some("application/json; charset=utf-16"),
    ] {
        let (status, answer) = send_raw(
            &server.url,
            Method::POST,
            reservations,
            content_type,
            reserve,
        )
        .await;
        assert_eq!(
            (status, code(&answer)),
            (415, "unsupported-media-type"),
            "{content_type:?}: {answer}"
        );
        assert_eq!(answer["status"], 415);
        let (status, answer) =
            send_raw(&server.url, Method::POST, &commit, content_type, "{}").await;
        assert_eq!((status, code(&answer)), (415, "unsupported-media-type"));
    }
    let (status, _) = send_raw(
        &server.url,
        Method::PUT,
        "/v1/defaults",
        Some("text/plain"),
        r#"{"limits": {"instances": 1}}"#,
    )
    .await;
    assert_eq!(status, 415);
    // A browser's simple request: text/plain with an empty body.
    let (status, _) = send_raw(&server.url, Method::POST, &commit, Some("text/plain"), "").await;
    assert_eq!(status, 415);
    assert_eq!(
        store_head(&store).await,
        before,
        "a refused request recorded events"
    );

    // JSON, with parameters and in any case.
    for content_type in [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON;Charset=\"UTF-8\"",
    ] {
        let (status, answer) = send_raw(
            &server.url,
            Method::POST,
            reservations,
            Some(content_type),
            reserve,
        )
        .await;
        assert_eq!(status, 201, "{content_type}: {answer}");
    }
    // No body and no content type: commit and release need none.
    api.commit("media", &held).await.assert_status(200);
    api.release("media", &held).await.assert_status(200);
}
