//! End-to-end: users inside a project (SPEC rule 8) over HTTP. A user's limits
//! (`PUT`/`GET`/`DELETE /v1/projects/{p}/users/{u}/limits`: its own over the project's over the
//! defaults, rule 6 on the user's usage, admin-only writes, reads scoped as the project's); reserves
//! naming a `user` (over the user's own limit is a 403 with `user_overs`, `user_limits`,
//! `user_usage`, `user_headroom` while `overs` stays empty; idempotency includes the user; a
//! counted reserve gets the largest count under the user's cap; a dry run says as much and records
//! nothing); and a user's usage (now, `?at=`, `?min_position=`). On SQLite and PostgreSQL, each
//! ending with the views caught up and `quota projections verify` clean. Bursts, corrections,
//! the audit and the reservation list for users are in `users_audit.rs`.
//!
//! PostgreSQL tests need `QUOTA_TEST_POSTGRES_URL` and pass (skipped) without it.

mod common;

use std::time::{Duration, Instant};

use common::scenarios::TOKENS;
use common::{
    cli, postgres_store, sqlite_store, store_head, tokens_file, views_caught_up, Api, Server,
    StoreUrl,
};
use serde_json::{json, Value};

const ADMIN: &str = "admin-secret-0123456789";
const AUDITOR: &str = "auditor-secret-0123456789";
const ACME: &str = "acme-secret-0123456789";

fn id_of(value: &Value) -> String {
    value["reservation_id"]
        .as_str()
        .expect("reservation_id")
        .to_owned()
}

fn position(value: &Value) -> u64 {
    value["position"].as_u64().expect("position")
}

/// The body without its `position` (checked on its own).
fn without_position(value: &Value) -> Value {
    let mut value = value.clone();
    value.as_object_mut().expect("an object").remove("position");
    value
}

