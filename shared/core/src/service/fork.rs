//! `POST /v1/runs/{runId}:fork` and `:redrive` (replay §6.1, see [`crate::replay`]): check the
//! request, create the fork — a new run of the source's pinned workflow and inputs, owned by
//! the source's owner, linked to its source — and start it. Also the two places a fork's
//! execution differs from a run's: an activity attempt resolves the source's recorded outcome
//! ([`Services::replayed_attempt`]), an interrupt is answered with the source's recorded
//! resolution ([`Services::replay_resolution`]), and each commit's events are compared with
//! the source's until they first differ ([`Services::mark_divergence`]).

use serde_json::{json, Map, Value};

use super::create::new_run;
use super::Services;
use crate::activity::{ActivityCall, ActivityResult, Progress};
use crate::engine::{self, Input};
use crate::error::ServiceError;
use crate::event::{types, RunEvent};
use crate::interrupt::{InterruptKind, Resolution, Resolver};
use crate::ports::CreateResult;
use crate::replay::{self, ForkMode, ReplayLink};
use crate::run::{Principal, RunState, RunStatus};

/// Fields a fork request may carry.
const FIELDS: [&str; 3] = ["mode", "fromSeq", "runOptionsOverlay"];
/// Fields a `runOptionsOverlay` may carry (`RunOptions`).
const OVERLAY_FIELDS: [&str; 3] = ["configurable", "tags", "metadata"];

/// A checked fork request.
#[derive(Debug, Clone, PartialEq)]
pub struct ForkRequest {
    /// The mode.
    pub mode: ForkMode,
    /// The fork point, when given.
    pub from_seq: Option<u64>,
    /// The branch's run options (`configurable`, `tags`, `metadata`).
    pub overlay: Map<String, Value>,
}

impl ForkRequest {
    /// Checks a request body: `400 validation_error` naming the field and the rule.
    pub fn parse(body: &Value) -> Result<Self, ServiceError> {
        let invalid = |field: &str, message: &str| ServiceError::validation(message, json!({ "field": field }));
        let Some(fields) = body.as_object() else {
            return Err(invalid("body", "the request body must be a JSON object"));
        };
        if let Some(unknown) = fields.keys().find(|name| !FIELDS.contains(&name.as_str())) {
            return Err(invalid(unknown, "unknown field: a fork request has mode, fromSeq and runOptionsOverlay"));
        }
        let mode = match fields.get("mode") {
            None | Some(Value::Null) => return Err(invalid("mode", "mode is required: \"replay\" or \"branch\"")),
            Some(value) => value
                .as_str()
                .and_then(ForkMode::parse)
                .ok_or_else(|| invalid("mode", "mode must be \"replay\" or \"branch\""))?,
        };
        let from_seq = match fields.get("fromSeq") {
            None | Some(Value::Null) => None,
            Some(value) => {
                Some(value.as_u64().ok_or_else(|| invalid("fromSeq", "fromSeq must be an integer of 0 or more"))?)
            }
        };
        if mode == ForkMode::Branch && from_seq.is_none() {
            return Err(invalid("fromSeq", "a branch fork needs fromSeq (the sequence it departs at)"));
        }
        let overlay = match fields.get("runOptionsOverlay") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(overlay)) => overlay.clone(),
            Some(_) => return Err(invalid("runOptionsOverlay", "runOptionsOverlay must be an object")),
        };
        if mode == ForkMode::Replay && !overlay.is_empty() {
            return Err(invalid(
                "runOptionsOverlay",
                "a replay fork re-executes the source as it ran: runOptionsOverlay is for branch forks only",
            ));
        }
        if let Some(unknown) = overlay.keys().find(|name| !OVERLAY_FIELDS.contains(&name.as_str())) {
            return Err(invalid(
                &format!("runOptionsOverlay.{unknown}"),
                "unknown field: run options are configurable, tags and metadata",
            ));
        }
        Ok(Self { mode, from_seq, overlay })
    }
}

