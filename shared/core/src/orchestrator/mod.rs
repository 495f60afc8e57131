//! Supervisor-driven dispatch: the `OrchestratorDecision` (closed canonical kinds, checked as
//! the schema checks them), where a supervisor's decisions come from ([`DecisionSource`]), the
//! run's orchestrator record, and the `core.dispatch` config ([`dispatch`]).
//!
//! Decisions are recorded before they take effect: the supervisor's commit appends
//! `runOrchestrator.decided`, and only a later step of `core.dispatch` acts on the latest
//! recorded decision. A source that needs I/O (a model) would run outside the engine and hand
//! its decision in as an input; it is still recorded by the same engine code ([`model`]: the
//! model-backed source, whose tick is an activity).

pub mod dispatch;
pub mod model;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::timefmt::Millis;

/// One `OrchestratorDecision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Decision {
    /// Dispatch the named workers (child workflow ids), in order.
    #[serde(rename_all = "camelCase")]
    NextWorker {
        /// Workflow ids, at least one.
        next_worker_ids: Vec<String>,
        /// RFC 0126: per-child inputs, index-aligned with `next_worker_ids`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next_worker_inputs: Option<Vec<Map<String, Value>>>,
        /// RFC 0039: the supervisor's confidence, 0..1.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        confidence: Option<f64>,
    },
    /// Ask the human party a question.
    AskUser {
        /// The question.
        prompt: String,
    },
    /// End the run cleanly.
    #[serde(rename_all = "camelCase")]
    Terminate {
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// RFC 0039: the supervisor's confidence, 0..1.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        confidence: Option<f64>,
        /// RFC 0090: the convergence record.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        success_criteria: Option<Vec<Criterion>>,
    },
}

/// One RFC 0090 success criterion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Criterion {
    /// Criterion identifier.
    pub key: String,
    /// Whether it was judged satisfied.
    pub met: bool,
}

impl Decision {
    /// Parses and checks a decision as `orchestrator-decision.schema.json` does.
    pub fn parse(value: &Value) -> Result<Self, String> {
        let decision: Self =
            serde_json::from_value(value.clone()).map_err(|error| format!("not an OrchestratorDecision: {error}"))?;
        let confidence_ok = |c: &Option<f64>| c.is_none_or(|c| (0.0..=1.0).contains(&c));
        match &decision {
            Self::NextWorker { next_worker_ids, confidence, .. } => {
                if next_worker_ids.is_empty() {
                    return Err("next-worker needs at least one worker id".into());
                }
                if next_worker_ids.iter().any(|id| id.is_empty() || id.len() > 256) {
                    return Err("worker ids are 1 to 256 characters".into());
                }
                if !confidence_ok(confidence) {
                    return Err("confidence is between 0 and 1".into());
                }
            }
            Self::AskUser { prompt } if prompt.is_empty() => return Err("ask-user needs a prompt".into()),
            Self::AskUser { .. } => {}
            Self::Terminate { reason, confidence, success_criteria } => {
                if reason.as_deref() == Some("") {
                    return Err("a terminate reason is not empty".into());
                }
                if !confidence_ok(confidence) {
                    return Err("confidence is between 0 and 1".into());
                }
                if success_criteria.iter().flatten().any(|c| c.key.is_empty()) {
                    return Err("success criteria keys are not empty".into());
                }
            }
        }
        Ok(decision)
    }

    /// The wire kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NextWorker { .. } => "next-worker",
            Self::AskUser { .. } => "ask-user",
            Self::Terminate { .. } => "terminate",
        }
    }

    /// The decision's stated confidence (RFC 0039), if any.
    pub fn confidence(&self) -> Option<f64> {
        match self {
            Self::NextWorker { confidence, .. } | Self::Terminate { confidence, .. } => *confidence,
            Self::AskUser { .. } => None,
        }
    }

    /// The decision as JSON.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| json!({ "kind": self.kind() }))
    }
}

