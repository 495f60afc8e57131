//! The parallel fan-out seam (`POST /v1/host/sample/dispatch/fanout`, RFC 0118): one
//! `next-worker` decision naming several workers runs through the real engine — a supervisor
//! recording it, a `core.dispatch` node with the caller's `config` fanning out in parallel —
//! entirely in memory. Every child the engine starts is finished by the seam: completed, in
//! start order, unless the request says otherwise with two host extensions:
//!
//! - `fail: [workerIndex…]` — those children fail (`child_failed`);
//! - `order: [workerIndex…]` — the order children finish in: whenever a child is to finish,
//!   the first listed one still running does; children not listed finish after, in start order.
//!
//! A child the join cancels (a loser) never finishes. The answer is the join's:
//! `{joinOutcome, children, mergeOrder, events: [type…]}`; a config `DispatchConfig` refuses, or a
//! fan-out the engine refuses (a quorum above the worker count, …), is a `validation_error`
//! naming the rule. Nothing is persisted.

use serde_json::{json, Map, Value};

use super::create::new_run;
use super::Services;
use crate::engine::{self, Effect, Input, DISPATCH_JOIN, DISPATCH_TYPE_ID, MAX_CHILDREN, MAX_WIDTH};
use crate::error::ServiceError;
use crate::model::Workflow;
use crate::orchestrator::dispatch::{DispatchConfig, FanOut};
use crate::ports::GLOBAL_NAMESPACE;
use crate::run::{parse_slot_key, Principal, RunError, RunLimits, RunStatus};

/// Most workers one seam request names (the engine's per-fan-out ceiling is far higher; the
/// seam is a probe, not a load test).
pub const MAX_SEAM_WORKERS: usize = 4 * MAX_WIDTH as usize;
/// Most engine inputs one simulation applies.
const MAX_SIMULATION_INPUTS: usize = 8 * MAX_SEAM_WORKERS + 32;

/// A parallel fan-out seam request.
#[derive(Debug, Clone, Default)]
pub struct FanOutRequest {
    /// The workers (child workflow ids), one child each.
    pub next_worker_ids: Vec<String>,
    /// The dispatch node's config (`fanOutPolicy` defaults to `parallel`).
    pub config: Map<String, Value>,
    /// Worker indexes whose children fail.
    pub fail: Vec<u32>,
    /// The order children finish in (worker indexes).
    pub order: Vec<u32>,
}

/// A started child the seam has not finished yet.
struct Pending {
    index: u32,
    node_id: String,
    child_run_id: String,
}

impl Services {
    /// Runs one parallel fan-out through the engine in memory and reports its join.
    pub async fn fan_out_dispatch(&self, principal: &Principal, request: FanOutRequest) -> Result<Value, ServiceError> {
        let workers = request.next_worker_ids.len();
        if workers == 0 || workers > MAX_SEAM_WORKERS {
            return Err(ServiceError::validation(
                format!("`nextWorkerIds` must name 1 to {MAX_SEAM_WORKERS} workers"),
                json!({ "field": "nextWorkerIds", "minimum": 1, "maximum": MAX_SEAM_WORKERS }),
            ));
        }
        let mut config = request.config.clone();
        config.entry("fanOutPolicy").or_insert_with(|| json!("parallel"));
        let parsed = DispatchConfig::parse(&config)
            .map_err(|rule| ServiceError::validation(rule, json!({ "field": "config" })))?;
        if parsed.fan_out != Some(FanOut::Parallel) {
            return Err(ServiceError::validation(
                "the fan-out seam runs `fanOutPolicy: parallel` only",
                json!({ "field": "config.fanOutPolicy" }),
            ));
        }
        for (field, indexes) in [("fail", &request.fail), ("order", &request.order)] {
            if let Some(index) = indexes.iter().find(|index| **index as usize >= workers) {
                return Err(ServiceError::validation(
                    format!("`{field}` names worker {index}, but there are {workers} workers (0-based)"),
                    json!({ "field": field, "maximum": workers - 1 }),
                ));
            }
        }
        debug_assert!(workers <= MAX_CHILDREN as usize);
        self.simulate_fan_out(principal, &request, config)
    }

