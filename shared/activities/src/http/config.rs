//! `core.http.request` config: parsing and the registration-time checks.
//!
//! ```json
//! { "url": "https://api.example.com/items/{{inputs.id}}",   // required
//!   "method": "POST",                                       // GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS, default GET
//!   "headers": {"Authorization": "Bearer {{variables.token}}"},
//!   "body": {"name": "{{inputs.name}}"},                    // string or any JSON value
//!   "timeoutMs": 5000,                                      // 1..=120000, default 30000
//!   "expectStatus": [200, 201],                             // integer or integer array, default 200–299
//!   "auth": {"scheme": "bearer"} }                          // bearer | basic | header (+ "header": name)
//! ```
//!
//! `auth` says how the secret named by the node's `credentialsRef` enters the request:
//! `bearer` sends `Authorization: Bearer <secret>`, `basic` sends `Authorization: Basic
//! base64(<secret>)` (the secret is `user:password`), `header` sends the secret as the value
//! of `auth.header` (e.g. `X-Api-Key`). The header it sets may not also be in `headers`.

use hyper::header::HeaderName;
use serde_json::{json, Map, Value};
use trellis_core::activity::template;

use super::client::RESERVED_HEADERS;

/// The methods the node accepts.
pub const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];

/// The default per-attempt timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// The largest per-attempt timeout (`httpClient.requestTimeoutMs`).
pub const MAX_TIMEOUT_MS: u64 = 120_000;

/// Headers the host sets itself on every attempt.
pub const HOST_HEADERS: &[&str] = &["idempotency-key", "trellis-attempt"];

const EXPECT_RULE: &str = "config.expectStatus must be an HTTP status (100–599) or a non-empty array of them";

const FIELDS: &[&str] =
    &["url", "method", "headers", "body", "timeoutMs", "expectStatus", "auth", "maxResponseBodyBytes"];

/// The largest response body one node may ask to keep (`config.maxResponseBodyBytes`; a
/// larger ask is refused at registration, naming the field): 16 MiB. A body over 256 KiB is stored apart as a
/// blob of the run (`trellis_core::blob`).
pub const MAX_NODE_RESPONSE_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// The `auth.scheme` values.
pub const AUTH_SCHEMES: &[&str] = &["bearer", "basic", "header"];

/// How the node's secret enters the request (`config.auth`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// `Authorization: Bearer <secret>`.
    Bearer,
    /// `Authorization: Basic base64(<secret>)`; the secret is `user:password`.
    Basic,
    /// `<header>: <secret>`.
    Header(String),
}

impl Auth {
    /// The header it sets, lower-cased.
    pub fn header_name(&self) -> String {
        match self {
            Self::Bearer | Self::Basic => "authorization".to_owned(),
            Self::Header(name) => name.to_ascii_lowercase(),
        }
    }

    /// As the prepared request carries it (no secret in it): `{scheme, header?}`.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Bearer => json!({ "scheme": "bearer" }),
            Self::Basic => json!({ "scheme": "basic" }),
            Self::Header(name) => json!({ "scheme": "header", "header": name }),
        }
    }

    /// Reads `config.auth` (or the prepared request's copy); an error names the field.
    pub fn from_value(value: &Value) -> Result<Self, String> {
        let Value::Object(fields) = value else {
            return Err("config.auth must be an object {scheme: bearer|basic|header, header?}".to_owned());
        };
        if let Some(unknown) = fields.keys().find(|key| !matches!(key.as_str(), "scheme" | "header")) {
            return Err(format!("config.auth.{unknown} is not an auth field (allowed: scheme, header)"));
        }
        let scheme = fields.get("scheme").and_then(Value::as_str);
        let header = fields.get("header");
        match (scheme, header) {
            (Some("bearer"), None) => Ok(Self::Bearer),
            (Some("basic"), None) => Ok(Self::Basic),
            (Some("bearer" | "basic"), Some(_)) => {
                Err("config.auth.header is only for scheme `header` (bearer and basic set Authorization)".to_owned())
            }
            (Some("header"), Some(Value::String(name))) => {
                let parsed = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("config.auth.header: `{name}` is not a valid header name"))?;
                if RESERVED_HEADERS.contains(&parsed.as_str()) || HOST_HEADERS.contains(&parsed.as_str()) {
                    return Err(format!("config.auth.header: `{name}` is set by the host"));
                }
                Ok(Self::Header(name.clone()))
            }
            (Some("header"), _) => Err("config.auth.header is required for scheme `header` (a header name)".to_owned()),
            _ => Err(format!("config.auth.scheme must be one of {}", AUTH_SCHEMES.join(", "))),
        }
    }
}

