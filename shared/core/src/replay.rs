//! Replay and branch forks (OpenWOP replay §6, RFC 0140): what a fork keeps of its source,
//! the recorded outcome an activity attempt of a fork resolves instead of executing, and the
//! comparison that finds where a fork departs from its source.
//!
//! A fork is a new run of the source's pinned workflow with the source's inputs, executed by
//! the ordinary engine. It reproduces the source's history because the engine is a pure
//! function of its inputs and every side effect is answered from the source's log:
//!
//! - **Side effects** are the activities (every registered executor: HTTP, model, cloud and
//!   conformance calls — the one seam where a call could leave the host). In a `replay` fork
//!   every attempt of every activity resolves the source's outcome for `(nodeId, activation,
//!   attempt)` — its outputs, or the error it failed with — and the progress it reported
//!   (`provider.usage`, `output.chunk`) is re-recorded, so the fork's log and cost match. An
//!   attempt the source never finished fails closed with `replay_source_missing`. In a
//!   `branch` fork only attempts the source started before `fromSeq` are resolved that way;
//!   later ones execute live (a branch re-fires side effects after its fork point).
//! - **Child runs** of a fork are forks of the source's children in the same mode (a child of
//!   a branch fork dispatched after `fromSeq` runs live); a child the source never started
//!   gets no source, so its side effects fail closed.
//! - **Integration** (webhooks, the run-event bus) never sees the events of a `replay` fork.
//!
//! The service layer compares each commit's events with the source's at the same sequence
//! ([`replay_key`]: type, node and canonical payload without run-specific ids and clock
//! fields) until the first difference, where it records `replay.diverged` once.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::activity::{ActivityError, ActivityResult, Progress};
use crate::event::{types, RunEvent};

/// The event a fork records where it departs from its source.
pub const REPLAY_DIVERGED: &str = "replay.diverged";
/// The error of a side effect a replay cannot resolve from its source.
pub const SOURCE_MISSING: &str = "replay_source_missing";
/// The error of a fork point past the source's log.
pub const FORK_POINT_INVALID: &str = "fork_point_invalid";

/// How a fork treats the source's side effects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForkMode {
    /// Every side effect resolves the source's recorded outcome.
    Replay,
    /// Side effects before `fromSeq` resolve the source's outcome; later ones execute live.
    Branch,
}

impl ForkMode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replay => "replay",
            Self::Branch => "branch",
        }
    }

    /// The mode of a wire name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "replay" => Some(Self::Replay),
            "branch" => Some(Self::Branch),
            _ => None,
        }
    }
}

/// What a fork keeps of its source (fixed at creation but for `diverged`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayLink {
    /// The run whose log answers this run's side effects (`None`: a child of a fork whose
    /// source never started that child — nothing to answer with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_run_id: Option<String>,
    /// The fork point: the source's events before it are this run's fixed history.
    pub from_seq: u64,
    /// The fork's mode.
    pub mode: ForkMode,
    /// `replay.diverged` was recorded (it is recorded once).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diverged: bool,
}

impl ReplayLink {
    /// Whether an attempt the source started at `started_seq` resolves its recorded outcome.
    pub fn resolves(&self, started_seq: u64) -> bool {
        self.mode == ForkMode::Replay || started_seq < self.from_seq
    }

    /// Whether webhooks and the event bus may carry this run's events (not a `replay` fork's).
    pub fn delivers_events(&self) -> bool {
        self.mode == ForkMode::Branch
    }
}

/// One attempt of an activity as the source recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedAttempt {
    /// The sequence of the attempt's `node.started`.
    pub started_seq: u64,
    /// The progress it reported, in order (usage and streamed chunks).
    pub progress: Vec<Progress>,
    /// How it ended; `None` when the source never recorded its end (cancelled, or still
    /// running).
    pub result: Option<ActivityResult>,
}

/// Attempt `attempt` (zero-based) of activation `activation` (one-based: the n-th time the
/// node started) of `node_id` in the source's `events`, if the source started it.
pub fn recorded_attempt(events: &[RunEvent], node_id: &str, activation: u32, attempt: u32) -> Option<RecordedAttempt> {
    let mut activations = 0u32;
    let mut found: Option<RecordedAttempt> = None;
    for event in events.iter().filter(|event| event.node_id.as_deref() == Some(node_id)) {
        let event_attempt = event.payload.get("attempt").and_then(Value::as_u64).map(|a| a as u32);
        if let Some(current) = found.as_mut() {
            match event.event_type.as_str() {
                types::PROVIDER_USAGE => {
                    if let Ok(usage) = serde_json::from_value(event.payload.clone()) {
                        current.progress.push(Progress::Usage(usage));
                    }
                }
                types::OUTPUT_CHUNK => {
                    let data = event.payload.get("chunk").cloned().unwrap_or(Value::Null);
                    current.progress.push(Progress::Chunk { data });
                }
                types::NODE_COMPLETED => {
                    let outputs = event.payload.get("outputs").and_then(Value::as_object).cloned().unwrap_or_default();
                    current.result = Some(Ok(outputs));
                    return found;
                }
                types::NODE_RETRIED => {
                    current.result = Some(Err(recorded_error(event.payload.get("lastError"))));
                    return found;
                }
                types::NODE_FAILED => {
                    current.result = Some(Err(recorded_error(event.payload.get("error"))));
                    return found;
                }
                types::NODE_CANCELLED | types::NODE_STARTED => return found,
                _ => {}
            }
            continue;
        }
        if event.event_type != types::NODE_STARTED {
            continue;
        }
        if event_attempt.unwrap_or(0) == 0 {
            activations += 1;
        }
        if activations == activation && event_attempt.unwrap_or(0) == attempt {
            found = Some(RecordedAttempt { started_seq: event.sequence, progress: Vec::new(), result: None });
        }
    }
    found
}

