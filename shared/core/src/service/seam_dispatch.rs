//! The two seams that drive engine paths the black-box suite cannot reach by itself:
//!
//! - per-item dispatch (`POST /v1/host/sample/dispatch/per-item`): one `next-worker` decision
//!   with `nextWorkerInputs` is run through the real engine — a supervisor recording the
//!   decision, a `core.dispatch` node acting on it — entirely in memory; the children it would
//!   start are reported with the inputs the engine projects into each (the `inputMapping`
//!   projection, then the per-item overlay). With `replay`, the recorded
//!   `runOrchestrator.decided` decision is read back from the log and run again verbatim.
//!   Nothing is persisted;
//! - the concurrent claim (`POST /v1/host/sample/test/idempotency/concurrent-claim`): executors
//!   race the store's atomic insert-if-absent claim (the one that guards `Idempotency-Key`
//!   requests) on one logical invocation id; the claim is released afterwards.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::create::new_run;
use super::Services;
use crate::capabilities::Toggle;
use crate::engine::{self, Effect, Input, DISPATCH_TYPE_ID, MAX_FAN_OUT};
use crate::error::ServiceError;
use crate::event::types;
use crate::model::Workflow;
use crate::orchestrator::Decision;
use crate::ports::{IdempotencyClaim, GLOBAL_NAMESPACE};
use crate::run::{Principal, RunLimits, RunStatus};

/// The endpoint id the concurrent-claim seam claims under.
pub const CLAIM_ENDPOINT: &str = "host-sample:concurrent-claim";
/// How long a seam claim would hold if it were never released.
const CLAIM_LEASE_MS: u64 = 30_000;
/// Most workers one per-item simulation runs (a decision naming more is refused).
const MAX_SEAM_WORKERS: usize = MAX_FAN_OUT;
/// Most engine inputs one per-item simulation applies (a decision, its workers, the terminate).
const MAX_SIMULATION_INPUTS: usize = 4 * MAX_SEAM_WORKERS + 16;

/// A per-item dispatch request.
#[derive(Debug, Clone)]
pub struct PerItemRequest {
    /// The `next-worker` decision (`nextWorkerIds`, `nextWorkerInputs?`), as sent.
    pub decision: Value,
    /// `inputMapping`: child input → value the parent holds (projected before the per-item overlay).
    pub input_mapping: Map<String, Value>,
    /// Read the recorded decision back and run it again.
    pub replay: bool,
}

impl Services {
    /// Runs one `next-worker` decision through the engine in memory and reports the children
    /// its dispatch node would start. A decision the engine refuses (length mismatch, per-item
    /// inputs while `dispatch.perItemInput` is off) is a `validation_error` with no child.
    pub async fn per_item_dispatch(
        &self,
        principal: &Principal,
        request: PerItemRequest,
    ) -> Result<Value, ServiceError> {
        let decision = Decision::parse(&request.decision)
            .map_err(|problem| ServiceError::validation(problem, json!({ "expected": "NextWorkerDecision" })))?;
        let Decision::NextWorker { next_worker_ids, .. } = &decision else {
            return Err(ServiceError::validation("the decision must be a next-worker decision", json!({})));
        };
        if next_worker_ids.len() > MAX_SEAM_WORKERS {
            return Err(ServiceError::validation(
                format!("the per-item seam runs at most {MAX_SEAM_WORKERS} workers"),
                json!({ "field": "nextWorkerIds", "limit": MAX_SEAM_WORKERS }),
            ));
        }
        let overlay = self.capability_overlay().await?;
        if !request.input_mapping.is_empty() && !overlay.enabled(Toggle::DispatchMapping) {
            return Err(ServiceError::validation(
                "inputMapping needs agents.dispatchMapping, which is switched off",
                json!({ "requiredCapability": Toggle::DispatchMapping.name(), "children": [] }),
            ));
        }
        let disabled = overlay.disabled();
        let first = self.simulate(principal, &decision.to_value(), &request.input_mapping, &disabled)?;
        if !request.replay {
            return Ok(json!({ "children": first.children, "decision": first.recorded }));
        }
        let replayed = self.simulate(principal, &first.recorded, &request.input_mapping, &disabled)?;
        Ok(json!({ "children": replayed.children, "decision": replayed.recorded, "replayed": true }))
    }

