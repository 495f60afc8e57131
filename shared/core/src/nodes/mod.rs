//! Node kinds. The engine's own *pure* kinds are one module each implementing [`NodeKind`]
//! ([`kind`] finds them; adding one touches its module and one line of `PURE_KINDS`): their
//! execution is pure — resolved inputs, config and the time in; an outcome out. Kinds with
//! side effects are [`crate::activity::Activity`]s, registered per backend in a
//! [`NodeRegistry`] (see `docs/architecture.md`, "Adding a work node").

pub mod agent;
pub mod cost_emit;
mod delay;
mod fail;
pub mod for_each;
mod gates;
mod identity;
pub mod mock_agent;
mod noop;
mod orchestration;
pub mod passthrough;
mod registry;
pub mod requires;
pub mod subworkflow;

pub use registry::NodeRegistry;

use serde_json::{Map, Value};

use crate::interrupt::request::{ConfigIssue, InterruptRequest};
use crate::model::definition::{PortRef, PortValue, WorkflowDefinition};
use crate::model::CapabilityGap;
use crate::run::RunError;
use crate::timefmt::Millis;

/// What a node's execution needs.
#[derive(Debug)]
pub struct NodeContext<'a> {
    /// The node's id.
    pub node_id: &'a str,
    /// The node's `config`.
    pub config: &'a Map<String, Value>,
    /// The node's input ports, resolved (variables, connections, literals).
    pub inputs: Map<String, Value>,
    /// The run's variables.
    pub variables: &'a Map<String, Value>,
    /// Now.
    pub now: Millis,
    /// The run's `configurable` (run options, fixed at creation).
    pub configurable: Option<&'a Value>,
    /// Whether the run may use mocks (a workflow of the global namespace, or a `test:seams`
    /// caller on a host with its seams on): a mock provider, a mock agent.
    pub mocks_allowed: bool,
}

/// What a node's execution produced.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeOutcome {
    /// Done, with outputs (merged into the run's variables).
    Completed(Map<String, Value>),
    /// Failed; the run fails.
    Failed(RunError),
    /// Park until the given time; then the node completes with no outputs.
    SleepUntil(Millis),
    /// Start a child run of this workflow and wait for it to end.
    SpawnChild {
        /// The child's workflow id.
        workflow_id: String,
    },
    /// Suspend on an interrupt until it is resolved.
    Suspend(InterruptRequest),
    /// Record the supervisor's next decision (`core.orchestrator.supervisor`).
    Decide,
    /// Act on the latest recorded decision (`core.dispatch`).
    Dispatch,
    /// Run the node's child workflow once per item (`vendor.trellis.forEach`).
    ForEach,
    /// Play the node's scripted agent turn (`core.conformance.mock-agent`): the engine emits
    /// its `agent.*` events, then completes the node or suspends it on low confidence.
    ScriptedAgent,
    /// Roll these cost figures into the run's cost rollup, then complete with no outputs
    /// (`conformance.cost.emit`).
    RecordCost(crate::ai::usage::CostAttributes),
}

/// One node kind.
pub trait NodeKind: Sync {
    /// The `typeId` it implements.
    fn type_id(&self) -> &'static str;
    /// Checks a node's config when its workflow is registered (the default accepts any).
    fn check(&self, node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        let _ = (node_id, config);
        Ok(())
    }
    /// The runtime capabilities the node needs (`requires`); one the host does not provide
    /// fails the node with `capability_not_provided` before it executes.
    fn requires(&self) -> &'static [&'static str] {
        &[]
    }
    /// Runs the node.
    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome;
}

/// The engine's pure node kinds.
static PURE_KINDS: &[&dyn NodeKind] = &[
    &noop::Noop,
    &passthrough::Parallel,
    &passthrough::Merge,
    &delay::Delay,
    &delay::Hold,
    &identity::Identity,
    &fail::Fail,
    &subworkflow::SubWorkflow,
    &gates::ApprovalGate,
    &gates::ClarificationGate,
    &gates::Interrupt,
    &orchestration::Supervisor,
    &orchestration::Dispatch,
    &requires::RequiresMissing,
    &mock_agent::MockAgent,
    &cost_emit::CostEmit,
    &for_each::ForEach,
];

/// The conformance-only kinds: runnable in the read-only global namespace and for runs
/// whose `mocks_allowed` holds; refused at a tenant's registration unless the caller holds
/// the test scope on a host with its seams on.
pub const MOCK_TYPE_IDS: [&str; 2] = [mock_agent::TYPE_ID, cost_emit::TYPE_ID];

/// A conformance-only kind run where mocks are not allowed: `typeId_refused`.
pub(crate) fn refused_mock(type_id: &str) -> RunError {
    RunError::new(
        "typeId_refused",
        format!(
            "`{type_id}` is conformance-only: it runs in the host's own (global) workflows or for runs created by \
             a test-scope key with the test seams on"
        ),
    )
}

/// The first node of `definition` with a conformance-only kind, as `(node index, node id,
/// type id)`.
pub fn find_mock_node(definition: &WorkflowDefinition) -> Option<(usize, &str, &str)> {
    definition
        .nodes
        .iter()
        .enumerate()
        .find(|(_, node)| MOCK_TYPE_IDS.contains(&node.type_id.as_str()))
        .map(|(index, node)| (index, node.id.as_str(), node.type_id.as_str()))
}

/// The pure kind implementing `type_id`, if the engine has one.
pub fn kind(type_id: &str) -> Option<&'static dyn NodeKind> {
    PURE_KINDS.iter().copied().find(|kind| kind.type_id() == type_id)
}

