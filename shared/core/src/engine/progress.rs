//! What the transition table's rows do: start a run, execute a node, propagate along edges
//! (conditions, joins, skips), complete, fail or cancel the run.

use std::collections::VecDeque;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::journal::Journal;
use super::orchestration::terminates_loop;
use super::{Effect, Outcome, Verdict, ENGINE_VERSION};
use crate::event::{types, RunEvent};
use crate::interrupt::InterruptState;
use crate::model::condition;
use crate::model::definition::{PortRef, PortValue};
use crate::model::graph::TriggerRule;
use crate::model::Workflow;
use crate::nodes::subworkflow::SubWorkflowConfig;
use crate::nodes::{self, NodeContext, NodeOutcome};
use crate::run::{Changes, ChildRun, EdgeStatus, NodeState, NodeStatus, RunError, RunState, RunStatus};
use crate::timefmt::Millis;

/// The cancel reason a cascade from a parent carries.
pub const PARENT_CANCELLED: &str = "parent-cancelled";

/// `waiting-approval`, `waiting-input` or `waiting-external`.
pub(super) fn is_waiting(status: RunStatus) -> bool {
    matches!(status, RunStatus::WaitingApproval | RunStatus::WaitingInput | RunStatus::WaitingExternal)
}

/// One application of an input: accumulates events and effects and changes the state in
/// place, journaling what it touches — the header as it was, and the prior value of each
/// node, edge and variable before its first change. A verdict other than
/// [`Verdict::Applied`] rolls the journal back; an applied one reports the touched records
/// as the commit's [`Changes`]. Nothing is copied per node of the workflow, so a step costs
/// the same at node 500 as at node 5.
pub(super) struct Transition<'a> {
    pub(super) workflow: &'a Workflow,
    pub(super) state: &'a mut RunState,
    journal: Journal,
    pub(super) now: Millis,
    events: Vec<RunEvent>,
    pub(super) effects: Vec<Effect>,
}

impl<'a> Transition<'a> {
    pub(super) fn new(workflow: &'a Workflow, state: &'a mut RunState, now: Millis) -> Self {
        let journal = Journal::new(state);
        Self { workflow, state, journal, now, events: Vec::new(), effects: Vec::new() }
    }

    /// The state of `node_id`, journaled for change (created idle when it has no record).
    pub(super) fn node_mut(&mut self, node_id: &str) -> &mut NodeState {
        if !self.journal.nodes.contains_key(node_id) {
            self.journal.nodes.insert(node_id.to_owned(), self.state.nodes.get(node_id).cloned());
        }
        self.state.nodes.entry(node_id.to_owned()).or_insert_with(idle_node)
    }

    /// Resolves `edge` as `status`.
    pub(super) fn set_edge(&mut self, edge: usize, status: EdgeStatus) {
        self.journal.edges.entry(edge).or_insert(self.state.edges[edge]);
        self.state.edges[edge] = status;
    }

    /// Sets the run variable `name`; returns its previous value.
    pub(super) fn set_variable(&mut self, name: &str, value: Value) -> Option<Value> {
        self.journal_variable(name);
        self.state.variables.insert(name.to_owned(), value)
    }

    /// Unsets the run variable `name`; returns its value.
    pub(super) fn remove_variable(&mut self, name: &str) -> Option<Value> {
        self.journal_variable(name);
        self.state.variables.remove(name)
    }

    fn journal_variable(&mut self, name: &str) {
        if !self.journal.variables.contains_key(name) {
            self.journal.variables.insert(name.to_owned(), self.state.variables.get(name).cloned());
        }
    }

    pub(super) fn status(&self) -> RunStatus {
        self.state.status
    }

