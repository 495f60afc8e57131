//! The project's own JSON Schemas (`schemas/` at the repository root), compiled once and
//! used at the boundary: workflow definitions at load/registration, request bodies at the
//! HTTP edge. All schemas are local; nothing is fetched.

use std::sync::OnceLock;

use jsonschema::error::ValidationErrorKind;
use jsonschema::{ValidationError, Validator};
use serde_json::{json, Value};

use crate::error::DefinitionError;

/// `schemas/workflow-definition.schema.json`.
pub const WORKFLOW_DEFINITION: &str = include_str!("../../../schemas/workflow-definition.schema.json");
/// `schemas/create-run-request.schema.json`.
pub const CREATE_RUN_REQUEST: &str = include_str!("../../../schemas/create-run-request.schema.json");

fn compiled(cell: &'static OnceLock<Validator>, text: &'static str) -> &'static Validator {
    cell.get_or_init(|| {
        let schema: Value = serde_json::from_str(text).expect("bundled schema is JSON");
        jsonschema::options().offline().build(&schema).expect("bundled schema compiles")
    })
}

/// Every violation of `instance` against `validator`, as `{path, keyword, message}` objects,
/// the most specific first. Messages name the keyword, not the offending value, so caller
/// input is never echoed back.
///
/// An `anyOf` / `oneOf` that no branch satisfies is replaced by the errors of the branch that
/// got furthest (the deepest instance path, then the fewest errors), recursively: "value is
/// not of type `string` at `/answers/q1`" instead of "not valid under any of the schemas".
fn violations(validator: &Validator, instance: &Value) -> Vec<Value> {
    let mut found: Vec<Value> = validator.iter_errors(instance).flat_map(|error| specific(&error)).collect();
    found.sort_by_key(|violation| std::cmp::Reverse(depth(violation)));
    found
}

fn depth(violation: &Value) -> usize {
    violation["path"].as_str().map_or(0, |path| path.matches('/').count())
}

fn specific(error: &ValidationError<'_>) -> Vec<Value> {
    let branches = match error.kind() {
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => Some(context),
        _ => None,
    };
    let best = branches.and_then(|branches| {
        branches
            .iter()
            .filter(|branch| !branch.is_empty())
            .map(|branch| branch.iter().flat_map(specific).collect::<Vec<_>>())
            .max_by_key(|found| (found.iter().map(depth).max().unwrap_or(0), std::cmp::Reverse(found.len())))
    });
    if let Some(best) = best {
        return best;
    }
    let path = error.instance_path().to_string();
    vec![json!({
        "path": if path.is_empty() { "/".to_owned() } else { path },
        "keyword": error.kind().keyword(),
        "message": error.masked().to_string(),
    })]
}

/// One line naming a violation's rule and place: `at /answers/q1: value is not of type
/// "string" (rule: type)`.
pub fn describe(violation: &Value) -> String {
    format!(
        "at {}: {} (rule: {})",
        violation["path"].as_str().unwrap_or("/"),
        violation["message"].as_str().unwrap_or("invalid"),
        violation["keyword"].as_str().unwrap_or("schema")
    )
}

/// Validates a workflow definition document.
pub fn validate_workflow(document: &Value) -> Result<(), DefinitionError> {
    static CELL: OnceLock<Validator> = OnceLock::new();
    let found = violations(compiled(&CELL, WORKFLOW_DEFINITION), document);
    if found.is_empty() {
        Ok(())
    } else {
        Err(DefinitionError::Schema { violations: found })
    }
}

/// Validates a `POST /v1/runs` body; returns the violations (empty when valid).
pub fn create_run_violations(body: &Value) -> Vec<Value> {
    static CELL: OnceLock<Validator> = OnceLock::new();
    violations(compiled(&CELL, CREATE_RUN_REQUEST), body)
}

/// Validates `instance` against a schema that came with data (an interrupt's
/// `resumeSchema`, checked when the workflow was registered). `Err` holds the violations;
/// a schema that does not compile is reported as one violation at `/`.
pub fn check_against(schema: &Value, instance: &Value) -> Result<(), Vec<Value>> {
    let validator = match jsonschema::options().offline().build(schema) {
        Ok(validator) => validator,
        Err(_) => return Err(vec![json!({ "path": "/", "message": "the resume schema does not compile" })]),
    };
    let found = violations(&validator, instance);
    if found.is_empty() {
        Ok(())
    } else {
        Err(found)
    }
}

/// Whether `schema` compiles as a JSON Schema.
pub fn compiles(schema: &Value) -> bool {
    compile_error(schema).is_none()
}

/// Why `schema` does not compile as a JSON Schema (offline: a remote reference fails).
pub fn compile_error(schema: &Value) -> Option<String> {
    jsonschema::options().offline().build(schema).err().map(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_create_fields_are_reported_without_echoing_values() {
        let found = create_run_violations(&json!({"workflowId": "w", "secretField": "hunter2"}));
        assert_eq!(found.len(), 1);
        assert!(!found[0]["message"].as_str().unwrap().contains("hunter2"));
    }

    #[test]
    fn wrong_types_are_reported_with_their_path() {
        let found = create_run_violations(&json!({"workflowId": 7, "inputs": []}));
        let paths: Vec<_> = found.iter().map(|v| v["path"].as_str().unwrap().to_owned()).collect();
        assert!(paths.contains(&"/workflowId".to_owned()) && paths.contains(&"/inputs".to_owned()), "{paths:?}");
    }
}
