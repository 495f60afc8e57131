//! Workflow definitions: the parsed document ([`definition`]), the compiled graph the engine
//! walks ([`graph`]), edge conditions ([`condition`]) and [`Workflow`], a definition that has
//! passed validation together with what this host can and cannot run of it.

pub mod checks;
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
    /// Each edge's `regex` condition (by edge index), compiled once at registration.
    pub edge_regexes: Vec<Option<regex::Regex>>,
}

impl Workflow {
    /// Validates `document` against the schema, the graph rules and the rules of [`checks`]
    /// and compiles it.
    ///
    /// Node kinds the host does not run do not make this fail: they are recorded as
    /// [`Workflow::gap`], so the workflow is stored but not runnable.
    pub fn compile(document: Value) -> Result<Self, DefinitionError> {
        Self::compile_within(document, crate::limits::MAX_RUN_DURATION_MS)
    }

    /// [`Workflow::compile`] for a tenant's registration on a host whose run-duration ceiling
    /// is `max_duration_ms`: a literal duration above it is refused (a run could never wait
    /// that long). [`Workflow::compile`] uses [`crate::limits::MAX_RUN_DURATION_MS`].
    pub fn compile_within(document: Value, max_duration_ms: u64) -> Result<Self, DefinitionError> {
        schema::validate_workflow(&document)?;
        let definition: WorkflowDefinition = serde_json::from_value(document.clone()).map_err(|error| {
            DefinitionError::Schema { violations: vec![json!({ "path": "/", "message": error.to_string() })] }
        })?;
        let graph = Graph::build(&definition)?;
        let edge_regexes = checks::check(&definition, max_duration_ms)?;
        if let Some((index, node_id, message)) = nodes::find_invalid_config(&definition) {
            return Err(DefinitionError::NodeConfig { node_id, path: format!("/nodes/{index}/config"), message });
        }
        let gap = nodes::find_gap(&definition);
        let content_hash = content_hash(&document);
        Ok(Self { document, definition, content_hash, graph, gap, edge_regexes })
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

/// Accepts the test harness's spelling of a definition (`workflowId` for `id`,
/// `nodes[].nodeId` for `nodes[].id`, no `name`): a document that lacks the canonical field is
/// rewritten to it; a canonical document is returned unchanged.
pub fn normalize_spelling(mut document: Value) -> Value {
    let Some(fields) = document.as_object_mut() else { return document };
    if !fields.contains_key("id") {
        if let Some(id) = fields.remove("workflowId") {
            fields.insert("id".into(), id);
        }
    }
    if !fields.contains_key("name") {
        if let Some(id) = fields.get("id").cloned() {
            fields.insert("name".into(), id);
        }
    }
    for node in fields.get_mut("nodes").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(node) = node.as_object_mut().filter(|node| !node.contains_key("id")) {
            if let Some(id) = node.remove("nodeId") {
                node.insert("id".into(), id);
            }
        }
    }
    document
}

/// For the test harness's registrations, which may list nodes without edges (the reference
/// host runs `nodes[]` in array order): a document without `edges` gets them in array order,
/// plus the loop edge from a trailing `core.dispatch` back to the supervisor before it.
pub fn chain_in_array_order(mut document: Value) -> Value {
    let Some(fields) = document.as_object_mut().filter(|fields| !fields.contains_key("edges")) else {
        return document;
    };
    let nodes: Vec<(String, String)> = fields
        .get("nodes")
        .and_then(Value::as_array)
        .map(|nodes| {
            nodes
                .iter()
                .filter_map(|node| {
                    let id = node.get("id").or_else(|| node.get("nodeId"))?.as_str()?.to_owned();
                    Some((id, node.get("typeId")?.as_str()?.to_owned()))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut edges: Vec<Value> = nodes
        .windows(2)
        .map(|pair| json!({ "id": format!("{}-{}", pair[0].0, pair[1].0), "sourceNodeId": pair[0].0, "targetNodeId": pair[1].0 }))
        .collect();
    let supervisor = nodes.iter().find(|(_, type_id)| type_id == graph::SUPERVISOR_TYPE_ID);
    if let (Some((last, last_type)), Some((supervisor, _))) = (nodes.last(), supervisor) {
        if last_type == crate::engine::DISPATCH_TYPE_ID {
            edges.push(
                json!({ "id": format!("{last}-{supervisor}"), "sourceNodeId": last, "targetNodeId": supervisor }),
            );
        }
    }
    fields.insert("edges".into(), Value::Array(edges));
    document
}

/// `sha256:<hex>` over the JSON text of `document` (serde_json writes object keys sorted,
/// so equal documents hash equally).
pub fn content_hash(document: &Value) -> String {
    let text = serde_json::to_string(document).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}
