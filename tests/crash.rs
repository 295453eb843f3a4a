//! Crash test: `quota serve` is killed with SIGKILL at random instants, many times, while several
//! clients reserve, commit and release over HTTP with client-chosen reservation ids, and is
//! restarted on the same store each time. Clients retry every unanswered request with the same
//! id (so a retry after a crash is idempotent) until it is answered.
//!
//! Afterwards: every acknowledged answer is in the ledger with at least the acknowledged status
//! (an acknowledged denial left no reservation behind), no project is over any limit at any
//! position of the log, and `quota projections verify` finds nothing to report.
//!
//! Bounded: about 20 s of killing per backend, then a short calm phase and the checks.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use common::{postgres_store, sqlite_store, Server, StoreUrl, BINARY};
use rand::{rngs::StdRng, Rng, SeedableRng};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

const CLIENTS: u64 = 6;
const PROJECTS: usize = 3;
const KILLING_FOR: Duration = Duration::from_secs(20);
const MAX_KILLS: u64 = 20;
/// Load continues this long on the last server, so that pending retries get their answers.
const CALM_FOR: Duration = Duration::from_secs(2);
/// An unanswered request is retried until then; a request still unanswered is not acknowledged.
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);
const INSTANCES_LIMIT: i64 = 4;
const CORES_LIMIT: i64 = 10;

fn project(i: usize) -> String {
    format!("crash-{i}")
}

/// What the client was last told about one reservation, and what it tried since.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Acked {
    Held,
    Committed,
    Released,
    Denied,
}

#[derive(Debug)]
struct Record {
    project: String,
    deltas: Value,
    acked: Acked,
    commit_tried: bool,
    release_tried: bool,
}

/// The base URL of whichever server is up now; it changes at each restart.
type CurrentUrl = Arc<RwLock<String>>;

#[derive(Default)]
struct Counters {
    acknowledged: AtomicU64,
    retries: AtomicU64,
}

/// Sends until answered with anything but 503 or a transport error; `None` if never answered.
async fn send_until_answered(
    http: &reqwest::Client,
    url: &CurrentUrl,
    method: Method,
    path: &str,
    body: Option<&Value>,
    counters: &Counters,
) -> Option<(StatusCode, Value)> {
    let started = Instant::now();
    while started.elapsed() < GIVE_UP_AFTER {
        let base = url.read().unwrap().clone();
        let mut request = http.request(method.clone(), format!("{base}{path}"));
        if let Some(body) = body {
            request = request.json(body);
        }
        match request.send().await {
            Ok(response) if response.status() != StatusCode::SERVICE_UNAVAILABLE => {
                let status = response.status();
                // A kill between the head and the body is a transport error too: retry.
                if let Ok(text) = response.text().await {
                    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
                    return Some((status, body));
                }
            }
            _ => {}
        }
        counters.retries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    None
}

async fn client(
    seed: u64,
    url: CurrentUrl,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
) -> HashMap<Uuid, Record> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut mine: HashMap<Uuid, Record> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        let open: Vec<Uuid> = mine
            .iter()
            .filter(|(_, r)| matches!(r.acked, Acked::Held | Acked::Committed))
            .map(|(id, _)| *id)
            .collect();
        if open.is_empty() || rng.gen_bool(0.5) {
            let id = Uuid::new_v4();
            let p = project(rng.gen_range(0..PROJECTS));
            let deltas = json!({"instances": 1, "cores": rng.gen_range(1..4)});
            let body = json!({"deltas": deltas, "expires_in": 600, "reservation_id": id});
            let path = format!("/v1/projects/{p}/reservations");
            let answer =
                send_until_answered(&http, &url, Method::POST, &path, Some(&body), &counters).await;
            let acked = match answer {
                None => continue,
                Some((StatusCode::CREATED, body)) => {
                    assert_eq!(body["status"], "held", "{body}");
                    Acked::Held
                }
                Some((StatusCode::FORBIDDEN, body)) => {
                    assert!(body["type"].as_str().unwrap().ends_with("over-quota"));
                    Acked::Denied
                }
                Some((status, body)) => panic!("reserve answered {status}: {body}"),
            };
            counters.acknowledged.fetch_add(1, Ordering::Relaxed);
            mine.insert(
                id,
                Record {
                    project: p,
                    deltas,
                    acked,
                    commit_tried: false,
                    release_tried: false,
                },
            );
        } else {
            let id = open[rng.gen_range(0..open.len())];
            let record = mine.get_mut(&id).unwrap();
            let commit = record.acked == Acked::Held && rng.gen_bool(0.7);
            if commit {
                record.commit_tried = true;
            } else {
                record.release_tried = true;
            }
            let action = if commit { "commit" } else { "release" };
            let path = format!("/v1/projects/{}/reservations/{id}/{action}", record.project);
            let answer =
                send_until_answered(&http, &url, Method::POST, &path, None, &counters).await;
            match answer {
                None => continue,
                Some((StatusCode::OK, body)) => {
                    let expected = if commit { "committed" } else { "released" };
                    assert_eq!(body["status"], expected, "{action} {id}: {body}");
                    record.acked = if commit {
                        Acked::Committed
                    } else {
                        Acked::Released
                    };
                }
                Some((status, body)) => panic!("{action} {id} answered {status}: {body}"),
            }
            counters.acknowledged.fetch_add(1, Ordering::Relaxed);
        }
    }
    mine
}

