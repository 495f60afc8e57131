//! `core.conformance.mock-agent` (RFC 0023): a scripted agent turn for the conformance suite.
//! Its config (`core-conformance-mock-agent-config.schema.json`, closed) names what the turn
//! emits; the engine plays it (`engine::agent`), in this order:
//!
//! 1. one `agent.reasoning.delta {agentId, delta, sequence}` per `mockReasoning.streamChunks`
//!    entry (`sequence` from 0), then `agent.reasoned {agentId, reasoning, verbosity}` whose
//!    `reasoning` is the chunks' concatenation (else the summary);
//! 2. per `mockToolCalls` entry, `agent.toolCalled` then `agent.toolReturned`, sharing a
//!    host-minted `callId`; the return's `causationId` is the call's event;
//! 3. `agent.handoff {fromAgentId, toAgentId, reason}`;
//! 4. `agent.decided {agentId, decision, confidence}`; a confidence below the run's
//!    `configurable.escalationThreshold` (else 0.7) suspends the node on a `low-confidence`
//!    interrupt (`node.suspended{reason: "low-confidence", agentId, threshold, observed}`, the
//!    run `waiting-approval`): `{action: "accept"}` completes it, `{action: "reject"}` fails it.
//!
//! The node's outputs are `{}`. It is conformance-only: registration refuses it outside the
//! global namespace unless the caller holds the test scope on a host with its seams on, and a
//! run that may not use mocks fails it with `typeId_refused` ([`super::refused_mock`]).

use serde_json::{json, Map, Value};

use super::{NodeContext, NodeKind, NodeOutcome};
use crate::interrupt::request::ConfigIssue;

/// The kind's `typeId`.
pub const TYPE_ID: &str = "core.conformance.mock-agent";

/// The most tokens one `agent.reasoned` carries (discovery's `agents.reasoning.tokenLimit`).
pub const REASONING_TOKEN_LIMIT: usize = 512;

/// The summary a bare `mockReasoning: true` reasons with.
const STUB_SUMMARY: &str = "Mock agent reasoning (host stub).";

/// `core.conformance.mock-agent`.
pub(super) struct MockAgent;

impl NodeKind for MockAgent {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        MockAgentConfig::parse(config).map(drop).map_err(ConfigIssue::Invalid)
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        if !context.mocks_allowed {
            return NodeOutcome::Failed(super::refused_mock(TYPE_ID));
        }
        NodeOutcome::ScriptedAgent
    }
}

/// A parsed mock-agent config.
#[derive(Debug, Clone, PartialEq)]
pub struct MockAgentConfig {
    /// `agentId`, when the config overrides the node's agent.
    pub agent_id: Option<String>,
    /// The reasoning block, when `mockReasoning` is set.
    pub reasoning: Option<Reasoning>,
    /// `mockToolCalls`, in order.
    pub tool_calls: Vec<ToolCall>,
    /// `mockHandoff`.
    pub handoff: Option<Handoff>,
    /// `mockDecision` (or the `mockConfidence` shorthand).
    pub decision: Option<MockDecision>,
}

/// `mockReasoning`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reasoning {
    /// The one-line digest.
    pub summary: String,
    /// `tokenCount`.
    pub token_count: Option<u64>,
    /// `streamChunks` (empty: no deltas).
    pub chunks: Vec<String>,
}

/// One `mockToolCalls` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// `toolId`.
    pub tool_id: String,
    /// `arguments` (`null` when absent).
    pub arguments: Value,
    /// `result` (`Ok`) or `error` (`Err`, as the event's error object `{code, message, details?}`).
    pub outcome: Result<Value, Value>,
    /// `durationMs` (0 when absent).
    pub duration_ms: u64,
}

/// `mockHandoff`.
#[derive(Debug, Clone, PartialEq)]
pub struct Handoff {
    /// `toAgentId`.
    pub to_agent_id: String,
    /// `reason`.
    pub reason: Option<String>,
    /// `context`.
    pub context: Option<Value>,
}

