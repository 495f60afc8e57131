//! Callbacks for external workers (Step Functions' `.waitForTaskToken`): when an
//! `external-event` interrupt opens, its worker is told with a POST carrying the signed token
//! and the task payload. See `docs/callbacks.md`.
//!
//! - **Where**: the node's `settings.notifyUrl` (a Trellis host extension inside
//!   `WorkflowNode.settings`, which the spec leaves opaque), else the run's `callbackUrl`
//!   (create). Neither: no POST (the token is still in the snapshot).
//! - **When**: the engine commits an [`crate::engine::Effect::NotifyWorker`] with the
//!   interrupt (the outbox), so a crash never loses it; the worker sends it through the
//!   host's SSRF-guarded client ([`CallbackSender`]), retried with backoff. A retried or failed
//!   POST never touches the interrupt: it is only sent while the occurrence it names is
//!   pending, and the body names that occurrence (`interruptId`, also the `Idempotency-Key`).
//! - **Token**: an external-event token is valid until the interrupt's own `timeoutMs` runs
//!   out (with no timeout: as long as the interrupt is pending); it is not refreshed by
//!   heartbeats. After the timeout it is refused with `410 interrupt_expired`.
//! - **Resume values** besides the event: `{heartbeat: true, details?}` keeps the node alive
//!   (resets `settings.timeouts.heartbeatMs`; a missed heartbeat fails the attempt with
//!   `heartbeat_timeout`, retried under `settings.retry`), and `{failure: {code, message,
//!   retryable?}}` fails the attempt (retried under `settings.retry` unless `retryable` is
//!   false, then the node's failure routes).
//! - **Links**: the body's `resolvePath` is the token route (`/v1/interrupts/{token}`); with
//!   the host's public base URL ([`PublicUrl`]: `--public-url` / `TRELLIS_PUBLIC_URL`) it keeps
//!   that URL's path (`/v/v1/interrupts/{token}` under an API Gateway stage) and the body also
//!   carries `resolveUrl`, the absolute URL.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::token::{TokenClaims, TokenSigner};
use super::{token_expiry, InterruptKind, InterruptRecord};
use crate::activity::policy::{NodePolicy, RetryPolicy};
use crate::activity::ActivityError;
use crate::model::Workflow;
use crate::run::RunState;
use crate::timefmt::{rfc3339, Millis};

/// The node setting naming a per-node notify URL (`settings.notifyUrl`).
pub const NOTIFY_URL_SETTING: &str = "notifyUrl";
/// The host event a heartbeat is recorded as (debug mode only).
pub const HEARTBEAT_EVENT: &str = "trellis.interrupt.heartbeat";
/// The `type` of a notify POST's body.
pub const TASK_TYPE: &str = "trellis.callback.task";
/// How many times one notify POST is tried before it is given up.
pub const NOTIFY_ATTEMPTS: u32 = 5;
/// The delay before the first retry of a notify POST (doubled each time).
pub const NOTIFY_BACKOFF_MS: u64 = 250;
/// The budget of one notify POST.
pub const NOTIFY_TIMEOUT_MS: u64 = 10_000;

/// Whether a notify target is an SQS queue ARN (`arn:aws:sqs:<region>:<account>:<name>`): on
/// AWS the notify is then a message on that queue instead of a POST (see
/// [`crate::nodes::NodeRegistry::with_queue_notifies`]).
pub fn is_queue_target(target: &str) -> bool {
    let parts: Vec<&str> = target.split(':').collect();
    parts.len() == 6
        && parts[0] == "arn"
        && parts[1].starts_with("aws")
        && parts[2] == "sqs"
        && parts[3..].iter().all(|part| !part.is_empty())
}

/// The capability a queue notify target needs.
pub const QUEUE_NOTIFY_CAPABILITY: &str = "callbacks.sqs";

