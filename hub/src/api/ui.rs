//! The web fleet view at `/ui`: one HTML page, one ES module, one style
//! sheet and an icon, embedded in the binary (works air-gapped, no CDN).
//!
//! The page signs in with an API token it keeps in the tab's
//! sessionStorage and reads the REST lists and the SSE watch
//! (`/api/v1/watch`) like any other client; these routes serve only the
//! static assets and need no token. Every answer carries a strict
//! Content-Security-Policy (scripts and styles from this origin only, no
//! inline code, no framing), `nosniff` and `no-referrer`.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The policy of every `/ui` answer: only this origin's files, no inline
/// script or style, no plugins, no framing, no `<base>` games, forms post
/// nowhere else.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

const INDEX_HTML: &str = include_str!("../../ui/index.html");
const APP_JS: &str = include_str!("../../ui/app.js");
const APP_CSS: &str = include_str!("../../ui/app.css");
const FAVICON_SVG: &str = include_str!("../../ui/favicon.svg");

/// Each asset's path, content type and body.
const ASSETS: [(&str, &str, &str); 5] = [
    ("/ui", "text/html; charset=utf-8", INDEX_HTML),
    ("/ui/", "text/html; charset=utf-8", INDEX_HTML),
    ("/ui/app.js", "text/javascript; charset=utf-8", APP_JS),
    ("/ui/app.css", "text/css; charset=utf-8", APP_CSS),
    ("/ui/favicon.svg", "image/svg+xml", FAVICON_SVG),
];

/// The `/ui` routes (no state: the page talks to `/api/v1` itself).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    ASSETS
        .into_iter()
        .fold(Router::new(), |router, (path, content_type, body)| {
            router.route(path, get(move || async move { asset(content_type, body) }))
        })
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(CONTENT_SECURITY_POLICY),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
            // For browsers that predate `frame-ancestors`.
            (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
            // Small files embedded in this binary: revalidate so an
            // upgraded hub is never paired with a cached older script.
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_allows_no_inline_code_and_no_framing() {
        let csp = CONTENT_SECURITY_POLICY;
        assert!(csp.starts_with("default-src 'self'"));
        assert!(csp.contains("frame-ancestors 'none'"));
        assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"));
    }

    /// The policy forbids inline code, so the page must have none, and the
    /// script must never build HTML from strings.
    #[test]
    fn the_assets_have_no_inline_code_and_render_text_only() {
        assert!(!INDEX_HTML.contains("<style"));
        assert!(!INDEX_HTML.contains(" style="));
        assert_eq!(INDEX_HTML.matches("<script").count(), 1);
        assert!(INDEX_HTML.contains(r#"<script type="module" src="/ui/app.js"></script>"#));
        assert!(!INDEX_HTML.contains("onclick") && !INDEX_HTML.contains("onload"));
        for sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
        ] {
            assert!(!APP_JS.contains(sink), "app.js uses {sink}");
        }
        // The token input has no name: a form submitted without the script
        // would not put it into a URL.
        assert!(!INDEX_HTML.contains(r#"name="token""#));
    }
}
