//! The one outbound HTTP client work nodes use: resolve → check → pin → connect.
//!
//! Per call (= per attempt), within one overall timeout covering resolution, connect, TLS,
//! response head and body:
//!
//! 1. parse the URL (`http` / `https` only, no userinfo);
//! 2. an IP-literal host is checked as is; a name is resolved **once** through the
//!    [`Resolver`] and **every** answer is checked against the [`AllowList`] policy (one
//!    blocked answer refuses the call);
//! 3. the first answer is pinned and the [`Connector`] is asked for exactly that
//!    `SocketAddr` (a DNS-rebinding answer cannot swap the target between check and connect);
//! 4. for `https`, TLS (rustls, ring, the system's root certificates) with SNI = the name;
//! 5. one HTTP/1.1 request on that connection (`Host` = the URL's authority, `Connection:
//!    close`; no pool, no keep-alive);
//! 6. the body is streamed and cut at `max_response_body_bytes` (`body_truncated`).
//!
//! **Redirects are off**: a 3xx is returned as the response. Requests carrying `Upgrade` or
//! `Connection` headers are refused (no 101 socket escape).

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use url::{Host, Url};

use super::ssrf::{AllowList, BlockReason};

/// Host names that reach a cloud metadata service (refused as destinations whatever they
/// resolve to, unless the operator allow-lists their addresses).
const METADATA_NAMES: &[&str] =
    &["metadata", "metadata.google.internal", "metadata.azure.internal", "instance-data", "instance-data.ec2.internal"];

/// The default response body cap: 1 MiB.
pub const DEFAULT_MAX_RESPONSE_BODY_BYTES: usize = 1 << 20;

/// A byte stream the client can speak HTTP over.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// Name resolution (a port, so tests can script answers).
#[async_trait]
pub trait Resolver: Send + Sync + fmt::Debug {
    /// The addresses `host` resolves to.
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>>;
}

/// Opening connections (a port, so tests can record and refuse connects).
#[async_trait]
pub trait Connector: Send + Sync + fmt::Debug {
    /// A connection to exactly `addr`.
    async fn connect(&self, addr: SocketAddr) -> io::Result<Box<dyn Stream>>;
}

/// The system resolver (`tokio::net::lookup_host`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

#[async_trait]
impl Resolver for SystemResolver {
    async fn resolve(&self, host: &str, port: u16) -> io::Result<Vec<IpAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.map(|addr| addr.ip()).collect())
    }
}

/// Plain TCP (`tokio::net::TcpStream::connect`).
#[derive(Debug, Default, Clone, Copy)]
pub struct TcpConnector;

#[async_trait]
impl Connector for TcpConnector {
    async fn connect(&self, addr: SocketAddr) -> io::Result<Box<dyn Stream>> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Box::new(stream))
    }
}

/// The client's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// Private networks the operator allows (`--http-allow-private-nets`).
    pub allow: AllowList,
    /// Where a response body is cut (`bodyTruncated`).
    pub max_response_body_bytes: usize,
    /// Root certificates trusted for `https` besides the system's (DER): a private CA.
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            allow: AllowList::none(),
            max_response_body_bytes: DEFAULT_MAX_RESPONSE_BODY_BYTES,
            extra_roots: Vec::new(),
        }
    }
}

/// One outbound request.
#[derive(Clone)]
pub struct OutboundRequest {
    /// The method.
    pub method: Method,
    /// The absolute `http(s)` URL.
    pub url: String,
    /// Header names and values, in order (values may be secrets: never logged).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The body (empty for none).
    pub body: Bytes,
    /// The budget for the whole call.
    pub timeout: Duration,
}

