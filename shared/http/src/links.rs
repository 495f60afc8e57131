//! The base path links are written under. A host that serves the router below a path prefix
//! (API Gateway's default execute-api URL serves it under the stage, `/v/v1/runs`, while the
//! router sees `/v1/runs`) inserts a [`BasePath`] request extension; every link the wire
//! writes (`statusUrl`, `eventsUrl`, `Location`, an interrupt's `callbackUrl`) is then
//! prefixed with it. Without the extension the prefix is empty: links read `/v1/...`.

use std::convert::Infallible;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde_json::Value;

/// Request extension (and extractor): the path prefix the client addressed this router
/// under, such as `/v` for an API Gateway stage; empty (the default) when none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BasePath(String);

impl BasePath {
    /// The prefix `prefix`, without its trailing slashes (`"/v/"` → `"/v"`, `"/"` → empty).
    pub fn new(prefix: impl Into<String>) -> Self {
        let mut prefix = prefix.into();
        while prefix.ends_with('/') {
            prefix.pop();
        }
        Self(prefix)
    }

    /// The prefix (empty when none).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `path` (a router path such as `/v1/runs/r-1`) as the client addresses it.
    pub(crate) fn link(&self, path: &str) -> String {
        format!("{}{path}", self.0)
    }

    /// Prefixes the link fields (`statusUrl`, `eventsUrl`, `callbackUrl`) of `doc` that hold
    /// a path.
    pub(crate) fn prefix_fields(&self, doc: &mut Value) {
        if self.0.is_empty() {
            return;
        }
        for field in ["statusUrl", "eventsUrl", "callbackUrl"] {
            if let Some(path) = doc.get(field).and_then(Value::as_str).filter(|path| path.starts_with('/')) {
                doc[field] = Value::String(self.link(path));
            }
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for BasePath {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<BasePath>().cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_slashes_are_dropped_and_only_paths_are_prefixed() {
        assert_eq!(BasePath::new("/v/").as_str(), "/v");
        assert_eq!(BasePath::new("/").as_str(), "");
        let mut doc = serde_json::json!({ "statusUrl": "/v1/runs/r", "eventsUrl": "https://x/e", "other": "/o" });
        BasePath::new("/v").prefix_fields(&mut doc);
        assert_eq!(doc, serde_json::json!({ "statusUrl": "/v/v1/runs/r", "eventsUrl": "https://x/e", "other": "/o" }));
        let mut untouched = doc.clone();
        BasePath::default().prefix_fields(&mut untouched);
        assert_eq!(untouched, doc);
    }
}
