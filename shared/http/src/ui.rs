//! The run viewer at `/ui`: hand-written ES modules, CSS and an HTML shell, embedded in the
//! binary with `include_str!` and served by the same router as the API (so the embedded host
//! and the serverless API function, under its stage, serve the same page).
//!
//! The assets hold no data, so these routes take no API key; every data request the page makes
//! carries the key itself (`Authorization: Bearer`). The router merges them outside the
//! idempotency layer, so no request to them (not even a refused `POST` with an
//! `Idempotency-Key`) claims a key. Every answer carries a strict Content-Security-Policy (no inline
//! script or style, connections to this origin only), `nosniff`, `no-referrer` and `no-cache`.

use axum::extract::Path;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::error::ApiError;
use crate::AppState;

/// The Content-Security-Policy of every `/ui` answer.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `Content-Type` of the HTML shell.
const HTML: &str = "text/html; charset=utf-8";
/// `Content-Type` of the ES modules.
const JS: &str = "text/javascript; charset=utf-8";
/// `Content-Type` of the stylesheet.
const CSS: &str = "text/css; charset=utf-8";

/// One embedded file: its path under `/ui/`, its content type and its text.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// Declares an asset of `shared/http/ui/`.
macro_rules! asset {
    ($path:literal, $type:expr) => {
        Asset { path: $path, content_type: $type, body: include_str!(concat!("../ui/", $path)) }
    };
}

/// Every file the page is made of.
const ASSETS: &[Asset] = &[
    asset!("index.html", HTML),
    asset!("style.css", CSS),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("router.js", JS),
    asset!("graph.js", JS),
    asset!("form.js", JS),
    asset!("pages/runs.js", JS),
    asset!("pages/run.js", JS),
    asset!("pages/workflows.js", JS),
];

/// The `/ui` routes, merged into the API router ahead of its fallback.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/ui", get(redirect)).route("/ui/", get(index)).route("/ui/{*file}", get(file))
}

/// `GET /ui` → `308` to `ui/`, relative so a stage prefix is kept (`/v/ui` → `/v/ui/`).
async fn redirect() -> Response {
    let mut response = StatusCode::PERMANENT_REDIRECT.into_response();
    response.headers_mut().insert(header::LOCATION, HeaderValue::from_static("ui/"));
    secure(response)
}

/// `GET /ui/` → the HTML shell.
async fn index() -> Response {
    serve("index.html")
}

/// `GET /ui/{file}` → the asset, or the `404` envelope.
async fn file(Path(file): Path<String>) -> Response {
    serve(&file)
}

/// The answer for the asset at `path`.
fn serve(path: &str) -> Response {
    match ASSETS.iter().find(|asset| asset.path == path) {
        Some(asset) => {
            let mut response = asset.body.into_response();
            response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
            secure(response)
        }
        None => secure(ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such file").into_response()),
    }
}

/// Adds the security and caching headers every `/ui` answer carries.
fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(HeaderName::from_static("referrer-policy"), HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The most text the page may weigh.
    const BUDGET_BYTES: usize = 200 * 1024;

    #[test]
    fn the_assets_fit_the_budget() {
        let total: usize = ASSETS.iter().map(|asset| asset.body.len()).sum();
        assert!(total <= BUDGET_BYTES, "the /ui assets weigh {total} bytes, over {BUDGET_BYTES}");
    }

    /// The files under `dir` (relative to `shared/http/ui/`), recursively.
    fn files_under(root: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files_under(root, &path, out);
            } else {
                out.push(path.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/"));
            }
        }
    }

    #[test]
    fn every_file_of_the_ui_folder_is_in_the_table() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ui");
        let mut files = Vec::new();
        files_under(&root, &root, &mut files);
        files.sort();
        let mut listed: Vec<String> = ASSETS.iter().map(|asset| asset.path.to_owned()).collect();
        listed.sort();
        assert_eq!(files, listed, "shared/http/ui and the embedded table differ");
    }

    #[test]
    fn every_asset_has_the_content_type_of_its_extension() {
        for asset in ASSETS {
            let expected = match asset.path.rsplit_once('.').map(|(_, ext)| ext) {
                Some("html") => HTML,
                Some("js") => JS,
                Some("css") => CSS,
                other => panic!("{}: unexpected extension {other:?}", asset.path),
            };
            assert_eq!(asset.content_type, expected, "{}", asset.path);
        }
    }

    #[test]
    fn no_asset_writes_markup_or_runs_strings() {
        let forbidden =
            ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "javascript:"];
        for asset in ASSETS {
            for word in forbidden {
                assert!(!asset.body.contains(word), "{} contains `{word}`", asset.path);
            }
        }
    }

    /// Whether `html` holds an attribute such as ` onclick=`.
    fn has_event_attribute(html: &str) -> bool {
        html.match_indices(" on").any(|(at, _)| {
            let name: String = html[at + 3..].chars().take_while(char::is_ascii_alphabetic).collect();
            !name.is_empty() && html[at + 3 + name.len()..].starts_with('=')
        })
    }

    #[test]
    fn no_asset_holds_inline_script_or_style() {
        let html = serve("index.html");
        assert_eq!(html.status(), StatusCode::OK);
        for asset in ASSETS.iter().filter(|asset| asset.path.ends_with(".html")) {
            assert!(!asset.body.contains("<style"), "{}: inline <style>", asset.path);
            assert!(!asset.body.contains("style="), "{}: inline style attribute", asset.path);
            assert!(!has_event_attribute(asset.body), "{}: inline event handler", asset.path);
            for (at, _) in asset.body.match_indices("<script") {
                let tag = &asset.body[at..asset.body[at..].find('>').map_or(asset.body.len(), |end| at + end)];
                assert!(tag.contains("src="), "{}: inline <script>", asset.path);
            }
        }
    }

    #[test]
    fn answers_carry_the_policy_and_the_type() {
        for asset in ASSETS {
            let response = serve(asset.path);
            assert_eq!(response.status(), StatusCode::OK, "{}", asset.path);
            let headers = response.headers();
            assert_eq!(headers[header::CONTENT_TYPE], asset.content_type, "{}", asset.path);
            assert_eq!(headers[header::CONTENT_SECURITY_POLICY], CSP);
            assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert_eq!(headers["referrer-policy"], "no-referrer");
            assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
        }
        let missing = serve("nope.js");
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        assert_eq!(missing.headers()[header::CONTENT_SECURITY_POLICY], CSP);
        assert!(CSP.contains("frame-ancestors 'none'") && CSP.contains("script-src 'self';"));
    }
}
