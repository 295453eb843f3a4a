//! End-to-end: what the service and its tools do to files. Files the server creates are private
//! (0600, whatever the umask), and the checking tools (`quota projections verify|rebuild`) never
//! create a store: pointed at a path or schema that holds none, they fail and say so.
//!
//! PostgreSQL tests need `QUOTA_TEST_POSTGRES_URL` and pass (skipped) without it.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{postgres_store, sqlite_store, Server};

/// Runs the `quota` command line under umask 022; returns (exit success, stdout, stderr).
fn quota(args: &[&str]) -> (bool, String, String) {
    let output = Command::new("sh")
        .arg("-c")
        .arg("umask 022 && exec \"$@\"")
        .arg("sh")
        .arg(common::BINARY)
        .args(args)
        .env_remove("QUOTA_TOKEN")
        .env_remove("QUOTA_STORE")
        .output()
        .expect("run quota");
    common::outcome(&output)
}

/// The usual umask, for the servers these tests start (children inherit it; every test here
/// wants the same one).
fn set_umask_022() {
    // SAFETY: umask only swaps the process's file-creation mask.
    unsafe {
        libc::umask(0o022);
    }
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// A SQLite store with one event, made by the server, whose views file (and its WAL files)
/// was then deleted; returns its folder, URL and the views file's path.
async fn a_store_without_views() -> (tempfile::TempDir, String, PathBuf) {
    let dir = tempfile::tempdir().expect("folder");
    let events = dir.path().join("quota.db");
    let url = format!("sqlite://{}", events.display());
    {
        let server = Server::start_with(common::ServerOptions {
            store: &url,
            tokens: None,
            extra: &[],
        });
        server
            .client()
            .set_defaults(serde_json::json!({"instances": 1}))
            .await;
    }
    let views = projections::sqlite_views_path(&events);
    for suffix in ["", "-wal", "-shm"] {
        let mut name = views.as_os_str().to_owned();
        name.push(suffix);
        let _ = std::fs::remove_file(name);
    }
    (dir, url, views)
}

#[tokio::test]
async fn the_server_creates_its_sqlite_files_private_under_umask_022() {
    let store = sqlite_store();
    set_umask_022();
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(serde_json::json!({"instances": 10})).await;
    api.reserve("p", serde_json::json!({"instances": 1}))
        .await
        .assert_status(201);
    let usage = api.get("/v1/projects/p/usage?min_position=2").await;
    usage.assert_status(200);
    let events = Path::new(store.url.trim_start_matches("sqlite://")).to_owned();
    let views = projections::sqlite_views_path(&events);
    let mut checked = 0;
    for file in [&events, &views] {
        for suffix in ["", "-wal", "-shm"] {
            let mut name = file.as_os_str().to_owned();
            name.push(suffix);
            let path = Path::new(&name);
            if suffix.is_empty() || path.exists() {
                assert_eq!(mode_of(path), 0o600, "{} is not private", path.display());
                checked += 1;
            }
        }
    }
    assert!(
        checked >= 4,
        "the WAL files were checked too ({checked} files)"
    );
}

#[tokio::test]
async fn the_tools_create_their_sqlite_files_private_under_umask_022() {
    set_umask_022();
    // A store made by the server, then rebuilt by the tool after its views file was deleted.
    let (_dir, url, views) = a_store_without_views().await;
    let (ok, out, err) = quota(&["projections", "rebuild", "--store", &url]);
    assert!(ok, "rebuild: {out}{err}");
    assert_eq!(mode_of(&views), 0o600);
}

#[tokio::test]
async fn verify_and_rebuild_refuse_a_sqlite_path_that_holds_no_store() {
    let dir = tempfile::tempdir().expect("folder");
    let typo = dir.path().join("typo.db");
    let url = format!("sqlite://{}", typo.display());
    for tool in ["verify", "rebuild"] {
        let (ok, out, err) = quota(&["projections", tool, "--store", &url]);
        assert!(!ok, "{tool} on a missing file succeeded: {out}{err}");
        assert!(
            err.contains("no quota store") && err.contains(&typo.display().to_string()),
            "{tool}: the message names the missing store: {err}"
        );
        assert!(!out.contains("match"), "{tool}: {out}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .expect("folder")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert!(leftovers.is_empty(), "{tool} created {leftovers:?}");
    }
    // A file that is not a quota store (an empty SQLite database, or text) is refused too and
    // left as it was.
    std::fs::write(&typo, b"").expect("write");
    let other = dir.path().join("notes.txt");
    std::fs::write(&other, b"hello, not a database\n").expect("write");
    for path in [&typo, &other] {
        let url = format!("sqlite://{}", path.display());
        let before = std::fs::read(path).expect("read");
        for tool in ["verify", "rebuild"] {
            let (ok, out, err) = quota(&["projections", tool, "--store", &url]);
            assert!(!ok, "{tool} on {} succeeded: {out}{err}", path.display());
            assert!(
                err.contains("not a quota store") || err.contains("no quota store"),
                "{tool}: {err}"
            );
        }
        assert_eq!(
            std::fs::read(path).expect("read"),
            before,
            "{} was changed",
            path.display()
        );
    }
}

#[tokio::test]
async fn verify_refuses_a_store_whose_views_are_missing() {
    let (_dir, url, views) = a_store_without_views().await;
    let (ok, out, err) = quota(&["projections", "verify", "--store", &url]);
    assert!(!ok, "verify without views succeeded: {out}{err}");
    assert!(err.contains("rebuild"), "says how to make them: {err}");
    assert!(!views.exists(), "verify created the views file");
}

#[tokio::test]
async fn verify_and_rebuild_refuse_a_postgres_schema_that_holds_no_store() {
    let Some(store) = postgres_store().await else {
        return;
    };
    for tool in ["verify", "rebuild"] {
        let (ok, out, err) = quota(&["projections", tool, "--store", &store.url]);
        assert!(!ok, "{tool} on an empty schema succeeded: {out}{err}");
        assert!(err.contains("no quota store"), "{tool}: {err}");
    }
    let (server, schema) = store.postgres.as_ref().expect("a PostgreSQL store");
    let pool = sqlx::PgPool::connect(server).await.expect("connect");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
    )
    .bind(schema)
    .fetch_one(&pool)
    .await
    .expect("count tables");
    assert_eq!(tables, 0, "the tools created tables in {schema}");
}
