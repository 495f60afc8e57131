//! Settings of the serverless functions, from the environment, validated at cold start.

use trellis_activities::http::{AllowList, HttpSettings};
use trellis_core::limits::HostLimits;

/// The default of `TRELLIS_DISPATCHER_TIMEOUT_MS`: the dispatcher function's timeout in
/// `infra/template.yaml` (60 s).
pub const DEFAULT_DISPATCHER_TIMEOUT_MS: u64 = 60_000;
/// What an attempt leaves of the dispatcher timeout for committing its outcome and sending
/// the commit's effects (DynamoDB and SQS calls, with their retries).
pub const COMMIT_MARGIN_MS: u64 = 10_000;
/// The longest Lambda function timeout (15 minutes).
const MAX_FUNCTION_TIMEOUT_MS: u64 = 900_000;

/// A setting that is missing or malformed; the function refuses to start with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    /// A required variable is not set.
    #[error("setting {0} is required")]
    Missing(&'static str),
    /// A variable is set to something unusable.
    #[error("setting {name} is invalid: {reason}")]
    Invalid {
        /// The variable.
        name: &'static str,
        /// Why.
        reason: String,
    },
}

/// The settings every function reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `TRELLIS_TABLE_NAME`: the DynamoDB table.
    pub table_name: String,
    /// `TRELLIS_STEP_QUEUE_URL`: the SQS step queue.
    pub step_queue_url: String,
    /// `TRELLIS_COMPLETION_QUEUE_URL`: the FIFO queue of child-run notices, grouped by parent
    /// run so one parent's notices apply one at a time.
    pub completion_queue_url: String,
    /// `TRELLIS_MAX_RECEIVE_COUNT` (default 5): the step queue's `maxReceiveCount`; the
    /// dispatcher fails a run on that delivery instead of letting its step reach the DLQ.
    pub max_receive_count: u32,
    /// `TRELLIS_DISPATCHER_TIMEOUT_MS` (default [`DEFAULT_DISPATCHER_TIMEOUT_MS`]): the
    /// dispatcher function's timeout, as set in the template; more than
    /// [`COMMIT_MARGIN_MS`] and at most 15 minutes. See [`Settings::max_attempt_ms`].
    pub dispatcher_timeout_ms: u64,
    /// Limits (`TRELLIS_MAX_NODE_EXECUTIONS`, `TRELLIS_MAX_RUN_DURATION_MS`).
    pub limits: HostLimits,
    /// `TRELLIS_RETENTION_DAYS` (default 30, 1 to 3,650): how long a run is kept after it
    /// ends when neither its request nor its workflow says (see `trellis_core::retention`).
    pub retention_days: u64,
    /// `TRELLIS_DELTA_PAGES` (`on` by default, or `off`): whether a step's page may carry
    /// only what it changed. `off` writes every commit whole (still reading delta pages): the
    /// first phase of a reversible rollout, and the phase to deploy before rolling back to a
    /// build that predates delta pages.
    pub delta_pages: bool,
    /// `OPENWOP_TEST_SEAM_ENABLED` (`true`/`1`; default off): serve the conformance test seams
    /// to keys with the `test:seams` scope and honour the capability overlay.
    pub test_seams: bool,
    /// `TRELLIS_CURSOR_SECRET` outside the API function (optional): the host secret the
    /// dispatcher signs the tokens of external-event notifies with (the API verifies them with
    /// the same secret; `docs/callbacks.md`). Without it no worker is notified.
    pub callback_secret: Option<String>,
    /// `TRELLIS_HTTP_ALLOW_PRIVATE_NETS` (comma list of IPs or CIDRs, empty by default) and
    /// `TRELLIS_HTTP_MAX_RESPONSE_BYTES` (default 1 MiB): `core.http.request`'s client.
    pub http: HttpSettings,
    /// `TRELLIS_SECRETS_BACKEND` (`none` by default, `secretsmanager` or `ssm`) and
    /// `TRELLIS_SECRETS_PREFIX`: where `credentialsRef` resolves ([`crate::secrets`]).
    pub secrets: crate::secrets::SecretsSettings,
    /// `TRELLIS_AI_PROVIDERS` (optional): `core.ai.callPrompt`'s model providers, the JSON
    /// document of the embedded host's `--ai-providers` file (`docs/ai.md`), checked at cold
    /// start. Keys are never in it: each provider's `credentialsRef` resolves through
    /// [`Settings::secrets`]. Empty: no provider (mock providers still answer).
    pub ai_providers: String,
    /// `TRELLIS_PUBLIC_URL` (optional): the API's public base URL, its stage included
    /// (`https://{api}.execute-api.{region}.amazonaws.com/v`). The dispatcher's callback tasks
    /// then carry `resolveUrl` and a `resolvePath` under the URL's path (`docs/callbacks.md`).
    /// Absolute http(s), no query or fragment; checked at cold start.
    pub public_url: Option<trellis_core::interrupt::callback::PublicUrl>,
    /// `TRELLIS_WEBHOOK_MAX_ATTEMPTS` (8), `TRELLIS_WEBHOOK_BACKOFF_MS` (1,000) and
    /// `TRELLIS_WEBHOOK_TIMEOUT_MS` (10,000): how webhook deliveries are attempted
    /// (`docs/webhooks.md`).
    pub webhook_policy: trellis_core::webhook::DeliveryPolicy,
    /// `TRELLIS_WEBHOOK_SET_TTL_MS` (10,000): how long an instance uses its cached copy of the
    /// webhook subscriptions before reading them again — the longest a new or deleted
    /// subscription takes to be seen by every function.
    pub webhook_set_ttl_ms: u64,
    /// `TRELLIS_EVENT_BUS_NAME` (optional) and `TRELLIS_LIFECYCLE_EVENTS` (default `all`):
    /// the EventBridge bus run events are published to, and which (`docs/aws-events.md`).
    pub events: EventSettings,
    /// `TRELLIS_BLOB_BUCKET` (optional; the template sets it) and `TRELLIS_S3_PATH_STYLE`
    /// (`off` by default; `on` for a local S3 emulator): where runs' values over 256 KiB are
    /// stored (`docs/payloads.md`). Without a bucket such a value fails its node
    /// (`payload_too_large`).
    pub blobs: BlobSettings,
}