/// The recorded decision dispatch acts on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decided {
    /// Sequence of its `runOrchestrator.decided` event (the `causationId` of what it causes).
    pub sequence: u64,
    /// The supervisor node.
    pub node_id: String,
    /// The decision.
    pub decision: Decision,
    /// When.
    pub at: Millis,
}

/// The run's orchestrator: identity (fixed at the first decision) and decisions so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrchestratorState {
    /// The deciding agent; every later decision must come from it.
    pub agent_id: String,
    /// `runOrchestrator.decided` events so far.
    pub decisions: u32,
    /// The latest decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest: Option<Decided>,
    /// Child runs dispatched so far (each counts against `iterationCap`).
    #[serde(default)]
    pub dispatched: u32,
    /// What a model-backed supervisor is shown of the run so far: `{decision}` per recorded
    /// decision and `{workerId, childRunId, status, outputs}` per harvested worker, oldest
    /// first (the latest [`model::MAX_HISTORY`] are kept).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Value>,
}

/// What a decision source knows when asked.
#[derive(Debug)]
pub struct DecisionContext<'a> {
    /// The supervisor node's config.
    pub config: &'a Map<String, Value>,
    /// Decisions already recorded on the run.
    pub prior_decisions: u32,
    /// Whether scripted (mock) plans may be honoured: a workflow of the global namespace, or
    /// a run created by a test-scope key on a host with its test seams on.
    pub mocks_allowed: bool,
    /// The run's variables (answers to `ask-user` land in `userAnswer`).
    pub variables: &'a Map<String, Value>,
}

/// A source's next decision and its own confidence in it (the CP-1 signal, distinct from the
/// decision's stated `confidence`).
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    /// The decision.
    pub decision: Decision,
    /// The agent's confidence, 0..1; `None` means no signal.
    pub confidence: Option<f64>,
}