    pub(super) fn finish(mut self, verdict: Verdict) -> Outcome {
        if verdict == Verdict::Applied {
            self.settle_status();
            self.settle_pause();
            let (before, after) = (self.journal.status_before(), self.state.status);
            if before != after {
                self.state.status_version = self.journal.version_before() + 1;
            }
            let waiting_changed = before != after && (is_waiting(before) || is_waiting(after));
            if waiting_changed && !after.is_terminal() && after != RunStatus::Cancelling {
                self.notify_parent();
            }
            #[cfg(debug_assertions)]
            self.journal.check(self.state);
            let changes = self.journal.into_changes();
            Outcome { verdict, events: self.events, effects: self.effects, changes }
        } else {
            self.journal.roll_back(self.state);
            Outcome { verdict, events: Vec::new(), effects: Vec::new(), changes: Changes::default() }
        }
    }

    pub(super) fn emit(&mut self, event_type: &str, node_id: Option<&str>, payload: Value) {
        let causation = node_id.and_then(|node_id| self.causation_of(node_id));
        self.push_event(event_type, node_id, payload, causation);
    }

    /// Emits an event caused by the event at sequence `cause`.
    pub(super) fn emit_caused(&mut self, event_type: &str, node_id: Option<&str>, payload: Value, cause: u64) {
        self.push_event(event_type, node_id, payload, Some(cause));
    }

    fn push_event(&mut self, event_type: &str, node_id: Option<&str>, payload: Value, causation: Option<u64>) {
        self.events.push(RunEvent {
            sequence: self.state.next_sequence,
            event_type: event_type.to_owned(),
            node_id: node_id.map(str::to_owned),
            payload,
            timestamp: self.now,
            causation,
        });
        self.state.next_sequence += 1;
    }

    fn elapsed_since_start(&self) -> u64 {
        self.now.saturating_sub(self.state.started_at.unwrap_or(self.state.created_at))
    }

    // ----- rows -------------------------------------------------------------------------

    pub(super) fn start(&mut self) -> Verdict {
        self.state.status = RunStatus::Running;
        self.state.started_at = Some(self.now);
        let payload = json!({
            "workflowId": self.state.workflow.id,
            "workflowVersion": self.state.workflow.version,
            "inputs": self.state.inputs,
            "transport": "rest",
            "engineVersion": ENGINE_VERSION,
            "owner": { "tenant": self.state.tenant },
            "tags": self.state.tags,
            "metadata": self.state.metadata.clone().unwrap_or_else(|| json!({})),
        });
        self.emit(types::RUN_STARTED, None, payload);
        let entry = self.workflow.definition.nodes[self.workflow.graph.entry].id.clone();
        self.schedule(&entry);
        if let Some(due_at) = self.state.deadline_timer() {
            self.effects.push(Effect::Deadline { due_at });
        }
        Verdict::Applied
    }