    fn simulate(
        &self,
        principal: &Principal,
        decision: &Value,
        input_mapping: &Map<String, Value>,
        disabled: &[String],
    ) -> Result<Simulation, ServiceError> {
        let mapping: Map<String, Value> = input_mapping.keys().map(|key| (key.clone(), json!(key))).collect();
        let mut dispatch_config = json!({ "fanOutPolicy": "sequential" });
        if !mapping.is_empty() {
            dispatch_config["inputMapping"] = Value::Object(mapping);
        }
        let document = json!({
            "id": "host-sample-per-item", "name": "per-item dispatch seam", "version": "1",
            "nodes": [
                { "id": "supervisor", "typeId": "core.orchestrator.supervisor",
                  "config": { "mockDispatchPlan": [decision] } },
                { "id": "dispatch", "typeId": DISPATCH_TYPE_ID, "config": dispatch_config },
            ],
            "edges": [
                { "id": "e1", "sourceNodeId": "supervisor", "targetNodeId": "dispatch" },
                { "id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "supervisor" },
            ],
        });
        let workflow = Workflow::compile(document).map_err(|_| ServiceError::Internal)?;
        let limits = RunLimits { max_node_executions: MAX_SIMULATION_INPUTS as u32, run_duration_ms: 60_000 };
        let now = self.clock.now();
        let mut run = new_run(
            "run-host-sample-per-item".into(),
            principal,
            &workflow,
            GLOBAL_NAMESPACE.into(),
            input_mapping.clone(),
            limits,
            now,
        );
        run.mocks_allowed = true;
        run.disabled_capabilities = disabled.to_vec();
        let mut children = Vec::new();
        let mut recorded = Value::Null;
        let mut inputs = vec![Input::Start];
        for _ in 0..MAX_SIMULATION_INPUTS {
            let Some(input) = inputs.pop() else { break };
            let outcome = engine::apply(&workflow, &mut run, input, now);
            for event in &outcome.events {
                if event.event_type == types::RUN_ORCHESTRATOR_DECIDED && recorded.is_null() {
                    recorded = event.payload["decision"].clone();
                }
            }
            for effect in outcome.effects.into_iter().rev() {
                match effect {
                    Effect::Step { .. } => inputs.extend(effect.input()),
                    Effect::StartChild { node_id, child_run_id, workflow_id, .. } => {
                        let projected = engine::child_inputs(&workflow, &run, &node_id);
                        let index = children.len();
                        children.push(json!({ "index": index, "workflowId": workflow_id,
                                              "childRunId": child_run_id, "inputs": projected }));
                        inputs.push(Input::ChildFinished {
                            node_id,
                            child_run_id,
                            status: RunStatus::Completed,
                            variables: Map::new(),
                            error: None,
                        });
                    }
                    _ => {}
                }
            }
            if run.status.is_terminal() {
                break;
            }
        }
        if !run.status.is_terminal() {
            // Never a partial list presented as the answer.
            return Err(ServiceError::validation(
                "the dispatch simulation did not finish within its bound",
                json!({ "children": children.len() }),
            ));
        }
        if run.status == RunStatus::Failed {
            let error = run.error.clone().unwrap_or_else(|| crate::run::RunError::new("internal_error", "failed"));
            return Err(ServiceError::validation(
                error.message.clone(),
                json!({ "code": error.code, "children": children, "nodeId": "dispatch" }),
            ));
        }
        Ok(Simulation { children, recorded })
    }

    /// One executor's attempt at the effect guarded by the claim on `logical_invocation_id`:
    /// `true` when this executor won the atomic claim (and so performs the effect).
    pub async fn claim_invocation(&self, tenant: &str, logical_invocation_id: &str) -> Result<bool, ServiceError> {
        let now = self.clock.now();
        let claim = self
            .store
            .claim_idempotency(
                tenant,
                CLAIM_ENDPOINT,
                logical_invocation_id,
                logical_invocation_id,
                now,
                now + CLAIM_LEASE_MS,
            )
            .await?;
        Ok(matches!(claim, IdempotencyClaim::Claimed))
    }

    /// Releases the seam's claim on `logical_invocation_id` (nothing of the probe is kept).
    pub async fn release_invocation(&self, tenant: &str, logical_invocation_id: &str) -> Result<(), ServiceError> {
        Ok(self.store.abandon_idempotency(tenant, CLAIM_ENDPOINT, logical_invocation_id).await?)
    }

    /// A fresh probe's business identity: each executor mints the logical invocation id from
    /// it alone, so every executor of one probe mints the same id.
    pub fn new_invocation_identity(&self, tenant: &str) -> String {
        format!("{tenant}\n{CLAIM_ENDPOINT}\n{}", self.ids.run_id())
    }
}

/// The logical invocation id of an effect with business identity `identity`.
pub fn logical_invocation_id(identity: &str) -> String {
    format!("lii-{}", &hex::encode(Sha256::digest(identity.as_bytes()))[..32])
}

struct Simulation {
    children: Vec<Value>,
    recorded: Value,
}
