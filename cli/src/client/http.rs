//! The one HTTP client of the client commands: requests go to `{url}/v1/...` (the URL's path,
//! an API Gateway stage, kept), with the bearer key when there is one, a 5 s connect timeout
//! and a 30 s request timeout (streams: no request timeout). HTTPS verifies against the platform's
//! roots plus those of `--ca-cert`. A non-2xx answer becomes
//! [`ClientError::Http`] from the `{error, message, details}` envelope.

use std::path::Path;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::{Certificate, Method, RequestBuilder, Response};
use serde_json::Value;

use super::config::Target;
use super::exit::ClientError;

/// Connecting gives up after this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A (non-stream) request gives up after this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// What a query value or a path segment keeps as it is: RFC 3986's unreserved characters.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// Percent-encodes a query value or a path segment.
pub fn encode(value: &str) -> String {
    utf8_percent_encode(value, COMPONENT).to_string()
}

/// A host's API, as one key sees it. Cheap to clone. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct Api {
    base: String,
    key: Option<String>,
    http: reqwest::Client,
    streams: reqwest::Client,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = self.key.as_ref().map(|_| "<hidden>");
        formatter.debug_struct("Api").field("base", &self.base).field("key", &key).finish_non_exhaustive()
    }
}

impl Api {
    /// A client of `target`.
    pub fn new(target: &Target) -> Result<Self, ClientError> {
        let roots = match &target.ca_cert {
            Some(path) => read_roots(path)?,
            None => Vec::new(),
        };
        let build = |timeout: Option<Duration>| {
            let mut builder = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT);
            if let Some(timeout) = timeout {
                builder = builder.timeout(timeout);
            }
            for root in &roots {
                builder = builder.add_root_certificate(root.clone());
            }
            builder.build().map_err(|error| ClientError::Input(format!("HTTP client: {error}")))
        };
        Ok(Self {
            base: target.url.clone(),
            key: target.key.clone(),
            http: build(Some(REQUEST_TIMEOUT))?,
            streams: build(None)?,
        })
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Whether a key is configured.
    pub fn has_key(&self) -> bool {
        self.key.is_some()
    }

    /// The same client with `key` (found after it was made: `ping --wait`'s development key).
    pub fn with_key(mut self, key: String) -> Self {
        self.key = Some(key);
        self
    }

    /// `{base}{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn request(&self, client: &reqwest::Client, method: Method, path: &str) -> RequestBuilder {
        let request = client.request(method, self.url(path));
        match &self.key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// `GET path` without the key (discovery).
    pub async fn get_anonymous(&self, path: &str) -> Result<Value, ClientError> {
        let response = self.http.get(self.url(path)).send().await.map_err(|error| self.connect_error(path, &error))?;
        self.json(path, response).await
    }

    /// `GET path`, the 2xx JSON body.
    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.send(Method::GET, path, None, &[]).await
    }

    /// The items of the list `field` of `GET path` (its query, if any, already in it): the
    /// first page, or with `all` every page, following `nextCursor` (encoded) until a page
    /// has none (or repeats the cursor it was asked with).
    pub async fn pages(&self, path: &str, field: &str, all: bool) -> Result<Vec<Value>, ClientError> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page_path = match &cursor {
                Some(cursor) => {
                    let join = if path.contains('?') { '&' } else { '?' };
                    format!("{path}{join}cursor={}", encode(cursor))
                }
                None => path.to_owned(),
            };
            let page = self.get(&page_path).await?;
            items.extend(page[field].as_array().cloned().unwrap_or_default());
            match page["nextCursor"].as_str() {
                Some(next) if all && !next.is_empty() && cursor.as_deref() != Some(next) => {
                    cursor = Some(next.to_owned());
                }
                _ => return Ok(items),
            }
        }
    }

    /// `POST path` with a JSON body, the 2xx JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.send(Method::POST, path, Some(body), &[]).await
    }

    /// One request with optional JSON body and extra headers; the 2xx JSON body.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<Value, ClientError> {
        let mut request = self.request(&self.http, method, path).header("accept", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|error| self.connect_error(path, &error))?;
        self.json(path, response).await
    }

    /// Opens the SSE stream `path` (resuming after `last_event_id`); the 2xx response.
    pub async fn open_stream(&self, path: &str, last_event_id: Option<u64>) -> Result<Response, ClientError> {
        let mut request = self.request(&self.streams, Method::GET, path).header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = request.send().await.map_err(|error| self.connect_error(path, &error))?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(envelope(response).await)
        }
    }

    async fn json(&self, path: &str, response: Response) -> Result<Value, ClientError> {
        if !response.status().is_success() {
            return Err(envelope(response).await);
        }
        let text = response.text().await.map_err(|error| self.connect_error(path, &error))?;
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|error| ClientError::Connect {
            url: self.url(path),
            message: format!("the answer is not JSON ({error})"),
        })
    }

    /// A transport error of a request to `path`.
    pub fn connect_error(&self, path: &str, error: &reqwest::Error) -> ClientError {
        let mut message = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            message = format!("{message}: {cause}");
            source = cause.source();
        }
        if let Some(hint) = certificate_hint(&message) {
            message = format!("{message} ({hint})");
        }
        ClientError::Connect { url: self.url(path), message }
    }
}

