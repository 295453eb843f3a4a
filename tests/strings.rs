//! Every string a client sends, on every endpoint that takes one (the Nova-compatible routes
//! included, whose refusals are Nova's error body), against a real server on each
//! store: control characters (all of U+0000–U+001F and U+007F–U+009F), lone surrogates escaped
//! in JSON, U+2028, byte-order marks, very long strings and valid odd Unicode (emoji, CJK,
//! zero-width, right-to-left). Users' ids go everywhere one is taken: a reserve's and a
//! correction's `user`, the `{u}` of the four user routes, the audit's `?user=`; a parent goes
//! in `PUT …/parent`'s `parent` and in the `{p}` of the parent routes. Each request
//! is either refused with a 4xx problem or stored as sent; after all of them the views have
//! caught up with the log (lag 0), every stored actor, request id and reserve's user reads back
//! from the audit exactly, and `quota projections verify` is clean.
//! (Before issue 15 an actor holding U+001E stalled every view for good, and U+001F made the
//! views skip the event without a word.)
//!
//! PostgreSQL tests need `QUOTA_TEST_POSTGRES_URL` and pass (skipped) without it.

mod common;

use common::{postgres_store, sqlite_store, views_caught_up, Answer, Api, Body, Server, StoreUrl};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use reqwest::Method;
use serde_json::{json, Value};

/// Requests per store: every field below gets about this many strings over the cases.
const CASES: usize = 500;

/// A string as a client puts it in a JSON body: most are any Rust string (serialised with
/// escapes), some are JSON text no Rust string can be (a lone surrogate escape).
#[derive(Clone, Debug)]
enum Text {
    Str(String),
    /// The JSON literal itself, quotes included.
    Literal(&'static str),
}

impl Text {
    fn json(&self) -> String {
        match self {
            Text::Str(s) => serde_json::to_string(s).expect("a string serialises"),
            Text::Literal(literal) => (*literal).to_owned(),
        }
    }

