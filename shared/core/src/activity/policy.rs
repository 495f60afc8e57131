//! Retry and timeout policy for activity nodes: a documented host extension inside
//! `WorkflowNode.settings` (OpenWOP v1 has no normative per-node policy; the knobs are
//! Temporal's and Step Functions', over OpenWOP error codes). Every field is optional:
//!
//! ```json
//! "settings": {
//!   "retry":    { "maxAttempts": 3, "initialIntervalMs": 1000, "backoffCoefficient": 2.0,
//!                 "maxIntervalMs": 100000, "jitter": "full", "nonRetryableErrorCodes": [] },
//!   "timeouts": { "attemptMs": 30000, "totalMs": 300000, "heartbeatMs": 60000 },
//!   "idempotent": false
//! }
//! ```
//!
//! - An explicit `settings.retry` is the author's opt-in: it applies whatever the call.
//!   Without one, `WorkflowSettings.maxRetries` (default 0) applies, and only to calls the
//!   kind calls idempotent (HTTP GET, HEAD, PUT, DELETE, OPTIONS) or to nodes with
//!   `settings.idempotent: true`.
//! - `maxAttempts` counts every attempt (1 = no retry). Only errors with `retryable: true`
//!   are retried, and none whose code is in `nonRetryableErrorCodes`.
//! - The delay before attempt `k+1` is `min(initial × coefficient^k, maxInterval)`; with
//!   `jitter: "full"` a deterministic draw in `[0, delay]` keyed on the run, node,
//!   activation and attempt (the engine has no randomness; a replay draws the same).
//! - `attemptMs` bounds one attempt (with the kind's own `config.timeoutMs`: the smaller
//!   applies; on AWS at most the dispatcher's budget); `totalMs` bounds all attempts and the
//!   delays between them (`node_timeout` when it runs out); `heartbeatMs` fails an attempt
//!   that reports no progress for that long (`heartbeat_timeout`, retryable).

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::ActivityError;

/// The longest interval or timeout a policy may name (one day).
pub const MAX_POLICY_MS: u64 = 86_400_000;
/// The most attempts a policy may name.
pub const MAX_ATTEMPTS: u32 = 100;

/// How a retry delay is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Uniform in `[0, delay]` (AWS's "full jitter").
    Full,
    /// Exactly the computed delay.
    None,
}

/// When and how an activity node is retried.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all (1 = never retry).
    pub max_attempts: u32,
    /// Delay before the first retry.
    pub initial_interval_ms: u64,
    /// Growth per retry (≥ 1).
    pub backoff_coefficient: f64,
    /// Cap on one delay.
    pub max_interval_ms: u64,
    /// How delays are drawn.
    pub jitter: Jitter,
    /// Codes never retried, even when retryable.
    pub non_retryable_error_codes: Vec<String>,
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> Self {
        Self::with_attempts(1)
    }

    /// The defaults with `max_attempts` attempts.
    pub fn with_attempts(max_attempts: u32) -> Self {
        Self {
            max_attempts,
            initial_interval_ms: 1000,
            backoff_coefficient: 2.0,
            max_interval_ms: 100_000,
            jitter: Jitter::Full,
            non_retryable_error_codes: Vec::new(),
        }
    }

    /// Whether attempt `attempt` (zero-based) that failed with `error` gets another one.
    pub fn retries(&self, attempt: u32, error: &ActivityError) -> bool {
        error.retryable
            && attempt + 1 < self.max_attempts
            && !self.non_retryable_error_codes.iter().any(|code| code == &error.code)
    }

    /// The delay before attempt `attempt + 1`, drawn deterministically from `seed` when
    /// jittered.
    pub fn delay_ms(&self, attempt: u32, seed: &str) -> u64 {
        let exponent = i32::try_from(attempt).unwrap_or(i32::MAX);
        let raw = self.initial_interval_ms as f64 * self.backoff_coefficient.powi(exponent);
        let capped = if raw.is_finite() { raw.min(self.max_interval_ms as f64) } else { self.max_interval_ms as f64 };
        let delay = capped.max(0.0) as u64;
        match self.jitter {
            Jitter::None => delay,
            Jitter::Full => {
                let digest = Sha256::digest(format!("{seed}/{attempt}").as_bytes());
                let draw = u64::from_be_bytes(digest[..8].try_into().expect("eight bytes"));
                draw % (delay + 1)
            }
        }
    }
}

