//! Crash test of linked chains (SPEC rule 11: a decision in a child appends to the streams of
//! the child and of every ancestor as one linked chain, whole or not at all). Two trees are
//! built (`root` with children `mid` and `c`, `mid` with children `a` and `b`); then `quota
//! serve` is killed with SIGKILL at random instants, many times, while clients reserve (some
//! for a second only, so the sweeper expires them too), commit and release in `mid`, `a`, `b`
//! and `c` over HTTP, retrying every unanswered request with the same reservation id.
//!
//! After each kill, before the restart, the store is read afresh: for every change of a
//! project's usage (a hold begun, committed, released or expired) each of its ancestors
//! recorded the matching `Descendant*` event (same descendant, reservation and in_use change),
//! once and after it, and no ancestor recorded one that did not happen; and no subtree was over
//! its limit at any grant. At the end, the same, and `quota projections verify` is clean.

mod common;
#[path = "crash_tree/log.rs"]
mod log;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use common::{postgres_store, sqlite_store, Server, ServerOptions, StoreUrl, BINARY};
use domain::{Limit, Limits, ProjectId, ResourceName};
use ledger::{Ledger, LedgerConfig, Metadata, SystemClock};
use log::{check_log, LogReport};
use rand::{rngs::StdRng, Rng, SeedableRng};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use uuid::Uuid;

const TREES: usize = 2;
const CLIENTS: u64 = 6;
const KILLING_FOR: Duration = Duration::from_secs(20);
const MAX_KILLS: u64 = 15;
const CALM_FOR: Duration = Duration::from_secs(2);
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

/// The projects of a tree, by index, and each one's parent.
const NODES: [&str; 5] = ["root", "mid", "a", "b", "c"];
const PARENT: [Option<usize>; 5] = [None, Some(0), Some(1), Some(1), Some(0)];
/// The projects reservations are made in.
const RESERVERS: [usize; 4] = [1, 2, 3, 4];
/// The defaults, and the limits root and mid set for their subtrees.
const DEFAULTS: [(&str, i64); 2] = [("instances", 5), ("cores", 15)];
const ROOT_LIMITS: [(&str, i64); 2] = [("instances", 12), ("cores", 30)];
const MID_LIMITS: [(&str, i64); 1] = [("instances", 8)];

fn project(t: usize, node: usize) -> ProjectId {
    ProjectId::parse(&format!("ct{t}-{}", NODES[node])).unwrap()
}

/// (tree, node) of a project of this test.
fn place(project: &ProjectId) -> (usize, usize) {
    let (tree, node) = project
        .as_str()
        .strip_prefix("ct")
        .and_then(|rest| rest.split_once('-'))
        .unwrap_or_else(|| panic!("not a project of this test: {project}"));
    let node = NODES.iter().position(|n| *n == node).unwrap();
    (tree.parse().unwrap(), node)
}

/// `node`'s ancestors, nearest first.
fn ancestors(node: usize) -> Vec<usize> {
    let mut chain = vec![];
    let mut at = node;
    while let Some(parent) = PARENT[at] {
        chain.push(parent);
        at = parent;
    }
    chain
}

/// The limit of `node` for `resource`: its own, else the default.
fn limit(node: usize, resource: &str) -> i64 {
    let own: &[(&str, i64)] = match node {
        0 => &ROOT_LIMITS,
        1 => &MID_LIMITS,
        _ => &[],
    };
    own.iter()
        .chain(&DEFAULTS)
        .find(|(r, _)| *r == resource)
        .map(|(_, l)| *l)
        .unwrap()
}

fn limits(pairs: &[(&str, i64)]) -> Limits {
    pairs
        .iter()
        .map(|(r, l)| (ResourceName::parse(r).unwrap(), Limit::new(*l).unwrap()))
        .collect()
}

/// Builds the trees on the store, with a ledger of its own, before any server runs.
async fn build_trees(store_url: &str) {
    let store = ledger::store::open(store_url).await.unwrap();
    let ledger = Ledger::start(store, Arc::new(SystemClock), LedgerConfig::default())
        .await
        .unwrap();
    let meta = Metadata::default();
    ledger
        .set_defaults(&limits(&DEFAULTS), &meta)
        .await
        .unwrap();
    for t in 0..TREES {
        let root = project(t, 0);
        let mid = project(t, 1);
        ledger
            .set_limits(&root, limits(&ROOT_LIMITS), false, &meta)
            .await
            .unwrap();
        ledger
            .set_limits(&mid, limits(&MID_LIMITS), false, &meta)
            .await
            .unwrap();
        for (node, parent) in PARENT.iter().enumerate() {
            let Some(parent) = parent else { continue };
            ledger
                .set_parent(&project(t, node), Some(project(t, *parent)), false, &meta)
                .await
                .unwrap();
        }
    }
}

// ---- the load ----

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
        if let Ok(response) = request.send().await {
            let status = response.status();
            if status != StatusCode::SERVICE_UNAVAILABLE {
                if let Ok(text) = response.text().await {
                    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
                    return Some((status, body));
                }
            }
        }
        counters.retries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    None
}

