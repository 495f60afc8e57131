//! `core.ai.callPrompt`: one model call per attempt to a provider the host configured
//! (never one a workflow or a run names by URL), or to the run's mock provider.
//!
//! - [`config`]: the providers document ([`config::parse_providers`], shared with the AWS
//!   composition root), models and prices, policies;
//! - [`node`]: the node config, its registration checks and the prepared request;
//! - [`provider`]: one invocation over [`HttpClient::open_operator`] (a pinned operator
//!   destination, redirects off), error codes; [`openai`] / [`anthropic`]: the wire formats;
//! - [`stream`]: server-sent events and token batching; [`schema`]: the Tier-1 subset and
//!   answer validation; [`identity`]: the replay-stable request identity; [`mock`]: the
//!   mock providers.
//!
//! An attempt: the policy (§3.6) is decided before anything is sent (`disabled`,
//! `restricted` model, `required` without a node `credentialsRef` or with one that does not
//! resolve → `provider_policy_denied`, `details.reason`); the key is the node's own
//! `credentialsRef` (BYOK) or the provider's, resolved for the run's tenant inside the
//! attempt; the call carries `Idempotency-Key` (attempt-free) and `X-Trellis-Request-Key`
//! (the request identity). With `responseSchema` an answer that does not validate gets one
//! repair turn (the answer and a corrective message naming the violations); still invalid
//! → `response_schema_invalid` (not retryable). Every invocation's usage (the repair turn's
//! too, and a failed one's when the provider reported usage) is reported as
//! [`Progress::Usage`] before the attempt returns. Outputs: `{text, data?, finishReason,
//! model, provider, usage{inputTokens, outputTokens, totalTokens}}`.
//!
//! Amazon Bedrock (`kind: "bedrock"`, AWS backend only) goes through the same attempt: its
//! Converse client is a [`provider::ModelBackend`] the AWS composition root attaches to the
//! providers. A node naming the provider id `bedrock` (the conventional id, RFC 0067 §C) on a
//! host with no provider of that id, or a Bedrock model ARN (`arn:aws:bedrock:…`) on a host
//! with no `bedrock` provider — always so on the embedded host — is refused at registration
//! (`422 capability_required`, `requiredCapability: "aiProviders.bedrock"`); a node's own
//! `credentialsRef` on a `bedrock` provider fails `credential_forbidden` (IAM auth, no BYOK).

pub mod agent;
pub mod anthropic;
pub mod config;
pub use trellis_core::ai::identity;
pub mod mock;
pub mod node;
pub mod openai;
pub mod provider;
pub mod schema;
pub mod stream;
pub mod supervisor;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use trellis_core::activity::{Activity, ActivityCall, ActivityError, ActivityResult, Progress, ProgressSink};
use trellis_core::ai::mock::MockProvider;
use trellis_core::ai::usage::{ProviderUsage, CURRENCY};
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::NodeContext;
use trellis_core::run::RunError;
use trellis_core::secrets::{self, Secret, SecretResolver};

use crate::http::HttpClient;
pub use config::{
    parse_providers, parse_providers_for, Backend, ProviderConfig, ProviderConfigError, ProviderKind, Providers,
};
use config::{Denial, PolicyMode, ProviderKey};
pub use provider::ModelBackend;
use provider::{Answer, Failure, Invocation, Turn};

/// The node's `typeId`.
pub const TYPE_ID: &str = "core.ai.callPrompt";

/// The `core.ai.callPrompt` executor.
#[derive(Debug, Clone)]
pub struct CallPromptActivity {
    client: HttpClient,
    providers: Arc<Providers>,
    secrets: Option<Arc<dyn SecretResolver>>,
    test_seams: bool,
    answer_check: Option<AnswerCheck>,
}

/// A check of a structured answer beyond `responseSchema` (given the prepared request and
/// the schema-valid answer; the violations, `[{path, message}]`, go into the one repair
/// turn like the schema's).
pub type AnswerCheck = fn(&Value, &Value) -> Result<(), Vec<Value>>;