/// A user's limits: set, read with sources, removed; rule 6 on the user's usage; bad input;
/// who may read and write them.
async fn user_limits_rows(store: &StoreUrl, base: &str) {
    let admin = Api::new(base, Some(ADMIN));
    let auditor = Api::new(base, Some(AUDITOR));
    let acme = Api::new(base, Some(ACME));
    admin
        .set_defaults(json!({"instances": 10, "cores": 20, "ram": -1}))
        .await;
    admin
        .put("/v1/projects/acme/limits", json!({"limits": {"cores": 16}}))
        .await
        .assert_status(200);
    let path = "/v1/projects/acme/users/alice/limits";

    // PUT answers the effective limits: the user's own over the project's over the defaults.
    let set = admin.put(path, json!({"limits": {"instances": 3}})).await;
    let set = set.assert_status(200).clone();
    assert_eq!(
        without_position(&set),
        json!({"project": "acme", "user": "alice", "limits": {"instances": 3, "cores": 16, "ram": -1}})
    );
    assert!(position(&set) > 0, "{set}");
    // A second PUT merges with the user's other overrides.
    let merged = admin.put(path, json!({"limits": {"ram": 4096}})).await;
    let merged = merged.assert_status(200).clone();
    assert_eq!(
        merged["limits"],
        json!({"instances": 3, "cores": 16, "ram": 4096})
    );
    assert!(position(&merged) > position(&set), "{merged}");

    // GET says where each comes from; the project's token and an auditor may read it.
    let expected = json!({
        "project": "acme",
        "user": "alice",
        "limits": {
            "instances": {"limit": 3, "source": "user"},
            "cores": {"limit": 16, "source": "project"},
            "ram": {"limit": 4096, "source": "user"},
        },
    });
    for reader in [&admin, &acme, &auditor] {
        let got = reader.get(path).await;
        let got = got.assert_status(200);
        assert_eq!(without_position(got), expected);
        assert_eq!(position(got), position(&merged), "{got}");
    }
    // A user without overrides has the project's limits.
    let bob = admin.get("/v1/projects/acme/users/bob/limits").await;
    assert_eq!(
        bob.assert_status(200)["limits"],
        json!({
            "instances": {"limit": 10, "source": "default"},
            "cores": {"limit": 16, "source": "project"},
            "ram": {"limit": -1, "source": "default"},
        })
    );

    // Rule 6 on the user's usage: alice holds 2 instances (bob's 5 do not count for her).
    let held = acme
        .post(
            "/v1/projects/acme/reservations",
            json!({"deltas": {"instances": 2}, "user": "alice"}),
        )
        .await;
    acme.commit("acme", &id_of(held.assert_status(201)))
        .await
        .assert_status(200);
    acme.post(
        "/v1/projects/acme/reservations",
        json!({"deltas": {"instances": 5}, "user": "bob"}),
    )
    .await
    .assert_status(201);
    let head = store_head(store).await;
    let below = admin.put(path, json!({"limits": {"instances": 1}})).await;
    below.assert_problem(409, "limit-below-usage");
    assert_eq!(
        below.body["resources"],
        json!({"instances": {"limit": 1, "in_use": 2, "reserved": 0}}),
        "{:?}",
        below.body
    );
    // Bad input: an unknown resource, a bad user id in the path; nothing recorded.
    admin
        .put(path, json!({"limits": {"gpus": 1}}))
        .await
        .assert_problem(400, "unknown-resource");
    let long = "u".repeat(129);
    for user in ["a%20b", long.as_str(), "a%2Fb", "%C3%A9"] {
        let bad = format!("/v1/projects/acme/users/{user}/limits");
        admin
            .put(&bad, json!({"limits": {"instances": 1}}))
            .await
            .assert_problem(400, "invalid-request");
        admin.get(&bad).await.assert_problem(400, "invalid-request");
        admin
            .delete(&bad)
            .await
            .assert_problem(400, "invalid-request");
        admin
            .get(&format!("/v1/projects/acme/users/{user}/usage"))
            .await
            .assert_problem(400, "invalid-request");
    }
    // Writes are the admin's: the project's token and the auditor get 403; a project token
    // cannot read another project's users.
    for answer in [
        acme.put(path, json!({"limits": {"instances": 9}})).await,
        acme.delete(path).await,
        auditor.put(path, json!({"limits": {"instances": 9}})).await,
        auditor.delete(path).await,
        acme.get("/v1/projects/other/users/alice/limits").await,
        acme.get("/v1/projects/other/users/alice/usage").await,
    ] {
        answer.assert_problem(403, "forbidden");
    }
    // Wrong types where a user id or a limits object belongs: 400, nothing recorded.
    for user in [
        json!(7),
        json!(["alice"]),
        json!({"id": "alice"}),
        json!(true),
    ] {
        admin
            .post(
                "/v1/projects/acme/reservations",
                json!({"deltas": {"instances": 1}, "user": user}),
            )
            .await
            .assert_problem(400, "invalid-request");
        admin
            .post(
                "/v1/projects/acme/usage/corrections",
                json!({"in_use": {"instances": 1}, "user": user, "reason": "recount"}),
            )
            .await
            .assert_problem(400, "invalid-request");
    }
    for limits in [
        json!([["instances", 1]]),
        json!("instances=1"),
        json!({"instances": "1"}),
    ] {
        admin
            .put(path, json!({"limits": limits}))
            .await
            .assert_problem(400, "invalid-request");
    }
    assert_eq!(store_head(store).await, head, "a refused write recorded");
    auditor
        .get("/v1/projects/other/users/alice/limits")
        .await
        .assert_status(200);

    // With force, the user's limit goes below its usage and denies its new reserves.
    let forced = admin
        .put(path, json!({"limits": {"instances": 1}, "force": true}))
        .await;
    assert_eq!(forced.assert_status(200)["limits"]["instances"], 1);
    let denied = acme
        .post(
            "/v1/projects/acme/reservations",
            json!({"deltas": {"instances": 1}, "user": "alice"}),
        )
        .await;
    denied.assert_problem(403, "over-quota");
    assert_eq!(denied.body["user_overs"], json!(["instances"]));

    // DELETE: 204, and every source falls back to the project's or the defaults.
    let removed = admin.delete(path).await;
    assert_eq!(removed.status, 204, "{removed:?}");
    let after = admin.get(path).await;
    assert_eq!(
        after.assert_status(200)["limits"],
        json!({
            "instances": {"limit": 10, "source": "default"},
            "cores": {"limit": 16, "source": "project"},
            "ram": {"limit": -1, "source": "default"},
        })
    );
    acme.post(
        "/v1/projects/acme/reservations",
        json!({"deltas": {"instances": 1}, "user": "alice"}),
    )
    .await
    .assert_status(201);
}