    pub(super) fn step(&mut self, node_id: &str, activation: u32) -> Verdict {
        let Some(node) = self.state.nodes.get(node_id) else { return Verdict::Stale };
        if node.status != NodeStatus::Scheduled || node.activation != activation {
            return Verdict::Stale;
        }
        let workflow = self.workflow;
        let Some(index) = workflow.graph.index_of(node_id) else { return Verdict::Stale };
        let definition = &workflow.definition.nodes[index];
        if self.state.node_executions >= self.state.limits.max_node_executions {
            let limit = self.state.limits.max_node_executions;
            self.emit(
                types::CAP_BREACHED,
                Some(node_id),
                json!({ "kind": "node-executions", "limit": limit, "observed": limit + 1, "nodeId": node_id }),
            );
            let error = RunError::new(
                "recursion_limit_exceeded",
                format!("the run exceeded its limit of {limit} node executions"),
            );
            self.fail_run(error, Some(node_id), "recursion-limit");
            return Verdict::Applied;
        }
        self.state.node_executions += 1;
        self.node_mut(node_id).started_at = Some(self.now);
        if workflow.activities[index].is_some() {
            match self.resolve_inputs(&definition.inputs) {
                Ok(inputs) if self.is_supervisor(node_id) => self.start_supervisor_model(definition, inputs),
                Ok(inputs) => self.start_activity(definition, inputs),
                Err(error) => {
                    self.emit_node_started(node_id, &definition.type_id, 0);
                    self.fail_node(node_id, error);
                }
            }
            return Verdict::Applied;
        }
        self.emit_node_started(node_id, &definition.type_id, 0);
        let kind = nodes::kind(&definition.type_id).map(|kind| (kind, nodes::requires::missing_requirement(kind)));
        let outcome = match kind {
            Some((_, Some(capability))) => NodeOutcome::Failed(nodes::requires::not_provided(node_id, capability)),
            Some((kind, None)) => match self.resolve_inputs(&definition.inputs) {
                Ok(inputs) => kind.execute(&NodeContext {
                    node_id,
                    config: &definition.config,
                    inputs,
                    variables: &self.state.variables,
                    now: self.now,
                    configurable: self.state.configurable.as_ref(),
                    mocks_allowed: self.state.mocks_allowed,
                }),
                Err(error) => NodeOutcome::Failed(error),
            },
            None => NodeOutcome::Failed(RunError::new(
                "unsupported_node_type",
                format!("this host does not run node type `{}`", definition.type_id),
            )),
        };
        match outcome {
            NodeOutcome::Completed(outputs) => self.complete_node(node_id, outputs, true),
            NodeOutcome::Failed(error) => self.fail_node(node_id, error),
            NodeOutcome::SleepUntil(due_at) => {
                let node = self.node_mut(node_id);
                node.status = NodeStatus::Waiting;
                node.wake_at = Some(due_at);
                let activation = node.activation;
                self.effects.push(Effect::Wake { node_id: node_id.to_owned(), activation, due_at });
            }
            NodeOutcome::SpawnChild { workflow_id } => self.spawn_child(node_id, workflow_id, None),
            NodeOutcome::Suspend(request) => self.suspend(node_id, request),
            NodeOutcome::Decide => self.decide(node_id),
            NodeOutcome::Dispatch => self.dispatch(node_id),
            NodeOutcome::ForEach => self.for_each(node_id),
            NodeOutcome::ScriptedAgent => self.agent_turn(node_id),
            NodeOutcome::RecordCost(attributes) => self.record_cost(node_id, &attributes),
        }
        Verdict::Applied
    }

    /// `node.started` for attempt `attempt` (zero-based; a pure node has one attempt, 0).
    pub(super) fn emit_node_started(&mut self, node_id: &str, type_id: &str, attempt: u32) {
        let payload = json!({ "nodeId": node_id, "typeId": type_id, "attempt": attempt });
        self.emit(types::NODE_STARTED, Some(node_id), payload);
    }

    /// Adds `field` to the payload of the `node.started` of `node_id` this transition emitted.
    pub(super) fn annotate_node_started(&mut self, node_id: &str, field: &str, value: Value) {
        let started = self
            .events
            .iter_mut()
            .rev()
            .find(|event| event.event_type == types::NODE_STARTED && event.node_id.as_deref() == Some(node_id));
        if let Some(Value::Object(payload)) = started.map(|event| &mut event.payload) {
            payload.insert(field.to_owned(), value);
        }
    }

    /// Starts a child run for `node_id`; `worker` distinguishes the workers of one dispatch.
    pub(super) fn spawn_child(&mut self, node_id: &str, workflow_id: String, worker: Option<usize>) {
        if !self.admit_children(node_id, 1) {
            return;
        }
        self.state.children_started += 1;
        let now = self.now;
        let run_id = self.state.run_id.clone();
        let node = self.node_mut(node_id);
        let activation = node.activation;
        let child_run_id = child_run_id(&run_id, node_id, activation, worker);
        node.status = NodeStatus::WaitingChild;
        node.child_run_id = Some(child_run_id.clone());
        node.child_workflow_id = Some(workflow_id.clone());
        node.child_status = Some(RunStatus::Pending);
        let payload = json!({ "childRunId": child_run_id, "childWorkflowId": workflow_id, "childStatus": "pending" });
        self.emit(types::NODE_DISPATCHED, Some(node_id), payload);
        self.state.child_runs.push(ChildRun {
            run_id: child_run_id.clone(),
            node_id: node_id.to_owned(),
            workflow_id: workflow_id.clone(),
            status: RunStatus::Pending,
        });
        self.effects.push(Effect::StartChild {
            node_id: node_id.to_owned(),
            activation,
            child_run_id,
            workflow_id,
            due_at: now,
        });
    }