impl fmt::Debug for OutboundRequest {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Header values and the body may hold credentials: only names and sizes.
        formatter
            .debug_struct("OutboundRequest")
            .field("method", &self.method)
            .field("url", &redact_url_text(&self.url))
            .field("headers", &self.headers.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>())
            .field("body_len", &self.body.len())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundResponse {
    /// The status code (a 3xx is returned as is: redirects are not followed).
    pub status: u16,
    /// Every header, names lower-case, in order (values may be secrets, e.g. `set-cookie`).
    pub headers: Vec<(String, String)>,
    /// The body, at most the cap.
    pub body: Vec<u8>,
    /// Whether the body was cut at the cap.
    pub body_truncated: bool,
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL or its address is not allowed (`http_url_rejected`).
    Rejected {
        /// The URL without userinfo, query or fragment.
        url: String,
        /// The host as written in the URL.
        host: String,
        /// The refused address (absent for a scheme or userinfo refusal).
        address: Option<IpAddr>,
        /// `loopback`, `private`, `metadata`, `scheme`, … (see [`BlockReason::as_str`]).
        reason: String,
    },
    /// The request itself is malformed (`validation_error`): bad URL, refused header.
    Invalid(String),
    /// The call did not finish in time (`http_timeout`).
    Timeout {
        /// The URL without userinfo, query or fragment.
        url: String,
        /// The budget.
        timeout_ms: u64,
    },
    /// Resolution, connect, TLS or the exchange failed (`http_network_error`).
    Network {
        /// The URL without userinfo, query or fragment.
        url: String,
        /// What failed.
        message: String,
    },
}

impl HttpError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Rejected { .. } => "http_url_rejected",
            Self::Invalid(_) => "validation_error",
            Self::Timeout { .. } => "http_timeout",
            Self::Network { .. } => "http_network_error",
        }
    }

    /// Whether another attempt may succeed (timeouts and network errors).
    pub fn retryable(&self) -> bool {
        matches!(self, Self::Timeout { .. } | Self::Network { .. })
    }

    /// The error's details (`{url, host, address, reason}`, `{url, timeoutMs}`, `{url}`).
    pub fn details(&self) -> Option<Value> {
        match self {
            Self::Rejected { url, host, address, reason } => Some(json!({
                "url": url,
                "host": host,
                "address": address.map(|address| address.to_string()),
                "reason": reason,
            })),
            Self::Invalid(_) => None,
            Self::Timeout { url, timeout_ms } => Some(json!({ "url": url, "timeoutMs": timeout_ms })),
            Self::Network { url, .. } => Some(json!({ "url": url })),
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rejected { url, address: Some(address), reason, .. } => {
                write!(formatter, "refused to call {url}: address {address} is {reason}")
            }
            Self::Rejected { url, reason, .. } => write!(formatter, "refused to call {url}: {reason} not allowed"),
            Self::Invalid(message) => formatter.write_str(message),
            Self::Timeout { url, timeout_ms } => write!(formatter, "{url} did not answer within {timeout_ms} ms"),
            Self::Network { url, message } => write!(formatter, "calling {url} failed: {message}"),
        }
    }
}

impl std::error::Error for HttpError {}

/// `url` without userinfo, query and fragment (safe for errors and logs).
pub fn redact_url(url: &Url) -> String {
    let mut clean = url.clone();
    // Setting these cannot fail on an http(s) URL; on others the original parts stay unset.
    let _ = clean.set_username("");
    let _ = clean.set_password(None);
    clean.set_query(None);
    clean.set_fragment(None);
    clean.to_string()
}

fn redact_url_text(url: &str) -> String {
    match Url::parse(url) {
        Ok(parsed) => redact_url(&parsed),
        Err(_) => "<unparsable URL>".to_owned(),
    }
}

/// Request header names the client refuses: they would change framing or the connection.
pub const RESERVED_HEADERS: &[&str] = &[
    "host",
    "connection",
    "upgrade",
    "content-length",
    "transfer-encoding",
    "te",
    "trailer",
    "keep-alive",
    "proxy-connection",
];

/// The outbound HTTP client (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct HttpClient {
    settings: Arc<HttpSettings>,
    resolver: Arc<dyn Resolver>,
    connector: Arc<dyn Connector>,
    tls: Arc<OnceLock<Result<Arc<rustls::ClientConfig>, String>>>,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("HttpClient")
            .field("settings", &self.settings)
            .field("resolver", &self.resolver)
            .field("connector", &self.connector)
            .finish_non_exhaustive()
    }
}

/// What errors name: the redacted URL and the host as written.
struct Target {
    url: String,
    host: String,
}

impl Target {
    fn rejected(&self, address: Option<IpAddr>, reason: &str) -> HttpError {
        HttpError::Rejected { url: self.url.clone(), host: self.host.clone(), address, reason: reason.to_owned() }
    }
}

