//! The interrupt a node asks for, built from its config. The same builders check configs when
//! a workflow is registered, so a gate that could never suspend correctly is refused up front.
//!
//! - `core.approvalGate`: `title`, `description`, `actions` (default `accept`, `reject`),
//!   `requiredApprovals`, `rejectionPolicy`, `approversList`, `artifactId`, `artifactType`,
//!   `artifactData`, `profile`, `timeoutMs`;
//! - `core.clarificationGate`: `questions: [{id, question, schema?}]`, `contextType`,
//!   `timeoutMs`;
//! - `core.interrupt`: `kind` (alias `reason`), `data`, `resumeSchema` (alias
//!   `answerSchema`), `timeoutMs`, `profile`.

use serde_json::{json, Map, Value};

use super::{InterruptKind, APPROVAL_ACTIONS, PROFILES};

/// What a suspending node asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct InterruptRequest {
    /// The kind.
    pub kind: InterruptKind,
    /// The kind's data (`ApprovalData`, `ClarificationData`, …).
    pub data: Value,
    /// JSON Schema for the resume value.
    pub resume_schema: Option<Value>,
    /// Auto-reject after this long.
    pub timeout_ms: Option<u64>,
    /// The interrupt profile asked for.
    pub profile: Option<String>,
}

/// Why a config cannot suspend.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigIssue {
    /// The config is malformed.
    Invalid(String),
    /// The config asks for a kind behind a capability this host does not advertise.
    Capability(&'static str),
}

type Built = Result<InterruptRequest, ConfigIssue>;

fn invalid(message: impl Into<String>) -> ConfigIssue {
    ConfigIssue::Invalid(message.into())
}

fn optional_string(config: &Map<String, Value>, key: &str) -> Result<Option<String>, ConfigIssue> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(invalid(format!("`{key}` must be a string"))),
    }
}

fn timeout(config: &Map<String, Value>) -> Result<Option<u64>, ConfigIssue> {
    match config.get("timeoutMs") {
        None | Some(Value::Null) => Ok(None),
        Some(value) => {
            crate::nodes::duration_ms(value, crate::limits::MAX_RUN_DURATION_MS).map(Some).ok_or_else(|| {
                invalid(format!(
                    "`timeoutMs` must be an integer number of milliseconds from 0 to {}",
                    crate::limits::MAX_RUN_DURATION_MS
                ))
            })
        }
    }
}

fn profile(config: &Map<String, Value>) -> Result<Option<String>, ConfigIssue> {
    match optional_string(config, "profile")? {
        Some(profile) if !PROFILES.contains(&profile.as_str()) => {
            Err(invalid(format!("`profile` must be one of {PROFILES:?}")))
        }
        other => Ok(other),
    }
}

/// `core.approvalGate`.
pub fn approval_gate(node_id: &str, config: &Map<String, Value>) -> Built {
    let actions: Vec<String> = match config.get("actions") {
        None | Some(Value::Null) => vec!["accept".into(), "reject".into()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| invalid("`actions` must be an array of strings"))?,
        Some(_) => return Err(invalid("`actions` must be an array of strings")),
    };
    if actions.is_empty() {
        return Err(invalid("`actions` must name at least one action"));
    }
    for action in &actions {
        if !APPROVAL_ACTIONS.contains(&action.as_str()) {
            return Err(invalid(format!("approval action `{action}` is not served; use {APPROVAL_ACTIONS:?}")));
        }
    }
    let required = match config.get("requiredApprovals") {
        None | Some(Value::Null) => 1,
        Some(value) => value.as_u64().filter(|n| *n >= 1).ok_or_else(|| invalid("`requiredApprovals` must be ≥ 1"))?,
    };
    let rejection = optional_string(config, "rejectionPolicy")?.unwrap_or_else(|| "single-veto".into());
    if rejection != "single-veto" && rejection != "majority" {
        return Err(invalid("`rejectionPolicy` must be `single-veto` or `majority`"));
    }
    let approvers = match config.get("approversList") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| invalid("`approversList` must be an array of strings"))?,
        Some(_) => return Err(invalid("`approversList` must be an array of strings")),
    };
    if config.get("overrideBypassesQuorum").and_then(Value::as_bool) == Some(true) {
        return Err(invalid("override principals are not served by this host (`overrideBypassesQuorum`)"));
    }
    let mut data = json!({
        "artifactId": optional_string(config, "artifactId")?.unwrap_or_else(|| node_id.to_owned()),
        "artifactType": optional_string(config, "artifactType")?.unwrap_or_else(|| "workflow-node".to_owned()),
        "title": optional_string(config, "title")?.filter(|t| !t.is_empty()).unwrap_or_else(|| "Approval required".into()),
        "actions": actions,
        "requiredApprovals": required,
        "rejectionPolicy": rejection,
        "approversList": approvers,
    });
    if let Some(description) = optional_string(config, "description")? {
        data["description"] = json!(description);
    }
    if let Some(artifact) = config.get("artifactData") {
        data["artifactData"] = artifact.clone();
    }
    let resume_schema = json!({
        "type": "object",
        "required": ["action"],
        "properties": {
            "action": { "enum": actions },
            "feedback": { "type": "string" },
            "comment": { "type": "string" },
            "voter": { "type": "string", "minLength": 1 },
            "refineFeedback": { "type": "object" },
        },
    });
    Ok(InterruptRequest {
        kind: InterruptKind::Approval,
        data,
        resume_schema: Some(resume_schema),
        timeout_ms: timeout(config)?,
        profile: profile(config)?,
    })
}

