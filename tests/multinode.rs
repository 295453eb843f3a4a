//! Several nodes: three `quota serve` processes on one PostgreSQL schema. A burst of reserves
//! spread over all three grants exactly K; with one node killed (SIGKILL) mid-burst, nothing
//! acknowledged changes, and once the requests the dead node never answered are retried on the
//! survivors (same client-chosen ids), exactly K are granted in all.
//!
//! Needs `QUOTA_TEST_POSTGRES_URL`; skipped without it.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{postgres_store, Api, Server};
use serde_json::json;
use uuid::Uuid;

const K: usize = 10;
const BURST: usize = 45;

/// One reserve of `{"instances": 1}` with a client-chosen id; `None` if no answer came.
async fn reserve(base: String, project: String, id: Uuid) -> Option<u16> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let response = http
        .post(format!("{base}/v1/projects/{project}/reservations"))
        .json(&json!({"deltas": {"instances": 1}, "reservation_id": id}))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    response.text().await.ok()?;
    Some(status)
}

/// Sends the burst over `bases` round robin; returns each id's answer.
async fn burst(
    bases: &[String],
    project: &str,
    kill_after: Option<(Duration, Server)>,
) -> HashMap<Uuid, Option<u16>> {
    let ids: Vec<Uuid> = (0..BURST).map(|_| Uuid::new_v4()).collect();
    let tasks: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            tokio::spawn(reserve(
                bases[i % bases.len()].clone(),
                project.to_owned(),
                *id,
            ))
        })
        .collect();
    if let Some((after, victim)) = kill_after {
        tokio::time::sleep(after).await;
        drop(victim); // SIGKILL
    }
    let mut answers = HashMap::new();
    for (id, task) in ids.into_iter().zip(tasks) {
        answers.insert(id, task.await.unwrap());
    }
    answers
}

fn count(answers: &HashMap<Uuid, Option<u16>>, status: u16) -> usize {
    answers.values().filter(|a| **a == Some(status)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_grant_exactly_k_even_with_one_killed_mid_burst() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let nodes: Vec<Server> = (0..3).map(|_| Server::start(&store)).collect();
    let mut bases: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    nodes[0]
        .client()
        .set_defaults(json!({"instances": K}))
        .await;

    // All three up: exactly K of the burst granted, the rest denied.
    let answers = burst(&bases, "multi-all", None).await;
    assert_eq!(count(&answers, 201), K, "{answers:?}");
    assert_eq!(count(&answers, 403), BURST - K, "{answers:?}");

    // Node 2 killed mid-burst, at a different instant each round (restarted in between).
    let mut nodes = nodes;
    let mut figures = vec![];
    for (round, kill_ms) in [5u64, 25, 60].into_iter().enumerate() {
        let project = format!("multi-kill-{round}");
        let victim = nodes.pop().unwrap();
        let answers = burst(
            &bases,
            &project,
            Some((Duration::from_millis(kill_ms), victim)),
        )
        .await;
        let survivor: Api = nodes[0].client();
        let granted = count(&answers, 201);
        let unanswered = answers.values().filter(|a| a.is_none()).count();
        assert!(granted <= K, "{answers:?}");
        assert!(
            answers
                .values()
                .all(|a| matches!(a, None | Some(201) | Some(403))),
            "{answers:?}"
        );
        // Nothing acknowledged changed: each grant is held, each denial left no reservation.
        for (id, answer) in &answers {
            let stored = survivor
                .get(&format!("/v1/projects/{project}/reservations/{id}"))
                .await;
            match answer {
                Some(201) => assert_eq!(stored.assert_status(200)["status"], "held"),
                Some(403) => assert_eq!(stored.status, 404, "{id} was denied: {:?}", stored.body),
                _ => {}
            }
        }
        // The requests the dead node never answered, retried on a survivor with the same ids:
        // in all, exactly K granted.
        let mut total_granted = granted;
        for (id, answer) in &answers {
            if answer.is_none() {
                match reserve(bases[0].clone(), project.clone(), *id).await {
                    Some(201) => total_granted += 1,
                    Some(403) => {}
                    other => panic!("retry of {id}: {other:?}"),
                }
            }
        }
        assert_eq!(total_granted, K, "round {round}");
        figures.push(format!(
            "kill at {kill_ms} ms: {granted} granted + {unanswered} unanswered -> {total_granted}"
        ));
        let restarted = Server::start(&store);
        bases[2] = restarted.url.clone();
        nodes.push(restarted);
    }
    let event_store = ledger::store::open(&store.url).await.unwrap();
    let replay = bench::replay_checking_limits(&*event_store).await.unwrap();
    assert_eq!(replay.over_limit, 0);
    eprintln!(
        "multinode: 3 nodes, bursts of {BURST} against room for {K}: exactly {K} granted; \
         with a node killed mid-burst (then retried on the others): {}",
        figures.join("; ")
    );
}