/// Aborts the connection task when the call ends (completed, failed or timed out).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether a destination is checked against the private-destination policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Destination {
    /// A workflow's URL: every resolved answer is checked against the [`AllowList`].
    Checked,
    /// An operator-configured base URL (a model provider): pinned, not checked.
    Operator,
}

/// A response whose body is read as it arrives ([`HttpClient::open_operator`]). Dropping
/// it closes the connection.
pub struct StreamingResponse {
    /// The status code (a 3xx is returned as is: redirects are not followed).
    pub status: u16,
    /// Every header, names lower-case, in order.
    pub headers: Vec<(String, String)>,
    body: hyper::body::Incoming,
    url: String,
    deadline: Option<(tokio::time::Instant, u64)>,
    _connection: AbortOnDrop,
}

impl fmt::Debug for StreamingResponse {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.debug_struct("StreamingResponse").field("status", &self.status).finish_non_exhaustive()
    }
}

impl StreamingResponse {
    /// The next piece of the body, `None` at its end; a [`HttpError::Timeout`] once the
    /// request's budget is spent.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
        loop {
            let frame = match self.deadline {
                Some((deadline, timeout_ms)) => match tokio::time::timeout_at(deadline, self.body.frame()).await {
                    Ok(frame) => frame,
                    Err(_elapsed) => return Err(HttpError::Timeout { url: self.url.clone(), timeout_ms }),
                },
                None => self.body.frame().await,
            };
            let Some(frame) = frame else { return Ok(None) };
            let frame = frame.map_err(|error| HttpError::Network {
                url: self.url.clone(),
                message: format!("reading the body: {error}"),
            })?;
            if let Ok(data) = frame.into_data() {
                return Ok(Some(data));
            }
        }
    }

    /// The whole body, cut at `cap` bytes (and whether it was cut).
    pub async fn read_capped(&mut self, cap: usize) -> Result<(Vec<u8>, bool), HttpError> {
        let mut body = Vec::new();
        while let Some(data) = self.next_chunk().await? {
            let room = cap - body.len();
            if data.len() > room {
                body.extend_from_slice(&data[..room]);
                return Ok((body, true));
            }
            body.extend_from_slice(&data);
        }
        Ok((body, false))
    }
}

impl HttpClient {
    /// A client over the given ports.
    pub fn new(settings: HttpSettings, resolver: Arc<dyn Resolver>, connector: Arc<dyn Connector>) -> Self {
        Self { settings: Arc::new(settings), resolver, connector, tls: Arc::new(OnceLock::new()) }
    }

    /// A client over the system resolver and plain TCP.
    pub fn system(settings: HttpSettings) -> Self {
        Self::new(settings, Arc::new(SystemResolver), Arc::new(TcpConnector))
    }

    /// The settings.
    pub fn settings(&self) -> &HttpSettings {
        &self.settings
    }

    /// Sends one request (see the module docs).
    pub async fn send(&self, request: OutboundRequest) -> Result<InboundResponse, HttpError> {
        let cap = self.settings.max_response_body_bytes;
        self.send_capped(request, cap).await
    }

    /// [`HttpClient::send`], cutting the body at `cap` bytes instead of the settings' cut (a
    /// node's own `config.maxResponseBodyBytes`).
    pub async fn send_capped(&self, request: OutboundRequest, cap: usize) -> Result<InboundResponse, HttpError> {
        let url = Url::parse(&request.url).map_err(|error| HttpError::Invalid(format!("invalid URL: {error}")))?;
        let target = Target { url: redact_url(&url), host: url.host_str().unwrap_or_default().to_owned() };
        let tls = self.check_request(&url, &target, &request)?;
        let request_timeout = request.timeout;
        let timeout_ms = u64::try_from(request.timeout.as_millis()).unwrap_or(u64::MAX);
        let exchange = async {
            let mut response = self.exchange(&url, &target, tls, request, Destination::Checked).await?;
            let (body, body_truncated) = response.read_capped(cap).await?;
            Ok(InboundResponse { status: response.status, headers: response.headers, body, body_truncated })
        };
        match tokio::time::timeout(request_timeout, exchange).await {
            Ok(result) => result,
            Err(_elapsed) => Err(HttpError::Timeout { url: target.url, timeout_ms }),
        }
    }

