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
use crate::model::Workflow;
use crate::nodes::subworkflow::SubWorkflowConfig;
use crate::orchestrator::dispatch::{DispatchConfig, FanOut};
use crate::orchestrator::{
    self, Decided, Decision, DecisionContext, DecisionSource, OrchestratorState, ScriptedSource,
};
use crate::run::{DispatchProgress, EdgeStatus, NodeStatus, RunError, RunState, RunStatus};

/// The `typeId` of the dispatch node.
pub const DISPATCH_TYPE_ID: &str = "core.dispatch";
/// Most workers one `next-worker` decision may name (`dispatch.maxFanOut`).
pub const MAX_FAN_OUT: usize = 64;

/// The latest decision, when `node` is a dispatch node acting on it.
fn acted_on<'a>(state: &'a RunState, workflow: &Workflow, node_id: &str) -> Option<&'a Decided> {
    let is_dispatch = workflow.node(node_id).is_some_and(|node| node.type_id == DISPATCH_TYPE_ID);
    state.orchestrator.as_ref().and_then(|o| o.latest.as_ref()).filter(|_| is_dispatch)
}

/// The values a new child run of `parent`'s node gets over its own defaults: a
/// `core.subWorkflow`'s `inputMapping`, or for `core.dispatch` the worker's effective input
/// mapping overlaid by its `nextWorkerInputs` item. An unset parent variable maps to nothing
/// (the child keeps its default; never `null`).
pub fn child_inputs(workflow: &Workflow, parent: &RunState, node_id: &str) -> Map<String, Value> {
    let mut inputs = Map::new();
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

impl Transition<'_> {
    /// The causation of an event `node_id` emits: the decision a dispatch node acts on.
    pub(super) fn causation_of(&self, node_id: &str) -> Option<u64> {
        acted_on(&self.state, self.workflow, node_id).map(|decided| decided.sequence)
    }

    /// A supervisor tick: one decision from its source, recorded, then the node completes.
    pub(super) fn decide(&mut self, node_id: &str) {
        let Some(definition) = self.workflow.node(node_id).cloned() else { return };
        let agent_id = orchestrator::agent_id(&definition.config, definition.agent.as_ref());
        let prior = self.state.orchestrator.as_ref().map_or(0, |o| o.decisions);
        if let Some(existing) = self.state.orchestrator.as_ref().filter(|o| o.agent_id != agent_id) {
            let error = RunError::new(
                "validation_error",
                format!("decision from agent `{agent_id}`; this run's orchestrator is `{}`", existing.agent_id),
            );
            return self.fail_node(node_id, error);
        }
        let context = DecisionContext {
            config: &definition.config,
            prior_decisions: prior,
            mocks_allowed: self.state.mocks_allowed,
        };
        let decision = match ScriptedSource.decide(&context) {
            Ok(decision) => decision,
            Err(error) => return self.fail_node(node_id, error),
        };
        let sequence = self.state.next_sequence;
        let payload = json!({ "agentId": agent_id, "decision": decision.to_value(), "iteration": prior + 1 });
        self.emit(types::RUN_ORCHESTRATOR_DECIDED, Some(node_id), payload);
        let kind = decision.kind();
        let dispatched = self.state.orchestrator.as_ref().map_or(0, |o| o.dispatched);
        self.state.orchestrator = Some(OrchestratorState {
            agent_id,
            decisions: prior + 1,
            latest: Some(Decided { sequence, node_id: node_id.to_owned(), decision, at: self.now }),
            dispatched,
        });
        let mut outputs = Map::new();
        outputs.insert("decision".into(), json!(kind));
        self.complete_node(node_id, outputs, false);
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
            Decision::Terminate { reason, .. } => {
                let mut outputs = Map::new();
                outputs.insert("decision".into(), json!("terminate"));
                if let Some(reason) = reason {
                    outputs.insert("reason".into(), json!(reason));
                }
                self.complete_node(node_id, outputs, false);
            }
            Decision::AskUser { .. } => {
                let error =
                    RunError::new("unsupported_decision_kind", "ask-user decisions are not served by this host");
                self.fail_node(node_id, error);
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
                } else if next_worker_ids.len() > MAX_FAN_OUT {
                    Some(RunError::new("validation_error", format!("a decision names at most {MAX_FAN_OUT} workers")))
                } else {
                    None
                };
                if let Some(error) = refusal {
                    return self.fail_node(node_id, error);
                }
                let total = next_worker_ids.len();
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
            let payload =
                json!({ "kind": "dispatch-iterations", "limit": cap, "observed": cap + 1, "nodeId": node_id });
            self.emit(types::CAP_BREACHED, Some(node_id), payload);
            let error =
                RunError::new("dispatch_iterations_exceeded", format!("the run dispatched its cap of {cap} workers"));
            return self.fail_node(node_id, error);
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
                self.state.variables.insert(parent_var.clone(), value.clone());
            }
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
    pub(super) fn loop_back(&mut self, index: usize, outputs: &Map<String, Value>) {
        if outputs.get("decision").and_then(Value::as_str) == Some("terminate") {
            return;
        }
        let targets: Vec<usize> = (0..self.workflow.graph.ends.len())
            .filter(|&edge| self.workflow.graph.is_loop[edge] && self.workflow.graph.ends[edge].0 == index)
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
                    self.state.edges[edge] = EdgeStatus::Unresolved;
                    queue.push_back(self.workflow.graph.ends[edge].1);
                }
            }
            let target_id = self.workflow.definition.nodes[target].id.clone();
            self.schedule(&target_id);
        }
    }

    /// Sets run variables from outside the run (the test seam): one `variable.changed` each.
    pub(super) fn set_variables(&mut self, variables: Map<String, Value>) -> Verdict {
        for (name, next) in variables {
            let previous = self.state.variables.insert(name.clone(), next.clone());
            let mut payload = json!({ "name": name, "next": next });
            if let Some(previous) = previous {
                payload["previous"] = previous;
            }
            self.emit(types::VARIABLE_CHANGED, None, payload);
        }
        Verdict::Applied
    }
}
