//! End-to-end: the real `quota serve` over HTTP, on SQLite and on PostgreSQL. Covers the rows of
//! SPEC.md answered by the ledger, the seed burst, auth, bad inputs, the service endpoints and
//! process behaviour. The usage, audit and admin views are in `views.rs`.
//!
//! PostgreSQL tests need `QUOTA_TEST_POSTGRES_URL` and pass (skipped) without it.

mod common;

use common::{cli, json_of, postgres_store, scenarios, sqlite_store, Server, StoreUrl};

/// Runs `check` against a server on a fresh SQLite file.
macro_rules! on_sqlite {
    ($check:path) => {{
        let store = sqlite_store();
        let server = Server::start(&store);
        $check(&server.client()).await;
    }};
}

/// Runs `check` against a server on a fresh PostgreSQL schema, if configured.
macro_rules! on_postgres {
    ($check:path) => {{
        if let Some(store) = postgres_store().await {
            let server = Server::start(&store);
            $check(&server.client()).await;
        }
    }};
}

#[tokio::test]
async fn defaults_sqlite() {
    on_sqlite!(scenarios::defaults_rows);
}

#[tokio::test]
async fn defaults_postgres() {
    on_postgres!(scenarios::defaults_rows);
}

#[tokio::test]
async fn limits_sqlite() {
    on_sqlite!(scenarios::limits_rows);
}

#[tokio::test]
async fn limits_postgres() {
    on_postgres!(scenarios::limits_rows);
}

#[tokio::test]
async fn reservations_sqlite() {
    on_sqlite!(scenarios::reservation_rows);
}

#[tokio::test]
async fn reservations_postgres() {
    on_postgres!(scenarios::reservation_rows);
}

#[tokio::test]
async fn over_quota_sqlite() {
    on_sqlite!(scenarios::over_quota_row);
}

#[tokio::test]
async fn over_quota_postgres() {
    on_postgres!(scenarios::over_quota_row);
}

#[tokio::test]
async fn expiry_sqlite() {
    on_sqlite!(scenarios::expiry_row);
}

#[tokio::test]
async fn expiry_postgres() {
    on_postgres!(scenarios::expiry_row);
}

#[tokio::test]
async fn bad_inputs_sqlite() {
    on_sqlite!(scenarios::bad_inputs);
}

#[tokio::test]
async fn bad_inputs_postgres() {
    on_postgres!(scenarios::bad_inputs);
}

#[tokio::test]
async fn service_endpoints_sqlite() {
    on_sqlite!(scenarios::service_rows);
}

#[tokio::test]
async fn seed_burst_sqlite() {
    let store = sqlite_store();
    let server = Server::start(&store);
    scenarios::seed_burst(&[server.client()], "burst").await;
}

#[tokio::test]
async fn seed_burst_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let server = Server::start(&store);
    scenarios::seed_burst(&[server.client()], "burst").await;
}

/// Two `quota serve` processes on one PostgreSQL schema, requests spread over both.
#[tokio::test]
async fn seed_burst_two_nodes_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let first = Server::start(&store);
    let second = Server::start(&store);
    let apis = [first.client(), second.client()];
    scenarios::seed_burst(&apis, "burst-a").await;
    // Defaults set through one node are seen by the other (it refreshes them).
    apis[1].set_defaults(serde_json::json!({"gpus": 2})).await;
    let seen = apis[0]
        .reserve("burst-b", serde_json::json!({"gpus": 2}))
        .await;
    seen.assert_status(201);
    scenarios::seed_burst(&[apis[1].clone(), apis[0].clone()], "burst-c").await;
}

fn auth_server(store: &StoreUrl, dir: &tempfile::TempDir) -> Server {
    let tokens = common::tokens_file(dir.path(), scenarios::TOKENS);
    Server::start_with_tokens(store, &tokens)
}