impl CallPromptActivity {
    /// An executor calling `providers` through `client`, resolving keys through `secrets`;
    /// `test_seams` adds the `testing` discovery block (the mock providers).
    pub fn new(
        client: HttpClient,
        providers: Providers,
        secrets: Option<Arc<dyn SecretResolver>>,
        test_seams: bool,
    ) -> Self {
        Self { client, providers: Arc::new(providers), secrets, test_seams, answer_check: None }
    }

    /// The same executor with `check` applied to every structured answer (see
    /// [`AnswerCheck`]); the model-backed supervisor's decision checks use it.
    pub fn with_answer_check(mut self, check: AnswerCheck) -> Self {
        self.answer_check = Some(check);
        self
    }

    /// A structured answer read against `schema` and the answer check.
    fn read_answer(&self, request: &Value, schema: &Value, text: &str) -> Result<Value, Vec<Value>> {
        let data = schema::read_answer(schema, text)?;
        match self.answer_check {
            Some(check) => check(request, &data).map(|()| data),
            None => Ok(data),
        }
    }

    /// The providers.
    pub fn providers(&self) -> &Providers {
        &self.providers
    }
}

/// About four bytes a token: the estimate for a provider that reports no usage.
fn estimated_tokens(messages: &Value) -> u64 {
    let bytes: usize = messages
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|message| message.get("content").and_then(Value::as_str))
        .map(str::len)
        .sum();
    (bytes as u64).div_ceil(4)
}

fn bad_request(message: impl Into<String>) -> ActivityError {
    ActivityError::new("validation_error", message, false)
}

fn denied(provider: &str, reason: Denial) -> ActivityError {
    ActivityError::new(
        "provider_policy_denied",
        format!("the policy of provider `{provider}` denies this call ({})", reason.as_str()),
        false,
    )
    .with_details(json!({ "reason": reason.as_str(), "provider": provider }))
}

/// The prepared request, read back.
struct Prepared {
    provider: String,
    model: String,
    messages: Vec<Value>,
    temperature: Option<f64>,
    max_tokens: Option<u64>,
    schema: Option<Value>,
    stream: bool,
    request_key: String,
    mock: Option<Value>,
}

impl Prepared {
    fn read(request: &Value) -> Result<Self, ActivityError> {
        let text = |key: &str| {
            request
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| bad_request(format!("the prepared request has no {key}")))
        };
        Ok(Self {
            provider: text("provider")?,
            model: text("model")?,
            messages: request.get("messages").and_then(Value::as_array).cloned().unwrap_or_default(),
            temperature: request.pointer("/params/temperature").and_then(Value::as_f64),
            max_tokens: request.pointer("/params/maxTokens").and_then(Value::as_u64),
            schema: request.get("responseSchema").cloned(),
            stream: request.get("stream").and_then(Value::as_bool).unwrap_or(false),
            request_key: text("requestKey")?,
            mock: request.get("mock").cloned(),
        })
    }
}

