//! End-to-end: the Nova-compatible quota API under `/compute/v2.1` (issue 18, item 5; SPEC
//! "Nova-compatible quota API"): Nova's JSON shapes, rule 6 as Nova's 400, a 202 delete,
//! `X-Auth-Token`, and Nova's error bodies; `?user_id=` for a user's quota set inside a project
//! (SPEC rule 8). python-novaclient drives the same routes in CI (.ci/nova_quotas.py).

mod common;

use common::{sqlite_store, tokens_file, Server};
use serde_json::{json, Value};

const ADMIN: &str = "nova-admin-token-0123456789";
const ACME: &str = "nova-acme-token-0123456789ab";

struct Nova {
    http: reqwest::Client,
    base: String,
}

impl Nova {
    /// Sends with `X-Auth-Token`, as OpenStack clients do; answers (status, JSON or null).
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let url = format!("{}/compute/v2.1{path}", self.base);
        let mut request = self.http.request(method, url).header("x-auth-token", token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("send");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

#[tokio::test]
async fn quota_sets_and_the_default_class_speak_novas_json() {
    let dir = tempfile::tempdir().expect("dir");
    let tokens = tokens_file(dir.path(), &format!("{ADMIN} admin\n{ACME} project:acme\n"));
    let store = sqlite_store();
    let server = Server::start_with_tokens(&store, &tokens);
    let nova = Nova {
        http: reqwest::Client::new(),
        base: server.url.clone(),
    };
    use reqwest::Method;

    // The default class is the defaults.
    let (status, body) = nova
        .send(
            Method::PUT,
            "/os-quota-class-sets/default",
            ADMIN,
            Some(json!({"quota_class_set": {"instances": 10, "cores": 20, "ram": 51200}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"quota_class_set": {"instances": 10, "cores": 20, "ram": 51200}}),
        "an update answers without id"
    );
    let (status, body) = nova
        .send(Method::GET, "/os-quota-class-sets/default", ACME, None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["quota_class_set"]["id"], "default");
    assert_eq!(body["quota_class_set"]["cores"], 20);

    // A project's set, its update (a string number, as Nova accepts) and its detail.
    let (status, body) = nova
        .send(Method::GET, "/os-quota-sets/acme", ACME, None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"quota_set": {"id": "acme", "instances": 10, "cores": 20, "ram": 51200}})
    );
    let (status, body) = nova
        .send(
            Method::PUT,
            "/os-quota-sets/acme",
            ADMIN,
            Some(json!({"quota_set": {"instances": "4", "force": false}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"quota_set": {"instances": 4, "cores": 20, "ram": 51200}})
    );
    let api = common::Api::new(&server.url, Some(ACME));
    let held = api
        .reserve("acme", json!({"instances": 3, "cores": 6}))
        .await;
    let id = held.assert_status(201)["reservation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    api.commit("acme", &id).await.assert_status(200);
    api.reserve("acme", json!({"instances": 1}))
        .await
        .assert_status(201);
    let (status, body) = nova
        .send(Method::GET, "/os-quota-sets/acme/detail", ACME, None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body["quota_set"]["instances"],
        json!({"in_use": 3, "limit": 4, "reserved": 1})
    );
    assert_eq!(body["quota_set"]["id"], "acme");

    // Rule 6 in Nova's words: below usage without force is a 400 badRequest.
    let (status, body) = nova
        .send(
            Method::PUT,
            "/os-quota-sets/acme",
            ADMIN,
            Some(json!({"quota_set": {"instances": 2}})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["badRequest"]["code"], 400);
    assert!(body["badRequest"]["message"].is_string(), "{body}");
    let (status, _) = nova
        .send(
            Method::PUT,
            "/os-quota-sets/acme",
            ADMIN,
            Some(json!({"quota_set": {"instances": 2, "force": true}})),
        )
        .await;
    assert_eq!(status, 200);

    // Defaults, and a delete back to them: 202 with no body.
    let (status, body) = nova
        .send(Method::GET, "/os-quota-sets/acme/defaults", ACME, None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["quota_set"]["instances"], 10);
    let (status, body) = nova
        .send(Method::DELETE, "/os-quota-sets/acme", ADMIN, None)
        .await;
    assert_eq!((status, body), (202, Value::Null));
    let (_, body) = nova
        .send(Method::GET, "/os-quota-sets/acme", ACME, None)
        .await;
    assert_eq!(body["quota_set"]["instances"], 10);

    // Nova's error bodies: a project token out of scope, a bad token, an unknown resource,
    // an unknown class, a user id outside the id grammar.
    let cases = [
        (
            Method::PUT,
            "/os-quota-sets/acme",
            ACME,
            Some(json!({"quota_set": {"instances": 1}})),
            403,
            "forbidden",
        ),
        (
            Method::GET,
            "/os-quota-sets/other",
            ACME,
            None,
            403,
            "forbidden",
        ),
        (
            Method::GET,
            "/os-quota-sets/acme",
            "not-a-token-at-all-0000",
            None,
            401,
            "unauthorized",
        ),
        (
            Method::PUT,
            "/os-quota-sets/acme",
            ADMIN,
            Some(json!({"quota_set": {"gpus": 1}})),
            400,
            "badRequest",
        ),
        (
            Method::PUT,
            "/os-quota-sets/acme",
            ADMIN,
            Some(json!({"quota_set": {"instances": "many"}})),
            400,
            "badRequest",
        ),
        (
            Method::GET,
            "/os-quota-class-sets/gold",
            ADMIN,
            None,
            404,
            "itemNotFound",
        ),
        (
            Method::GET,
            "/os-quota-sets/acme?user_id=a%20b",
            ADMIN,
            None,
            400,
            "badRequest",
        ),
    ];
    for (method, path, token, body, status, fault) in cases {
        let (got, answer) = nova.send(method.clone(), path, token, body).await;
        assert_eq!(got, status, "{method} {path}: {answer}");
        assert_eq!(answer[fault]["code"], status, "{method} {path}: {answer}");
        assert!(answer[fault]["message"].is_string(), "{answer}");
    }
}

/// `?user_id=u`: the user's quota set (its own limits over the project's), its usage in the
/// detail, an update with Nova's force semantics on the user's usage, and a delete back to the
/// project's limits.
#[tokio::test]
async fn quota_sets_for_a_user_inside_the_project() {
    let dir = tempfile::tempdir().expect("dir");
    let tokens = tokens_file(dir.path(), &format!("{ADMIN} admin\n{ACME} project:acme\n"));
    let store = sqlite_store();
    let server = Server::start_with_tokens(&store, &tokens);
    let nova = Nova {
        http: reqwest::Client::new(),
        base: server.url.clone(),
    };
    use reqwest::Method;
    let (status, _) = nova
        .send(
            Method::PUT,
            "/os-quota-class-sets/default",
            ADMIN,
            Some(json!({"quota_class_set": {"instances": 10, "cores": 20, "ram": 51200}})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = nova
        .send(
            Method::PUT,
            "/os-quota-sets/acme",
            ADMIN,
            Some(json!({"quota_set": {"instances": 8}})),
        )
        .await;
    assert_eq!(status, 200);
    let alice = "/os-quota-sets/acme?user_id=alice";

    // A user without overrides has the project's set.
    let (status, body) = nova.send(Method::GET, alice, ACME, None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"quota_set": {"id": "acme", "instances": 8, "cores": 20, "ram": 51200}})
    );
    // An update answers the user's set, without id; the project's stays.
    let (status, body) = nova
        .send(
            Method::PUT,
            alice,
            ADMIN,
            Some(json!({"quota_set": {"instances": "2", "force": false}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"quota_set": {"instances": 2, "cores": 20, "ram": 51200}})
    );
    let (_, body) = nova.send(Method::GET, alice, ACME, None).await;
    assert_eq!(body["quota_set"]["instances"], 2, "{body}");
    let (_, body) = nova
        .send(Method::GET, "/os-quota-sets/acme", ACME, None)
        .await;
    assert_eq!(body["quota_set"]["instances"], 8, "{body}");
    let api = common::Api::new(&server.url, Some(ACME));
    let v1 = api.get("/v1/projects/acme/users/alice/limits").await;
    assert_eq!(
        v1.assert_status(200)["limits"]["instances"],
        json!({"limit": 2, "source": "user"})
    );

    // The detail is the user's usage: alice's committed 1 and held 1, not bob's 3.
    let path = "/v1/projects/acme/reservations";
    let held = api
        .post(path, json!({"deltas": {"instances": 1}, "user": "alice"}))
        .await;
    let id = held.assert_status(201)["reservation_id"]
        .as_str()
        .expect("id")
        .to_owned();
    api.commit("acme", &id).await.assert_status(200);
    api.post(path, json!({"deltas": {"instances": 1}, "user": "alice"}))
        .await
        .assert_status(201);
    api.post(path, json!({"deltas": {"instances": 3}, "user": "bob"}))
        .await
        .assert_status(201);
    let (status, body) = nova
        .send(
            Method::GET,
            "/os-quota-sets/acme/detail?user_id=alice",
            ACME,
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["quota_set"]["id"], "acme");
    assert_eq!(
        body["quota_set"]["instances"],
        json!({"in_use": 1, "limit": 2, "reserved": 1})
    );
    assert_eq!(
        body["quota_set"]["cores"],
        json!({"in_use": 0, "limit": 20, "reserved": 0})
    );

    // Rule 6 on the user's usage, in Nova's words; with force it goes through.
    let (status, body) = nova
        .send(
            Method::PUT,
            alice,
            ADMIN,
            Some(json!({"quota_set": {"instances": 1}})),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["badRequest"]["code"], 400, "{body}");
    assert!(body["badRequest"]["message"].is_string(), "{body}");
    let (status, body) = nova
        .send(
            Method::PUT,
            alice,
            ADMIN,
            Some(json!({"quota_set": {"instances": 1, "force": true}})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["quota_set"]["instances"], 1);
    // The project's own limit is above bob's and alice's usage together: untouched.
    let (_, body) = nova
        .send(Method::GET, "/os-quota-sets/acme/detail", ACME, None)
        .await;
    assert_eq!(body["quota_set"]["instances"]["limit"], 8, "{body}");

    // A delete: 202 with no body, and the user is back on the project's limits.
    let (status, body) = nova.send(Method::DELETE, alice, ADMIN, None).await;
    assert_eq!((status, body), (202, Value::Null));
    let (_, body) = nova.send(Method::GET, alice, ACME, None).await;
    assert_eq!(body["quota_set"]["instances"], 8, "{body}");

    // Scope and input, in Nova's error bodies.
    for (method, path, token, body, status, fault) in [
        (
            Method::PUT,
            alice,
            ACME,
            Some(json!({"quota_set": {"instances": 5}})),
            403,
            "forbidden",
        ),
        (Method::DELETE, alice, ACME, None, 403, "forbidden"),
        (
            Method::GET,
            "/os-quota-sets/other?user_id=alice",
            ACME,
            None,
            403,
            "forbidden",
        ),
        (
            Method::GET,
            "/os-quota-sets/acme/detail?user_id=a%20b",
            ADMIN,
            None,
            400,
            "badRequest",
        ),
        (
            Method::PUT,
            alice,
            ADMIN,
            Some(json!({"quota_set": {"gpus": 1}})),
            400,
            "badRequest",
        ),
        (
            Method::DELETE,
            "/os-quota-sets/acme?user_id=",
            ADMIN,
            None,
            400,
            "badRequest",
        ),
    ] {
        let (got, answer) = nova.send(method.clone(), path, token, body).await;
        assert_eq!(got, status, "{method} {path}: {answer}");
        assert_eq!(answer[fault]["code"], status, "{method} {path}: {answer}");
    }
}