/// Checks a URL a worker is notified at: absolute `http` or `https` with a host, or an SQS
/// queue ARN ([`is_queue_target`]; whether this host sends to queues is checked apart). The
/// message names `field`.
pub fn check_url(field: &str, url: &str) -> Result<(), String> {
    if url.starts_with("arn:") {
        return if is_queue_target(url) {
            Ok(())
        } else {
            Err(format!("{field} must be an http(s) URL or an SQS queue ARN (arn:aws:sqs:<region>:<account>:<name>)"))
        };
    }
    let parsed = url::Url::parse(url).map_err(|error| format!("{field} must be an absolute http(s) URL ({error})"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{field} must be an http or https URL, not `{}:`", parsed.scheme()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!("{field} must name a host"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!("{field} must not carry credentials"));
    }
    Ok(())
}

/// The host's public base URL (`--public-url` embedded, `TRELLIS_PUBLIC_URL` on AWS): where
/// clients reach the API, its path included (an API Gateway stage: `https://…/v`). Absolute
/// `http(s)` with a host, no credentials, query or fragment; a trailing `/` is ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    /// The URL without its trailing `/` (`https://api.example/v`).
    base: String,
    /// Its path without the trailing `/` (`/v`; empty at the root).
    path: String,
}

impl PublicUrl {
    /// Parses `text`; the error message names `setting`.
    pub fn parse(setting: &str, text: &str) -> Result<Self, String> {
        let text = text.trim();
        check_url(setting, text)?;
        let parsed =
            url::Url::parse(text).map_err(|error| format!("{setting} must be an absolute http(s) URL ({error})"))?;
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(format!("{setting} must not carry a query or a fragment"));
        }
        let base = parsed.as_str().trim_end_matches('/').to_owned();
        let path = parsed.path().trim_end_matches('/').to_owned();
        Ok(Self { base, path })
    }

    /// `path` (a router path such as `/v1/interrupts/T`) below this URL's path (`/v/v1/…`).
    pub fn path_of(&self, path: &str) -> String {
        format!("{}{path}", self.path)
    }

    /// `path` as an absolute URL below this one (`https://api.example/v/v1/…`).
    pub fn url_of(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// What an interrupt node's `settings` say about its callback.
#[derive(Debug, Clone, PartialEq)]
pub struct CallbackPolicy {
    /// `settings.notifyUrl`.
    pub notify_url: Option<String>,
    /// `settings.retry` (none without one: a worker's task is not repeated unasked).
    pub retry: RetryPolicy,
    /// `settings.timeouts.heartbeatMs`.
    pub heartbeat_ms: Option<u64>,
}

/// Reads an interrupt node's callback settings; `Err((pointer below the node, message))` when
/// they break a rule (registration refuses the workflow).
pub fn parse_policy(settings: &Map<String, Value>) -> Result<CallbackPolicy, (String, String)> {
    let policy = NodePolicy::parse(settings).map_err(|issue| (issue.path, issue.message))?;
    let notify_url = match settings.get(NOTIFY_URL_SETTING) {
        None | Some(Value::Null) => None,
        Some(Value::String(url)) => {
            check_url("settings.notifyUrl", url).map_err(|message| ("/settings/notifyUrl".to_owned(), message))?;
            Some(url.clone())
        }
        Some(_) => return Err(("/settings/notifyUrl".to_owned(), "settings.notifyUrl must be a string".to_owned())),
    };
    Ok(CallbackPolicy {
        notify_url,
        retry: policy.effective_retry(false, 0),
        heartbeat_ms: policy.timeouts.heartbeat_ms,
    })
}

/// The callback policy of `node_id` in `workflow` (defaults when its settings are unreadable,
/// which registration refuses).
pub fn node_policy(workflow: &Workflow, node_id: &str) -> CallbackPolicy {
    let settings = workflow.node(node_id).map(|node| &node.settings);
    settings.and_then(|settings| parse_policy(settings).ok()).unwrap_or(CallbackPolicy {
        notify_url: None,
        retry: RetryPolicy::none(),
        heartbeat_ms: None,
    })
}

/// Where the worker of an external-event occurrence is notified: the node's `notifyUrl`, else
/// the run's `callbackUrl`.
pub fn target(workflow: &Workflow, run: &RunState, node_id: &str) -> Option<String> {
    node_policy(workflow, node_id).notify_url.or_else(|| run.callback_url.clone())
}

/// What a worker sent instead of the event.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerReport {
    /// `{heartbeat: true, details?}`.
    Heartbeat(Value),
    /// `{failure: {code, message, retryable?}}`.
    Failure(ActivityError),
}

