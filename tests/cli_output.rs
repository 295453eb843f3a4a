//! What the `quota` command line prints (issue 17, items 8 and 10), on the real binary against a
//! real `quota serve`: `audit --all` as one table or one JSON array, `unlimited` in every table,
//! `expires_at` only for a hold, hints instead of bare headers, `--json limits reset`, which views
//! `verify` compared, and the server's log lines.

mod common;

use common::{cli, json_of, next_millisecond, quota, sqlite_store, Server};
use serde_json::{json, Value};

/// The command's stdout, after checking that it succeeded.
async fn ok_out(url: &str, args: &[&str]) -> String {
    let (ok, out, err) = cli(url, args).await;
    assert!(ok, "quota {args:?} failed: {out}{err}");
    out
}

#[tokio::test]
async fn audit_all_prints_one_table_or_one_json_array() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let api = server.client();
    let url = server.url.clone();
    api.set_defaults(json!({"instances": 100})).await;
    for _ in 0..6 {
        api.reserve("acme", json!({"instances": 1}))
            .await
            .assert_status(201);
    }
    let everything = json_of(&ok_out(&url, &["--json", "audit", "acme", "--limit", "1000"]).await);
    let positions: Vec<&Value> = everything["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| &e["position"])
        .collect();
    assert_eq!(positions.len(), 6, "{everything}");

    // One page without --all: unchanged, with the cursor of the next.
    let page = ok_out(&url, &["audit", "acme", "--limit", "2"]).await;
    assert_eq!(page.matches("POSITION").count(), 1, "{page}");
    assert!(page.contains("(more: --cursor "), "{page}");
    let page = json_of(&ok_out(&url, &["--json", "audit", "acme", "--limit", "2"]).await);
    assert_eq!(page["entries"].as_array().map(Vec::len), Some(2), "{page}");
    assert!(page["next"].is_string(), "{page}");

    // --all: one header, a row per entry of every page, nothing more to follow.
    let table = ok_out(&url, &["audit", "acme", "--limit", "2", "--all"]).await;
    assert_eq!(table.matches("POSITION").count(), 1, "one header: {table}");
    assert!(!table.contains("(more"), "{table}");
    assert_eq!(
        table.trim_end().lines().count(),
        positions.len() + 1,
        "{table}"
    );

    // --all --json: one array of every entry, in order.
    let all = json_of(&ok_out(&url, &["--json", "audit", "acme", "--limit", "2", "--all"]).await);
    let all_positions: Vec<&Value> = all
        .as_array()
        .unwrap_or_else(|| panic!("one JSON array: {all}"))
        .iter()
        .map(|e| &e["position"])
        .collect();
    assert_eq!(all_positions, positions);
}

#[tokio::test]
async fn tables_print_unlimited_and_hints_where_json_keeps_the_server_answer() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let url = server.url.clone();

    // Nothing yet: a hint, not a bare header.
    let empty = ok_out(&url, &["defaults", "get"]).await;
    assert!(
        empty.contains("no defaults yet") && empty.contains("quota defaults set"),
        "{empty}"
    );
    assert!(!empty.contains("RESOURCE"), "{empty}");
    assert_eq!(
        json_of(&ok_out(&url, &["--json", "defaults", "get"]).await),
        json!({"limits": {}})
    );
    let before = ok_out(&url, &["usage", "acme", "--at", "2000-01-01T00:00:00Z"]).await;
    assert!(
        before.contains("no usage at 2000-01-01T00:00:00Z"),
        "{before}"
    );

    // -1 reads `unlimited` in every table; --json keeps -1.
    let set = ok_out(&url, &["defaults", "set", "instances=2", "ram=-1"]).await;
    let got = ok_out(&url, &["defaults", "get"]).await;
    for table in [&set, &got] {
        assert!(
            table.contains("unlimited") && !table.contains("-1"),
            "{table}"
        );
    }
    let json = json_of(&ok_out(&url, &["--json", "defaults", "get"]).await);
    assert_eq!(json["limits"]["ram"], -1);

    let set = ok_out(&url, &["limits", "set", "acme", "instances=-1"]).await;
    let got = ok_out(&url, &["limits", "get", "acme"]).await;
    for table in [&set, &got] {
        assert!(
            table.contains("unlimited") && !table.contains("-1"),
            "{table}"
        );
    }
    let json = json_of(&ok_out(&url, &["--json", "limits", "get", "acme"]).await);
    assert_eq!(json["limits"]["instances"]["limit"], -1);
    assert_eq!(json["limits"]["instances"]["source"], "project");

    // The reset answers 204: --json prints the limits now in effect, as `limits get` would.
    let reset = json_of(&ok_out(&url, &["--json", "limits", "reset", "acme"]).await);
    assert_eq!(reset["project"], "acme", "{reset}");
    assert_eq!(reset["limits"]["instances"]["limit"], 2, "{reset}");
    assert_eq!(reset["limits"]["instances"]["source"], "default", "{reset}");
    let reset = ok_out(&url, &["limits", "reset", "acme"]).await;
    assert!(reset.contains("back on the default limits"), "{reset}");
}