impl Services {
    /// Forks `tenant`'s run `source_run_id` as `request` says and starts the fork. `404` for
    /// a run the caller cannot see, `422 fork_point_invalid` for a fork point past the
    /// source's log, `410 history_expired` for a source past its retention (see
    /// [`crate::retention`]; `details` names the source, the fork point and the boundary).
    pub async fn fork_run(
        &self,
        principal: &Principal,
        source_run_id: &str,
        request: ForkRequest,
    ) -> Result<RunState, ServiceError> {
        let from_seq = request.from_seq.unwrap_or(0);
        let now = self.clock.now();
        let source = self.source_run(principal, source_run_id, from_seq).await?;
        if from_seq > source.next_sequence {
            return Err(ServiceError::Rejected {
                status: 422,
                code: replay::FORK_POINT_INVALID,
                message: format!("fromSeq {from_seq} is past the source run's log ({} events)", source.next_sequence),
                details: json!({ "field": "fromSeq", "sourceRunId": source_run_id, "fromSeq": from_seq, "eventCount": source.next_sequence }),
            });
        }
        let workflow = self.pinned_workflow(&source).await?;
        let mut source = source;
        self.hydrate(&mut source).await?;
        let mut configurable = source.configurable.clone();
        if let Some(overlay) = request.overlay.get("configurable") {
            let Value::Object(overlay) = overlay else {
                return Err(ServiceError::validation(
                    "runOptionsOverlay.configurable must be an object",
                    json!({ "field": "runOptionsOverlay.configurable" }),
                ));
            };
            let mut merged = configurable.and_then(|c| c.as_object().cloned()).unwrap_or_default();
            merged.extend(overlay.clone());
            configurable = Some(Value::Object(merged));
        }
        let mut run = self.successor(principal, &source, &workflow, source.inputs.clone(), configurable, now)?;
        if let Some(tags) = request.overlay.get("tags") {
            run.tags = tags_of(tags)?;
        }
        if let Some(metadata) = request.overlay.get("metadata") {
            run.metadata = Some(metadata.clone());
        }
        // A replay performs nothing: not even the notice to an external worker.
        run.callback_url = (request.mode == ForkMode::Branch).then(|| source.callback_url.clone()).flatten();
        run.replay = Some(ReplayLink {
            source_run_id: Some(source.run_id.clone()),
            from_seq,
            mode: request.mode,
            diverged: false,
        });
        let run = self.start_successor(&workflow, run, now, |_| {}).await?;
        tracing::info!(run_id = %run.run_id, source = %source.run_id, mode = request.mode.as_str(), from_seq, "run forked");
        Ok(run)
    }

    /// A new run of `source`'s pinned `workflow` with `inputs` and `configurable` (checked for
    /// `principal`), as a fork or a rerun makes it: owned by the source's owner, with its
    /// tags, metadata, scope, callback, test affordances and disabled capabilities; the
    /// retention its workflow and options give.
    pub(super) fn successor(
        &self,
        principal: &Principal,
        source: &RunState,
        workflow: &crate::model::Workflow,
        inputs: Map<String, Value>,
        configurable: Option<Value>,
        now: crate::timefmt::Millis,
    ) -> Result<RunState, ServiceError> {
        self.check_run_options(workflow, configurable.as_ref(), principal)?;
        let limits = self.run_limits_for(configurable.as_ref())?;
        let namespace = source.workflow.namespace.clone();
        let mut run = new_run(self.ids.run_id(), &source.principal, workflow, namespace, inputs, limits, now);
        run.mocks_allowed |= source.mocks_allowed;
        run.disabled_capabilities = source.disabled_capabilities.clone();
        run.retention_ms = self.retention_for(workflow, configurable.as_ref())?;
        run.configurable = configurable;
        run.tags = source.tags.clone();
        run.metadata = source.metadata.clone();
        run.scope_id = source.scope_id.clone();
        run.callback_url = source.callback_url.clone();
        Ok(run)
    }