#[tokio::test]
async fn auth_scoping_sqlite() {
    let dir = tempfile::tempdir().expect("folder");
    let store = sqlite_store();
    let server = auth_server(&store, &dir);
    scenarios::auth_scoping(&server.url).await;
    assert!(
        !server.log_text().contains("acme-secret"),
        "tokens never reach the log"
    );
}

#[tokio::test]
async fn auth_scoping_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let dir = tempfile::tempdir().expect("folder");
    let server = auth_server(&store, &dir);
    scenarios::auth_scoping(&server.url).await;
}

/// The load generator over HTTP sends its decisions on its own connections (bench::http1):
/// with an admin token, every decision is answered and the usage the server reports afterwards
/// matches what was acknowledged; the token never reaches the log.
#[tokio::test]
async fn the_bench_drives_a_server_with_a_token_over_http() {
    let dir = tempfile::tempdir().expect("folder");
    let store = sqlite_store();
    let server = auth_server(&store, &dir);
    let target = format!("{}/", server.url);
    let (ok, stdout, stderr) = cli(
        &server.url,
        [
            "bench",
            "--workload",
            "fleet",
            "--projects",
            "20",
            "--clients",
            "4",
            "--seconds",
            "1",
            "--target",
            &target,
            "--token",
            "admin-secret-0123456789",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    let report = json_of(&stdout);
    assert_eq!(report["via"], "http", "{report}");
    assert_eq!(report["verified"], true, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    assert!(report["boots"].as_u64().unwrap() > 0, "{report}");
    assert!(!server.log_text().contains("admin-secret"));

    let (ok, _, stderr) = cli(
        &server.url,
        [
            "bench",
            "--workload",
            "hot",
            "--seconds",
            "1",
            "--target",
            "https://127.0.0.1:1",
        ],
    )
    .await;
    assert!(!ok);
    assert!(stderr.contains("plain http://"), "{stderr}");
}

#[tokio::test]
async fn open_server_refuses_non_loopback_addresses() {
    let store = sqlite_store();
    let output = std::process::Command::new(common::BINARY)
        .args(["serve", "--listen", "0.0.0.0:0", "--store", &store.url])
        .env_remove("QUOTA_TOKENS")
        .output()
        .expect("run quota serve");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--tokens"), "{stderr}");
}

#[tokio::test]
async fn a_bad_tokens_file_stops_the_server_without_showing_tokens() {
    let dir = tempfile::tempdir().expect("folder");
    let tokens = common::tokens_file(dir.path(), "sekrit-value-0123456789 superuser\n");
    let store = sqlite_store();
    let output = std::process::Command::new(common::BINARY)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            &store.url,
            "--tokens",
        ])
        .arg(&tokens)
        .output()
        .expect("run quota serve");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("line 1"), "{stderr}");
    assert!(!stderr.contains("sekrit-value"), "{stderr}");
}

#[tokio::test]
async fn sigterm_shuts_down_gracefully_and_keeps_the_data() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(serde_json::json!({"instances": 3})).await;
    let held = api
        .reserve("durable", serde_json::json!({"instances": 2}))
        .await;
    let body = held.assert_status(201).clone();
    assert!(server.terminate(), "quota serve exits 0 on SIGTERM");

    let restarted = Server::start(&store);
    let api = restarted.client();
    let id = body["reservation_id"].as_str().expect("id");
    let again = api
        .get(&format!("/v1/projects/durable/reservations/{id}"))
        .await;
    assert_eq!(again.assert_status(200), &body);
    api.reserve("durable", serde_json::json!({"instances": 2}))
        .await
        .assert_problem(403, "over-quota");
}