/// Where runs' blobs are stored on AWS.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BlobSettings {
    /// The S3 bucket.
    pub bucket: Option<String>,
    /// Path-style addressing (emulators).
    pub path_style: bool,
}

/// Where run events are published on AWS.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventSettings {
    /// The bus (name or ARN); none: nothing is published.
    pub bus_name: Option<String>,
    /// The published lifecycle set ([`trellis_core::bus::LIFECYCLE`] names).
    pub lifecycle: trellis_core::bus::LifecycleSet,
}

impl EventSettings {
    /// Publishing the whole lifecycle set to `bus_name`.
    pub fn to_bus(bus_name: &str) -> Self {
        Self { bus_name: Some(bus_name.to_owned()), lifecycle: trellis_core::bus::LifecycleSet::all() }
    }
}

fn event_settings(lookup: Lookup<'_>) -> Result<EventSettings, SettingsError> {
    let name = "TRELLIS_LIFECYCLE_EVENTS";
    let lifecycle = trellis_core::bus::LifecycleSet::parse(&lookup(name).unwrap_or_else(|| "all".into()))
        .map_err(|reason| SettingsError::Invalid { name, reason })?;
    let bus_name = lookup("TRELLIS_EVENT_BUS_NAME").filter(|bus| !bus.trim().is_empty());
    Ok(EventSettings { bus_name, lifecycle })
}

