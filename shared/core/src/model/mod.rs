//! Workflow definitions: the parsed document ([`definition`]), the compiled graph the engine
//! walks ([`graph`]), edge conditions ([`condition`]) and [`Workflow`], a definition that has
//! passed validation together with what this host can and cannot run of it.

pub mod condition;
pub mod definition;
pub mod graph;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::error::DefinitionError;
use crate::nodes;
use crate::schema;
pub use definition::{EdgeDef, NodeDef, PortValue, VariableDef, WorkflowDefinition};
pub use graph::Graph;

/// What a definition needs that this host does not implement. A workflow with a gap is
/// stored (it can be read back) but `POST /v1/runs` refuses it with `capability_required`.
#[derive(Debug, Clone, PartialEq)]
pub struct CapabilityGap {
    /// The capability a host would have to advertise, e.g. `dispatch.supported`.
    pub required_capability: String,
    /// The node type that needs it, when a node does.
    pub offending_type_id: Option<String>,
    /// The node that needs it, when a node does.
    pub node_id: Option<String>,
    /// Human explanation.
    pub message: String,
}

impl CapabilityGap {
    /// Envelope details: `{requiredCapability, offendingTypeId?, nodeId?}`.
    pub fn details(&self) -> Value {
        let mut details = json!({ "requiredCapability": self.required_capability });
        if let Some(type_id) = &self.offending_type_id {
            details["offendingTypeId"] = json!(type_id);
        }
        if let Some(node_id) = &self.node_id {
            details["nodeId"] = json!(node_id);
        }
        details
    }
}

/// A validated workflow definition, ready for the engine.
#[derive(Debug, Clone)]
pub struct Workflow {
    /// The definition exactly as submitted (served back verbatim).
    pub document: Value,
    /// The parsed definition.
    pub definition: WorkflowDefinition,
    /// `sha256:<hex>` of the canonical JSON of `document`; runs pin it.
    pub content_hash: String,
    /// The graph: entry node, adjacency, loop edges.
    pub graph: Graph,
    /// `None` when this host runs every part of the definition.
    pub gap: Option<CapabilityGap>,
}

impl Workflow {
    /// Validates `document` against the schema and the graph rules and compiles it.
    ///
    /// Node kinds the host does not run do not make this fail: they are recorded as
    /// [`Workflow::gap`], so the workflow is stored but not runnable.
    pub fn compile(document: Value) -> Result<Self, DefinitionError> {
        schema::validate_workflow(&document)?;
        let definition: WorkflowDefinition = serde_json::from_value(document.clone()).map_err(|error| {
            DefinitionError::Schema { violations: vec![json!({ "path": "", "message": error.to_string() })] }
        })?;
        let graph = Graph::build(&definition)?;
        if let Some((node_id, message)) = nodes::find_invalid_config(&definition) {
            return Err(DefinitionError::NodeConfig { node_id, message });
        }
        let gap = nodes::find_gap(&definition);
        let content_hash = content_hash(&document);
        Ok(Self { document, definition, content_hash, graph, gap })
    }

    /// The workflow id.
    pub fn id(&self) -> &str {
        &self.definition.id
    }

    /// The node definition with `node_id`.
    pub fn node(&self, node_id: &str) -> Option<&NodeDef> {
        self.graph.index_of(node_id).map(|index| &self.definition.nodes[index])
    }
}

/// `sha256:<hex>` over the JSON text of `document` (serde_json writes object keys sorted,
/// so equal documents hash equally).
pub fn content_hash(document: &Value) -> String {
    let text = serde_json::to_string(document).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}
