//! The rows that suspend, resume and pause: interrupts (suspend, resolve, time out), operator
//! pause and resume, a child's status mirrored on its parent, and the derived run status.
//!
//! Event sequences (each line one commit):
//!
//! - suspend: `node.started`, `node.suspended`, `interrupt.requested`, then
//!   `approval.requested` (approval) or `clarification.requested` (clarification);
//! - a quorum vote that does not decide: `approval.received`;
//! - resolve: `approval.received` (approval) or `clarification.resolved` (clarification),
//!   `interrupt.resolved`, `node.resumed`, then `node.completed` — or, for a rejection,
//!   `node.failed` and `run.failed` (`interrupt_rejected`) — or, for `refine`, a new
//!   occurrence: `node.suspended`, `interrupt.requested`, `approval.requested`;
//! - timeout: `approval.received` (`action: timeout`, approvals only), `interrupt.resolved`
//!   (`outcome: rejected, reason: timeout`), `node.failed`, `run.failed` (`interrupt_timeout`);
//! - external-event callbacks (see [`crate::interrupt::callback`]): a heartbeat records
//!   `trellis.interrupt.heartbeat`; a worker's failure `interrupt.resolved` (`outcome:
//!   failed`), a missed heartbeat `interrupt.resolved` (`reason: heartbeat-timeout`), each
//!   then `node.retried` (a new occurrence after the backoff) or `node.failed`;
//! - `run.paused` / `run.resumed`.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::orchestration::ratified;
use super::progress::{is_waiting, Transition};
use super::{Effect, Verdict};
use crate::activity::policy::heartbeat_timeout;
use crate::activity::ActivityError;
use crate::event::types;
use crate::interrupt::callback::{self, WorkerReport};
use crate::interrupt::request::InterruptRequest;
use crate::interrupt::resolve::{judge, Closing};
use crate::interrupt::{InterruptKind, InterruptRecord, InterruptState, Refusal, Resolution, Resolver};
use crate::run::{ActivityProgress, DrainPolicy, NodeStatus, PauseState, RunError, RunStatus};

