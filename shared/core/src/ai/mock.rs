//! `configurable.mockProvider {id, config}` (`run-options.md`, "Mock provider extension"):
//! the run's model calls are answered by a deterministic mock instead of a provider. Only a
//! caller with the `test:seams` scope on a host whose test seams are on may ask for one
//! (`403 mock_provider_forbidden` otherwise); an id outside [`CATALOG`] is
//! `400 unsupported_mock_provider`; a config that breaks its entry's rules is
//! `400 validation_error` naming the field. With a mock, a node's `promptId` need not
//! resolve and no provider is contacted.
//!
//! The catalog served:
//!
//! | id | config | the call |
//! |---|---|---|
//! | `stream-text` | `tokens` (default `["mock", " response"]`), `delayMsPerToken` 0..=5000, `finishReason` (`stop`, `length`, `tool_calls`, `content_filter`), `usage{promptTokens, completionTokens}`, `model` (default `mock-stream-text-v1`) | streams the tokens, answers their concatenation |
//! | `error` | `code` (default `provider_unavailable`), `message`, `retryable` (default false), `failAfterMs` 0..=60000 | fails the attempt with that error (a retryable one is retried within the node's policy) |
//! | `usage-only` | `usage{promptTokens, completionTokens}`, `model` | answers an empty text and reports only the usage |

use serde_json::{json, Map, Value};

/// The mock providers this host serves (discovery's `testing.mockProviders`).
pub const CATALOG: [&str; 3] = ["stream-text", "error", "usage-only"];

/// The `stream-text` tokens when the config names none.
pub const DEFAULT_TOKENS: [&str; 2] = ["mock", " response"];
/// The model a `stream-text` mock reports by default.
pub const DEFAULT_MODEL: &str = "mock-stream-text-v1";
/// The most `delayMsPerToken` allows.
pub const MAX_DELAY_PER_TOKEN_MS: u64 = 5_000;
/// The most `failAfterMs` allows.
pub const MAX_FAIL_AFTER_MS: u64 = 60_000;
/// The finish reasons a mock may report.
pub const FINISH_REASONS: [&str; 4] = ["stop", "length", "tool_calls", "content_filter"];

/// A validated mock provider.
#[derive(Debug, Clone, PartialEq)]
pub enum MockProvider {
    /// Streams `tokens`.
    StreamText {
        /// The tokens, in order.
        tokens: Vec<String>,
        /// Pause before each token.
        delay_ms_per_token: u64,
        /// The finish reason reported.
        finish_reason: String,
        /// Prompt tokens reported.
        prompt_tokens: u64,
        /// Completion tokens reported (default: the number of tokens).
        completion_tokens: u64,
        /// The model reported.
        model: String,
    },
    /// Fails the attempt.
    Error {
        /// The error code.
        code: String,
        /// The error message.
        message: String,
        /// Whether the engine may retry it.
        retryable: bool,
        /// How long the attempt runs before failing.
        fail_after_ms: u64,
    },
    /// Reports usage only.
    UsageOnly {
        /// Prompt tokens reported.
        prompt_tokens: u64,
        /// Completion tokens reported.
        completion_tokens: u64,
        /// The model reported.
        model: String,
    },
}

/// Why a `mockProvider` is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MockRefusal {
    /// The id is not in [`CATALOG`] (`400 unsupported_mock_provider`).
    Unsupported(String),
    /// The config breaks a rule: the field (`configurable.mockProvider…`) and the message.
    Invalid {
        /// The offending field's path.
        field: String,
        /// The rule it breaks.
        message: String,
    },
}

fn invalid(field: &str, message: impl Into<String>) -> MockRefusal {
    MockRefusal::Invalid { field: format!("configurable.mockProvider.{field}"), message: message.into() }
}

fn bounded(config: &Map<String, Value>, key: &str, max: u64) -> Result<u64, MockRefusal> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(value) => value
            .as_u64()
            .filter(|ms| *ms <= max)
            .ok_or_else(|| invalid(&format!("config.{key}"), format!("{key} must be an integer from 0 to {max}"))),
    }
}

fn string(config: &Map<String, Value>, key: &str, default: &str) -> Result<String, MockRefusal> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(default.to_owned()),
        Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
        Some(_) => Err(invalid(&format!("config.{key}"), format!("{key} must be a non-empty string"))),
    }
}

/// `(promptTokens, completionTokens)` of `config.usage`, each defaulting to `defaults`.
fn usage(config: &Map<String, Value>, defaults: (u64, u64)) -> Result<(u64, u64), MockRefusal> {
    let Some(usage) = config.get("usage").filter(|usage| !usage.is_null()) else { return Ok(defaults) };
    let usage = usage.as_object().ok_or_else(|| invalid("config.usage", "usage must be an object"))?;
    let count = |key: &str, default: u64| match usage.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(value) => value
            .as_u64()
            .ok_or_else(|| invalid(&format!("config.usage.{key}"), format!("{key} must be a non-negative integer"))),
    };
    Ok((count("promptTokens", defaults.0)?, count("completionTokens", defaults.1)?))
}

