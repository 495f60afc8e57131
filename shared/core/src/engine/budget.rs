//! The engine side of run budgets ([`crate::ai::budget`] holds the policy and the
//! arithmetic). The activity rows call in at four points:
//!
//! - the run's start: `budget.reserved{effectiveBudget, scope: "run"}` after `run.started`;
//! - every consumption — a `provider.usage` (tokens, cost), a `node.retried` (retries), an
//!   `agent.toolCalled` ([`Transition::budget_tool_called`]): `budget.consumed`, and once per
//!   dimension `budget.threshold.crossed` and `budget.exhausted`. Under `onExhaustion: fail`
//!   the consumption that exhausts a dimension fails the run in the same commit:
//!   `cap.breached{kind: budget-*, limit, observed, nodeId}`, then `run.failed{error.code:
//!   budget_exhausted}` (the executing attempt is cancelled; its late result is ignored,
//!   the run being terminal). Under `interrupt` the run goes on to the next gate;
//! - before every attempt of an activity node (its first, in the node's start, and each
//!   retry when its backoff ran out): a model call (`Activity::model_call`) whose request's
//!   `model` the policy refuses fails the node with `budget_model_denied` (details: the
//!   model) without a call; then, when a dimension the attempt needs has nothing left
//!   (tokens, cost and tool calls for a model call; retries for any retry), the attempt does
//!   not go out: under `fail` the run fails as above, under `interrupt` the node suspends on
//!   an approval interrupt (`artifactType: "budget"`, `artifactData: {dimension, consumed,
//!   limit}`);
//! - the resolution of that interrupt: `accept` with `data.budget` — an allowance added to
//!   the limits, e.g. `{"action": "accept", "data": {"budget": {"maxTokens": 500}}}` — emits
//!   a second `budget.reserved` and the attempt starts (or, when the allowance still leaves
//!   the dimension spent, the node suspends again); `reject` fails the run with
//!   `cap.breached` and `run.failed{budget_exhausted}`.

use serde_json::Value;

use super::progress::Transition;
use super::Effect;
use crate::ai::budget::{self, BudgetPolicy, BudgetState, Dimension, OnExhaustion};
use crate::ai::usage::ProviderUsage;
use crate::event::types;
use crate::interrupt::request::InterruptRequest;
use crate::interrupt::resolve::Closing;
use crate::interrupt::{InterruptKind, InterruptRecord};
use crate::run::{NodeStatus, RunError};

