//! The `quota` command line and users inside a project (SPEC rule 8, rule 10 and "Command
//! line"), on the real binary against a real `quota serve`: `limits get|set|reset --user`,
//! `usage --user [--at]`, `reserve --user` (its over-quota refusal names the user's overs, and
//! `--dry-run` shows the user's numbers), `correct --user`, and `--user` on `audit` and
//! `reservations`, whose tables show a USER column only when some row has a user. A bad user id
//! is refused before anything is sent.

mod common;

use common::{cli, json_of, postgres_store, sqlite_store, Server};
use serde_json::{json, Value};

/// The command's stdout, after checking that it succeeded.
async fn ok_out(url: &str, args: &[&str]) -> String {
    let (ok, out, err) = cli(url, args).await;
    assert!(ok, "quota {args:?} failed: {out}{err}");
    out
}

/// The command's (stdout, stderr), after checking that it failed.
async fn failed(url: &str, args: &[&str]) -> (String, String) {
    let (ok, out, err) = cli(url, args).await;
    assert!(!ok, "quota {args:?} succeeded: {out}");
    (out, err)
}

/// The cells of the table row that starts with `first`.
fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{table}"))
}

fn id_of(reservation: &Value) -> String {
    reservation["reservation_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a reservation: {reservation}"))
        .to_owned()
}

#[tokio::test]
async fn users_on_the_command_line_sqlite() {
    let store = sqlite_store();
    let server = Server::start(&store);
    users_on_the_command_line(&server.url).await;
}

#[tokio::test]
async fn users_on_the_command_line_postgres() {
    let Some(store) = postgres_store().await else {
        return;
    };
    let server = Server::start(&store);
    users_on_the_command_line(&server.url).await;
}

