//! The project's own JSON Schemas (`schemas/` at the repository root), compiled once and
//! used at the boundary: workflow definitions at load/registration, request bodies at the
//! HTTP edge. All schemas are local; nothing is fetched.

use std::sync::OnceLock;

use jsonschema::Validator;
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

/// Every violation of `instance` against `validator`, as `{path, message}` objects. Messages
/// name the keyword, not the offending value, so caller input is never echoed back.
fn violations(validator: &Validator, instance: &Value) -> Vec<Value> {
    validator
        .iter_errors(instance)
        .map(|error| {
            let path = error.instance_path().to_string();
            json!({ "path": if path.is_empty() { "/".to_owned() } else { path }, "message": error.masked().to_string() })
        })
        .collect()
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
    jsonschema::options().offline().build(schema).is_ok()
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
