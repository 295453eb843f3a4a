//! End-to-end: every event records its principal (SPEC.md, "Events"): the token's role, or
//! `anonymous` on a server without tokens, or `system:sweeper` for expiries; a client's `actor`
//! never changes it. The audit shows it (null for events stored before principals existed),
//! filters by `?principal=`, and says what a limits event changed (`before`, `after`, `force`).
//! On SQLite and PostgreSQL.

mod common;

use std::time::{Duration, Instant};

use common::{postgres_store, sqlite_store, tokens_file, Api, Server, StoreUrl};
use domain::{Event, Limit, ResourceName};
use ledger::{EventData, ExpectedVersion, Metadata, StreamAppend};
use serde_json::{json, Value};

const ADMIN: &str = "admin-token-0123456789";
const ACME: &str = "acme-token-0123456789";
/// A token with a name (the tokens file's third column): the principal is the name.
const DEPLOYER: &str = "deployer-token-0123456789";

fn position(value: &Value) -> u64 {
    value["position"].as_u64().expect("position")
}

/// The project's audit entries once the views reflect `min_position`.
async fn audit(api: &Api, project: &str, min_position: u64, filter: &str) -> Vec<Value> {
    let answer = api
        .get(&format!(
            "/v1/projects/{project}/audit?min_position={min_position}{filter}"
        ))
        .await;
    answer.assert_status(200)["entries"]
        .as_array()
        .expect("entries")
        .clone()
}

fn of_type<'a>(entries: &'a [Value], event_type: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["type"] == event_type).collect()
}

/// Tokens: the principal is the token's role, whatever `actor` the body claims; limits entries
/// carry the effective limits before and after, and `force`.
async fn with_tokens(store: StoreUrl) {
    let dir = tempfile::tempdir().expect("temporary folder");
    let tokens = tokens_file(
        dir.path(),
        &format!("{ADMIN} admin\n{ACME} project:acme\n{DEPLOYER} project:acme acme-deployer\n"),
    );
    let server = Server::start_with_tokens(&store, &tokens);
    let admin = server.client_with_token(ADMIN);
    let acme = server.client_with_token(ACME);
    admin
        .set_defaults(json!({"instances": 5, "cores": 8}))
        .await;
    admin
        .put(
            "/v1/projects/acme/limits",
            json!({"limits": {"instances": 3}, "force": true}),
        )
        .await
        .assert_status(200);
    let forged = acme
        .post(
            "/v1/projects/acme/reservations",
            json!({"deltas": {"instances": 1}, "actor": "admin", "request_id": "forged-1"}),
        )
        .await;
    forged.assert_status(201);
    admin
        .put(
            "/v1/projects/acme/limits",
            json!({"limits": {"instances": 0, "cores": 2}, "force": true, "actor": "ops-bob"}),
        )
        .await
        .assert_status(200);
    assert_eq!(admin.delete("/v1/projects/acme/limits").await.status, 204);
    let last = acme.reserve("acme", json!({"instances": 1})).await;
    let last = position(last.assert_status(201));

    let entries = audit(&admin, "acme", last, "").await;
    let types: Vec<&str> = entries.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        types,
        [
            "LimitsSet",
            "ReservationRequested",
            "LimitsSet",
            "LimitsReset",
            "ReservationRequested"
        ],
        "{entries:?}"
    );
    let principals: Vec<&Value> = entries.iter().map(|e| &e["principal"]).collect();
    assert_eq!(
        principals,
        ["admin", "project:acme", "admin", "admin", "project:acme"]
    );
    // Forging `actor` changes only the actor.
    assert_eq!(entries[1]["actor"], "admin");
    assert_eq!(entries[1]["request_id"], "forged-1");
    assert_eq!(entries[2]["actor"], "ops-bob");

    // What each limits event changed: the effective limits of the resources it names, and
    // whether `force` took a limit below usage (the first did not need it; the second set
    // instances to 0 under a hold of 1).
    let (first, forced, reset) = (&entries[0], &entries[2], &entries[3]);
    assert_eq!(first["before"], json!({"instances": 5}), "{first}");
    assert_eq!(first["after"], json!({"instances": 3}), "{first}");
    assert_eq!(first["force"], false, "{first}");
    assert_eq!(forced["before"], json!({"instances": 3, "cores": 8}));
    assert_eq!(forced["after"], json!({"instances": 0, "cores": 2}));
    assert_eq!(forced["force"], true);
    assert_eq!(reset["before"], json!({"instances": 0, "cores": 2}));
    assert_eq!(reset["after"], json!({"instances": 5, "cores": 8}));
    assert!(reset.get("force").is_none(), "{reset}");
    for reservation in of_type(&entries, "ReservationRequested") {
        for field in ["before", "after", "force"] {
            assert!(reservation.get(field).is_none(), "{reservation}");
        }
    }

    // The filter.
    let by_acme = audit(&admin, "acme", last, "&principal=project:acme").await;
    assert_eq!(by_acme.len(), 2, "{by_acme:?}");
    assert!(by_acme.iter().all(|e| e["principal"] == "project:acme"));
    let by_admin = audit(&acme, "acme", last, "&principal=admin&type=LimitsSet").await;
    assert_eq!(by_admin.len(), 2, "{by_admin:?}");
    assert!(audit(&admin, "acme", last, "&principal=nobody")
        .await
        .is_empty());
    let too_long = format!("&principal={}", "p".repeat(257));
    for bad in [
        "&principal=",
        "&principal=a%01b",
        "&principal=%7F",
        &too_long,
    ] {
        admin
            .get(&format!("/v1/projects/acme/audit?{bad}"))
            .await
            .assert_problem(400, "invalid-request");
    }

    // A named token: the principal is its name, the actor still defaults to its role.
    let deployer = server.client_with_token(DEPLOYER);
    let named = deployer.reserve("acme", json!({"instances": 1})).await;
    let named = position(named.assert_status(201));
    let by_name = audit(&admin, "acme", named, "&principal=acme-deployer").await;
    assert_eq!(by_name.len(), 1, "{by_name:?}");
    assert_eq!(by_name[0]["principal"], "acme-deployer");
    assert_eq!(
        by_name[0]["actor"], "project:acme",
        "the actor defaults to the role"
    );
}