impl Transition<'_> {
    /// The run starts: its budget is set up from `configurable.budget` and reserved. A
    /// policy that does not parse (creation checks it, so only a state written elsewhere)
    /// fails the run rather than run it unbudgeted.
    pub(super) fn reserve_budget(&mut self) {
        match BudgetPolicy::parse(self.state.configurable.as_ref()) {
            Ok(None) => {}
            Ok(Some(policy)) => {
                let mut state = BudgetState::new(policy);
                let (event_type, payload) = state.reserve();
                self.state.ai.budget = Some(state);
                self.emit(event_type, None, payload);
            }
            Err(refusal) => {
                let mut error = RunError::new("validation_error", refusal.message);
                error.details = Some(serde_json::json!({ "field": refusal.field }));
                self.fail_run(error, None, "budget-invalid");
            }
        }
    }

    /// Consumes `amounts` for `node_id`; `false` when that failed the run.
    fn consume_budget(&mut self, node_id: &str, amounts: &[(Dimension, f64)]) -> bool {
        let Some(state) = self.state.ai.budget.as_mut() else { return true };
        let mut events = Vec::new();
        let mut exhausted = None;
        for &(dimension, amount) in amounts {
            let (caused, exhausts) = state.consume(dimension, amount);
            events.extend(caused);
            if exhausts && exhausted.is_none() {
                exhausted = Some(dimension);
            }
        }
        let fail = state.policy.on_exhaustion == OnExhaustion::Fail;
        for (event_type, payload) in events {
            self.emit(event_type, Some(node_id), payload);
        }
        match exhausted {
            Some(dimension) if fail => {
                self.fail_on_budget(dimension, node_id);
                false
            }
            _ => true,
        }
    }

    /// `cap.breached{kind: budget-*}`, then `run.failed{budget_exhausted}`.
    fn fail_on_budget(&mut self, dimension: Dimension, node_id: &str) {
        let Some(state) = self.state.ai.budget.as_ref() else { return };
        let (breach, error) = (state.breach(dimension, Some(node_id)), state.exhausted_error(dimension));
        self.emit(types::CAP_BREACHED, Some(node_id), breach);
        self.fail_run(error, Some(node_id), "budget-exhausted");
    }

    /// A `provider.usage` of `node_id` was recorded: its tokens and cost are consumed.
    /// `false` when that failed the run.
    pub(super) fn budget_usage(&mut self, node_id: &str, usage: &ProviderUsage) -> bool {
        let amounts = [
            (Dimension::Tokens, usage.total_tokens() as f64),
            (Dimension::Cost, usage.cost_estimate_usd.unwrap_or(0.0)),
        ];
        self.consume_budget(node_id, &amounts)
    }

    /// A `node.retried` of `node_id` was emitted: one retry is consumed. `false` when that
    /// failed the run (the caller must then leave the node as it is).
    pub(super) fn budget_retried(&mut self, node_id: &str) -> bool {
        self.consume_budget(node_id, &[(Dimension::Retries, 1.0)])
    }

    /// An `agent.toolCalled` of `node_id` was emitted: one tool call is consumed. Call it
    /// right after emitting the event. `false` when that failed the run (`onExhaustion:
    /// fail`): the caller must then stop touching the node (it was cancelled with the run).
    /// Under `interrupt` it is always `true`; the node's next model-call attempt is gated.
    pub(super) fn budget_tool_called(&mut self, node_id: &str) -> bool {
        self.consume_budget(node_id, &[(Dimension::ToolCalls, 1.0)])
    }

    /// Under `onExhaustion: interrupt`, whether one more tool call of `node_id` would exceed
    /// `maxToolCalls`: then the node was suspended on the budget gate (`budget.exhausted`
    /// first) and the caller holds the call until [`Transition::budget_resumed`].
    pub(super) fn budget_tool_call_gated(&mut self, node_id: &str) -> bool {
        let Some(state) = self.state.ai.budget.as_mut() else { return false };
        if state.policy.on_exhaustion != OnExhaustion::Interrupt {
            return false;
        }
        let Some(limit) = state.policy.limits.get(Dimension::ToolCalls) else { return false };
        if state.consumed.get(Dimension::ToolCalls) + 1.0 <= limit {
            return false;
        }
        if let Some((event_type, payload)) = state.exhaust(Dimension::ToolCalls) {
            self.emit(event_type, Some(node_id), payload);
        }
        let Some(state) = self.state.ai.budget.as_ref() else { return false };
        let request = InterruptRequest {
            kind: InterruptKind::Approval,
            data: state.gate_data(Dimension::ToolCalls, node_id),
            resume_schema: Some(state.gate_resume_schema()),
            timeout_ms: None,
            profile: None,
        };
        self.suspend(node_id, request);
        true
    }

    /// Whether attempt `attempt` of the activity node `node_id` may go out now. When it may
    /// not, the node was failed (model policy), suspended on an exhaustion interrupt, or the
    /// run failed — the caller issues nothing.
    pub(super) fn budget_admits(&mut self, node_id: &str, attempt: u32) -> bool {
        let Some(state) = self.state.ai.budget.as_ref() else { return true };
        let model_call = self.workflow.activity(node_id).is_some_and(|activity| activity.kind.model_call());
        if model_call && attempt == 0 {
            let request = self.state.nodes.get(node_id).and_then(|node| node.activity.as_ref());
            let model = request.and_then(|progress| progress.request.get("model")).and_then(Value::as_str);
            if !state.policy.permits(model) {
                let mut error = RunError::new(
                    budget::MODEL_DENIED_CODE,
                    "the run's budget does not permit the model this call names",
                );
                error.details = Some(serde_json::json!({ "model": model }));
                self.fail_node(node_id, error);
                return false;
            }
        }
        let mut needed = Vec::with_capacity(4);
        if model_call {
            needed.extend([Dimension::Tokens, Dimension::Cost, Dimension::ToolCalls]);
        }
        if attempt > 0 {
            needed.push(Dimension::Retries);
        }
        let Some(dimension) = state.spent(&needed) else { return true };
        let on_exhaustion = state.policy.on_exhaustion;
        // Spent without a consumption that said so (e.g. `maxCostUsd: 0` before any call).
        if let Some((event_type, payload)) = self.state.ai.budget.as_mut().and_then(|state| state.exhaust(dimension)) {
            self.emit(event_type, Some(node_id), payload);
        }
        match on_exhaustion {
            OnExhaustion::Fail => self.fail_on_budget(dimension, node_id),
            OnExhaustion::Interrupt => {
                let Some(state) = self.state.ai.budget.as_ref() else { return false };
                let request = InterruptRequest {
                    kind: InterruptKind::Approval,
                    data: state.gate_data(dimension, node_id),
                    resume_schema: Some(state.gate_resume_schema()),
                    timeout_ms: None,
                    profile: None,
                };
                self.suspend(node_id, request);
            }
        }
        false
    }

    /// Whether `record` is an exhaustion interrupt of an activity node (its resolution is
    /// [`Transition::budget_resumed`]'s).
    pub(super) fn is_budget_gate(&self, record: &InterruptRecord) -> bool {
        budget::is_gate(&record.data) && self.workflow.activity(&record.node_id).is_some()
    }

    /// An exhaustion interrupt closed: a rejection fails the run; an acceptance adds its
    /// allowance, reserves again and lets the held attempt go out (if the budget now admits
    /// it).
    pub(super) fn budget_resumed(&mut self, record: &InterruptRecord, closing: Closing) {
        let node_id = record.node_id.as_str();
        let dimension = record.data["artifactData"]
            .get("dimension")
            .and_then(|value| serde_json::from_value::<Dimension>(value.clone()).ok())
            .unwrap_or(Dimension::Tokens);
        if closing.failure.is_some() {
            return self.fail_on_budget(dimension, node_id);
        }
        let Some(state) = self.state.ai.budget.as_mut() else { return };
        state.raise(&budget::allowance(&closing.resume_value));
        let (event_type, payload) = state.reserve();
        self.emit(event_type, Some(node_id), payload);
        let Some((activation, attempt)) = self
            .state
            .nodes
            .get(node_id)
            .and_then(|node| node.activity.as_ref().map(|progress| (node.activation, progress.attempt)))
        else {
            return;
        };
        if !self.budget_admits(node_id, attempt) || self.agent_gate_resumed(node_id) {
            return;
        }
        if attempt > 0 {
            // A first attempt's `node.started` was emitted before its gate; a retry's is not.
            let type_id = self.workflow.node(node_id).map(|node| node.type_id.clone()).unwrap_or_default();
            self.emit_node_started(node_id, &type_id, attempt);
        }
        let node = self.node_mut(node_id);
        node.status = NodeStatus::Executing;
        node.wake_at = None;
        let due_at = self.now;
        self.effects.push(Effect::Execute { node_id: node_id.to_owned(), activation, attempt, due_at });
    }
}
