//! The activity rows of the transition table: start an activity node (render its request,
//! commit `node.started{attempt: 0}` and an `Execute` effect), take an attempt's outcome
//! (`node.completed`, `node.retried` + a backoff timer, or `node.failed`), start the next
//! attempt when the timer fires, and record progress. Every row checks that the input is
//! for the node's *current* activation and attempt; anything else is an ignored row (a
//! superseded attempt's late result changes nothing).
//!
//! Attempt numbering (OpenWOP §4.2): `node.started.attempt` is zero-based,
//! `node.retried.attempt` is the attempt about to run (≥ 1), `node.failed.attempts` counts
//! every attempt made.

use serde_json::{json, Map, Value};

use super::progress::Transition;
use super::{Effect, Verdict};
use crate::activity::{idempotency_key, ActivityCall, ActivityError, ActivityResult, Progress};
use crate::event::types;
use crate::model::definition::NodeDef;
use crate::model::Workflow;
use crate::nodes::NodeContext;
use crate::run::{ActivityProgress, NodeStatus, RunState, RunStatus};

/// The host event an activity heartbeat is recorded as (debug mode only).
pub const ACTIVITY_HEARTBEAT: &str = "trellis.activity.heartbeat";

/// What the worker hands the executor for attempt `attempt` of `node_id`, if that attempt is
/// the node's current one and it is executing in a live run; `None` for a superseded or
/// finished attempt, and for a run being cancelled (no call goes out after a cancel).
pub fn activity_call(
    workflow: &Workflow,
    run: &RunState,
    node_id: &str,
    activation: u32,
    attempt: u32,
    now: crate::timefmt::Millis,
) -> Option<ActivityCall> {
    let live = matches!(
        run.status,
        RunStatus::Running
            | RunStatus::Paused
            | RunStatus::WaitingApproval
            | RunStatus::WaitingInput
            | RunStatus::WaitingExternal
    );
    let node = run.nodes.get(node_id).filter(|_| live)?;
    let progress = node.activity.as_ref()?;
    if node.status != NodeStatus::Executing || node.activation != activation || progress.attempt != attempt {
        return None;
    }
    let compiled = workflow.activity(node_id)?;
    let mut timeout_ms = compiled.attempt_ms;
    if let (Some(total), Some(started)) = (compiled.timeouts.total_ms, node.started_at) {
        let left = started.saturating_add(total).saturating_sub(now);
        timeout_ms = timeout_ms.min(left.max(1));
    }
    Some(ActivityCall {
        run_id: run.run_id.clone(),
        node_id: node_id.to_owned(),
        type_id: compiled.kind.type_id().to_owned(),
        activation,
        attempt,
        idempotency_key: idempotency_key(&run.run_id, node_id, activation),
        request: progress.request.clone(),
        timeout_ms,
        tenant: run.tenant.clone(),
        credentials_ref: workflow.node(node_id).and_then(|node| node.credentials_ref.clone()),
    })
}

fn error_value(error: &ActivityError) -> Value {
    json!({ "code": error.code, "message": error.message, "retryable": error.retryable })
}