#[tokio::test]
async fn expires_at_shows_only_while_a_reservation_is_held() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let url = server.url.clone();
    ok_out(&url, &["defaults", "set", "instances=10"]).await;

    let held = ok_out(&url, &["reserve", "acme", "instances=1"]).await;
    assert!(held.contains("expires_at"), "{held}");
    let id = held
        .lines()
        .find_map(|l| l.strip_prefix("reservation"))
        .map(|rest| rest.trim().to_owned())
        .unwrap_or_else(|| panic!("no id: {held}"));
    let committed = ok_out(&url, &["commit", "acme", &id]).await;
    assert!(committed.contains("committed"), "{committed}");
    assert!(!committed.contains("expires_at"), "{committed}");
    let shown = ok_out(&url, &["reservation", "acme", &id]).await;
    assert!(!shown.contains("expires_at"), "{shown}");
    let json = json_of(&ok_out(&url, &["--json", "reservation", "acme", &id]).await);
    assert!(json["expires_at"].is_string(), "--json unchanged: {json}");

    let released = ok_out(&url, &["release", "acme", &id]).await;
    assert!(released.contains("released"), "{released}");
    assert!(!released.contains("expires_at"), "{released}");
}

#[tokio::test]
async fn verify_says_which_views_it_compared() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let url = server.url.clone();
    ok_out(&url, &["defaults", "set", "instances=10"]).await;
    let held = json_of(&ok_out(&url, &["--json", "reserve", "acme", "instances=1"]).await);
    let id = held["reservation_id"].as_str().expect("id");
    ok_out(&url, &["commit", "acme", id]).await;
    ok_out(&url, &["usage", "acme", "--min-position", "3"]).await;
    assert!(server.terminate());
    let offline = "http://127.0.0.1:9";
    let verify = |name: Option<&'static str>, json: bool| {
        let mut args = vec![];
        if json {
            args.push("--json");
        }
        args.extend(["projections", "verify", "--store", store.url.as_str()]);
        if let Some(name) = name {
            args.extend(["--name", name]);
        }
        quota(offline, &args)
    };

    let (ok, out, err) = verify(None, false);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("the usage and audit views match the events"),
        "{out}"
    );

    // Damage the usage view: the audit view alone still matches, and says it is the audit view.
    let views_path = projections::sqlite_views_path(std::path::Path::new(
        store.url.trim_start_matches("sqlite://"),
    ));
    let pool = sqlx::SqlitePool::connect_with(
        sqlx::sqlite::SqliteConnectOptions::new().filename(views_path),
    )
    .await
    .expect("open the views' database");
    let damaged = sqlx::query("UPDATE usage_in_use SET in_use = in_use + 7 WHERE project = 'acme'")
        .execute(&pool)
        .await
        .expect("damage the view");
    assert!(damaged.rows_affected() > 0);
    pool.close().await;

    let (ok, out, err) = verify(Some("audit"), false);
    assert!(ok, "{out}{err}");
    assert!(out.contains("the audit view matches the events"), "{out}");
    assert!(!out.contains("views match"), "{out}");
    let (ok, out, err) = verify(Some("audit"), true);
    assert!(ok, "{out}{err}");
    assert_eq!(json_of(&out), json!([]), "only the audit view was compared");

    let (ok, out, err) = verify(None, true);
    assert!(!ok, "the usage view differs: {out}");
    let report = json_of(&out);
    let differences = report.as_array().expect("an array of differences");
    assert!(
        !differences.is_empty() && differences.iter().all(|d| d["view"] == "usage"),
        "{report}"
    );
    assert!(err.contains("usage and audit views"), "{err}");
}

