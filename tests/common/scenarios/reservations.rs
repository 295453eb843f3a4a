//! The reservation rows: reserve, commit, release, over-quota, expiry and the seed burst.

use std::collections::BTreeMap;

use serde_json::json;

use super::super::Api;
use super::{id_of, is_rfc3339_utc};

/// The reservation rows: reserve, get, commit, release, and each of their errors.
pub async fn reservation_rows(api: &Api) {
    api.set_defaults(json!({"instances": 10, "cores": 20, "ram": -1}))
        .await;

    // A boot: reserve then commit.
    let reserved = api
        .reserve("acme", json!({"instances": 1, "cores": 2, "ram": 4096}))
        .await;
    let body = reserved.assert_status(201).clone();
    let id = id_of(&reserved);
    assert!(uuid::Uuid::parse_str(&id).is_ok());
    assert_eq!(body["project"], "acme");
    assert_eq!(
        body["deltas"],
        json!({"instances": 1, "cores": 2, "ram": 4096})
    );
    assert_eq!(body["status"], "held");
    assert!(
        is_rfc3339_utc(&body["created_at"]) && is_rfc3339_utc(&body["expires_at"]),
        "{body}"
    );
    let created =
        chrono::DateTime::parse_from_rfc3339(body["created_at"].as_str().unwrap_or_default())
            .expect("time");
    let expires =
        chrono::DateTime::parse_from_rfc3339(body["expires_at"].as_str().unwrap_or_default())
            .expect("time");
    assert_eq!((expires - created).num_seconds(), 86_400, "default expiry");
    assert!(body.get("reason").is_none());
    let reserve_position = body["position"].as_u64().expect("position");

    let got = api
        .get(&format!("/v1/projects/acme/reservations/{id}"))
        .await;
    assert_eq!(got.assert_status(200), &body);

    let committed = api.commit("acme", &id).await;
    let committed_body = committed.assert_status(200).clone();
    assert_eq!(committed_body["status"], "committed");
    assert!(committed_body["position"].as_u64().expect("position") > reserve_position);
    // Idempotent: the same answer, nothing recorded.
    assert_eq!(
        api.commit("acme", &id).await.assert_status(200),
        &committed_body
    );

    // Releasing a committed reservation frees its usage.
    let released = api.release("acme", &id).await;
    let released_body = released.assert_status(200).clone();
    assert_eq!(released_body["status"], "released");
    assert_eq!(released_body["reason"], "freed");
    assert_eq!(
        api.release("acme", &id).await.assert_status(200),
        &released_body
    );
    api.commit("acme", &id)
        .await
        .assert_problem(409, "reservation-released");

    // Roll back a hold; committing it afterwards is refused.
    let hold = api.reserve("acme", json!({"instances": 1})).await;
    let hold_id = id_of(&hold);
    let rolled_back = api.release("acme", &hold_id).await;
    assert_eq!(rolled_back.assert_status(200)["reason"], "rolled_back");
    api.commit("acme", &hold_id)
        .await
        .assert_problem(409, "reservation-released");

    // Commit and release accept an optional body with audit fields.
    let hold = api.reserve("acme", json!({"instances": 1})).await;
    let hold_id = id_of(&hold);
    let with_actor = api
        .post(
            &format!("/v1/projects/acme/reservations/{hold_id}/commit"),
            json!({"actor": "nova-compute-1"}),
        )
        .await;
    assert_eq!(with_actor.assert_status(200)["status"], "committed");

    // Client-chosen ids: the same body answers the original; another body is a mismatch.
    let chosen = uuid::Uuid::new_v4().to_string();
    let request = json!({"deltas": {"instances": 2}, "reservation_id": chosen, "expires_in": 600});
    let first = api
        .post("/v1/projects/acme/reservations", request.clone())
        .await;
    let first_body = first.assert_status(201).clone();
    assert_eq!(first_body["reservation_id"], chosen);
    let again = api.post("/v1/projects/acme/reservations", request).await;
    assert_eq!(again.assert_status(201), &first_body);
    api.post(
        "/v1/projects/acme/reservations",
        json!({"deltas": {"instances": 3}, "reservation_id": chosen, "expires_in": 600}),
    )
    .await
    .assert_problem(409, "idempotency-mismatch");

    // Not found.
    let missing = uuid::Uuid::new_v4();
    api.get(&format!("/v1/projects/acme/reservations/{missing}"))
        .await
        .assert_problem(404, "not-found");
    api.commit("acme", &missing.to_string())
        .await
        .assert_problem(404, "not-found");
    api.release("acme", &missing.to_string())
        .await
        .assert_problem(404, "not-found");
    // A reservation belongs to its project.
    api.get(&format!("/v1/projects/other/reservations/{chosen}"))
        .await
        .assert_problem(404, "not-found");

    // Unknown resource: a typo never becomes unlimited.
    let typo = api.reserve("acme", json!({"instancess": 1})).await;
    typo.assert_problem(400, "unknown-resource");
    assert_eq!(typo.body["resources"], json!(["instancess"]));

    // Negative deltas below zero in_use.
    let underflow = api.reserve("acme", json!({"cores": -100})).await;
    underflow.assert_problem(409, "usage-underflow");
}

