//! The host's model providers (operator configuration, never workflow or run input) and
//! their policies (OpenWOP §3.6).
//!
//! The JSON document (`--ai-providers FILE` / `TRELLIS_AI_PROVIDERS` on the embedded host;
//! the same document on AWS) is an array of providers:
//!
//! ```json
//! [{"id": "openai", "kind": "openai", "baseUrl": "https://api.openai.com/v1",
//!   "credentialsRef": "openai-key", "default": true,
//!   "models": ["gpt-4o-mini", {"id": "gpt-4o", "inputUsdPerMTok": 2.5, "outputUsdPerMTok": 10}],
//!   "policy": {"mode": "restricted", "allowedModels": ["gpt-4o*"]}}]
//! ```
//!
//! `kind` is `openai` (chat completions at `{baseUrl}/chat/completions`) or `anthropic`
//! (`{baseUrl}/v1/messages`); `credentialsRef` names a secret the host's resolver holds for
//! the run's tenant (resolved inside each attempt); `models` lists what may be asked for
//! (the first is the default model) with optional prices in USD per million tokens; at most
//! one provider is `default`; `policy.mode` is `disabled`, `optional` (the default),
//! `required` (the node must bring its own key: BYOK) or `restricted` (`allowedModels`
//! globs, `*` and `?`; an empty list denies every model).
//!
//! `kind: "bedrock"` (Amazon Bedrock's Converse API) is served on the AWS backend only:
//! `{id, kind: "bedrock", region?, models, default?, policy?}` — no `baseUrl` (the AWS SDK
//! resolves the endpoint; `AWS_ENDPOINT_URL_BEDROCK_RUNTIME` overrides it) and no
//! `credentialsRef` (the host's IAM role signs the calls), so no `required` (BYOK) policy
//! either. [`parse_providers`] (the embedded host) refuses such an entry ("bedrock providers
//! need the AWS backend"); [`parse_providers_for`] with [`Backend::Aws`] accepts it, and the
//! AWS composition root attaches the Converse client ([`ProviderConfig::backend`]).

use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};
use trellis_core::secrets::{self, Secret};

/// A provider's wire protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// An OpenAI-compatible chat-completions API (OpenAI, vLLM, Ollama, LiteLLM, …).
    OpenAi,
    /// The Anthropic Messages API.
    Anthropic,
    /// Amazon Bedrock's Converse API (AWS backend only; IAM auth, no key).
    Bedrock,
}

impl ProviderKind {
    /// `openai` or `anthropic`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Anthropic => "anthropic",
            Self::Bedrock => "bedrock",
        }
    }
}

/// The backend a providers document is read for: which kinds it can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded host: `openai` and `anthropic` (it carries no AWS SDK).
    Embedded,
    /// The AWS functions: `bedrock` too.
    Aws,
}

/// One model a provider serves, with optional prices.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelEntry {
    /// The model id sent to the provider.
    pub id: String,
    /// USD per million prompt tokens.
    pub input_usd_per_mtok: Option<f64>,
    /// USD per million completion tokens.
    pub output_usd_per_mtok: Option<f64>,
}

impl ModelEntry {
    /// The cost estimate of one invocation, when the model has a price.
    pub fn cost(&self, input_tokens: u64, output_tokens: u64) -> Option<f64> {
        if self.input_usd_per_mtok.is_none() && self.output_usd_per_mtok.is_none() {
            return None;
        }
        let input = self.input_usd_per_mtok.unwrap_or(0.0) * input_tokens as f64;
        let output = self.output_usd_per_mtok.unwrap_or(0.0) * output_tokens as f64;
        Some((input + output) / 1_000_000.0)
    }
}

/// A provider policy's mode (OpenWOP §3.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyMode {
    /// The provider is unusable.
    Disabled,
    /// The host's key or the node's own (the default).
    Optional,
    /// The node must bring its own key (`credentialsRef`).
    Required,
    /// Only models matching `allowedModels`.
    Restricted,
}

/// The modes discovery advertises.
pub const POLICY_MODES: [&str; 4] = ["disabled", "optional", "required", "restricted"];

/// A provider's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The mode.
    pub mode: PolicyMode,
    /// Globs (`*`, `?`) of the models a `restricted` provider allows.
    pub allowed_models: Vec<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Self { mode: PolicyMode::Optional, allowed_models: Vec::new() }
    }
}