#[tokio::test]
async fn the_default_store_is_a_file_in_the_working_directory() {
    let dir = tempfile::tempdir().expect("folder");
    let mut child = std::process::Command::new(common::BINARY)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env_remove("QUOTA_STORE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start quota serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !dir.path().join("quota.db").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(dir.path().join("quota.db").exists());
}

/// A refusal with one remedy says what to do (issue 17).
#[tokio::test]
async fn cli_refusals_say_what_to_do() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let url = server.url.clone();
    let (ok, _, err) = cli(&url, vec!["defaults", "set", "instances=5"]).await;
    assert!(ok, "{err}");
    let (ok, _, err) = cli(&url, vec!["reserve", "acme", "gpus=1"]).await;
    assert!(!ok);
    assert!(
        err.contains("unknown-resource") && err.contains("quota defaults set"),
        "{err}"
    );
    let (ok, _, err) = cli(&url, vec!["reserve", "acme", "instances=3"]).await;
    assert!(ok, "{err}");
    let (ok, _, err) = cli(&url, vec!["limits", "set", "acme", "instances=1"]).await;
    assert!(!ok);
    assert!(
        err.contains("limit-below-usage") && err.contains("--force"),
        "{err}"
    );
    let (ok, _, err) = cli(
        &url,
        vec!["limits", "set", "acme", "instances=1", "--force"],
    )
    .await;
    assert!(ok, "{err}");
}