fn questions(value: Option<&Value>) -> Result<Vec<Value>, ConfigIssue> {
    let Some(Value::Array(items)) = value else { return Err(invalid("`questions` must be a non-empty array")) };
    if items.is_empty() {
        return Err(invalid("`questions` must be a non-empty array"));
    }
    let mut seen = Vec::new();
    for item in items {
        let Some(fields) = item.as_object() else { return Err(invalid("each question must be an object")) };
        let id = fields.get("id").and_then(Value::as_str).filter(|id| !id.is_empty());
        let question = fields.get("question").and_then(Value::as_str).filter(|q| !q.is_empty());
        let (Some(id), Some(_)) = (id, question) else {
            return Err(invalid("each question needs a non-empty `id` and `question`"));
        };
        if fields.keys().any(|key| !matches!(key.as_str(), "id" | "question" | "schema")) {
            return Err(invalid("a question has only `id`, `question` and `schema`"));
        }
        if fields.get("schema").is_some_and(|schema| !schema.is_object()) {
            return Err(invalid("a question's `schema` must be an object"));
        }
        if seen.contains(&id) {
            return Err(invalid(format!("question id `{id}` is used twice")));
        }
        seen.push(id);
    }
    Ok(items.clone())
}

/// The resume schema of a clarification: `answers` as a map from question id to answer
/// (each checked against the question's schema), or as a list of `{id, answer}`.
fn clarification_schema(questions: &[Value]) -> Value {
    let ids: Vec<&Value> = questions.iter().filter_map(|q| q.get("id")).collect();
    let mut properties = Map::new();
    for question in questions {
        if let (Some(id), Some(schema)) = (question["id"].as_str(), question.get("schema")) {
            properties.insert(id.to_owned(), schema.clone());
        }
    }
    json!({
        "type": "object",
        "required": ["answers"],
        "properties": {
            "answers": {
                "anyOf": [
                    { "type": "object", "required": ids, "properties": properties },
                    { "type": "array", "items": { "type": "object", "required": ["id", "answer"] } },
                ],
            },
        },
    })
}

/// `core.clarificationGate`.
pub fn clarification_gate(config: &Map<String, Value>) -> Built {
    let questions = questions(config.get("questions"))?;
    let mut data = json!({ "questions": questions });
    if let Some(context) = optional_string(config, "contextType")? {
        data["contextType"] = json!(context);
    }
    Ok(InterruptRequest {
        kind: InterruptKind::Clarification,
        resume_schema: Some(clarification_schema(&questions)),
        data,
        timeout_ms: timeout(config)?,
        profile: profile(config)?,
    })
}

/// Checks `data` has the required keys and no others.
fn check_keys(
    kind: InterruptKind,
    data: &Map<String, Value>,
    required: &[&str],
    optional: &[&str],
) -> Result<(), ConfigIssue> {
    for key in required {
        if !data.contains_key(*key) {
            return Err(invalid(format!("{} data needs `{key}`", kind.as_str())));
        }
    }
    if let Some(extra) = data.keys().find(|key| !required.contains(&key.as_str()) && !optional.contains(&key.as_str()))
    {
        return Err(invalid(format!("{} data has no field `{extra}`", kind.as_str())));
    }
    Ok(())
}

