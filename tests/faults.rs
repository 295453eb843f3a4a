//! Database faults.
//!
//! - PostgreSQL stopped mid-load: a private PostgreSQL (initdb + pg_ctl in a temporary folder,
//!   on its own port, run as the `postgres` user since PostgreSQL refuses root) is stopped
//!   while clients reserve and commit over HTTP. Every request is answered within a bound (never
//!   a hang), every failure is 503 `store-unavailable` without SQL in it, nothing acknowledged
//!   is wrong or lost, and once PostgreSQL is back the service serves again by itself.
//!   Skipped with a note when the PostgreSQL binaries are missing.
//! - A read-only SQLite file: a clear error, and the file is intact afterwards.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Server, ServerOptions, BINARY};
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

/// No request may take longer than this, database down or not: the store waits at most 2 s
/// for a connection, and an append queued behind a failing one may wait for both (4 s, plus
/// slack for a busy machine). Waiting for the database instead would take the whole outage.
const ANSWER_WITHIN: Duration = Duration::from_millis(5500);
/// The client gives up after this (a hang shows as a timeout, which fails the test).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(15);
/// Longer than the bound above, so that a request that waits for the database to come back
/// (instead of failing) fails the test.
const OUTAGE: Duration = Duration::from_secs(6);

/// A PostgreSQL server of the test's own, in a temporary folder.
struct PrivatePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

fn as_postgres(program: &Path, args: &[&str]) -> std::process::Output {
    Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(program)
        .args(args)
        .output()
        .expect("run a PostgreSQL tool as the postgres user")
}

