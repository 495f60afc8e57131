//! The model-backed supervisor tick (see [`crate::orchestrator::model`]): a supervisor whose
//! config names a model route is compiled as an activity node (the host registers the
//! executor, [`crate::nodes::NodeRegistry::with_supervisor_model`]). When it becomes ready
//! the tick's admission checks run first (the same as a scripted tick: the run's
//! orchestrator, `iterationCap`); then the activity starts with the run's orchestration
//! context as the input [`CONTEXT_INPUT`], so the request every attempt sends is fixed at
//! the tick. Its completed result is not a plain completion: the answer is read as a
//! proposal and goes down the same path as a scripted one (CP-1 hold, `runOrchestrator.decided`,
//! RFC 0039 escalation). An answer that is not a valid decision fails the node with
//! `response_schema_invalid` (the executor has already spent its one repair turn).

use serde_json::{json, Map, Value};

use super::progress::Transition;
use super::ASK_USER_VARIABLE;
use crate::model::definition::NodeDef;
use crate::orchestrator::model::{self, ModelConfig, CONTEXT_INPUT};
use crate::run::RunError;

/// The code of a supervisor answer that is not a valid `OrchestratorDecision` (the
/// `ctx.callAI` structured-output failure code).
pub const INVALID_ANSWER: &str = "response_schema_invalid";

impl Transition<'_> {
    /// A model-backed supervisor is ready: admit the tick, then start the model call.
    pub(super) fn start_supervisor_model(&mut self, definition: &NodeDef, mut inputs: Map<String, Value>) {
        let node_id = definition.id.as_str();
        if let Err(refused) = self.admission(&definition.config, definition.agent.as_ref()) {
            self.emit_node_started(node_id, &definition.type_id, 0);
            return self.refuse_decision(node_id, refused);
        }
        let orchestrator = self.state.orchestrator.as_ref();
        let tick = orchestrator.map_or(0, |o| o.decisions) + 1;
        let history = orchestrator.map(|o| o.history.as_slice()).unwrap_or_default();
        let context = model::context(tick, history, self.state.variables.get(ASK_USER_VARIABLE));
        inputs.insert(CONTEXT_INPUT.into(), context);
        self.start_activity(definition, inputs);
    }

    /// The model call answered: its structured answer (`outputs.data`) is the tick's proposal.
    pub(super) fn supervisor_answered(&mut self, node_id: &str, outputs: &Map<String, Value>) {
        let Some(definition) = self.workflow.node(node_id).cloned() else { return };
        let agent_id = crate::orchestrator::agent_id(&definition.config, definition.agent.as_ref());
        let config = match ModelConfig::parse(&definition.config) {
            Ok(config) => config,
            Err(message) => return self.fail_node(node_id, RunError::new("validation_error", message)),
        };
        let read = match outputs.get("data") {
            Some(answer) => model::read_answer(&config, answer),
            None => Err(vec![json!({ "path": "/", "message": "the model gave no structured answer" })]),
        };
        match read {
            Ok(proposal) => self.propose(node_id, &agent_id, proposal),
            Err(violations) => {
                let mut error =
                    RunError::new(INVALID_ANSWER, "the supervisor's answer is not a valid OrchestratorDecision");
                error.details = Some(json!({ "violations": violations }));
                self.fail_node(node_id, error);
            }
        }
    }
}

#[cfg(test)]
#[path = "supervisor_model_tests.rs"]
mod tests;