    pub(super) fn child_finished(
        &mut self,
        node_id: &str,
        child_run_id: &str,
        status: RunStatus,
        variables: &Map<String, Value>,
        error: Option<RunError>,
    ) -> Verdict {
        let waiting = self.state.nodes.get(node_id).is_some_and(|node| {
            node.status == NodeStatus::WaitingChild && node.child_run_id.as_deref() == Some(child_run_id)
        });
        if !waiting || !status.is_terminal() {
            return Verdict::Stale;
        }
        if crate::run::parse_slot_key(node_id).is_some() {
            return self.slot_finished(node_id, child_run_id, status, variables, error);
        }
        self.note_child(child_run_id, status);
        if self.is_agent(node_id) {
            return self.agent_child_finished(node_id, child_run_id, status, variables, error);
        }
        if self.is_dispatch(node_id) {
            return self.dispatch_child_finished(node_id, child_run_id, status, variables, error);
        }
        let Some(config) = self.workflow.node(node_id).and_then(|node| SubWorkflowConfig::parse(&node.config).ok())
        else {
            return Verdict::Stale;
        };
        self.node_mut(node_id).child_status = Some(status);
        let mut outputs = Map::new();
        outputs.insert("childRunId".into(), json!(child_run_id));
        outputs.insert("childStatus".into(), json!(status.as_str()));
        if status == RunStatus::Completed {
            // Applied once: the node leaves WaitingChild here. A child variable that is not
            // set leaves the parent's variable as it is.
            for (parent_var, child_var) in &config.output_mapping {
                if let Some(value) = variables.get(child_var) {
                    self.set_variable(parent_var, value.clone());
                }
            }
            self.complete_node(node_id, outputs, false);
        } else if config.absorb_failure {
            self.complete_node(node_id, outputs, false);
        } else {
            // A refusal (unknown child workflow, nesting depth) keeps its own code; a child that
            // ran and ended badly arrives as `child_failed` (see `Services::child_outcome`).
            let mut failure = error
                .unwrap_or_else(|| RunError::new("child_failed", format!("the child run ended {}", status.as_str())));
            failure.details = Some(json!({ "childRunId": child_run_id, "childStatus": status.as_str() }));
            self.fail_node(node_id, failure);
        }
        Verdict::Applied
    }

    pub(super) fn wake(&mut self, node_id: &str, activation: u32) -> Verdict {
        match self.state.nodes.get(node_id) {
            Some(node) if node.status == NodeStatus::Suspended && node.activation == activation => {
                self.interrupt_timeout(node_id)
            }
            Some(node) if node.status == NodeStatus::Waiting && node.activation == activation => {
                if node.wake_at.is_some_and(|due| due > self.now) {
                    return Verdict::Later;
                }
                self.complete_node(node_id, Map::new(), true);
                Verdict::Applied
            }
            _ => Verdict::Stale,
        }
    }

    pub(super) fn deadline(&mut self) -> Verdict {
        let limit = self.state.limits.run_duration_ms;
        let elapsed = self.elapsed_since_start();
        if elapsed < limit {
            return Verdict::Later;
        }
        let observed = elapsed.max(limit + 1);
        self.emit(types::CAP_BREACHED, None, json!({ "kind": "run-duration", "limit": limit, "observed": observed }));
        let error = RunError::new("run_timeout", format!("the run exceeded its duration limit of {limit} ms"));
        self.fail_run(error, None, "run-timeout");
        Verdict::Applied
    }