impl RetryPolicy {
    /// [`RetryPolicy::delay_ms`] for a retry after `error`: when the error says how long the
    /// remote side asked to wait (`details.retryAfterMs`, e.g. a provider's 429 `Retry-After`),
    /// at least that, capped by `maxIntervalMs`.
    pub fn delay_after_ms(&self, attempt: u32, seed: &str, error: &ActivityError) -> u64 {
        let drawn = self.delay_ms(attempt, seed);
        let asked = error.details.as_ref().and_then(|details| details.get("retryAfterMs")).and_then(Value::as_u64);
        match asked {
            Some(asked) => drawn.max(asked.min(self.max_interval_ms)),
            None => drawn,
        }
    }
}

/// Time bounds of an activity node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Timeouts {
    /// One attempt.
    pub attempt_ms: Option<u64>,
    /// All attempts and the delays between them.
    pub total_ms: Option<u64>,
    /// Longest silence between progress reports.
    pub heartbeat_ms: Option<u64>,
}

/// A node's policy, read from its `settings`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePolicy {
    /// The explicit `settings.retry`, if any.
    pub retry: Option<RetryPolicy>,
    /// `settings.timeouts`.
    pub timeouts: Timeouts,
    /// `settings.idempotent`.
    pub idempotent: bool,
    /// `settings.cacheable`: whether a rerun may take this node's result from its source
    /// (`None`: as the kind says, see [`crate::cache`]).
    pub cacheable: Option<bool>,
}

/// A policy field that breaks a rule: the JSON pointer below the node and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyIssue {
    /// Pointer below the node, e.g. `/settings/retry/maxAttempts`.
    pub path: String,
    /// What the rule is.
    pub message: String,
}

fn issue(path: &str, message: impl Into<String>) -> PolicyIssue {
    PolicyIssue { path: path.to_owned(), message: message.into() }
}

fn object<'a>(value: &'a Value, path: &str) -> Result<&'a Map<String, Value>, PolicyIssue> {
    value.as_object().ok_or_else(|| issue(path, format!("{path} must be an object")))
}

fn only(fields: &Map<String, Value>, known: &[&str], path: &str) -> Result<(), PolicyIssue> {
    match fields.keys().find(|key| !known.contains(&key.as_str())) {
        Some(unknown) => Err(issue(
            &format!("{path}/{unknown}"),
            format!("{path}/{unknown} is not a field of {path} (known: {})", known.join(", ")),
        )),
        None => Ok(()),
    }
}

fn millis(fields: &Map<String, Value>, name: &str, path: &str, min: u64) -> Result<Option<u64>, PolicyIssue> {
    let Some(value) = fields.get(name) else { return Ok(None) };
    let path = format!("{path}/{name}");
    // The same duration rule as every other duration in a definition (integral numbers).
    match crate::nodes::duration_ms(value, MAX_POLICY_MS) {
        Some(ms) if ms >= min => Ok(Some(ms)),
        _ => Err(issue(&path, format!("{path} must be an integer from {min} to {MAX_POLICY_MS} (milliseconds)"))),
    }
}

impl NodePolicy {
    /// Reads and checks `settings` (absent fields take their defaults; unknown fields inside
    /// `retry` and `timeouts` are refused, other `settings` fields are left alone).
    pub fn parse(settings: &Map<String, Value>) -> Result<Self, PolicyIssue> {
        let retry = settings.get("retry").map(|value| parse_retry(value, "/settings/retry")).transpose()?;
        let timeouts = match settings.get("timeouts") {
            None => Timeouts::default(),
            Some(value) => {
                let path = "/settings/timeouts";
                let fields = object(value, path)?;
                only(fields, &["attemptMs", "totalMs", "heartbeatMs"], path)?;
                Timeouts {
                    attempt_ms: millis(fields, "attemptMs", path, 1)?,
                    total_ms: millis(fields, "totalMs", path, 1)?,
                    heartbeat_ms: millis(fields, "heartbeatMs", path, 1)?,
                }
            }
        };
        let idempotent = match settings.get("idempotent") {
            None => false,
            Some(Value::Bool(flag)) => *flag,
            Some(_) => return Err(issue("/settings/idempotent", "/settings/idempotent must be a boolean")),
        };
        let cacheable = match settings.get("cacheable") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(flag)) => Some(*flag),
            Some(_) => return Err(issue("/settings/cacheable", "/settings/cacheable must be a boolean")),
        };
        Ok(Self { retry, timeouts, idempotent, cacheable })
    }

    /// The retry policy in force: the explicit one; else `max_retries` retries when the call
    /// is idempotent; else none.
    pub fn effective_retry(&self, kind_idempotent: bool, max_retries: u32) -> RetryPolicy {
        match &self.retry {
            Some(retry) => retry.clone(),
            None if kind_idempotent || self.idempotent => {
                RetryPolicy::with_attempts(max_retries.saturating_add(1).min(MAX_ATTEMPTS))
            }
            None => RetryPolicy::none(),
        }
    }
}

