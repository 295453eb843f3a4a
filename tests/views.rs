//! End-to-end: the rows of SPEC.md answered by the read side: usage (now, at a time, with
//! `min_position`), audit (filters, paging) and the admin projection endpoints, on SQLite and
//! PostgreSQL. Each row is its own test, so one failing view does not hide the others.

mod common;

use std::time::Duration;

use common::{execute_on_events, postgres_store, sqlite_store, Api, Server, StoreUrl};
use serde_json::{json, Value};

async fn server_on(store: Option<StoreUrl>) -> Option<(StoreUrl, Server)> {
    let store = store?;
    let server = Server::start(&store);
    Some((store, server))
}

/// A boot and a denial on `project`; returns (reserve answer, commit answer).
async fn boot(api: &Api, project: &str) -> (Value, Value) {
    api.set_defaults(json!({"instances": 2, "cores": 8, "ram": -1}))
        .await;
    let reserved = api
        .post(
            &format!("/v1/projects/{project}/reservations"),
            json!({"deltas": {"instances": 1, "cores": 2, "ram": 4096}, "actor": "alice", "request_id": "req-1"}),
        )
        .await;
    let reserved = reserved.assert_status(201).clone();
    let id = reserved["reservation_id"].as_str().expect("id").to_owned();
    let committed = api.commit(project, &id).await.assert_status(200).clone();
    api.reserve(project, json!({"instances": 5}))
        .await
        .assert_problem(403, "over-quota");
    (reserved, committed)
}

fn position(value: &Value) -> u64 {
    value["position"].as_u64().expect("position")
}

async fn usage_now(api: &Api) {
    let (_, committed) = boot(api, "acme").await;
    let held = api.reserve("acme", json!({"cores": 3})).await;
    let after = position(held.assert_status(201));
    let usage = api
        .get(&format!("/v1/projects/acme/usage?min_position={after}"))
        .await;
    let body = usage.assert_status(200);
    assert_eq!(body["project"], "acme");
    assert!(position(body) >= after);
    assert_eq!(
        body["resources"]["instances"],
        json!({"limit": 2, "in_use": 1, "reserved": 0, "headroom": 1})
    );
    assert_eq!(
        body["resources"]["cores"],
        json!({"limit": 8, "in_use": 2, "reserved": 3, "headroom": 3})
    );
    let ram = &body["resources"]["ram"];
    assert_eq!(
        (ram["limit"].clone(), ram["in_use"].clone()),
        (json!(-1), json!(4096))
    );
    assert!(
        ram.get("headroom").is_none_or(Value::is_null),
        "unlimited: {ram}"
    );
    assert!(position(&committed) <= position(body));

    // Without min_position a node still shows a client its own writes.
    let more = api.reserve("acme", json!({"cores": 1})).await;
    more.assert_status(201);
    let plain = api.get("/v1/projects/acme/usage").await;
    assert_eq!(
        plain.assert_status(200)["resources"]["cores"]["reserved"],
        4
    );
}