/// The recorded error of an attempt (`node.retried.lastError`, `node.failed.error`).
fn recorded_error(error: Option<&Value>) -> ActivityError {
    let field = |name: &str| error.and_then(|error| error.get(name));
    let code = field("code").and_then(Value::as_str).unwrap_or("recorded_failure");
    let message = field("message").and_then(Value::as_str).unwrap_or("the source run recorded this attempt as failed");
    let retryable = field("retryable").and_then(Value::as_bool).unwrap_or(false);
    let mut recorded = ActivityError::new(code, message, retryable);
    recorded.details = field("details").cloned();
    recorded
}

/// The error of an attempt a replay cannot resolve from `source` (none recorded, or no
/// source at all).
pub fn source_missing(source: Option<&str>, node_id: &str, attempt: u32) -> ActivityError {
    ActivityError::new(
        SOURCE_MISSING,
        format!(
            "node `{node_id}` has side effects and the source run recorded no outcome for attempt {attempt}: a replay \
             does not perform it"
        ),
        false,
    )
    .with_details(json!({ "sourceRunId": source, "nodeId": node_id, "attempt": attempt }))
}

/// Payload fields that differ between any two runs (ids and the trace context).
pub const RUN_SPECIFIC: [&str; 6] = ["eventId", "runId", "causationId", "correlationId", "ts", "transport"];
/// Payload fields that differ between a replay and its source without the history
/// differing: clock readings, and ids minted per run (a child's run id).
const CLOCK_AND_MINTED: [&str; 13] = [
    "durationMs",
    "delayMs",
    "childRunId",
    "interruptId",
    "startedAt",
    "endedAt",
    "expiresAt",
    "dueAt",
    "wakeAt",
    "resolvedAt",
    "requestedAt",
    "decidedAt",
    "tokenExpiresAt",
];

/// The comparison key `:diff` uses: type and canonical payload without [`RUN_SPECIFIC`].
pub fn comparison_key(event: &RunEvent) -> (String, String) {
    key(event, &RUN_SPECIFIC, &[])
}

/// The key a fork's events are compared with its source's by: [`comparison_key`] plus the
/// node, without clock readings and per-run minted ids, and with the run's own id (`run_id`,
/// e.g. inside an interrupt's `key`) written as `<run>`.
pub fn replay_key(event: &RunEvent, run_id: &str) -> (String, String) {
    let (kind, payload) = key(event, &RUN_SPECIFIC, &CLOCK_AND_MINTED);
    let payload = if run_id.is_empty() { payload } else { payload.replace(run_id, "<run>") };
    (kind, format!("{}\n{payload}", event.node_id.as_deref().unwrap_or_default()))
}

fn key(event: &RunEvent, ignored: &[&str], also: &[&str]) -> (String, String) {
    let payload = match &event.payload {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(name, _)| !ignored.contains(&name.as_str()) && !also.contains(&name.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Map<String, Value>>(),
        ),
        other => other.clone(),
    };
    // serde_json's maps keep their keys sorted: the text is canonical for equal values.
    (event.event_type.clone(), payload.to_string())
}

/// How a fork's event at `sequence` departs from its source's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Divergence {
    /// The same type with another payload.
    Output,
    /// Another type.
    TypeMismatch,
    /// The fork has an event where the source's log ended.
    Extra,
    /// The fork ended where the source had more events.
    Missing,
}

impl Divergence {
    /// The `divergenceKind`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Output => "output",
            Self::TypeMismatch => "type-mismatch",
            Self::Extra => "extra",
            Self::Missing => "missing",
        }
    }
}

/// The first of `events` (those of fork `run_id`, consecutive) that departs from the
/// `source` events (of `source_id`) at the same sequences (`source` holds those sequences, or fewer where the source's log is
/// shorter), with how; `ended` says the fork's log ends with `events` and
/// `source_longer` that the source's log goes on past them.
pub fn first_divergence(
    (events, run_id): (&[RunEvent], &str),
    (source, source_id): (&[RunEvent], &str),
    ended: bool,
    source_longer: bool,
) -> Option<(u64, Divergence, Option<String>)> {
    for event in events {
        let Some(original) = source.iter().find(|original| original.sequence == event.sequence) else {
            return Some((event.sequence, Divergence::Extra, Some(event.event_type.clone())));
        };
        if original.event_type != event.event_type {
            return Some((event.sequence, Divergence::TypeMismatch, Some(event.event_type.clone())));
        }
        if replay_key(original, source_id) != replay_key(event, run_id) {
            return Some((event.sequence, Divergence::Output, Some(event.event_type.clone())));
        }
    }
    let next = events.last().map_or(0, |event| event.sequence + 1);
    (ended && source_longer).then_some((next, Divergence::Missing, None))
}