fn parse_retry(value: &Value, path: &str) -> Result<RetryPolicy, PolicyIssue> {
    let fields = object(value, path)?;
    let known = ["maxAttempts", "initialIntervalMs", "backoffCoefficient", "maxIntervalMs", "jitter"];
    only(fields, &[&known[..], &["nonRetryableErrorCodes"]].concat(), path)?;
    let mut policy = RetryPolicy::with_attempts(3);
    if let Some(value) = fields.get("maxAttempts") {
        let field = format!("{path}/maxAttempts");
        policy.max_attempts = value
            .as_u64()
            .filter(|n| (1..=u64::from(MAX_ATTEMPTS)).contains(n))
            .map(|n| n as u32)
            .ok_or_else(|| issue(&field, format!("{field} must be an integer from 1 to {MAX_ATTEMPTS}")))?;
    }
    if let Some(ms) = millis(fields, "initialIntervalMs", path, 0)? {
        policy.initial_interval_ms = ms;
    }
    policy.max_interval_ms = policy.initial_interval_ms.saturating_mul(100).min(MAX_POLICY_MS);
    if let Some(value) = fields.get("backoffCoefficient") {
        let field = format!("{path}/backoffCoefficient");
        policy.backoff_coefficient = value
            .as_f64()
            .filter(|c| c.is_finite() && (1.0..=100.0).contains(c))
            .ok_or_else(|| issue(&field, format!("{field} must be a number from 1 to 100")))?;
    }
    if let Some(ms) = millis(fields, "maxIntervalMs", path, 0)? {
        if ms < policy.initial_interval_ms {
            let field = format!("{path}/maxIntervalMs");
            return Err(issue(&field, format!("{field} must be at least initialIntervalMs")));
        }
        policy.max_interval_ms = ms;
    }
    if let Some(value) = fields.get("jitter") {
        let field = format!("{path}/jitter");
        policy.jitter = match value.as_str() {
            Some("full") => Jitter::Full,
            Some("none") => Jitter::None,
            _ => return Err(issue(&field, format!("{field} must be \"full\" or \"none\""))),
        };
    }
    if let Some(value) = fields.get("nonRetryableErrorCodes") {
        let field = format!("{path}/nonRetryableErrorCodes");
        let codes =
            value.as_array().filter(|codes| codes.iter().all(|code| code.as_str().is_some_and(|c| !c.is_empty())));
        let codes = codes.ok_or_else(|| issue(&field, format!("{field} must be an array of error codes (strings)")))?;
        policy.non_retryable_error_codes = codes.iter().filter_map(Value::as_str).map(str::to_owned).collect();
    }
    Ok(policy)
}

/// The error an attempt gets when it reports no progress within `heartbeatMs`.
pub fn heartbeat_timeout(heartbeat_ms: u64) -> ActivityError {
    ActivityError::new("heartbeat_timeout", format!("the attempt reported no progress within {heartbeat_ms} ms"), true)
        .with_details(json!({ "heartbeatMs": heartbeat_ms }))
}

