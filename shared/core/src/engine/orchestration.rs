//! The supervisor ⇄ dispatch loop, per tick and driven by the log: a supervisor step records
//! one `runOrchestrator.decided` (decision k = the k-th of its source) and completes; the
//! dispatch step acts on the latest recorded decision — `terminate` completes it, `next-worker`
//! runs the named child workflows one after the other through the child-run machinery,
//! applying RFC 0022 mappings and RFC 0126 per-item inputs — and when it completes after
//! workers, the loop edge back to the supervisor starts the next tick.
//!
//! Every event a dispatch node emits carries `causation` = the decided event it acts on.

use std::collections::VecDeque;

use serde_json::{json, Map, Value};

use super::progress::Transition;
use super::Verdict;
use crate::capabilities::Toggle;
use crate::event::types;
use crate::interrupt::request::InterruptRequest;
use crate::interrupt::{InterruptKind, InterruptRecord, Refusal};
use crate::model::Workflow;
use crate::nodes::subworkflow::SubWorkflowConfig;
use crate::orchestrator::dispatch::{DispatchConfig, FanOut};
use crate::orchestrator::{
    self, Decided, Decision, DecisionContext, DecisionSource, OrchestratorState, Proposal, ScriptedSource,
};
use crate::run::{DispatchProgress, EdgeStatus, NodeStatus, RunError, RunState, RunStatus};

/// The `typeId` of the dispatch node.
pub const DISPATCH_TYPE_ID: &str = "core.dispatch";
/// Most children of a parallel dispatch running at once (`dispatch.maxFanOut`).
pub const MAX_FAN_OUT: usize = super::fanout::MAX_WIDTH as usize;
/// CP-1: the agent's confidence below this holds its decision for ratification, unless the
/// run's `configurable.escalationThreshold` says otherwise.
pub const DEFAULT_ESCALATION_THRESHOLD: f64 = 0.7;
/// RFC 0039: the spec's confidence floor; `configurable.confidenceEscalationFloor` may only
/// raise it.
pub const CONFIDENCE_FLOOR: f64 = 0.5;
/// The question id of an `ask-user` clarification.
pub const ASK_USER_QUESTION: &str = "answer";
/// The variable an `ask-user` answer lands in.
pub const ASK_USER_VARIABLE: &str = "userAnswer";
/// The vendor event of an RFC 0039 escalation (`core.workflowChain.*` belongs to the
/// multi-agent execution model, which this host does not advertise).
pub const CONFIDENCE_ESCALATED: &str = "trellis.workflowChain.confidence-escalated";

/// Why a supervisor tick may not decide.
#[derive(Debug)]
pub(super) enum Refused {
    /// The node fails with this error.
    Failed(RunError),
    /// `iterationCap` (this many decisions) is reached.
    Cap(u64),
}

/// Appends to the orchestrator's history, keeping the latest [`orchestrator::model::MAX_HISTORY`].
pub(super) fn remember(history: &mut Vec<Value>, entry: Value) {
    history.push(entry);
    let excess = history.len().saturating_sub(orchestrator::model::MAX_HISTORY);
    history.drain(..excess);
}

/// The latest decision, when `node` is a dispatch node acting on it.
fn acted_on<'a>(state: &'a RunState, workflow: &Workflow, node_id: &str) -> Option<&'a Decided> {
    // The run's latest decision first: most runs have none, and then the node is not looked up.
    let latest = state.orchestrator.as_ref().and_then(|o| o.latest.as_ref())?;
    workflow.node(node_id).is_some_and(|node| node.type_id == DISPATCH_TYPE_ID).then_some(latest)
}

/// Whether a completed node's outputs end its loop: a dispatch that acted on `terminate`.
pub(super) fn terminates_loop(outputs: &Map<String, Value>) -> bool {
    outputs.get("decision").and_then(Value::as_str) == Some("terminate")
}

