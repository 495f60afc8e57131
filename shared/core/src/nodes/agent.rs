//! `vendor.trellis.agent`: a model-backed agent with tools, run as a bounded loop whose
//! state the engine keeps (see `engine::agent_loop` and `docs/agents.md`). This module parses
//! and checks the node's config, the part every backend shares; the activity that executes a
//! step (a model turn, an HTTP tool call) adds the checks that need its crate (Tier-1 input
//! schemas, the `core.http.request` checker) and is registered by each composition root.
//!
//! Config: `agentId?` (3–256 chars), `route?` (`"provider/model"`, or `provider?` /
//! `model?`), `instructions` (the system prompt, a template), `prompt?` (the first user
//! message, a template; default: the node's inputs as JSON), `tools[]`, `maxTurns?` (1–
//! [`MAX_TURNS`], default [`DEFAULT_MAX_TURNS`]), `responseSchema?`, `temperature?`,
//! `maxTokens?`, `timeoutMs?`. A tool is `{name, description, inputSchema, http}` (a
//! `core.http.request` config whose templates see the call's arguments as `inputs`) or
//! `{name, description, inputSchema, workflowId}` (a child run whose inputs are the arguments).

use serde_json::{json, Map, Value};

/// The kind's `typeId`.
pub const TYPE_ID: &str = "vendor.trellis.agent";
/// `maxTurns` when the config sets none.
pub const DEFAULT_MAX_TURNS: u32 = 8;
/// The largest `maxTurns`.
pub const MAX_TURNS: u32 = 50;
/// The most tools one agent may have.
pub const MAX_TOOLS: usize = 64;
/// The error code of a loop that used its `maxTurns` while the model still asked for tools.
pub const MAX_TURNS_CODE: &str = "agent_max_turns";

/// The config fields.
const FIELDS: &[&str] = &[
    "agentId",
    "route",
    "provider",
    "model",
    "instructions",
    "prompt",
    "tools",
    "maxTurns",
    "responseSchema",
    "temperature",
    "maxTokens",
    "timeoutMs",
];

/// How a tool is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolTransport {
    /// A `core.http.request` config.
    Http(Map<String, Value>),
    /// A child run of this workflow.
    Workflow(String),
}

impl ToolTransport {
    /// `agent.toolCalled.transport` (`http`, or `native` for a workflow tool: the event's
    /// enum has no `workflow`; `toolTransport` says which).
    pub fn event_transport(&self) -> &'static str {
        match self {
            Self::Http(_) => "http",
            Self::Workflow(_) => "native",
        }
    }

    /// `http` or `workflow`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Http(_) => "http",
            Self::Workflow(_) => "workflow",
        }
    }
}

/// One tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// `name` (`^[a-zA-Z0-9_-]{1,64}$`, unique in the node).
    pub name: String,
    /// `description`.
    pub description: String,
    /// `inputSchema` (a JSON Schema object).
    pub input_schema: Value,
    /// How it is reached.
    pub transport: ToolTransport,
}

impl Tool {
    /// What a model is told about it: `{name, description, inputSchema}`.
    pub fn definition(&self) -> Value {
        json!({ "name": self.name, "description": self.description, "inputSchema": self.input_schema })
    }
}

/// A parsed agent config (the engine's part; prompts and model settings are the activity's).
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// `agentId`.
    pub agent_id: Option<String>,
    /// `tools`, in order.
    pub tools: Vec<Tool>,
    /// `maxTurns`.
    pub max_turns: u32,
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl AgentConfig {
    /// Parses and checks a node's config; the message names the field path and the rule.
    pub fn parse(config: &Map<String, Value>) -> Result<Self, String> {
        if let Some(unknown) = config.keys().find(|key| !FIELDS.contains(&key.as_str())) {
            return Err(format!("config.{unknown} is not a {TYPE_ID} field (allowed: {})", FIELDS.join(", ")));
        }
        let agent_id = match config.get("agentId") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if (3..=256).contains(&id.chars().count()) => Some(id.clone()),
            Some(_) => return Err("config.agentId must be a string of 3 to 256 characters".to_owned()),
        };
        if let Some(route) = config.get("route").filter(|route| !route.is_null()) {
            let valid = route
                .as_str()
                .and_then(|route| route.split_once('/'))
                .is_some_and(|(provider, model)| !provider.is_empty() && !model.is_empty());
            if !valid {
                return Err("config.route must be a string `provider/model`".to_owned());
            }
            if config.get("provider").is_some() || config.get("model").is_some() {
                return Err("config.route and config.provider/config.model are exclusive".to_owned());
            }
        }
        match config.get("instructions") {
            Some(Value::String(text)) if !text.trim().is_empty() => {}
            _ => return Err("config.instructions is required and must be a non-empty string".to_owned()),
        }
        let max_turns = match config.get("maxTurns") {
            None | Some(Value::Null) => DEFAULT_MAX_TURNS,
            Some(value) => value
                .as_u64()
                .filter(|turns| (1..=u64::from(MAX_TURNS)).contains(turns))
                .and_then(|turns| u32::try_from(turns).ok())
                .ok_or_else(|| format!("config.maxTurns must be an integer from 1 to {MAX_TURNS}"))?,
        };
        let tools = match config.get("tools") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(entries)) if entries.len() <= MAX_TOOLS => entries
                .iter()
                .enumerate()
                .map(|(index, entry)| Tool::parse(entry, &format!("config.tools[{index}]")))
                .collect::<Result<Vec<_>, _>>()?,
            Some(Value::Array(_)) => return Err(format!("config.tools has more than {MAX_TOOLS} entries")),
            Some(_) => return Err("config.tools must be an array".to_owned()),
        };
        for (index, tool) in tools.iter().enumerate() {
            if tools[..index].iter().any(|earlier| earlier.name == tool.name) {
                return Err(format!("config.tools[{index}].name `{}` is not unique", tool.name));
            }
        }
        Ok(Self { agent_id, tools, max_turns })
    }

    /// The tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|tool| tool.name == name)
    }

    /// The agent id the node's events carry: `config.agentId`, else the node's
    /// `agent.agentId` (3 to 256 characters), else `host:agent:<nodeId>`.
    pub fn resolve_agent_id(&self, agent: Option<&Value>, node_id: &str) -> String {
        self.agent_id
            .clone()
            .or_else(|| {
                agent
                    .and_then(|agent| agent.get("agentId"))
                    .and_then(Value::as_str)
                    .filter(|id| (3..=256).contains(&id.chars().count()))
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| format!("host:agent:{node_id}"))
    }
}