#[tokio::test]
async fn cli_clients_and_projection_tools() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let url = server.url.clone();

    let (ok, out, err) = cli(
        &url,
        vec!["defaults", "set", "instances=2", "cores=8", "ram=-1"],
    )
    .await;
    assert!(ok, "{err}");
    assert!(
        out.contains("RESOURCE") && out.contains("instances"),
        "{out}"
    );

    let (ok, out, err) = cli(
        &url,
        vec![
            "--json",
            "reserve",
            "acme",
            "instances=1",
            "cores=2",
            "--actor",
            "cli-test",
        ],
    )
    .await;
    assert!(ok, "{err}");
    let reservation = json_of(&out);
    assert_eq!(reservation["status"], "held");
    let id = reservation["reservation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let id = id.as_str();

    let (ok, out, err) = cli(&url, vec!["commit", "acme", id]).await;
    assert!(ok, "{err}");
    assert!(out.contains("committed"), "{out}");

    let (ok, out, _) = cli(&url, vec!["reservation", "acme", id]).await;
    assert!(ok && out.contains("committed"), "{out}");

    // A refusal: exit 1, the problem on stderr.
    let (ok, _, err) = cli(&url, vec!["reserve", "acme", "instances=5"]).await;
    assert!(!ok);
    assert!(
        err.contains("over-quota (403)") && err.contains("overs"),
        "{err}"
    );
    let (ok, out, _) = cli(&url, vec!["--json", "reserve", "acme", "instances=5"]).await;
    assert!(!ok);
    assert_eq!(json_of(&out)["status"], 403, "--json prints the problem");

    let (ok, out, err) = cli(&url, vec!["limits", "set", "acme", "instances=1"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("instances"), "{out}");
    let (ok, out, _) = cli(&url, vec!["limits", "get", "acme"]).await;
    assert!(
        ok && out.contains("SOURCE") && out.contains("project"),
        "{out}"
    );
    let (ok, _, err) = cli(&url, vec!["limits", "reset", "acme"]).await;
    assert!(ok, "{err}");
    let (ok, out, _) = cli(&url, vec!["--json", "limits", "get", "acme"]).await;
    assert!(ok);
    assert_eq!(json_of(&out)["limits"]["instances"]["source"], "default");

    let (ok, out, err) = cli(&url, vec!["--json", "usage", "acme", "--min-position", "1"]).await;
    assert!(ok, "{err}");
    assert!(
        json_of(&out)["resources"]["cores"]["limit"].is_i64(),
        "{out}"
    );
    let (ok, out, err) = cli(&url, vec!["usage", "acme", "--at", "2000-01-01T00:00:00Z"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("IN_USE"), "{out}");

    let (ok, out, err) = cli(&url, vec!["audit", "acme", "--actor", "cli-test"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("ReservationRequested"), "{out}");
    let (ok, out, _) = cli(
        &url,
        vec!["--json", "audit", "acme", "--type", "ReservationDenied"],
    )
    .await;
    assert!(ok);
    assert_eq!(json_of(&out)["entries"].as_array().map(Vec::len), Some(2));

    let (ok, out, err) = cli(&url, vec!["projections", "status"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("usage") && out.contains("LAG"), "{out}");

    // Clear errors for bad input and an unreachable server.
    let (ok, _, err) = cli(&url, vec!["reserve", "acme", "instances"]).await;
    assert!(!ok && err.contains("RESOURCE=NUMBER"), "{err}");
    let (ok, _, err) = cli("http://127.0.0.1:9", vec!["defaults", "get"]).await;
    assert!(!ok && err.contains("cannot reach"), "{err}");

    // The projection tools open the store directly.
    assert!(server.terminate());
    let (ok, out, err) = cli(
        "http://127.0.0.1:9",
        vec!["projections", "verify", "--store", &store.url],
    )
    .await;
    assert!(ok, "verify: {out}{err}");

    // Damage the usage view behind the service's back: verify names it, rebuild repairs it.
    let pool = sqlx::SqlitePool::connect_with(sqlx::sqlite::SqliteConnectOptions::new().filename(
        projections::sqlite_views_path(std::path::Path::new(
            store.url.trim_start_matches("sqlite://"),
        )),
    ))
    .await
    .expect("open the views' database");
    let damaged = sqlx::query("UPDATE usage_in_use SET in_use = in_use + 7 WHERE project = 'acme'")
        .execute(&pool)
        .await
        .expect("damage the view");
    assert!(damaged.rows_affected() > 0);
    pool.close().await;
    let (ok, out, err) = cli(
        "http://127.0.0.1:9",
        vec!["projections", "verify", "--store", &store.url],
    )
    .await;
    assert!(!ok, "verify finds the damage: {out}");
    assert!(
        out.contains("acme") && err.contains("difference"),
        "{out}{err}"
    );
    let (ok, _, _) = cli(
        "http://127.0.0.1:9",
        vec![
            "projections",
            "verify",
            "--name",
            "audit",
            "--store",
            &store.url,
        ],
    )
    .await;
    assert!(ok, "the audit view is intact");

    let (ok, out, err) = cli(
        "http://127.0.0.1:9",
        vec!["projections", "rebuild", "--store", &store.url],
    )
    .await;
    assert!(ok, "rebuild: {out}{err}");
    assert!(out.contains("rebuilt"), "{out}");
    let (ok, out, err) = cli(
        "http://127.0.0.1:9",
        vec!["projections", "verify", "--store", &store.url],
    )
    .await;
    assert!(ok, "repaired: {out}{err}");
    let (ok, _, err) = cli(
        "http://127.0.0.1:9",
        vec![
            "projections",
            "rebuild",
            "--name",
            "nope",
            "--store",
            &store.url,
        ],
    )
    .await;
    assert!(!ok && err.contains("no projection named"), "{err}");
}

/// When the database fails under it, the service answers 503 problems that name no SQL, and
/// recovers nothing silently.
#[tokio::test]
async fn a_lost_database_is_a_503_without_sql() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(serde_json::json!({"instances": 5})).await;
    api.reserve("doomed", serde_json::json!({"instances": 1}))
        .await
        .assert_status(201);

    let (url, schema) = store.postgres.clone().expect("a PostgreSQL store");
    let pool = sqlx::PgPool::connect(&url).await.expect("connect");
    sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&pool)
        .await
        .expect("drop the schema");
    pool.close().await;

    for answer in [
        api.reserve("doomed", serde_json::json!({"instances": 1}))
            .await,
        api.get("/v1/projects/doomed/usage").await,
        api.get("/v1/projects/doomed/audit").await,
    ] {
        answer.assert_problem(503, "store-unavailable");
        assert!(answer.headers.get("retry-after").is_some(), "{answer:?}");
        let text = answer.body.to_string().to_lowercase();
        for leak in ["relation", "schema", "sql", "t_", "does not exist"] {
            assert!(!text.contains(leak), "leaks {leak:?}: {text}");
        }
    }
}