/// The decision a CP-1 resume value ratifies: the decision itself, `{decision}`, or
/// `{action: "accept"}` for the held decision as proposed.
pub(super) fn ratified(record: &InterruptRecord, value: &Value) -> Result<Decision, Refusal> {
    let candidate = if value.get("kind").is_some() {
        value
    } else if let Some(decision) = value.get("decision") {
        decision
    } else if value.get("action").and_then(Value::as_str) == Some("accept") {
        &record.data["decision"]
    } else {
        return Err(Refusal::invalid(
            "resume a held decision with the ratified decision, `{decision}`, or `{action: \"accept\"}`",
            json!({ "expected": "OrchestratorDecision" }),
        ));
    };
    Decision::parse(candidate)
        .map_err(|problem| Refusal::invalid(problem, json!({ "expected": "OrchestratorDecision" })))
}

/// The values a new child run of `parent`'s node gets over its own defaults: a
/// `core.subWorkflow`'s `inputMapping`, or for `core.dispatch` the worker's effective input
/// mapping overlaid by its `nextWorkerInputs` item. An unset parent variable maps to nothing
/// (the child keeps its default; never `null`).
pub fn child_inputs(workflow: &Workflow, parent: &RunState, node_id: &str) -> Map<String, Value> {
    let mut inputs = Map::new();
    if let Some((fan_out_node, index)) = crate::run::parse_slot_key(node_id) {
        return slot_inputs(workflow, parent, fan_out_node, index);
    }
    let Some(node) = workflow.node(node_id) else { return inputs };
    let project = |inputs: &mut Map<String, Value>, mapping: &[(String, String)]| {
        for (child_var, parent_var) in mapping {
            if let Some(value) = parent.variables.get(parent_var) {
                inputs.insert(child_var.clone(), value.clone());
            }
        }
    };
    if node.type_id == DISPATCH_TYPE_ID {
        let (Ok(config), Some(decided), Some(progress)) = (
            DispatchConfig::parse(&node.config),
            acted_on(parent, workflow, node_id),
            parent.nodes.get(node_id).and_then(|state| state.dispatch.as_ref()),
        ) else {
            return inputs;
        };
        if let Decision::NextWorker { next_worker_ids, next_worker_inputs, .. } = &decided.decision {
            if let Some(worker) = next_worker_ids.get(progress.index) {
                project(&mut inputs, config.input_for(worker));
            }
            let item = next_worker_inputs.as_ref().and_then(|items| items.get(progress.index));
            for (key, value) in item.into_iter().flatten() {
                inputs.insert(key.clone(), value.clone());
            }
        }
    } else if let Ok(config) = SubWorkflowConfig::parse(&node.config) {
        project(&mut inputs, &config.input_mapping);
    }
    inputs
}

/// The inputs of slot `index` of `node_id`'s parallel fan-out: a dispatch worker's
/// effective input mapping overlaid by its `nextWorkerInputs` item, or a loop item's inputs.
fn slot_inputs(workflow: &Workflow, parent: &RunState, node_id: &str, index: u32) -> Map<String, Value> {
    let mut inputs = Map::new();
    let Some(node) = workflow.node(node_id) else { return inputs };
    if node.type_id != DISPATCH_TYPE_ID {
        return crate::nodes::for_each::ForEachConfig::parse(&node.config)
            .map(|config| super::fanout::loop_item_inputs(&config, &node.config, parent, node_id, index))
            .unwrap_or_default();
    }
    let (Ok(config), Some(decided)) = (DispatchConfig::parse(&node.config), acted_on(parent, workflow, node_id)) else {
        return inputs;
    };
    // Only the decision the fan-out acts on names this slot's worker: a later one gives it
    // nothing (the engine fails the node with `decision_superseded` on its next transition).
    let acting = parent.nodes.get(node_id).and_then(|state| state.fan_out.as_ref()).and_then(|p| p.decision);
    if acting != Some(decided.sequence) {
        return inputs;
    }
    if let Decision::NextWorker { next_worker_ids, next_worker_inputs, .. } = &decided.decision {
        if let Some(worker) = next_worker_ids.get(index as usize) {
            for (child_var, parent_var) in config.input_for(worker) {
                if let Some(value) = parent.variables.get(parent_var) {
                    inputs.insert(child_var.clone(), value.clone());
                }
            }
        }
        let item = next_worker_inputs.as_ref().and_then(|items| items.get(index as usize));
        for (key, value) in item.into_iter().flatten() {
            inputs.insert(key.clone(), value.clone());
        }
    }
    inputs
}