async fn users_on_the_command_line(url: &str) {
    ok_out(
        url,
        &["defaults", "set", "instances=10", "cores=20", "ram=-1"],
    )
    .await;

    // limits set|get --user: the user's own limit, the project's effective limit for the rest.
    let set = ok_out(
        url,
        &["limits", "set", "globex", "instances=2", "--user", "alice"],
    )
    .await;
    assert_eq!(row(&set, "instances"), ["instances", "2"], "{set}");
    assert_eq!(row(&set, "ram"), ["ram", "unlimited"], "{set}");
    let got = ok_out(url, &["limits", "get", "globex", "--user", "alice"]).await;
    assert_eq!(row(&got, "instances"), ["instances", "2", "user"], "{got}");
    assert_eq!(row(&got, "cores"), ["cores", "20", "default"], "{got}");
    let json = json_of(
        &ok_out(
            url,
            &["--json", "limits", "get", "globex", "--user", "alice"],
        )
        .await,
    );
    assert_eq!(json["user"], "alice", "{json}");
    assert_eq!(
        json["limits"]["instances"],
        json!({"limit": 2, "source": "user"})
    );
    // The project's own limits are untouched.
    let project = json_of(&ok_out(url, &["--json", "limits", "get", "globex"]).await);
    assert!(project.get("user").is_none(), "{project}");
    assert_eq!(
        project["limits"]["instances"]["source"], "default",
        "{project}"
    );

    // reserve --user: the reservation says whose it is.
    let held = ok_out(
        url,
        &["reserve", "globex", "instances=2", "--user", "alice"],
    )
    .await;
    assert_eq!(row(&held, "user"), ["user", "alice"], "{held}");
    let alices = json_of(
        &ok_out(
            url,
            &["--json", "reservation", "globex", held_id(&held).as_str()],
        )
        .await,
    );
    assert_eq!(alices["user"], "alice", "{alices}");

    // Over the user's own limit: the refusal names the user's overs, and what to do.
    let (_, err) = failed(
        url,
        &["reserve", "globex", "instances=1", "--user", "alice"],
    )
    .await;
    for expected in [
        "over-quota (403)",
        "over the user's quota for instances",
        "user_overs: [\"instances\"]",
        "user_limits: {\"instances\":2}",
        "user_headroom: {\"instances\":0}",
        "--user",
    ] {
        assert!(err.contains(expected), "{expected:?} missing:\n{err}");
    }
    let (out, _) = failed(
        url,
        &[
            "--json",
            "reserve",
            "globex",
            "instances=1",
            "--user",
            "alice",
        ],
    )
    .await;
    let problem = json_of(&out);
    assert_eq!(problem["status"], 403, "{problem}");
    assert_eq!(problem["overs"], json!([]), "{problem}");
    assert_eq!(problem["user_overs"], json!(["instances"]), "{problem}");
    // Over the project's limit only: no user_overs, and no hint about the user's limits.
    let (_, err) = failed(url, &["reserve", "globex", "instances=9", "--user", "bob"]).await;
    assert!(err.contains("over quota for instances"), "{err}");
    assert!(
        !err.contains("user_overs") && !err.contains("--user"),
        "{err}"
    );

    // Another user has no cap but the project's.
    let bobs = json_of(
        &ok_out(
            url,
            &[
                "--json",
                "reserve",
                "globex",
                "instances=3",
                "--user",
                "bob",
            ],
        )
        .await,
    );
    assert_eq!(bobs["user"], "bob", "{bobs}");

    // --dry-run --user: the verdict names the user's overs, then the user's numbers.
    let dry = ok_out(
        url,
        &[
            "reserve",
            "globex",
            "instances=1",
            "--user",
            "alice",
            "--dry-run",
        ],
    )
    .await;
    assert!(
        dry.contains("would be denied: over user alice's quota for instances"),
        "{dry}"
    );
    let (project_part, user_part) = dry
        .split_once("user alice (")
        .unwrap_or_else(|| panic!("the user's numbers: {dry}"));
    assert_eq!(
        row(project_part, "instances"),
        ["instances", "10", "0", "5", "5"],
        "{dry}"
    );
    assert_eq!(
        row(user_part, "instances"),
        ["instances", "2", "0", "2", "0"],
        "{dry}"
    );
    let dry = json_of(
        &ok_out(
            url,
            &[
                "--json",
                "reserve",
                "globex",
                "instances=1",
                "--user",
                "bob",
                "--dry-run",
            ],
        )
        .await,
    );
    assert_eq!(dry["granted"], true, "{dry}");
    assert_eq!(dry["user_overs"], json!([]), "{dry}");
    assert_eq!(
        dry["user_usage"]["instances"],
        json!({"in_use": 0, "reserved": 3})
    );
    let plain = ok_out(url, &["reserve", "globex", "instances=1", "--dry-run"]).await;
    assert!(
        !plain.contains("user"),
        "no user, no user's numbers: {plain}"
    );

    // usage --user: the user's own usage against its limit.
    let usage = ok_out(url, &["usage", "globex", "--user", "alice"]).await;
    assert_eq!(
        row(&usage, "instances"),
        ["instances", "2", "0", "2", "0"],
        "{usage}"
    );
    assert!(
        usage.contains("(user alice of globex, as of position"),
        "{usage}"
    );
    let json = json_of(&ok_out(url, &["--json", "usage", "globex", "--user", "bob"]).await);
    assert_eq!(json["user"], "bob", "{json}");
    assert_eq!(
        json["resources"]["instances"],
        json!({"limit": 10, "in_use": 0, "reserved": 3, "headroom": 7})
    );
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let then = json_of(
        &ok_out(
            url,
            &["--json", "usage", "globex", "--user", "alice", "--at", &now],
        )
        .await,
    );
    assert_eq!(then["user"], "alice", "{then}");
    assert_eq!(then["resources"]["instances"]["reserved"], 2, "{then}");
    let before = ok_out(
        url,
        &[
            "usage",
            "globex",
            "--user",
            "alice",
            "--at",
            "2000-01-01T00:00:00Z",
        ],
    )
    .await;
    assert!(
        before.contains("no usage at 2000-01-01T00:00:00Z"),
        "{before}"
    );

    // correct --user: the user's in_use, and the project's by as much.
    let corrected = ok_out(
        url,
        &[
            "correct",
            "globex",
            "instances=1",
            "--reason",
            "recount",
            "--user",
            "alice",
        ],
    )
    .await;
    assert_eq!(
        row(&corrected, "instances"),
        ["instances", "0", "1"],
        "{corrected}"
    );
    assert!(corrected.contains("user alice's in_use"), "{corrected}");
    let again = json_of(
        &ok_out(
            url,
            &[
                "--json",
                "correct",
                "globex",
                "instances=1",
                "--reason",
                "recount",
                "--user",
                "alice",
            ],
        )
        .await,
    );
    assert_eq!(again["corrections"], json!([]), "already right: {again}");
    let same = ok_out(
        url,
        &[
            "correct",
            "globex",
            "instances=1",
            "--reason",
            "r",
            "--user",
            "alice",
        ],
    )
    .await;
    assert!(
        same.contains("nothing to correct: every count of user alice was already right"),
        "{same}"
    );
    let alice = json_of(&ok_out(url, &["--json", "usage", "globex", "--user", "alice"]).await);
    assert_eq!(alice["resources"]["instances"]["in_use"], 1, "{alice}");
    let bob = json_of(&ok_out(url, &["--json", "usage", "globex", "--user", "bob"]).await);
    assert_eq!(bob["resources"]["instances"]["in_use"], 0, "{bob}");
    let whole = json_of(&ok_out(url, &["--json", "usage", "globex"]).await);
    assert_eq!(whole["resources"]["instances"]["in_use"], 1, "{whole}");
    assert!(whole.get("user").is_none(), "{whole}");

    // audit --user and reservations --user: only that user's rows, with a USER column.
    let audit = json_of(&ok_out(url, &["--json", "audit", "globex", "--user", "alice"]).await);
    let entries = audit["entries"].as_array().expect("entries");
    let types: Vec<&str> = entries
        .iter()
        .map(|e| e["type"].as_str().unwrap_or(""))
        .collect();
    assert!(
        types.contains(&"ReservationRequested")
            && types.contains(&"ReservationDenied")
            && types.contains(&"UsageCorrected"),
        "{audit}"
    );
    assert!(entries.iter().all(|e| e["user"] == "alice"), "{audit}");
    let table = ok_out(url, &["audit", "globex", "--user", "alice"]).await;
    assert!(
        table.lines().next().is_some_and(|h| h.contains("USER")),
        "{table}"
    );
    assert!(!table.contains("bob"), "{table}");
    let everyone = ok_out(url, &["audit", "globex"]).await;
    assert!(
        everyone.contains("alice") && everyone.contains("bob"),
        "{everyone}"
    );

    let listed = ok_out(url, &["reservations", "globex"]).await;
    let header = listed.lines().next().unwrap_or_default();
    assert!(
        header.starts_with("RESERVATION") && header.contains("USER"),
        "{listed}"
    );
    assert_eq!(row(&listed, &id_of(&alices))[1], "alice", "{listed}");
    assert_eq!(row(&listed, &id_of(&bobs))[1], "bob", "{listed}");
    let only = json_of(&ok_out(url, &["--json", "reservations", "globex", "--user", "bob"]).await);
    let ids: Vec<String> = only["reservations"]
        .as_array()
        .expect("reservations")
        .iter()
        .map(id_of)
        .collect();
    assert_eq!(ids, [id_of(&bobs)], "{only}");

    // Below the user's usage: refused with the --force hint; forced, it is set.
    let (_, err) = failed(
        url,
        &["limits", "set", "globex", "instances=1", "--user", "alice"],
    )
    .await;
    assert!(
        err.contains("limit-below-usage") && err.contains("--force"),
        "{err}"
    );

    // limits reset --user: no cap but the project's; --json prints the limits now in effect.
    let reset = ok_out(url, &["limits", "reset", "globex", "--user", "alice"]).await;
    assert!(
        reset.contains("alice has no limits of its own in globex"),
        "{reset}"
    );
    let json = json_of(
        &ok_out(
            url,
            &["--json", "limits", "reset", "globex", "--user", "bob"],
        )
        .await,
    );
    assert_eq!(json["user"], "bob", "{json}");
    assert_eq!(
        json["limits"]["instances"],
        json!({"limit": 10, "source": "default"})
    );
    ok_out(
        url,
        &["reserve", "globex", "instances=1", "--user", "alice"],
    )
    .await;
}

