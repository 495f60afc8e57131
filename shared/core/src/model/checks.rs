//! What a definition must satisfy beyond the schema and the graph, so that a registered
//! workflow can run: each rule refuses with the JSON pointer of the offending part
//! ([`DefinitionError::Invalid`]).
//!
//! - edge ids and variable names are unique;
//! - a `regex` condition's pattern is a string that compiles within
//!   [`condition::REGEX_SIZE_LIMIT`];
//! - every JSON Schema a definition carries (`configurableSchema`, a clarification
//!   question's `schema`, a `core.interrupt` `resumeSchema`) compiles, and refers to nothing
//!   outside itself (a `$ref` not starting with `#` is refused: nothing is ever fetched);
//! - `core.subWorkflow` names a `workflowId`;
//! - an approval's `requiredApprovals` is at most the length of its `approversList`, when
//!   it has one (no larger quorum can form);
//! - `settings.maxLoopbackIterations` is an integer from 1 to
//!   [`graph::MAX_LOOPBACK_ITERATIONS`](super::graph::MAX_LOOPBACK_ITERATIONS);
//! - durations (`core.delay` `delayMs` / `durationMs` / `ms` in config or as a literal input,
//!   `timeoutMs` of a gate or interrupt) are integers from 0 to a ceiling:
//!   [`MAX_RUN_DURATION_MS`] for every definition, the host's configured run-duration
//!   ceiling for a tenant's registration ([`crate::model::Workflow::compile_within`]).

use regex::Regex;
use serde_json::{Map, Value};

use super::condition;
use super::definition::{PortRef, PortValue, WorkflowDefinition};
use crate::error::DefinitionError;
use crate::limits::MAX_RUN_DURATION_MS;

fn refuse(path: String, rule: &'static str, message: impl Into<String>) -> DefinitionError {
    DefinitionError::Invalid { path, rule, message: message.into() }
}

/// A JSON pointer segment (`~` and `/` escaped).
fn segment(text: &str) -> String {
    text.replace('~', "~0").replace('/', "~1")
}