#[tokio::test]
async fn token_principals_and_limits_changes_sqlite() {
    with_tokens(sqlite_store()).await;
}

#[tokio::test]
async fn token_principals_and_limits_changes_postgres() {
    if let Some(store) = postgres_store().await {
        with_tokens(store).await;
    }
}

/// Without tokens every request is `anonymous`'s; the sweeper's expiries are
/// `system:sweeper`'s.
async fn open_and_swept(store: StoreUrl) {
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(json!({"instances": 5})).await;
    let held = api
        .post(
            "/v1/projects/open/reservations",
            json!({"deltas": {"instances": 1}, "expires_in": 1, "actor": "admin"}),
        )
        .await;
    let held = position(held.assert_status(201));

    let deadline = Instant::now() + Duration::from_secs(15);
    let entries = loop {
        let entries = audit(&api, "open", held, "").await;
        if entries.len() == 2 || Instant::now() > deadline {
            break entries;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        entries.len(),
        2,
        "the sweeper recorded the expiry: {entries:?}"
    );
    assert_eq!(entries[0]["principal"], "anonymous");
    assert_eq!(entries[0]["actor"], "admin");
    assert_eq!(entries[1]["type"], "ReservationReleased");
    assert_eq!(entries[1]["reason"], "expired");
    assert_eq!(entries[1]["principal"], "system:sweeper");

    let swept = audit(&api, "open", held, "&principal=system:sweeper").await;
    assert_eq!(swept.len(), 1);
    assert_eq!(swept[0]["position"], entries[1]["position"]);
}

#[tokio::test]
async fn anonymous_and_sweeper_principals_sqlite() {
    open_and_swept(sqlite_store()).await;
}

#[tokio::test]
async fn anonymous_and_sweeper_principals_postgres() {
    if let Some(store) = postgres_store().await {
        open_and_swept(store).await;
    }
}

/// An event stored without a principal (as every build before principals stored them) shows
/// `"principal": null`: unknown, not a guess.
async fn unknown_principal(store: StoreUrl) {
    {
        let events = ledger::store::open(&store.url).await.expect("open store");
        let limits = [(
            ResourceName::parse("instances").unwrap(),
            Limit::new(2).unwrap(),
        )];
        let limits_set = Event::LimitsSet {
            limits: limits.into(),
            forced: false,
        };
        let metadata = Metadata {
            actor: Some("alice".into()),
            ..Metadata::default()
        };
        let event = EventData::encode(&limits_set, metadata, chrono::Utc::now());
        let append = StreamAppend::new("project-legacy", ExpectedVersion::NoStream, vec![event]);
        let results = events.append(vec![append]).await.expect("append");
        assert!(!results[0].is_conflict());
    }
    let server = Server::start(&store);
    let entries = audit(&server.client(), "legacy", 1, "").await;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["actor"], "alice");
    assert!(entries[0]["principal"].is_null(), "{entries:?}");
    assert!(entries[0].get("principal").is_some(), "{entries:?}");
    assert_eq!(entries[0]["after"], json!({"instances": 2}));
    assert_eq!(entries[0]["before"], json!({}));
}

#[tokio::test]
async fn events_without_a_principal_show_null_sqlite() {
    unknown_principal(sqlite_store()).await;
}

#[tokio::test]
async fn events_without_a_principal_show_null_postgres() {
    if let Some(store) = postgres_store().await {
        unknown_principal(store).await;
    }
}