    pub(super) fn delivery_exhausted(&mut self, task_id: &str) -> Verdict {
        let mut error = RunError::new(
            "step_delivery_exhausted",
            "a step of this run could not be processed within its allowed deliveries",
        );
        error.details = Some(json!({ "taskId": task_id }));
        self.fail_run(error, None, "delivery-exhausted");
        Verdict::Applied
    }

    pub(super) fn unstorable(&mut self, reason: &str) -> Verdict {
        let mut error = RunError::new(
            crate::blob::PAYLOAD_TOO_LARGE,
            "the run's state no longer fits its store, even with its large values stored apart",
        );
        error.details = Some(json!({ "reason": reason }));
        self.fail_run(error, None, "unstorable");
        Verdict::Applied
    }

    pub(super) fn has_step_in_flight(&self) -> bool {
        self.state.nodes.values().any(|node| node.status == NodeStatus::Scheduled)
    }

    pub(super) fn begin_cancel(&mut self, reason: Option<String>) -> Verdict {
        self.state.status = RunStatus::Cancelling;
        self.state.cancel_reason = reason;
        Verdict::Applied
    }

    pub(super) fn finish_cancel(&mut self) -> Verdict {
        let reason = self.state.cancel_reason.clone();
        self.cancel_now(reason)
    }

    pub(super) fn cancel_now(&mut self, reason: Option<String>) -> Verdict {
        let reason = reason.unwrap_or_else(|| "cancelled by request".to_owned());
        let cascade = reason == PARENT_CANCELLED;
        self.close_pending_interrupts(InterruptState::Cancelled { cascade });
        self.cancel_active_nodes(&reason);
        self.state.status = RunStatus::Cancelled;
        self.state.cancel_reason = Some(reason.clone());
        self.state.ended_at = Some(self.now);
        let mut payload = json!({ "reason": reason, "durationMs": self.elapsed_since_start() });
        if let Some(parent) = self.state.parent.as_ref().filter(|_| reason == PARENT_CANCELLED) {
            payload["parentRunId"] = json!(parent.run_id);
        }
        self.emit(types::RUN_CANCELLED, None, payload);
        self.notify_parent();
        Verdict::Applied
    }

    // ----- helpers ----------------------------------------------------------------------

    /// Records a child's status in the run's list of child runs.
    pub(super) fn note_child(&mut self, child_run_id: &str, status: RunStatus) {
        if let Some(child) = self.state.child_runs.iter_mut().find(|child| child.run_id == child_run_id) {
            child.status = status;
        }
    }

    pub(super) fn schedule(&mut self, node_id: &str) {
        let now = self.now;
        let node = self.node_mut(node_id);
        node.status = NodeStatus::Scheduled;
        node.activation += 1;
        let activation = node.activation;
        self.effects.push(Effect::Step { node_id: node_id.to_owned(), activation, due_at: now });
    }

    fn resolve_inputs(
        &self,
        ports: &std::collections::BTreeMap<String, PortValue>,
    ) -> Result<Map<String, Value>, RunError> {
        let mut resolved = Map::new();
        for (port, value) in ports {
            let value = match value {
                PortValue::Literal(value) | PortValue::Ref(PortRef::Static { value }) => Some(value.clone()),
                PortValue::Ref(PortRef::Variable { variable_name }) => self.state.variables.get(variable_name).cloned(),
                PortValue::Ref(PortRef::Connection { node_id, output_key }) => {
                    self.state.nodes.get(node_id).and_then(|node| node.outputs.get(output_key)).cloned()
                }
                PortValue::Ref(PortRef::Expression { .. }) => {
                    return Err(RunError::new("capability_required", "expression inputs are not supported"))
                }
            };
            if let Some(value) = value {
                resolved.insert(port.clone(), value);
            }
        }
        Ok(resolved)
    }