impl Transition<'_> {
    /// Suspends `node_id` on a new interrupt occurrence.
    pub(super) fn suspend(&mut self, node_id: &str, request: InterruptRequest) {
        self.suspend_attempt(node_id, request, 0);
    }

    /// Suspends `node_id` on a new interrupt occurrence for attempt `attempt` of the node. An
    /// external-event occurrence reads the node's heartbeat setting and, when the node or the
    /// run names a worker to notify, commits the notify effect with it.
    pub(super) fn suspend_attempt(&mut self, node_id: &str, request: InterruptRequest, attempt: u32) {
        let run_id = self.state.run_id.clone();
        let occurrence = 1 + self.state.interrupts.iter().filter(|record| record.node_id == node_id).count() as u32;
        let digest = Sha256::digest(format!("{run_id}\n{node_id}\n{occurrence}").as_bytes());
        let record = InterruptRecord {
            id: format!("int-{}", &hex::encode(digest)[..24]),
            node_id: node_id.to_owned(),
            occurrence,
            kind: request.kind,
            key: format!("{run_id}:{node_id}:{occurrence}"),
            data: request.data,
            resume_schema: request.resume_schema,
            timeout_ms: request.timeout_ms,
            profile: request.profile,
            requested_at: self.now,
            votes: Vec::new(),
            tally: None,
            attempt,
            heartbeat_ms: None,
            heartbeat_at: None,
            state: InterruptState::Pending,
        };
        let mut record = record;
        let mut notify = None;
        if record.kind == InterruptKind::ExternalEvent && !self.is_supervisor(node_id) {
            record.heartbeat_ms = callback::node_policy(self.workflow, node_id).heartbeat_ms;
            if callback::target(self.workflow, self.state, node_id).is_some() {
                notify = Some(Effect::NotifyWorker {
                    node_id: node_id.to_owned(),
                    interrupt_id: record.id.clone(),
                    due_at: self.now,
                });
            }
        }
        let deadline = record.next_timer();
        let node = self.node_mut(node_id);
        node.status = NodeStatus::Suspended;
        node.wake_at = deadline;
        let activation = node.activation;
        let mut suspended =
            json!({ "nodeId": node_id, "interruptId": record.id, "kind": record.kind.as_str(), "key": record.key });
        if record.kind == InterruptKind::LowConfidence {
            suspended["reason"] = json!("low-confidence");
            for field in ["agentId", "threshold", "observed"] {
                suspended[field] = record.data[field].clone();
            }
        }
        self.emit(types::NODE_SUSPENDED, Some(node_id), suspended);
        self.emit(types::INTERRUPT_REQUESTED, Some(node_id), record.payload());
        match record.kind {
            InterruptKind::Approval => {
                let data = &record.data;
                // The legacy event's action enum predates `edit-accept` and spells it `edit`.
                let actions: Vec<Value> = data["actions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|action| if action == "edit-accept" { json!("edit") } else { action.clone() })
                    .collect();
                let payload = json!({
                    "nodeId": node_id,
                    "interruptId": record.id,
                    "artifactId": data["artifactId"],
                    "artifactType": data["artifactType"],
                    "title": data["title"],
                    "actions": actions,
                    "approversList": data["approversList"],
                    "requiredApprovals": data["requiredApprovals"],
                });
                self.emit(types::APPROVAL_REQUESTED, Some(node_id), payload);
            }
            InterruptKind::Clarification => {
                let payload =
                    json!({ "nodeId": node_id, "interruptId": record.id, "questions": record.data["questions"] });
                self.emit(types::CLARIFICATION_REQUESTED, Some(node_id), payload);
            }
            _ => {}
        }
        if let Some(due_at) = deadline {
            self.effects.push(Effect::Wake { node_id: node_id.to_owned(), activation, due_at });
        }
        self.effects.extend(notify);
        self.state.interrupts.push(record);
    }

    /// Judges a resolution against the interrupt occurrence it names.
    pub(super) fn resolve(&mut self, resolution: Resolution) -> Verdict {
        let index = match self.find_occurrence(&resolution) {
            Ok(index) => index,
            Err(refusal) => return Verdict::Refused(refusal),
        };
        if let Err(refusal) = self.check_open(index, &resolution.resolver) {
            return Verdict::Refused(refusal);
        }
        let record = self.state.interrupts[index].clone();
        if record.kind == InterruptKind::ExternalEvent && !self.is_supervisor(&record.node_id) {
            if record.deadline().is_some_and(|deadline| deadline <= self.now) {
                return Verdict::Refused(Refusal::Expired);
            }
            match callback::worker_report(&resolution.value) {
                Some(Err(message)) => {
                    return Verdict::Refused(Refusal::invalid(message, json!({ "field": "resumeValue" })))
                }
                Some(Ok(WorkerReport::Heartbeat(details))) => return self.heartbeat(index, details),
                Some(Ok(WorkerReport::Failure(error))) => return self.worker_failed(index, &resolution, error),
                None => {}
            }
        }
        if self.is_supervisor(&record.node_id) && record.kind == InterruptKind::LowConfidence {
            if let Err(refusal) = ratified(&record, &resolution.value) {
                return Verdict::Refused(refusal);
            }
        }
        let prior = resolution.prior_vote.as_ref();
        let judgement = match judge(&record, &resolution.value, &resolution.resolver, prior, self.now) {
            Ok(judgement) => judgement,
            Err(refusal) => return Verdict::Refused(refusal),
        };
        let node_id = record.node_id.clone();
        if let Some(tally) = judgement.tally {
            self.state.interrupts[index].tally = Some(tally);
        }
        if let Some(vote) = &judgement.vote {
            let mut payload = json!({
                "nodeId": node_id,
                "interruptId": record.id,
                "action": vote.action,
                "decidedBy": vote.decided_by,
                "decidedAt": crate::timefmt::rfc3339(self.now),
                "voter": vote.voter,
            });
            for field in ["feedback", "comment", "editedArtifactData"] {
                if let Some(value) = resolution.value.get(field) {
                    payload[field] = value.clone();
                }
            }
            self.emit(types::APPROVAL_RECEIVED, Some(&node_id), payload);
        }
        if let Some(closing) = judgement.closing {
            self.close(index, closing, &resolution.resolver);
        }
        Verdict::Applied
    }

    /// The occurrence a resolution is about: the one a token names, or the node's pending
    /// (else latest) one.
    fn find_occurrence(&self, resolution: &Resolution) -> Result<usize, Refusal> {
        let interrupts = &self.state.interrupts;
        let at_node = |record: &InterruptRecord| record.node_id == resolution.node_id;
        let found = match &resolution.interrupt_id {
            Some(id) => interrupts.iter().position(|record| &record.id == id && at_node(record)),
            None => interrupts
                .iter()
                .position(|record| at_node(record) && record.is_pending())
                .or_else(|| interrupts.iter().rposition(at_node)),
        };
        found.ok_or(Refusal::NotFound)
    }

    /// Why the occurrence at `index` can no longer be resolved, if it cannot.
    fn check_open(&self, index: usize, resolver: &Resolver) -> Result<(), Refusal> {
        let record = &self.state.interrupts[index];
        let superseded = self.state.interrupts[index + 1..].iter().any(|later| later.node_id == record.node_id);
        let by_token = *resolver == Resolver::Token;
        match &record.state {
            InterruptState::Pending if self.state.status == RunStatus::Cancelling => {
                Err(if by_token { Refusal::Gone("run-cancelled") } else { Refusal::Cancelled })
            }
            InterruptState::Pending => Ok(()),
            InterruptState::Resolved { .. } if superseded => Err(Refusal::Gone("superseded")),
            InterruptState::Resolved { .. } => Err(Refusal::AlreadyResolved),
            InterruptState::TimedOut => Err(Refusal::Expired),
            InterruptState::Cancelled { cascade: true } => Err(Refusal::Gone("parent-cancelled")),
            InterruptState::Cancelled { cascade: false } if by_token => Err(Refusal::Gone("run-cancelled")),
            InterruptState::Cancelled { cascade: false } => Err(Refusal::Cancelled),
            InterruptState::Gone => Err(Refusal::Gone("run-ended")),
        }
    }

    /// Closes the occurrence at `index` and moves its node on.
    fn close(&mut self, index: usize, closing: Closing, resolver: &Resolver) {
        let record = self.state.interrupts[index].clone();
        let node_id = record.node_id.as_str();
        self.state.interrupts[index].state =
            InterruptState::Resolved { outcome: closing.outcome.clone(), at: self.now };
        if record.kind == InterruptKind::Clarification {
            let payload = json!({
                "nodeId": node_id,
                "interruptId": record.id,
                "answers": closing.resume_value["answers"],
                "answeredBy": resolver.identity(),
            });
            self.emit(types::CLARIFICATION_RESOLVED, Some(node_id), payload);
        }
        let resolved = json!({
            "nodeId": node_id,
            "interruptId": record.id,
            "kind": record.kind.as_str(),
            "resumeValue": closing.resume_value,
            "outcome": closing.outcome,
            "resolvedAt": crate::timefmt::rfc3339(self.now),
            "resolvedBy": closing.resolved_by,
        });
        self.emit(types::INTERRUPT_RESOLVED, Some(node_id), resolved);
        let resumed = json!({ "nodeId": node_id, "interruptId": record.id, "resumeValue": closing.resume_value });
        self.emit(types::NODE_RESUMED, Some(node_id), resumed);
        self.node_mut(node_id).wake_at = None;
        if self.is_budget_gate(&record) {
            return self.budget_resumed(&record, closing);
        }
        if self.is_supervisor(node_id) && closing.failure.is_none() && !closing.refine {
            return self.supervisor_resumed(&record, &closing.resume_value);
        }
        if self.is_agent(node_id) && record.kind == InterruptKind::LowConfidence && closing.failure.is_none() {
            return self.agent_accepted(node_id);
        }
        if self.is_dispatch(node_id) && record.kind == InterruptKind::Clarification {
            return self.user_answered(node_id, &closing.resume_value);
        }
        if closing.refine {
            let request = InterruptRequest {
                kind: record.kind,
                data: record.data.clone(),
                resume_schema: record.resume_schema.clone(),
                timeout_ms: record.timeout_ms,
                profile: record.profile.clone(),
            };
            self.suspend(node_id, request);
        } else if let Some(failure) = closing.failure {
            self.fail_node(node_id, failure);
        } else {
            self.complete_node(node_id, closing.outputs, false);
        }
    }

    /// A worker's heartbeat on the pending external-event occurrence at `index`: its silence
    /// is counted again from now (the node's timer moves), the details are recorded.
    fn heartbeat(&mut self, index: usize, details: Value) -> Verdict {
        let now = self.now;
        let record = &mut self.state.interrupts[index];
        record.heartbeat_at = Some(now);
        let (node_id, next_timer) = (record.node_id.clone(), record.next_timer());
        let payload =
            json!({ "nodeId": node_id, "interruptId": record.id, "attempt": record.attempt, "details": details });
        self.node_mut(&node_id).wake_at = next_timer;
        self.emit(callback::HEARTBEAT_EVENT, Some(&node_id), payload);
        Verdict::Applied
    }

    /// A worker's `{failure}` on the pending external-event occurrence at `index`: it closes,
    /// and the attempt fails under the node's retry policy.
    fn worker_failed(&mut self, index: usize, resolution: &Resolution, error: ActivityError) -> Verdict {
        let record = self.state.interrupts[index].clone();
        let node_id = record.node_id.as_str();
        self.state.interrupts[index].state = InterruptState::Resolved { outcome: "failed".into(), at: self.now };
        let resolved = json!({
            "nodeId": node_id,
            "interruptId": record.id,
            "kind": record.kind.as_str(),
            "resumeValue": resolution.value,
            "outcome": "failed",
            "resolvedAt": crate::timefmt::rfc3339(self.now),
            "resolvedBy": resolution.resolver.identity(),
        });
        self.emit(types::INTERRUPT_RESOLVED, Some(node_id), resolved);
        self.callback_attempt_failed(&record, error);
        Verdict::Applied
    }

    /// Attempt `record.attempt` of an external-event node failed (the worker reported a
    /// failure or missed a heartbeat): the next attempt after the retry policy's backoff (a
    /// new occurrence, its worker notified again), or the node fails (its failure routes).
    fn callback_attempt_failed(&mut self, record: &InterruptRecord, error: ActivityError) {
        let node_id = record.node_id.as_str();
        let retry = callback::node_policy(self.workflow, node_id).retry;
        if !retry.retries(record.attempt, &error) {
            return self.fail_node_after(node_id, error.to_run_error(), record.attempt + 1, error.retryable);
        }
        let activation = self.state.nodes.get(node_id).map_or(1, |node| node.activation);
        let next = record.attempt + 1;
        let delay = retry.delay_ms(record.attempt, &format!("{}/{node_id}/{activation}", self.state.run_id));
        let last_error = json!({ "code": error.code, "message": error.message, "retryable": error.retryable });
        let payload = json!({ "nodeId": node_id, "attempt": next, "delayMs": delay, "lastError": last_error });
        self.emit(types::NODE_RETRIED, Some(node_id), payload);
        if !self.budget_retried(node_id) {
            return;
        }
        let due_at = self.now.saturating_add(delay);
        let node = self.node_mut(node_id);
        node.status = NodeStatus::Retrying;
        node.wake_at = Some(due_at);
        node.activity = Some(ActivityProgress { attempt: next, request: Value::Null, heartbeat: None });
        self.effects.push(Effect::Retry { node_id: node_id.to_owned(), activation, attempt: next, due_at });
    }

    /// The backoff of an external-event node's failed attempt ran out: attempt `attempt`
    /// suspends on a new occurrence (the same request as the last one).
    pub(super) fn retry_callback(&mut self, node_id: &str, attempt: u32) -> Verdict {
        let Some(last) = self.state.interrupts.iter().rev().find(|record| record.node_id == node_id) else {
            return Verdict::Stale;
        };
        let request = InterruptRequest {
            kind: last.kind,
            data: last.data.clone(),
            resume_schema: last.resume_schema.clone(),
            timeout_ms: last.timeout_ms,
            profile: last.profile.clone(),
        };
        let node = self.node_mut(node_id);
        node.activity = None;
        node.wake_at = None;
        self.suspend_attempt(node_id, request, attempt);
        Verdict::Applied
    }

    /// A suspended node's timer: the pending occurrence times out (auto-reject), its worker
    /// missed a heartbeat (the attempt fails), or the timer is early (an earlier occurrence's,
    /// or set before a heartbeat) and waits for the current due time.
    pub(super) fn interrupt_timeout(&mut self, node_id: &str) -> Verdict {
        let Some(index) = self.state.interrupts.iter().position(|r| r.node_id == node_id && r.is_pending()) else {
            return Verdict::Stale;
        };
        let record = self.state.interrupts[index].clone();
        if record.deadline().is_none_or(|deadline| deadline > self.now) {
            let Some(heartbeat_ms) = record.heartbeat_due().filter(|due| *due <= self.now).and(record.heartbeat_ms)
            else {
                return Verdict::Later;
            };
            self.state.interrupts[index].state = InterruptState::TimedOut;
            let payload = json!({
                "nodeId": node_id,
                "interruptId": record.id,
                "kind": record.kind.as_str(),
                "outcome": "rejected",
                "reason": "heartbeat-timeout",
                "resolvedAt": crate::timefmt::rfc3339(self.now),
            });
            self.emit(types::INTERRUPT_RESOLVED, Some(node_id), payload);
            self.node_mut(node_id).wake_at = None;
            self.callback_attempt_failed(&record, heartbeat_timeout(heartbeat_ms));
            return Verdict::Applied;
        }
        self.state.interrupts[index].state = InterruptState::TimedOut;
        if record.kind == InterruptKind::Approval {
            let payload = json!({
                "nodeId": node_id,
                "interruptId": record.id,
                "action": "timeout",
                "decidedAt": crate::timefmt::rfc3339(self.now),
            });
            self.emit(types::APPROVAL_RECEIVED, Some(node_id), payload);
        }
        let payload = json!({
            "nodeId": node_id,
            "interruptId": record.id,
            "kind": record.kind.as_str(),
            "outcome": "rejected",
            "reason": "timeout",
            "resolvedAt": crate::timefmt::rfc3339(self.now),
        });
        self.emit(types::INTERRUPT_RESOLVED, Some(node_id), payload);
        let timeout = record.timeout_ms.unwrap_or_default();
        let error = RunError::new("interrupt_timeout", format!("the interrupt was not resolved within {timeout} ms"));
        self.fail_node(node_id, error);
        Verdict::Applied
    }

    /// Closes every pending occurrence (the run is cancelled or ends otherwise).
    pub(super) fn close_pending_interrupts(&mut self, state: InterruptState) {
        for record in self.state.interrupts.iter_mut().filter(|record| record.is_pending()) {
            record.state = state.clone();
        }
    }

    pub(super) fn pause(&mut self, reason: Option<String>, drain_policy: DrainPolicy) -> Verdict {
        self.state.status = RunStatus::Paused;
        self.state.pause = Some(PauseState { drain_policy, reason: reason.clone(), paused_at: self.now });
        let mut payload = json!({ "drainPolicy": drain_policy.as_str() });
        if let Some(reason) = reason {
            payload["reason"] = json!(reason);
        }
        self.emit(types::RUN_PAUSED, None, payload);
        Verdict::Applied
    }

    /// Whether the pause in force lets the current node finish.
    pub(super) fn drains_current_node(&self) -> bool {
        self.state.pause.as_ref().is_some_and(|pause| pause.drain_policy == DrainPolicy::DrainCurrentNode)
    }

    /// Resumes a paused run; the steps and timers held back while paused are issued again
    /// (their tasks have deterministic ids, so a copy still queued is harmless).
    pub(super) fn resume(&mut self, reason: Option<String>) -> Verdict {
        self.state.status = RunStatus::Running;
        self.state.pause = None;
        let mut payload = json!({});
        if let Some(reason) = reason {
            payload["reason"] = json!(reason);
        }
        self.emit(types::RUN_RESUMED, None, payload);
        let now = self.now;
        for (node_id, node) in &self.state.nodes {
            let effect = match node.status {
                NodeStatus::Scheduled => {
                    Effect::Step { node_id: node_id.clone(), activation: node.activation, due_at: now }
                }
                NodeStatus::Waiting => Effect::Wake {
                    node_id: node_id.clone(),
                    activation: node.activation,
                    due_at: node.wake_at.unwrap_or(now).max(now),
                },
                NodeStatus::Retrying => match &node.activity {
                    Some(progress) => Effect::Retry {
                        node_id: node_id.clone(),
                        activation: node.activation,
                        attempt: progress.attempt,
                        due_at: node.wake_at.unwrap_or(now).max(now),
                    },
                    None => continue,
                },
                _ => continue,
            };
            self.effects.push(effect);
        }
        // The fan-outs held by the pause start children again.
        self.refill_fan_outs();
        Verdict::Applied
    }

    /// A child that suspended or resumed: its node records the status; the run's status is
    /// re-derived when the transition finishes.
    pub(super) fn child_status(&mut self, node_id: &str, child_run_id: &str, status: RunStatus) -> Verdict {
        let waits = self.state.nodes.get(node_id).is_some_and(|node| {
            node.status == NodeStatus::WaitingChild && node.child_run_id.as_deref() == Some(child_run_id)
        });
        if !waits || status.is_terminal() || self.state.nodes[node_id].child_status == Some(status) {
            return Verdict::Ignored("the child's status is already known");
        }
        self.node_mut(node_id).child_status = Some(status);
        self.note_child(child_run_id, status);
        Verdict::Applied
    }

    /// Derives a live run's status: waiting on its own pending interrupt first, then
    /// mirroring a waiting child, else running. Paused, cancelling and terminal runs keep
    /// theirs.
    pub(super) fn settle_status(&mut self) {
        let status = self.state.status;
        if status != RunStatus::Running && !is_waiting(status) {
            return;
        }
        let own = self.state.pending_interrupt().map(|record| record.kind.waiting_status());
        let child = || {
            self.state
                .nodes
                .values()
                .filter(|node| node.status == NodeStatus::WaitingChild)
                .find_map(|node| node.child_status.filter(|status| is_waiting(*status)))
        };
        self.state.status = own.or_else(child).unwrap_or(RunStatus::Running);
    }
}