/// Reserves naming a user: the user's own cap beside the project's, in the answer, the
/// reservation, idempotency, counted reserves and dry runs.
async fn user_reserves(store: &StoreUrl, api: &Api) {
    api.set_defaults(json!({"instances": 10, "cores": 40, "ram": -1}))
        .await;
    api.put(
        "/v1/projects/shop/users/alice/limits",
        json!({"limits": {"instances": 2}}),
    )
    .await
    .assert_status(200);
    let path = "/v1/projects/shop/reservations";
    let id = "0192f000-0000-7000-8000-00000000a11c";
    let body = json!({"deltas": {"instances": 2}, "user": "alice", "reservation_id": id});

    let granted = api.post(path, body.clone()).await;
    let granted = granted.assert_status(201).clone();
    assert_eq!(granted["user"], "alice", "{granted}");
    assert_eq!(granted["reservation_id"], id);
    let read = api.get(&format!("{path}/{id}")).await;
    assert_eq!(read.assert_status(200)["user"], "alice");
    // The same body again is the same reservation; the id for another user is a mismatch.
    let again = api.post(path, body.clone()).await;
    assert_eq!(again.assert_status(201), &granted);
    let mut other = body.clone();
    other["user"] = json!("bob");
    api.post(path, other)
        .await
        .assert_problem(409, "idempotency-mismatch");
    let mut no_user = body.clone();
    no_user.as_object_mut().expect("object").remove("user");
    api.post(path, no_user)
        .await
        .assert_problem(409, "idempotency-mismatch");

    // Over alice's own limit, not the project's: `overs` is empty, the user's numbers say why.
    let over = api
        .post(
            path,
            json!({"deltas": {"instances": 1, "cores": 1}, "user": "alice"}),
        )
        .await;
    over.assert_problem(403, "over-quota");
    let problem = &over.body;
    assert_eq!(problem["overs"], json!([]), "{problem}");
    assert_eq!(problem["user_overs"], json!(["instances"]), "{problem}");
    assert_eq!(problem["user_limits"]["instances"], 2, "{problem}");
    assert_eq!(
        problem["user_usage"]["instances"],
        json!({"in_use": 0, "reserved": 2}),
        "{problem}"
    );
    assert_eq!(problem["user_headroom"]["instances"], 0, "{problem}");
    assert_eq!(problem["limits"]["instances"], 10, "{problem}");
    assert_eq!(problem["headroom"]["instances"], 8, "{problem}");

    // A dry run judges the user too (over alice's cap, not the project's), recording nothing.
    let head = store_head(store).await;
    let dry = api
        .post(
            &format!("{path}?dry_run=true"),
            json!({"deltas": {"instances": 1}, "user": "alice"}),
        )
        .await;
    assert_eq!(
        dry.assert_status(200),
        &json!({
            "granted": false,
            "overs": [],
            "limits": {"instances": 10},
            "usage": {"instances": {"in_use": 0, "reserved": 2}},
            "headroom": {"instances": 8},
            "user_overs": ["instances"],
            "user_limits": {"instances": 2},
            "user_usage": {"instances": {"in_use": 0, "reserved": 2}},
            "user_headroom": {"instances": 0},
        })
    );
    assert_eq!(store_head(store).await, head, "a dry run recorded an event");

    // bob has no cap but the project's: 8 instances fit, a 9th is over the project only.
    let bob = api
        .post(path, json!({"deltas": {"instances": 8}, "user": "bob"}))
        .await;
    assert_eq!(bob.assert_status(201)["user"], "bob");
    let over = api
        .post(path, json!({"deltas": {"instances": 1}, "user": "bob"}))
        .await;
    over.assert_problem(403, "over-quota");
    assert_eq!(over.body["overs"], json!(["instances"]));
    assert!(over.body.get("user_overs").is_none(), "{:?}", over.body);
    // A reserve without a user carries none.
    api.post(path, json!({"deltas": {"cores": 1}}))
        .await
        .assert_status(201);
    let plain = api.reserve("shop", json!({"cores": 1})).await;
    assert!(plain.assert_status(201).get("user").is_none(), "{plain:?}");

    // A counted reserve for carol (cap 3 instances) gets the largest count under her cap.
    api.put(
        "/v1/projects/fleet/users/carol/limits",
        json!({"limits": {"instances": 3}}),
    )
    .await
    .assert_status(200);
    let fleet = "/v1/projects/fleet/reservations";
    let counted = api
        .post(
            fleet,
            json!({"deltas": {"instances": 1, "cores": 2}, "count": {"min": 1, "max": 8}, "user": "carol"}),
        )
        .await;
    let counted = counted.assert_status(201);
    assert_eq!(counted["count"], 3, "{counted}");
    assert_eq!(counted["deltas"], json!({"instances": 3, "cores": 6}));
    assert_eq!(counted["user"], "carol");
    let none_left = api
        .post(
            fleet,
            json!({"deltas": {"instances": 1}, "count": {"min": 1, "max": 2}, "user": "carol"}),
        )
        .await;
    none_left.assert_problem(403, "over-quota");
    assert_eq!(none_left.body["max_count"], 0, "{:?}", none_left.body);
    assert_eq!(none_left.body["user_overs"], json!(["instances"]));
    assert_eq!(none_left.body["overs"], json!([]));

    // A dry run for carol within her cap, recording nothing.
    let head = store_head(store).await;
    let dry = api
        .post(
            "/v1/projects/fleet/reservations?dry_run=true",
            json!({"deltas": {"cores": 2}, "user": "carol"}),
        )
        .await;
    let dry = dry.assert_status(200);
    assert_eq!(dry["granted"], true, "{dry}");
    assert_eq!(dry["user_overs"], json!([]), "{dry}");
    assert_eq!(
        dry["user_usage"]["cores"],
        json!({"in_use": 0, "reserved": 6})
    );
    assert_eq!(dry["user_headroom"]["cores"], 34, "{dry}");
    assert_eq!(
        store_head(store).await,
        head,
        "a dry run for a user recorded an event"
    );
}