    /// Completes a node; `merge` copies its outputs into the run's variables.
    pub(super) fn complete_node(&mut self, node_id: &str, outputs: Map<String, Value>, merge: bool) {
        let Some(index) = self.workflow.graph.index_of(node_id) else { return };
        let mut resolutions = Vec::new();
        for &edge in &self.workflow.graph.outgoing[index] {
            let taken = match &self.workflow.definition.edges[edge].condition {
                None => Ok(true),
                Some(c) => {
                    let regex = self.workflow.edge_regexes.get(edge).and_then(Option::as_ref);
                    condition::evaluate(c, regex, &outputs, &self.state.variables)
                }
            };
            match taken {
                Ok(taken) => resolutions.push((edge, taken)),
                Err(error) => {
                    let error = RunError::new("invalid_edge_condition", error.0);
                    return self.fail_node(node_id, error);
                }
            }
        }
        let back_edges = match self.back_edges_taken(index, &outputs) {
            Ok(taken) => taken,
            // A loop-back past its limit, into a region still active, or with a condition that
            // cannot be judged fails the node.
            Err(error) => return self.fail_node(node_id, error),
        };
        let started = self.state.nodes.get(node_id).and_then(|n| n.started_at).unwrap_or(self.now);
        let payload = json!({ "nodeId": node_id, "outputs": outputs, "durationMs": self.now.saturating_sub(started) });
        self.emit(types::NODE_COMPLETED, Some(node_id), payload);
        if merge {
            for (key, value) in &outputs {
                self.set_variable(key, value.clone());
            }
        }
        let node = self.node_mut(node_id);
        node.status = NodeStatus::Completed;
        node.wake_at = None;
        node.outputs = outputs;
        // The loop wins: while a back-edge is taken the source's forward edges stay unresolved
        // (their conditions were judged above), so what follows it waits for the round that
        // exits the loop — a join fed from outside the loop too — and nothing is skipped meanwhile.
        if back_edges.is_empty() {
            let mut targets = VecDeque::new();
            for (edge, taken) in resolutions {
                self.set_edge(edge, if taken { EdgeStatus::Taken } else { EdgeStatus::NotTaken });
                targets.push_back(self.workflow.graph.ends[edge].1);
            }
            self.propagate(targets);
        }
        let terminate = self.state.nodes.get(node_id).is_some_and(|node| terminates_loop(&node.outputs));
        self.loop_back(index, terminate);
        self.follow_back_edges(back_edges);
        // A pending drain pause takes effect first; the completion waits for `:resume`.
        if !self.state.nodes.values().any(|n| n.is_active()) && self.state.pending_pause.is_none() {
            self.complete_run();
        }
    }

    /// Decides every target whose trigger rule can be judged from its incoming edges (see
    /// [`TriggerRule`]): scheduled when it holds (a join waits for its live predecessors),
    /// skipped when it cannot — and a skip resolves the skipped node's own edges as not taken.
    fn propagate(&mut self, mut targets: VecDeque<usize>) {
        let workflow = self.workflow;
        while let Some(target) = targets.pop_front() {
            let node_id = workflow.definition.nodes[target].id.as_str();
            let idle = self.state.nodes.get(node_id).is_none_or(|node| node.status == NodeStatus::Idle);
            if !idle {
                continue;
            }
            let (mut unresolved, mut taken, mut failed) = (0, 0, 0);
            for &edge in &self.workflow.graph.incoming[target] {
                match self.state.edges[edge] {
                    EdgeStatus::Unresolved => unresolved += 1,
                    EdgeStatus::Taken => taken += 1,
                    EdgeStatus::Failed => failed += 1,
                    EdgeStatus::NotTaken => {}
                }
            }
            let settled = unresolved == 0;
            let run = match self.workflow.graph.trigger[target] {
                TriggerRule::AllSuccess => settled.then_some(failed == 0 && taken > 0),
                TriggerRule::AnySuccess => (taken > 0).then_some(true).or(settled.then_some(false)),
                TriggerRule::AllComplete => settled.then_some(taken + failed > 0),
                TriggerRule::NoneFailed => (failed > 0).then_some(false).or(settled.then_some(true)),
                TriggerRule::AnyFailed => (failed > 0).then_some(true).or(settled.then_some(false)),
            };
            match run {
                None => continue,
                Some(true) => {
                    self.schedule(node_id);
                    continue;
                }
                Some(false) => {}
            }
            self.node_mut(node_id).status = NodeStatus::Skipped;
            self.emit(
                types::NODE_SKIPPED,
                Some(node_id),
                json!({ "nodeId": node_id, "reason": "no-incoming-edge-taken" }),
            );
            for &edge in &self.workflow.graph.outgoing[target] {
                self.set_edge(edge, EdgeStatus::NotTaken);
                targets.push_back(self.workflow.graph.ends[edge].1);
            }
        }
    }