#[tokio::test]
async fn the_server_logs_milliseconds_with_three_decimals() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(json!({"instances": 10})).await;
    for _ in 0..5 {
        api.get("/v1/defaults").await.assert_status(200);
    }
    let log = server.log_text();
    let values: Vec<&str> = log
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("ms="))
        .collect();
    assert!(values.len() >= 6, "{log}");
    for value in values {
        assert!(value.parse::<f64>().is_ok(), "a number: {value}");
        let decimals = value.split_once('.').map_or(0, |(_, d)| d.len());
        assert!(decimals <= 3, "ms={value}");
    }
}

/// `quota audit --defaults`: the defaults' own audit (issue 17).
#[tokio::test]
async fn audit_defaults_prints_the_defaults_history() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let url = server.url.clone();
    ok_out(&url, &["defaults", "set", "instances=10"]).await;
    ok_out(&url, &["defaults", "set", "instances=4"]).await;
    let all = json_of(&ok_out(&url, &["--json", "audit", "--defaults", "--all"]).await);
    let entries = all.as_array().expect("one array");
    assert_eq!(entries.len(), 2, "{all}");
    assert!(
        entries.iter().all(|e| e["type"] == "DefaultLimitsSet"),
        "{all}"
    );
    let table = ok_out(&url, &["audit", "--defaults"]).await;
    assert!(table.contains("DefaultLimitsSet"), "{table}");
    let (ok, _, err) = cli(&url, ["audit"]).await;
    assert!(
        !ok && err.contains("--defaults"),
        "a project or --defaults: {err}"
    );
}

/// `quota reservations` (issue 17, item 11): a project's reservations as one table, filtered
/// by status, with `--all` over every page; `--json` keeps the server's answer.
#[tokio::test]
async fn reservations_lists_a_projects_holds() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let api = server.client();
    let url = server.url.clone();
    api.set_defaults(json!({"instances": 100})).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let answer = api.reserve("acme", json!({"instances": 1})).await;
        let id = answer.assert_status(201)["reservation_id"].clone();
        ids.push(id.as_str().expect("id").to_owned());
    }
    api.commit("acme", &ids[0]).await.assert_status(200);

    let held = ok_out(&url, &["reservations", "acme", "--status", "held"]).await;
    assert_eq!(held.matches("RESERVATION").count(), 1, "one header: {held}");
    assert!(
        !held.contains(&ids[0]),
        "the committed one is not held: {held}"
    );
    assert!(held.contains(&ids[1]) && held.contains(&ids[2]), "{held}");

    let every = ok_out(&url, &["reservations", "acme", "--limit", "1", "--all"]).await;
    assert_eq!(
        every.trim_end().lines().count(),
        4,
        "a header and 3 rows: {every}"
    );
    assert!(!every.contains("(more"), "{every}");
    let array = json_of(
        &ok_out(
            &url,
            &["--json", "reservations", "acme", "--limit", "2", "--all"],
        )
        .await,
    );
    let listed: Vec<&str> = array
        .as_array()
        .unwrap_or_else(|| panic!("one JSON array: {array}"))
        .iter()
        .map(|r| r["reservation_id"].as_str().expect("id"))
        .collect();
    assert_eq!(listed, ids);

    let page = json_of(&ok_out(&url, &["--json", "reservations", "acme", "--limit", "2"]).await);
    assert!(page["next"].is_string(), "{page}");
    let none = ok_out(&url, &["reservations", "acme", "--status", "released"]).await;
    assert!(none.contains("no reservations match"), "{none}");
    let (ok, _, err) = cli(&url, &["reservations", "acme", "--status", "expired"]).await;
    assert!(!ok && err.contains("held"), "{err}");
}