async fn usage_at_a_time(api: &Api) {
    api.set_defaults(json!({"instances": 5})).await;
    let first = api.reserve("history", json!({"instances": 1})).await;
    let id = first.body["reservation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    api.commit("history", &id).await.assert_status(200);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let between = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = api.reserve("history", json!({"instances": 2})).await;
    let id = second.body["reservation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let last = api.commit("history", &id).await;
    let last = position(last.assert_status(200));

    let then = api
        .get(&format!(
            "/v1/projects/history/usage?at={between}&min_position={last}"
        ))
        .await;
    assert_eq!(
        then.assert_status(200)["resources"]["instances"]["in_use"],
        1
    );
    let now = api
        .get(&format!("/v1/projects/history/usage?min_position={last}"))
        .await;
    assert_eq!(
        now.assert_status(200)["resources"]["instances"]["in_use"],
        3
    );
}

/// A position no write has answered is refused at once (issue 17, item 6), as SPEC's 503
/// `not-caught-up`, with the log's head as `position` and a detail that says so.
async fn min_position_too_far(api: &Api) {
    api.set_defaults(json!({"instances": 2})).await;
    let asked = std::time::Instant::now();
    for path in [
        "/v1/projects/acme/usage?min_position=999999999",
        "/v1/projects/acme/audit?min_position=999999999",
        "/v1/projects/acme/reservations?min_position=999999999",
    ] {
        let answer = api.get(path).await;
        answer.assert_problem(503, "not-caught-up");
        assert!(answer.headers.get("retry-after").is_some());
        let problem = &answer.body;
        assert_eq!(problem["min_position"], 999999999);
        assert!(problem["position"].as_u64().is_some_and(|p| p < 999999999));
        let detail = problem["detail"].as_str().expect("detail");
        assert!(detail.contains("the log ends at"), "{detail}");
    }
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "refused at once, not after the 5 s wait: {:?}",
        asked.elapsed()
    );
}

/// The defaults' own audit (issue 17): each change with its before and after, filtered and
/// paged like a project's.
async fn defaults_audit(api: &Api) {
    api.set_defaults(serde_json::json!({"instances": 10, "cores": 8}))
        .await;
    let set = api
        .put(
            "/v1/defaults",
            serde_json::json!({"limits": {"instances": 4}, "actor": "ops-ann"}),
        )
        .await;
    set.assert_status(200);
    // No position on a defaults answer: the node's wait for its own last write is enough.
    let page = api.get("/v1/defaults/audit").await;
    let body = page.assert_status(200);
    let entries = body["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 2, "{body}");
    assert!(
        entries.iter().all(|e| e["type"] == "DefaultLimitsSet"),
        "{body}"
    );
    let last = &entries[1];
    assert_eq!(last["actor"], "ops-ann");
    assert_eq!(last["before"], serde_json::json!({"instances": 10}));
    assert_eq!(last["after"], serde_json::json!({"instances": 4}));
    assert!(body["next"].is_null());
    let first = api.get("/v1/defaults/audit?limit=1").await;
    let first = first.assert_status(200);
    assert_eq!(first["entries"].as_array().map(Vec::len), Some(1));
    assert!(first["next"].is_string(), "{first}");
    let denied = api.get("/v1/defaults/audit?type=ReservationDenied").await;
    assert_eq!(denied.assert_status(200)["entries"], serde_json::json!([]));
    api.get("/v1/defaults/audit?dry_run=true")
        .await
        .assert_problem(400, "invalid-request");
}

/// `GET /v1/projects/{p}/reservations` (issue 17): each reservation as `GET …/{id}` answers
/// it, filtered by status and age, paged; bad parameters are 400s.
async fn reservation_list(api: &Api) {
    let (reserved, committed) = boot(api, "listed").await;
    let held = api.reserve("listed", json!({"cores": 1})).await;
    let held = held.assert_status(201).clone();
    let path = "/v1/projects/listed/reservations";
    let all = api
        .get(&format!("{path}?min_position={}", position(&held)))
        .await;
    let all = all.assert_status(200);
    let listed = all["reservations"].as_array().expect("reservations");
    assert_eq!(listed.len(), 2, "{all}");
    assert!(all["next"].is_null());
    for (listed, answer) in listed.iter().zip([&committed, &held]) {
        let id = answer["reservation_id"].as_str().expect("id");
        let one = api.get(&format!("{path}/{id}")).await;
        assert_eq!(listed, one.assert_status(200), "as GET {path}/{id} answers");
    }
    assert_eq!(listed[0]["reservation_id"], reserved["reservation_id"]);
    let only = |status: &str| format!("{path}?status={status}");
    for (status, expected) in [("held", &held), ("committed", &committed)] {
        let page = api.get(&only(status)).await;
        let page = page.assert_status(200);
        assert_eq!(page["reservations"], json!([expected]), "{status}: {page}");
    }
    let released = api.get(&only("released")).await;
    assert_eq!(released.assert_status(200)["reservations"], json!([]));
    let before_any = api
        .get(&format!("{path}?older_than=2000-01-01T00:00:00Z"))
        .await;
    assert_eq!(before_any.assert_status(200)["reservations"], json!([]));
    let first = api.get(&format!("{path}?limit=1")).await;
    let first = first.assert_status(200).clone();
    let next = first["next"].as_str().expect("a next page");
    let second = api.get(&format!("{path}?limit=1&cursor={next}")).await;
    let second = second.assert_status(200);
    assert_eq!(second["reservations"], json!([held]));
    assert!(second["next"].is_null());
    for bad in [
        "status=expired",
        "limit=0",
        "limit=1001",
        "older_than=yesterday",
        "user=no%20spaces",
        "cursor=abc",
        "dry_run=true",
    ] {
        api.get(&format!("{path}?{bad}"))
            .await
            .assert_problem(400, "invalid-request");
    }
    // POST on the same path reads its own query (`dry_run`) and refuses the list's.
    api.post(
        &format!("{path}?status=held"),
        json!({"deltas": {"cores": 1}}),
    )
    .await
    .assert_problem(400, "invalid-request");
}

async fn audit_trail(api: &Api) {
    let (reserved, committed) = boot(api, "audited").await;
    let id = reserved["reservation_id"].as_str().expect("id").to_owned();
    let after = position(&committed) + 1;
    let page = api
        .get(&format!("/v1/projects/audited/audit?min_position={after}"))
        .await;
    let body = page.assert_status(200);
    let entries = body["entries"].as_array().expect("entries");
    let types: Vec<&str> = entries.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        types,
        [
            "ReservationRequested",
            "ReservationCommitted",
            "ReservationDenied"
        ],
        "{body}"
    );
    let requested = &entries[0];
    for field in [
        "position",
        "version",
        "at",
        "type",
        "reservation_id",
        "deltas",
        "actor",
        "request_id",
        "reason",
        "usage_after",
    ] {
        assert!(
            requested.get(field).is_some(),
            "audit entries have {field}: {requested}"
        );
    }
    assert_eq!(requested["reservation_id"], id.as_str());
    assert_eq!(requested["actor"], "alice");
    assert_eq!(requested["request_id"], "req-1");
    assert_eq!(
        requested["deltas"],
        json!({"instances": 1, "cores": 2, "ram": 4096})
    );
    assert_eq!(requested["version"], 0);
    assert_eq!(requested["position"], reserved["position"]);
    assert_eq!(
        entries[1]["usage_after"]["instances"],
        json!({"in_use": 1, "reserved": 0})
    );

    // Filters.
    let denied = api
        .get("/v1/projects/audited/audit?type=ReservationDenied")
        .await;
    let denied = denied.assert_status(200)["entries"]
        .as_array()
        .expect("entries")
        .clone();
    assert_eq!(denied.len(), 1);
    let by_id = api
        .get(&format!("/v1/projects/audited/audit?reservation={id}"))
        .await;
    assert_eq!(
        by_id.assert_status(200)["entries"].as_array().map(Vec::len),
        Some(2)
    );
    let by_actor = api.get("/v1/projects/audited/audit?actor=alice").await;
    assert_eq!(
        by_actor.assert_status(200)["entries"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let future = api
        .get("/v1/projects/audited/audit?since=2999-01-01T00:00:00Z")
        .await;
    assert_eq!(future.assert_status(200)["entries"], json!([]));
    let past = api
        .get("/v1/projects/audited/audit?until=2000-01-01T00:00:00Z")
        .await;
    assert_eq!(past.assert_status(200)["entries"], json!([]));

    // Paging: two entries a page, following `next`.
    let mut seen = vec![];
    let mut path = "/v1/projects/audited/audit?limit=2".to_owned();
    loop {
        let page = api.get(&path).await;
        let body = page.assert_status(200).clone();
        let entries = body["entries"].as_array().expect("entries");
        assert!(entries.len() <= 2);
        seen.extend(entries.iter().map(position));
        match body["next"].as_str() {
            Some(next) => path = format!("/v1/projects/audited/audit?limit=2&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 3);
    assert!(seen.windows(2).all(|w| w[0] < w[1]));
    api.get("/v1/projects/audited/audit?cursor=garbage!")
        .await
        .assert_problem(400, "invalid-request");
}

async fn admin_projections(api: &Api) {
    let (_, committed) = boot(api, "admin").await;
    let wanted = position(&committed);
    api.get(&format!("/v1/projects/admin/usage?min_position={wanted}"))
        .await
        .assert_status(200);
    let list = api.get("/v1/admin/projections").await;
    let views = list.assert_status(200).as_array().expect("list").clone();
    let mut names: Vec<&str> = views.iter().filter_map(|v| v["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["audit", "usage"]);
    for view in &views {
        let (position, head, lag) = (
            view["position"].as_u64().expect("position"),
            view["head"].as_u64().expect("head"),
            view["lag"].as_u64().expect("lag"),
        );
        assert!(
            head >= wanted && position <= head && lag == head - position,
            "{view}"
        );
    }

    let before = api.get("/v1/projects/admin/usage").await.body;
    let accepted = api.post_empty("/v1/admin/projections/usage/rebuild").await;
    assert_eq!(accepted.status, 202, "{accepted:?}");
    // No downtime: reads keep answering during and after the rebuild, with the same result.
    for _ in 0..20 {
        let during = api.get("/v1/projects/admin/usage").await;
        assert_eq!(during.assert_status(200)["resources"], before["resources"]);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(
        api.post_empty("/v1/admin/projections/audit/rebuild")
            .await
            .status,
        202
    );
    api.post_empty("/v1/admin/projections/nope/rebuild")
        .await
        .assert_problem(404, "not-found");
}

macro_rules! view_tests {
    ($check:ident, $sqlite:ident, $postgres:ident) => {
        #[tokio::test]
        async fn $sqlite() {
            if let Some((_store, server)) = server_on(Some(sqlite_store())).await {
                $check(&server.client()).await;
            }
        }

        #[tokio::test]
        async fn $postgres() {
            if let Some((_store, server)) = server_on(postgres_store().await).await {
                $check(&server.client()).await;
            }
        }
    };
}

view_tests!(usage_now, usage_sqlite, usage_postgres);
view_tests!(usage_at_a_time, usage_at_sqlite, usage_at_postgres);
view_tests!(
    min_position_too_far,
    min_position_sqlite,
    min_position_postgres
);
view_tests!(audit_trail, audit_sqlite, audit_postgres);
view_tests!(
    reservation_list,
    reservation_list_sqlite,
    reservation_list_postgres
);
view_tests!(
    defaults_audit,
    defaults_audit_sqlite,
    defaults_audit_postgres
);
view_tests!(
    admin_projections,
    admin_projections_sqlite,
    admin_projections_postgres
);

/// Polls `/healthz` until its `status` is `wanted`; returns the last answer.
async fn health_until(api: &Api, wanted: &str, within: Duration) -> Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        let health = api.get("/healthz").await.assert_status(200).clone();
        if health["status"] == wanted || std::time::Instant::now() > deadline {
            return health;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An event the views cannot read (a type from a newer build, say) is never passed over: the
/// views stop before it and retry, `/healthz` says which views are degraded and why (still
/// 200), `/metrics` counts the failures; once the event reads, the views go on from it.
async fn an_unreadable_event_degrades_the_views(store: StoreUrl) {
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(json!({"instances": 10})).await;
    let early = api.reserve("early", json!({"instances": 1})).await;
    let early = position(early.assert_status(201));
    api.get(&format!("/v1/projects/early/usage?min_position={early}"))
        .await
        .assert_status(200);
    let health = health_until(&api, "ok", Duration::from_secs(5)).await;
    assert_eq!(health["views"], json!([]), "{health}");
    let late = common::stall_the_views(&store, &api, "late").await;
    let bad = late - 1;

    let health = health_until(&api, "degraded", Duration::from_secs(5)).await;
    assert_eq!(health["status"], "degraded", "{health}");
    let mut degraded: Vec<&str> = health["views"]
        .as_array()
        .expect("views")
        .iter()
        .map(|view| {
            let reason = view["reason"].as_str().expect("reason");
            assert!(reason.contains(&format!("position {bad}")), "{view}");
            view["name"].as_str().expect("name")
        })
        .collect();
    degraded.sort_unstable();
    assert_eq!(degraded, ["audit", "usage"]);
    let views = api.get("/v1/admin/projections").await;
    for view in views.assert_status(200).as_array().expect("list") {
        assert_eq!(
            view["position"].as_u64(),
            Some(bad - 1),
            "up to it, not past: {view}"
        );
    }
    let metrics = api.get("/metrics").await;
    let failures: f64 = metrics
        .body
        .as_str()
        .expect("Prometheus text")
        .lines()
        .find_map(|line| line.strip_prefix("quota_projection_failures_total{view=\"usage\"} "))
        .and_then(|value| value.trim().parse().ok())
        .expect("the failure counter");
    assert!(failures >= 1.0, "{failures}");

    execute_on_events(
        &store,
        &format!("UPDATE events SET event_type = 'LimitsReset' WHERE position = {bad}"),
    )
    .await;
    let health = health_until(&api, "ok", Duration::from_secs(40)).await;
    assert_eq!(health["status"], "ok", "{health}");
    api.get(&format!("/v1/projects/late/usage?min_position={late}"))
        .await
        .assert_status(200);
    let audit = api.get("/v1/projects/strange/audit").await;
    let entries = audit.assert_status(200)["entries"].clone();
    assert_eq!(entries[0]["position"].as_u64(), Some(bad), "{entries}");
}

#[tokio::test]
async fn an_unreadable_event_degrades_the_views_sqlite() {
    an_unreadable_event_degrades_the_views(sqlite_store()).await;
}

#[tokio::test]
async fn an_unreadable_event_degrades_the_views_postgres() {
    if let Some(store) = postgres_store().await {
        an_unreadable_event_degrades_the_views(store).await;
    }
}

/// Two nodes on one PostgreSQL schema: a write through one is read through the other with
/// `min_position`, and both report the same usage.
#[tokio::test]
async fn two_nodes_read_each_others_writes_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let first = Server::start(&store);
    let second = Server::start(&store);
    let (a, b) = (first.client(), second.client());
    a.set_defaults(json!({"instances": 10})).await;
    let held = a.reserve("shared", json!({"instances": 3})).await;
    let wanted = position(held.assert_status(201));
    let id = held.body["reservation_id"].as_str().expect("id").to_owned();
    let committed = b.commit("shared", &id).await;
    let wanted = wanted.max(position(committed.assert_status(200)));
    for api in [&a, &b] {
        let usage = api
            .get(&format!("/v1/projects/shared/usage?min_position={wanted}"))
            .await;
        assert_eq!(
            usage.assert_status(200)["resources"]["instances"],
            json!({"limit": 10, "in_use": 3, "reserved": 0, "headroom": 7})
        );
    }
}

/// `GET /v1/projects` (issue 20's project list): every project with an event, in id order,
/// by prefix, paged; a project token sees only its own project, and no cursor to others.
async fn project_list(store: StoreUrl) {
    let dir = tempfile::tempdir().expect("dir");
    let tokens = common::tokens_file(
        dir.path(),
        "admin-token-0123456789 admin\nauditor-token-0123456789 auditor\nbeta-token-0123456789ab project:beta\n",
    );
    let server = Server::start_with_tokens(&store, &tokens);
    let admin = Api::new(&server.url, Some("admin-token-0123456789"));
    admin.set_defaults(json!({"instances": 10})).await;
    let mut last = 0;
    for project in ["beta", "acme", "acme-dev", "zeta"] {
        let held = admin.reserve(project, json!({"instances": 1})).await;
        last = position(held.assert_status(201));
    }
    let all = admin
        .get(&format!("/v1/projects?min_position={last}"))
        .await;
    let all = all.assert_status(200);
    let names: Vec<&str> = all["projects"]
        .as_array()
        .expect("projects")
        .iter()
        .map(|p| p["project"].as_str().expect("id"))
        .collect();
    assert_eq!(names, ["acme", "acme-dev", "beta", "zeta"]);
    assert_eq!(all["projects"][0]["parent"], Value::Null);
    assert!(all["next"].is_null());
    let acme = admin.get("/v1/projects?prefix=acme&limit=1").await;
    let acme = acme.assert_status(200).clone();
    assert_eq!(
        acme["projects"],
        json!([{"project": "acme", "parent": null}])
    );
    let next = acme["next"].as_str().expect("a next page");
    let rest = admin
        .get(&format!("/v1/projects?prefix=acme&limit=1&cursor={next}"))
        .await;
    assert_eq!(
        rest.assert_status(200)["projects"],
        json!([{"project": "acme-dev", "parent": null}])
    );
    let auditor = Api::new(&server.url, Some("auditor-token-0123456789"));
    let seen = auditor.get("/v1/projects").await;
    assert_eq!(
        seen.assert_status(200)["projects"].as_array().map(Vec::len),
        Some(4)
    );
    let beta = Api::new(&server.url, Some("beta-token-0123456789ab"));
    let own = beta.get("/v1/projects?limit=1").await;
    let own = own.assert_status(200);
    assert_eq!(
        own["projects"],
        json!([{"project": "beta", "parent": null}])
    );
    assert!(
        own["next"].is_null(),
        "no cursor past its own project: {own}"
    );
    assert_eq!(
        beta.get("/v1/projects?prefix=a").await.assert_status(200)["projects"],
        json!([])
    );
    assert_eq!(
        admin
            .get("/v1/projects?parent=acme")
            .await
            .assert_status(200)["projects"],
        json!([])
    );
    for bad in [
        "prefix=a%20b",
        "limit=0",
        "limit=1001",
        "cursor=zz",
        "parent=%24x",
        "x=1",
    ] {
        admin
            .get(&format!("/v1/projects?{bad}"))
            .await
            .assert_problem(400, "invalid-request");
    }
    Api::new(&server.url, None)
        .get("/v1/projects")
        .await
        .assert_problem(401, "unauthorized");
}

#[tokio::test]
async fn project_list_sqlite() {
    project_list(sqlite_store()).await;
}

#[tokio::test]
async fn project_list_postgres() {
    if let Some(store) = postgres_store().await {
        project_list(store).await;
    }
}