/// The engine's pure type ids.
pub(crate) fn pure_type_ids() -> Vec<&'static str> {
    PURE_KINDS.iter().map(|kind| kind.type_id()).collect()
}

/// A node's config check: its pure kind's, or its activity's. A model-backed supervisor
/// (a pure kind that runs as an activity, [`NodeRegistry::activity_for`]) gets both: the
/// pure kind's, then its registered executor's (templates, the provider this host serves).
fn check_config(
    registry: &NodeRegistry,
    node_id: &str,
    type_id: &str,
    config: &Map<String, Value>,
) -> Option<Result<(), ConfigIssue>> {
    match kind(type_id) {
        Some(kind) => Some(kind.check(node_id, config).and_then(|()| match registry.activity_for(type_id, config) {
            Some(activity) => activity.check(node_id, config),
            None => Ok(()),
        })),
        None => registry.activity(type_id).map(|activity| activity.check(node_id, config)),
    }
}

/// The capability a type id is gated on, by the OpenWOP refusal contract; other unknown
/// type ids are reported as `nodeTypes.<typeId>`.
fn capability_for(type_id: &str) -> String {
    match type_id {
        "core.orchestrator.supervisor" => "orchestrator.supported".to_owned(),
        "core.dispatch" => "dispatch.supported".to_owned(),
        "core.conversationGate" => "conversationPrimitive".to_owned(),
        other => format!("nodeTypes.{other}"),
    }
}

/// The first thing in `definition` this host cannot run, if any.
pub fn find_gap(definition: &WorkflowDefinition, registry: &NodeRegistry) -> Option<CapabilityGap> {
    for node in &definition.nodes {
        let Some(checked) = check_config(registry, &node.id, &node.type_id, &node.config) else {
            return Some(CapabilityGap {
                required_capability: capability_for(&node.type_id),
                offending_type_id: Some(node.type_id.clone()),
                node_id: Some(node.id.clone()),
                message: if node.type_id.starts_with("vendor.trellis.aws.") {
                    format!(
                        "node type `{}` runs only on the AWS backend (to call a function URL, use core.http.request)",
                        node.type_id
                    )
                } else {
                    format!("this host does not run node type `{}`", node.type_id)
                },
            });
        };
        let notify =
            node.settings.get(crate::interrupt::callback::NOTIFY_URL_SETTING).and_then(serde_json::Value::as_str);
        if notify.is_some_and(crate::interrupt::callback::is_queue_target) && !registry.queue_notifies() {
            return Some(CapabilityGap {
                required_capability: crate::interrupt::callback::QUEUE_NOTIFY_CAPABILITY.to_owned(),
                offending_type_id: Some(node.type_id.clone()),
                node_id: Some(node.id.clone()),
                message: format!(
                    "node `{}`: settings.notifyUrl names an SQS queue; only the AWS backend notifies workers on a queue",
                    node.id
                ),
            });
        }
        if let Err(ConfigIssue::Capability(capability)) = checked {
            return Some(CapabilityGap {
                required_capability: capability.to_owned(),
                offending_type_id: Some(node.type_id.clone()),
                node_id: Some(node.id.clone()),
                message: format!("node `{}` needs `{capability}`, which this host does not advertise", node.id),
            });
        }
        let uses_expression =
            node.inputs.values().any(|port| matches!(port, PortValue::Ref(PortRef::Expression { .. })));
        if uses_expression {
            return Some(CapabilityGap {
                required_capability: "expressions".to_owned(),
                offending_type_id: Some(node.type_id.clone()),
                node_id: Some(node.id.clone()),
                message: "this host has no expression language; expression inputs cannot be resolved".to_owned(),
            });
        }
    }
    definition.edges.iter().find(|edge| edge.condition.as_ref().is_some_and(|c| c.kind == "expression")).map(|edge| {
        CapabilityGap {
            required_capability: "expressions".to_owned(),
            offending_type_id: None,
            node_id: Some(edge.source_node_id.clone()),
            message: format!("edge `{}` uses an expression condition; this host has no expression language", edge.id),
        }
    })
}

/// The first node whose config its kind refuses, as `(node index, node id, reason)`; a
/// `core.dispatch` without a supervisor in the workflow is refused too (RFC 0007 §H1).
pub fn find_invalid_config(
    definition: &WorkflowDefinition,
    registry: &NodeRegistry,
) -> Option<(usize, String, String)> {
    let invalid = definition.nodes.iter().enumerate().find_map(|(index, node)| {
        match check_config(registry, &node.id, &node.type_id, &node.config)? {
            Err(ConfigIssue::Invalid(message)) => Some((index, node.id.clone(), message)),
            _ => None,
        }
    });
    let has_supervisor = definition.nodes.iter().any(|node| node.type_id == crate::model::graph::SUPERVISOR_TYPE_ID);
    invalid.or_else(|| {
        definition
            .nodes
            .iter()
            .enumerate()
            .find(|(_, node)| node.type_id == crate::engine::DISPATCH_TYPE_ID && !has_supervisor)
            .map(|(index, node)| {
                let message = "core.dispatch needs a core.orchestrator.supervisor in the same workflow".to_owned();
                (index, node.id.clone(), message)
            })
    })
}

/// A duration in milliseconds: an integer (an integral JSON number) from 0 to `ceiling`;
/// anything else (negative, fractional, too large, not a number) is `None`.
pub(crate) fn duration_ms(value: &Value, ceiling: u64) -> Option<u64> {
    let ms = value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|ms| ms.is_finite() && *ms >= 0.0 && ms.fract() == 0.0 && *ms <= ceiling as f64)
            .map(|ms| ms as u64)
    })?;
    (ms <= ceiling).then_some(ms)
}