/// Why a policy denies a call (`details.reason` of `provider_policy_denied`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// `disabled`.
    ProviderDisabled,
    /// `required` and the node has no `credentialsRef`.
    ByokRequired,
    /// `required` and the node's `credentialsRef` does not resolve.
    ByokRequiredButUnresolved,
    /// `restricted` and the model matches no `allowedModels` glob.
    ModelNotAllowed,
}

impl Denial {
    /// The reason's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ProviderDisabled => "provider_disabled",
            Self::ByokRequired => "byok_required",
            Self::ByokRequiredButUnresolved => "byok_required_but_unresolved",
            Self::ModelNotAllowed => "model_not_allowed",
        }
    }
}

impl Policy {
    /// The decision that needs no secret: `disabled` (even with BYOK), `restricted` against
    /// the model, `required` without a node key. `byok_required_but_unresolved` is decided
    /// by the caller once it tried to resolve the node's key.
    pub fn decide(&self, model: &str, has_node_key: bool) -> Result<(), Denial> {
        match self.mode {
            PolicyMode::Disabled => Err(Denial::ProviderDisabled),
            PolicyMode::Optional => Ok(()),
            PolicyMode::Required if !has_node_key => Err(Denial::ByokRequired),
            PolicyMode::Required => Ok(()),
            PolicyMode::Restricted => {
                if self.allowed_models.iter().any(|glob| glob_matches(glob, model)) {
                    Ok(())
                } else {
                    Err(Denial::ModelNotAllowed)
                }
            }
        }
    }
}

/// Whether `text` matches `glob` (`*` any run, `?` one character, everything else literal).
pub fn glob_matches(glob: &str, text: &str) -> bool {
    let pattern: Vec<char> = glob.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut backtrack: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            backtrack = Some((p, t));
            p += 1;
        } else if let Some((star, matched)) = backtrack {
            p = star + 1;
            t = matched + 1;
            backtrack = Some((star, matched + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// Where a provider's key comes from.
#[derive(Clone)]
pub enum ProviderKey {
    /// No key (a local model server).
    None,
    /// A secret reference resolved for the run's tenant inside each attempt.
    Ref(String),
    /// A key the operator gave at start (`TRELLIS_OPENAI_API_KEY`).
    Inline(Arc<Secret>),
}

impl fmt::Debug for ProviderKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => formatter.write_str("None"),
            Self::Ref(reference) => write!(formatter, "Ref({reference})"),
            // `Secret`'s Debug is a hash prefix and a length, never the value.
            Self::Inline(secret) => write!(formatter, "Inline({secret:?})"),
        }
    }
}

/// One configured provider.
#[derive(Debug, Clone)]
pub struct ProviderConfig {
    /// `region` of a `bedrock` provider (default: the host's AWS region).
    pub region: Option<String>,
    /// The client of a kind this crate does not speak itself (`bedrock`: attached by the AWS
    /// composition root with [`Providers::attach_backend`]); `None` for `openai`/`anthropic`.
    pub backend: Option<std::sync::Arc<dyn super::provider::ModelBackend>>,
    /// The id nodes name (`config.provider`) and usage reports carry.
    pub id: String,
    /// The wire protocol.
    pub kind: ProviderKind,
    /// The base URL, without a trailing `/` (empty for `bedrock`).
    pub base_url: String,
    /// The host's key for it.
    pub key: ProviderKey,
    /// The models it may be asked for; the first is the default.
    pub models: Vec<ModelEntry>,
    /// Whether nodes naming no provider use it.
    pub default: bool,
    /// Its policy.
    pub policy: Policy,
}

impl ProviderConfig {
    /// The entry of `model`, if the provider serves it.
    pub fn model(&self, model: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|entry| entry.id == model)
    }
}

/// The host's providers.
#[derive(Debug, Clone, Default)]
pub struct Providers {
    list: Vec<ProviderConfig>,
}

/// A provider document that cannot be used: the field path and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {rule}")]
pub struct ProviderConfigError {
    /// E.g. `providers[1].kind`.
    pub field: String,
    /// E.g. `must be "openai" or "anthropic"`.
    pub rule: String,
}

fn error(field: impl Into<String>, rule: impl Into<String>) -> ProviderConfigError {
    ProviderConfigError { field: field.into(), rule: rule.into() }
}