/// The settings only the API function reads.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiSettings {
    /// `TRELLIS_API_KEYS`: a JSON array of hashed keys (the keys-file format).
    pub api_keys: String,
    /// `TRELLIS_CURSOR_SECRET`: at least 32 characters; signs list cursors.
    pub cursor_secret: String,
    /// `TRELLIS_STREAM_MAX_SECONDS` (default 840): SSE streams end after this, before the
    /// function's deadline, and clients resume with `Last-Event-ID`.
    pub stream_max_seconds: u64,
}

type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

fn required(lookup: Lookup<'_>, name: &'static str) -> Result<String, SettingsError> {
    lookup(name).filter(|value| !value.trim().is_empty()).ok_or(SettingsError::Missing(name))
}

/// An `on`/`off` setting (also `true`/`false`, `1`/`0`).
fn switch(lookup: Lookup<'_>, name: &'static str, default: bool) -> Result<bool, SettingsError> {
    match lookup(name).as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some("on" | "true" | "1") => Ok(true),
        Some("off" | "false" | "0") => Ok(false),
        Some(other) => Err(SettingsError::Invalid { name, reason: format!("`{other}` is not `on` or `off`") }),
    }
}

fn number<T: std::str::FromStr>(lookup: Lookup<'_>, name: &'static str, default: T) -> Result<T, SettingsError> {
    match lookup(name) {
        None => Ok(default),
        Some(text) => text
            .trim()
            .parse()
            .map_err(|_| SettingsError::Invalid { name, reason: format!("`{text}` is not a whole number") }),
    }
}

/// Where `core.http.request` cuts a response body on AWS by default (1 MiB, as on the
/// embedded host): a value over 256 KiB is stored in S3 (`trellis_core::blob`), and a commit
/// page too large for one DynamoDB item stores more of its values there.
pub const DEFAULT_HTTP_MAX_RESPONSE_BYTES: usize = 1 << 20;
/// The largest default cut an operator may configure (a node may ask for up to the same with
/// `config.maxResponseBodyBytes`).
pub const MAX_HTTP_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

fn http_settings(lookup: Lookup<'_>) -> Result<HttpSettings, SettingsError> {
    let name = "TRELLIS_HTTP_ALLOW_PRIVATE_NETS";
    let allow = AllowList::parse(&lookup(name).unwrap_or_default())
        .map_err(|error| SettingsError::Invalid { name, reason: error.to_string() })?;
    let max_response_body_bytes = number(lookup, "TRELLIS_HTTP_MAX_RESPONSE_BYTES", DEFAULT_HTTP_MAX_RESPONSE_BYTES)?;
    if !(1..=MAX_HTTP_RESPONSE_BYTES).contains(&max_response_body_bytes) {
        let reason = format!("must be from 1 to {MAX_HTTP_RESPONSE_BYTES} (16 MiB)");
        return Err(SettingsError::Invalid { name: "TRELLIS_HTTP_MAX_RESPONSE_BYTES", reason });
    }
    Ok(HttpSettings { allow, max_response_body_bytes, ..HttpSettings::default() })
}

impl Settings {
    /// The longest one step attempt (an activity's call included) may take in the
    /// dispatcher: its timeout less [`COMMIT_MARGIN_MS`], so the outcome is still committed
    /// and its effects sent before the function is stopped.
    pub fn max_attempt_ms(&self) -> u64 {
        self.dispatcher_timeout_ms.saturating_sub(COMMIT_MARGIN_MS)
    }