/// The error an attempt gets when it overruns its time budget (the worker's bound, past the
/// executor's own timeout).
pub fn attempt_timeout(timeout_ms: u64) -> ActivityError {
    ActivityError::new("node_timeout", format!("the attempt did not finish within {timeout_ms} ms"), true)
        .with_details(json!({ "timeoutMs": timeout_ms }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(settings: Value) -> Result<NodePolicy, PolicyIssue> {
        NodePolicy::parse(settings.as_object().unwrap())
    }

    #[test]
    fn a_retry_after_in_the_details_lengthens_the_delay_up_to_the_cap() {
        let policy = RetryPolicy {
            jitter: Jitter::None,
            initial_interval_ms: 10,
            max_interval_ms: 5_000,
            ..RetryPolicy::with_attempts(3)
        };
        let plain = ActivityError::new("provider_unavailable", "down", true);
        assert_eq!(policy.delay_after_ms(0, "s", &plain), 10);
        let asked = plain.clone().with_details(json!({ "retryAfterMs": 2_000 }));
        assert_eq!(policy.delay_after_ms(0, "s", &asked), 2_000);
        let too_long = plain.with_details(json!({ "retryAfterMs": 60_000 }));
        assert_eq!(policy.delay_after_ms(0, "s", &too_long), 5_000);
    }

    #[test]
    fn defaults_follow_temporal() {
        let policy = parse(json!({ "retry": {} })).unwrap().retry.unwrap();
        assert_eq!(policy.max_attempts, 3);
        assert_eq!(policy.initial_interval_ms, 1000);
        assert_eq!(policy.max_interval_ms, 100_000);
        assert_eq!(policy.jitter, Jitter::Full);
        let policy = parse(json!({ "retry": { "initialIntervalMs": 50 } })).unwrap().retry.unwrap();
        assert_eq!(policy.max_interval_ms, 5_000, "maxInterval defaults to 100x initial");
    }

    #[test]
    fn bad_fields_name_the_field_and_rule() {
        let cases = [
            (json!({ "retry": { "maxAttempts": 0 } }), "/settings/retry/maxAttempts"),
            (json!({ "retry": { "backoffCoefficient": 0.5 } }), "/settings/retry/backoffCoefficient"),
            (json!({ "retry": { "jitter": "some" } }), "/settings/retry/jitter"),
            (json!({ "retry": { "initialIntervalMs": 10, "maxIntervalMs": 5 } }), "/settings/retry/maxIntervalMs"),
            (json!({ "retry": { "nonRetryableErrorCodes": [1] } }), "/settings/retry/nonRetryableErrorCodes"),
            (json!({ "retry": { "tries": 2 } }), "/settings/retry/tries"),
            (json!({ "timeouts": { "attemptMs": -1 } }), "/settings/timeouts/attemptMs"),
            (json!({ "timeouts": { "totalMs": 1.5 } }), "/settings/timeouts/totalMs"),
            (json!({ "idempotent": "yes" }), "/settings/idempotent"),
        ];
        for (settings, path) in cases {
            let refused = parse(settings.clone()).expect_err(&settings.to_string());
            assert_eq!(refused.path, path, "{settings}");
            assert!(refused.message.contains(path), "{}", refused.message);
        }
    }

    #[test]
    fn only_an_explicit_policy_or_an_idempotent_call_retries() {
        let none = parse(json!({})).unwrap();
        assert_eq!(none.effective_retry(false, 5).max_attempts, 1, "a non-idempotent call is not retried");
        assert_eq!(none.effective_retry(true, 2).max_attempts, 3, "maxRetries applies to idempotent calls");
        let marked = parse(json!({ "idempotent": true })).unwrap();
        assert_eq!(marked.effective_retry(false, 1).max_attempts, 2);
        let explicit = parse(json!({ "retry": { "maxAttempts": 4 } })).unwrap();
        assert_eq!(explicit.effective_retry(false, 0).max_attempts, 4, "explicit retry is the author's opt-in");
    }

    #[test]
    fn retries_only_retryable_codes_within_the_budget() {
        let mut policy = RetryPolicy::with_attempts(3);
        policy.non_retryable_error_codes = vec!["http_url_rejected".into()];
        let transient = ActivityError::new("http_timeout", "slow", true);
        assert!(policy.retries(0, &transient));
        assert!(policy.retries(1, &transient));
        assert!(!policy.retries(2, &transient), "attempt 2 is the third and last");
        assert!(!policy.retries(0, &ActivityError::new("validation_error", "bad", false)));
        assert!(!policy.retries(0, &ActivityError::new("http_url_rejected", "no", true)));
    }

    #[test]
    fn backoff_grows_caps_and_jitters_deterministically() {
        let mut policy = RetryPolicy::with_attempts(10);
        policy.jitter = Jitter::None;
        policy.max_interval_ms = 5_000;
        let delays: Vec<u64> = (0..5).map(|attempt| policy.delay_ms(attempt, "seed")).collect();
        assert_eq!(delays, vec![1000, 2000, 4000, 5000, 5000]);
        policy.jitter = Jitter::Full;
        for attempt in 0..5 {
            let drawn = policy.delay_ms(attempt, "run/node/1");
            assert!(drawn <= delays[attempt as usize]);
            assert_eq!(drawn, policy.delay_ms(attempt, "run/node/1"), "the same seed draws the same delay");
        }
        let spread: std::collections::BTreeSet<u64> =
            (0..20).map(|i| policy.delay_ms(3, &format!("run-{i}/node/1"))).collect();
        assert!(spread.len() > 10, "different seeds spread out: {spread:?}");
    }
}
