//! End-to-end: `GET /v1/projects/{p}/usage/history` (SPEC) against a real server on SQLite and
//! PostgreSQL: every point equals `usage?at=` at its instant, the last is the state at `until`,
//! a hold that lapses with no event stops counting at its expiry, bad queries are 400 problems,
//! and a project token reads only its own project's history.

mod common;

use std::time::Duration;

use common::{next_millisecond, postgres_store, sqlite_store, tokens_file, Server, StoreUrl};
use serde_json::{json, Value};

const ADMIN: &str = "admin-token-0123456789";
const ACME: &str = "acme-token-0123456789ab";

fn id_of(answer: &Value) -> String {
    answer["reservation_id"].as_str().expect("id").to_owned()
}

async fn history_over_http(store: StoreUrl) {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens_file(dir.path(), &format!("{ADMIN} admin\n{ACME} project:acme\n"));
    let server = Server::start_with_tokens(&store, &tokens);
    let api = server.client_with_token(ADMIN);
    api.set_defaults(json!({"instances": 10, "cores": 20}))
        .await;
    // Each change waits for the next millisecond, so that each has a point of its own.
    next_millisecond().await;
    let committed = api
        .reserve("acme", json!({"instances": 2, "cores": 4}))
        .await;
    let committed_id = id_of(committed.assert_status(201));
    next_millisecond().await;
    api.commit("acme", &committed_id).await.assert_status(200);
    next_millisecond().await;
    // A hold that lapses after a second, with no event recording it before the reads below.
    let lapsing = api
        .post(
            "/v1/projects/acme/reservations",
            json!({"deltas": {"instances": 3}, "expires_in": 1}),
        )
        .await;
    lapsing.assert_status(201);
    next_millisecond().await;
    api.put(
        "/v1/projects/acme/limits",
        json!({"limits": {"instances": 6}}),
    )
    .await
    .assert_status(200);
    api.reserve("acme", json!({"instances": 9}))
        .await
        .assert_problem(403, "over-quota");
    tokio::time::sleep(Duration::from_millis(1300)).await;

    let history = api
        .get("/v1/projects/acme/usage/history?resource=instances")
        .await;
    let body = history.assert_status(200).clone();
    assert_eq!(
        (&body["project"], &body["resource"]),
        (&json!("acme"), &json!("instances"))
    );
    let points = body["points"].as_array().expect("points");
    let numbers = |p: &Value| {
        (
            p["in_use"].clone(),
            p["reserved"].clone(),
            p["limit"].clone(),
        )
    };
    let mut seen: Vec<_> = points.iter().map(numbers).collect();
    // The sweeper may record the lapse as an event too; it changes nothing.
    seen.dedup();
    // Reserved 2, committed, 3 held, the limit lowered to 6, the hold lapsed: nothing else.
    assert_eq!(
        seen,
        vec![
            (json!(0), json!(2), json!(10)),
            (json!(2), json!(0), json!(10)),
            (json!(2), json!(3), json!(10)),
            (json!(2), json!(3), json!(6)),
            (json!(2), json!(0), json!(6)),
        ],
        "{body}"
    );
    for point in points {
        let at = point["at"].as_str().expect("at");
        let then = api.get(&format!("/v1/projects/acme/usage?at={at}")).await;
        let then = &then.assert_status(200)["resources"]["instances"];
        assert_eq!(
            (&then["in_use"], &then["reserved"], &then["limit"]),
            (&point["in_use"], &point["reserved"], &point["limit"]),
            "at {at}"
        );
    }

    // Stepped: a point at since, every step, and until.
    let since = points[0]["at"].as_str().unwrap().replace('+', "%2B");
    let until = points.last().unwrap()["at"].as_str().unwrap().to_owned();
    let stepped = api
        .get(&format!(
            "/v1/projects/acme/usage/history?resource=cores&since={since}&until={until}&step=1"
        ))
        .await;
    let stepped = stepped.assert_status(200)["points"].clone();
    let stepped = stepped.as_array().unwrap();
    assert_eq!(
        stepped.first().unwrap()["at"].as_str(),
        Some(since.as_str())
    );
    assert_eq!(stepped.last().unwrap()["at"].as_str(), Some(until.as_str()));
    assert!(stepped.len() >= 2 && stepped.len() <= 4, "{stepped:?}");

    // Bad queries: each a 400 problem that says what is wrong.
    for (query, says) in [
        ("", "resource is required"),
        ("?resource=in%20stances", "resource="),
        ("?resource=cores&since=yesterday", "since="),
        ("?resource=cores&step=0", "step=0"),
        (
            "?resource=cores&since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z",
            "since",
        ),
        (
            "?resource=cores&since=2020-01-01T00:00:00Z&step=1",
            "1000 points",
        ),
        ("?resource=cores&colour=red", "colour"),
    ] {
        let answer = api
            .get(&format!("/v1/projects/acme/usage/history{query}"))
            .await;
        answer.assert_problem(400, "invalid-request");
        let detail = answer.body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(says), "{query}: {detail}");
    }

    // A project token reads its own project's history, not another's.
    let acme = server.client_with_token(ACME);
    acme.get("/v1/projects/acme/usage/history?resource=instances")
        .await
        .assert_status(200);
    acme.get("/v1/projects/other/usage/history?resource=instances")
        .await
        .assert_problem(403, "forbidden");
    server
        .client()
        .get("/v1/projects/acme/usage/history?resource=instances")
        .await
        .assert_problem(401, "unauthorized");
}

#[tokio::test]
async fn history_over_http_sqlite() {
    history_over_http(sqlite_store()).await;
}

#[tokio::test]
async fn history_over_http_postgres() {
    if let Some(store) = postgres_store().await {
        history_over_http(store).await;
    }
}
