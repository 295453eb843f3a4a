//! `GET /ui/`: the audit console (SPEC.md "Audit console"), a page and its scripts and styles
//! built into the binary. The assets hold no data (the page asks for a token and reads the API
//! with it), so they are public; each answer forbids sniffing, framing and any script, style or
//! connection that is not the server's own.

use axum::extract::Path;
use axum::http::{header, HeaderName};
use axum::response::{IntoResponse, Redirect, Response};

use crate::error::{truncate, ApiError};

/// Where the console is served: `/ui/` and the assets under it (`/ui` redirects there).
pub const PREFIX: &str = "/ui";

/// What the page may load: only the server's own scripts, styles and API; no inline code, no
/// frames, no forms posted anywhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

const HTML: &str = "text/html; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

/// Every asset under `/ui/`: its name, content type and text.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "index.html",
        HTML,
        include_str!("../../assets/ui/index.html"),
    ),
    ("app.css", CSS, include_str!("../../assets/ui/app.css")),
    ("app.js", JS, include_str!("../../assets/ui/app.js")),
    ("api.js", JS, include_str!("../../assets/ui/api.js")),
    ("dom.js", JS, include_str!("../../assets/ui/dom.js")),
    ("chart.js", JS, include_str!("../../assets/ui/chart.js")),
    (
        "projects.js",
        JS,
        include_str!("../../assets/ui/projects.js"),
    ),
    ("project.js", JS, include_str!("../../assets/ui/project.js")),
    ("audit.js", JS, include_str!("../../assets/ui/audit.js")),
];

/// The asset named `name`, with its headers, or `None`.
fn asset(name: &str) -> Option<Response> {
    let (_, content_type, text) = ASSETS.iter().find(|(n, _, _)| *n == name)?;
    let headers: [(HeaderName, &str); 5] = [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-cache"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::REFERRER_POLICY, "no-referrer"),
    ];
    Some((headers, *text).into_response())
}

/// `GET /ui`: to `/ui/`, so that the page's relative asset links resolve.
pub async fn redirect() -> Redirect {
    Redirect::permanent("/ui/")
}

/// `GET /ui/`: the page.
pub async fn index() -> Response {
    asset("index.html")
        .unwrap_or_else(|| ApiError::Internal("no console page".into()).into_response())
}

/// `GET /ui/{asset}`: a script or style of the page; any other name is a 404 problem.
pub async fn file(Path(name): Path<String>) -> Result<Response, ApiError> {
    asset(&name).ok_or_else(|| ApiError::NotFound(format!("no console asset {}", truncate(&name))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    fn header_of(response: &Response, name: HeaderName) -> &str {
        response.headers()[name].to_str().expect("ASCII header")
    }

    #[tokio::test]
    async fn the_page_and_its_assets_carry_their_type_and_the_policy() {
        let page = index().await;
        assert_eq!(page.status(), StatusCode::OK);
        assert_eq!(header_of(&page, header::CONTENT_TYPE), HTML);
        assert_eq!(
            header_of(&page, header::CONTENT_SECURITY_POLICY),
            CONTENT_SECURITY_POLICY
        );
        assert_eq!(header_of(&page, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
        assert_eq!(header_of(&page, header::CACHE_CONTROL), "no-cache");
        let script = file(Path("app.js".into())).await.expect("app.js");
        assert_eq!(header_of(&script, header::CONTENT_TYPE), JS);
        let style = file(Path("app.css".into())).await.expect("app.css");
        assert_eq!(header_of(&style, header::CONTENT_TYPE), CSS);
        let Err(missing) = file(Path("secrets.txt".into())).await else {
            panic!("an unknown asset is served");
        };
        assert_eq!(missing.into_response().status(), StatusCode::NOT_FOUND);
    }

    /// Every script the page loads is served, and nothing in the page is inline code or style,
    /// which the policy would block.
    #[test]
    fn the_page_loads_only_served_assets_and_holds_no_inline_code() {
        let (_, _, page) = ASSETS[0];
        for (name, _, text) in ASSETS {
            let lower = text.to_lowercase();
            assert!(!lower.contains("innerhtml"), "{name} uses innerHTML");
            assert!(
                !lower.contains("insertadjacenthtml"),
                "{name} uses insertAdjacentHTML"
            );
            assert!(
                !lower.contains("document.write"),
                "{name} uses document.write"
            );
            assert!(!lower.contains("eval("), "{name} uses eval");
        }
        assert!(!page.contains("<style"), "inline style");
        assert!(!page.contains("style="), "inline style attribute");
        let handler = page.split(" on").skip(1).find(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert!(handler.is_none(), "inline event handler: on{handler:?}");
        for script in page.split("<script").skip(1) {
            let src = script
                .split("src=\"")
                .nth(1)
                .and_then(|s| s.split('"').next())
                .expect("every script has a src");
            assert!(
                ASSETS.iter().any(|(n, _, _)| *n == src),
                "{src} is not served"
            );
        }
        for (name, _, text) in ASSETS.iter().filter(|(n, _, _)| n.ends_with(".js")) {
            for import in text.lines().filter(|l| l.starts_with("import ")) {
                let from = import
                    .rsplit("'./")
                    .next()
                    .and_then(|s| s.split('\'').next());
                let from = from.unwrap_or_else(|| panic!("{name}: {import}"));
                assert!(
                    ASSETS.iter().any(|(n, _, _)| *n == from),
                    "{name} imports {from}"
                );
            }
        }
    }
}