    /// Starts and stores a [`Services::successor`] `run` (its `run.started` given to
    /// `annotate` first), as a creation does: large values apart, a fork's divergence
    /// compared, the integration effects in the same write, then the effects sent.
    pub(super) async fn start_successor(
        &self,
        workflow: &crate::model::Workflow,
        mut run: RunState,
        now: crate::timefmt::Millis,
        annotate: impl FnOnce(&mut Map<String, Value>),
    ) -> Result<RunState, ServiceError> {
        let mut outcome = engine::apply(workflow, &mut run, Input::Start, now);
        run.version = 1;
        let started = outcome.events.iter_mut().find(|event| event.event_type == types::RUN_STARTED);
        if let Some(Value::Object(payload)) = started.map(|event| &mut event.payload) {
            annotate(payload);
        }
        let spilled = self.spill(&mut run, None, &mut outcome.events, None).await?;
        self.mark_divergence(&mut run, &mut outcome.events).await?;
        outcome.effects.extend(self.integration_effects(&run, &outcome.events).await?);
        match self.store.create_run(&run, &outcome.events, &outcome.effects, None).await? {
            CreateResult::Created => {
                Self::unspill(&mut run, spilled);
                self.send_effects(&run.run_id, run.version, &outcome.effects).await;
                Ok(run)
            }
            CreateResult::Existing(_) => Err(ServiceError::Internal),
        }
    }

    /// The run a fork or a rerun starts from: `principal`'s run `source_run_id`, read past its
    /// retention so that such a source answers `410 history_expired` (`details` naming it,
    /// `from_seq` and the boundary; also for a while after the sweeper removed it), not `404`.
    pub(super) async fn source_run(
        &self,
        principal: &Principal,
        source_run_id: &str,
        from_seq: u64,
    ) -> Result<RunState, ServiceError> {
        let now = self.clock.now();
        let source = match self.store.load_run(source_run_id).await? {
            Some(run) if run.tenant == principal.tenant => run,
            _ => {
                // Swept for its retention: remembered a while, and answered as expired.
                let swept =
                    self.store.record(super::retention::EXPIRED_KIND, &principal.tenant, source_run_id, now).await?;
                return Err(match swept {
                    Some(record) => {
                        let boundary = record.value["retentionBoundary"].as_str().unwrap_or_default().to_owned();
                        history_expired(source_run_id, from_seq, boundary)
                    }
                    None => ServiceError::NotFound { what: "run" },
                });
            }
        };
        if let Some(expired_at) = source.expired_at(now) {
            return Err(history_expired(source_run_id, from_seq, crate::timefmt::rfc3339(expired_at)));
        }
        Ok(source)
    }

    /// `POST /v1/runs/{runId}:redrive`: a branch fork of a failed run at its failed node's
    /// last `node.started` — the history before it is kept, the node runs again, live.
    pub async fn redrive_run(&self, principal: &Principal, run_id: &str) -> Result<RunState, ServiceError> {
        let source = self.get_run(&principal.tenant, run_id).await?;
        if source.status != RunStatus::Failed {
            return Err(ServiceError::Conflict {
                code: "run_state_conflict",
                message: format!("only a failed run can be redriven; this one is {}", source.status.as_str()),
                details: json!({ "status": source.status.as_str() }),
            });
        }
        let (events, _) = self.all_events(run_id).await?;
        let failed = events.iter().rev().find(|event| event.event_type == types::NODE_FAILED);
        let node_id = failed.and_then(|event| event.node_id.clone());
        let started = node_id.as_deref().and_then(|node_id| {
            events.iter().rev().find(|event| {
                event.event_type == types::NODE_STARTED
                    && event.node_id.as_deref() == Some(node_id)
                    && event.payload.get("attempt").and_then(Value::as_u64).unwrap_or(0) == 0
            })
        });
        let Some(started) = started else {
            return Err(ServiceError::Conflict {
                code: "run_state_conflict",
                message: "the run failed before any node started; start a new run instead".to_owned(),
                details: json!({ "status": "failed" }),
            });
        };
        let request = ForkRequest { mode: ForkMode::Branch, from_seq: Some(started.sequence), overlay: Map::new() };
        self.fork_run(principal, run_id, request).await
    }

