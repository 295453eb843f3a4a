//! Auth: who may do what, and the tokens file it uses.

use reqwest::Method;
use serde_json::json;

use super::super::{Api, Body};
use super::id_of;

/// Auth: who may do what, with the tokens of `TOKENS`.
pub async fn auth_scoping(base: &str) {
    let admin = Api::new(base, Some("admin-secret-0123456789"));
    let auditor = Api::new(base, Some("auditor-secret-0123456789"));
    let acme = Api::new(base, Some("acme-secret-0123456789"));
    let anonymous = Api::new(base, None);
    let wrong = Api::new(base, Some("not-a-token"));

    // No token or an unknown one: 401 everywhere but the open endpoints.
    for api in [&anonymous, &wrong] {
        let answer = api.get("/v1/defaults").await;
        answer.assert_problem(401, "unauthorized");
        assert!(answer.headers.get("www-authenticate").is_some());
        api.reserve("acme", json!({"instances": 1}))
            .await
            .assert_problem(401, "unauthorized");
        api.get("/v1/projects/acme/limits")
            .await
            .assert_problem(401, "unauthorized");
        assert_eq!(api.get("/healthz").await.status, 200);
        assert_eq!(api.get("/openapi.json").await.status, 200);
        assert_eq!(api.get("/metrics").await.status, 200);
    }
    // A malformed Authorization header is a 401 too.
    anonymous
        .get_with_header("/v1/defaults", "authorization", "Basic YWRtaW46YWRtaW4=")
        .await
        .assert_problem(401, "unauthorized");

    // Admin: everything.
    admin
        .set_defaults(json!({"instances": 10, "cores": 20}))
        .await;
    admin
        .put(
            "/v1/projects/acme/limits",
            json!({"limits": {"instances": 5}}),
        )
        .await
        .assert_status(200);
    let held = admin.reserve("acme", json!({"instances": 1})).await;
    let admin_hold = id_of(&held);

    // A project token: reserve, commit, release and read its own project only.
    assert_eq!(acme.get("/v1/defaults").await.status, 200);
    let own = acme.reserve("acme", json!({"instances": 1})).await;
    let own_id = id_of(&own);
    acme.commit("acme", &own_id).await.assert_status(200);
    acme.release("acme", &own_id).await.assert_status(200);
    acme.release("acme", &admin_hold).await.assert_status(200);
    acme.get(&format!("/v1/projects/acme/reservations/{own_id}"))
        .await
        .assert_status(200);
    acme.get("/v1/projects/acme/limits")
        .await
        .assert_status(200);
    assert_ne!(acme.get("/v1/projects/acme/usage").await.status, 403);
    assert_ne!(acme.get("/v1/projects/acme/audit").await.status, 403);
    for answer in [
        acme.reserve("other", json!({"instances": 1})).await,
        acme.get("/v1/projects/other/limits").await,
        acme.get("/v1/projects/other/usage").await,
        acme.get("/v1/projects/other/audit").await,
        acme.get(&format!("/v1/projects/other/reservations/{own_id}"))
            .await,
        acme.commit("other", &own_id).await,
        acme.put(
            "/v1/projects/acme/limits",
            json!({"limits": {"instances": 50}}),
        )
        .await,
        acme.delete("/v1/projects/acme/limits").await,
        acme.put("/v1/defaults", json!({"limits": {"instances": 50}}))
            .await,
        acme.get("/v1/admin/projections").await,
        acme.post_empty("/v1/admin/projections/usage/rebuild").await,
        // Out of scope is refused before the body is even looked at.
        acme.send(
            Method::POST,
            "/v1/projects/other/reservations",
            Some(Body::Raw("garbage".into())),
        )
        .await,
    ] {
        answer.assert_problem(403, "forbidden");
    }

    // The auditor reads everything and writes nothing.
    auditor.get("/v1/defaults").await.assert_status(200);
    auditor
        .get("/v1/projects/acme/limits")
        .await
        .assert_status(200);
    auditor
        .get("/v1/projects/other/limits")
        .await
        .assert_status(200);
    auditor
        .get(&format!("/v1/projects/acme/reservations/{own_id}"))
        .await
        .assert_status(200);
    assert_ne!(auditor.get("/v1/projects/other/usage").await.status, 403);
    assert_ne!(auditor.get("/v1/projects/other/audit").await.status, 403);
    for answer in [
        auditor.reserve("acme", json!({"instances": 1})).await,
        auditor.commit("acme", &own_id).await,
        auditor.release("acme", &own_id).await,
        auditor
            .put(
                "/v1/projects/acme/limits",
                json!({"limits": {"instances": 1}}),
            )
            .await,
        auditor.delete("/v1/projects/acme/limits").await,
        auditor
            .put("/v1/defaults", json!({"limits": {"instances": 1}}))
            .await,
        auditor
            .post_empty("/v1/admin/projections/usage/rebuild")
            .await,
    ] {
        answer.assert_problem(403, "forbidden");
    }
    // Nothing the refused requests tried took effect.
    let limits = admin.get("/v1/projects/acme/limits").await;
    assert_eq!(limits.assert_status(200)["limits"]["instances"]["limit"], 5);
    assert_eq!(
        admin.get("/v1/defaults").await.body["limits"]["instances"],
        10
    );
    admin.delete("/v1/projects/acme/limits").await;
    assert_eq!(
        admin.get("/v1/projects/acme/limits").await.body["limits"]["instances"]["source"],
        "default"
    );
}

/// The tokens file used by [`auth_scoping`].
pub const TOKENS: &str = "# test tokens\n\
    admin-secret-0123456789 admin\n\
    auditor-secret-0123456789 auditor\n\
    acme-secret-0123456789 project:acme   # the acme tenant\n\
    other-secret-0123456789 project:other\n";