#[async_trait]
impl Activity for CallPromptActivity {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        // A model call with MCP tools (`config.mcp`) needs an MCP client, which this host does
        // not have: the definition is kept, not runnable here (`422 capability_required`).
        if config.get("mcp").is_some_and(|mcp| !mcp.is_null()) {
            return Err(ConfigIssue::Capability("mcpClient"));
        }
        let parsed = node::parse(config).map_err(ConfigIssue::Invalid)?;
        if self.names_unserved_bedrock(&parsed) {
            return Err(ConfigIssue::Capability(BEDROCK_CAPABILITY));
        }
        Ok(())
    }

    /// A chat completion has no side effect at the provider: retried under
    /// `WorkflowSettings.maxRetries` without an explicit `settings.retry`.
    fn idempotent(&self, _config: &Map<String, Value>) -> bool {
        true
    }

    /// A chat completion is cacheable: a rerun with the same request identity takes its answer.
    fn cacheable(&self, _config: &Map<String, Value>) -> bool {
        true
    }

    fn model_call(&self) -> bool {
        true
    }

    fn attempt_timeout_ms(&self, config: &Map<String, Value>) -> u64 {
        node::parse(config).map_or(node::DEFAULT_TIMEOUT_MS, |parsed| parsed.timeout_ms)
    }

    fn prepare(&self, context: &NodeContext<'_>) -> Result<Value, RunError> {
        node::prepare(&self.providers, context)
    }

    async fn execute(&self, call: &ActivityCall, progress: &dyn ProgressSink) -> ActivityResult {
        let prepared = Prepared::read(&call.request)?;
        let deadline = Instant::now() + Duration::from_millis(call.timeout_ms);
        if let Some(raw) = &prepared.mock {
            let mock = MockProvider::parse(raw).map_err(|_| bad_request("the run's mock provider does not parse"))?;
            let answer = mock::answer(&mock, prepared.stream, progress).await?;
            let data = match &prepared.schema {
                Some(schema) => self.read_answer(&call.request, schema, &answer.text).ok(),
                None => None,
            };
            return Ok(outputs(&answer, mock::PROVIDER, &prepared.model, data));
        }
        let (provider, model_entry) = self.route(&prepared, call)?;
        let key = self.key(call, provider).await?;

        let messages = prepared.messages.clone();
        let invocation = Invocation {
            provider,
            key: key.as_deref(),
            turn: Turn {
                model: &prepared.model,
                messages: &messages,
                temperature: prepared.temperature,
                max_tokens: prepared.max_tokens,
                schema: prepared.schema.as_ref(),
                tools: &[],
            },
            stream: prepared.stream,
            idempotency_key: &call.idempotency_key,
            request_key: &prepared.request_key,
            attempt: call.attempt,
            deadline,
        };
        let answer = self.invoke(&invocation, model_entry, progress).await?;
        let Some(schema) = &prepared.schema else {
            return Ok(outputs(&answer, &provider.id, &prepared.model, None));
        };
        let violations = match self.read_answer(&call.request, schema, &answer.text) {
            Ok(data) => return Ok(outputs(&answer, &provider.id, &prepared.model, Some(data))),
            Err(violations) => violations,
        };
        // One bounded repair turn, not streamed.
        let repaired = self.repair_turn(&invocation, model_entry, &answer.text, &violations, progress).await?;
        match self.read_answer(&call.request, schema, &repaired.text) {
            Ok(data) => Ok(outputs(&repaired, &provider.id, &prepared.model, Some(data))),
            Err(violations) => Err(schema_invalid(violations)),
        }
    }

    fn capabilities(&self) -> Vec<(&'static str, Value)> {
        let ids: Vec<&str> = self.providers.list().iter().map(|provider| provider.id.as_str()).collect();
        let byok: Vec<&str> = if self.secrets.is_some() {
            self.providers
                .list()
                .iter()
                .filter(|provider| provider.policy.mode != PolicyMode::Disabled)
                .filter(|provider| provider.kind != ProviderKind::Bedrock)
                .map(|provider| provider.id.as_str())
                .collect()
        } else {
            Vec::new()
        };
        let mut blocks = vec![
            (
                "aiProviders",
                json!({
                    "supported": ids,
                    "byok": byok,
                    // One resolution layer: each provider's policy in the host's providers
                    // document (no workspace or project layer exists here).
                    "policies": { "modes": config::POLICY_MODES, "scopes": ["host"], "errorCode": "provider_policy_denied" },
                }),
            ),
            (
                "providerUsage",
                json!({ "supported": true, "costEstimates": self.providers.has_prices(), "currency": CURRENCY }),
            ),
        ];
        if self.test_seams {
            blocks.push(("testing", json!({ "mockProviders": trellis_core::ai::mock::CATALOG })));
        }
        blocks
    }
}

/// `requiredCapability` of a node that needs a Bedrock provider this host does not have.
pub const BEDROCK_CAPABILITY: &str = "aiProviders.bedrock";

