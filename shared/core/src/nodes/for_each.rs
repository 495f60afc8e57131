//! `vendor.trellis.forEach`: runs a child workflow once per item, at most `maxConcurrency`
//! at a time, and gathers the results in item order.
//!
//! Config (closed):
//!
//! | field | default | meaning |
//! |---|---|---|
//! | `items` | required | the items: a JSON array, or the name of the run variable holding one (read once, when the node starts) |
//! | `workflowId` | required | the child workflow each item runs |
//! | `maxConcurrency` | 10 | most children running at once (capped by the host's `dispatch.maxFanOut`) |
//! | `onItemFailure` | `isolate` | `isolate`: a failed item is recorded and the others go on; `fail-fast`: the first failure cancels the rest and fails the node |
//! | `resultsVariable` | `results` | the run variable the results land in, one entry per item in item order |
//! | `itemVariable` / `indexVariable` | `item` / `index` | the child inputs carrying the item and its index |
//! | `inputMapping` | `{}` | more child inputs, `{childVar: parentVar}` |
//! | `outputVariables` | all | which child variables each result keeps |
//!
//! A result is `{index, childRunId, status, outputs}` for a completed item and `{index,
//! childRunId, status, error}` otherwise. The engine runs the loop (see `engine/fanout.rs`);
//! this module validates the config and asks for it. Running an activity per item
//! (`activity`) is not served by this host: such a config is refused at registration.

use serde_json::{Map, Value};

use super::{NodeContext, NodeKind, NodeOutcome};
use crate::interrupt::request::ConfigIssue;
use crate::run::RunError;

/// The `vendor.trellis.forEach` type id.
pub const TYPE_ID: &str = "vendor.trellis.forEach";
/// `maxConcurrency` when the config names none.
pub const DEFAULT_CONCURRENCY: u32 = 10;

/// The `vendor.trellis.forEach` kind.
pub(super) struct ForEach;

/// Where the items come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Items {
    /// Written in the config: this many. Item `k` is read from the node's config
    /// (`config.items[k]`) when its child starts, so parsing the config copies no item.
    Literal(usize),
    /// The run variable of this name (an array when the node starts).
    Variable(String),
}

/// The parsed config.
#[derive(Debug, Clone, PartialEq)]
pub struct ForEachConfig {
    /// The items.
    pub items: Items,
    /// The child workflow.
    pub workflow_id: String,
    /// Most children at once.
    pub max_concurrency: u32,
    /// The first failed item cancels the rest and fails the node.
    pub fail_fast: bool,
    /// Where the results land.
    pub results_variable: String,
    /// The child input carrying the item.
    pub item_variable: String,
    /// The child input carrying the item's index.
    pub index_variable: String,
    /// `{childVar: parentVar}`.
    pub input_mapping: Vec<(String, String)>,
    /// The child variables a result keeps (`None`: all).
    pub output_variables: Option<Vec<String>>,
}

const FIELDS: [&str; 10] = [
    "items",
    "workflowId",
    "maxConcurrency",
    "onItemFailure",
    "resultsVariable",
    "itemVariable",
    "indexVariable",
    "inputMapping",
    "outputVariables",
    "activity",
];

fn name(config: &Map<String, Value>, field: &str, default: &str) -> Result<String, String> {
    match config.get(field) {
        None => Ok(default.to_owned()),
        Some(Value::String(name)) if !name.is_empty() => Ok(name.clone()),
        Some(_) => Err(format!("`{field}` must be a non-empty string")),
    }
}