    pub(super) fn complete_run(&mut self) {
        if self.state.status.is_terminal() {
            // Already ended (a node's failure in the same transition ended it): one terminal event.
            return;
        }
        let mut outputs = Map::new();
        for (index, node) in self.workflow.definition.nodes.iter().enumerate() {
            if !self.workflow.graph.outgoing[index].is_empty() {
                continue;
            }
            if let Some(state) = self.state.nodes.get(&node.id).filter(|s| s.status == NodeStatus::Completed) {
                outputs.extend(state.outputs.clone());
            }
        }
        self.state.status = RunStatus::Completed;
        self.state.ended_at = Some(self.now);
        self.state.outputs = outputs.clone();
        let payload = json!({ "outputs": outputs, "durationMs": self.elapsed_since_start() });
        self.emit(types::RUN_COMPLETED, None, payload);
        self.notify_parent();
    }

    /// A child run that ends tells its parent.
    fn notify_parent(&mut self) {
        if let Some(parent) = &self.state.parent {
            self.effects.push(Effect::NotifyParent {
                parent_run_id: parent.run_id.clone(),
                parent_node_id: parent.node_id.clone(),
                at_version: self.state.version,
                due_at: self.now,
            });
        }
    }

    pub(super) fn fail_node(&mut self, node_id: &str, error: RunError) {
        self.fail_node_after(node_id, error, 1, false);
    }

    /// Fails `node_id` after `attempts` attempts. When a target of one of its edges handles
    /// failures (`triggerRule` `any_failed` or `all_complete`) the failure takes that route:
    /// `variables[node_id].error = {code, message, retryable}`, its edges resolve as failed
    /// and the run goes on. Otherwise the run fails.
    pub(super) fn fail_node_after(&mut self, node_id: &str, error: RunError, attempts: u32, retryable: bool) {
        // A fan-out failing by another way than its join: no slot outlives it.
        if self.state.nodes.get(node_id).is_some_and(|node| node.fan_out.is_some()) {
            self.abort_fan_out(node_id);
        }
        let node = self.node_mut(node_id);
        node.status = NodeStatus::Failed;
        node.wake_at = None;
        node.activity = None;
        self.emit(
            types::NODE_FAILED,
            Some(node_id),
            json!({ "nodeId": node_id, "error": error, "attempts": attempts }),
        );
        let Some(index) = self.workflow.graph.index_of(node_id).filter(|&i| self.workflow.graph.failure_handled(i))
        else {
            return self.fail_run(error, Some(node_id), "run-failed");
        };
        let routed = json!({ "code": error.code, "message": error.message, "retryable": retryable });
        let mut variable = match self.remove_variable(node_id) {
            Some(Value::Object(fields)) => fields,
            _ => Map::new(),
        };
        variable.insert("error".into(), routed);
        self.set_variable(node_id, Value::Object(variable));
        let mut targets = VecDeque::new();
        for &edge in &self.workflow.graph.outgoing[index] {
            self.set_edge(edge, EdgeStatus::Failed);
            targets.push_back(self.workflow.graph.ends[edge].1);
        }
        self.propagate(targets);
        if !self.state.nodes.values().any(|n| n.is_active()) && self.state.pending_pause.is_none() {
            self.complete_run();
        }
    }

