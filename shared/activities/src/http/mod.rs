//! `core.http.request`: one HTTP call per attempt through the SSRF-guarded [`HttpClient`].
//!
//! - [`config`]: the node's config and its checks;
//! - [`client`]: the outbound client (resolve → check → pin → connect; redirects off);
//! - [`ssrf`]: the address policy and the operator's allow-list.
//!
//! [`Activity::prepare`] renders `url` (values percent-encoded), `headers` and `body` (a lone
//! placeholder keeps its JSON type) against the node's inputs and the run's variables into
//! `{url, method, headers, body?, expectStatus}`; that value holds header values as rendered
//! (e.g. an `Authorization` token), so whoever stores it must treat it as secret.
//! [`Activity::execute`] sends it with `Idempotency-Key` (the same on every attempt) and
//! `Trellis-Attempt` (0-based), an object body JSON-encoded with `Content-Type:
//! application/json`, and outputs `{status, headers, body, bodyTruncated, durationMs}`:
//! `headers` are the lower-cased allow-listed [`OUTPUT_HEADERS`] (never `set-cookie`), `body`
//! is parsed JSON when the response says JSON and parses, otherwise text.
//!
//! A status outside `expectStatus` (default 200–299; a 3xx too, as redirects are not
//! followed) fails with `http_unexpected_status` `{actual, expected, response}`, retryable
//! for 408, 425, 429 and 5xx. Other codes: `http_url_rejected` (never retryable),
//! `http_timeout` `{timeoutMs}` and `http_network_error` (retryable), `validation_error`.
//!
//! With `config.auth` the node's `credentialsRef` is resolved through the host's
//! [`SecretResolver`] inside each attempt, before anything is sent, and the secret enters
//! only the outbound header (marked sensitive); the prepared request carries `auth:
//! {scheme, header?}` and never the value. A host without a resolver fails the node before
//! any attempt (`credential_unavailable`); a secret that does not resolve fails the attempt
//! with the resolver's code (`credential_not_found`, or `credential_unavailable`, retryable
//! when the backend failure is transient) and no call is made.

pub mod client;
pub mod config;
pub mod ssrf;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::Method;
use serde_json::{json, Map, Value};
use trellis_core::activity::template::{self, Encoding, Scope};
use trellis_core::activity::{Activity, ActivityCall, ActivityError, ActivityResult, ProgressSink};
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::NodeContext;
use trellis_core::run::RunError;
use trellis_core::secrets::{self, SecretError, SecretResolver};

pub use client::{HttpClient, HttpError, HttpSettings, InboundResponse, OutboundRequest};
pub use config::{Auth, ExpectStatus, HttpConfig};
pub use ssrf::{AllowList, AllowListError, BlockReason};

/// The node's `typeId`.
pub const TYPE_ID: &str = "core.http.request";

/// Response headers copied into the outputs (anything else, `set-cookie` included, is dropped).
pub const OUTPUT_HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "etag",
    "last-modified",
    "location",
    "retry-after",
    "cache-control",
    "x-request-id",
];

/// Methods retried without an explicit `settings.retry`.
const IDEMPOTENT_METHODS: &[&str] = &["GET", "HEAD", "PUT", "DELETE", "OPTIONS"];

/// The `core.http.request` executor.
#[derive(Debug, Clone)]
pub struct HttpRequestActivity {
    client: HttpClient,
    secrets: Option<Arc<dyn SecretResolver>>,
}

impl HttpRequestActivity {
    /// An executor sending through `client`, with no secret resolver (a node with
    /// `config.auth` fails with `credential_unavailable`).
    pub fn new(client: HttpClient) -> Self {
        Self { client, secrets: None }
    }

    /// The same executor resolving `config.auth` secrets through `resolver`.
    pub fn with_secrets(mut self, resolver: Option<Arc<dyn SecretResolver>>) -> Self {
        self.secrets = resolver;
        self
    }

    /// The client.
    pub fn client(&self) -> &HttpClient {
        &self.client
    }
}

fn validation(message: impl Into<String>, path: &str) -> RunError {
    RunError { code: "validation_error".to_owned(), message: message.into(), details: Some(json!({ "path": path })) }
}