    /// Reads the settings from the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    /// Reads the settings through `lookup` (tests pass a map).
    pub fn from_lookup(lookup: Lookup<'_>) -> Result<Self, SettingsError> {
        let defaults = HostLimits::default();
        let blobs = BlobSettings {
            bucket: lookup("TRELLIS_BLOB_BUCKET").map(|bucket| bucket.trim().to_owned()).filter(|b| !b.is_empty()),
            path_style: switch(lookup, "TRELLIS_S3_PATH_STYLE", false)?,
        };
        let blob_storage = blobs.bucket.is_some();
        let max_receive_count = number(lookup, "TRELLIS_MAX_RECEIVE_COUNT", 5u32)?;
        if max_receive_count < 2 {
            return Err(SettingsError::Invalid {
                name: "TRELLIS_MAX_RECEIVE_COUNT",
                reason: "must be at least 2 (one delivery to try, one to fail the run)".into(),
            });
        }
        let max_run_duration_ms = number(lookup, "TRELLIS_MAX_RUN_DURATION_MS", defaults.max_run_duration_ms)?;
        let retention_days: u64 = number(lookup, "TRELLIS_RETENTION_DAYS", 30u64)?;
        if !(1..=trellis_core::retention::MAX_RETENTION_DAYS).contains(&retention_days) {
            return Err(SettingsError::Invalid {
                name: "TRELLIS_RETENTION_DAYS",
                reason: format!("must be from 1 to {}", trellis_core::retention::MAX_RETENTION_DAYS),
            });
        }
        if !(1000..=trellis_core::limits::MAX_RUN_DURATION_MS).contains(&max_run_duration_ms) {
            return Err(SettingsError::Invalid {
                name: "TRELLIS_MAX_RUN_DURATION_MS",
                reason: format!("must be from 1000 to {} (30 days)", trellis_core::limits::MAX_RUN_DURATION_MS),
            });
        }
        let dispatcher_timeout_ms = number(lookup, "TRELLIS_DISPATCHER_TIMEOUT_MS", DEFAULT_DISPATCHER_TIMEOUT_MS)?;
        if !(COMMIT_MARGIN_MS + 1000..=MAX_FUNCTION_TIMEOUT_MS).contains(&dispatcher_timeout_ms) {
            return Err(SettingsError::Invalid {
                name: "TRELLIS_DISPATCHER_TIMEOUT_MS",
                reason: format!(
                    "must be from {} to {MAX_FUNCTION_TIMEOUT_MS} (the commit margin of {COMMIT_MARGIN_MS} plus a \
                     second, up to Lambda's 15 minutes)",
                    COMMIT_MARGIN_MS + 1000
                ),
            });
        }
        Ok(Self {
            table_name: required(lookup, "TRELLIS_TABLE_NAME")?,
            step_queue_url: required(lookup, "TRELLIS_STEP_QUEUE_URL")?,
            completion_queue_url: required(lookup, "TRELLIS_COMPLETION_QUEUE_URL")?,
            max_receive_count,
            dispatcher_timeout_ms,
            retention_days,
            delta_pages: switch(lookup, "TRELLIS_DELTA_PAGES", true)?,
            blobs,
            callback_secret: lookup("TRELLIS_CURSOR_SECRET").filter(|secret| !secret.trim().is_empty()),
            test_seams: matches!(lookup("OPENWOP_TEST_SEAM_ENABLED").as_deref().map(str::trim), Some("true" | "1")),
            http: http_settings(lookup)?,
            secrets: crate::secrets::SecretsSettings::from_lookup(lookup)?,
            ai_providers: ai_providers(lookup)?,
            public_url: public_url(lookup)?,
            webhook_policy: trellis_core::webhook::DeliveryPolicy {
                max_attempts: number(lookup, "TRELLIS_WEBHOOK_MAX_ATTEMPTS", 8u32)?.clamp(1, 100),
                initial_backoff_ms: number(lookup, "TRELLIS_WEBHOOK_BACKOFF_MS", 1_000u64)?.clamp(1, 3_600_000),
                timeout_ms: number(lookup, "TRELLIS_WEBHOOK_TIMEOUT_MS", 10_000u64)?.clamp(100, 60_000),
                ..trellis_core::webhook::DeliveryPolicy::default()
            },
            webhook_set_ttl_ms: number(lookup, "TRELLIS_WEBHOOK_SET_TTL_MS", 10_000u64)?,
            events: event_settings(lookup)?,
            limits: HostLimits {
                max_node_executions: number(lookup, "TRELLIS_MAX_NODE_EXECUTIONS", defaults.max_node_executions)?,
                max_run_duration_ms,
                max_request_body_bytes: defaults.max_request_body_bytes,
                // An activity attempt runs inside one dispatcher invocation.
                max_attempt_ms: dispatcher_timeout_ms.saturating_sub(COMMIT_MARGIN_MS),
                default_retention_ms: Some(retention_days.saturating_mul(trellis_core::retention::DAY_MS)),
                blob_storage,
                ..defaults
            },
        })
    }
}