    pub(super) fn fail_run(&mut self, error: RunError, failed_node: Option<&str>, cancel_reason: &str) {
        self.close_pending_interrupts(InterruptState::Gone);
        self.cancel_active_nodes(cancel_reason);
        let mut payload = json!({ "error": error, "durationMs": self.elapsed_since_start() });
        if let Some(node_id) = failed_node {
            payload["failedNodeId"] = json!(node_id);
        }
        self.state.status = RunStatus::Failed;
        self.state.error = Some(error);
        self.state.ended_at = Some(self.now);
        self.emit(types::RUN_FAILED, None, payload);
        self.notify_parent();
    }

    fn cancel_active_nodes(&mut self, reason: &str) {
        let active: Vec<String> =
            self.state.nodes.iter().filter(|(_, node)| node.is_active()).map(|(id, _)| id.clone()).collect();
        let now = self.now;
        for node_id in active {
            let propagate = cancels_its_child(self.workflow, &node_id);
            let node = self.node_mut(&node_id);
            let child = (node.status == NodeStatus::WaitingChild).then(|| node.child_run_id.clone()).flatten();
            node.status = NodeStatus::Cancelled;
            node.wake_at = None;
            // A fan-out's slot is no node of the workflow: its child is cancelled, no event.
            if !super::fanout::is_fan_out_record(&node_id) {
                self.emit(types::NODE_CANCELLED, Some(&node_id), json!({ "nodeId": node_id, "reason": reason }));
            } else if child.is_some() {
                // The slot stays listed until the run is gone: with the status it ends with.
                self.node_mut(&node_id).child_status = Some(RunStatus::Cancelled);
            }
            if let Some(child_run_id) = child.filter(|_| propagate) {
                self.effects.push(Effect::CancelChild { child_run_id, reason: None, due_at: now });
            }
        }
    }
}

/// Whether a run of `workflow` cancels the child run its node `node_id` waits for when the
/// node is cancelled (the run is cancelled, fails or runs out of time): always, unless the
/// node is a `core.subWorkflow` with `propagateCancellation: false`.
pub fn cancels_its_child(workflow: &Workflow, node_id: &str) -> bool {
    workflow
        .node(node_id)
        .and_then(|node| SubWorkflowConfig::parse(&node.config).ok())
        .is_none_or(|config| config.propagate_cancellation)
}

/// The record of a node that had none: idle, never activated.
fn idle_node() -> NodeState {
    NodeState {
        status: NodeStatus::Idle,
        activation: 0,
        wake_at: None,
        started_at: None,
        outputs: Map::new(),
        child_run_id: None,
        child_workflow_id: None,
        child_status: None,
        dispatch: None,
        activity: None,
        fan_out: None,
        merge: None,
        error: None,
        loopbacks: 0,
    }
}

/// The id of the child that `source_run_id`'s node `node_id` started in the same place
/// (activation, worker) as `child_run_id` of `run_id`'s node: how a fork's or a rerun's
/// child finds the source's child it re-tells.
pub fn counterpart_child_id(
    run_id: &str,
    source_run_id: &str,
    node_id: &str,
    activation: u32,
    child_run_id: &str,
) -> Option<String> {
    let index = (0..=super::MAX_WIDTH as usize)
        .map(Some)
        .chain([None])
        .find(|index| self::child_run_id(run_id, node_id, activation, *index) == child_run_id)?;
    Some(self::child_run_id(source_run_id, node_id, activation, index))
}

/// The deterministic id of the child a run's node starts: per run, node and activation, and
/// per item index for the children of a fan-out or a per-worker dispatch.
pub fn child_run_id(run_id: &str, node_id: &str, activation: u32, index: Option<usize>) -> String {
    let seed = match index {
        None => format!("{run_id}\n{node_id}\n{activation}"),
        Some(index) => format!("{run_id}\n{node_id}\n{activation}\n{index}"),
    };
    format!("run-{}", &hex::encode(Sha256::digest(seed.as_bytes()))[..32])
}
