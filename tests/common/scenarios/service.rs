//! The service endpoints: health, OpenAPI and metrics.

use serde_json::json;

use super::super::Api;

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