fn problem_is(body: &Value, code: &str) -> bool {
    body["type"].as_str().is_some_and(|t| t.ends_with(code))
}

async fn client(seed: u64, url: CurrentUrl, stop: Arc<AtomicBool>, counters: Arc<Counters>) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    // Its reservations still to end: (project, id, committed). Each is committed or released
    // in turn, and a committed one released (freed) later, so usage keeps turning over.
    let mut open: Vec<(ProjectId, Uuid, bool)> = vec![];
    while !stop.load(Ordering::Relaxed) {
        if open.len() < 2 || (open.len() < 4 && rng.gen_bool(0.5)) {
            let id = Uuid::new_v4();
            let node = RESERVERS[rng.gen_range(0..RESERVERS.len())];
            let p = project(rng.gen_range(0..TREES), node);
            // Some holds last a second: the sweeper expires them, as one chain each.
            let expires_in = if rng.gen_bool(0.25) { 1 } else { 600 };
            let body = json!({
                "deltas": {"instances": 1, "cores": rng.gen_range(1..4)},
                "expires_in": expires_in,
                "reservation_id": id,
            });
            let path = format!("/v1/projects/{p}/reservations");
            let answer =
                send_until_answered(&http, &url, Method::POST, &path, Some(&body), &counters).await;
            match answer {
                None => continue,
                Some((StatusCode::CREATED, _)) => open.push((p, id, false)),
                Some((_, body)) if problem_is(&body, "over-quota") => {}
                Some((status, body)) => panic!("reserve answered {status}: {body}"),
            }
        } else {
            let (p, id, committed) = open.swap_remove(rng.gen_range(0..open.len()));
            let action = if !committed && rng.gen_bool(0.6) {
                "commit"
            } else {
                "release"
            };
            let path = format!("/v1/projects/{p}/reservations/{id}/{action}");
            let answer =
                send_until_answered(&http, &url, Method::POST, &path, None, &counters).await;
            match answer {
                None => continue,
                Some((StatusCode::OK, body)) => {
                    if body["status"] == "committed" {
                        open.push((p, id, true));
                    }
                }
                Some((_, body)) if problem_is(&body, "reservation-expired") => {}
                Some((status, body)) => panic!("{action} {id} answered {status}: {body}"),
            }
        }
        counters.acknowledged.fetch_add(1, Ordering::Relaxed);
    }
}

fn start_server(store_url: &str) -> Server {
    Server::start_with(ServerOptions {
        store: store_url,
        tokens: None,
        extra: &[],
    })
}

async fn crash_and_check(store: StoreUrl, backend: &str) {
    let started = Instant::now();
    build_trees(&store.url).await;
    let mut server = start_server(&store.url);
    let url: CurrentUrl = Arc::new(RwLock::new(server.url.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counters::default());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|seed| tokio::spawn(client(seed, url.clone(), stop.clone(), counters.clone())))
        .collect();
    let mut rng = StdRng::seed_from_u64(11);
    let mut kills = 0;
    let mut checked = LogReport::default();
    while started.elapsed() < KILLING_FOR && kills < MAX_KILLS {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(200..1200))).await;
        // Dropping a `Server` kills it with SIGKILL and reaps it.
        drop(server);
        kills += 1;
        // Whatever the kill interrupted, the log holds whole chains only.
        checked = check_log(&store.url).await;
        let store_url = store.url.clone();
        server = tokio::task::spawn_blocking(move || start_server(&store_url))
            .await
            .unwrap();
        *url.write().unwrap() = server.url.clone();
    }
    tokio::time::sleep(CALM_FOR).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }

    // Let the views catch up with the log, then stop the server cleanly.
    let api = server.client();
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
    let last = check_log(&store.url).await;
    let verify = std::process::Command::new(BINARY)
        .args(["projections", "verify", "--store", &store.url])
        .output()
        .unwrap();
    eprintln!(
        "crash tree {backend}: {kills} kills, {} operations acknowledged, {} retries; the log \
         after the last kill: {} events, {} changes of a child's usage each recorded by every \
         ancestor, {} grants within every subtree; at the end {} events, {} changes, {} grants; \
         {:.1} s",
        counters.acknowledged.load(Ordering::Relaxed),
        counters.retries.load(Ordering::Relaxed),
        checked.events,
        checked.changes,
        checked.grants,
        last.events,
        last.changes,
        last.grants,
        started.elapsed().as_secs_f64(),
    );
    assert!(
        verify.status.success(),
        "quota projections verify failed:\n{}\n{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(kills >= 3, "only {kills} kills happened");
    assert!(last.changes > 100, "too little load to mean anything");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_tree_sqlite() {
    crash_and_check(sqlite_store(), "sqlite").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_tree_postgres() {
    if let Some(store) = postgres_store().await {
        crash_and_check(store, "postgres").await;
    }
}