fn bad_request(message: impl Into<String>) -> ActivityError {
    ActivityError::new("validation_error", message, false)
}

#[async_trait]
impl Activity for HttpRequestActivity {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        config::parse(config).map(drop).map_err(ConfigIssue::Invalid)
    }

    fn idempotent(&self, config: &Map<String, Value>) -> bool {
        config::parse(config).is_ok_and(|parsed| IDEMPOTENT_METHODS.contains(&parsed.method))
    }

    /// Read-only methods only: a rerun takes a `GET`/`HEAD`'s recorded answer, never a
    /// `POST`/`PUT`/`PATCH`/`DELETE`'s (unless the node sets `settings.cacheable: true`).
    fn cacheable(&self, config: &Map<String, Value>) -> bool {
        config::parse(config).is_ok_and(|parsed| matches!(parsed.method, "GET" | "HEAD"))
    }

    fn needs_credentials(&self, config: &Map<String, Value>) -> bool {
        config.get("auth").is_some_and(|auth| !auth.is_null())
    }

    fn attempt_timeout_ms(&self, config: &Map<String, Value>) -> u64 {
        config::parse(config).map_or(config::DEFAULT_TIMEOUT_MS, |parsed| parsed.timeout_ms)
    }

    fn prepare(&self, context: &NodeContext<'_>) -> Result<Value, RunError> {
        let parsed = config::parse(context.config).map_err(|message| RunError::new("validation_error", message))?;
        if parsed.auth.is_some() && self.secrets.is_none() {
            let reference = format!("(credentialsRef of node {})", context.node_id);
            return Err(SecretError::NotConfigured { reference }.to_run_error());
        }
        let scope = Scope::new(&context.inputs, context.variables);

        // A lone placeholder is the whole URL (a run input, say); values inside a literal URL
        // are percent-encoded, so they cannot add segments or parameters.
        let url = if template::is_single_placeholder(&parsed.url) {
            match template::render_value(&Value::String(parsed.url.clone()), &scope) {
                Ok(Value::String(url)) => url,
                Ok(_) => return Err(validation("config.url renders to a value that is not a string", "/config/url")),
                Err(error) => return Err(error.prefixed("/config/url").to_run_error()),
            }
        } else {
            template::render_string(&parsed.url, &scope, Encoding::UrlComponent)
                .map_err(|error| error.prefixed("/config/url").to_run_error())?
        };
        config::check_static_url(&url).map_err(|message| validation(format!("rendered {message}"), "/config/url"))?;

        let mut headers = Map::new();
        for (name, value) in &parsed.headers {
            let path = format!("/config/headers/{}", template::pointer_token(name));
            let rendered = template::render_string(value, &scope, Encoding::Plain)
                .map_err(|error| error.prefixed(&path).to_run_error())?;
            // The message never repeats the value: it may be a credential.
            HeaderValue::from_str(&rendered).map_err(|_| {
                validation(
                    format!("config.headers.{name} renders to an invalid header value (control characters)"),
                    &path,
                )
            })?;
            headers.insert(name.clone(), Value::String(rendered));
        }

        let mut request = Map::new();
        request.insert("url".to_owned(), Value::String(url));
        request.insert("method".to_owned(), Value::String(parsed.method.to_owned()));
        request.insert("headers".to_owned(), Value::Object(headers));
        if let Some(body) = &parsed.body {
            let rendered =
                template::render_value(body, &scope).map_err(|error| error.prefixed("/config/body").to_run_error())?;
            request.insert("body".to_owned(), rendered);
        }
        request.insert("expectStatus".to_owned(), parsed.expect.to_value());
        if let Some(auth) = &parsed.auth {
            request.insert("auth".to_owned(), auth.to_value());
        }
        if let Some(cap) = parsed.max_response_body_bytes {
            request.insert("maxResponseBodyBytes".to_owned(), json!(cap));
        }
        Ok(Value::Object(request))
    }

    async fn execute(&self, call: &ActivityCall, _progress: &dyn ProgressSink) -> ActivityResult {
        let (mut outbound, expect) = outbound_request(call)?;
        // The secret is resolved for this attempt only, before anything is sent.
        if let Some(auth) = call.request.get("auth") {
            let auth = Auth::from_value(auth).map_err(bad_request)?;
            let header = self.auth_header(call, &auth).await?;
            outbound.headers.push(header);
        }
        let clean_url = url::Url::parse(&outbound.url).map(|url| client::redact_url(&url)).unwrap_or_default();
        let method = outbound.method.clone();
        let started = Instant::now();
        let cap = call.request.get("maxResponseBodyBytes").and_then(Value::as_u64).map(|cap| cap as usize);
        let cap = cap.unwrap_or(self.client.settings().max_response_body_bytes);
        let response = self.client.send_capped(outbound, cap).await.map_err(|error| {
            tracing::debug!(%method, url = %clean_url, code = error.code(), "core.http.request failed");
            let activity_error = ActivityError::new(error.code(), error.to_string(), error.retryable());
            match error.details() {
                Some(details) => activity_error.with_details(details),
                None => activity_error,
            }
        })?;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        tracing::debug!(%method, url = %clean_url, status = response.status, duration_ms, "core.http.request answered");

        let outputs = outputs(&response, duration_ms);
        if !expect.accepts(response.status) {
            let status = response.status;
            let retryable = matches!(status, 408 | 425 | 429 | 500..=599);
            let expected = expect.to_value();
            let mut captured = outputs;
            captured.remove("durationMs");
            return Err(ActivityError::new(
                "http_unexpected_status",
                format!("{clean_url} answered {status}; expected {}", expected_text(&expected)),
                retryable,
            )
            .with_details(json!({ "actual": status, "expected": expected, "response": captured })));
        }
        Ok(outputs)
    }

    fn capabilities(&self) -> Vec<(&'static str, Value)> {
        let mut blocks = vec![(
            "httpClient",
            json!({
                "supported": true,
                "ssrfGuard": true,
                "maxResponseBodyBytes": self.client.settings().max_response_body_bytes.max(1),
                "requestTimeoutMs": config::MAX_TIMEOUT_MS,
                "methods": config::METHODS,
                "safeFetch": { "supported": false },
            }),
        )];
        if self.secrets.is_some() {
            blocks.push(("secrets", secrets::capability()));
        }
        blocks
    }
}