/// What to do about a refused server certificate, from the transport error's `message`.
fn certificate_hint(message: &str) -> Option<&'static str> {
    if message.contains("CaUsedAsEndEntity") {
        // rustls takes no CA certificate as a server's own, e.g. `openssl req -x509`'s default.
        Some(
            "the server presents a CA certificate as its own: serve a certificate signed by that CA, \
             or make the self-signed one with basicConstraints CA:FALSE",
        )
    } else if message.contains("certificate") {
        Some("a host behind a private CA: trust it with --ca-cert FILE or TRELLIS_CA_CERT")
    } else {
        None
    }
}

/// The certificates of the PEM file `path` (`--ca-cert`): at least one, else an input error naming the file.
fn read_roots(path: &Path) -> Result<Vec<Certificate>, ClientError> {
    let shown = path.display();
    let pem = std::fs::read(path)
        .map_err(|error| ClientError::Input(format!("--ca-cert {shown}: cannot read it: {error}")))?;
    let roots = Certificate::from_pem_bundle(&pem)
        .map_err(|error| ClientError::Input(format!("--ca-cert {shown}: not PEM certificates: {error}")))?;
    if roots.is_empty() {
        return Err(ClientError::Input(format!("--ca-cert {shown}: no PEM certificate in it")));
    }
    Ok(roots)
}

/// The error of a non-2xx `response`: its envelope, or its status and the start of its body.
async fn envelope(response: Response) -> ClientError {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let field = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_owned);
    let error = field("error").unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_owned());
    let message = field("message").unwrap_or_else(|| text.chars().take(200).collect());
    ClientError::Http { status: status.as_u16(), error, message, details: body.get("details").cloned() }
}

#[cfg(test)]
mod tests {
    use super::{certificate_hint, encode, Api};
    use crate::client::config::Target;

    #[test]
    fn the_key_stays_out_of_debug_and_values_are_percent_encoded() {
        let target = Target { url: "http://127.0.0.1:1".into(), key: Some("secret-key".into()), ca_cert: None };
        let api = Api::new(&target).unwrap();
        assert!(!format!("{api:?}").contains("secret-key"), "{api:?}");
        assert!(!format!("{target:?}").contains("secret-key"), "{target:?}");
        assert_eq!(encode("a b/c+d=é~_.-"), "a%20b%2Fc%2Bd%3D%C3%A9~_.-");
    }

    #[test]
    fn a_refused_certificate_gets_a_hint_naming_the_fix() {
        let unknown = "client error (Connect): invalid peer certificate: UnknownIssuer";
        assert!(certificate_hint(unknown).unwrap().contains("--ca-cert"));
        let ca = "invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))";
        assert!(certificate_hint(ca).unwrap().contains("CA:FALSE"));
        assert_eq!(certificate_hint("tcp connect error: Connection refused"), None);
    }
}
