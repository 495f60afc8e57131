//! The conformance rows: those of the conformance-only pure kinds that touch more of the run
//! than a pure node may — the scripted agent turn of `core.conformance.mock-agent` (its `agent.*` events, a
//! host-minted `callId` per tool call, the low-confidence suspend; see
//! [`crate::nodes::mock_agent`] for the order) and the cost figures of
//! `conformance.cost.emit` rolled into the run's cost — and the `emit-provider-usage` test
//! seam's `provider.usage`.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::orchestration::DEFAULT_ESCALATION_THRESHOLD;
use super::progress::Transition;
use super::Verdict;
use crate::ai::usage::{CostAttributes, ProviderUsage};
use crate::event::types;
use crate::interrupt::request::InterruptRequest;
use crate::interrupt::{InterruptKind, Refusal};
use crate::nodes::mock_agent::{self, MockAgentConfig};
use crate::run::RunError;

impl Transition<'_> {
    /// Plays `node_id`'s scripted agent turn.
    pub(super) fn agent_turn(&mut self, node_id: &str) {
        let Some(definition) = self.workflow.node(node_id) else { return };
        let config = match MockAgentConfig::parse(&definition.config) {
            Ok(config) => config,
            Err(message) => return self.fail_node(node_id, RunError::new("validation_error", message)),
        };
        let agent_id = mock_agent::resolve_agent_id(&config, definition.agent.as_ref(), node_id);
        if let Some(reasoning) = &config.reasoning {
            for (sequence, delta) in reasoning.chunks.iter().enumerate() {
                let payload =
                    json!({ "agentId": agent_id, "delta": delta, "sequence": sequence, "verbosity": "summary" });
                self.emit(types::AGENT_REASONING_DELTA, Some(node_id), payload);
            }
            let mut payload = json!({
                "agentId": agent_id,
                "reasoning": reasoning.text(),
                "verbosity": "summary",
                "summary": reasoning.summary,
            });
            if let Some(tokens) = reasoning.token_count {
                payload["tokenCount"] = json!(tokens);
            }
            self.emit(types::AGENT_REASONED, Some(node_id), payload);
        }
        for (index, call) in config.tool_calls.iter().enumerate() {
            let call_id = self.call_id(node_id, index);
            let called = self.state.next_sequence;
            self.emit(types::AGENT_TOOL_CALLED, Some(node_id), call.called(&agent_id, &call_id));
            // The run's budget counts the call (`maxToolCalls`); an exhaustion under
            // `onExhaustion: fail` failed the run, and the node is left as it is.
            if !self.budget_tool_called(node_id) {
                return;
            }
            self.emit_caused(types::AGENT_TOOL_RETURNED, Some(node_id), call.returned(&agent_id, &call_id), called);
        }
        if let Some(handoff) = &config.handoff {
            self.emit(types::AGENT_HANDOFF, Some(node_id), handoff.payload(&agent_id));
        }
        if let Some(decision) = &config.decision {
            self.emit(types::AGENT_DECIDED, Some(node_id), decision.payload(&agent_id));
            if let Some(request) = self.low_confidence(&agent_id, decision.confidence, &decision.decision) {
                return self.suspend(node_id, request);
            }
        }
        self.complete_node(node_id, Map::new(), true);
    }

    /// CP-1: the `low-confidence` interrupt that holds an agent's decision, when its
    /// `confidence` is below the run's `configurable.escalationThreshold` (else 0.7):
    /// `{action: "accept"}` takes the decision, `{action: "reject"}` fails the node.
    pub(super) fn low_confidence(
        &self,
        agent_id: &str,
        confidence: Option<f64>,
        decision: &Value,
    ) -> Option<InterruptRequest> {
        let threshold = self.configured("escalationThreshold").unwrap_or(DEFAULT_ESCALATION_THRESHOLD);
        let observed = confidence.filter(|c| *c < threshold)?;
        let data = json!({ "agentId": agent_id, "threshold": threshold, "observed": observed, "decision": decision });
        let resume_schema = json!({
            "type": "object",
            "required": ["action"],
            "properties": { "action": { "enum": ["accept", "reject"] } },
        });
        Some(InterruptRequest {
            kind: InterruptKind::LowConfidence,
            data,
            resume_schema: Some(resume_schema),
            timeout_ms: None,
            profile: None,
        })
    }

    /// The host-minted `callId` of tool call `index` of `node_id`'s current activation:
    /// deterministic (replay mints the same), unique per run, node, activation and call.
    pub(super) fn call_id(&self, node_id: &str, index: usize) -> String {
        let activation = self.state.nodes.get(node_id).map_or(0, |node| node.activation);
        let seed = format!("{}\n{node_id}\n{activation}\n{index}", self.state.run_id);
        format!("call-{}", &hex::encode(Sha256::digest(seed.as_bytes()))[..24])
    }

    /// Rolls `attributes` into the run's cost and completes `node_id` with no outputs.
    pub(super) fn record_cost(&mut self, node_id: &str, attributes: &CostAttributes) {
        self.state.ai.cost.get_or_insert_with(Default::default).add_attributes(attributes);
        self.complete_node(node_id, Map::new(), true);
    }

    /// The test seam's usage record: one `provider.usage` (caused by the event at sequence
    /// `causation`, which must be one of this run's), rolled into the run's cost and counted
    /// by its budget.
    pub(super) fn record_usage(
        &mut self,
        node_id: Option<&str>,
        payload: Value,
        usage: &ProviderUsage,
        causation: Option<u64>,
    ) -> Verdict {
        if causation.is_some_and(|cause| cause >= self.state.next_sequence) {
            return Verdict::Refused(Refusal::invalid(
                "`correlationId` names no event of this run",
                json!({ "field": "correlationId" }),
            ));
        }
        match causation {
            Some(cause) => self.emit_caused(types::PROVIDER_USAGE, node_id, payload, cause),
            None => self.emit(types::PROVIDER_USAGE, node_id, payload),
        }
        self.state.ai.cost.get_or_insert_with(Default::default).add(usage);
        if let Some(node_id) = node_id.filter(|node_id| self.workflow.node(node_id).is_some()) {
            self.budget_usage(node_id, usage);
        }
        Verdict::Applied
    }
}