    /// For an attempt of a fork (`link`), what the source recorded for it — the progress to
    /// report again and the outcome — or `replay_source_missing`; `None` when the attempt
    /// executes live (a branch past its fork point, or past the source's history).
    pub async fn replayed_attempt(
        &self,
        link: &ReplayLink,
        call: &ActivityCall,
    ) -> Result<Option<(Vec<Progress>, ActivityResult)>, ServiceError> {
        let Some(source) = link.source_run_id.as_deref() else {
            return Ok(Some((Vec::new(), Err(replay::source_missing(None, &call.node_id, call.attempt)))));
        };
        let (events, _) = self.all_events(source).await?;
        let recorded = replay::recorded_attempt(&events, &call.node_id, call.activation, call.attempt);
        let missing = || Ok(Some((Vec::new(), Err(replay::source_missing(Some(source), &call.node_id, call.attempt)))));
        match recorded {
            None if link.mode == ForkMode::Replay => missing(),
            None => Ok(None),
            Some(recorded) if !link.resolves(recorded.started_seq) => Ok(None),
            Some(recorded) => match recorded.result {
                Some(Ok(mut outputs)) => {
                    self.hydrate_map(source, &mut outputs).await?;
                    Ok(Some((recorded.progress, Ok(outputs))))
                }
                Some(result) => Ok(Some((recorded.progress, result))),
                None => missing(),
            },
        }
    }

    /// Compares the events a commit of the fork `run` appends with its source's at the same
    /// sequences; at the first difference, records `replay.diverged` (once per run): after
    /// the commit's events, or just before its terminal event when the commit ends the run.
    pub(super) async fn mark_divergence(
        &self,
        run: &mut RunState,
        events: &mut Vec<RunEvent>,
    ) -> Result<(), ServiceError> {
        let Some(link) = run.replay.as_ref().filter(|link| !link.diverged) else { return Ok(()) };
        let Some(source) = link.source_run_id.clone() else { return Ok(()) };
        let (Some(first), Some(last)) = (events.first().map(|e| e.sequence), events.last().map(|e| e.sequence)) else {
            return Ok(());
        };
        let span = usize::try_from(last - first + 2).unwrap_or(usize::MAX);
        let originals = self.store.events_after(&source, first.checked_sub(1), span).await?;
        let source_longer = originals.iter().any(|event| event.sequence > last);
        let ended = run.status.is_terminal();
        let compared = replay::first_divergence((events, &run.run_id), (&originals, &source), ended, source_longer);
        let Some((at, kind, point)) = compared else {
            return Ok(());
        };
        let terminal = ended && events.last().is_some_and(|event| is_terminal_event(&event.event_type));
        let position = if terminal { events.len() - 1 } else { events.len() };
        let sequence = events.get(position).map_or(run.next_sequence, |event| event.sequence);
        let replay_event_id = (kind != replay::Divergence::Missing).then(|| crate::bus::event_id(&run.run_id, at));
        let payload = replay::diverged_payload(&source, at, &kind, point.as_deref(), replay_event_id);
        let timestamp = events.last().map_or(self.clock.now(), |event| event.timestamp);
        events.insert(
            position,
            RunEvent {
                sequence,
                event_type: replay::REPLAY_DIVERGED.to_owned(),
                node_id: None,
                payload,
                timestamp,
                causation: None,
            },
        );
        for event in events.iter_mut().skip(position + 1) {
            event.sequence += 1;
        }
        run.next_sequence += 1;
        if let Some(link) = run.replay.as_mut() {
            link.diverged = true;
        }
        tracing::info!(run_id = %run.run_id, source = %source, at, kind = kind.as_str(), "fork diverged from its source");
        Ok(())
    }