    fn simulate_fan_out(
        &self,
        principal: &Principal,
        request: &FanOutRequest,
        config: Map<String, Value>,
    ) -> Result<Value, ServiceError> {
        let decision = json!({ "kind": "next-worker", "nextWorkerIds": request.next_worker_ids });
        let document = json!({
            "id": "host-sample-fanout", "name": "parallel fan-out seam", "version": "1",
            "nodes": [
                { "id": "supervisor", "typeId": "core.orchestrator.supervisor",
                  "config": { "mockDispatchPlan": [decision] } },
                { "id": "dispatch", "typeId": DISPATCH_TYPE_ID, "config": config },
            ],
            "edges": [
                { "id": "e1", "sourceNodeId": "supervisor", "targetNodeId": "dispatch" },
                { "id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "supervisor" },
            ],
        });
        let workflow = Workflow::compile(document).map_err(|error| {
            ServiceError::validation(format!("the dispatch config is refused: {error}"), json!({ "field": "config" }))
        })?;
        let limits = RunLimits { max_node_executions: MAX_SIMULATION_INPUTS as u32, run_duration_ms: 60_000 };
        let now = self.clock.now();
        let mut run = new_run(
            "run-host-sample-fanout".into(),
            principal,
            &workflow,
            GLOBAL_NAMESPACE.into(),
            Map::new(),
            limits,
            now,
        );
        run.mocks_allowed = true;
        let mut event_types: Vec<String> = Vec::new();
        let mut join = Value::Null;
        let mut children = Value::Null;
        let mut pending: Vec<Pending> = Vec::new();
        let mut inputs = vec![Input::Start];
        for _ in 0..MAX_SIMULATION_INPUTS {
            let input = match inputs.pop() {
                Some(input) => input,
                None => match next_to_finish(&mut pending, &request.order) {
                    Some(child) => finish(child, &request.fail),
                    None => break,
                },
            };
            let outcome = engine::apply(&workflow, &mut run, input, now);
            for event in &outcome.events {
                event_types.push(event.event_type.clone());
                if event.event_type == DISPATCH_JOIN && join.is_null() {
                    join = event.payload.clone();
                }
                // The dispatch node's children: on its `node.completed` outputs, or on the
                // details of the `fan_out_join_failed` it failed with.
                let listed = event.payload.pointer("/outputs/children").filter(|_| join_seen(&join, event));
                if let Some(found) = listed.or_else(|| event.payload.pointer("/error/details/children")) {
                    children = found.clone();
                }
            }
            let mut steps = Vec::new();
            for effect in outcome.effects {
                match effect {
                    Effect::Step { .. } => steps.extend(effect.input()),
                    Effect::StartChild { node_id, child_run_id, .. } => {
                        let index = parse_slot_key(&node_id).map_or(0, |(_, index)| index);
                        pending.push(Pending { index, node_id, child_run_id });
                    }
                    Effect::CancelChild { child_run_id, .. } => pending.retain(|c| c.child_run_id != child_run_id),
                    _ => {}
                }
            }
            // A stack: the first step is applied first.
            inputs.extend(steps.into_iter().rev());
            if run.status.is_terminal() {
                break;
            }
        }
        if join.is_null() {
            let error =
                run.error.clone().unwrap_or_else(|| RunError::new("internal_error", "the fan-out did not join"));
            return Err(ServiceError::validation(
                error.message.clone(),
                json!({ "code": error.code, "nodeId": "dispatch", "events": event_types }),
            ));
        }
        Ok(json!({
            "joinOutcome": join["joinOutcome"],
            "children": children,
            "mergeOrder": join["mergeOrder"],
            "completedCount": join["completedCount"],
            "failedCount": join["failedCount"],
            "cancelledCount": join["cancelledCount"],
            "events": event_types,
        }))
    }
}

/// Whether `event` is the dispatch node's, after its join.
fn join_seen(join: &Value, event: &crate::event::RunEvent) -> bool {
    !join.is_null() && event.node_id.as_deref() == Some("dispatch")
}

/// The running child to finish next: the first of `order` still running, else the earliest
/// started.
fn next_to_finish(pending: &mut Vec<Pending>, order: &[u32]) -> Option<Pending> {
    let position = order
        .iter()
        .find_map(|index| pending.iter().position(|child| child.index == *index))
        .or_else(|| (!pending.is_empty()).then_some(0))?;
    Some(pending.remove(position))
}

/// The notice of `child`'s end: failed when its worker index is in `fail`, else completed.
fn finish(child: Pending, fail: &[u32]) -> Input {
    let failed = fail.contains(&child.index);
    Input::ChildFinished {
        node_id: child.node_id,
        child_run_id: child.child_run_id,
        status: if failed { RunStatus::Failed } else { RunStatus::Completed },
        variables: Map::new(),
        error: failed.then(|| RunError::new("child_failed", format!("worker {} failed (seam `fail`)", child.index))),
    }
}