    /// Opens one request to an operator-configured destination (a model provider's
    /// `baseUrl`): the same URL, header and scheme checks, resolution, pinning and TLS as
    /// [`HttpClient::send`], redirects still off, but the answers are **not** checked
    /// against the private-destination policy (a local model server on loopback is the
    /// operator's choice, never a workflow's). The head must arrive within the request's
    /// timeout; the body is then read as it streams ([`StreamingResponse::next_chunk`])
    /// within the same budget.
    pub async fn open_operator(&self, request: OutboundRequest) -> Result<StreamingResponse, HttpError> {
        let url = Url::parse(&request.url).map_err(|error| HttpError::Invalid(format!("invalid URL: {error}")))?;
        let target = Target { url: redact_url(&url), host: url.host_str().unwrap_or_default().to_owned() };
        let tls = self.check_request(&url, &target, &request)?;
        let timeout_ms = u64::try_from(request.timeout.as_millis()).unwrap_or(u64::MAX);
        let deadline = tokio::time::Instant::now() + request.timeout;
        match tokio::time::timeout_at(deadline, self.exchange(&url, &target, tls, request, Destination::Operator)).await
        {
            Ok(Ok(mut response)) => {
                response.deadline = Some((deadline, timeout_ms));
                Ok(response)
            }
            Ok(Err(error)) => Err(error),
            Err(_elapsed) => Err(HttpError::Timeout { url: target.url, timeout_ms }),
        }
    }

    /// Checks a destination ahead of any request (a webhook subscription's URL, at
    /// registration and before each delivery): `http(s)` without userinfo; an IP-literal host
    /// as is; a name refused when it is `localhost` (or under it) or a metadata name, else
    /// resolved once and **every** answer checked against the address policy — a name that does
    /// not resolve passes (each request checks again). With `https_only`, `http` is allowed only
    /// when every address is in the operator's allow-list. `Err` is the reason.
    pub async fn check_destination(&self, url: &str, https_only: bool) -> Result<(), String> {
        let url = Url::parse(url).map_err(|_| "not an absolute URL".to_owned())?;
        let tls = match url.scheme() {
            "https" => true,
            "http" => false,
            _ => return Err("the scheme must be https".to_owned()),
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err("the URL may not carry credentials".to_owned());
        }
        let port = url.port_or_known_default().unwrap_or(if tls { 443 } else { 80 });
        let addresses = match url.host() {
            Some(Host::Ipv4(ip)) => vec![IpAddr::V4(ip)],
            Some(Host::Ipv6(ip)) => vec![IpAddr::V6(ip)],
            Some(Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                let local = name == "localhost" || name.ends_with(".localhost");
                let resolved = self.resolver.resolve(&name, port).await.unwrap_or_default();
                if local || METADATA_NAMES.contains(&name.as_str()) {
                    // Only an operator's allow-list lifts these, and only by what they resolve to.
                    if resolved.is_empty() || !resolved.iter().all(|ip| self.settings.allow.covers(*ip)) {
                        let what = if local { "localhost" } else { "a metadata service name" };
                        return Err(format!("the host is {what}"));
                    }
                }
                resolved
            }
            None => return Err("the URL names no host".to_owned()),
        };
        for address in &addresses {
            self.settings.allow.check(*address).map_err(|reason| format!("the address is {reason}"))?;
        }
        let allow_listed = !addresses.is_empty() && addresses.iter().all(|ip| self.settings.allow.covers(*ip));
        if https_only && !tls && !allow_listed {
            return Err("the scheme must be https".to_owned());
        }
        Ok(())
    }

    /// The scheme, userinfo and header checks every request passes; whether it is `https`.
    fn check_request(&self, url: &Url, target: &Target, request: &OutboundRequest) -> Result<bool, HttpError> {
        let tls = match url.scheme() {
            "http" => false,
            "https" => true,
            _ => return Err(target.rejected(None, "scheme")),
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(target.rejected(None, "userinfo"));
        }
        for (name, value) in &request.headers {
            if RESERVED_HEADERS.contains(&name.as_str()) {
                let what = if name == "connection"
                    && value.as_bytes().to_ascii_lowercase().windows(7).any(|w| w == b"upgrade")
                {
                    "`Connection: upgrade`".to_owned()
                } else {
                    format!("header `{name}`")
                };
                return Err(HttpError::Invalid(format!("{what} is set by the host and may not be sent")));
            }
        }
        Ok(tls)
    }