impl Transition<'_> {
    /// The causation of an event `node_id` emits: the decision a dispatch node acts on.
    pub(super) fn causation_of(&self, node_id: &str) -> Option<u64> {
        acted_on(self.state, self.workflow, node_id).map(|decided| decided.sequence)
    }

    /// A supervisor tick: one decision from its source. Held for ratification when the
    /// agent's own confidence is below the run's escalation threshold (CP-1); otherwise
    /// recorded, and escalated for approval when the decision's stated confidence is below
    /// the floor (RFC 0039); otherwise the node completes and dispatch acts on it.
    pub(super) fn decide(&mut self, node_id: &str) {
        let Some(definition) = self.workflow.node(node_id).cloned() else { return };
        let Some(agent_id) = self.admit_decision(node_id, &definition.config, definition.agent.as_ref()) else {
            return;
        };
        if orchestrator::model::routed(&definition.config) {
            // A model route on a host that registered no model-backed source.
            let error = RunError::new(
                "decision_source_unavailable",
                "this host has no model-backed decision source registered for core.orchestrator.supervisor",
            );
            return self.fail_node(node_id, error);
        }
        let context = DecisionContext {
            config: &definition.config,
            prior_decisions: self.state.orchestrator.as_ref().map_or(0, |o| o.decisions),
            mocks_allowed: self.state.mocks_allowed,
            variables: &self.state.variables,
        };
        match ScriptedSource.decide(&context) {
            Ok(proposal) => self.propose(node_id, &agent_id, proposal),
            Err(error) => self.fail_node(node_id, error),
        }
    }

    /// The checks before a supervisor tick asks its source: the run's orchestrator is this
    /// agent, and `iterationCap` is not reached. Returns the agent id; when refused, the node
    /// has failed.
    pub(super) fn admit_decision(
        &mut self,
        node_id: &str,
        config: &Map<String, Value>,
        agent: Option<&Value>,
    ) -> Option<String> {
        match self.admission(config, agent) {
            Ok(agent_id) => Some(agent_id),
            Err(refused) => {
                self.refuse_decision(node_id, refused);
                None
            }
        }
    }

    /// [`Self::admit_decision`]'s checks, without acting on them.
    pub(super) fn admission(&self, config: &Map<String, Value>, agent: Option<&Value>) -> Result<String, Refused> {
        let agent_id = orchestrator::agent_id(config, agent);
        let prior = self.state.orchestrator.as_ref().map_or(0, |o| o.decisions);
        if let Some(existing) = self.state.orchestrator.as_ref().filter(|o| o.agent_id != agent_id) {
            return Err(Refused::Failed(RunError::new(
                "validation_error",
                format!("decision from agent `{agent_id}`; this run's orchestrator is `{}`", existing.agent_id),
            )));
        }
        match config.get("iterationCap").and_then(Value::as_u64) {
            Some(cap) if u64::from(prior) >= cap => Err(Refused::Cap(cap)),
            _ => Ok(agent_id),
        }
    }

    /// Fails the supervisor as `refused` says.
    pub(super) fn refuse_decision(&mut self, node_id: &str, refused: Refused) {
        match refused {
            Refused::Failed(error) => self.fail_node(node_id, error),
            Refused::Cap(cap) => self.breach_loop_cap(node_id, cap, "orchestrator-iterations"),
        }
    }

    /// A source's proposal, whatever the source: held (CP-1), recorded and escalated (RFC
    /// 0039), or recorded and the node completes.
    pub(super) fn propose(&mut self, node_id: &str, agent_id: &str, proposal: Proposal) {
        let threshold = self.configured("escalationThreshold").unwrap_or(DEFAULT_ESCALATION_THRESHOLD);
        if let Some(observed) = proposal.confidence.filter(|c| c.is_finite() && *c < threshold) {
            let data = json!({ "agentId": agent_id, "threshold": threshold, "observed": observed,
                               "decision": proposal.decision.to_value() });
            let request = InterruptRequest {
                kind: InterruptKind::LowConfidence,
                data,
                resume_schema: None,
                timeout_ms: None,
                profile: None,
            };
            return self.suspend(node_id, request);
        }
        let decided = self.record_decision(node_id, agent_id, proposal.decision.clone());
        let floor = self.configured("confidenceEscalationFloor").unwrap_or(CONFIDENCE_FLOOR).max(CONFIDENCE_FLOOR);
        if let Some(confidence) = proposal.decision.confidence().filter(|c| c.is_finite() && *c < floor) {
            return self.escalate(node_id, decided, &proposal.decision, confidence, floor);
        }
        let mut outputs = Map::new();
        outputs.insert("decision".into(), json!(proposal.decision.kind()));
        self.complete_node(node_id, outputs, false);
    }

    /// A number from the run's `configurable`.
    pub(super) fn configured(&self, key: &str) -> Option<f64> {
        self.state.configurable.as_ref().and_then(|c| c.get(key)).and_then(Value::as_f64)
    }

    /// Appends `runOrchestrator.decided` and makes it the decision dispatch acts on; returns
    /// its sequence.
    pub(super) fn record_decision(&mut self, node_id: &str, agent_id: &str, decision: Decision) -> u64 {
        let prior = self.state.orchestrator.as_ref().map_or(0, |o| o.decisions);
        let sequence = self.state.next_sequence;
        // `iteration` belongs to the execution model's version 5, which is not advertised: the
        // payload is exactly `{agentId, decision}`.
        let payload = json!({ "agentId": agent_id, "decision": decision.to_value() });
        self.emit(types::RUN_ORCHESTRATOR_DECIDED, Some(node_id), payload);
        let (dispatched, mut history) =
            self.state.orchestrator.take().map_or((0, Vec::new()), |o| (o.dispatched, o.history));
        remember(&mut history, json!({ "decision": decision.to_value() }));
        self.state.orchestrator = Some(OrchestratorState {
            agent_id: agent_id.to_owned(),
            decisions: prior + 1,
            latest: Some(Decided { sequence, node_id: node_id.to_owned(), decision, at: self.now }),
            dispatched,
            history,
        });
        sequence
    }

    /// RFC 0039: a recorded decision below the confidence floor is not executed silently —
    /// `trellis.workflowChain.confidence-escalated` (caused by the decision), then an approval
    /// interrupt on the supervisor; nothing is dispatched until it is accepted.
    fn escalate(&mut self, node_id: &str, decided: u64, decision: &Decision, confidence: f64, floor: f64) {
        let mut payload = json!({
            "confidence": confidence,
            "floor": floor,
            "escalationKind": "escalate",
            "parentRunId": self.state.run_id,
            "originalDecision": decision.to_value(),
        });
        if let Decision::NextWorker { next_worker_ids, .. } = decision {
            payload["workerId"] = json!(next_worker_ids[0]);
        }
        self.emit_caused(CONFIDENCE_ESCALATED, Some(node_id), payload, decided);
        let gate = json!({
            "title": "Confirm a low-confidence supervisor decision",
            "description": format!("The supervisor's decision states confidence {confidence}, below the floor {floor}."),
            "artifactId": format!("{}:{decided}", self.state.run_id),
            "artifactType": "orchestrator-decision",
            "artifactData": decision.to_value(),
            "actions": ["accept", "reject"],
        });
        match crate::interrupt::request::approval_gate(node_id, gate.as_object().expect("object")) {
            Ok(request) => self.suspend(node_id, request),
            Err(_) => self.fail_node(node_id, RunError::new("internal_error", "escalation gate")),
        }
    }

    /// `cap.breached` (`loop-iterations`, the RFC's own kind in `details.intent`), then the
    /// run fails with `loop_limit_exceeded`.
    pub(super) fn breach_loop_cap(&mut self, node_id: &str, cap: u64, intent: &str) {
        let payload = json!({ "kind": "loop-iterations", "limit": cap, "observed": cap + 1, "nodeId": node_id,
                              "details": { "intent": intent } });
        self.emit(types::CAP_BREACHED, Some(node_id), payload);
        let error = RunError::new("loop_limit_exceeded", format!("the {intent} cap of {cap} was reached"));
        self.fail_node(node_id, error);
    }

    /// A dispatch step: acts on the latest recorded decision.
    pub(super) fn dispatch(&mut self, node_id: &str) {
        let Some(definition) = self.workflow.node(node_id).cloned() else { return };
        let config = match DispatchConfig::parse(&definition.config) {
            Ok(config) => config,
            Err(message) => return self.fail_node(node_id, RunError::new("validation_error", message)),
        };
        let Some(decided) = self.state.orchestrator.as_ref().and_then(|o| o.latest.clone()) else {
            let error = RunError::new("no_pending_decision", "core.dispatch found no recorded supervisor decision");
            return self.fail_node(node_id, error);
        };
        match decided.decision {
            Decision::Terminate { reason, success_criteria, .. } => {
                // A terminate with any unmet criterion is a clean end, but a give-up, never
                // reported as goal satisfied.
                let goal_satisfied = success_criteria.iter().flatten().all(|criterion| criterion.met);
                let mut terminate = json!({ "goalSatisfied": goal_satisfied });
                if let Some(reason) = &reason {
                    terminate["reason"] = json!(reason);
                }
                if let Some(criteria) = &success_criteria {
                    terminate["successCriteria"] = json!(criteria);
                }
                let mut outputs = Map::new();
                outputs.insert("decision".into(), json!("terminate"));
                if let Some(reason) = reason {
                    outputs.insert("reason".into(), json!(reason));
                }
                outputs.insert("terminate".into(), terminate);
                self.complete_node(node_id, outputs, false);
            }
            Decision::AskUser { prompt } => {
                // A clarification with one question carrying the prompt; the answer lands in
                // the run's `userAnswer` variable and the loop goes back to the supervisor.
                let config = json!({ "questions": [{ "id": ASK_USER_QUESTION, "question": prompt }] });
                match crate::interrupt::request::clarification_gate(config.as_object().expect("object")) {
                    Ok(request) => self.suspend(node_id, request),
                    Err(_) => self.fail_node(node_id, RunError::new("validation_error", "ask-user needs a prompt")),
                }
            }

            Decision::NextWorker { next_worker_ids, next_worker_inputs, .. } => {
                let items = next_worker_inputs.as_ref().filter(|items| !items.is_empty());
                let refusal = if items.is_some() && self.disabled(Toggle::PerItemInput) {
                    Some(RunError::new(
                        "validation_error",
                        "nextWorkerInputs needs dispatch.perItemInput, which is switched off; no child was dispatched",
                    ))
                } else if items.is_some_and(|items| items.len() != next_worker_ids.len()) {
                    Some(RunError::new(
                        "validation_error",
                        "nextWorkerInputs must have one entry per nextWorkerIds entry; no child was dispatched",
                    ))
                } else if next_worker_ids.len() > 1 && config.fan_out == Some(FanOut::Reject) {
                    Some(RunError::new("fan_out_unsupported", "fanOutPolicy `reject` allows one worker per decision"))
                } else if next_worker_ids.len() > super::fanout::MAX_CHILDREN as usize {
                    let limit = super::fanout::MAX_CHILDREN;
                    Some(RunError::new("validation_error", format!("a decision names at most {limit} workers")))
                } else {
                    None
                };
                if let Some(error) = refusal {
                    return self.fail_node(node_id, error);
                }
                let total = next_worker_ids.len();
                // Every parallel decision joins, one worker too (its joinPolicy holds).
                if total >= 1 && config.fan_out == Some(FanOut::Parallel) {
                    return self.dispatch_parallel(node_id, &config, decided.sequence, total as u32);
                }
                self.node_mut(node_id).dispatch =
                    Some(DispatchProgress { decision: decided.sequence, index: 0, total });
                self.spawn_worker(node_id, &config, &next_worker_ids[0], 0);
            }
        }
    }

    fn disabled(&self, toggle: Toggle) -> bool {
        self.state.disabled_capabilities.iter().any(|name| name == toggle.name())
    }

    /// Starts worker `index` as a child run, within `iterationCap`.
    fn spawn_worker(&mut self, node_id: &str, config: &DispatchConfig, workflow_id: &str, index: usize) {
        let orchestrator = self.state.orchestrator.as_mut().expect("dispatch acts on a recorded decision");
        if let Some(cap) = config.iteration_cap.filter(|cap| u64::from(orchestrator.dispatched) >= *cap) {
            return self.breach_loop_cap(node_id, cap, "dispatch-iterations");
        }
        orchestrator.dispatched += 1;
        self.spawn_child(node_id, workflow_id.to_owned(), Some(index));
    }

    /// A dispatched worker ended: harvest a completed one and run the next, or fail the node.
    pub(super) fn dispatch_child_finished(
        &mut self,
        node_id: &str,
        child_run_id: &str,
        status: RunStatus,
        variables: &Map<String, Value>,
        error: Option<RunError>,
    ) -> Verdict {
        let progress = self.state.nodes.get(node_id).and_then(|node| node.dispatch.clone());
        let decided = self.state.orchestrator.as_ref().and_then(|o| o.latest.clone());
        let config = self.workflow.node(node_id).and_then(|node| DispatchConfig::parse(&node.config).ok());
        let (Some(progress), Some(decided), Some(config)) = (progress, decided, config) else { return Verdict::Stale };
        let Decision::NextWorker { next_worker_ids, .. } = &decided.decision else { return Verdict::Stale };
        let Some(worker) = next_worker_ids.get(progress.index) else { return Verdict::Stale };
        self.node_mut(node_id).child_status = Some(status);
        if status != RunStatus::Completed {
            // A failed or cancelled worker is never harvested; the dispatch fails (RFC 0007 §D4).
            let mut failure = error
                .unwrap_or_else(|| RunError::new("child_failed", format!("the worker run ended {}", status.as_str())));
            failure.details =
                Some(json!({ "childRunId": child_run_id, "childStatus": status.as_str(), "workerId": worker }));
            self.fail_node(node_id, failure);
            return Verdict::Applied;
        }
        for (parent_var, child_var) in config.output_for(worker) {
            if let Some(value) = variables.get(child_var) {
                self.set_variable(parent_var, value.clone());
            }
        }
        if let Some(orchestrator) = self.state.orchestrator.as_mut() {
            let outputs = Value::Object(variables.clone());
            let entry = orchestrator::model::worker_entry(worker, child_run_id, status.as_str(), &outputs);
            remember(&mut orchestrator.history, entry);
        }
        let next = progress.index + 1;
        if let Some(next_worker) = next_worker_ids.get(next) {
            self.node_mut(node_id).dispatch = Some(DispatchProgress { index: next, ..progress });
            self.spawn_worker(node_id, &config, &next_worker.clone(), next);
            return Verdict::Applied;
        }
        let mine: Vec<_> = self.state.child_runs.iter().filter(|child| child.node_id == node_id).collect();
        let children: Vec<Value> = mine[mine.len().saturating_sub(progress.total)..]
            .iter()
            .map(|child| json!({ "workflowId": child.workflow_id, "childRunId": child.run_id, "childStatus": child.status.as_str() }))
            .collect();
        let mut outputs = Map::new();
        outputs.insert("decision".into(), json!("next-worker"));
        outputs.insert("childRunId".into(), json!(child_run_id));
        outputs.insert("childStatus".into(), json!(status.as_str()));
        outputs.insert("children".into(), json!(children));
        self.complete_node(node_id, outputs, false);
        Verdict::Applied
    }

    /// Follows the loop edges out of a completed node (edges into a supervisor): the part of
    /// the graph from each target on is reset and the target scheduled again. A dispatch that
    /// acted on `terminate` does not loop.
    pub(super) fn loop_back(&mut self, index: usize, terminate: bool) {
        // Most workflows have no loop edge: then there is nothing to scan for.
        if terminate || !self.workflow.graph.is_loop.contains(&true) {
            return;
        }
        let targets: Vec<usize> = (0..self.workflow.graph.ends.len())
            .filter(|&edge| self.workflow.graph.is_supervisor_loop(edge) && self.workflow.graph.ends[edge].0 == index)
            .map(|edge| self.workflow.graph.ends[edge].1)
            .collect();
        for target in targets {
            let mut queue = VecDeque::from([target]);
            let mut seen = vec![false; self.workflow.definition.nodes.len()];
            while let Some(node) = queue.pop_front() {
                if std::mem::replace(&mut seen[node], true) {
                    continue;
                }
                let node_id = self.workflow.definition.nodes[node].id.clone();
                if self.state.nodes.get(&node_id).is_some_and(|state| !state.is_active()) {
                    let state = self.node_mut(&node_id);
                    state.status = NodeStatus::Idle;
                    state.dispatch = None;
                }
                for &edge in &self.workflow.graph.outgoing[node] {
                    self.set_edge(edge, EdgeStatus::Unresolved);
                    queue.push_back(self.workflow.graph.ends[edge].1);
                }
            }
            let target_id = self.workflow.definition.nodes[target].id.clone();
            self.schedule(&target_id);
        }
    }

    /// Whether `node_id` is a supervisor.
    pub(super) fn is_supervisor(&self, node_id: &str) -> bool {
        self.workflow.node(node_id).is_some_and(|node| node.type_id == crate::model::graph::SUPERVISOR_TYPE_ID)
    }

    /// Whether `node_id` is a dispatch node.
    pub(super) fn is_dispatch(&self, node_id: &str) -> bool {
        self.workflow.node(node_id).is_some_and(|node| node.type_id == DISPATCH_TYPE_ID)
    }

    /// A supervisor's interrupt resolved: a held (CP-1) decision is recorded as ratified —
    /// exactly one `runOrchestrator.decided` — and an escalated (RFC 0039) one, already
    /// recorded, is released; either way the node completes and dispatch acts on it.
    pub(super) fn supervisor_resumed(&mut self, record: &InterruptRecord, value: &Value) {
        let node_id = record.node_id.as_str();
        if record.kind == InterruptKind::LowConfidence {
            let Ok(decision) = ratified(record, value) else {
                return self.fail_node(node_id, RunError::new("validation_error", "the ratified decision is invalid"));
            };
            let agent_id = record.data["agentId"].as_str().unwrap_or("trellis.supervisor").to_owned();
            self.record_decision(node_id, &agent_id, decision);
        }
        let kind = self.state.orchestrator.as_ref().and_then(|o| o.latest.as_ref()).map(|d| d.decision.kind());
        let mut outputs = Map::new();
        outputs.insert("decision".into(), json!(kind));
        self.complete_node(node_id, outputs, false);
    }

    /// An `ask-user` clarification answered: the answer goes to the run's `userAnswer`
    /// variable, the dispatch node completes and the loop returns to the supervisor.
    pub(super) fn user_answered(&mut self, node_id: &str, value: &Value) {
        let answer = value["answers"][ASK_USER_QUESTION].clone();
        self.set_variable(ASK_USER_VARIABLE, answer.clone());
        let mut outputs = Map::new();
        outputs.insert("decision".into(), json!("ask-user"));
        outputs.insert("answer".into(), answer);
        self.complete_node(node_id, outputs, false);
    }

    /// Sets run variables from outside the run (the test seam): one `variable.changed` each.
    pub(super) fn set_variables(&mut self, variables: Map<String, Value>) -> Verdict {
        for (name, next) in variables {
            let previous = self.set_variable(&name, next.clone());
            let mut payload = json!({ "name": name, "next": next });
            if let Some(previous) = previous {
                payload["previous"] = previous;
            }
            self.emit(types::VARIABLE_CHANGED, None, payload);
        }
        Verdict::Applied
    }
}
