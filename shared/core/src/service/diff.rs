//! `GET /v1/runs/{runId}:diff?against=<runId>` (replay §6.5, RFC 0054): where two runs of the
//! caller's tenant part ways.
//!
//! Events are compared by sequence on `(type, payload)`, the payload canonical (keys sorted)
//! and without the fields that differ between any two runs (`eventId`, `runId`,
//! `causationId`, `correlationId`, `ts`, `transport`: [`crate::replay::RUN_SPECIFIC`]); `divergedAtSeq` is the first sequence
//! that differs (`null` when none does). `eventDiffs` lists each differing sequence as
//! `added` (only in `b`), `removed` (only in `a`) or `changed`, with the events as the events
//! route renders them, at most [`MAX_EVENT_DIFFS`] of them (`truncated` then says more
//! differ, or that a log was longer than [`MAX_EVENTS`] and compared only that far).
//! `stateDiff` compares the snapshots by status and by variable **names** — never values, so
//! nothing a run holds (a token it was handed, a credential a node echoed) is repeated here.

use serde_json::{json, Map, Value};

use super::Services;
use crate::error::ServiceError;
use crate::event::RunEvent;
use crate::replay::comparison_key;
use crate::run::RunState;
use crate::webhook::delivery::event_doc;

/// The most events of each run compared.
pub const MAX_EVENTS: usize = 10_000;
/// The most `eventDiffs` listed.
pub const MAX_EVENT_DIFFS: usize = 100;
/// Events read per store call.
const PAGE: usize = 500;

/// The diff of runs `a` and `b` (their events `a_events`, `b_events`; `capped` when a log was
/// cut at [`MAX_EVENTS`]).
pub(super) fn diff(a: &RunState, a_events: &[RunEvent], b: &RunState, b_events: &[RunEvent], capped: bool) -> Value {
    let mut diffs = Vec::new();
    let mut diverged = None;
    let mut more = false;
    for seq in 0..a_events.len().max(b_events.len()) {
        let (left, right) = (a_events.get(seq), b_events.get(seq));
        let op = match (left, right) {
            (Some(left), Some(right)) if comparison_key(left) == comparison_key(right) => continue,
            (Some(_), Some(_)) => "changed",
            (Some(_), None) => "removed",
            (None, Some(_)) => "added",
            (None, None) => continue,
        };
        diverged.get_or_insert(seq);
        if diffs.len() == MAX_EVENT_DIFFS {
            more = true;
            break;
        }
        diffs.push(json!({
            "seq": seq,
            "op": op,
            "aEvent": left.map(|event| Value::Object(event_doc(a, event))),
            "bEvent": right.map(|event| Value::Object(event_doc(b, event))),
        }));
    }
    json!({
        "a": a.run_id,
        "b": b.run_id,
        "divergedAtSeq": diverged,
        "eventDiffs": diffs,
        "stateDiff": state_diff(a, b),
        "truncated": more || capped,
    })
}

/// Status and variable names of the two snapshots.
fn state_diff(a: &RunState, b: &RunState) -> Value {
    let names = |run: &RunState| run.variables.keys().cloned().collect::<std::collections::BTreeSet<_>>();
    let (left, right) = (names(a), names(b));
    let changed: Vec<&String> =
        left.intersection(&right).filter(|name| a.variables.get(*name) != b.variables.get(*name)).collect();
    let mut out = Map::new();
    if a.status != b.status {
        out.insert("status".into(), json!({ "a": a.status.as_str(), "b": b.status.as_str() }));
    }
    out.insert(
        "variables".into(),
        json!({
            "added": right.difference(&left).collect::<Vec<_>>(),
            "removed": left.difference(&right).collect::<Vec<_>>(),
            "changed": changed,
        }),
    );
    Value::Object(out)
}

impl Services {
    /// Diffs two of `tenant`'s runs (another tenant's run reads as not found).
    pub async fn diff_runs(&self, tenant: &str, a: &str, b: &str) -> Result<Value, ServiceError> {
        let left = self.get_run(tenant, a).await?;
        let right = self.get_run(tenant, b).await?;
        let (a_events, a_capped) = self.all_events(a).await?;
        let (b_events, b_capped) = self.all_events(b).await?;
        Ok(diff(&left, &a_events, &right, &b_events, a_capped || b_capped))
    }

    /// A run's events, at most [`MAX_EVENTS`], and whether there were more.
    pub(super) async fn all_events(&self, run_id: &str) -> Result<(Vec<RunEvent>, bool), ServiceError> {
        let mut events: Vec<RunEvent> = Vec::new();
        loop {
            let after = events.last().map(|event| event.sequence);
            let page = self.store.events_after(run_id, after, PAGE).await?;
            let full = page.len() == PAGE;
            events.extend(page);
            if events.len() >= MAX_EVENTS {
                let capped = events.len() > MAX_EVENTS || full;
                events.truncate(MAX_EVENTS);
                return Ok((events, capped));
            }
            if !full {
                return Ok((events, false));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{chain_workflow, pending_run};

    fn event(sequence: u64, event_type: &str, payload: Value) -> RunEvent {
        RunEvent {
            sequence,
            event_type: event_type.into(),
            node_id: None,
            payload,
            timestamp: sequence,
            causation: None,
        }
    }

    #[test]
    fn a_run_equals_itself_and_two_runs_part_at_their_first_difference() {
        let a = pending_run(&chain_workflow(), "run-a", "t");
        let mut b = pending_run(&chain_workflow(), "run-b", "t");
        let log = vec![
            event(0, "run.started", json!({"runId": "run-a", "inputs": {"x": 1}})),
            event(1, "node.completed", json!({"outputs": {"y": 2}})),
        ];
        let same = diff(&a, &log, &a, &log, false);
        assert_eq!(same["divergedAtSeq"], Value::Null);
        assert_eq!(same["eventDiffs"], json!([]));
        assert_eq!(same["truncated"], false);

        let mut other = log.clone();
        other[0].payload["runId"] = json!("run-b"); // ignored: differs between any two runs
        other[1].payload["outputs"]["y"] = json!(3);
        other.push(event(2, "run.completed", json!({})));
        b.variables.insert("extra".into(), json!("secret-looking-value"));
        let parted = diff(&a, &log, &b, &other, false);
        assert_eq!(parted["divergedAtSeq"], 1);
        assert_eq!(parted["eventDiffs"][0]["seq"], 1);
        assert_eq!(parted["eventDiffs"][0]["op"], "changed");
        assert_eq!(parted["eventDiffs"][1]["op"], "added");
        assert_eq!(parted["eventDiffs"][1]["aEvent"], Value::Null);
        assert_eq!(parted["stateDiff"]["variables"]["added"], json!(["extra"]));
        assert!(!parted["stateDiff"].to_string().contains("secret-looking-value"), "names only, never values");
    }

    #[test]
    fn many_differences_are_cut_and_said_so() {
        let a = pending_run(&chain_workflow(), "run-a", "t");
        let left: Vec<RunEvent> = (0..150).map(|seq| event(seq, "x", json!({"n": seq}))).collect();
        let right: Vec<RunEvent> = (0..150).map(|seq| event(seq, "x", json!({"n": seq + 1}))).collect();
        let cut = diff(&a, &left, &a, &right, false);
        assert_eq!(cut["eventDiffs"].as_array().unwrap().len(), MAX_EVENT_DIFFS);
        assert_eq!(cut["truncated"], true);
        assert_eq!(cut["divergedAtSeq"], 0);
    }
}
