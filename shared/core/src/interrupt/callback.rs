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

/// Checks a URL a worker is notified at: absolute `http` or `https` with a host. The message
/// names `field`.
pub fn check_url(field: &str, url: &str) -> Result<(), String> {
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

/// The body of the notify POST for `record` (pending, external-event) of `run`.
pub fn task_body(run: &RunState, record: &InterruptRecord, token: &str, expires_at: Millis) -> Value {
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
        "resolvePath": format!("/v1/interrupts/{token}"),
        "requestedAt": rfc3339(record.requested_at),
    });
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

/// The notify POST for occurrence `interrupt_id` at `node_id` of `run`, signed at `now`;
/// `None` when it is no longer pending or no worker is named.
pub fn prepare(
    signer: &TokenSigner,
    workflow: &Workflow,
    run: &RunState,
    node_id: &str,
    interrupt_id: &str,
    now: Millis,
) -> Option<Notify> {
    let record = pending_occurrence(run, node_id, interrupt_id)?;
    let url = target(workflow, run, node_id)?;
    let (token, expires_at) = mint(signer, &run.run_id, record, now);
    let body = serde_json::to_vec(&task_body(run, record, &token, expires_at)).ok()?;
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
}

impl Callbacks {
    /// Callbacks signed with a key derived from `host_secret` (the same secret the API's
    /// token surface verifies with), sent by `sender`, with the default retries.
    pub fn new(host_secret: &[u8], sender: Arc<dyn CallbackSender>) -> Self {
        Self { signer: TokenSigner::new(host_secret), sender, attempts: NOTIFY_ATTEMPTS, backoff_ms: NOTIFY_BACKOFF_MS }
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
