//! Workflow definitions: the parsed document ([`definition`]), the compiled graph the engine
//! walks ([`graph`]), edge conditions ([`condition`]) and [`Workflow`], a definition that has
//! passed validation together with what this host can and cannot run of it.

pub mod checks;
pub mod condition;
pub mod definition;
pub mod fanout_rules;
pub mod graph;

use std::sync::Arc;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::activity::policy::{NodePolicy, RetryPolicy, Timeouts};
use crate::activity::Activity;
use crate::error::DefinitionError;
use crate::nodes::{self, NodeRegistry};
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
    /// Each node's activity (by node index), `None` for the engine's pure kinds.
    pub activities: Vec<Option<ActivityNode>>,
}

/// An activity node as compiled: its kind (with the executor) and its policy in force.
#[derive(Debug, Clone)]
pub struct ActivityNode {
    /// The kind and its executor.
    pub kind: Arc<dyn Activity>,
    /// The retry policy in force (explicit, or `maxRetries` for an idempotent call, or none).
    pub retry: RetryPolicy,
    /// `settings.timeouts`.
    pub timeouts: Timeouts,
    /// One attempt's budget: the smaller of the kind's own timeout and `attemptMs`.
    pub attempt_ms: u64,
    /// Whether a rerun may take its result from the source's log (`settings.cacheable`,
    /// else the kind's word for its config; see [`crate::cache`]).
    pub cacheable: bool,
}

/// The host's ceilings a registration is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The longest duration a definition may name (delays, interrupt timeouts).
    pub max_duration_ms: u64,
    /// The longest attempt an activity may be given (on AWS: the dispatcher's timeout less
    /// a commit margin).
    pub max_attempt_ms: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_duration_ms: crate::limits::MAX_RUN_DURATION_MS,
            max_attempt_ms: crate::activity::policy::MAX_POLICY_MS,
        }
    }
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
        let bounds = Bounds { max_duration_ms, ..Bounds::default() };
        Self::compile_with(document, &NodeRegistry::new(), bounds)
    }

    /// Compiles `document` for a host running the kinds of `registry`, within `bounds`.
    pub fn compile_with(document: Value, registry: &NodeRegistry, bounds: Bounds) -> Result<Self, DefinitionError> {
        let max_duration_ms = bounds.max_duration_ms;
        schema::validate_workflow(&document)?;
        let definition: WorkflowDefinition = serde_json::from_value(document.clone()).map_err(|error| {
            DefinitionError::Schema { violations: vec![json!({ "path": "/", "message": error.to_string() })] }
        })?;
        let graph = Graph::build(&definition)?;
        let edge_regexes = checks::check(&definition, max_duration_ms)?;
        fanout_rules::check(&definition)?;
        if let Some((index, node_id, message)) = nodes::find_invalid_config(&definition, registry) {
            return Err(DefinitionError::NodeConfig { node_id, path: format!("/nodes/{index}/config"), message });
        }
        let activities = compile_activities(&definition, registry, bounds)?;
        let gap = nodes::find_gap(&definition, registry);
        let content_hash = content_hash(&document);
        Ok(Self { document, definition, content_hash, graph, gap, edge_regexes, activities })
    }

    /// The workflow id.
    pub fn id(&self) -> &str {
        &self.definition.id
    }

    /// The activity of node `node_id`, when it is one.
    pub fn activity(&self, node_id: &str) -> Option<&ActivityNode> {
        self.graph.index_of(node_id).and_then(|index| self.activities[index].as_ref())
    }

    /// The node definition with `node_id`.
    pub fn node(&self, node_id: &str) -> Option<&NodeDef> {
        self.graph.index_of(node_id).map(|index| &self.definition.nodes[index])
    }
}

/// Each activity node's policy, checked: `settings` fields by [`NodePolicy::parse`], and an
/// attempt budget (the kind's own timeout or `attemptMs`) within `bounds.max_attempt_ms`.
/// Every node's `credentialsRef` is checked too ([`crate::secrets::check_ref`]), and an
/// activity that needs one ([`Activity::needs_credentials`]) is refused without it.
fn compile_activities(
    definition: &WorkflowDefinition,
    registry: &NodeRegistry,
    bounds: Bounds,
) -> Result<Vec<Option<ActivityNode>>, DefinitionError> {
    let max_retries = definition.settings.get("maxRetries").and_then(Value::as_u64).unwrap_or(0);
    let max_retries = u32::try_from(max_retries).unwrap_or(u32::MAX);
    let mut compiled = Vec::with_capacity(definition.nodes.len());
    for (index, node) in definition.nodes.iter().enumerate() {
        if let Some(reference) = &node.credentials_ref {
            crate::secrets::check_ref(reference).map_err(|reason| DefinitionError::Invalid {
                path: format!("/nodes/{index}/credentialsRef"),
                rule: "credentials_ref",
                message: format!("node `{}`: credentialsRef {reason}", node.id),
            })?;
        }
        let Some(kind) = registry.activity_for(&node.type_id, &node.config) else {
            compiled.push(None);
            continue;
        };
        if node.credentials_ref.is_none() && kind.needs_credentials(&node.config) {
            return Err(DefinitionError::Invalid {
                path: format!("/nodes/{index}/credentialsRef"),
                rule: "credentials_ref",
                message: format!(
                    "node `{}` ({}) authenticates its calls (config.auth) and needs a credentialsRef naming the secret",
                    node.id, node.type_id
                ),
            });
        }
        let policy = NodePolicy::parse(&node.settings).map_err(|issue| DefinitionError::Invalid {
            path: format!("/nodes/{index}{}", issue.path),
            rule: "settings",
            message: format!("node `{}`: {}", node.id, issue.message),
        })?;
        let own = kind.attempt_timeout_ms(&node.config);
        let mut attempt_ms = policy.timeouts.attempt_ms.map_or(own, |ms| ms.min(own));
        // A kind's default timeout (no `config.timeoutMs`, no `attemptMs`) adapts to the host:
        // a node that asked for nothing is never refused for a default the host cannot run
        // (e.g. a model call's 120 s default under a 60 s Lambda dispatcher).
        if policy.timeouts.attempt_ms.is_none() && !node.config.contains_key("timeoutMs") {
            attempt_ms = attempt_ms.min(bounds.max_attempt_ms);
        }
        let asked = policy.timeouts.attempt_ms.filter(|&ms| ms > bounds.max_attempt_ms);
        if asked.is_some() || attempt_ms > bounds.max_attempt_ms {
            let (path, ms) = match asked {
                Some(ms) => (format!("/nodes/{index}/settings/timeouts/attemptMs"), ms),
                None => (format!("/nodes/{index}/config/timeoutMs"), attempt_ms),
            };
            return Err(DefinitionError::Invalid {
                path,
                rule: "attempt_timeout",
                message: format!(
                    "node `{}` gives one attempt {ms} ms; this host runs an attempt for at most {} ms",
                    node.id, bounds.max_attempt_ms
                ),
            });
        }
        let retry = policy.effective_retry(kind.idempotent(&node.config), max_retries);
        let cacheable = policy.cacheable.unwrap_or_else(|| kind.cacheable(&node.config));
        compiled.push(Some(ActivityNode {
            kind: kind.clone(),
            retry,
            timeouts: policy.timeouts,
            attempt_ms,
            cacheable,
        }));
    }
    Ok(compiled)
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
