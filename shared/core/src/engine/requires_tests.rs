//! Runtime requirements of node kinds: `conformance.requiresMissing` declares
//! `conformance.never-provided`, so its workflow is runnable (no creation-time gap) and the run
//! fails at that node with `capability_not_provided`.

use serde_json::json;

use super::tests::{drive, pending, types};
use crate::model::Workflow;
use crate::run::RunStatus;

const FIXTURE: &str = include_str!("../../../../conformance/fixtures/conformance-capability-missing.json");

#[test]
fn a_node_requiring_a_missing_runtime_capability_fails_the_run_at_that_node() {
    let workflow = Workflow::compile(serde_json::from_str(FIXTURE).unwrap()).unwrap();
    assert_eq!(workflow.gap, None, "the fixture is runnable: the refusal happens at its node");
    let mut state = pending(&workflow, json!({}));
    let log = drive(&workflow, &mut state, 0);
    assert_eq!(types(&log), ["run.started", "node.started:n1", "node.failed:n1", "run.failed"]);
    assert_eq!(state.status, RunStatus::Failed);
    let error = state.error.clone().unwrap();
    assert_eq!(error.code, "capability_not_provided");
    assert_eq!(error.details.as_ref().unwrap()["capability"], "conformance.never-provided");
    assert!(error.message.contains("conformance.never-provided"), "{}", error.message);
}

#[test]
fn another_unknown_type_id_keeps_its_creation_time_gap() {
    let workflow =
        Workflow::compile(json!({"id": "w", "name": "w", "nodes": [{"id": "n", "typeId": "conformance.unheardOf"}]}));
    let gap = workflow.unwrap().gap.expect("an unknown kind is a gap");
    assert_eq!(gap.offending_type_id.as_deref(), Some("conformance.unheardOf"));
}