impl MockProvider {
    /// Checks `configurable.mockProvider` (the caller's right to use one is checked by the
    /// run's creation, before this).
    pub fn parse(value: &Value) -> Result<Self, MockRefusal> {
        let object = value.as_object().ok_or_else(|| MockRefusal::Invalid {
            field: "configurable.mockProvider".into(),
            message: "mockProvider must be an object {id, config?}".into(),
        })?;
        if let Some(key) = object.keys().find(|key| !matches!(key.as_str(), "id" | "config")) {
            return Err(invalid(key, format!("mockProvider has no field `{key}` (only id and config)")));
        }
        let id = match object.get("id") {
            Some(Value::String(id)) if !id.is_empty() && id.len() <= 128 => id.as_str(),
            _ => return Err(invalid("id", "id must be a string of 1 to 128 characters")),
        };
        let empty = Map::new();
        let config = match object.get("config") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(config)) => config,
            Some(_) => return Err(invalid("config", "config must be an object")),
        };
        match id {
            "stream-text" => {
                let tokens = match config.get("tokens") {
                    None | Some(Value::Null) => DEFAULT_TOKENS.iter().map(|token| (*token).to_owned()).collect(),
                    Some(Value::Array(items)) => items
                        .iter()
                        .map(|item| item.as_str().map(str::to_owned))
                        .collect::<Option<Vec<String>>>()
                        .ok_or_else(|| invalid("config.tokens", "tokens must be an array of strings"))?,
                    Some(_) => return Err(invalid("config.tokens", "tokens must be an array of strings")),
                };
                let finish_reason = string(config, "finishReason", "stop")?;
                if !FINISH_REASONS.contains(&finish_reason.as_str()) {
                    return Err(invalid(
                        "config.finishReason",
                        format!("finishReason must be one of {FINISH_REASONS:?}"),
                    ));
                }
                let (prompt_tokens, completion_tokens) = usage(config, (0, tokens.len() as u64))?;
                Ok(Self::StreamText {
                    delay_ms_per_token: bounded(config, "delayMsPerToken", MAX_DELAY_PER_TOKEN_MS)?,
                    finish_reason,
                    prompt_tokens,
                    completion_tokens,
                    model: string(config, "model", DEFAULT_MODEL)?,
                    tokens,
                })
            }
            "error" => {
                let retryable = match config.get("retryable") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(retryable)) => *retryable,
                    Some(_) => return Err(invalid("config.retryable", "retryable must be a boolean")),
                };
                Ok(Self::Error {
                    code: string(config, "code", "provider_unavailable")?,
                    message: string(config, "message", "the mock provider failed the call")?,
                    retryable,
                    fail_after_ms: bounded(config, "failAfterMs", MAX_FAIL_AFTER_MS)?,
                })
            }
            "usage-only" => {
                let (prompt_tokens, completion_tokens) = usage(config, (0, 0))?;
                Ok(Self::UsageOnly {
                    prompt_tokens,
                    completion_tokens,
                    model: string(config, "model", "mock-usage-only-v1")?,
                })
            }
            other => Err(MockRefusal::Unsupported(other.to_owned())),
        }
    }

    /// The run's mock provider, if its `configurable` names one that parses (the run's
    /// creation refused any other).
    pub fn of_run(configurable: Option<&Value>) -> Option<Self> {
        configurable.and_then(|configurable| configurable.get("mockProvider")).and_then(|mock| Self::parse(mock).ok())
    }

    /// The catalog id.
    pub fn id(&self) -> &'static str {
        match self {
            Self::StreamText { .. } => "stream-text",
            Self::Error { .. } => "error",
            Self::UsageOnly { .. } => "usage-only",
        }
    }
}

impl MockRefusal {
    /// The error details: `{field}` or `{mockProvider, supported}`.
    pub fn details(&self) -> Value {
        match self {
            Self::Unsupported(id) => {
                json!({ "field": "configurable.mockProvider.id", "mockProvider": id, "supported": CATALOG })
            }
            Self::Invalid { field, .. } => json!({ "field": field }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_text_defaults_and_counts_its_tokens() {
        let mock =
            MockProvider::parse(&json!({"id": "stream-text", "config": {"tokens": ["Hello", " ", "world", "!"]}}));
        let Ok(MockProvider::StreamText { tokens, completion_tokens, finish_reason, model, .. }) = mock else {
            panic!("{mock:?}")
        };
        assert_eq!(
            (tokens.len(), completion_tokens, finish_reason.as_str(), model.as_str()),
            (4, 4, "stop", DEFAULT_MODEL)
        );
        let Ok(MockProvider::StreamText { tokens, .. }) = MockProvider::parse(&json!({"id": "stream-text"})) else {
            panic!()
        };
        assert_eq!(tokens, DEFAULT_TOKENS);
    }

    #[test]
    fn unknown_ids_and_bad_configs_are_refused_naming_the_field() {
        assert_eq!(
            MockProvider::parse(&json!({"id": "tool-calls"})),
            Err(MockRefusal::Unsupported("tool-calls".into()))
        );
        let refusal =
            MockProvider::parse(&json!({"id": "stream-text", "config": {"delayMsPerToken": 9000}})).unwrap_err();
        assert_eq!(refusal.details(), json!({"field": "configurable.mockProvider.config.delayMsPerToken"}));
        let refusal = MockProvider::parse(&json!({"id": "error", "extra": 1})).unwrap_err();
        assert_eq!(refusal.details(), json!({"field": "configurable.mockProvider.extra"}));
        assert!(MockProvider::parse(&json!({"id": "stream-text", "config": {"tokens": [1]}})).is_err());
    }
}