/// Parses the providers document for the embedded host (see the module docs; `bedrock`
/// entries are refused).
pub fn parse_providers(json: &str) -> Result<Providers, ProviderConfigError> {
    parse_providers_for(json, Backend::Embedded)
}

/// Parses the providers document for `backend`.
pub fn parse_providers_for(json: &str, backend: Backend) -> Result<Providers, ProviderConfigError> {
    let value: Value =
        serde_json::from_str(json).map_err(|parse| error("providers", format!("is not valid JSON ({parse})")))?;
    let items = value.as_array().ok_or_else(|| error("providers", "must be a JSON array of providers"))?;
    let mut providers = Providers::default();
    for (index, item) in items.iter().enumerate() {
        providers.add(parse_provider(item, &format!("providers[{index}]"), backend)?)?;
    }
    Ok(providers)
}

fn parse_provider(item: &Value, at: &str, backend: Backend) -> Result<ProviderConfig, ProviderConfigError> {
    let object = item.as_object().ok_or_else(|| error(at, "must be an object"))?;
    const FIELDS: [&str; 8] = ["id", "kind", "baseUrl", "credentialsRef", "models", "default", "policy", "region"];
    if let Some(key) = object.keys().find(|key| !FIELDS.contains(&key.as_str())) {
        return Err(error(format!("{at}.{key}"), format!("is not a provider field (allowed: {FIELDS:?})")));
    }
    let id = required_string(object, "id", at)?;
    if id.len() > 64 || !id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err(error(format!("{at}.id"), "must be 1 to 64 characters of A-Z a-z 0-9 - _ ."));
    }
    if id == "mock" {
        return Err(error(format!("{at}.id"), "`mock` is reserved for the test mock providers"));
    }
    let kind = match required_string(object, "kind", at)?.as_str() {
        "openai" => ProviderKind::OpenAi,
        "anthropic" => ProviderKind::Anthropic,
        "bedrock" if backend == Backend::Aws => ProviderKind::Bedrock,
        "bedrock" => return Err(error(format!("{at}.kind"), "bedrock providers need the AWS backend")),
        _ if backend == Backend::Aws => {
            return Err(error(format!("{at}.kind"), "must be \"openai\", \"anthropic\" or \"bedrock\""))
        }
        _ => return Err(error(format!("{at}.kind"), "must be \"openai\" or \"anthropic\"")),
    };
    if kind == ProviderKind::Bedrock {
        return parse_bedrock(object, at, id);
    }
    if object.contains_key("region") {
        return Err(error(format!("{at}.region"), "applies to kind \"bedrock\" only"));
    }
    let base_url = check_base_url(&required_string(object, "baseUrl", at)?)
        .map_err(|rule| error(format!("{at}.baseUrl"), rule))?;
    let key = match object.get("credentialsRef") {
        None | Some(Value::Null) => ProviderKey::None,
        Some(Value::String(reference)) => {
            secrets::check_ref(reference).map_err(|rule| error(format!("{at}.credentialsRef"), rule))?;
            ProviderKey::Ref(reference.clone())
        }
        Some(_) => return Err(error(format!("{at}.credentialsRef"), "must be a secret reference (a string)")),
    };
    let (models, default, policy) = parse_common(object, at)?;
    Ok(ProviderConfig { id, kind, base_url, key, models, default, policy, region: None, backend: None })
}

/// `models`, `default` and `policy`, the same for every kind.
fn parse_common(object: &Map<String, Value>, at: &str) -> Result<(Vec<ModelEntry>, bool, Policy), ProviderConfigError> {
    let models = parse_models(object.get("models"), &format!("{at}.models"))?;
    let default = match object.get("default") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(default)) => *default,
        Some(_) => return Err(error(format!("{at}.default"), "must be a boolean")),
    };
    let policy = match object.get("policy") {
        None | Some(Value::Null) => Policy::default(),
        Some(policy) => parse_policy(policy, &format!("{at}.policy"))?,
    };
    Ok((models, default, policy))
}

