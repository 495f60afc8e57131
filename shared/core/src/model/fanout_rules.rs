//! Registration rules of parallel fan-out (issue 19), checked by
//! [`Workflow::compile_with`](super::Workflow::compile_with) after the graph is built; each
//! refuses with [`DefinitionError::Invalid`] naming the field and the rule:
//!
//! - a node id contains no `#`: it is reserved for fan-out child slots (`<nodeId>#<index>`,
//!   [`crate::run::slot_key`]), so a node id can never collide with a slot's key;
//! - the workflow `settings` host extensions are in range: `maxChildRuns` an integer from 1
//!   to [`MAX_CHILD_RUNS_CEILING`], `maxConcurrentChildren` an integer from 1 to
//!   [`MAX_WIDTH`], `maxNodeExecutions` an integer ≥ 1 (the run's node-execution limit
//!   becomes the smaller of it and the host's, [`max_node_executions`]); `retention` a
//!   duration [`crate::retention::parse`] accepts.

use serde_json::{Map, Value};

use super::definition::WorkflowDefinition;
use crate::engine::{MAX_CHILD_RUNS_CEILING, MAX_WIDTH};
use crate::error::DefinitionError;
use crate::run::SLOT_SEPARATOR;

/// The workflow settings these rules check: name, rule, inclusive range.
const SETTINGS: [(&str, &str, u64, u64); 3] = [
    ("maxChildRuns", "max_child_runs", 1, MAX_CHILD_RUNS_CEILING as u64),
    ("maxConcurrentChildren", "max_concurrent_children", 1, MAX_WIDTH as u64),
    ("maxNodeExecutions", "max_node_executions", 1, u32::MAX as u64),
];

/// Every rule above.
pub fn check(definition: &WorkflowDefinition) -> Result<(), DefinitionError> {
    if let Some((index, node)) = definition.nodes.iter().enumerate().find(|(_, node)| node.id.contains(SLOT_SEPARATOR))
    {
        return Err(DefinitionError::Invalid {
            path: format!("/nodes/{index}/id"),
            rule: "node_id",
            message: format!(
                "node id `{}` contains `{SLOT_SEPARATOR}`, which is reserved for fan-out child slots \
                 (`<nodeId>{SLOT_SEPARATOR}<index>`)",
                node.id
            ),
        });
    }
    check_settings(&definition.settings)
}

fn check_settings(settings: &Map<String, Value>) -> Result<(), DefinitionError> {
    if let Some(value) = settings.get("retention") {
        crate::retention::parse(value).map_err(|message| DefinitionError::Invalid {
            path: "/settings/retention".to_owned(),
            rule: "retention",
            message: format!("`settings.retention`: {message}"),
        })?;
    }
    for (name, rule, minimum, maximum) in SETTINGS {
        let Some(value) = settings.get(name) else { continue };
        if value.as_u64().is_none_or(|n| n < minimum || n > maximum) {
            let range = if maximum == u32::MAX as u64 {
                format!("an integer ≥ {minimum}")
            } else {
                format!("an integer from {minimum} to {maximum}")
            };
            return Err(DefinitionError::Invalid {
                path: format!("/settings/{name}"),
                rule,
                message: format!("`settings.{name}` must be {range} (got {value})"),
            });
        }
    }
    Ok(())
}

/// `settings.maxNodeExecutions` of a registered workflow (checked at registration).
pub fn max_node_executions(settings: &Map<String, Value>) -> Option<u32> {
    settings.get("maxNodeExecutions").and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok()).filter(|n| *n >= 1)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::Workflow;
    use crate::error::DefinitionError;

    fn compile(nodes: serde_json::Value, settings: serde_json::Value) -> Result<Workflow, DefinitionError> {
        Workflow::compile(json!({ "id": "w", "name": "w", "version": "1", "nodes": nodes, "settings": settings }))
    }

    fn refused(result: Result<Workflow, DefinitionError>) -> (String, &'static str, String) {
        match result {
            Err(DefinitionError::Invalid { path, rule, message }) => (path, rule, message),
            Err(other) => panic!("expected an invalid definition, got {other:?}"),
            Ok(_) => panic!("expected a refusal"),
        }
    }

    fn noop(id: &str) -> serde_json::Value {
        json!([{ "id": id, "typeId": "core.noop" }])
    }

    #[test]
    fn a_node_id_with_the_slot_separator_is_refused() {
        let (path, rule, message) = refused(compile(noop("fan#1"), json!({})));
        assert_eq!((path.as_str(), rule), ("/nodes/0/id", "node_id"));
        assert!(message.contains("fan#1") && message.contains("reserved for fan-out child slots"), "{message}");
        assert!(compile(noop("fan-1"), json!({})).is_ok());
    }

    #[test]
    fn max_child_runs_is_an_integer_within_the_ceiling() {
        for bad in [json!(0), json!(100_001), json!(1.5), json!("10"), json!(-1)] {
            let (path, rule, message) = refused(compile(noop("a"), json!({ "maxChildRuns": bad })));
            assert_eq!((path.as_str(), rule), ("/settings/maxChildRuns", "max_child_runs"));
            assert!(message.contains("from 1 to 100000"), "{message}");
        }
        assert!(compile(noop("a"), json!({ "maxChildRuns": 100_000 })).is_ok());
    }

    #[test]
    fn max_concurrent_children_is_an_integer_within_the_width_ceiling() {
        for bad in [json!(0), json!(65), json!(true)] {
            let (path, rule, message) = refused(compile(noop("a"), json!({ "maxConcurrentChildren": bad })));
            assert_eq!((path.as_str(), rule), ("/settings/maxConcurrentChildren", "max_concurrent_children"));
            assert!(message.contains("from 1 to 64"), "{message}");
        }
        assert!(compile(noop("a"), json!({ "maxConcurrentChildren": 64 })).is_ok());
    }

    #[test]
    fn max_node_executions_is_a_positive_integer() {
        for bad in [json!(0), json!(2.5), json!(null)] {
            let (path, rule, message) = refused(compile(noop("a"), json!({ "maxNodeExecutions": bad })));
            assert_eq!((path.as_str(), rule), ("/settings/maxNodeExecutions", "max_node_executions"));
            assert!(message.contains("an integer ≥ 1"), "{message}");
        }
        let workflow = compile(noop("a"), json!({ "maxNodeExecutions": 7 })).expect("registers");
        assert_eq!(super::max_node_executions(&workflow.definition.settings), Some(7));
    }

    #[test]
    fn max_node_executions_lowers_the_runs_limit_and_never_raises_it() {
        let principal = crate::run::Principal {
            tenant: "t".into(),
            subject: "s".into(),
            key_class: "api-key".into(),
            test_scope: false,
        };
        let limit_of = |setting: u64, host: u32| {
            let workflow = compile(noop("a"), json!({ "maxNodeExecutions": setting })).expect("registers");
            let limits = crate::run::RunLimits { max_node_executions: host, run_duration_ms: 1_000 };
            let run =
                crate::service::new_run("r".into(), &principal, &workflow, "ns".into(), Default::default(), limits, 0);
            run.limits.max_node_executions
        };
        assert_eq!(limit_of(7, 1_000), 7);
        assert_eq!(limit_of(5_000, 1_000), 1_000);
    }
}