/// Kills the server with SIGKILL at random instants and restarts it on the same store, until
/// `KILLING_FOR` has passed; returns the last server (up) and the number of kills.
fn killer(store_url: String, first: Server, url: CurrentUrl, seed: u64) -> (Server, u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut server = first;
    let mut kills = 0;
    let started = Instant::now();
    while started.elapsed() < KILLING_FOR && kills < MAX_KILLS {
        std::thread::sleep(Duration::from_millis(rng.gen_range(200..1200)));
        // Dropping a `Server` kills it with SIGKILL (std's Child::kill) and reaps it.
        drop(server);
        kills += 1;
        server = Server::start_with(common::ServerOptions {
            store: &store_url,
            tokens: None,
            extra: &[],
        });
        *url.write().unwrap() = server.url.clone();
    }
    (server, kills)
}

async fn crash_and_check(store: StoreUrl, backend: &str) {
    let started = Instant::now();
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(json!({"instances": INSTANCES_LIMIT, "cores": CORES_LIMIT}))
        .await;
    // One project with a tighter limit of its own.
    api.put(
        &format!("/v1/projects/{}/limits", project(0)),
        json!({"limits": {"instances": 2}}),
    )
    .await
    .assert_status(200);

    let url: CurrentUrl = Arc::new(RwLock::new(server.url.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counters::default());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|seed| tokio::spawn(client(seed, url.clone(), stop.clone(), counters.clone())))
        .collect();
    let killer_url = url.clone();
    let store_url = store.url.clone();
    let (server, kills) =
        tokio::task::spawn_blocking(move || killer(store_url, server, killer_url, 6))
            .await
            .unwrap();
    tokio::time::sleep(CALM_FOR).await;
    stop.store(true, Ordering::Relaxed);
    let mut records: HashMap<Uuid, Record> = HashMap::new();
    for c in clients {
        records.extend(c.await.unwrap());
    }

    // Every acknowledged answer is durable: read each reservation back from the last server.
    let api = server.client();
    let mut lost = 0;
    let mut granted = 0;
    for (id, record) in &records {
        let answer = api
            .get(&format!(
                "/v1/projects/{}/reservations/{id}",
                record.project
            ))
            .await;
        let stored = match answer.status {
            200 => {
                assert_eq!(answer.body["deltas"], record.deltas, "{id}");
                answer.body["status"].as_str().unwrap().to_owned()
            }
            404 => "absent".to_owned(),
            other => panic!("GET {id}: {other} {:?}", answer.body),
        };
        let allowed: &[&str] = match record.acked {
            Acked::Denied => &["absent"],
            Acked::Held => match (record.commit_tried, record.release_tried) {
                (false, false) => &["held"],
                (true, false) => &["held", "committed"],
                (false, true) => &["held", "released"],
                (true, true) => &["held", "committed", "released"],
            },
            Acked::Committed if record.release_tried => &["committed", "released"],
            Acked::Committed => &["committed"],
            Acked::Released => &["released"],
        };
        if record.acked != Acked::Denied {
            granted += 1;
        }
        if !allowed.contains(&stored.as_str()) {
            eprintln!("LOST: {id} acknowledged {record:?}, stored {stored}");
            lost += 1;
        }
    }

    // Let the views catch up with the log, then stop the server cleanly.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let views = api.get("/v1/admin/projections").await;
        let caught_up = views.status == 200
            && views.body.as_array().is_some_and(|all| {
                all.iter()
                    .all(|v| v["lag"].as_u64() == Some(0) && v["head"].as_u64().is_some())
            });
        if caught_up {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "views never caught up: {:?}",
            views.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(server.terminate(), "quota serve did not stop cleanly");

    // No project was over any limit at any position of the log.
    let event_store = ledger::store::open(&store.url).await.unwrap();
    let replay = bench::replay_checking_limits(&*event_store).await.unwrap();
    drop(event_store);

    let verify = std::process::Command::new(BINARY)
        .args(["projections", "verify", "--store", &store.url])
        .output()
        .unwrap();

    eprintln!(
        "crash {backend}: {kills} kills survived, {} operations acknowledged ({granted} \
         reservations granted, {} denied), {} retries, {lost} lost, {} events replayed, \
         {} over a limit, {:.1} s",
        counters.acknowledged.load(Ordering::Relaxed),
        records.len() - granted,
        counters.retries.load(Ordering::Relaxed),
        replay.events,
        replay.over_limit,
        started.elapsed().as_secs_f64(),
    );
    assert_eq!(lost, 0, "acknowledged operations were lost");
    assert_eq!(replay.over_limit, 0, "a project was over a limit");
    assert!(
        verify.status.success(),
        "quota projections verify failed:\n{}\n{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(kills >= 3, "only {kills} kills happened");
    assert!(
        counters.acknowledged.load(Ordering::Relaxed) > 50,
        "too little load to mean anything"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_sqlite() {
    crash_and_check(sqlite_store(), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_postgres() {
    if let Some(store) = postgres_store().await {
        crash_and_check(store, "postgres").await;
    }
}