/// Reads a heartbeat or a failure from a resume value of an external-event interrupt; `None`
/// for anything else (the event itself); `Err` for a malformed report.
pub fn worker_report(value: &Value) -> Option<Result<WorkerReport, String>> {
    if let Some(flag) = value.get("heartbeat") {
        if flag != &Value::Bool(true) {
            return Some(Err("`heartbeat` must be true".to_owned()));
        }
        return Some(Ok(WorkerReport::Heartbeat(value.get("details").cloned().unwrap_or(Value::Null))));
    }
    let failure = value.get("failure")?;
    let text = |name: &str| failure.get(name).and_then(Value::as_str).filter(|text| !text.is_empty());
    let (Some(code), Some(message)) = (text("code"), text("message")) else {
        return Some(Err("`failure` needs a non-empty string `code` and `message`".to_owned()));
    };
    let retryable = match failure.get("retryable") {
        None => true,
        Some(Value::Bool(flag)) => *flag,
        Some(_) => return Some(Err("`failure.retryable` must be a boolean".to_owned())),
    };
    let mut error = ActivityError::new(code, message, retryable);
    if let Some(details) = failure.get("details") {
        error = error.with_details(details.clone());
    }
    Some(Ok(WorkerReport::Failure(error)))
}

/// The signed token for `record` of `run_id`, minted at `now`, and its expiry.
pub fn mint(signer: &TokenSigner, run_id: &str, record: &InterruptRecord, now: Millis) -> (String, Millis) {
    let expires_at = token_expiry(record, now);
    let claims = TokenClaims {
        run_id: run_id.to_owned(),
        node_id: record.node_id.clone(),
        interrupt_id: record.id.clone(),
        expires_at,
        intent: "resolve".to_owned(),
    };
    (signer.sign(&claims), expires_at)
}

/// The body of the notify POST for `record` (pending, external-event) of `run`; its links
/// under `public` when the host has a public base URL.
pub fn task_body(
    run: &RunState,
    record: &InterruptRecord,
    token: &str,
    expires_at: Millis,
    public: Option<&PublicUrl>,
) -> Value {
    let resolve = format!("/v1/interrupts/{token}");
    let mut body = json!({
        "type": TASK_TYPE,
        "runId": run.run_id,
        "workflowId": run.workflow.id,
        "nodeId": record.node_id,
        "interruptId": record.id,
        "key": record.key,
        "attempt": record.attempt,
        "kind": record.kind.as_str(),
        "interrupt": record.payload(),
        "token": token,
        "resolvePath": public.map_or_else(|| resolve.clone(), |public| public.path_of(&resolve)),
        "requestedAt": rfc3339(record.requested_at),
    });
    if let Some(public) = public {
        body["resolveUrl"] = json!(public.url_of(&resolve));
    }
    if expires_at != Millis::MAX {
        body["tokenExpiresAt"] = json!(rfc3339(expires_at));
    }
    if let Some(heartbeat_ms) = record.heartbeat_ms {
        body["heartbeatMs"] = json!(heartbeat_ms);
    }
    body
}

/// The pending external-event occurrence `interrupt_id` at `node_id` of `run`, if it still is.
pub fn pending_occurrence<'a>(run: &'a RunState, node_id: &str, interrupt_id: &str) -> Option<&'a InterruptRecord> {
    if run.status.is_terminal() {
        return None;
    }
    run.interrupts.iter().find(|record| {
        record.id == interrupt_id
            && record.node_id == node_id
            && record.kind == InterruptKind::ExternalEvent
            && record.is_pending()
    })
}

/// A notify POST ready to send.
#[derive(Clone)]
pub struct Notify {
    /// Where.
    pub url: String,
    /// `content-type`, `idempotency-key` (the interrupt id: the same on every try) and
    /// `trellis-attempt`.
    pub headers: Vec<(&'static str, String)>,
    /// The JSON body ([`task_body`]; it carries the token: never logged).
    pub body: Vec<u8>,
}

impl std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notify").field("body_len", &self.body.len()).finish_non_exhaustive()
    }
}

