//! End-to-end: users inside a project (SPEC rules 8 and 10) in bursts, corrections and the
//! read side. The seed burst per user (20 concurrent reserves of one instance by one user
//! capped at 5, the project at 100: exactly 5 granted) on SQLite, PostgreSQL and two servers on
//! one PostgreSQL schema; corrections of a user's in_use (the project's moves by as much) and a
//! release after a correction stopping at zero; the audit's `user` field and `?user=` filter,
//! `UserLimitsSet`/`UserLimitsReset`, and the reservation list's `?user=`. Each store ends with
//! the views caught up and `quota projections verify` clean. Limits, reserves and usage of users
//! are in `users.rs`.
//!
//! PostgreSQL tests need `QUOTA_TEST_POSTGRES_URL` and pass (skipped) without it.

mod common;

use std::collections::BTreeMap;

use common::{cli, postgres_store, sqlite_store, views_caught_up, Api, Server, StoreUrl};
use serde_json::{json, Value};

fn id_of(value: &Value) -> String {
    value["reservation_id"]
        .as_str()
        .expect("reservation_id")
        .to_owned()
}

fn position(value: &Value) -> u64 {
    value["position"].as_u64().expect("position")
}

/// The seed bug per user: 20 concurrent reserves by one user capped at 5 (the project has room
/// for 100) grant exactly 5, spread round robin over `apis`.
async fn user_burst(apis: &[Api], project: &str) {
    apis[0].set_defaults(json!({"instances": 100})).await;
    apis[0]
        .put(
            &format!("/v1/projects/{project}/users/u1/limits"),
            json!({"limits": {"instances": 5}}),
        )
        .await
        .assert_status(200);
    let path = format!("/v1/projects/{project}/reservations");
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let api = apis[i % apis.len()].clone();
            let path = path.clone();
            tokio::spawn(async move {
                api.post(&path, json!({"deltas": {"instances": 1}, "user": "u1"}))
                    .await
            })
        })
        .collect();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for task in tasks {
        let answer = task.await.expect("task");
        if answer.status == 403 {
            answer.assert_problem(403, "over-quota");
            assert_eq!(
                answer.body["user_overs"],
                json!(["instances"]),
                "{answer:?}"
            );
            assert_eq!(answer.body["overs"], json!([]), "{answer:?}");
        }
        *statuses.entry(answer.status).or_default() += 1;
    }
    assert_eq!(
        statuses,
        BTreeMap::from([(201, 5), (403, 15)]),
        "exactly 5 granted to the user"
    );
    // Every node agrees: the user has no room left, the project and other users do.
    for api in apis {
        let usage = api
            .get(&format!("/v1/projects/{project}/users/u1/usage"))
            .await;
        assert_eq!(
            usage.assert_status(200)["resources"]["instances"],
            json!({"limit": 5, "in_use": 0, "reserved": 5, "headroom": 0})
        );
        api.post(&path, json!({"deltas": {"instances": 1}, "user": "u1"}))
            .await
            .assert_problem(403, "over-quota");
    }
    apis[apis.len() - 1]
        .post(&path, json!({"deltas": {"instances": 1}, "user": "u2"}))
        .await
        .assert_status(201);
}

