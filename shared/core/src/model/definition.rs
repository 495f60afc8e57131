//! The OpenWOP v1 `WorkflowDefinition`, parsed. Only the fields the engine reads are typed;
//! the document itself is kept verbatim next to it.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

/// A workflow definition (`schemas/workflow-definition.schema.json`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowDefinition {
    /// Workflow id (`^[a-z][a-z0-9_-]*$`).
    pub id: String,
    /// Display name.
    pub name: String,
    /// Author-given version label; `"1"` when absent.
    #[serde(default = "default_version")]
    pub version: String,
    /// Nodes, in authoring order.
    pub nodes: Vec<NodeDef>,
    /// Edges.
    #[serde(default)]
    pub edges: Vec<EdgeDef>,
    /// Declared variables with defaults.
    #[serde(default)]
    pub variables: Vec<VariableDef>,
    /// JSON Schema for `configurable` (validation of it is not implemented; see `nodes::find_gap`).
    #[serde(default)]
    pub configurable_schema: Option<Value>,
    /// `WorkflowSettings` (`maxRetries` is read: the retry budget of idempotent activity
    /// nodes without their own `settings.retry`).
    #[serde(default)]
    pub settings: Map<String, Value>,
}

fn default_version() -> String {
    "1".to_owned()
}

/// One node.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDef {
    /// Node id, unique in the workflow.
    pub id: String,
    /// Node kind, e.g. `core.delay`.
    pub type_id: String,
    /// Per-kind constants.
    #[serde(default)]
    pub config: Map<String, Value>,
    /// Input ports.
    #[serde(default)]
    pub inputs: BTreeMap<String, PortValue>,
    /// The node's agent (`AgentRef`), if any.
    #[serde(default)]
    pub agent: Option<Value>,
    /// The node's `settings` (opaque in the spec; Trellis reads `retry`, `timeouts` and
    /// `idempotent` for activity nodes, see [`crate::activity::policy`]).
    #[serde(default)]
    pub settings: Map<String, Value>,
    /// `credentialsRef`: an opaque reference to the secret the node's calls use, resolved by
    /// the host's [`crate::secrets::SecretResolver`] inside each attempt (its syntax is
    /// [`crate::secrets::check_ref`], checked at registration).
    #[serde(default)]
    pub credentials_ref: Option<String>,
}

/// Where a node input comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PortValue {
    /// A tagged reference (`static`, `variable`, `connection`, `expression`).
    Ref(PortRef),
    /// A bare literal (`5`, `"text"`), used as is.
    Literal(Value),
}

/// The tagged forms of [`PortValue`].
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum PortRef {
    /// A constant.
    Static {
        /// The value.
        value: Value,
    },
    /// A run variable.
    #[serde(rename_all = "camelCase")]
    Variable {
        /// Variable name.
        variable_name: String,
    },
    /// Another node's output.
    #[serde(rename_all = "camelCase")]
    Connection {
        /// Producing node.
        node_id: String,
        /// Key in its outputs.
        output_key: String,
    },
    /// An expression; this host has no expression language, so such a workflow is not runnable.
    Expression {
        /// The expression text.
        expression: String,
    },
}

/// One edge.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EdgeDef {
    /// Edge id.
    pub id: String,
    /// Source node.
    pub source_node_id: String,
    /// Target node.
    pub target_node_id: String,
    /// Optional routing condition.
    #[serde(default)]
    pub condition: Option<EdgeConditionDef>,
    /// When the edge's target may run, given how its sources ended (`all_success` when
    /// absent; see [`crate::model::graph::TriggerRule`]).
    #[serde(default)]
    pub trigger_rule: Option<String>,
}

/// An edge condition as written.
#[derive(Debug, Clone, Deserialize)]
pub struct EdgeConditionDef {
    /// `equals`, `notEquals`, `contains`, `regex`, `truthy`, `falsy` or `expression`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Path of the left operand: `output.<key>…` for the source node's outputs, otherwise a
    /// run variable path.
    #[serde(default)]
    pub left: Option<String>,
    /// Right operand.
    #[serde(default)]
    pub right: Option<Value>,
    /// Expression text (`expression` conditions).
    #[serde(default)]
    pub expression: Option<String>,
}

/// A declared variable.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VariableDef {
    /// Name.
    pub name: String,
    /// `string`, `number`, `boolean`, `object` or `array`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Must have a value once defaults and inputs are folded.
    #[serde(default)]
    pub required: bool,
    /// Seed value.
    #[serde(default)]
    pub default_value: Option<Value>,
    /// Masked on external surfaces.
    #[serde(default)]
    pub sensitive: bool,
}

impl VariableDef {
    /// Whether `value` has this variable's declared JSON type.
    pub fn accepts(&self, value: &Value) -> bool {
        match self.kind.as_str() {
            "string" => value.is_string(),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "object" => value.is_object(),
            "array" => value.is_array(),
            _ => true,
        }
    }
}