/// The notify POST for occurrence `interrupt_id` at `node_id` of `run`, signed at `now`, its
/// links under `public` when given; `None` when it is no longer pending or no worker is named.
pub fn prepare(
    signer: &TokenSigner,
    public: Option<&PublicUrl>,
    workflow: &Workflow,
    run: &RunState,
    node_id: &str,
    interrupt_id: &str,
    now: Millis,
) -> Option<Notify> {
    let record = pending_occurrence(run, node_id, interrupt_id)?;
    let url = target(workflow, run, node_id)?;
    let (token, expires_at) = mint(signer, &run.run_id, record, now);
    let body = serde_json::to_vec(&task_body(run, record, &token, expires_at, public)).ok()?;
    let headers = vec![
        ("content-type", "application/json".to_owned()),
        ("idempotency-key", record.id.clone()),
        ("trellis-attempt", record.attempt.to_string()),
    ];
    Some(Notify { url, headers, body })
}

/// Why a notify POST failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CallbackError {
    /// A stable code (`http_url_rejected`, `http_timeout`, `callback_status`, …).
    pub code: String,
    /// Human text (no secret, no token).
    pub message: String,
    /// Whether trying again may help.
    pub retryable: bool,
}

/// Sends notify POSTs (the host's SSRF-guarded HTTP client).
#[async_trait]
pub trait CallbackSender: Send + Sync {
    /// POSTs `body` (JSON) to `url` with `headers`; `Ok` on a 2xx answer.
    async fn post(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: Vec<u8>,
        timeout_ms: u64,
    ) -> Result<(), CallbackError>;
}

/// What the worker needs to notify: the token signer (the key the API verifies with) and
/// the sender.
#[derive(Clone)]
pub struct Callbacks {
    /// Signs the tokens a notify carries.
    pub signer: TokenSigner,
    /// Sends the POST.
    pub sender: Arc<dyn CallbackSender>,
    /// Tries per POST.
    pub attempts: u32,
    /// Delay before the first retry (doubled each time).
    pub backoff_ms: u64,
    /// The host's public base URL, for the links of a notify (none: `resolvePath` only).
    pub public_url: Option<PublicUrl>,
}

impl Callbacks {
    /// Callbacks signed with a key derived from `host_secret` (the same secret the API's
    /// token surface verifies with), sent by `sender`, with the default retries.
    pub fn new(host_secret: &[u8], sender: Arc<dyn CallbackSender>) -> Self {
        Self {
            signer: TokenSigner::new(host_secret),
            sender,
            attempts: NOTIFY_ATTEMPTS,
            backoff_ms: NOTIFY_BACKOFF_MS,
            public_url: None,
        }
    }

    /// These callbacks with their links under `public_url` (none: unchanged).
    pub fn with_public_url(mut self, public_url: Option<PublicUrl>) -> Self {
        self.public_url = public_url;
        self
    }
}