impl Transition<'_> {
    /// Starts the activity node `definition` (it was scheduled and passed its checks).
    pub(super) fn start_activity(&mut self, definition: &NodeDef, inputs: Map<String, Value>) {
        let node_id = definition.id.as_str();
        self.emit_node_started(node_id, &definition.type_id, 0);
        let Some(compiled) = self.workflow.activity(node_id) else { return };
        let prepared = compiled.kind.prepare(&NodeContext {
            node_id,
            config: &definition.config,
            inputs,
            variables: &self.state.variables,
            now: self.now,
            configurable: self.state.configurable.as_ref(),
            mocks_allowed: self.state.mocks_allowed,
        });
        match prepared {
            Ok(request) => {
                let activation = self.node_mut(node_id).activation;
                if compiled.cacheable {
                    // The rerun result cache's key, on the first attempt's `node.started`.
                    let state = &self.state;
                    let key = crate::cache::key(&state.tenant, &state.workflow, node_id, activation, &request);
                    self.annotate_node_started(node_id, crate::cache::KEY_FIELD, Value::String(key));
                }
                self.node_mut(node_id).activity = Some(ActivityProgress { attempt: 0, request, heartbeat: None });
                if !self.budget_admits(node_id, 0) {
                    return;
                }
                self.node_mut(node_id).status = NodeStatus::Executing;
                let due_at = self.now;
                self.effects.push(Effect::Execute { node_id: node_id.to_owned(), activation, attempt: 0, due_at });
            }
            Err(error) => self.fail_node_after(node_id, error, 1, false),
        }
    }

    fn is_current(&self, node_id: &str, activation: u32, attempt: u32, status: NodeStatus) -> bool {
        self.state.nodes.get(node_id).is_some_and(|node| {
            node.status == status
                && node.activation == activation
                && node.activity.as_ref().is_some_and(|progress| progress.attempt == attempt)
        })
    }

    /// An attempt's outcome.
    pub(super) fn activity_finished(
        &mut self,
        node_id: &str,
        activation: u32,
        attempt: u32,
        result: ActivityResult,
    ) -> Verdict {
        if !self.is_current(node_id, activation, attempt, NodeStatus::Executing) {
            return Verdict::Ignored("result of a superseded attempt");
        }
        let Some(compiled) = self.workflow.activity(node_id).cloned() else { return Verdict::Stale };
        match result {
            Ok(outputs) if self.is_supervisor(node_id) => {
                // A model-backed supervisor: the answer is a decision, not plain outputs.
                self.node_mut(node_id).activity = None;
                self.supervisor_answered(node_id, &outputs);
            }
            Ok(outputs) if self.is_agent(node_id) => return self.agent_step_done(node_id, outputs),
            Ok(outputs) => {
                self.node_mut(node_id).activity = None;
                self.set_variable(node_id, Value::Object(outputs.clone()));
                self.complete_node(node_id, outputs, false);
            }
            Err(error) if self.is_agent(node_id) && self.agent_step_failed(node_id, &error).is_some() => {}
            Err(error) => {
                // An agent's steps share the node's attempt numbers; its policy counts per step.
                let (next, attempt) = (attempt + 1, attempt - self.step_base(node_id));
                let started = self.state.nodes.get(node_id).and_then(|node| node.started_at).unwrap_or(self.now);
                let seed = format!("{}/{node_id}/{activation}", self.state.run_id);
                let delay = compiled.retry.delay_after_ms(attempt, &seed, &error);
                let within_total =
                    compiled.timeouts.total_ms.is_none_or(|total| self.now.saturating_add(delay) < started + total);
                let retries = compiled.retry.retries(attempt, &error);
                if retries && within_total {
                    self.schedule_retry(node_id, activation, next, delay, &error);
                } else if retries {
                    let total = compiled.timeouts.total_ms.unwrap_or_default();
                    let timeout = ActivityError::new(
                        "node_timeout",
                        format!("the node's attempts did not succeed within its totalMs of {total} ms"),
                        false,
                    )
                    .with_details(json!({ "totalMs": total, "lastError": error_value(&error) }));
                    self.fail_node_after(node_id, timeout.to_run_error(), attempt + 1, false);
                } else {
                    self.fail_node_after(node_id, error.to_run_error(), attempt + 1, error.retryable);
                }
            }
        }
        Verdict::Applied
    }

    fn schedule_retry(&mut self, node_id: &str, activation: u32, next: u32, delay: u64, error: &ActivityError) {
        let mut last_error = error_value(error);
        if let Some(details) = &error.details {
            last_error["details"] = details.clone();
        }
        self.emit(
            types::NODE_RETRIED,
            Some(node_id),
            json!({ "nodeId": node_id, "attempt": next, "delayMs": delay, "lastError": last_error }),
        );
        if !self.budget_retried(node_id) {
            return;
        }
        let due_at = self.now.saturating_add(delay);
        let node = self.node_mut(node_id);
        node.status = NodeStatus::Retrying;
        node.wake_at = Some(due_at);
        if let Some(progress) = node.activity.as_mut() {
            progress.attempt = next;
        }
        self.effects.push(Effect::Retry { node_id: node_id.to_owned(), activation, attempt: next, due_at });
    }

    /// A backoff timer fired: the next attempt starts.
    pub(super) fn retry_due(&mut self, node_id: &str, activation: u32, attempt: u32) -> Verdict {
        if !self.is_current(node_id, activation, attempt, NodeStatus::Retrying) {
            return Verdict::Stale;
        }
        if self.state.nodes.get(node_id).and_then(|node| node.wake_at).is_some_and(|due| due > self.now) {
            return Verdict::Later;
        }
        let Some(type_id) = self.workflow.node(node_id).map(|node| node.type_id.clone()) else { return Verdict::Stale };
        if self.is_agent(node_id) && self.agent_held_due(node_id) {
            return Verdict::Applied;
        }
        if self.workflow.activity(node_id).is_some() && !self.budget_admits(node_id, attempt) {
            return Verdict::Applied;
        }
        self.emit_node_started(node_id, &type_id, attempt);
        if self.workflow.activity(node_id).is_none() {
            // An external-event node retried after its worker failed (see `control`).
            return self.retry_callback(node_id, attempt);
        }
        let node = self.node_mut(node_id);
        node.status = NodeStatus::Executing;
        node.wake_at = None;
        let due_at = self.now;
        self.effects.push(Effect::Execute { node_id: node_id.to_owned(), activation, attempt, due_at });
        Verdict::Applied
    }

    /// Progress of the current attempt: a heartbeat's details are kept (and recorded as a
    /// debug event), a chunk becomes `output.chunk`.
    pub(super) fn activity_progress(
        &mut self,
        node_id: &str,
        activation: u32,
        attempt: u32,
        progress: Progress,
    ) -> Verdict {
        if !self.is_current(node_id, activation, attempt, NodeStatus::Executing) {
            return Verdict::Ignored("progress of a superseded attempt");
        }
        match progress {
            Progress::Heartbeat { details } => {
                if let Some(progress) = self.node_mut(node_id).activity.as_mut() {
                    progress.heartbeat = Some(details.clone());
                }
                let payload = json!({ "nodeId": node_id, "attempt": attempt, "details": details });
                self.emit(ACTIVITY_HEARTBEAT, Some(node_id), payload);
            }
            Progress::Chunk { data } => {
                self.emit(
                    types::OUTPUT_CHUNK,
                    Some(node_id),
                    json!({ "nodeId": node_id, "attempt": attempt, "chunk": data }),
                );
            }
            Progress::Usage(usage) => {
                self.emit(types::PROVIDER_USAGE, Some(node_id), usage.payload(node_id));
                self.state.ai.cost.get_or_insert_with(Default::default).add(&usage);
                self.budget_usage(node_id, &usage);
            }
            Progress::Replayed { source_run_id, source_sequence, cache_key } => {
                let payload = crate::cache::replayed_payload(node_id, &source_run_id, &cache_key, source_sequence);
                self.emit(crate::cache::NODE_REPLAYED, Some(node_id), payload);
            }
        }
        Verdict::Applied
    }
}