/// The id a `quota reserve` table printed.
fn held_id(table: &str) -> String {
    row(table, "reservation")[1].to_owned()
}

/// Without users, the tables are as they were: no USER column, no user line.
#[tokio::test]
async fn tables_without_users_have_no_user_column() {
    let store = sqlite_store();
    let server = Server::start(&store);
    let url = server.url.clone();
    ok_out(&url, &["defaults", "set", "instances=10"]).await;
    let held = ok_out(&url, &["reserve", "acme", "instances=1"]).await;
    assert!(!held.contains("user"), "{held}");
    let listed = ok_out(&url, &["reservations", "acme"]).await;
    assert!(!listed.contains("USER"), "{listed}");
    let audit = ok_out(&url, &["audit", "acme"]).await;
    assert!(!audit.contains("USER"), "{audit}");
    let usage = ok_out(&url, &["usage", "acme"]).await;
    assert!(!usage.contains("user"), "{usage}");
}

/// A bad `--user` is refused by the command line itself, in the server's words, before any
/// request (the URL here reaches no server).
#[tokio::test]
async fn a_bad_user_id_is_refused_before_anything_is_sent() {
    let nowhere = "http://127.0.0.1:9";
    for args in [
        &["usage", "globex", "--user", "al ice"][..],
        &["limits", "set", "globex", "instances=1", "--user", "al ice"],
        &["reserve", "globex", "instances=1", "--user", "al ice"],
        &[
            "correct",
            "globex",
            "instances=1",
            "--reason",
            "r",
            "--user",
            "al ice",
        ],
    ] {
        let (_, err) = failed(nowhere, args).await;
        assert!(
            err.contains("invalid user id: contains ' '; allowed are A-Z a-z 0-9 . _ : -"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("cannot reach"), "nothing was sent: {err}");
    }
    let long = "u".repeat(129);
    let (_, err) = failed(nowhere, &["limits", "get", "globex", "--user", &long]).await;
    assert!(
        err.contains("invalid user id: must be 1 to 128 characters long"),
        "{err}"
    );
    let (_, err) = failed(nowhere, &["audit", "globex", "--user", ""]).await;
    assert!(err.contains("invalid user id"), "{err}");
}