impl CallPromptActivity {
    /// The provider and model `prepared` names, once the provider's policy admits the call
    /// (and a Bedrock provider is called without a `credentialsRef`). Shared with the agent's
    /// model turns.
    fn route(
        &self,
        prepared: &Prepared,
        call: &ActivityCall,
    ) -> Result<(&ProviderConfig, &config::ModelEntry), ActivityError> {
        let provider = self.providers.get(&prepared.provider).ok_or_else(|| {
            ActivityError::new(
                "provider_not_supported",
                format!("provider `{}` is not configured on this host", prepared.provider),
                false,
            )
            .with_details(json!({ "provider": prepared.provider }))
        })?;
        let model_entry = provider.model(&prepared.model).ok_or_else(|| {
            ActivityError::new(
                "model_not_supported",
                format!("model `{}` is not among provider `{}`'s models", prepared.model, provider.id),
                false,
            )
            .with_details(json!({ "provider": provider.id, "model": prepared.model }))
        })?;
        provider
            .policy
            .decide(&prepared.model, call.credentials_ref.is_some())
            .map_err(|reason| denied(&provider.id, reason))?;
        if provider.kind == ProviderKind::Bedrock && call.credentials_ref.is_some() {
            return Err(ActivityError::new(
                "credential_forbidden",
                format!(
                    "provider `{}` (kind bedrock) is called with the host's IAM role: no credentialsRef",
                    provider.id
                ),
                false,
            )
            .with_details(json!({ "provider": provider.id })));
        }
        Ok((provider, model_entry))
    }

    /// The one bounded repair turn after an answer `text` that `violations` refused: the same
    /// invocation with the answer and the repair prompt appended, no tools, not streamed.
    async fn repair_turn(
        &self,
        invocation: &Invocation<'_>,
        model_entry: &config::ModelEntry,
        text: &str,
        violations: &[Value],
        progress: &dyn ProgressSink,
    ) -> Result<Answer, ActivityError> {
        let mut messages = invocation.turn.messages.to_vec();
        messages.push(json!({ "role": "assistant", "content": text }));
        messages.push(json!({ "role": "user", "content": repair_prompt(violations) }));
        let repair = Invocation {
            turn: Turn { messages: &messages, tools: &[], ..invocation.turn },
            stream: false,
            ..*invocation
        };
        self.invoke(&repair, model_entry, progress).await
    }
}

/// `response_schema_invalid`: the answer still refused after the repair turn.
fn schema_invalid(violations: Vec<Value>) -> ActivityError {
    ActivityError::new(
        "response_schema_invalid",
        format!("the answer does not match responseSchema after one repair turn ({} violations)", violations.len()),
        false,
    )
    .with_details(json!({ "violations": violations.into_iter().take(20).collect::<Vec<_>>(), "repairTurns": 1 }))
}

impl CallPromptActivity {
    /// Whether `node` names Bedrock where this host serves none: the provider id `bedrock`
    /// not configured here, or a Bedrock model ARN with no `bedrock` provider configured.
    fn names_unserved_bedrock(&self, node: &node::NodeConfig) -> bool {
        let unconfigured_id = node.provider.as_deref() == Some("bedrock") && self.providers.get("bedrock").is_none();
        let arn = node.model.as_deref().is_some_and(|model| model.starts_with("arn:aws:bedrock:"))
            && !self.providers.has_kind(ProviderKind::Bedrock);
        unconfigured_id || arn
    }