impl HttpRequestActivity {
    /// The header `auth` adds, from the node's resolved `credentialsRef`, marked sensitive.
    async fn auth_header(&self, call: &ActivityCall, auth: &Auth) -> Result<(HeaderName, HeaderValue), ActivityError> {
        let Some(reference) = call.credentials_ref.as_deref() else {
            return Err(ActivityError::new(
                "credential_required",
                format!("node `{}` sets config.auth but has no credentialsRef", call.node_id),
                false,
            ));
        };
        let secret = secrets::resolve_with(self.secrets.as_deref(), &call.tenant, reference)
            .await
            .map_err(|error| error.to_activity_error())?;
        let not_a_header = || {
            SecretError::Unavailable {
                reference: reference.to_owned(),
                reason: "its value cannot be sent in an HTTP header (control characters or not text)".to_owned(),
            }
            .to_activity_error()
        };
        let text = secret.expose_str().ok_or_else(not_a_header)?;
        let (name, value) = match auth {
            Auth::Bearer => (hyper::header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {text}"))),
            Auth::Basic => {
                use base64::Engine as _;
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                (hyper::header::AUTHORIZATION, HeaderValue::from_str(&format!("Basic {encoded}")))
            }
            Auth::Header(name) => {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad_request("invalid auth header"))?;
                (name, HeaderValue::from_str(text))
            }
        };
        let mut value = value.map_err(|_| not_a_header())?;
        value.set_sensitive(true);
        Ok((name, value))
    }
}

fn expected_text(expected: &Value) -> String {
    match expected {
        Value::String(text) => text.clone(),
        Value::Array(items) => items.iter().map(Value::to_string).collect::<Vec<_>>().join(", "),
        other => other.to_string(),
    }
}

