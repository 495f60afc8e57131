//! `core.subWorkflow`: starts a child run of `config.workflowId` and waits for it to end.
//!
//! Config: `workflowId` (required), `waitForCompletion` (only `true` is served: the node
//! always waits), `onChildFailure` (`fail-parent`, the default, or `absorb`), `inputMapping`
//! (`{childVar: parentVar}`, folded over the child's defaults once, at creation),
//! `outputMapping` (`{parentVar: childVar}`, applied once when the child completes),
//! `propagateCancellation` (default `true`). The child's creation, the mappings and the
//! failure policy are carried out by the engine and the worker; this module validates the
//! config and asks for the child.

use serde_json::{Map, Value};

use super::{NodeContext, NodeKind, NodeOutcome};
use crate::interrupt::request::ConfigIssue;
use crate::run::RunError;

/// The `core.subWorkflow` kind.
pub(super) struct SubWorkflow;

/// The parsed config.
#[derive(Debug, Clone, PartialEq)]
pub struct SubWorkflowConfig {
    /// The child's workflow.
    pub workflow_id: String,
    /// `absorb` instead of failing the parent.
    pub absorb_failure: bool,
    /// `{childVar: parentVar}`.
    pub input_mapping: Vec<(String, String)>,
    /// `{parentVar: childVar}`.
    pub output_mapping: Vec<(String, String)>,
    /// Cancel the child when the parent is cancelled.
    pub propagate_cancellation: bool,
}

fn mapping(config: &Map<String, Value>, key: &str) -> Result<Vec<(String, String)>, String> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| {
                v.as_str().map(|v| (k.clone(), v.to_owned())).ok_or_else(|| format!("{key} values must be strings"))
            })
            .collect(),
        Some(_) => Err(format!("{key} must be an object of strings")),
    }
}

impl SubWorkflowConfig {
    /// Parses and checks a node's config.
    pub fn parse(config: &Map<String, Value>) -> Result<Self, String> {
        let workflow_id = config
            .get("workflowId")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or("core.subWorkflow needs config.workflowId")?
            .to_owned();
        let absorb_failure = match config.get("onChildFailure").and_then(Value::as_str) {
            None | Some("fail-parent") => false,
            Some("absorb") => true,
            Some(_) => return Err("onChildFailure must be `fail-parent` or `absorb`".into()),
        };
        if config.get("waitForCompletion").is_some_and(|wait| *wait == Value::Bool(false)) {
            return Err("waitForCompletion: false is not supported; the node always waits for its child".into());
        }
        Ok(Self {
            workflow_id,
            absorb_failure,
            input_mapping: mapping(config, "inputMapping")?,
            output_mapping: mapping(config, "outputMapping")?,
            propagate_cancellation: config.get("propagateCancellation").and_then(Value::as_bool).unwrap_or(true),
        })
    }
}

impl NodeKind for SubWorkflow {
    fn type_id(&self) -> &'static str {
        "core.subWorkflow"
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        SubWorkflowConfig::parse(config).map(|_| ()).map_err(ConfigIssue::Invalid)
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        match SubWorkflowConfig::parse(context.config) {
            Ok(config) => NodeOutcome::SpawnChild { workflow_id: config.workflow_id },
            Err(message) => NodeOutcome::Failed(RunError::new("validation_error", message)),
        }
    }
}