/// A `bedrock` entry: `region?` instead of `baseUrl`, the host's IAM role instead of a key.
fn parse_bedrock(object: &Map<String, Value>, at: &str, id: String) -> Result<ProviderConfig, ProviderConfigError> {
    if object.contains_key("baseUrl") {
        return Err(error(
            format!("{at}.baseUrl"),
            "bedrock providers take no baseUrl (the AWS SDK resolves the endpoint; AWS_ENDPOINT_URL_BEDROCK_RUNTIME overrides it)",
        ));
    }
    if object.contains_key("credentialsRef") {
        return Err(error(
            format!("{at}.credentialsRef"),
            "bedrock providers take no credentialsRef (calls are signed with the host's IAM role)",
        ));
    }
    let region = match object.get("region") {
        None | Some(Value::Null) => None,
        Some(Value::String(region))
            if !region.is_empty()
                && region.len() <= 32
                && region.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') =>
        {
            Some(region.clone())
        }
        Some(_) => return Err(error(format!("{at}.region"), "must be an AWS region name (e.g. \"us-east-1\")")),
    };
    let (models, default, policy) = parse_common(object, at)?;
    if policy.mode == PolicyMode::Required {
        return Err(error(
            format!("{at}.policy.mode"),
            "\"required\" (bring your own key) does not apply to bedrock providers (IAM auth, no keys)",
        ));
    }
    Ok(ProviderConfig {
        id,
        kind: ProviderKind::Bedrock,
        base_url: String::new(),
        key: ProviderKey::None,
        models,
        default,
        policy,
        region,
        backend: None,
    })
}

fn required_string(object: &Map<String, Value>, key: &str, at: &str) -> Result<String, ProviderConfigError> {
    match object.get(key) {
        Some(Value::String(text)) if !text.is_empty() => Ok(text.clone()),
        _ => Err(error(format!("{at}.{key}"), "is required and must be a non-empty string")),
    }
}

/// An absolute `http(s)` URL without userinfo, query or fragment; returned without a
/// trailing `/`.
pub fn check_base_url(text: &str) -> Result<String, String> {
    let url = url::Url::parse(text).map_err(|parse| format!("must be an absolute http(s) URL ({parse})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("must be an http or https URL".to_owned());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".to_owned());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry userinfo (put the key in credentialsRef)".to_owned());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not carry a query or a fragment".to_owned());
    }
    Ok(text.trim_end_matches('/').to_owned())
}

fn parse_models(value: Option<&Value>, at: &str) -> Result<Vec<ModelEntry>, ProviderConfigError> {
    let items = match value {
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => {
            return Err(error(
                at,
                "is required: a non-empty array of model ids or {id, inputUsdPerMTok?, outputUsdPerMTok?}",
            ))
        }
    };
    let mut models: Vec<ModelEntry> = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let here = format!("{at}[{index}]");
        let entry = match item {
            Value::String(id) if !id.is_empty() => {
                ModelEntry { id: id.clone(), input_usd_per_mtok: None, output_usd_per_mtok: None }
            }
            Value::Object(object) => {
                if let Some(key) =
                    object.keys().find(|key| !matches!(key.as_str(), "id" | "inputUsdPerMTok" | "outputUsdPerMTok"))
                {
                    return Err(error(
                        format!("{here}.{key}"),
                        "is not a model field (id, inputUsdPerMTok, outputUsdPerMTok)",
                    ));
                }
                let price = |key: &str| match object.get(key) {
                    None | Some(Value::Null) => Ok(None),
                    Some(value) => {
                        value.as_f64().filter(|price| price.is_finite() && *price >= 0.0).map(Some).ok_or_else(|| {
                            error(format!("{here}.{key}"), "must be a non-negative number (USD per million tokens)")
                        })
                    }
                };
                ModelEntry {
                    id: required_string(object, "id", &here)?,
                    input_usd_per_mtok: price("inputUsdPerMTok")?,
                    output_usd_per_mtok: price("outputUsdPerMTok")?,
                }
            }
            _ => return Err(error(here, "must be a model id (non-empty string) or an object {id, …}")),
        };
        if models.iter().any(|model| model.id == entry.id) {
            return Err(error(here, format!("model `{}` is listed twice", entry.id)));
        }
        models.push(entry);
    }
    Ok(models)
}