/// `GET /v1/projects/{p}/users/{u}/usage`: the user's numbers now and at a past instant.
async fn user_usage(api: &Api) {
    api.set_defaults(json!({"instances": 10, "cores": 20, "ram": -1}))
        .await;
    api.put(
        "/v1/projects/meter/users/alice/limits",
        json!({"limits": {"instances": 4}}),
    )
    .await
    .assert_status(200);
    let path = "/v1/projects/meter/reservations";
    let first = api
        .post(
            path,
            json!({"deltas": {"instances": 1, "cores": 2, "ram": 512}, "user": "alice"}),
        )
        .await;
    let first = id_of(first.assert_status(201));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let between = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    tokio::time::sleep(Duration::from_millis(50)).await;
    api.commit("meter", &first).await.assert_status(200);
    api.post(path, json!({"deltas": {"instances": 2}, "user": "alice"}))
        .await
        .assert_status(201);
    // Other users' and the project's own reserves are not alice's.
    let bobs = api
        .post(path, json!({"deltas": {"instances": 3}, "user": "bob"}))
        .await;
    let bobs = id_of(bobs.assert_status(201));
    let last = api.reserve("meter", json!({"cores": 5})).await;
    let last = position(last.assert_status(201));

    let now = api
        .get(&format!(
            "/v1/projects/meter/users/alice/usage?min_position={last}"
        ))
        .await;
    let now = now.assert_status(200);
    assert_eq!(
        without_position(now),
        json!({
            "project": "meter",
            "user": "alice",
            "resources": {
                "instances": {"limit": 4, "in_use": 1, "reserved": 2, "headroom": 1},
                "cores": {"limit": 20, "in_use": 2, "reserved": 0, "headroom": 18},
                "ram": {"limit": -1, "in_use": 512, "reserved": 0},
            },
        })
    );
    assert!(position(now) >= last, "{now}");
    let bob = api.get("/v1/projects/meter/users/bob/usage").await;
    assert_eq!(
        bob.assert_status(200)["resources"]["instances"],
        json!({"limit": 10, "in_use": 0, "reserved": 3, "headroom": 7})
    );

    // Before the commit, alice's first reservation was held.
    let then = api
        .get(&format!(
            "/v1/projects/meter/users/alice/usage?at={between}&min_position={last}"
        ))
        .await;
    let then = then.assert_status(200);
    assert_eq!(then["user"], "alice");
    assert_eq!(
        (
            then["resources"]["instances"]["in_use"].clone(),
            then["resources"]["instances"]["reserved"].clone()
        ),
        (json!(0), json!(1)),
        "{then}"
    );

    // A position past the log's head is refused at once; unknown parameters are a 400.
    let asked = Instant::now();
    let ahead = api
        .get("/v1/projects/meter/users/alice/usage?min_position=999999999")
        .await;
    ahead.assert_problem(503, "not-caught-up");
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "took {:?}",
        asked.elapsed()
    );
    for query in ["?bogus=1", "?at=yesterday", "?min_position=-1"] {
        api.get(&format!("/v1/projects/meter/users/alice/usage{query}"))
            .await
            .assert_problem(400, "invalid-request");
    }

    // Rule 3 per user: the project has 4 instances in use, alice 1; she cannot give back 2.
    api.commit("meter", &bobs).await.assert_status(200);
    let under = api
        .post(path, json!({"deltas": {"instances": -2}, "user": "alice"}))
        .await;
    under.assert_problem(409, "usage-underflow");
    assert_eq!(under.body["resources"], json!(["instances"]), "{under:?}");
    api.post(path, json!({"deltas": {"instances": -1}, "user": "alice"}))
        .await
        .assert_status(201);
    // Rule 4 per user: an expired hold no longer counts for her, at once.
    let brief = api
        .post(
            path,
            json!({"deltas": {"instances": 1}, "user": "alice", "expires_in": 1}),
        )
        .await;
    brief.assert_status(201);
    let reserved =
        |answer: common::Answer| answer.body["resources"]["instances"]["reserved"].clone();
    let usage = "/v1/projects/meter/users/alice/usage";
    assert_eq!(reserved(api.get(usage).await), 3);
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(reserved(api.get(usage).await), 2);
}
/// Every scenario on one server with tokens, then the views and `verify`.
async fn users_over_http(store: StoreUrl) {
    let dir = tempfile::tempdir().expect("temporary folder");
    let tokens = tokens_file(dir.path(), TOKENS);
    let server = Server::start_with_tokens(&store, &tokens);
    let admin = server.client_with_token(ADMIN);
    user_limits_rows(&store, &server.url).await;
    user_reserves(&store, &admin).await;
    user_usage(&admin).await;
    views_caught_up(&admin).await;
    assert!(server.terminate(), "the server shuts down cleanly");
    let (ok, out, err) = cli(
        "http://127.0.0.1:9",
        ["projections", "verify", "--store", &store.url],
    )
    .await;
    assert!(ok, "verify: {out}{err}");
}

#[tokio::test]
async fn users_sqlite() {
    users_over_http(sqlite_store()).await;
}

#[tokio::test]
async fn users_postgres() {
    if let Some(store) = postgres_store().await {
        users_over_http(store).await;
    }
}
