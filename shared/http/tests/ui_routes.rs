//! The run viewer's routes through the whole router (`oneshot`): the assets need no key, a
//! stage-relative redirect, the security headers on every answer (the 404 envelope too), a
//! wrong method answered with the envelope, and an `Idempotency-Key` on a `/ui` request
//! claiming nothing.

mod support;

use support::{assert_envelope, harness};

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

#[tokio::test]
async fn ui_redirects_relative_to_the_page() {
    let app = harness().await;
    let answer = app.send("GET", "/ui", None, &[], None).await;
    assert_eq!(answer.status.as_u16(), 308);
    assert_eq!(answer.headers["location"], "ui/");
    assert_eq!(answer.headers["content-security-policy"], CSP);
}

#[tokio::test]
async fn assets_are_served_without_a_key() {
    let app = harness().await;
    for (path, kind) in [
        ("/ui/", "text/html; charset=utf-8"),
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/pages/run.js", "text/javascript; charset=utf-8"),
        ("/ui/style.css", "text/css; charset=utf-8"),
    ] {
        let answer = app.send("GET", path, None, &[], None).await;
        assert_eq!(answer.status.as_u16(), 200, "{path}");
        assert_eq!(answer.headers["content-type"], kind, "{path}");
        assert_eq!(answer.headers["content-security-policy"], CSP, "{path}");
        assert_eq!(answer.headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(answer.headers["referrer-policy"], "no-referrer", "{path}");
        assert_eq!(answer.headers["cache-control"], "no-cache", "{path}");
        assert!(!answer.text.is_empty(), "{path}");
    }
    let index = app.send("GET", "/ui/", None, &[], None).await;
    assert!(index.text.contains(r#"<script type="module" src="app.js">"#), "the shell loads app.js relatively");
}

#[tokio::test]
async fn a_missing_asset_is_the_404_envelope_with_the_headers() {
    let app = harness().await;
    let answer = app.send("GET", "/ui/no-such.js", None, &[], None).await;
    assert_eq!(answer.status.as_u16(), 404);
    assert_envelope(&answer.json(), "not_found");
    assert_eq!(answer.headers["content-security-policy"], CSP);
}

#[tokio::test]
async fn a_post_to_an_asset_is_refused_and_claims_no_key() {
    let app = harness().await;
    let before = app.counts();
    let headers = [("idempotency-key", "ui-1"), ("content-type", "application/json")];
    let answer = app.send("POST", "/ui/app.js", Some(support::KEY), &headers, Some(serde_json::json!({}))).await;
    assert_eq!(answer.status.as_u16(), 405);
    assert_envelope(&answer.json(), "method_not_allowed");
    assert_eq!(app.counts(), before, "nothing was stored for the key");
}