/// Which statuses complete the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpectStatus {
    /// 200–299 (the default).
    Success,
    /// Exactly these.
    Listed(Vec<u16>),
}

impl ExpectStatus {
    /// Whether `status` completes the node.
    pub fn accepts(&self, status: u16) -> bool {
        match self {
            Self::Success => (200..=299).contains(&status),
            Self::Listed(statuses) => statuses.contains(&status),
        }
    }

    /// As `details.expected` (and the prepared request) carry it: `"200-299"` or the list.
    pub fn to_value(&self) -> Value {
        match self {
            Self::Success => json!("200-299"),
            Self::Listed(statuses) => json!(statuses),
        }
    }

    /// Reads it back from [`ExpectStatus::to_value`] or from `config.expectStatus`.
    pub fn from_value(value: Option<&Value>) -> Result<Self, String> {
        let status = |item: &Value| {
            item.as_u64()
                .filter(|status| (100..=599).contains(status))
                .and_then(|status| u16::try_from(status).ok())
                .ok_or_else(|| EXPECT_RULE.to_owned())
        };
        match value {
            None | Some(Value::Null) => Ok(Self::Success),
            Some(Value::String(text)) if text == "200-299" => Ok(Self::Success),
            Some(Value::Array(items)) if !items.is_empty() => {
                items.iter().map(status).collect::<Result<_, _>>().map(Self::Listed)
            }
            Some(Value::Array(_)) | Some(Value::String(_)) => Err(EXPECT_RULE.to_owned()),
            Some(single) => status(single).map(|status| Self::Listed(vec![status])),
        }
    }
}

/// A parsed config (templates still unrendered).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpConfig {
    /// The URL template.
    pub url: String,
    /// The method (one of [`METHODS`]).
    pub method: &'static str,
    /// Header names (as written) and value templates.
    pub headers: Vec<(String, String)>,
    /// The body template (absent or `null`: no body).
    pub body: Option<Value>,
    /// The per-attempt timeout.
    pub timeout_ms: u64,
    /// Which statuses complete the node.
    pub expect: ExpectStatus,
    /// How the node's secret enters the request, if it sends one.
    pub auth: Option<Auth>,
    /// Where the node cuts a response body (`None`: the host's default cut).
    pub max_response_body_bytes: Option<u64>,
}

fn template_problem(field: &str, error: template::TemplateError) -> String {
    format!("config.{field}{}: {}", error.path.replace('/', "."), error.message)
}