/// `core.interrupt`: any kind this host runs, with its data given verbatim.
pub fn interrupt_node(node_id: &str, config: &Map<String, Value>) -> Built {
    let kind_text = optional_string(config, "kind")?.or(optional_string(config, "reason")?);
    let kind_text = kind_text.ok_or_else(|| invalid("core.interrupt needs `kind`"))?;
    let kind =
        InterruptKind::parse(&kind_text).ok_or_else(|| invalid(format!("unknown interrupt kind `{kind_text}`")))?;
    if let Some(capability) = kind.unadvertised_capability() {
        return Err(ConfigIssue::Capability(capability));
    }
    let empty = Map::new();
    let data_value = config.get("data").cloned().unwrap_or(Value::Object(Map::new()));
    let data = data_value.as_object().unwrap_or(&empty);
    if !data_value.is_object() {
        return Err(invalid("`data` must be an object"));
    }
    let resume_schema = match config.get("resumeSchema").or_else(|| config.get("answerSchema")) {
        None | Some(Value::Null) => None,
        Some(schema @ Value::Object(_)) => Some(schema.clone()),
        Some(_) => return Err(invalid("`resumeSchema` must be an object")),
    };
    let built = |resume_schema: Option<Value>, data: Value| -> Built {
        Ok(InterruptRequest { kind, data, resume_schema, timeout_ms: timeout(config)?, profile: profile(config)? })
    };
    match kind {
        InterruptKind::Approval => {
            let mut request = approval_gate(node_id, data)?;
            request.timeout_ms = timeout(config)?;
            request.profile = profile(config)?;
            Ok(request)
        }
        InterruptKind::Clarification => {
            check_keys(kind, data, &["questions"], &["contextType"])?;
            let questions = questions(data.get("questions"))?;
            built(resume_schema.or_else(|| Some(clarification_schema(&questions))), data_value)
        }
        InterruptKind::ExternalEvent => {
            check_keys(kind, data, &["eventType", "correlation"], &[])?;
            if !data["eventType"].is_string() || !data["correlation"].is_object() {
                return Err(invalid("external-event data needs a string `eventType` and an object `correlation`"));
            }
            built(resume_schema, data_value)
        }
        InterruptKind::Custom => {
            check_keys(kind, data, &["customKind"], &["payload"])?;
            if !data["customKind"].is_string() {
                return Err(invalid("custom data needs a string `customKind`"));
            }
            built(resume_schema, data_value)
        }
        InterruptKind::LowConfidence => {
            check_keys(kind, data, &["agentId", "threshold", "observed"], &["decision"])?;
            if !data["agentId"].is_string() || !data["threshold"].is_number() || !data["observed"].is_number() {
                return Err(invalid(
                    "low-confidence data needs a string `agentId` and numbers `threshold`, `observed`",
                ));
            }
            built(resume_schema, data_value)
        }
        InterruptKind::ConversationStart | InterruptKind::ConversationExchange | InterruptKind::ConversationClose => {
            Err(ConfigIssue::Capability("conversationPrimitive"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn approval_data_has_what_the_schema_requires() {
        let request = approval_gate("gate", &config(json!({ "title": "Ship it?", "actions": ["accept", "reject"] })))
            .expect("valid");
        for field in ["artifactId", "artifactType", "title", "actions"] {
            assert!(request.data.get(field).is_some(), "{field}");
        }
        assert_eq!(request.kind.waiting_status().as_str(), "waiting-approval");
    }

    #[test]
    fn unknown_actions_and_the_bare_edit_are_refused() {
        for actions in [json!(["edit"]), json!(["accept", "maybe"]), json!([]), json!(["ask"])] {
            let issue = approval_gate("gate", &config(json!({ "actions": actions }))).unwrap_err();
            assert!(matches!(issue, ConfigIssue::Invalid(_)), "{actions}");
        }
    }

    #[test]
    fn conversation_kinds_need_a_capability_this_host_lacks() {
        let issue =
            interrupt_node("n", &config(json!({ "kind": "conversation.start", "data": { "conversationId": "c" } })))
                .unwrap_err();
        assert_eq!(issue, ConfigIssue::Capability("conversationPrimitive"));
    }

    #[test]
    fn external_event_data_is_checked() {
        let ok = interrupt_node(
            "n",
            &config(json!({ "kind": "external-event", "data": { "eventType": "x", "correlation": { "a": 1 } } })),
        );
        assert_eq!(ok.unwrap().kind.waiting_status().as_str(), "waiting-external");
        let missing = interrupt_node("n", &config(json!({ "kind": "external-event", "data": { "eventType": "x" } })));
        assert!(matches!(missing, Err(ConfigIssue::Invalid(_))));
    }

    #[test]
    fn clarification_questions_are_checked() {
        assert!(clarification_gate(&config(json!({ "questions": [] }))).is_err());
        assert!(clarification_gate(&config(json!({ "questions": [{ "id": "q1" }] }))).is_err());
        let ok = clarification_gate(&config(json!({ "questions": [{ "id": "q1", "question": "Colour?" }] }))).unwrap();
        assert_eq!(ok.kind.waiting_status().as_str(), "waiting-input");
    }
}