/// `TRELLIS_PUBLIC_URL`, refused at cold start unless an absolute http(s) URL without query
/// or fragment.
fn public_url(lookup: Lookup<'_>) -> Result<Option<trellis_core::interrupt::callback::PublicUrl>, SettingsError> {
    let name = "TRELLIS_PUBLIC_URL";
    match lookup(name).filter(|text| !text.trim().is_empty()) {
        None => Ok(None),
        Some(text) => trellis_core::interrupt::callback::PublicUrl::parse(name, &text)
            .map(Some)
            .map_err(|reason| SettingsError::Invalid { name, reason }),
    }
}

/// `TRELLIS_AI_PROVIDERS`, refused at cold start when it does not parse.
fn ai_providers(lookup: Lookup<'_>) -> Result<String, SettingsError> {
    let document = lookup("TRELLIS_AI_PROVIDERS").unwrap_or_default();
    if !document.trim().is_empty() {
        trellis_activities::ai::parse_providers_for(&document, trellis_activities::ai::Backend::Aws)
            .map_err(|error| SettingsError::Invalid { name: "TRELLIS_AI_PROVIDERS", reason: error.to_string() })?;
    }
    Ok(document)
}

impl Settings {
    /// The model providers of [`Settings::ai_providers`] (checked at cold start).
    pub fn providers(&self) -> trellis_activities::ai::Providers {
        if self.ai_providers.trim().is_empty() {
            return trellis_activities::ai::Providers::default();
        }
        trellis_activities::ai::parse_providers_for(&self.ai_providers, trellis_activities::ai::Backend::Aws)
            .unwrap_or_default()
    }
}