/// `mockDecision`.
#[derive(Debug, Clone, PartialEq)]
pub struct MockDecision {
    /// `decision`.
    pub decision: Value,
    /// `confidence`, 0..=1.
    pub confidence: Option<f64>,
    /// `reasoning`.
    pub reasoning: Option<String>,
}

/// Refuses keys of `object` (at `at`) outside `allowed`.
fn closed(object: &Map<String, Value>, at: &str, allowed: &[&str]) -> Result<(), String> {
    match object.keys().find(|key| !allowed.contains(&key.as_str())) {
        Some(key) => Err(format!("{at}{key} is not a field of {TYPE_ID} (allowed: {})", allowed.join(", "))),
        None => Ok(()),
    }
}

fn object<'a>(value: &'a Value, at: &str) -> Result<&'a Map<String, Value>, String> {
    value.as_object().ok_or_else(|| format!("{at} must be an object"))
}

fn string(value: Option<&Value>, at: &str, min: usize) -> Result<Option<String>, String> {
    match value {
        None => Ok(None),
        Some(Value::String(text)) if text.chars().count() >= min => Ok(Some(text.clone())),
        Some(_) if min > 0 => Err(format!("{at} must be a string of at least {min} characters")),
        Some(_) => Err(format!("{at} must be a string")),
    }
}

fn agent_id(value: Option<&Value>, at: &str) -> Result<Option<String>, String> {
    match value {
        Some(Value::String(id)) if (3..=256).contains(&id.chars().count()) => Ok(Some(id.clone())),
        Some(_) => Err(format!("{at} must be a string of 3 to 256 characters")),
        None => Ok(None),
    }
}

fn unsigned(value: Option<&Value>, at: &str) -> Result<Option<u64>, String> {
    match value {
        None => Ok(None),
        Some(value) => value.as_u64().map(Some).ok_or_else(|| format!("{at} must be an integer ≥ 0")),
    }
}

fn confidence(value: Option<&Value>, at: &str) -> Result<Option<f64>, String> {
    match value {
        None => Ok(None),
        Some(value) => value
            .as_f64()
            .filter(|c| (0.0..=1.0).contains(c))
            .map(Some)
            .ok_or_else(|| format!("{at} must be a number between 0 and 1")),
    }
}

impl MockAgentConfig {
    /// Parses and checks a node's config; the message names the offending field.
    pub fn parse(config: &Map<String, Value>) -> Result<Self, String> {
        let at = "config.";
        closed(
            config,
            at,
            &["agentId", "mockReasoning", "mockToolCalls", "mockHandoff", "mockDecision", "mockConfidence"],
        )?;
        let agent_id = agent_id(config.get("agentId"), "config.agentId")?;
        let reasoning = match config.get("mockReasoning") {
            None | Some(Value::Bool(false)) => None,
            Some(Value::Bool(true)) => {
                Some(Reasoning { summary: STUB_SUMMARY.to_owned(), token_count: None, chunks: vec![] })
            }
            Some(value) => Some(Reasoning::parse(object(value, "config.mockReasoning")?)?),
        };
        let tool_calls = match config.get("mockToolCalls") {
            None => Vec::new(),
            Some(Value::Array(entries)) => entries
                .iter()
                .enumerate()
                .map(|(index, entry)| ToolCall::parse(entry, &format!("config.mockToolCalls[{index}]")))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("config.mockToolCalls must be an array".to_owned()),
        };
        let handoff = config.get("mockHandoff").map(Handoff::parse).transpose()?;
        let shorthand = confidence(config.get("mockConfidence"), "config.mockConfidence")?;
        let decision = match config.get("mockDecision") {
            Some(value) => Some(MockDecision::parse(value)?),
            None => shorthand.map(|confidence| MockDecision {
                decision: json!({ "kind": "mock-confidence" }),
                confidence: Some(confidence),
                reasoning: None,
            }),
        };
        Ok(Self { agent_id, reasoning, tool_calls, handoff, decision })
    }
}