    async fn exchange(
        &self,
        url: &Url,
        target: &Target,
        tls: bool,
        request: OutboundRequest,
        destination: Destination,
    ) -> Result<StreamingResponse, HttpError> {
        let network = |message: String| HttpError::Network { url: target.url.clone(), message };
        let port = url.port_or_known_default().unwrap_or(if tls { 443 } else { 80 });
        let (addresses, server_name) = match url.host() {
            Some(Host::Ipv4(ip)) => {
                (vec![IpAddr::V4(ip)], rustls::pki_types::ServerName::IpAddress(IpAddr::V4(ip).into()))
            }
            Some(Host::Ipv6(ip)) => {
                (vec![IpAddr::V6(ip)], rustls::pki_types::ServerName::IpAddress(IpAddr::V6(ip).into()))
            }
            Some(Host::Domain(name)) => {
                let addresses = self
                    .resolver
                    .resolve(name, port)
                    .await
                    .map_err(|error| network(format!("resolving {name}: {error}")))?;
                let server_name = rustls::pki_types::ServerName::try_from(name.to_owned())
                    .map_err(|_| HttpError::Invalid(format!("invalid host name `{name}`")))?;
                (addresses, server_name)
            }
            None => return Err(HttpError::Invalid("the URL has no host".to_owned())),
        };
        if destination == Destination::Checked {
            for address in &addresses {
                self.settings
                    .allow
                    .check(*address)
                    .map_err(|reason: BlockReason| target.rejected(Some(*address), reason.as_str()))?;
            }
        }
        let pinned =
            SocketAddr::new(*addresses.first().ok_or_else(|| network("the name has no address".to_owned()))?, port);

        let stream = self.connector.connect(pinned).await.map_err(|error| network(format!("connecting: {error}")))?;
        let stream: Box<dyn Stream> = if tls {
            let connector = tokio_rustls::TlsConnector::from(self.tls_config().map_err(network)?);
            Box::new(connector.connect(server_name, stream).await.map_err(|error| network(format!("TLS: {error}")))?)
        } else {
            stream
        };

        let (mut sender, connection) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream))
            .await
            .map_err(|error| network(format!("handshake: {error}")))?;
        let connection = AbortOnDrop(tokio::spawn(async move {
            // Its error surfaces through the request future; nothing to do here.
            let _ = connection.await;
        }));

        let authority = match url.port() {
            Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_owned(),
        };
        let path = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let mut builder = Request::builder().method(request.method).uri(path);
        let headers = builder.headers_mut().ok_or_else(|| HttpError::Invalid("invalid request".to_owned()))?;
        headers.insert(hyper::header::HOST, HeaderValue::from_str(&authority).map_err(|_| network("bad host".into()))?);
        headers.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
        for (name, value) in request.headers {
            headers.append(name, value);
        }
        let outbound = builder
            .body(Full::new(request.body))
            .map_err(|error| HttpError::Invalid(format!("invalid request: {error}")))?;

        let response = sender.send_request(outbound).await.map_err(|error| network(format!("exchange: {error}")))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
            .collect();
        Ok(StreamingResponse {
            status,
            headers,
            body: response.into_body(),
            url: target.url.clone(),
            deadline: None,
            _connection: connection,
        })
    }

    /// The TLS configuration, built on first use (it reads the system's root certificates).
    fn tls_config(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        self.tls
            .get_or_init(|| {
                let mut roots = rustls::RootCertStore::empty();
                let loaded = rustls_native_certs::load_native_certs();
                for error in &loaded.errors {
                    tracing::warn!(%error, "loading a system root certificate failed");
                }
                let (added, ignored) = roots.add_parsable_certificates(loaded.certs);
                let (extra, refused) = roots.add_parsable_certificates(self.settings.extra_roots.iter().cloned());
                if refused > 0 {
                    tracing::warn!(refused, "an extra root certificate could not be parsed");
                }
                tracing::debug!(extra, "extra root certificates trusted for outbound HTTPS");
                tracing::debug!(added, ignored, "system root certificates loaded for outbound HTTPS");
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let mut config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|error| format!("TLS configuration: {error}"))?
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                Ok(Arc::new(config))
            })
            .clone()
    }
}