impl Tool {
    fn parse(entry: &Value, at: &str) -> Result<Self, String> {
        let fields = entry.as_object().ok_or_else(|| format!("{at} must be an object"))?;
        let allowed = ["name", "description", "inputSchema", "http", "workflowId"];
        if let Some(unknown) = fields.keys().find(|key| !allowed.contains(&key.as_str())) {
            return Err(format!("{at}.{unknown} is not a tool field (allowed: {})", allowed.join(", ")));
        }
        let name = fields
            .get("name")
            .and_then(Value::as_str)
            .filter(|name| valid_name(name))
            .ok_or_else(|| format!("{at}.name is required and must match ^[a-zA-Z0-9_-]{{1,64}}$"))?
            .to_owned();
        let description = match fields.get("description") {
            Some(Value::String(text)) if !text.trim().is_empty() => text.clone(),
            _ => return Err(format!("{at}.description is required and must be a non-empty string")),
        };
        let input_schema = match fields.get("inputSchema") {
            Some(schema @ Value::Object(_)) if schema.get("type").and_then(Value::as_str) == Some("object") => {
                schema.clone()
            }
            _ => return Err(format!("{at}.inputSchema is required and must be a JSON Schema with type object")),
        };
        let transport = match (fields.get("http"), fields.get("workflowId")) {
            (Some(Value::Object(http)), None) => ToolTransport::Http(http.clone()),
            (Some(_), None) => return Err(format!("{at}.http must be an object (a core.http.request config)")),
            (None, Some(Value::String(id))) if !id.is_empty() => ToolTransport::Workflow(id.clone()),
            (None, Some(_)) => return Err(format!("{at}.workflowId must be a non-empty string")),
            (None, None) => return Err(format!("{at} needs `http` or `workflowId`")),
            (Some(_), Some(_)) => return Err(format!("{at} has both `http` and `workflowId`; they are exclusive")),
        };
        Ok(Self { name, description, input_schema, transport })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(config: Value) -> Result<AgentConfig, String> {
        AgentConfig::parse(config.as_object().unwrap())
    }

    fn tool(name: &str) -> Value {
        json!({ "name": name, "description": "d", "inputSchema": { "type": "object" },
                "http": { "url": "http://127.0.0.1:1/x" } })
    }

    #[test]
    fn a_full_config_parses() {
        let config = parse(json!({
            "agentId": "core.triage", "route": "openai/gpt-4o", "instructions": "Be brief.", "maxTurns": 3,
            "tools": [tool("lookup"), { "name": "escalate", "description": "e", "inputSchema": { "type": "object" },
                                        "workflowId": "child" }],
        }))
        .unwrap();
        assert_eq!(config.max_turns, 3);
        assert_eq!(config.tool("escalate").unwrap().transport, ToolTransport::Workflow("child".into()));
        assert_eq!(config.tool("lookup").unwrap().transport.event_transport(), "http");
        assert_eq!(parse(json!({ "instructions": "x" })).unwrap().max_turns, DEFAULT_MAX_TURNS);
    }

    #[test]
    fn refusals_name_the_field_path_and_the_rule() {
        for (config, field) in [
            (json!({}), "config.instructions"),
            (json!({ "instructions": "x", "maxTurns": 0 }), "config.maxTurns"),
            (json!({ "instructions": "x", "route": "gpt-4o" }), "config.route"),
            (json!({ "instructions": "x", "tools": [tool("a b")] }), "config.tools[0].name"),
            (json!({ "instructions": "x", "tools": [tool("a"), tool("a")] }), "config.tools[1].name `a` is not unique"),
            (
                json!({ "instructions": "x", "tools": [{ "name": "a", "description": "d", "inputSchema": {} }] }),
                "config.tools[0].inputSchema",
            ),
            (
                json!({ "instructions": "x", "tools": [{ "name": "a", "description": "d",
                                                        "inputSchema": { "type": "object" } }] }),
                "config.tools[0] needs `http` or `workflowId`",
            ),
            (
                json!({ "instructions": "x", "tools": [{ "name": "a", "description": "d",
                        "inputSchema": { "type": "object" }, "workflowId": "" }] }),
                "config.tools[0].workflowId",
            ),
            (json!({ "instructions": "x", "bogus": 1 }), "config.bogus"),
        ] {
            let message = parse(config.clone()).unwrap_err();
            assert!(message.contains(field), "{config}: {message}");
        }
    }
}