    /// In a fork waiting on an interrupt, answers it as the source's log says (replay §6.2:
    /// interrupts short-circuit with their recorded resolution): an approval gets the
    /// source's votes on the same occurrence of the same node one at a time, in order, each
    /// by its voter (a quorum closes as it did); another kind gets the resume value the
    /// source's occurrence was resolved with, by the same resolver. A branch answers so only
    /// what the source answered before its fork point; an occurrence the source never
    /// answered (or that timed out) waits for a live answer.
    pub(super) async fn replay_resolution(&self, run: &RunState) -> Result<(), ServiceError> {
        let Some(link) = run.replay.as_ref() else { return Ok(()) };
        let (Some(source), Some(pending)) = (link.source_run_id.as_deref(), run.pending_interrupt()) else {
            return Ok(());
        };
        let node = pending.node_id.as_str();
        let Some(ordinal) =
            run.interrupts.iter().filter(|record| record.node_id == node).position(|r| r.id == pending.id)
        else {
            return Ok(());
        };
        let (events, _) = self.all_events(source).await?;
        let at_node =
            |event: &&RunEvent, kind: &str| event.event_type == kind && event.node_id.as_deref() == Some(node);
        let answer = if pending.kind == InterruptKind::Approval {
            // The source's occurrence (its k-th suspension here), its votes, and the next one.
            let suspended = events.iter().filter(|e| at_node(e, types::NODE_SUSPENDED)).nth(ordinal);
            let occurrence = suspended.and_then(|e| e.payload.get("interruptId")).and_then(Value::as_str);
            let votes: Vec<&RunEvent> = events
                .iter()
                .filter(|e| at_node(e, types::APPROVAL_RECEIVED))
                .filter(|e| occurrence.is_some() && e.payload.get("interruptId").and_then(Value::as_str) == occurrence)
                .collect();
            let (own, _) = self.all_events(&run.run_id).await?;
            let cast = own
                .iter()
                .filter(|e| e.event_type == types::APPROVAL_RECEIVED)
                .filter(|e| e.payload.get("interruptId").and_then(Value::as_str) == Some(pending.id.as_str()))
                .count();
            votes.get(cast).map(|vote| {
                let mut value = serde_json::Map::new();
                for field in ["action", "feedback", "comment", "editedArtifactData"] {
                    if let Some(found) = vote.payload.get(field) {
                        value.insert(field.to_owned(), found.clone());
                    }
                }
                // A voter named apart from the resolver was named in the answer.
                let voter = vote.payload.get("voter").filter(|voter| *voter != &vote.payload["decidedBy"]);
                if let Some(voter) = voter {
                    value.insert("voter".to_owned(), voter.clone());
                }
                (vote.sequence, Value::Object(value), vote.payload.get("decidedBy").and_then(Value::as_str))
            })
        } else {
            let resolved = events.iter().filter(|e| at_node(e, types::INTERRUPT_RESOLVED)).nth(ordinal);
            resolved.map(|e| {
                let value = e.payload.get("resumeValue").cloned().unwrap_or(Value::Null);
                (e.sequence, value, e.payload.get("resolvedBy").and_then(Value::as_str))
            })
        };
        let Some((sequence, value, by)) = answer else { return Ok(()) };
        if !link.resolves(sequence) || value.is_null() {
            return Ok(());
        }
        let resolver = match by {
            Some("interrupt-token") | None => Resolver::Token,
            Some(subject) => Resolver::Principal(subject.to_owned()),
        };
        let resolution = Resolution {
            node_id: node.to_owned(),
            interrupt_id: Some(pending.id.clone()),
            value,
            resolver,
            prior_vote: None,
        };
        tracing::debug!(run_id = %run.run_id, node, "answering a fork's interrupt as its source was");
        Box::pin(self.advance(None, &run.run_id, Input::Resolve(resolution), &super::NoHooks)).await?;
        Ok(())
    }