impl ApiSettings {
    /// Reads the API settings from the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_lookup(&|name| std::env::var(name).ok())
    }

    /// Reads the API settings through `lookup`.
    pub fn from_lookup(lookup: Lookup<'_>) -> Result<Self, SettingsError> {
        let api_keys = required(lookup, "TRELLIS_API_KEYS")?;
        if let Err(error) = trellis_http::ApiKey::parse_list(&api_keys) {
            return Err(SettingsError::Invalid { name: "TRELLIS_API_KEYS", reason: error.0 });
        }
        let cursor_secret = required(lookup, "TRELLIS_CURSOR_SECRET")?;
        if cursor_secret.len() < 32 {
            return Err(SettingsError::Invalid {
                name: "TRELLIS_CURSOR_SECRET",
                reason: "must be at least 32 characters".into(),
            });
        }
        Ok(Self { api_keys, cursor_secret, stream_max_seconds: number(lookup, "TRELLIS_STREAM_MAX_SECONDS", 840)? })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn the_event_bus_settings_are_read_and_checked() {
        let base =
            [("TRELLIS_TABLE_NAME", "t"), ("TRELLIS_STEP_QUEUE_URL", "q"), ("TRELLIS_COMPLETION_QUEUE_URL", "c")];
        let none = Settings::from_lookup(&lookup(&base)).unwrap();
        assert_eq!(none.events.bus_name, None, "no bus: nothing is published");
        assert_eq!(none.events.lifecycle, trellis_core::bus::LifecycleSet::all());
        let mut pairs = base.to_vec();
        pairs.extend([
            ("TRELLIS_EVENT_BUS_NAME", "trellis-runs"),
            ("TRELLIS_LIFECYCLE_EVENTS", "completed,node-failed"),
        ]);
        let some = Settings::from_lookup(&lookup(&pairs)).unwrap();
        assert_eq!(some.events.bus_name.as_deref(), Some("trellis-runs"));
        assert_eq!(some.events.lifecycle.event_types(), ["node.failed", "run.completed"]);
        pairs.push(("TRELLIS_LIFECYCLE_EVENTS", "finished"));
        let refused = Settings::from_lookup(&lookup(&pairs));
        assert!(
            matches!(&refused, Err(SettingsError::Invalid { name: "TRELLIS_LIFECYCLE_EVENTS", reason }) if reason.contains("finished")),
            "{refused:?}"
        );
    }

    #[test]
    fn missing_and_invalid_settings_are_named() {
        assert_eq!(Settings::from_lookup(&lookup(&[])), Err(SettingsError::Missing("TRELLIS_TABLE_NAME")));
        let bad =
            lookup(&[("TRELLIS_TABLE_NAME", "t"), ("TRELLIS_STEP_QUEUE_URL", "q"), ("TRELLIS_MAX_RECEIVE_COUNT", "x")]);
        assert!(matches!(
            Settings::from_lookup(&bad),
            Err(SettingsError::Invalid { name: "TRELLIS_MAX_RECEIVE_COUNT", .. })
        ));
        let partial = lookup(&[("TRELLIS_TABLE_NAME", "t"), ("TRELLIS_STEP_QUEUE_URL", "q")]);
        assert_eq!(Settings::from_lookup(&partial), Err(SettingsError::Missing("TRELLIS_COMPLETION_QUEUE_URL")));
        let good = lookup(&[
            ("TRELLIS_TABLE_NAME", "t"),
            ("TRELLIS_STEP_QUEUE_URL", "q"),
            ("TRELLIS_COMPLETION_QUEUE_URL", "c"),
        ]);
        let settings = Settings::from_lookup(&good).unwrap();
        assert_eq!(settings.max_receive_count, 5);
        assert_eq!(settings.dispatcher_timeout_ms, 60_000);
        assert_eq!(settings.max_attempt_ms(), 50_000);
        assert!(settings.delta_pages, "delta pages are on by default");
        let with = |value: &str| {
            Settings::from_lookup(&lookup(&[
                ("TRELLIS_TABLE_NAME", "t"),
                ("TRELLIS_STEP_QUEUE_URL", "q"),
                ("TRELLIS_COMPLETION_QUEUE_URL", "c"),
                ("TRELLIS_DELTA_PAGES", value),
            ]))
        };
        assert!(!with("off").unwrap().delta_pages);
        assert!(with("on").unwrap().delta_pages);
        assert!(matches!(with("maybe"), Err(SettingsError::Invalid { name: "TRELLIS_DELTA_PAGES", .. })));
        for ceiling in ["999", "2592000001", "18446744073709551615"] {
            let beyond = lookup(&[
                ("TRELLIS_TABLE_NAME", "t"),
                ("TRELLIS_STEP_QUEUE_URL", "q"),
                ("TRELLIS_COMPLETION_QUEUE_URL", "c"),
                ("TRELLIS_MAX_RUN_DURATION_MS", ceiling),
            ]);
            assert!(
                matches!(
                    Settings::from_lookup(&beyond),
                    Err(SettingsError::Invalid { name: "TRELLIS_MAX_RUN_DURATION_MS", .. })
                ),
                "{ceiling}"
            );
        }
        for timeout in ["10999", "900001", "soon"] {
            let bad = lookup(&[
                ("TRELLIS_TABLE_NAME", "t"),
                ("TRELLIS_STEP_QUEUE_URL", "q"),
                ("TRELLIS_COMPLETION_QUEUE_URL", "c"),
                ("TRELLIS_DISPATCHER_TIMEOUT_MS", timeout),
            ]);
            assert!(
                matches!(
                    Settings::from_lookup(&bad),
                    Err(SettingsError::Invalid { name: "TRELLIS_DISPATCHER_TIMEOUT_MS", .. })
                ),
                "{timeout}"
            );
        }
        let longer = lookup(&[
            ("TRELLIS_TABLE_NAME", "t"),
            ("TRELLIS_STEP_QUEUE_URL", "q"),
            ("TRELLIS_COMPLETION_QUEUE_URL", "c"),
            ("TRELLIS_DISPATCHER_TIMEOUT_MS", "11000"),
        ]);
        assert_eq!(Settings::from_lookup(&longer).unwrap().max_attempt_ms(), 1000);
        let short = lookup(&[("TRELLIS_API_KEYS", "[]"), ("TRELLIS_CURSOR_SECRET", "short")]);
        assert!(matches!(
            ApiSettings::from_lookup(&short),
            Err(SettingsError::Invalid { name: "TRELLIS_CURSOR_SECRET", .. })
        ));
        let keys = lookup(&[("TRELLIS_API_KEYS", "{not json"), ("TRELLIS_CURSOR_SECRET", &"s".repeat(32))]);
        assert!(matches!(
            ApiSettings::from_lookup(&keys),
            Err(SettingsError::Invalid { name: "TRELLIS_API_KEYS", .. })
        ));
    }

    #[test]
    fn http_settings_default_to_items_that_fit_and_refuse_bad_entries() {
        let base =
            [("TRELLIS_TABLE_NAME", "t"), ("TRELLIS_STEP_QUEUE_URL", "q"), ("TRELLIS_COMPLETION_QUEUE_URL", "c")];
        let settings = Settings::from_lookup(&lookup(&base)).unwrap();
        assert_eq!(settings.http.max_response_body_bytes, DEFAULT_HTTP_MAX_RESPONSE_BYTES);
        assert_eq!(settings.http.allow, AllowList::none(), "no private destination by default");
        assert_eq!(settings.limits.max_attempt_ms, 50_000, "registration bounds an attempt by the dispatcher");
        for (name, value) in [
            ("TRELLIS_HTTP_MAX_RESPONSE_BYTES", "0"),
            ("TRELLIS_HTTP_MAX_RESPONSE_BYTES", "16777217"),
            ("TRELLIS_HTTP_ALLOW_PRIVATE_NETS", "10.0.0.0/8,not-a-net"),
        ] {
            let bad = lookup(&[base[0], base[1], base[2], (name, value)]);
            match Settings::from_lookup(&bad) {
                Err(SettingsError::Invalid { name: named, reason }) => {
                    assert_eq!(named, name);
                    if value.contains("not-a-net") {
                        assert!(reason.contains("not-a-net"), "the bad entry is named: {reason}");
                    }
                }
                other => panic!("{name}={value}: {other:?}"),
            }
        }
        let allowed = lookup(&[base[0], base[1], base[2], ("TRELLIS_HTTP_ALLOW_PRIVATE_NETS", "10.1.0.0/16")]);
        assert_ne!(Settings::from_lookup(&allowed).unwrap().http.allow, AllowList::none());
    }

    #[test]
    fn the_public_url_is_optional_and_checked_at_cold_start() {
        let base =
            [("TRELLIS_TABLE_NAME", "t"), ("TRELLIS_STEP_QUEUE_URL", "q"), ("TRELLIS_COMPLETION_QUEUE_URL", "c")];
        assert_eq!(Settings::from_lookup(&lookup(&base)).unwrap().public_url, None);
        let good = lookup(&[base[0], base[1], base[2], ("TRELLIS_PUBLIC_URL", "https://a.execute-api.example.com/v")]);
        let public = Settings::from_lookup(&good).unwrap().public_url.expect("a public URL");
        assert_eq!(public.path_of("/v1/interrupts/t"), "/v/v1/interrupts/t");
        for bad in ["/v", "https://a.example/v?x=1", "https://a.example/v#f", "ftp://a.example/v"] {
            match Settings::from_lookup(&lookup(&[base[0], base[1], base[2], ("TRELLIS_PUBLIC_URL", bad)])) {
                Err(SettingsError::Invalid { name: "TRELLIS_PUBLIC_URL", reason }) => {
                    assert!(reason.contains("TRELLIS_PUBLIC_URL"), "{bad}: {reason}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