/// The `replay.diverged` payload (the union of the schema's and the prose's fields).
pub fn diverged_payload(
    source_run_id: &str,
    at_sequence: u64,
    kind: &Divergence,
    point: Option<&str>,
    replay_event_id: Option<String>,
) -> Value {
    let mut payload = json!({
        "sourceRunId": source_run_id,
        "atSequence": at_sequence,
        "originalEventId": crate::bus::event_id(source_run_id, at_sequence),
        "divergenceKind": kind.as_str(),
    });
    if let Some(point) = point {
        payload["divergencePoint"] = json!(point);
    }
    if let Some(id) = replay_event_id {
        payload["replayEventId"] = json!(id);
    }
    payload
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sequence: u64, event_type: &str, node: Option<&str>, payload: Value) -> RunEvent {
        RunEvent {
            sequence,
            event_type: event_type.into(),
            node_id: node.map(str::to_owned),
            payload,
            timestamp: sequence * 10,
            causation: None,
        }
    }

    fn log() -> Vec<RunEvent> {
        vec![
            event(0, "run.started", None, json!({})),
            event(1, "node.started", Some("call"), json!({"nodeId": "call", "attempt": 0})),
            event(
                2,
                "node.retried",
                Some("call"),
                json!({"attempt": 1, "lastError": {"code": "http_503", "message": "busy", "retryable": true}}),
            ),
            event(3, "node.started", Some("call"), json!({"nodeId": "call", "attempt": 1})),
            event(
                4,
                "provider.usage",
                Some("call"),
                json!({"provider": "p", "model": "m", "inputTokens": 3, "outputTokens": 4, "nodeId": "call"}),
            ),
            event(
                5,
                "node.completed",
                Some("call"),
                json!({"nodeId": "call", "outputs": {"status": 200}, "durationMs": 12}),
            ),
            event(6, "node.started", Some("call"), json!({"nodeId": "call", "attempt": 0})),
        ]
    }

    #[test]
    fn an_attempt_resolves_what_the_source_recorded_for_it() {
        let first = recorded_attempt(&log(), "call", 1, 0).expect("recorded");
        assert_eq!(first.started_seq, 1);
        let error = first.result.expect("ended").expect_err("failed");
        assert_eq!((error.code.as_str(), error.retryable), ("http_503", true));

        let second = recorded_attempt(&log(), "call", 1, 1).expect("recorded");
        assert_eq!(second.result, Some(Ok(json!({"status": 200}).as_object().cloned().unwrap())));
        assert!(matches!(&second.progress[..], [Progress::Usage(usage)] if usage.input_tokens == 3));

        let unfinished = recorded_attempt(&log(), "call", 2, 0).expect("started");
        assert_eq!((unfinished.started_seq, unfinished.result), (6, None));
        assert_eq!(recorded_attempt(&log(), "call", 3, 0), None, "never started");
        assert_eq!(recorded_attempt(&log(), "other", 1, 0), None);
    }

    #[test]
    fn a_branch_resolves_only_what_the_source_started_before_the_fork_point() {
        let branch =
            ReplayLink { source_run_id: Some("s".into()), from_seq: 3, mode: ForkMode::Branch, diverged: false };
        assert!(branch.resolves(1) && !branch.resolves(3));
        let replay = ReplayLink { mode: ForkMode::Replay, ..branch };
        assert!(replay.resolves(3) && !replay.delivers_events());
    }

    #[test]
    fn clock_fields_and_minted_ids_do_not_count_as_divergence() {
        let mut source = log();
        let mut fork = source.clone();
        fork[5].payload["durationMs"] = json!(99);
        fork[5].timestamp = 1_000;
        fork[0].payload["key"] = json!("run-fork:gate:1");
        source[0].payload["key"] = json!("run-src:gate:1");
        let (f, s) = ("run-fork", "run-src");
        assert_eq!(
            first_divergence((&fork, f), (&source, s), false, false),
            None,
            "the runs' own ids read as the same"
        );

        fork[5].payload["outputs"]["status"] = json!(500);
        let (at, kind, point) = first_divergence((&fork, f), (&source, s), false, false).expect("diverges");
        assert_eq!((at, kind, point.as_deref()), (5, Divergence::Output, Some("node.completed")));

        fork[5].event_type = "node.failed".into();
        let mismatch = first_divergence((&fork, f), (&source, s), false, false).map(|d| d.1);
        assert_eq!(mismatch, Some(Divergence::TypeMismatch));
        let extra = [event(7, "run.completed", None, json!({}))];
        assert_eq!(first_divergence((&extra, f), (&source, s), true, false).map(|d| d.1), Some(Divergence::Extra));
        let missing = first_divergence((&source[..2], s), (&source[..2], s), true, true).map(|d| (d.0, d.1));
        assert_eq!(missing, Some((2, Divergence::Missing)));
    }
}