/// 403 over-quota with its fields, and all-or-nothing.
pub async fn over_quota_row(api: &Api) {
    api.set_defaults(json!({"instances": 10, "cores": 20, "ram": -1}))
        .await;
    let first = api
        .reserve("boot", json!({"instances": 8, "cores": 4}))
        .await;
    first.assert_status(201);
    let denied = api
        .reserve("boot", json!({"instances": 3, "cores": 30, "ram": 1}))
        .await;
    denied.assert_problem(403, "over-quota");
    let body = &denied.body;
    assert_eq!(
        body["overs"],
        json!(["cores", "instances"]),
        "sorted: {body}"
    );
    assert_eq!(body["limits"]["instances"], 10);
    assert_eq!(body["limits"]["cores"], 20);
    assert_eq!(body["limits"]["ram"], -1);
    assert_eq!(
        body["usage"]["instances"],
        json!({"in_use": 0, "reserved": 8})
    );
    assert_eq!(body["usage"]["cores"], json!({"in_use": 0, "reserved": 4}));
    assert_eq!(body["headroom"]["instances"], 2);
    assert_eq!(body["headroom"]["cores"], 16);
    assert!(
        body["headroom"].get("ram").is_none(),
        "no headroom when unlimited: {body}"
    );
    // Nothing was reserved: the exact remaining room is still grantable.
    api.reserve("boot", json!({"instances": 2, "cores": 16}))
        .await
        .assert_status(201);
    api.reserve("boot", json!({"instances": 1}))
        .await
        .assert_problem(403, "over-quota");
}

/// A hold past its expiry stops counting at once, and committing it is refused.
pub async fn expiry_row(api: &Api) {
    api.set_defaults(json!({"instances": 1})).await;
    let short = api
        .post(
            "/v1/projects/late/reservations",
            json!({"deltas": {"instances": 1}, "expires_in": 1}),
        )
        .await;
    let id = id_of(&short);
    assert_eq!(short.assert_status(201)["status"], "held");
    api.reserve("late", json!({"instances": 1}))
        .await
        .assert_problem(403, "over-quota");
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    // The room is back, whether or not the sweeper has recorded the expiry.
    let next = api.reserve("late", json!({"instances": 1})).await;
    next.assert_status(201);
    api.commit("late", &id)
        .await
        .assert_problem(409, "reservation-expired");
    let expired = api
        .get(&format!("/v1/projects/late/reservations/{id}"))
        .await;
    let body = expired.assert_status(200);
    assert_eq!(body["status"], "released");
    assert_eq!(body["reason"], "expired");
}

/// The seed bug (Nova 938317): 20 concurrent reserves against room for 10 grant exactly 10.
/// The requests are spread round-robin over `apis` (several nodes on one database).
pub async fn seed_burst(apis: &[Api], project: &str) {
    apis[0]
        .set_defaults(json!({"instances": 10, "cores": 1000, "ram": -1}))
        .await;
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let api = apis[i % apis.len()].clone();
            let project = project.to_owned();
            tokio::spawn(async move {
                api.reserve(&project, json!({"instances": 1, "cores": 2, "ram": 4096}))
                    .await
            })
        })
        .collect();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for task in tasks {
        let answer = task.await.expect("task");
        if answer.status == 403 {
            answer.assert_problem(403, "over-quota");
        }
        *statuses.entry(answer.status).or_default() += 1;
    }
    assert_eq!(
        statuses,
        BTreeMap::from([(201, 10), (403, 10)]),
        "exactly 10 granted"
    );
    // And the ledger agrees: no room left on any node.
    for api in apis {
        api.reserve(project, json!({"instances": 1}))
            .await
            .assert_problem(403, "over-quota");
    }
}