/// Every rule above; durations against `max_duration_ms` (at most [`MAX_RUN_DURATION_MS`]).
/// Returns each edge's compiled `regex` condition, by edge index, so the engine never
/// compiles a pattern again.
pub fn check(definition: &WorkflowDefinition, max_duration_ms: u64) -> Result<Vec<Option<Regex>>, DefinitionError> {
    unique(definition.edges.iter().map(|edge| edge.id.as_str()), "edges", "id", "edge id")?;
    unique(definition.variables.iter().map(|variable| variable.name.as_str()), "variables", "name", "variable name")?;
    if super::graph::max_loopback_iterations(&definition.settings).is_none() {
        return Err(refuse(
            "/settings/maxLoopbackIterations".to_owned(),
            "max_loopback_iterations",
            format!(
                "`settings.maxLoopbackIterations` must be an integer from 1 to {}: how many times back-edges may \
                 re-enter one node in a run",
                super::graph::MAX_LOOPBACK_ITERATIONS
            ),
        ));
    }
    let mut regexes = Vec::with_capacity(definition.edges.len());
    for (index, edge) in definition.edges.iter().enumerate() {
        let Some(condition) = edge.condition.as_ref().filter(|condition| condition.kind == "regex") else {
            regexes.push(None);
            continue;
        };
        let path = format!("/edges/{index}/condition/right");
        let Some(pattern) = condition.right.as_ref().and_then(Value::as_str) else {
            return Err(refuse(path, "regex", "a regex condition needs a string pattern in `right`"));
        };
        match condition::compile_regex(pattern) {
            Ok(regex) => regexes.push(Some(regex)),
            Err(error) => {
                // The parser's message spans lines (pattern, caret, reason): keep the reason.
                let text = error.to_string();
                let reason = text.lines().map(str::trim).rfind(|line| !line.is_empty()).unwrap_or("invalid");
                let reason = reason.trim_start_matches("error: ");
                let message = format!("the regex condition's pattern does not compile: {reason}");
                return Err(refuse(path, "regex", message));
            }
        }
    }
    if let Some(schema) = &definition.configurable_schema {
        self_contained_schema(schema, "/configurableSchema".to_owned())?;
    }
    for (index, node) in definition.nodes.iter().enumerate() {
        let at = format!("/nodes/{index}/config");
        match node.type_id.as_str() {
            "core.clarificationGate" => questions(&node.config, &at)?,
            "core.approvalGate" => quorum(&node.config, &at)?,
            "core.subWorkflow"
                if node.config.get("workflowId").and_then(Value::as_str).is_none_or(|id| id.is_empty()) =>
            {
                return Err(refuse(
                    format!("{at}/workflowId"),
                    "required",
                    "core.subWorkflow needs `workflowId`, a non-empty string naming the child workflow",
                ));
            }
            "core.interrupt" => {
                if let Err((path, message)) = crate::interrupt::callback::parse_policy(&node.settings) {
                    return Err(refuse(
                        format!("/nodes/{index}{path}"),
                        "settings",
                        format!("node `{}`: {message}", node.id),
                    ));
                }
                for key in ["resumeSchema", "answerSchema"] {
                    if let Some(schema) = node.config.get(key).filter(|schema| schema.is_object()) {
                        self_contained_schema(schema, format!("{at}/{key}"))?;
                    }
                }
                if let Some(data) = node.config.get("data").and_then(Value::as_object) {
                    let kind = node.config.get("kind").or_else(|| node.config.get("reason")).and_then(Value::as_str);
                    match kind {
                        Some("clarification") => questions(data, &format!("{at}/data"))?,
                        Some("approval") => quorum(data, &format!("{at}/data"))?,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    durations(definition, max_duration_ms.min(MAX_RUN_DURATION_MS))?;
    Ok(regexes)
}

fn unique<'a>(
    names: impl Iterator<Item = &'a str>,
    list: &str,
    field: &str,
    what: &'static str,
) -> Result<(), DefinitionError> {
    let mut seen = std::collections::HashSet::new();
    for (index, name) in names.enumerate() {
        if !seen.insert(name) {
            return Err(refuse(format!("/{list}/{index}/{field}"), "unique", format!("{what} `{name}` is used twice")));
        }
    }
    Ok(())
}

fn questions(config: &Map<String, Value>, at: &str) -> Result<(), DefinitionError> {
    for (index, question) in config.get("questions").and_then(Value::as_array).into_iter().flatten().enumerate() {
        if let Some(schema) = question.get("schema").filter(|schema| schema.is_object()) {
            self_contained_schema(schema, format!("{at}/questions/{index}/schema"))?;
        }
    }
    Ok(())
}

fn quorum(config: &Map<String, Value>, at: &str) -> Result<(), DefinitionError> {
    let approvers = config.get("approversList").and_then(Value::as_array).map_or(0, Vec::len);
    let required = config.get("requiredApprovals").and_then(Value::as_u64);
    match required {
        Some(required) if approvers > 0 && required > approvers as u64 => Err(refuse(
            format!("{at}/requiredApprovals"),
            "quorum",
            format!(
                "`requiredApprovals` ({required}) is more than the {approvers} principals of `approversList`: no quorum could form"
            ),
        )),
        _ => Ok(()),
    }
}

/// Refuses a schema that does not compile or refers outside itself.
fn self_contained_schema(schema: &Value, at: String) -> Result<(), DefinitionError> {
    if let Some(remote) = remote_ref(schema, &at) {
        return Err(refuse(
            remote,
            "remote_ref",
            "a schema may only refer inside itself (`$ref` starting with `#`); remote references are never fetched",
        ));
    }
    if let Some(reason) = crate::schema::compile_error(schema) {
        return Err(refuse(
            at,
            "schema",
            format!("the schema does not compile as a JSON Schema (draft 2020-12): {reason}"),
        ));
    }
    Ok(())
}

/// The pointer of the first `$ref` / `$dynamicRef` that does not start with `#`.
fn remote_ref(value: &Value, at: &str) -> Option<String> {
    match value {
        Value::Object(fields) => fields.iter().find_map(|(key, inner)| {
            let here = format!("{at}/{}", segment(key));
            match (key.as_str(), inner) {
                ("$ref" | "$dynamicRef", Value::String(target)) if !target.starts_with('#') => Some(here),
                _ => remote_ref(inner, &here),
            }
        }),
        Value::Array(items) => {
            items.iter().enumerate().find_map(|(index, item)| remote_ref(item, &format!("{at}/{index}")))
        }
        _ => None,
    }
}

/// Checks every literal duration of `definition` is an integer from 0 to `ceiling` ms.
fn durations(definition: &WorkflowDefinition, ceiling: u64) -> Result<(), DefinitionError> {
    for (index, node) in definition.nodes.iter().enumerate() {
        let keys: &[&str] = match node.type_id.as_str() {
            "core.delay" => &["delayMs", "durationMs", "ms"],
            "core.approvalGate" | "core.clarificationGate" | "core.interrupt" => &["timeoutMs"],
            _ => &[],
        };
        for key in keys {
            if let Some(value) = node.config.get(*key).filter(|value| !value.is_null()) {
                duration(value, ceiling, format!("/nodes/{index}/config/{key}"), key)?;
            }
        }
        if node.type_id == "core.delay" {
            match node.inputs.get("delayMs") {
                Some(PortValue::Literal(value)) => {
                    duration(value, ceiling, format!("/nodes/{index}/inputs/delayMs"), "delayMs")?
                }
                Some(PortValue::Ref(PortRef::Static { value })) => {
                    duration(value, ceiling, format!("/nodes/{index}/inputs/delayMs/value"), "delayMs")?
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn duration(value: &Value, ceiling: u64, path: String, key: &str) -> Result<(), DefinitionError> {
    if crate::nodes::duration_ms(value, ceiling).is_some() {
        return Ok(());
    }
    Err(refuse(
        path,
        "duration",
        format!("`{key}` must be an integer number of milliseconds from 0 to {ceiling} (the run-duration ceiling)"),
    ))
}