    /// The key for this attempt: the node's own `credentialsRef` (BYOK), else the provider's.
    async fn key(&self, call: &ActivityCall, provider: &ProviderConfig) -> Result<Option<Arc<Secret>>, ActivityError> {
        if let Some(reference) = call.credentials_ref.as_deref() {
            return match secrets::resolve_with(self.secrets.as_deref(), &call.tenant, reference).await {
                Ok(secret) => Ok(Some(Arc::new(secret))),
                Err(_) if provider.policy.mode == PolicyMode::Required => {
                    Err(denied(&provider.id, Denial::ByokRequiredButUnresolved))
                }
                Err(error) => Err(error.to_activity_error()),
            };
        }
        match &provider.key {
            ProviderKey::None => Ok(None),
            ProviderKey::Inline(secret) => Ok(Some(secret.clone())),
            ProviderKey::Ref(reference) => secrets::resolve_with(self.secrets.as_deref(), &call.tenant, reference)
                .await
                .map(|secret| Some(Arc::new(secret)))
                .map_err(|error| error.to_activity_error()),
        }
    }

    /// One invocation; its usage is reported whether it succeeded or not (when known).
    async fn invoke(
        &self,
        invocation: &Invocation<'_>,
        model: &config::ModelEntry,
        progress: &dyn ProgressSink,
    ) -> Result<Answer, ActivityError> {
        let started = Instant::now();
        let result = provider::invoke(&self.client, invocation, progress).await;
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match &result {
            Ok(answer) => tracing::debug!(
                provider = %invocation.provider.id, model = %model.id, stream = invocation.stream,
                finish = %answer.finish_reason, duration_ms, "core.ai.callPrompt answered"
            ),
            Err(failure) => tracing::debug!(
                provider = %invocation.provider.id, model = %model.id, code = %failure.error.code,
                duration_ms, "core.ai.callPrompt failed"
            ),
        }
        let reported = match &result {
            Ok(answer) => Some(answer),
            Err(Failure { partial, .. }) => partial.as_ref().filter(|partial| partial.has_usage()),
        };
        if let Some(answer) = reported {
            // A server that reports no usage (some local ones) still spends: estimate about
            // four bytes a token, so a budget is never left unconsumed.
            let input = answer.input_tokens.unwrap_or_else(|| estimated_tokens(&Value::from(invocation.turn.messages)));
            let output = answer.output_tokens.unwrap_or_else(|| (answer.text.len() as u64).div_ceil(4));
            let wanted = progress
                .report(Progress::Usage(ProviderUsage {
                    provider: invocation.provider.id.clone(),
                    model: model.id.clone(),
                    input_tokens: input,
                    output_tokens: output,
                    cost_estimate_usd: model.cost(input, output),
                    cache_hit: None,
                    cache_read_tokens: None,
                    cache_write_tokens: None,
                }))
                .await;
            if !wanted {
                // E.g. this usage exhausted the run's budget: no repair turn, no output.
                return Err(ActivityError::abandoned());
            }
        }
        result.map_err(|failure| failure.error)
    }
}

/// The corrective message of the repair turn.
fn repair_prompt(violations: &[Value]) -> String {
    let listed: Vec<String> = violations
        .iter()
        .take(10)
        .map(|violation| {
            format!(
                "- at {}: {}",
                violation.get("path").and_then(Value::as_str).unwrap_or("/"),
                violation.get("message").and_then(Value::as_str).unwrap_or("invalid")
            )
        })
        .collect();
    format!(
        "Your previous answer does not match the required JSON schema:\n{}\nAnswer again with only the corrected JSON object, no prose and no code fence.",
        listed.join("\n")
    )
}

/// The node's outputs.
fn outputs(answer: &Answer, provider: &str, model: &str, data: Option<Value>) -> Map<String, Value> {
    let input = answer.input_tokens.unwrap_or(0);
    let output = answer.output_tokens.unwrap_or(0);
    let mut outputs = Map::new();
    outputs.insert("text".into(), json!(answer.text));
    if let Some(data) = data {
        outputs.insert("data".into(), data);
    }
    outputs.insert("finishReason".into(), json!(answer.finish_reason));
    outputs.insert("model".into(), json!(answer.model.as_deref().unwrap_or(model)));
    outputs.insert("provider".into(), json!(provider));
    outputs
        .insert("usage".into(), json!({ "inputTokens": input, "outputTokens": output, "totalTokens": input + output }));
    outputs
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