/// Parses and checks `config`; an error names the field and the rule.
pub fn parse(config: &Map<String, Value>) -> Result<HttpConfig, String> {
    if let Some(unknown) = config.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(format!("config.{unknown} is not a core.http.request field (allowed: {})", FIELDS.join(", ")));
    }
    let url = match config.get("url") {
        Some(Value::String(url)) if !url.trim().is_empty() => url.clone(),
        _ => return Err("config.url is required and must be a non-empty string".to_owned()),
    };
    template::check_string(&url).map_err(|error| template_problem("url", error))?;
    // A URL that is one placeholder takes the whole value (checked once rendered); one with
    // placeholders inside must name its scheme literally (its values are percent-encoded).
    if !template::has_placeholders(&url) {
        check_static_url(&url)?;
    } else if !template::is_single_placeholder(&url) && !url.starts_with("http://") && !url.starts_with("https://") {
        return Err(
            "config.url must start with http:// or https:// (or be a single placeholder such as {{inputs.url}})"
                .to_owned(),
        );
    }

    let method = match config.get("method") {
        None | Some(Value::Null) => "GET",
        Some(Value::String(method)) => METHODS
            .iter()
            .copied()
            .find(|known| known.eq_ignore_ascii_case(method))
            .ok_or_else(|| format!("config.method must be one of {}", METHODS.join(", ")))?,
        Some(_) => return Err(format!("config.method must be one of {}", METHODS.join(", "))),
    };

    let mut headers = Vec::new();
    match config.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (name, value) in map {
                let Value::String(value) = value else {
                    return Err(format!("config.headers.{name} must be a string"));
                };
                let parsed = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| format!("config.headers: `{name}` is not a valid header name"))?;
                if RESERVED_HEADERS.contains(&parsed.as_str()) {
                    return Err(format!("config.headers.{name} is not allowed (connection and framing headers are set by the host; no upgrades)"));
                }
                if HOST_HEADERS.contains(&parsed.as_str()) {
                    return Err(format!("config.headers.{name} is not allowed (the host sends it on every attempt)"));
                }
                template::check_string(value).map_err(|error| template_problem(&format!("headers.{name}"), error))?;
                headers.push((name.clone(), value.clone()));
            }
        }
        Some(_) => return Err("config.headers must be an object of string values".to_owned()),
    }

    let body = match config.get("body") {
        None | Some(Value::Null) => None,
        Some(body) => {
            template::check_value(body).map_err(|error| template_problem("body", error))?;
            Some(body.clone())
        }
    };

    let timeout_ms = timeout_ms(config, DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)?;

    let expect = match config.get("expectStatus") {
        Some(Value::String(_)) => return Err(EXPECT_RULE.to_owned()),
        other => ExpectStatus::from_value(other)?,
    };

    let auth = match config.get("auth") {
        None | Some(Value::Null) => None,
        Some(value) => Some(Auth::from_value(value)?),
    };
    if let Some(auth) = &auth {
        let taken = auth.header_name();
        if let Some((name, _)) = headers.iter().find(|(name, _)| name.eq_ignore_ascii_case(&taken)) {
            return Err(format!("config.headers.{name} is set by config.auth from the node's credentialsRef"));
        }
    }

    let max_response_body_bytes = match config.get("maxResponseBodyBytes") {
        None | Some(Value::Null) => None,
        Some(value) => {
            Some(value.as_u64().filter(|n| (1..=MAX_NODE_RESPONSE_BODY_BYTES).contains(n)).ok_or_else(|| {
                format!("config.maxResponseBodyBytes must be an integer from 1 to {MAX_NODE_RESPONSE_BODY_BYTES}")
            })?)
        }
    };

    Ok(HttpConfig { url, method, headers, body, timeout_ms, expect, auth, max_response_body_bytes })
}

/// Checks a URL without placeholders: absolute, `http` / `https`, a host, no userinfo.
pub fn check_static_url(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|error| format!("config.url is not a valid URL: {error}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err("config.url must start with http:// or https://".to_owned());
    }
    if parsed.host().is_none() {
        return Err("config.url must name a host".to_owned());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("config.url may not carry credentials (user:password@); send an Authorization header".to_owned());
    }
    Ok(())
}

/// A work node's `config.timeoutMs` (its per-attempt timeout): `default` when absent, an
/// integer from 1 to `max` otherwise.
pub(crate) fn timeout_ms(config: &Map<String, Value>, default: u64, max: u64) -> Result<u64, String> {
    match config.get("timeoutMs") {
        None | Some(Value::Null) => Ok(default),
        Some(value) => value
            .as_u64()
            .filter(|ms| (1..=max).contains(ms))
            .ok_or_else(|| format!("config.timeoutMs must be an integer from 1 to {max}")),
    }
}
