//! The tokens file (SPEC.md "Auth"): `TOKEN ROLE [NAME]` lines, tokens of at least 16
//! characters, a leading byte order mark ignored, errors that name the line number and never its
//! text, and `SIGHUP` reloading it (a bad new file keeps the old tokens).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{sqlite_store, Api, Server};

const ADMIN: &str = "admin-token-0123456789";
const ACME: &str = "acme-token-0123456789";
const OTHER: &str = "other-token-0123456789";

/// Runs `quota serve` on a tokens file that must be refused; its stderr.
fn refused_file(contents: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let tokens = common::tokens_file(dir.path(), contents);
    let store = sqlite_store();
    let output = Command::new(common::BINARY)
        .args(["serve", "--listen", "127.0.0.1:0", "--store", &store.url])
        .arg("--tokens")
        .arg(&tokens)
        .env_remove("QUOTA_TOKENS")
        .output()
        .expect("run quota serve");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "{contents:?} was accepted: {stderr}"
    );
    stderr
}

#[test]
fn tokens_file_errors_name_the_line_and_never_its_text() {
    let secret = "hunter2-hunter2-hunter2";
    let cases = [
        // The columns swapped: the secret is where the role belongs.
        (format!("# ops\n{ADMIN} admin\nadmin {secret}\n"), "line 3"),
        (format!("{secret} superuser\n"), "line 1"),
        (format!("{secret} project:{secret}/x\n"), "line 1"),
        (format!("{secret} admin bad/name!\n"), "line 1"),
        (format!("{secret} admin name extra\n"), "line 1"),
        (format!("{secret}\n"), "line 1"),
        (format!("{secret} admin\n{secret} auditor\n"), "line 2"),
        // Too short to be a secret.
        ("short-secret admin\n".to_owned(), "line 1"),
    ];
    for (contents, line) in cases {
        let stderr = refused_file(&contents);
        assert!(stderr.contains(line), "{contents:?}: {stderr}");
        for word in contents.split_whitespace().filter(|w| w.len() > 8) {
            assert!(
                !stderr.contains(word),
                "{contents:?} printed {word:?}: {stderr}"
            );
        }
        assert!(!stderr.contains("hunter2"), "{stderr}");
    }
}

#[tokio::test]
async fn a_leading_byte_order_mark_is_not_part_of_the_first_token() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = common::tokens_file(dir.path(), &format!("\u{feff}{ADMIN} admin\n"));
    let store = sqlite_store();
    let server = Server::start_with_tokens(&store, &tokens);
    server
        .client_with_token(ADMIN)
        .get("/v1/defaults")
        .await
        .assert_status(200);
}

#[tokio::test]
async fn named_tokens_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = common::tokens_file(
        dir.path(),
        &format!("{ADMIN} admin ops-alice\n{ACME} project:acme acme.ci # the pipeline\n"),
    );
    let store = sqlite_store();
    let server = Server::start_with_tokens(&store, &tokens);
    server
        .client_with_token(ADMIN)
        .set_defaults(serde_json::json!({"instances": 2}))
        .await;
    server
        .client_with_token(ACME)
        .reserve("acme", serde_json::json!({"instances": 1}))
        .await
        .assert_status(201);
}

fn hangup(server: &Server) {
    let status = Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits until `api` gets `status` on `GET /v1/defaults`.
async fn eventually(api: &Api, status: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = api.get("/v1/defaults").await;
        if answer.status == status {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: still {answer:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn write_tokens(path: &Path, contents: &str) {
    // Written beside and renamed, as an operator's tools do, so a reload never sees half a file.
    let next = path.with_extension("next");
    std::fs::write(&next, contents).unwrap();
    std::fs::rename(&next, path).unwrap();
}

#[tokio::test]
async fn sighup_reloads_the_tokens_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::tokens_file(dir.path(), &format!("{ADMIN} admin\n{ACME} project:acme\n"));
    let store = sqlite_store();
    let server = Server::start_with_tokens(&store, &path);
    let admin = server.client_with_token(ADMIN);
    let acme = server.client_with_token(ACME);
    let other = server.client_with_token(OTHER);
    eventually(&acme, 200, "acme before the reload").await;
    eventually(&other, 401, "other before the reload").await;

    // acme's token is revoked, other's is added.
    write_tokens(&path, &format!("{ADMIN} admin\n{OTHER} project:other\n"));
    hangup(&server);
    eventually(&other, 200, "the added token").await;
    eventually(&acme, 401, "the revoked token").await;
    admin.get("/v1/defaults").await.assert_status(200);

    // A bad file keeps the tokens in force, and the log says why without its text.
    let secret = "never-print-me-0123456789";
    write_tokens(&path, &format!("{ADMIN} admin\nproject:acme {secret}\n"));
    hangup(&server);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.log_text().contains("line 2") {
        assert!(
            Instant::now() < deadline,
            "no log of the refused reload:\n{}",
            server.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    admin.get("/v1/defaults").await.assert_status(200);
    other.get("/v1/defaults").await.assert_status(200);
    acme.get("/v1/defaults").await.assert_status(401);
    assert!(!server.log_text().contains(secret), "{}", server.log_text());
    assert!(!server.log_text().contains(ADMIN), "{}", server.log_text());
}