impl Reasoning {
    fn parse(fields: &Map<String, Value>) -> Result<Self, String> {
        let at = "config.mockReasoning.";
        closed(fields, at, &["summary", "trace", "tokenCount", "streamChunks"])?;
        let summary = string(fields.get("summary"), "config.mockReasoning.summary", 0)?
            .ok_or("config.mockReasoning.summary is required")?;
        string(fields.get("trace"), "config.mockReasoning.trace", 0)?;
        let token_count = unsigned(fields.get("tokenCount"), "config.mockReasoning.tokenCount")?;
        let chunks = match fields.get("streamChunks") {
            None => Vec::new(),
            Some(Value::Array(chunks)) => chunks
                .iter()
                .enumerate()
                .map(|(index, chunk)| {
                    chunk
                        .as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| format!("config.mockReasoning.streamChunks[{index}] must be a string"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("config.mockReasoning.streamChunks must be an array of strings".to_owned()),
        };
        let reasoning = Self { summary, token_count, chunks };
        // Discovery's `agents.reasoning.tokenLimit`, counted as whitespace-separated words (a
        // token is never longer than one): reasoning past it is refused, not cut, so the
        // closing `agent.reasoned` always equals its deltas.
        let words = reasoning.text().split_whitespace().count();
        if words > REASONING_TOKEN_LIMIT {
            return Err(format!(
                "config.mockReasoning is {words} words long; reasoning is limited to {REASONING_TOKEN_LIMIT} tokens"
            ));
        }
        if token_count.is_some_and(|count| count > REASONING_TOKEN_LIMIT as u64) {
            return Err(format!("config.mockReasoning.tokenCount must be at most {REASONING_TOKEN_LIMIT}"));
        }
        Ok(reasoning)
    }

    /// The closing `agent.reasoned`'s `reasoning`: the chunks' concatenation, else the summary.
    pub fn text(&self) -> String {
        if self.chunks.is_empty() {
            self.summary.clone()
        } else {
            self.chunks.concat()
        }
    }
}

impl ToolCall {
    fn parse(entry: &Value, at: &str) -> Result<Self, String> {
        let fields = object(entry, at)?;
        closed(fields, &format!("{at}."), &["toolId", "arguments", "result", "error", "durationMs"])?;
        let tool_id =
            string(fields.get("toolId"), &format!("{at}.toolId"), 1)?.ok_or(format!("{at}.toolId is required"))?;
        let outcome = match (fields.get("result"), fields.get("error")) {
            (Some(result), None) => Ok(result.clone()),
            (None, Some(error)) => Err(error_object(error, &format!("{at}.error"))?),
            (None, None) => return Err(format!("{at} needs `result` or `error`")),
            (Some(_), Some(_)) => return Err(format!("{at} has both `result` and `error`; they are exclusive")),
        };
        let duration_ms = unsigned(fields.get("durationMs"), &format!("{at}.durationMs"))?.unwrap_or(0);
        let arguments = fields.get("arguments").cloned().unwrap_or(Value::Null);
        Ok(Self { tool_id, arguments, outcome, duration_ms })
    }

    /// `agent.toolCalled`'s payload.
    pub fn called(&self, agent_id: &str, call_id: &str) -> Value {
        json!({
            "agentId": agent_id,
            "toolName": self.tool_id,
            "toolId": self.tool_id,
            "callId": call_id,
            "inputs": self.arguments,
            "arguments": self.arguments,
            "transport": "native",
        })
    }

    /// `agent.toolReturned`'s payload.
    pub fn returned(&self, agent_id: &str, call_id: &str) -> Value {
        let mut payload = json!({
            "agentId": agent_id,
            "toolName": self.tool_id,
            "toolId": self.tool_id,
            "callId": call_id,
            "durationMs": self.duration_ms,
        });
        match &self.outcome {
            Ok(result) => {
                payload["outcome"] = result.clone();
                payload["result"] = result.clone();
                payload["status"] = json!("ok");
            }
            Err(error) => {
                payload["error"] = error.clone();
                payload["status"] = json!("error");
            }
        }
        payload
    }
}

/// A config `ErrorEnvelope` (`{error, message, details?}`, closed) as the event's error
/// object `{code, message, details?}`.
fn error_object(value: &Value, at: &str) -> Result<Value, String> {
    let fields = object(value, at)?;
    closed(fields, &format!("{at}."), &["error", "message", "details"])?;
    let code = string(fields.get("error"), &format!("{at}.error"), 1)?.ok_or(format!("{at}.error is required"))?;
    let message =
        string(fields.get("message"), &format!("{at}.message"), 1)?.ok_or(format!("{at}.message is required"))?;
    let mut error = json!({ "code": code, "message": message });
    match fields.get("details") {
        None => {}
        Some(details @ Value::Object(_)) => error["details"] = details.clone(),
        Some(_) => return Err(format!("{at}.details must be an object")),
    }
    Ok(error)
}

impl Handoff {
    fn parse(value: &Value) -> Result<Self, String> {
        let at = "config.mockHandoff";
        let fields = object(value, at)?;
        closed(fields, "config.mockHandoff.", &["toAgentId", "reason", "context"])?;
        let to_agent_id = agent_id(fields.get("toAgentId"), "config.mockHandoff.toAgentId")?
            .ok_or("config.mockHandoff.toAgentId is required")?;
        let reason = string(fields.get("reason"), "config.mockHandoff.reason", 0)?;
        Ok(Self { to_agent_id, reason, context: fields.get("context").cloned() })
    }

    /// `agent.handoff`'s payload.
    pub fn payload(&self, from_agent_id: &str) -> Value {
        let mut payload = json!({ "fromAgentId": from_agent_id, "toAgentId": self.to_agent_id });
        if let Some(reason) = &self.reason {
            payload["reason"] = json!(reason);
        }
        if let Some(context) = &self.context {
            payload["context"] = context.clone();
        }
        payload
    }
}

impl MockDecision {
    fn parse(value: &Value) -> Result<Self, String> {
        let fields = object(value, "config.mockDecision")?;
        closed(fields, "config.mockDecision.", &["decision", "confidence", "reasoning"])?;
        let decision = fields.get("decision").cloned().ok_or("config.mockDecision.decision is required")?;
        let confidence = confidence(fields.get("confidence"), "config.mockDecision.confidence")?;
        let reasoning = string(fields.get("reasoning"), "config.mockDecision.reasoning", 0)?;
        Ok(Self { decision, confidence, reasoning })
    }

    /// `agent.decided`'s payload.
    pub fn payload(&self, agent_id: &str) -> Value {
        let mut payload = json!({ "agentId": agent_id, "decision": self.decision });
        if let Some(confidence) = self.confidence {
            payload["confidence"] = json!(confidence);
        }
        if let Some(reasoning) = &self.reasoning {
            payload["reasoning"] = json!(reasoning);
        }
        payload
    }
}

/// The agent id the node's events carry: `config.agentId`, else the node's `agent.agentId`
/// (when it is 3 to 256 characters), else `host:mock-agent:<nodeId>`.
pub fn resolve_agent_id(config: &MockAgentConfig, agent: Option<&Value>, node_id: &str) -> String {
    config
        .agent_id
        .clone()
        .or_else(|| {
            agent
                .and_then(|agent| agent.get("agentId"))
                .and_then(Value::as_str)
                .filter(|id| (3..=256).contains(&id.chars().count()))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| format!("host:mock-agent:{node_id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(config: Value) -> Result<MockAgentConfig, String> {
        MockAgentConfig::parse(config.as_object().unwrap())
    }

    #[test]
    fn the_schema_examples_parse() {
        let full = parse(json!({
            "mockReasoning": { "summary": "Considered three options; chose A.", "tokenCount": 42 },
            "mockToolCalls": [{ "toolId": "openwop.search.web", "arguments": { "q": "openwop" },
                                "result": ["hit-1", "hit-2"], "durationMs": 12 }],
            "mockDecision": { "decision": { "next": "summarize" }, "confidence": 0.92 }
        }))
        .unwrap();
        assert_eq!(full.tool_calls[0].duration_ms, 12);
        assert_eq!(full.decision.unwrap().confidence, Some(0.92));
        let shorthand = parse(json!({ "mockConfidence": 0.5 })).unwrap();
        assert_eq!(shorthand.decision.unwrap().confidence, Some(0.5));
        assert_eq!(parse(json!({ "mockReasoning": true })).unwrap().reasoning.unwrap().text(), STUB_SUMMARY);
    }

    #[test]
    fn refusals_name_the_field() {
        for (config, field) in [
            (json!({ "mockToolCalls": [{ "toolId": "t" }] }), "config.mockToolCalls[0]"),
            (
                json!({ "mockToolCalls": [{ "toolId": "t", "result": 1, "error": { "error": "e", "message": "m" } }] }),
                "config.mockToolCalls[0]",
            ),
            (json!({ "mockToolCalls": [{ "result": 1 }] }), "config.mockToolCalls[0].toolId"),
            (
                json!({ "mockToolCalls": [{ "toolId": "t", "error": { "error": "e" } }] }),
                "config.mockToolCalls[0].error.message",
            ),
            (
                json!({ "mockToolCalls": [{ "toolId": "t", "result": 1, "latency": 3 }] }),
                "config.mockToolCalls[0].latency",
            ),
            (json!({ "agentId": "ab" }), "config.agentId"),
            (json!({ "mockReasoning": { "trace": "x" } }), "config.mockReasoning.summary"),
            (json!({ "mockReasoning": { "summary": "word ".repeat(513) } }), "reasoning is limited to 512 tokens"),
            (json!({ "mockReasoning": { "summary": "s", "tokenCount": 513 } }), "config.mockReasoning.tokenCount"),
            (
                json!({ "mockReasoning": { "summary": "s", "streamChunks": ["a", 2] } }),
                "config.mockReasoning.streamChunks[1]",
            ),
            (json!({ "mockHandoff": { "reason": "r" } }), "config.mockHandoff.toAgentId"),
            (json!({ "mockDecision": { "confidence": 0.3 } }), "config.mockDecision.decision"),
            (json!({ "mockDecision": { "decision": 1, "confidence": 1.5 } }), "config.mockDecision.confidence"),
            (json!({ "mockConfidence": -1 }), "config.mockConfidence"),
            (json!({ "mockPlan": [] }), "config.mockPlan"),
        ] {
            let message = parse(config.clone()).unwrap_err();
            assert!(message.contains(field), "{config}: {message}");
        }
    }

    #[test]
    fn an_error_entry_becomes_the_event_error_object() {
        let config =
            parse(json!({ "mockToolCalls": [{ "toolId": "t", "error": { "error": "boom", "message": "it broke" } }] }))
                .unwrap();
        let returned = config.tool_calls[0].returned("agent-1", "call-1");
        assert_eq!(returned["error"], json!({ "code": "boom", "message": "it broke" }));
        assert_eq!(returned["status"], "error");
        assert!(returned.get("outcome").is_none() && returned.get("result").is_none());
    }

    #[test]
    fn the_agent_id_is_the_config_then_the_node_pin_then_host_minted() {
        let pinned = json!({ "agentId": "core.pinned" });
        let plain = parse(json!({})).unwrap();
        assert_eq!(resolve_agent_id(&plain, Some(&pinned), "n"), "core.pinned");
        assert_eq!(resolve_agent_id(&plain, None, "n"), "host:mock-agent:n");
        let own = parse(json!({ "agentId": "core.own" })).unwrap();
        assert_eq!(resolve_agent_id(&own, Some(&pinned), "n"), "core.own");
    }
}
