//! The audit console (SPEC.md "Audit console") as the router serves it: `/ui/` and its assets
//! need no token and carry their content type, `no-cache`, `nosniff` and the strict
//! Content-Security-Policy; `/ui` redirects to `/ui/`; an unknown asset is the API's 404 problem;
//! the API behind it still wants a token. .ci/console.sh drives the page itself in a browser.

mod common;

use common::{sqlite_store, Api, Server};

const ADMIN: &str = "admin-token-0123456789";

fn header<'a>(answer: &'a common::Answer, name: &str) -> &'a str {
    answer
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn the_console_is_served_without_a_token_under_a_strict_policy() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = common::tokens_file(dir.path(), &format!("{ADMIN} admin\n"));
    let server = Server::start_with_tokens(&sqlite_store(), &tokens);
    let anonymous = Api::new(&server.url, None);

    let page = anonymous.get("/ui/").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(page.content_type, "text/html; charset=utf-8");
    let policy = header(&page, "content-security-policy");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(policy.contains(directive), "{directive} not in {policy:?}");
    }
    assert_eq!(header(&page, "x-content-type-options"), "nosniff");
    assert_eq!(header(&page, "cache-control"), "no-cache");
    let html = page.body.as_str().expect("the page as text");
    assert!(
        html.contains("<script type=\"module\" src=\"app.js\">"),
        "{html}"
    );

    for script in [
        "app.js",
        "api.js",
        "dom.js",
        "chart.js",
        "projects.js",
        "project.js",
        "audit.js",
    ] {
        let answer = anonymous.get(&format!("/ui/{script}")).await;
        assert_eq!(answer.status, 200, "{script}: {answer:?}");
        assert_eq!(
            answer.content_type, "text/javascript; charset=utf-8",
            "{script}"
        );
        assert_eq!(header(&answer, "x-content-type-options"), "nosniff");
    }
    let style = anonymous.get("/ui/app.css").await;
    assert_eq!(style.content_type, "text/css; charset=utf-8");

    anonymous
        .get("/ui/secrets.txt")
        .await
        .assert_problem(404, "not-found");
    anonymous
        .get("/ui/app.js?x=1")
        .await
        .assert_problem(400, "invalid-request");
    // The page holds no data; the API it reads still wants a token.
    anonymous
        .get("/v1/projects")
        .await
        .assert_problem(401, "unauthorized");

    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let redirect = no_redirects
        .get(format!("{}/ui", server.url))
        .send()
        .await
        .unwrap();
    assert!(redirect.status().is_redirection(), "{redirect:?}");
    assert_eq!(redirect.headers()["location"], "/ui/");
}