/// Where a supervisor's decisions come from.
pub trait DecisionSource {
    /// The next decision, or why there is none (the node fails with it).
    fn decide(&self, context: &DecisionContext<'_>) -> Result<Proposal, crate::run::RunError>;
}

/// The scripted source: `config.mockDispatchPlan` (alias `mockDecisions`), decision k being
/// `plan[k]` and `terminate` (`mockPlan-exhausted`) once it runs out; without a plan, the
/// conformance default: `next-worker ["conformance-noop"]` first, then `terminate`
/// (`goal-reached`). `mockPendingDecision` replaces the first decision and `mockConfidence`
/// is the agent's confidence in it (the CP-1 signal). Honoured only when mocks are allowed;
/// a supervisor that names a model route decides through [`model`] instead.
#[derive(Debug, Clone, Copy, Default)]
pub struct ScriptedSource;

/// The config key of a scripted plan, if the supervisor has one.
pub fn plan_of(config: &Map<String, Value>) -> Option<&Value> {
    config.get("mockDispatchPlan").or_else(|| config.get("mockDecisions"))
}

impl DecisionSource for ScriptedSource {
    fn decide(&self, context: &DecisionContext<'_>) -> Result<Proposal, crate::run::RunError> {
        if !context.mocks_allowed {
            return Err(crate::run::RunError::new(
                "decision_source_unavailable",
                "this supervisor names no model route (`route`, `provider` + `model`, or a `goal`); scripted \
                 plans (mockDispatchPlan) run only in the host's own (global) workflows or for runs created by a \
                 test-scope key with the test seams on",
            ));
        }
        let invalid = |message| crate::run::RunError::new("validation_error", message);
        let index = context.prior_decisions as usize;
        if let (0, Some(pending)) = (index, context.config.get("mockPendingDecision")) {
            let decision = Decision::parse(pending).map_err(invalid)?;
            let confidence = context.config.get("mockConfidence").and_then(Value::as_f64);
            return Ok(Proposal { decision, confidence });
        }
        let decision = match plan_of(context.config) {
            None if index == 0 => Decision::NextWorker {
                next_worker_ids: vec!["conformance-noop".into()],
                next_worker_inputs: None,
                confidence: None,
            },
            None => {
                Decision::Terminate { reason: Some("goal-reached".into()), confidence: None, success_criteria: None }
            }
            Some(plan) => match plan.as_array().and_then(|plan| plan.get(index)) {
                Some(entry) => Decision::parse(entry).map_err(invalid)?,
                None => Decision::Terminate {
                    reason: Some("mockPlan-exhausted".into()),
                    confidence: None,
                    success_criteria: None,
                },
            },
        };
        Ok(Proposal { decision, confidence: None })
    }
}

/// The agent id a supervisor decides as: `config.agentId`, else the node's `agent.agentId`,
/// else `trellis.supervisor`.
pub fn agent_id(config: &Map<String, Value>, agent: Option<&Value>) -> String {
    config
        .get("agentId")
        .and_then(Value::as_str)
        .or_else(|| agent.and_then(|agent| agent.get("agentId")).and_then(Value::as_str))
        .unwrap_or("trellis.supervisor")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closed_kinds_parse_and_anything_else_is_refused() {
        let ok = [
            json!({"kind": "next-worker", "nextWorkerIds": ["a", "a"], "nextWorkerInputs": [{"x": 1}, {"x": 2}]}),
            json!({"kind": "ask-user", "prompt": "which?"}),
            json!({"kind": "terminate", "reason": "goal-reached", "successCriteria": [{"key": "k", "met": false}]}),
        ];
        for value in ok {
            let decision = Decision::parse(&value).unwrap();
            assert_eq!(decision.to_value(), value);
        }
        let bad = [
            json!({"kind": "next-worker", "nextWorkerIds": []}),
            json!({"kind": "next-worker", "nextWorkerIds": ["a"], "extra": 1}),
            json!({"kind": "escalate"}),
            json!({"kind": "ask-user", "prompt": ""}),
            json!({"kind": "terminate", "confidence": 2}),
            json!({"nextWorkerIds": ["a"]}),
        ];
        for value in bad {
            assert!(Decision::parse(&value).is_err(), "{value}");
        }
    }

    #[test]
    fn the_scripted_source_follows_its_plan_then_terminates() {
        let config = json!({"mockDispatchPlan": [{"kind": "next-worker", "nextWorkerIds": ["w"]}]});
        let config = config.as_object().unwrap();
        let variables = Map::new();
        let context = |config, prior, mocks_allowed| DecisionContext {
            config,
            prior_decisions: prior,
            mocks_allowed,
            variables: &variables,
        };
        let decide = |prior| ScriptedSource.decide(&context(config, prior, true)).map(|p| p.decision);
        assert_eq!(decide(0).unwrap().kind(), "next-worker");
        assert_eq!(decide(1).unwrap().to_value(), json!({"kind": "terminate", "reason": "mockPlan-exhausted"}));
        let empty = Map::new();
        let default = |prior| ScriptedSource.decide(&context(&empty, prior, true)).map(|p| p.decision);
        assert_eq!(
            default(0).unwrap().to_value(),
            json!({"kind": "next-worker", "nextWorkerIds": ["conformance-noop"]})
        );
        assert_eq!(default(3).unwrap().to_value(), json!({"kind": "terminate", "reason": "goal-reached"}));
        let pending =
            json!({"mockConfidence": 0.5, "mockPendingDecision": {"kind": "next-worker", "nextWorkerIds": ["w"]}});
        let first = ScriptedSource.decide(&context(pending.as_object().unwrap(), 0, true)).unwrap();
        assert_eq!((first.decision.kind(), first.confidence), ("next-worker", Some(0.5)));
        let later = ScriptedSource.decide(&context(pending.as_object().unwrap(), 1, true)).unwrap();
        assert_eq!(
            (later.decision.kind(), later.confidence),
            ("terminate", None),
            "then the default plan's later ticks"
        );
        let refused = ScriptedSource.decide(&context(config, 0, false));
        assert_eq!(refused.unwrap_err().code, "decision_source_unavailable");
    }
}