/// Rule 10 for users: a user's correction is the user's before/after and moves the project's
/// in_use by as much; a release after a correction below it stops at zero.
async fn user_corrections(api: &Api) {
    api.set_defaults(json!({"instances": 100, "cores": 200}))
        .await;
    let path = "/v1/projects/fix/reservations";
    let mut committed = BTreeMap::new();
    for (user, instances) in [("alice", 2), ("bob", 1)] {
        let held = api
            .post(
                path,
                json!({"deltas": {"instances": instances, "cores": 2}, "user": user}),
            )
            .await;
        let id = id_of(held.assert_status(201));
        api.commit("fix", &id).await.assert_status(200);
        committed.insert(user, id);
    }
    let corrections = "/v1/projects/fix/usage/corrections";
    let done = api
        .post(
            corrections,
            json!({"in_use": {"instances": 5, "cores": 2}, "user": "alice", "reason": "hypervisor recount"}),
        )
        .await;
    let done = done.assert_status(200).clone();
    assert_eq!(
        done["corrections"],
        json!([{"resource": "instances", "before": 2, "after": 5}]),
        "the user's numbers; cores was right"
    );
    let at = position(&done);
    let project = api
        .get(&format!("/v1/projects/fix/usage?min_position={at}"))
        .await;
    let project = project.assert_status(200);
    assert_eq!(project["resources"]["instances"]["in_use"], 6, "{project}");
    assert_eq!(project["resources"]["cores"]["in_use"], 4, "{project}");
    let alice = api.get("/v1/projects/fix/users/alice/usage").await;
    assert_eq!(
        alice.assert_status(200)["resources"]["instances"]["in_use"],
        5
    );
    let bob = api.get("/v1/projects/fix/users/bob/usage").await;
    assert_eq!(
        bob.assert_status(200)["resources"]["instances"]["in_use"],
        1
    );

    // alice corrected down below her committed 2: freeing them stops her at zero.
    let down = api
        .post(
            corrections,
            json!({"in_use": {"instances": 1}, "user": "alice", "reason": "deleted by hand"}),
        )
        .await;
    assert_eq!(
        down.assert_status(200)["corrections"],
        json!([{"resource": "instances", "before": 5, "after": 1}])
    );
    let freed = api.release("fix", &committed["alice"]).await;
    let freed = freed.assert_status(200);
    assert_eq!(
        (freed["status"].clone(), freed["reason"].clone()),
        (json!("released"), json!("freed"))
    );
    let alice = api.get("/v1/projects/fix/users/alice/usage").await;
    assert_eq!(
        alice.assert_status(200)["resources"]["instances"]["in_use"],
        0
    );

    // The project's own correction below a committed reservation: the release stops at zero.
    let held = api.reserve("drop", json!({"instances": 3})).await;
    let id = id_of(held.assert_status(201));
    api.commit("drop", &id).await.assert_status(200);
    let done = api
        .post(
            "/v1/projects/drop/usage/corrections",
            json!({"in_use": {"instances": 1}, "reason": "two were deleted by hand"}),
        )
        .await;
    assert_eq!(
        done.assert_status(200)["corrections"],
        json!([{"resource": "instances", "before": 3, "after": 1}])
    );
    let freed = api.release("drop", &id).await;
    let at = position(freed.assert_status(200));
    let usage = api
        .get(&format!("/v1/projects/drop/usage?min_position={at}"))
        .await;
    assert_eq!(
        usage.assert_status(200)["resources"]["instances"]["in_use"],
        0,
        "in_use stops at zero"
    );
    // Releasing again is the same answer.
    assert_eq!(
        api.release("drop", &id).await.assert_status(200)["position"],
        at
    );
}