    /// The link a child `child_run_id` of the fork `parent` gets: a fork, in the same mode,
    /// of the child the source started in its place; a child of a branch fork the source
    /// dispatched at or after the fork point runs live (`None`).
    pub(super) async fn child_link(
        &self,
        parent: &RunState,
        node_id: &str,
        child_run_id: &str,
    ) -> Result<Option<ReplayLink>, ServiceError> {
        let Some(link) = parent.replay.as_ref() else { return Ok(None) };
        let activation = parent.nodes.get(node_id).map_or(0, |node| node.activation);
        let source_child = link
            .source_run_id
            .as_deref()
            .and_then(|source| engine::counterpart_child_id(&parent.run_id, source, node_id, activation, child_run_id));
        if link.mode == ForkMode::Branch {
            let Some(source) = link.source_run_id.as_deref() else { return Ok(None) };
            let (events, _) = self.all_events(source).await?;
            let dispatched = events.iter().find(|event| {
                event.event_type == types::NODE_DISPATCHED
                    && event.payload.get("childRunId").and_then(Value::as_str) == source_child.as_deref()
            });
            if dispatched.is_none_or(|event| event.sequence >= link.from_seq) {
                return Ok(None);
            }
        }
        let exists = match &source_child {
            Some(id) => self.store.load_run_summary(id).await?.is_some(),
            None => false,
        };
        Ok(Some(ReplayLink {
            source_run_id: source_child.filter(|_| exists),
            from_seq: u64::MAX,
            mode: ForkMode::Replay,
            diverged: false,
        }))
    }
}

/// `410 history_expired`: the source is past its retention (`boundary`: when it ran out).
fn history_expired(source_run_id: &str, from_seq: u64, boundary: String) -> ServiceError {
    ServiceError::Rejected {
        status: 410,
        code: "history_expired",
        message: "the source run's history is past its retention; it cannot be forked".to_owned(),
        details: json!({ "sourceRunId": source_run_id, "fromSeq": from_seq, "retentionBoundary": boundary }),
    }
}

fn is_terminal_event(event_type: &str) -> bool {
    matches!(event_type, types::RUN_COMPLETED | types::RUN_FAILED | types::RUN_CANCELLED)
}

fn tags_of(tags: &Value) -> Result<Vec<String>, ServiceError> {
    let invalid = || {
        ServiceError::validation(
            "runOptionsOverlay.tags must be an array of up to 100 non-empty strings",
            json!({ "field": "runOptionsOverlay.tags" }),
        )
    };
    let list = tags.as_array().filter(|list| list.len() <= 100).ok_or_else(invalid)?;
    list.iter()
        .map(|tag| {
            tag.as_str().filter(|tag| !tag.is_empty() && tag.len() <= 256).map(str::to_owned).ok_or_else(invalid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_request_names_the_field_and_the_rule() {
        let field = |body: Value| match ForkRequest::parse(&body) {
            Err(ServiceError::Validation { details, .. }) => details["field"].as_str().unwrap_or_default().to_owned(),
            other => panic!("expected a validation error, got {other:?}"),
        };
        assert_eq!(field(json!({"mode": "replay", "fromSeq": -1})), "fromSeq");
        assert_eq!(field(json!({"mode": "replay", "fromSeq": 1.5})), "fromSeq");
        assert_eq!(field(json!({"mode": "branch"})), "fromSeq");
        assert_eq!(field(json!({"mode": "rewind", "fromSeq": 0})), "mode");
        assert_eq!(field(json!({"fromSeq": 0})), "mode");
        assert_eq!(field(json!({"mode": "replay", "runOptionsOverlay": {"configurable": {}}})), "runOptionsOverlay");
        assert_eq!(
            field(json!({"mode": "branch", "fromSeq": 0, "runOptionsOverlay": {"x": 1}})),
            "runOptionsOverlay.x"
        );
        assert_eq!(field(json!({"mode": "replay", "extra": 1})), "extra");

        let replay = ForkRequest::parse(&json!({"mode": "replay", "runOptionsOverlay": {}})).expect("valid");
        assert_eq!((replay.mode, replay.from_seq), (ForkMode::Replay, None));
        let branch = ForkRequest::parse(&json!({"mode": "branch", "fromSeq": 3, "runOptionsOverlay": {"tags": ["b"]}}))
            .expect("valid");
        assert_eq!((branch.from_seq, branch.overlay.len()), (Some(3), 1));
    }
}