/// `quota reserve --dry-run` (issue 18, item 3) prints the verdict and the numbers, and holds
/// nothing.
#[tokio::test]
async fn reserve_dry_run_prints_the_verdict_and_holds_nothing() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let api = server.client();
    let url = server.url.clone();
    api.set_defaults(json!({"instances": 2})).await;
    let fits = ok_out(&url, &["reserve", "acme", "instances=2", "--dry-run"]).await;
    assert!(fits.contains("would be granted"), "{fits}");
    assert!(
        fits.contains("RESOURCE") && fits.contains("instances"),
        "{fits}"
    );
    let over = ok_out(&url, &["reserve", "acme", "instances=3", "--dry-run"]).await;
    assert!(
        over.contains("would be denied: over quota for instances"),
        "{over}"
    );
    let json = json_of(
        &ok_out(
            &url,
            &["--json", "reserve", "acme", "instances=1", "--dry-run"],
        )
        .await,
    );
    assert_eq!(json["granted"], true);
    assert_eq!(
        json["usage"]["instances"],
        json!({"in_use": 0, "reserved": 0})
    );
    // Nothing was held by the three dry runs: a real reserve of both still fits.
    api.reserve("acme", json!({"instances": 2}))
        .await
        .assert_status(201);
}

/// `quota usage --history` (SPEC "Command line"): a sparkline per resource with its min, max,
/// last value and limit, or with `--json` the server's histories as one array; and a page of
/// `quota audit` says how to follow a reservation it lists.
#[tokio::test]
async fn usage_history_prints_a_sparkline_per_resource() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let api = server.client();
    let url = server.url.clone();
    api.set_defaults(json!({"instances": 10, "cores": 20}))
        .await;
    let mut last = String::new();
    for n in 1..=3 {
        // A history has a point per instant (millisecond) with a change, at the usage after
        // it: a change at the same instant as the next one has no point of its own.
        next_millisecond().await;
        let held = api
            .reserve("acme", json!({"instances": n, "cores": 1}))
            .await;
        last = held.assert_status(201)["reservation_id"]
            .as_str()
            .expect("id")
            .to_owned();
    }
    next_millisecond().await;
    let released = api.release("acme", &last).await;
    // Read at the release's position: without it the server waits at most 1 s for the views
    // (README "Read-your-writes"), which a loaded machine has outrun.
    let position = released.assert_status(200)["position"]
        .as_u64()
        .expect("position")
        .to_string();

    let table = ok_out(
        &url,
        &["usage", "acme", "--history", "--min-position", &position],
    )
    .await;
    let row = |name: &str| {
        table
            .lines()
            .find(|line| line.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} row: {table}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // RESOURCE, the sparkline, MIN, MAX, NOW (in_use+reserved), LIMIT.
    let instances = row("instances");
    assert_eq!(instances[1].chars().count(), 40, "{table}");
    assert!(
        instances[1].chars().all(|c| ('▁'..='█').contains(&c)),
        "{table}"
    );
    assert_eq!(&instances[2..], ["1", "6", "0+3", "10"], "{table}");
    assert_eq!(&row("cores")[2..], ["1", "3", "0+2", "20"], "{table}");

    let only = ok_out(&url, &["usage", "acme", "--history", "--resource", "cores"]).await;
    assert!(
        only.contains("cores") && !only.contains("instances"),
        "{only}"
    );
    let json = json_of(&ok_out(&url, &["--json", "usage", "acme", "--history"]).await);
    let resources: Vec<&Value> = json
        .as_array()
        .expect("an array")
        .iter()
        .map(|h| &h["resource"])
        .collect();
    assert_eq!(resources, [&json!("cores"), &json!("instances")], "{json}");

    let (ok, _, err) = cli(
        &url,
        &["usage", "acme", "--history", "--at", "2026-01-01T00:00:00Z"],
    )
    .await;
    assert!(!ok && err.contains("--at"), "{err}");

    let page = ok_out(&url, &["audit", "acme", "--reservation", &last]).await;
    assert!(
        page.contains(&format!("quota reservation acme {last}")),
        "{page}"
    );
}
