//! SPEC.md "Input and transport rules", the transport half: `/metrics` labels from fixed sets,
//! `x-request-id` only in its grammar, a deadline for a request's whole head, an idle timeout
//! that never cuts a running handler, and a cap on open connections.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{sqlite_store, Server, ServerOptions};
use serde_json::json;

fn host(server: &Server) -> String {
    server.url.strip_prefix("http://").unwrap().to_owned()
}

/// One request on a fresh connection; the raw answer.
fn raw_request(host: &str, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(host).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

fn series(metrics: &str) -> Vec<&str> {
    metrics
        .lines()
        .filter(|l| l.starts_with("quota_http_request"))
        .collect()
}

#[tokio::test]
async fn odd_methods_do_not_grow_the_metrics() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let api = server.client();
    let host = host(&server);
    let odd = move |method: &str| {
        let request = format!("{method} /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        raw_request(&host, request.as_bytes())
    };
    let answer = tokio::task::spawn_blocking(move || odd("FROBNICATE"))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 405"), "{answer}");
    let first = api.get("/metrics").await.body.as_str().unwrap().to_owned();
    assert!(first.contains("method=\"other\""), "{first}");
    assert!(!first.contains("FROBNICATE"), "{first}");

    let host = self::host(&server);
    tokio::task::spawn_blocking(move || {
        for i in 0..20 {
            let method = format!("X{i}{}", "M".repeat(if i == 0 { 100_000 } else { i }));
            let request =
                format!("{method} /nowhere/{i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            raw_request(&host, request.as_bytes());
            let request =
                format!("{method} /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            raw_request(&host, request.as_bytes());
        }
    })
    .await
    .unwrap();
    let after = api.get("/metrics").await.body.as_str().unwrap().to_owned();
    assert!(!after.contains("MMM"), "a method became a label");
    assert!(!after.contains("/nowhere"), "a path became a label");
    // The same series as before plus at most those of the one unmatched route label, the
    // `/metrics` scrape itself and their statuses.
    let grown = series(&after).len() - series(&first).len();
    assert!(grown <= 40, "{grown} new series:\n{after}");
    assert!(
        after.len() < first.len() + 20_000,
        "/metrics grew to {} bytes",
        after.len()
    );
}

fn is_uuid(s: &str) -> bool {
    uuid::Uuid::parse_str(s).is_ok()
}

#[tokio::test]
async fn only_well_formed_request_ids_are_used() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(json!({"instances": 10})).await;

    let good = "client-42:attempt.1_A";
    let answer = api.get_with_header("/healthz", "x-request-id", good).await;
    assert_eq!(answer.headers["x-request-id"], good);
    let longest = "r".repeat(128);
    let answer = api
        .get_with_header("/healthz", "x-request-id", &longest)
        .await;
    assert_eq!(answer.headers["x-request-id"], longest.as_str());

    let forged = "x\" status=204 ms=0.1 \"answered";
    for bad in [forged, "", "a b", &"r".repeat(129), "é", "a/b", "a\tb"] {
        let answer = api.get_with_header("/healthz", "x-request-id", bad).await;
        let echoed = answer.headers["x-request-id"].to_str().unwrap();
        assert!(is_uuid(echoed), "{bad:?} echoed as {echoed:?}");
    }

    // The request id recorded with an event is the server's own too.
    let response = reqwest::Client::new()
        .post(format!("{}/v1/projects/ids/reservations", server.url))
        .header("x-request-id", forged)
        .json(&json!({"deltas": {"instances": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let echoed = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(is_uuid(&echoed), "{echoed}");
    let events = ledger::store::open(&store.url).await.unwrap();
    let recorded = events.read_all(0, 100).await.unwrap();
    let last = &recorded.last().unwrap().event.metadata;
    assert_eq!(last.correlation_id.as_deref(), Some(echoed.as_str()));
    assert_eq!(last.request_id.as_deref(), Some(echoed.as_str()));

    let log = server.log_text();
    assert!(
        !log.contains("status=204 ms=0.1"),
        "a client forged a log line:\n{log}"
    );
    assert!(log.contains(good), "a valid request id is logged:\n{log}");
}

#[test]
fn a_trickled_head_is_cut_after_ten_seconds() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let host = host(&server);
    let mut stream = TcpStream::connect(&host).unwrap();
    let started = Instant::now();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(1000)))
        .unwrap();
    // One byte a second, each well within the idle timeout, for up to 20 s.
    let cut = loop {
        let mut buffer = [0u8; 512];
        match stream.read(&mut buffer) {
            Ok(_) => break started.elapsed(),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break started.elapsed(),
        }
        if started.elapsed() > Duration::from_secs(20) {
            panic!("a trickled head kept its connection for 20 s");
        }
        if stream.write_all(b"a").is_err() {
            break started.elapsed();
        }
    };
    assert!(
        cut >= Duration::from_secs(9) && cut <= Duration::from_secs(12),
        "cut after {cut:?}"
    );
    let store_api = common::Api::new(&server.url, None);
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        store_api.get("/healthz").await.assert_status(200);
    });
}

#[tokio::test]
async fn the_idle_timeout_never_cuts_a_running_handler() {
    let store = sqlite_store();
    let server = Server::start_with(ServerOptions {
        store: &store.url,
        tokens: None,
        extra: &["--client-timeout", "3"],
    });
    let api = server.client();
    api.set_defaults(serde_json::json!({"instances": 10})).await;
    // A position that exists but that the views never reach: the read waits its whole 5 s.
    let unreached = common::stall_the_views(&store, &api, "slow").await;
    let started = Instant::now();
    let answer = api
        .get(&format!("/v1/projects/slow/usage?min_position={unreached}"))
        .await;
    answer.assert_problem(503, "not-caught-up");
    assert_eq!(answer.body["min_position"], unreached);
    assert!(
        started.elapsed() >= Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    // The connection is still usable for an idle keep-alive request.
    api.get("/healthz").await.assert_status(200);
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_until_others_close() {
    let store = sqlite_store();
    let server = Server::start_with(ServerOptions {
        store: &store.url,
        tokens: None,
        extra: &["--max-connections", "4"],
    });
    let host = host(&server);
    let held: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(&host).unwrap()).collect();
    // Give the server the time to accept them.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let waiting = {
        let host = host.clone();
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let answer = raw_request(
                &host,
                b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            );
            (answer, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !waiting.is_finished(),
        "a fifth connection was served beside four"
    );
    drop(held);
    let (answer, waited) = waiting.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        waited < Duration::from_secs(5),
        "answered only after {waited:?}"
    );
    server.client().get("/healthz").await.assert_status(200);
}