impl ForEachConfig {
    /// Parses and checks a node's config.
    pub fn parse(config: &Map<String, Value>) -> Result<Self, String> {
        if let Some(unknown) = config.keys().find(|key| !FIELDS.contains(&key.as_str())) {
            return Err(format!("{TYPE_ID} has no config field `{unknown}`"));
        }
        if config.contains_key("activity") {
            return Err(format!(
                "{TYPE_ID} `activity` items are not served by this host; run each item as a child workflow (`workflowId`)"
            ));
        }
        let items = match config.get("items") {
            Some(Value::Array(items)) => Items::Literal(items.len()),
            Some(Value::String(variable)) if !variable.is_empty() => Items::Variable(variable.clone()),
            Some(_) => return Err("`items` must be an array or the name of a run variable holding one".into()),
            None => return Err(format!("{TYPE_ID} needs config.items")),
        };
        let workflow_id = match config.get("workflowId") {
            Some(Value::String(id)) if !id.is_empty() => id.clone(),
            Some(_) => return Err("`workflowId` must be a non-empty string".into()),
            None => return Err(format!("{TYPE_ID} needs config.workflowId")),
        };
        let max_concurrency = crate::orchestrator::dispatch::positive(config.get("maxConcurrency"), "maxConcurrency")?
            .unwrap_or(DEFAULT_CONCURRENCY);
        let fail_fast = match config.get("onItemFailure").map(Value::as_str) {
            None | Some(Some("isolate")) => false,
            Some(Some("fail-fast")) => true,
            Some(_) => return Err("`onItemFailure` must be `isolate` or `fail-fast`".into()),
        };
        let input_mapping = match config.get("inputMapping") {
            None => Vec::new(),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| {
                    v.as_str().map(|v| (k.clone(), v.to_owned())).ok_or("`inputMapping` values must be strings")
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err("`inputMapping` must be an object of strings".into()),
        };
        let output_variables = match config.get("outputVariables") {
            None => None,
            Some(Value::Array(names)) => Some(
                names
                    .iter()
                    .map(|n| n.as_str().map(str::to_owned).ok_or("`outputVariables` must be an array of strings"))
                    .collect::<Result<_, _>>()?,
            ),
            Some(_) => return Err("`outputVariables` must be an array of strings".into()),
        };
        Ok(Self {
            items,
            workflow_id,
            max_concurrency,
            fail_fast,
            results_variable: name(config, "resultsVariable", "results")?,
            item_variable: name(config, "itemVariable", "item")?,
            index_variable: name(config, "indexVariable", "index")?,
            input_mapping,
            output_variables,
        })
    }
}

impl NodeKind for ForEach {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        ForEachConfig::parse(config).map(|_| ()).map_err(ConfigIssue::Invalid)
    }

    fn execute(&self, context: &NodeContext<'_>) -> NodeOutcome {
        match ForEachConfig::parse(context.config) {
            Ok(_) => NodeOutcome::ForEach,
            Err(message) => NodeOutcome::Failed(RunError::new("validation_error", message)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: Value) -> Result<ForEachConfig, String> {
        ForEachConfig::parse(value.as_object().unwrap())
    }

    #[test]
    fn defaults_and_sources() {
        let config = parse(json!({"items": "leads", "workflowId": "investigate"})).unwrap();
        assert_eq!(config.items, Items::Variable("leads".into()));
        assert_eq!(config.max_concurrency, DEFAULT_CONCURRENCY);
        assert!(!config.fail_fast);
        assert_eq!((config.results_variable.as_str(), config.item_variable.as_str()), ("results", "item"));
        let config = parse(json!({"items": [1, 2], "workflowId": "w", "onItemFailure": "fail-fast",
                                  "maxConcurrency": 3, "outputVariables": ["verdict"]}))
        .unwrap();
        assert_eq!(config.items, Items::Literal(2));
        assert!(config.fail_fast);
        assert_eq!(config.output_variables, Some(vec!["verdict".to_owned()]));
    }

    #[test]
    fn bad_configs_name_the_field() {
        for (bad, field) in [
            (json!({"workflowId": "w"}), "items"),
            (json!({"items": 3, "workflowId": "w"}), "items"),
            (json!({"items": []}), "workflowId"),
            (json!({"items": [], "workflowId": "w", "maxConcurrency": 0}), "maxConcurrency"),
            (json!({"items": [], "workflowId": "w", "onItemFailure": "ignore"}), "onItemFailure"),
            (json!({"items": [], "workflowId": "w", "surprise": 1}), "surprise"),
            (json!({"items": [], "activity": {"typeId": "core.http.request"}}), "activity"),
            (json!({"items": [], "workflowId": "w", "resultsVariable": ""}), "resultsVariable"),
        ] {
            let message = parse(bad.clone()).unwrap_err();
            assert!(message.contains(field), "{bad}: {message}");
        }
    }
}