impl std::fmt::Debug for Callbacks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Callbacks").field("attempts", &self.attempts).field("backoff_ms", &self.backoff_ms).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notify_urls_are_absolute_http() {
        assert!(check_url("callbackUrl", "https://worker.example/hook").is_ok());
        assert!(check_url("callbackUrl", "http://127.0.0.1:9000/x").is_ok());
        for bad in ["/relative", "ftp://x/y", "not a url", "https://user:pw@x/y", "mailto:a@b"] {
            let message = check_url("callbackUrl", bad).unwrap_err();
            assert!(message.contains("callbackUrl"), "{bad}: {message}");
        }
    }

    #[test]
    fn worker_reports_are_told_from_events() {
        assert_eq!(worker_report(&json!({ "eventPayload": { "a": 1 } })), None);
        assert_eq!(
            worker_report(&json!({ "heartbeat": true, "details": { "pct": 5 } })),
            Some(Ok(WorkerReport::Heartbeat(json!({ "pct": 5 }))))
        );
        let Some(Ok(WorkerReport::Failure(error))) =
            worker_report(&json!({ "failure": { "code": "boom", "message": "it broke" } }))
        else {
            panic!("a failure")
        };
        assert_eq!((error.code.as_str(), error.retryable), ("boom", true));
        assert!(matches!(worker_report(&json!({ "heartbeat": false })), Some(Err(_))));
        assert!(matches!(worker_report(&json!({ "failure": { "code": "x" } })), Some(Err(_))));
    }

    #[test]
    fn the_public_url_is_absolute_http_without_query_or_fragment() {
        let public = PublicUrl::parse("TRELLIS_PUBLIC_URL", "https://abc.execute-api.example.com/v/").unwrap();
        assert_eq!(public.path_of("/v1/interrupts/t"), "/v/v1/interrupts/t");
        assert_eq!(public.url_of("/v1/interrupts/t"), "https://abc.execute-api.example.com/v/v1/interrupts/t");
        let root = PublicUrl::parse("--public-url", "http://127.0.0.1:8080").unwrap();
        assert_eq!(root.path_of("/v1/x"), "/v1/x");
        assert_eq!(root.url_of("/v1/x"), "http://127.0.0.1:8080/v1/x");
        for bad in ["/v", "ftp://h/v", "https://h/v?stage=1", "https://h/v#top", "https://u:p@h/v", "nonsense"] {
            let message = PublicUrl::parse("TRELLIS_PUBLIC_URL", bad).unwrap_err();
            assert!(message.contains("TRELLIS_PUBLIC_URL"), "{bad}: {message}");
        }
    }

    /// A run suspended at an external-event interrupt, and its pending record.
    fn waiting_run() -> (RunState, InterruptRecord) {
        let workflow = Workflow::compile(json!({"id": "w", "name": "w", "nodes": [{"id": "wait",
            "typeId": "core.interrupt", "config": {"kind": "external-event", "data": {"eventType": "job.done", "correlation": {"job": "j-1"}}}}]}))
        .unwrap();
        let mut run = crate::testing::pending_run(&workflow, "run-1", "t");
        let start = crate::engine::apply(&workflow, &mut run, crate::engine::Input::Start, 10);
        let step = start
            .effects
            .iter()
            .find_map(|effect| matches!(effect, crate::engine::Effect::Step { .. }).then(|| effect.input()).flatten())
            .expect("a step");
        crate::engine::apply(&workflow, &mut run, step, 10);
        let record = run.pending_interrupt().expect("pending").clone();
        (run, record)
    }

    #[test]
    fn the_task_links_keep_the_public_url_path_and_add_the_absolute_url() {
        let (run, record) = waiting_run();
        let plain = task_body(&run, &record, "TOKEN", Millis::MAX, None);
        assert_eq!(plain["resolvePath"], "/v1/interrupts/TOKEN");
        assert!(plain.get("resolveUrl").is_none(), "no public URL, no absolute link: {plain}");
        let public = PublicUrl::parse("TRELLIS_PUBLIC_URL", "https://abc.execute-api.example.com/v").unwrap();
        let linked = task_body(&run, &record, "TOKEN", Millis::MAX, Some(&public));
        assert_eq!(linked["resolvePath"], "/v/v1/interrupts/TOKEN");
        assert_eq!(linked["resolveUrl"], "https://abc.execute-api.example.com/v/v1/interrupts/TOKEN");
        let mut without_links = linked;
        for field in ["resolvePath", "resolveUrl"] {
            without_links.as_object_mut().unwrap().remove(field);
        }
        let mut plain_without = plain;
        plain_without.as_object_mut().unwrap().remove("resolvePath");
        assert_eq!(without_links, plain_without, "only the links differ");
    }

    #[test]
    fn settings_name_the_notify_url_and_policy() {
        let settings = json!({ "notifyUrl": "https://w.example/t", "timeouts": { "heartbeatMs": 500 },
            "retry": { "maxAttempts": 2 } });
        let policy = parse_policy(settings.as_object().unwrap()).unwrap();
        assert_eq!(policy.notify_url.as_deref(), Some("https://w.example/t"));
        assert_eq!((policy.heartbeat_ms, policy.retry.max_attempts), (Some(500), 2));
        let (path, _) = parse_policy(json!({ "notifyUrl": "ftp://x" }).as_object().unwrap()).unwrap_err();
        assert_eq!(path, "/settings/notifyUrl");
    }
}
