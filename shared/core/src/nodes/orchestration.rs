//! `core.orchestrator.supervisor` and `core.dispatch`. Both need the run's orchestrator
//! record, so they only check their config here and hand execution to the engine
//! ([`crate::engine`]'s orchestration rows): the supervisor records one decision per tick,
//! dispatch acts on the latest one. A supervisor that names a model route is an activity
//! node on a host that registered the model-backed executor (its config is checked here too).

use serde_json::{Map, Value};

use super::{NodeContext, NodeKind, NodeOutcome};
use crate::interrupt::request::ConfigIssue;
use crate::orchestrator::dispatch::DispatchConfig;
use crate::orchestrator::{plan_of, Decision};

/// `core.orchestrator.supervisor`.
pub(super) struct Supervisor;
/// `core.dispatch`.
pub(super) struct Dispatch;

impl NodeKind for Supervisor {
    fn type_id(&self) -> &'static str {
        crate::model::graph::SUPERVISOR_TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        if crate::orchestrator::model::routed(config) {
            crate::orchestrator::model::ModelConfig::parse(config).map_err(ConfigIssue::Invalid)?;
        }
        if let Some(pending) = config.get("mockPendingDecision") {
            Decision::parse(pending)
                .map_err(|problem| ConfigIssue::Invalid(format!("mockPendingDecision: {problem}")))?;
        }
        if config.get("mockConfidence").is_some_and(|c| !c.as_f64().is_some_and(|c| (0.0..=1.0).contains(&c))) {
            return Err(ConfigIssue::Invalid("`mockConfidence` must be a number between 0 and 1".into()));
        }
        if config.get("iterationCap").is_some_and(|cap| cap.as_u64().is_none_or(|cap| cap < 1)) {
            return Err(ConfigIssue::Invalid("`iterationCap` must be an integer ≥ 1".into()));
        }
        if let Some(agent) = config.get("agentId") {
            if !agent.as_str().is_some_and(|id| (3..=256).contains(&id.len())) {
                return Err(ConfigIssue::Invalid("`agentId` must be a string of 3 to 256 characters".into()));
            }
        }
        if let Some(plan) = plan_of(config) {
            let Some(entries) = plan.as_array() else {
                return Err(ConfigIssue::Invalid("`mockDispatchPlan` must be an array of decisions".into()));
            };
            for (index, entry) in entries.iter().enumerate() {
                Decision::parse(entry)
                    .map_err(|problem| ConfigIssue::Invalid(format!("plan entry {index}: {problem}")))?;
            }
        }
        Ok(())
    }

    fn execute(&self, _context: &NodeContext<'_>) -> NodeOutcome {
        NodeOutcome::Decide
    }
}

impl NodeKind for Dispatch {
    fn type_id(&self) -> &'static str {
        crate::engine::DISPATCH_TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        DispatchConfig::parse(config).map(|_| ()).map_err(ConfigIssue::Invalid)
    }

    fn execute(&self, _context: &NodeContext<'_>) -> NodeOutcome {
        NodeOutcome::Dispatch
    }
}