/// The audit's `user`, `?user=`, the user-limits events and the reservation list's `?user=`.
async fn user_audit(api: &Api) {
    api.set_defaults(json!({"instances": 10})).await;
    let limits = "/v1/projects/trail/users/alice/limits";
    let path = "/v1/projects/trail/reservations";
    api.put(limits, json!({"limits": {"instances": 1}}))
        .await
        .assert_status(200);
    let mine = api
        .post(path, json!({"deltas": {"instances": 1}, "user": "alice"}))
        .await;
    let mine = id_of(mine.assert_status(201));
    api.post(path, json!({"deltas": {"instances": 1}, "user": "alice"}))
        .await
        .assert_problem(403, "over-quota");
    api.post(
        "/v1/projects/trail/usage/corrections",
        json!({"in_use": {"instances": 2}, "user": "alice", "reason": "recount"}),
    )
    .await
    .assert_status(200);
    assert_eq!(api.delete(limits).await.status, 204);
    let bobs = api
        .post(path, json!({"deltas": {"instances": 1}, "user": "bob"}))
        .await;
    let bobs = id_of(bobs.assert_status(201));
    let plain = api.reserve("trail", json!({"instances": 1})).await;
    let last = position(plain.assert_status(201));

    let audit = |query: String| {
        let api = api.clone();
        async move {
            let answer = api
                .get(&format!(
                    "/v1/projects/trail/audit?min_position={last}{query}"
                ))
                .await;
            answer.assert_status(200)["entries"]
                .as_array()
                .expect("entries")
                .clone()
        }
    };
    let alices = audit("&user=alice".into()).await;
    let types: Vec<&str> = alices
        .iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    assert_eq!(
        types,
        [
            "UserLimitsSet",
            "ReservationRequested",
            "ReservationDenied",
            "UsageCorrected",
            "UserLimitsReset"
        ],
        "{alices:?}"
    );
    assert!(alices.iter().all(|e| e["user"] == "alice"), "{alices:?}");
    assert_eq!(alices[1]["reservation_id"], mine.as_str());
    let bob = audit("&user=bob".into()).await;
    assert_eq!(bob.len(), 1, "{bob:?}");
    assert_eq!(bob[0]["reservation_id"], bobs.as_str());
    assert_eq!(bob[0]["user"], "bob");
    // Unfiltered, the project's own events carry no user.
    let all = audit(String::new()).await;
    let project_own = all
        .iter()
        .find(|e| e["position"] == last)
        .expect("the plain reserve");
    assert!(project_own.get("user").is_none(), "{project_own}");
    assert!(audit("&user=carol".into()).await.is_empty());
    for (event_type, count) in [("UserLimitsSet", 1), ("UserLimitsReset", 1)] {
        let entries = audit(format!("&type={event_type}")).await;
        assert_eq!(entries.len(), count, "{event_type}: {entries:?}");
        assert_eq!(entries[0]["user"], "alice");
    }
    let set = audit("&type=UserLimitsSet&user=alice".into()).await;
    assert_eq!(set.len(), 1, "{set:?}");
    for bad in ["a%20b", "", "%C3%A9"] {
        api.get(&format!("/v1/projects/trail/audit?user={bad}"))
            .await
            .assert_problem(400, "invalid-request");
        api.get(&format!("/v1/projects/trail/reservations?user={bad}"))
            .await
            .assert_problem(400, "invalid-request");
    }
    let long = "u".repeat(129);
    api.get(&format!("/v1/projects/trail/audit?user={long}"))
        .await
        .assert_problem(400, "invalid-request");

    // The reservation list: only alice's, each saying so.
    let list = api
        .get(&format!(
            "/v1/projects/trail/reservations?user=alice&min_position={last}"
        ))
        .await;
    let listed = list.assert_status(200)["reservations"]
        .as_array()
        .expect("reservations")
        .clone();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["reservation_id"], mine.as_str());
    assert_eq!(listed[0]["user"], "alice");
    let everyone = api
        .get(&format!(
            "/v1/projects/trail/reservations?min_position={last}"
        ))
        .await;
    let everyone = everyone.assert_status(200)["reservations"]
        .as_array()
        .expect("reservations")
        .clone();
    assert_eq!(everyone.len(), 3, "{everyone:?}");
    let users: Vec<Value> = everyone.iter().map(|r| r["user"].clone()).collect();
    for user in [json!("alice"), json!("bob"), Value::Null] {
        assert!(users.contains(&user), "{users:?}");
    }
}
async fn verify(store: &StoreUrl) {
    let (ok, out, err) = cli(
        "http://127.0.0.1:9",
        ["projections", "verify", "--store", &store.url],
    )
    .await;
    assert!(ok, "verify: {out}{err}");
}

/// Every scenario on one server, then the views and `verify`.
async fn users_in_bursts_corrections_and_audit(store: StoreUrl) {
    let server = Server::start(&store);
    let api = server.client();
    user_burst(std::slice::from_ref(&api), "burst").await;
    user_corrections(&api).await;
    user_audit(&api).await;
    views_caught_up(&api).await;
    assert!(server.terminate(), "the server shuts down cleanly");
    verify(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn users_audit_sqlite() {
    users_in_bursts_corrections_and_audit(sqlite_store()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn users_audit_postgres() {
    if let Some(store) = postgres_store().await {
        users_in_bursts_corrections_and_audit(store).await;
    }
}

/// Two `quota serve` processes on one PostgreSQL schema, the user's burst spread over both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn user_burst_two_nodes_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let first = Server::start(&store);
    let second = Server::start(&store);
    let apis = [first.client(), second.client()];
    user_burst(&apis, "burst-u").await;
    views_caught_up(&apis[0]).await;
    views_caught_up(&apis[1]).await;
    assert!(first.terminate() && second.terminate());
    verify(&store).await;
}