/// Reads the prepared request back and adds the host's headers.
fn outbound_request(call: &ActivityCall) -> Result<(OutboundRequest, ExpectStatus), ActivityError> {
    let request = call.request.as_object().ok_or_else(|| bad_request("the prepared request is not an object"))?;
    let url = request
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| bad_request("the prepared request has no url"))?
        .to_owned();
    let method = request
        .get("method")
        .and_then(Value::as_str)
        .filter(|method| config::METHODS.contains(method))
        .and_then(|method| Method::from_bytes(method.as_bytes()).ok())
        .ok_or_else(|| bad_request("the prepared request has no valid method"))?;
    let expect = ExpectStatus::from_value(request.get("expectStatus")).map_err(bad_request)?;

    let mut headers = Vec::new();
    let mut has_content_type = false;
    if let Some(map) = request.get("headers").and_then(Value::as_object) {
        for (name, value) in map {
            let header_name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| bad_request(format!("`{name}` is not a valid header name")))?;
            if config::HOST_HEADERS.contains(&header_name.as_str()) {
                return Err(bad_request(format!("header `{name}` is set by the host")));
            }
            let header_value = value
                .as_str()
                .and_then(|value| HeaderValue::from_str(value).ok())
                .ok_or_else(|| bad_request(format!("header `{name}` has an invalid value")))?;
            has_content_type |= header_name == CONTENT_TYPE;
            headers.push((header_name, header_value));
        }
    }
    let body = match request.get("body") {
        None | Some(Value::Null) => Bytes::new(),
        Some(Value::String(text)) => Bytes::from(text.clone().into_bytes()),
        Some(value) => {
            if !has_content_type {
                headers.push((CONTENT_TYPE, HeaderValue::from_static("application/json")));
            }
            Bytes::from(serde_json::to_vec(value).map_err(|error| bad_request(format!("body: {error}")))?)
        }
    };
    let key = HeaderValue::from_str(&call.idempotency_key)
        .map_err(|_| bad_request("the idempotency key is not a valid header value"))?;
    headers.push((HeaderName::from_static("idempotency-key"), key));
    headers.push((HeaderName::from_static("trellis-attempt"), HeaderValue::from(call.attempt)));

    let outbound = OutboundRequest { method, url, headers, body, timeout: Duration::from_millis(call.timeout_ms) };
    Ok((outbound, expect))
}

/// `{status, headers, body, bodyTruncated, durationMs}`.
fn outputs(response: &InboundResponse, duration_ms: u64) -> Map<String, Value> {
    let mut headers = Map::new();
    for (name, value) in &response.headers {
        if !OUTPUT_HEADERS.contains(&name.as_str()) {
            continue;
        }
        match headers.get_mut(name) {
            Some(Value::String(joined)) => {
                joined.push_str(", ");
                joined.push_str(value);
            }
            _ => {
                headers.insert(name.clone(), Value::String(value.clone()));
            }
        }
    }
    let is_json = headers.get("content-type").and_then(Value::as_str).is_some_and(is_json_media_type);
    let body = is_json
        .then(|| serde_json::from_slice::<Value>(&response.body).ok())
        .flatten()
        .unwrap_or_else(|| Value::String(text(&response.body)));
    let mut outputs = Map::new();
    outputs.insert("status".to_owned(), json!(response.status));
    outputs.insert("headers".to_owned(), Value::Object(headers));
    outputs.insert("body".to_owned(), body);
    outputs.insert("bodyTruncated".to_owned(), json!(response.body_truncated));
    outputs.insert("durationMs".to_owned(), json!(duration_ms));
    outputs
}

/// `application/json`, `application/problem+json`, … (parameters ignored).
fn is_json_media_type(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The body as text: UTF-8 (a character cut by the cap at the end is dropped; other invalid
/// bytes become U+FFFD).
fn text(body: &[u8]) -> String {
    match std::str::from_utf8(body) {
        Ok(text) => text.to_owned(),
        Err(error) if error.error_len().is_none() => String::from_utf8_lossy(&body[..error.valid_up_to()]).into_owned(),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