fn parse_policy(value: &Value, at: &str) -> Result<Policy, ProviderConfigError> {
    let object = value.as_object().ok_or_else(|| error(at, "must be an object {mode, allowedModels?}"))?;
    if let Some(key) = object.keys().find(|key| !matches!(key.as_str(), "mode" | "allowedModels")) {
        return Err(error(format!("{at}.{key}"), "is not a policy field (mode, allowedModels)"));
    }
    let mode = match object.get("mode").and_then(Value::as_str) {
        Some("disabled") => PolicyMode::Disabled,
        Some("optional") => PolicyMode::Optional,
        Some("required") => PolicyMode::Required,
        Some("restricted") => PolicyMode::Restricted,
        _ => return Err(error(format!("{at}.mode"), format!("must be one of {POLICY_MODES:?}"))),
    };
    let allowed_models = match object.get("allowedModels") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().filter(|glob| !glob.is_empty()).map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| error(format!("{at}.allowedModels"), "must be an array of non-empty glob strings"))?,
        Some(_) => return Err(error(format!("{at}.allowedModels"), "must be an array of non-empty glob strings")),
    };
    if mode != PolicyMode::Restricted && !allowed_models.is_empty() {
        return Err(error(format!("{at}.allowedModels"), "applies to mode \"restricted\" only"));
    }
    Ok(Policy { mode, allowed_models })
}

impl Providers {
    /// No providers (a real model call fails with `provider_not_supported`; mocks work).
    pub fn none() -> Self {
        Self::default()
    }

    /// Adds a provider; refuses a duplicate id or a second `default`.
    pub fn add(&mut self, provider: ProviderConfig) -> Result<(), ProviderConfigError> {
        let at = format!("providers[{}]", self.list.len());
        if self.list.iter().any(|existing| existing.id == provider.id) {
            return Err(error(format!("{at}.id"), format!("provider id `{}` is configured twice", provider.id)));
        }
        if provider.default && self.list.iter().any(|existing| existing.default) {
            return Err(error(format!("{at}.default"), "only one provider may be the default"));
        }
        self.list.push(provider);
        Ok(())
    }

    /// The shorthand `TRELLIS_OPENAI_BASE_URL` + `TRELLIS_OPENAI_API_KEY`: one provider
    /// `openai` of kind `openai` with the given models (at least one).
    pub fn add_openai_shorthand(
        &mut self,
        base_url: &str,
        key: Option<Secret>,
        models: Vec<String>,
    ) -> Result<(), ProviderConfigError> {
        let base_url = check_base_url(base_url).map_err(|rule| error("TRELLIS_OPENAI_BASE_URL", rule))?;
        if models.is_empty() {
            return Err(error("TRELLIS_OPENAI_MODELS", "must name at least one model"));
        }
        let models = models
            .into_iter()
            .map(|id| ModelEntry { id, input_usd_per_mtok: None, output_usd_per_mtok: None })
            .collect();
        self.add(ProviderConfig {
            id: "openai".to_owned(),
            kind: ProviderKind::OpenAi,
            base_url,
            key: key.map_or(ProviderKey::None, |key| ProviderKey::Inline(Arc::new(key))),
            models,
            default: !self.list.iter().any(|existing| existing.default),
            policy: Policy::default(),
            region: None,
            backend: None,
        })
    }

    /// Gives every provider of `kind` the client `backend` (the AWS composition root: the
    /// Bedrock Converse client).
    pub fn attach_backend(&mut self, kind: ProviderKind, backend: std::sync::Arc<dyn super::provider::ModelBackend>) {
        for provider in self.list.iter_mut().filter(|provider| provider.kind == kind) {
            provider.backend = Some(backend.clone());
        }
    }

    /// Whether a provider of `kind` is configured.
    pub fn has_kind(&self, kind: ProviderKind) -> bool {
        self.list.iter().any(|provider| provider.kind == kind)
    }

    /// Every provider.
    pub fn list(&self) -> &[ProviderConfig] {
        &self.list
    }

    /// Whether none is configured.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The provider `id`.
    pub fn get(&self, id: &str) -> Option<&ProviderConfig> {
        self.list.iter().find(|provider| provider.id == id)
    }

    /// The provider a node naming none uses: the `default` one, or the only one.
    pub fn default_provider(&self) -> Option<&ProviderConfig> {
        self.list.iter().find(|provider| provider.default).or(match self.list.as_slice() {
            [only] => Some(only),
            _ => None,
        })
    }

    /// Whether any model has a price.
    pub fn has_prices(&self) -> bool {
        self.list.iter().flat_map(|provider| &provider.models).any(|model| model.cost(0, 0).is_some())
    }
}

#[cfg(test)]
#[path = "bedrock_tests.rs"]
mod bedrock_tests;