impl PrivatePostgres {
    /// `None` (with a note) when the PostgreSQL binaries or the `postgres` user are missing.
    fn start() -> Option<PrivatePostgres> {
        let mut bins: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|bin| bin.join("initdb").exists() && bin.join("pg_ctl").exists())
            .collect();
        bins.sort();
        let Some(bin) = bins.pop() else {
            eprintln!("skipped: no initdb/pg_ctl under /usr/lib/postgresql/*/bin");
            return None;
        };
        let dir = tempfile::tempdir().expect("temporary folder");
        let chown = Command::new("chown")
            .args(["-R", "postgres:"])
            .arg(dir.path())
            .status();
        if !chown.is_ok_and(|s| s.success()) {
            eprintln!("skipped: cannot hand a folder to the postgres user");
            return None;
        }
        let data = dir.path().join("data");
        let init = as_postgres(
            &bin.join("initdb"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let pg = PrivatePostgres { bin, dir, port };
        pg.pg_ctl_start();
        Some(pg)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn pg_ctl_start(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("postgres.log");
        let out = as_postgres(
            &self.bin.join("pg_ctl"),
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                log.to_str().unwrap(),
                "-w",
                "start",
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Stops at once, as a crash of the database would (`immediate`: no clean shutdown).
    fn pg_ctl_stop(&self) {
        let out = as_postgres(
            &self.bin.join("pg_ctl"),
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
        assert!(
            out.status.success(),
            "pg_ctl stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = as_postgres(
            &self.bin.join("pg_ctl"),
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }
}

#[derive(Default)]
struct Observed {
    /// reservation id -> (project, acknowledged status)
    acked: HashMap<Uuid, (String, &'static str)>,
    unavailable: u64,
    answered: u64,
    slowest: Duration,
    /// When the last 503 was answered, and when the first success after it.
    last_failure: Option<Instant>,
}

/// One client: reserve then commit, with client-chosen ids, until `stop`.
async fn load(base: String, seed: u64, stop: Arc<AtomicBool>, seen: Arc<Mutex<Observed>>) {
    let http = reqwest::Client::builder()
        .timeout(CLIENT_TIMEOUT)
        .build()
        .unwrap();
    let project = format!("faults-{}", seed % 2);
    let mut held: Option<Uuid> = None;
    while !stop.load(Ordering::Relaxed) {
        let (id, path, body, want) = match held {
            Some(id) => (
                id,
                format!("/v1/projects/{project}/reservations/{id}/commit"),
                None,
                "committed",
            ),
            None => {
                let id = Uuid::new_v4();
                (
                    id,
                    format!("/v1/projects/{project}/reservations"),
                    Some(json!({"deltas": {"instances": 1}, "reservation_id": id})),
                    "held",
                )
            }
        };
        let mut request = http.post(format!("{base}{path}"));
        if let Some(body) = &body {
            request = request.json(body);
        }
        let sent = Instant::now();
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: no answer within {CLIENT_TIMEOUT:?}: {e}"));
        let status = response.status();
        let text = response.text().await.unwrap();
        let took = sent.elapsed();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::String(text.clone()));
        {
            let mut seen = seen.lock().unwrap();
            seen.answered += 1;
            seen.slowest = seen.slowest.max(took);
            assert!(
                took < ANSWER_WITHIN,
                "{path} took {took:?} (status {status})"
            );
            match status {
                StatusCode::OK | StatusCode::CREATED => {
                    assert_eq!(body["status"], want, "{path}: {body}");
                    seen.acked.insert(id, (project.clone(), want));
                    held = if want == "held" { Some(id) } else { None };
                }
                StatusCode::FORBIDDEN => {
                    assert!(text.contains("over-quota"), "{text}");
                    held = None;
                }
                StatusCode::SERVICE_UNAVAILABLE => {
                    assert!(
                        body["type"]
                            .as_str()
                            .is_some_and(|t| t.ends_with("store-unavailable")),
                        "{path}: {body}"
                    );
                    let lower = text.to_lowercase();
                    assert!(
                        !lower.contains("sql") && !lower.contains("connection refused"),
                        "a store failure leaks its cause: {text}"
                    );
                    seen.unavailable += 1;
                    seen.last_failure = Some(Instant::now());
                    // Retry the same call (same id): it is idempotent.
                }
                other => panic!("{path}: unexpected {other}: {text}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_fails_fast_and_recovers_by_itself() {
    let Some(pg) = tokio::task::spawn_blocking(PrivatePostgres::start)
        .await
        .unwrap()
    else {
        return;
    };
    let url = pg.url();
    let server = Server::start_with(ServerOptions {
        store: &url,
        tokens: None,
        extra: &[],
    });
    let api = server.client();
    api.set_defaults(json!({"instances": 1000})).await;

    let stop = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Observed::default()));
    let clients: Vec<_> = (0..4)
        .map(|seed| tokio::spawn(load(server.url.clone(), seed, stop.clone(), seen.clone())))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before_outage = seen.lock().unwrap().acked.len();

    let pg = tokio::task::spawn_blocking(move || {
        pg.pg_ctl_stop();
        pg
    })
    .await
    .unwrap();
    let stopped_at = Instant::now();
    tokio::time::sleep(OUTAGE).await;
    let during = seen.lock().unwrap().unavailable;
    let pg = tokio::task::spawn_blocking(move || {
        pg.pg_ctl_start();
        pg
    })
    .await
    .unwrap();
    let restarted_at = Instant::now();

    // The service recovers by itself: acknowledged work resumes without a restart.
    let acked_at_restart = seen.lock().unwrap().acked.len();
    let recovered = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if seen.lock().unwrap().acked.len() >= acked_at_restart + 20 {
            break restarted_at.elapsed();
        }
        assert!(
            restarted_at.elapsed() < Duration::from_secs(30),
            "no acknowledged work within 30 s of PostgreSQL's return"
        );
    };
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }

    // Nothing acknowledged is wrong or lost.
    let seen = Arc::try_unwrap(seen).ok().unwrap().into_inner().unwrap();
    for (id, (project, status)) in &seen.acked {
        let answer = api
            .get(&format!("/v1/projects/{project}/reservations/{id}"))
            .await;
        let stored = answer.assert_status(200)["status"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            stored == *status || (*status == "held" && stored == "committed"),
            "{id}: acknowledged {status}, stored {stored}"
        );
    }
    let store = ledger::store::open(&url).await.unwrap();
    let replay = bench::replay_checking_limits(&*store).await.unwrap();
    assert_eq!(replay.over_limit, 0);
    drop(store);
    eprintln!(
        "faults postgres: {} answered, {} acknowledged ({before_outage} before the outage), \
         {} × 503 store-unavailable ({during} during the {:?} outage), slowest answer {:?}, \
         served again {:.1} s after PostgreSQL returned (stopped for {:.1} s), 0 lost",
        seen.answered,
        seen.acked.len(),
        seen.unavailable,
        OUTAGE,
        seen.slowest,
        recovered.as_secs_f64(),
        (restarted_at - stopped_at).as_secs_f64(),
    );
    assert!(during > 0, "the outage was never noticed");
    drop(server);
    drop(pg);
}

#[tokio::test]
async fn read_only_sqlite_gives_a_clear_error_and_no_corruption() {
    let store = common::sqlite_store();
    let path = store.url.strip_prefix("sqlite://").unwrap().to_owned();
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(json!({"instances": 10})).await;
    let held = api.reserve("ro", json!({"instances": 2})).await;
    let id = held.assert_status(201)["reservation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(server.terminate());

    // The same file, opened read-only (as root, file modes do not stop writes, so the mode is
    // asked for in the URL): starting on it either fails with a clear message, or serves reads
    // and refuses writes with a problem that does not leak SQL.
    let read_only = format!("sqlite://{path}?mode=ro");
    let output = std::process::Command::new(BINARY)
        .args(["serve", "--listen", "127.0.0.1:0", "--store", &read_only])
        .stdin(std::process::Stdio::null())
        .output_with_timeout(Duration::from_secs(5));
    match output {
        Some(out) => {
            assert!(!out.status.success(), "serve on a read-only store exited 0");
            let stderr = String::from_utf8_lossy(&out.stderr);
            eprintln!("faults sqlite read-only: serve refused to start: {stderr}");
            assert!(
                stderr.contains("cannot open store") && stderr.to_lowercase().contains("read"),
                "unclear error: {stderr}"
            );
        }
        None => {
            // It started: writes must be refused cleanly.
            let server = Server::start_with(ServerOptions {
                store: &read_only,
                tokens: None,
                extra: &[],
            });
            let api = server.client();
            let refused = api.reserve("ro", json!({"instances": 1})).await;
            eprintln!(
                "faults sqlite read-only: a write answered {} {}",
                refused.status, refused.body
            );
            assert_eq!(refused.status, 503, "{:?}", refused.body);
            assert!(!refused.body.to_string().to_lowercase().contains("sql"));
        }
    }

    // The file is intact: the reservation is there and the views match the events.
    let server = Server::start(&store);
    let api = server.client();
    let answer = api.get(&format!("/v1/projects/ro/reservations/{id}")).await;
    assert_eq!(answer.assert_status(200)["status"], "held");
    assert!(server.terminate());
    let verify = std::process::Command::new(BINARY)
        .args(["projections", "verify", "--store", &store.url])
        .output()
        .unwrap();
    assert!(verify.status.success(), "{verify:?}");
}

trait OutputWithTimeout {
    /// The output if the process exits within `limit`; `None` (and the process killed) if not.
    fn output_with_timeout(&mut self, limit: Duration) -> Option<std::process::Output>;
}

impl OutputWithTimeout for std::process::Command {
    fn output_with_timeout(&mut self, limit: Duration) -> Option<std::process::Output> {
        let mut child = self
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while started.elapsed() < limit {
            if child.try_wait().unwrap().is_some() {
                return Some(child.wait_with_output().unwrap());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }
}

/// A small tmpfs of the test's own; `None` (with a note) where mounting is not allowed.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().expect("temporary folder");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output();
        if !mounted.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("skipped: cannot mount a small tmpfs here ({mounted:?})");
            return None;
        }
        Some(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the disk with a file until writing fails; returns the file's path.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 16 * 1024];
    while file.write_all(&chunk).is_ok() {}
    let _ = file.sync_all();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_sqlite_answers_503_loses_nothing_and_recovers() {
    let Some(disk) = SmallDisk::mount("8m") else {
        return;
    };
    let url = format!("sqlite://{}", disk.path().join("quota.db").display());
    let server = Server::start_with(ServerOptions {
        store: &url,
        tokens: None,
        extra: &[],
    });
    let api = server.client();
    api.set_defaults(json!({"instances": 1_000_000})).await;
    let http = reqwest::Client::builder()
        .timeout(CLIENT_TIMEOUT)
        .build()
        .unwrap();
    let reserve = |id: Uuid| {
        let http = http.clone();
        let base = server.url.clone();
        async move {
            let sent = Instant::now();
            let response = http
                .post(format!("{base}/v1/projects/full/reservations"))
                .json(&json!({"deltas": {"instances": 1}, "reservation_id": id}))
                .send()
                .await
                .expect("an answer, disk full or not");
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            assert!(sent.elapsed() < ANSWER_WITHIN, "took {:?}", sent.elapsed());
            (status, text)
        }
    };
    let mut acked = vec![];
    for _ in 0..20 {
        let id = Uuid::new_v4();
        assert_eq!(reserve(id).await.0, 201);
        acked.push(id);
    }

    let filler = fill(disk.path());
    // Write until the disk refuses (the WAL may have room left at first).
    let mut refused = 0;
    let mut attempts = 0;
    while refused < 5 && attempts < 3000 {
        attempts += 1;
        let id = Uuid::new_v4();
        let (status, text) = reserve(id).await;
        match status {
            201 => acked.push(id),
            503 => {
                assert!(text.contains("store-unavailable"), "{text}");
                assert!(!text.to_lowercase().contains("sql"), "{text}");
                refused += 1;
            }
            other => panic!("disk full answered {other}: {text}"),
        }
    }
    assert!(refused > 0, "the disk never filled up in {attempts} writes");
    let filled_after = attempts;

    // Space again: the service recovers by itself.
    std::fs::remove_file(filler).unwrap();
    let started = Instant::now();
    loop {
        let id = Uuid::new_v4();
        let (status, text) = reserve(id).await;
        if status == 201 {
            acked.push(id);
            break;
        }
        assert_eq!(status, 503, "{text}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no recovery after the disk had room again"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let recovered = started.elapsed();

    // Nothing acknowledged is lost, the log is within limits, and the file is sound.
    for id in &acked {
        let answer = api
            .get(&format!("/v1/projects/full/reservations/{id}"))
            .await;
        assert_eq!(answer.assert_status(200)["status"], "held", "{id}");
    }
    assert!(server.terminate());
    let store = ledger::store::open(&url).await.unwrap();
    let replay = bench::replay_checking_limits(&*store).await.unwrap();
    assert_eq!(replay.over_limit, 0);
    drop(store);
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let integrity: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert_eq!(integrity, "ok");
    let verify = Command::new(BINARY)
        .args(["projections", "verify", "--store", &url])
        .output()
        .unwrap();
    assert!(verify.status.success(), "{verify:?}");
    eprintln!(
        "faults sqlite full disk: {} acknowledged and kept, first refusal after {filled_after} \
         writes on a full disk, {refused} × 503 store-unavailable, served again {:.1} s after \
         space was freed; integrity ok, views verify",
        acked.len(),
        recovered.as_secs_f64()
    );
}