    /// For failure messages: a long text would bury them.
    fn short(&self) -> String {
        let json = self.json();
        match json.char_indices().nth(80) {
            Some((at, _)) => format!("{}… ({} bytes)", &json[..at], json.len()),
            None => json,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Text::Str(s) => Some(s),
            Text::Literal(_) => None,
        }
    }
}

fn control_character() -> impl Strategy<Value = char> {
    prop_oneof![
        (0u32..=0x1f).prop_map(|c| char::from_u32(c).expect("a char")),
        (0x7fu32..=0x9f).prop_map(|c| char::from_u32(c).expect("a char")),
    ]
}

fn hostile_text() -> impl Strategy<Value = Text> {
    let odd = prop::sample::select(vec![
        "\u{2028}",
        "\u{2029}",
        "🚀",
        "配额",
        "\u{200b}",
        "\u{202e}evil",
        "\u{feff}",
        "e\u{301}",
        "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
        "ﷺ",
        "\u{fffd}",
        "a b",
        "x=y&z",
        "%00",
        "\\u001e",
        "\"quoted\"",
        "💩\u{fe0f}",
    ]);
    prop_oneof![
        4 => (control_character(), "[a-z]{0,3}", "[a-z]{0,3}")
            .prop_map(|(c, a, b)| Text::Str(format!("{a}{c}{b}"))),
        3 => odd.prop_map(|s| Text::Str(s.to_owned())),
        2 => "\\PC{1,40}".prop_map(Text::Str),
        2 => "[A-Za-z0-9._:-]{1,30}".prop_map(Text::Str),
        1 => Just(Text::Str(String::new())),
        1 => Just(Text::Str("é".repeat(256))),
        1 => Just(Text::Str("a".repeat(257))),
        1 => Just(Text::Str("配".repeat(20_000))),
        1 => prop::sample::select(vec!["\"\\ud800\"", "\"a\\udfffb\"", "\"\\ud83d\"", "\"\\u0000\""])
            .prop_map(Text::Literal),
    ]
}

/// Which string field of which endpoint a case puts its text in.
#[derive(Clone, Copy, Debug)]
enum Field {
    ReserveActor,
    ReserveRequestId,
    ReserveResource,
    ReserveReservationId,
    CommitActor,
    ReleaseRequestId,
    LimitsResource,
    DefaultsResource,
    ProjectPath,
    ReservationPath,
    AuditQuery,
    AuditPrincipal,
    DefaultsAuditQuery,
    UsageAt,
    RequestIdHeader,
    ReserveCount,
    DryRunQuery,
    CorrectionReason,
    CorrectionResource,
    ReservationListQuery,
    ReservationListUser,
    ProjectListQuery,
    ProjectListPrefix,
    NovaProjectPath,
    NovaResource,
    ReserveUser,
    CorrectionUser,
    UserLimitsGetPath,
    UserLimitsPutPath,
    UserLimitsDeletePath,
    UserUsagePath,
    AuditUser,
    ParentBody,
    ParentPath,
    HistoryQuery,
    HistoryPath,
}

const FIELDS: [Field; 36] = [
    Field::ReserveActor,
    Field::ReserveRequestId,
    Field::ReserveResource,
    Field::ReserveReservationId,
    Field::CommitActor,
    Field::ReleaseRequestId,
    Field::LimitsResource,
    Field::DefaultsResource,
    Field::ProjectPath,
    Field::ReservationPath,
    Field::AuditQuery,
    Field::AuditPrincipal,
    Field::DefaultsAuditQuery,
    Field::UsageAt,
    Field::RequestIdHeader,
    Field::ReserveCount,
    Field::DryRunQuery,
    Field::CorrectionReason,
    Field::CorrectionResource,
    Field::ReservationListQuery,
    Field::ReservationListUser,
    Field::ProjectListQuery,
    Field::ProjectListPrefix,
    Field::NovaProjectPath,
    Field::NovaResource,
    Field::ReserveUser,
    Field::CorrectionUser,
    Field::UserLimitsGetPath,
    Field::UserLimitsPutPath,
    Field::UserLimitsDeletePath,
    Field::UserUsagePath,
    Field::AuditUser,
    Field::ParentBody,
    Field::ParentPath,
    Field::HistoryQuery,
    Field::HistoryPath,
];

fn encode_component(s: &str) -> String {
    let mut out = String::new();
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// What a stored write must read back as in the audit.
struct Written {
    reservation: String,
    field: &'static str,
    value: String,
}

/// Sends one case; returns what it stored that must read back exactly, if anything.
async fn send_case(api: &Api, field: Field, text: &Text, case: usize) -> Option<Written> {
    let project = format!("p{}", case % 7);
    let reserve_body = |extra: &str| {
        Body::Raw(format!(
            r#"{{"deltas": {{"instances": 1}}, "expires_in": 600{extra}}}"#
        ))
    };
    let (answer, readback) = match field {
        Field::ReserveActor | Field::ReserveRequestId => {
            let name = if matches!(field, Field::ReserveActor) {
                "actor"
            } else {
                "request_id"
            };
            let body = reserve_body(&format!(r#", "{name}": {}"#, text.json()));
            let path = format!("/v1/projects/{project}/reservations");
            (api.send(Method::POST, &path, Some(body)).await, Some(name))
        }
        Field::ReserveUser => {
            let body = reserve_body(&format!(r#", "user": {}"#, text.json()));
            let path = format!("/v1/projects/{project}/reservations");
            (
                api.send(Method::POST, &path, Some(body)).await,
                Some("user"),
            )
        }
        Field::UserLimitsPutPath | Field::UserLimitsDeletePath => {
            let s = text.as_str().filter(|s| s.len() <= 2_000)?;
            let path = format!(
                "/v1/projects/{project}/users/{}/limits",
                encode_component(s)
            );
            let answer = match field {
                Field::UserLimitsPutPath => {
                    let body = Body::Raw(r#"{"limits": {"instances": 1000}}"#.to_owned());
                    api.send(Method::PUT, &path, Some(body)).await
                }
                _ => api.send(Method::DELETE, &path, None).await,
            };
            (answer, None)
        }
        Field::ParentBody => {
            let body = Body::Raw(format!(r#"{{"parent": {}}}"#, text.json()));
            let path = format!("/v1/projects/{project}/parent");
            (api.send(Method::PUT, &path, Some(body)).await, None)
        }
        Field::ParentPath => {
            // Read, set under one of the test's projects, or removed, by turns.
            let s = text.as_str().filter(|s| s.len() <= 2_000)?;
            let path = format!("/v1/projects/{}/parent", encode_component(s));
            let body = Body::Raw(format!(r#"{{"parent": "{project}"}}"#));
            let answer = match case % 3 {
                0 => api.send(Method::GET, &path, None).await,
                1 => api.send(Method::PUT, &path, Some(body)).await,
                _ => api.send(Method::DELETE, &path, None).await,
            };
            (answer, None)
        }
        Field::ReserveResource => {
            let body = Body::Raw(format!(r#"{{"deltas": {{{}: 1}}}}"#, text.json()));
            let path = format!("/v1/projects/{project}/reservations");
            (api.send(Method::POST, &path, Some(body)).await, None)
        }
        Field::ReserveReservationId => {
            let body = reserve_body(&format!(r#", "reservation_id": {}"#, text.json()));
            let path = format!("/v1/projects/{project}/reservations");
            (api.send(Method::POST, &path, Some(body)).await, None)
        }
        Field::CommitActor | Field::ReleaseRequestId => {
            let held = api.reserve(&project, json!({"instances": 1})).await;
            held.assert_status(201);
            let id = held.body["reservation_id"]
                .as_str()
                .expect("an id")
                .to_owned();
            let (verb, name) = match field {
                Field::CommitActor => ("commit", "actor"),
                _ => ("release", "request_id"),
            };
            let body = Body::Raw(format!(r#"{{"{name}": {}}}"#, text.json()));
            let path = format!("/v1/projects/{project}/reservations/{id}/{verb}");
            (api.send(Method::POST, &path, Some(body)).await, Some(name))
        }
        Field::LimitsResource | Field::DefaultsResource => {
            let body = Body::Raw(format!(r#"{{"limits": {{{}: 1000}}}}"#, text.json()));
            let path = match field {
                Field::LimitsResource => format!("/v1/projects/{project}/limits"),
                _ => "/v1/defaults".to_owned(),
            };
            (api.send(Method::PUT, &path, Some(body)).await, None)
        }
        Field::ReserveCount => {
            let body = reserve_body(&format!(r#", "count": {}"#, text.json()));
            let path = format!("/v1/projects/{project}/reservations");
            (api.send(Method::POST, &path, Some(body)).await, None)
        }
        Field::CorrectionReason | Field::CorrectionResource | Field::CorrectionUser => {
            let body = match field {
                Field::CorrectionReason => format!(
                    r#"{{"in_use": {{"instances": 1}}, "reason": {}}}"#,
                    text.json()
                ),
                Field::CorrectionUser => format!(
                    r#"{{"in_use": {{"instances": 1}}, "user": {}, "reason": "recount"}}"#,
                    text.json()
                ),
                _ => format!(
                    r#"{{"in_use": {{{}: 1}}, "reason": "recount"}}"#,
                    text.json()
                ),
            };
            let path = format!("/v1/projects/{project}/usage/corrections");
            (
                api.send(Method::POST, &path, Some(Body::Raw(body))).await,
                None,
            )
        }
        Field::NovaResource => {
            // -1: a name that happens to exist is left unlimited, as the defaults have it.
            let body = Body::Raw(format!(r#"{{"quota_set": {{{}: -1}}}}"#, text.json()));
            let path = format!("/compute/v2.1/os-quota-sets/{project}");
            (api.send(Method::PUT, &path, Some(body)).await, None)
        }
        Field::DryRunQuery => {
            let s = text.as_str().filter(|s| s.len() <= 2_000)?;
            let path = format!(
                "/v1/projects/{project}/reservations?dry_run={}",
                encode_component(s)
            );
            (
                api.send(Method::POST, &path, Some(reserve_body(""))).await,
                None,
            )
        }
        Field::ProjectPath
        | Field::ReservationPath
        | Field::AuditQuery
        | Field::AuditPrincipal
        | Field::DefaultsAuditQuery
        | Field::UsageAt
        | Field::ReservationListQuery
        | Field::ReservationListUser
        | Field::ProjectListQuery
        | Field::ProjectListPrefix
        | Field::NovaProjectPath
        | Field::UserLimitsGetPath
        | Field::UserUsagePath
        | Field::AuditUser
        | Field::HistoryQuery
        | Field::HistoryPath => {
            // A URI past a few kilobytes is refused by the client before it is sent.
            let s = text.as_str().filter(|s| s.len() <= 2_000)?;
            let s = encode_component(s);
            let path = match field {
                Field::ProjectPath => format!("/v1/projects/{s}/usage"),
                Field::ReservationPath => format!("/v1/projects/{project}/reservations/{s}"),
                Field::AuditQuery => format!(
                    "/v1/projects/{project}/audit?actor={s}&type={s}&reservation={s}&cursor={s}"
                ),
                Field::AuditPrincipal => format!("/v1/projects/{project}/audit?principal={s}"),
                Field::ReservationListQuery => format!(
                    "/v1/projects/{project}/reservations?status={s}&older_than={s}&cursor={s}"
                ),
                Field::ReservationListUser => {
                    format!("/v1/projects/{project}/reservations?user={s}")
                }
                Field::ProjectListQuery => format!("/v1/projects?parent={s}&cursor={s}"),
                Field::ProjectListPrefix => format!("/v1/projects?prefix={s}"),
                Field::NovaProjectPath => format!("/compute/v2.1/os-quota-sets/{s}/detail"),
                Field::UserLimitsGetPath => format!("/v1/projects/{project}/users/{s}/limits"),
                Field::UserUsagePath => format!("/v1/projects/{project}/users/{s}/usage"),
                Field::AuditUser => format!("/v1/projects/{project}/audit?user={s}"),
                Field::HistoryQuery => format!(
                    "/v1/projects/{project}/usage/history?resource={s}&since={s}&until={s}&step={s}"
                ),
                Field::HistoryPath => format!("/v1/projects/{s}/usage/history?resource={s}"),
                Field::DefaultsAuditQuery => format!(
                    "/v1/defaults/audit?actor={s}&type={s}&reservation={s}&cursor={s}&principal={s}"
                ),
                _ => format!("/v1/projects/{project}/usage?at={s}"),
            };
            (api.get(&path).await, None)
        }
        Field::RequestIdHeader => {
            // Header values are bytes without controls; others cannot be sent at all.
            let s = text
                .as_str()
                .filter(|s| reqwest::header::HeaderValue::from_str(s).is_ok() && s.len() < 8_000)?;
            let answer = api.get_with_header("/v1/defaults", "x-request-id", s).await;
            (answer, None)
        }
    };
    check_answer(&answer, field, text);
    let name = readback?;
    if answer.status >= 300 {
        return None;
    }
    let value = text.as_str()?.to_owned();
    Some(Written {
        reservation: answer.body["reservation_id"].as_str()?.to_owned(),
        field: name,
        value,
    })
}

#[track_caller]
fn check_answer(answer: &Answer, field: Field, text: &Text) {
    assert!(
        answer.status < 500,
        "{field:?} with {} answered {}: {:?}",
        text.short(),
        answer.status,
        answer.body
    );
    let nova = matches!(field, Field::NovaProjectPath | Field::NovaResource);
    if answer.status >= 400 && nova {
        // Nova's error body: `{fault: {"code": status, "message": …}}`.
        let fault = answer.body.as_object().and_then(|o| o.values().next());
        assert_eq!(
            fault.map(|f| f["code"].clone()),
            Some(json!(answer.status)),
            "{field:?} with {}: {:?}",
            text.short(),
            answer.body
        );
    } else if answer.status >= 400 {
        assert_eq!(
            answer.content_type,
            "application/problem+json",
            "{field:?} with {}: {} {}",
            text.short(),
            answer.status,
            answer.content_type
        );
    }
}
async fn audit_value(api: &Api, project_of: &str, written: &Written) -> Vec<Option<String>> {
    let path = format!(
        "/v1/projects/{project_of}/audit?reservation={}",
        written.reservation
    );
    let answer = api.get(&path).await;
    answer.assert_status(200);
    answer.body["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|entry| entry[written.field].as_str().map(str::to_owned))
        .collect()
}

fn verify(store: &StoreUrl) {
    let output = std::process::Command::new(common::BINARY)
        .args(["projections", "verify", "--store", &store.url])
        .env_remove("QUOTA_STORE")
        .output()
        .expect("run quota projections verify");
    assert!(
        output.status.success(),
        "verify: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

async fn every_string_field_is_refused_or_stored(store: StoreUrl) {
    let server = Server::start(&store);
    let api = server.client();
    api.set_defaults(json!({"instances": -1})).await;
    let mut runner = TestRunner::new(Config {
        rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
        ..Config::default()
    });
    let strategy = (prop::sample::select(FIELDS.to_vec()), hostile_text());
    let mut written = Vec::new();
    for case in 0..CASES {
        let (field, text) = strategy.new_tree(&mut runner).expect("a case").current();
        if let Some(stored) = send_case(&api, field, &text, case).await {
            written.push((format!("p{}", case % 7), stored));
        }
    }
    views_caught_up(&api).await;
    for (project, stored) in &written {
        let values = audit_value(&api, project, stored).await;
        assert!(
            values
                .iter()
                .any(|v| v.as_deref() == Some(stored.value.as_str())),
            "{} {} did not read back from the audit: {values:?}",
            stored.field,
            Text::Str(stored.value.clone()).short()
        );
    }
    assert!(server.terminate(), "the server shuts down cleanly");
    verify(&store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_string_field_is_refused_or_stored_on_sqlite() {
    every_string_field_is_refused_or_stored(sqlite_store()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_string_field_is_refused_or_stored_on_postgres() {
    if let Some(store) = postgres_store().await {
        every_string_field_is_refused_or_stored(store).await;
    }
}

#[test]
fn a_json_value_of_each_kind_round_trips_through_text() {
    // The lone-surrogate literals are not JSON strings serde_json will read: a server built on
    // it refuses them as malformed, which is what the test above expects of it.
    for literal in ["\"\\ud800\"", "\"a\\udfffb\"", "\"\\ud83d\""] {
        assert!(serde_json::from_str::<Value>(literal).is_err(), "{literal}");
    }
}
