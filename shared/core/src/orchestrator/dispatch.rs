//! The `core.dispatch` config (`DispatchConfig`, closed) and the per-worker mapping rules of
//! RFC 0022 §A: `effective = perWorker…Mappings[workerId] ?? …Mapping ?? {}`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// `{childVar: parentVar}` or `{parentVar: childVar}`, in key order.
pub type Mapping = Vec<(String, String)>;

/// What a sequential dispatch does with more than one worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanOut {
    /// One after the other; child N's output mapping is visible to child N+1's inputs.
    Sequential,
    /// More than one worker fails the node with `fan_out_unsupported`.
    Reject,
}

/// A parsed, checked `core.dispatch` config.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DispatchConfig {
    /// `reject` or `sequential` (default).
    pub fan_out: Option<FanOut>,
    /// Child runs per run, across dispatch nodes (`iterationCap`).
    pub iteration_cap: Option<u64>,
    /// Default input mapping (`childVar → parentVar`).
    pub input_mapping: Mapping,
    /// Default output mapping (`parentVar → childVar`).
    pub output_mapping: Mapping,
    /// Per-worker input mappings, by child workflow id.
    pub per_worker_input: BTreeMap<String, Mapping>,
    /// Per-worker output mappings, by child workflow id.
    pub per_worker_output: BTreeMap<String, Mapping>,
}

const FIELDS: [&str; 11] = [
    "askUserRouting",
    "workerDispatchModel",
    "fanOutPolicy",
    "iterationCap",
    "inputMapping",
    "outputMapping",
    "perWorkerInputMappings",
    "perWorkerOutputMappings",
    "joinPolicy",
    "maxConcurrency",
    "memoryScopeIsolation",
];

fn mapping(value: Option<&Value>, field: &str) -> Result<Mapping, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| {
                v.as_str().map(|v| (k.clone(), v.to_owned())).ok_or_else(|| format!("`{field}` values are strings"))
            })
            .collect(),
        Some(_) => Err(format!("`{field}` must be an object of strings")),
    }
}

fn per_worker(value: Option<&Value>, field: &str) -> Result<BTreeMap<String, Mapping>, String> {
    match value {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => {
            map.iter().map(|(worker, inner)| Ok((worker.clone(), mapping(Some(inner), field)?))).collect()
        }
        Some(_) => Err(format!("`{field}` must map worker ids to mappings")),
    }
}

impl DispatchConfig {
    /// Parses and checks a node's config against the closed `DispatchConfig`. Parallel
    /// fan-out (RFC 0118) is not served by this host and is refused here.
    pub fn parse(config: &Map<String, Value>) -> Result<Self, String> {
        if let Some(unknown) = config.keys().find(|key| !FIELDS.contains(&key.as_str())) {
            return Err(format!("core.dispatch has no config field `{unknown}`"));
        }
        match config.get("askUserRouting").map(|v| v.as_str()) {
            None | Some(Some("auto" | "clarification")) => {}
            Some(Some("conversation")) => {
                return Err("askUserRouting `conversation` needs conversationPrimitive, which this host lacks".into())
            }
            Some(_) => return Err("askUserRouting must be `auto`, `clarification` or `conversation`".into()),
        }
        match config.get("workerDispatchModel").map(|v| v.as_str()) {
            None | Some(Some("child-run")) => {}
            Some(_) => return Err("workerDispatchModel must be `child-run`, the only model this host serves".into()),
        }
        let fan_out = match config.get("fanOutPolicy").map(|v| v.as_str()) {
            None => None,
            Some(Some("sequential")) => Some(FanOut::Sequential),
            Some(Some("reject")) => Some(FanOut::Reject),
            Some(Some("parallel")) => {
                return Err(
                    "fanOutPolicy `parallel` is not served by this host (fanOutPolicies: sequential, reject)".into()
                )
            }
            Some(_) => return Err("fanOutPolicy must be `sequential` or `reject`".into()),
        };
        for parallel_only in ["joinPolicy", "maxConcurrency"] {
            if config.contains_key(parallel_only) {
                return Err(format!(
                    "`{parallel_only}` applies only to parallel fan-out, which this host does not serve"
                ));
            }
        }
        if config.get("memoryScopeIsolation").is_some_and(|v| v != "isolated") {
            return Err("memoryScopeIsolation must be `isolated`".into());
        }
        let iteration_cap = match config.get("iterationCap") {
            None | Some(Value::Null) => None,
            Some(value) => Some(value.as_u64().filter(|cap| *cap >= 1).ok_or("iterationCap must be an integer ≥ 1")?),
        };
        Ok(Self {
            fan_out,
            iteration_cap,
            input_mapping: mapping(config.get("inputMapping"), "inputMapping")?,
            output_mapping: mapping(config.get("outputMapping"), "outputMapping")?,
            per_worker_input: per_worker(config.get("perWorkerInputMappings"), "perWorkerInputMappings")?,
            per_worker_output: per_worker(config.get("perWorkerOutputMappings"), "perWorkerOutputMappings")?,
        })
    }

    /// Whether any mapping field is non-empty (needs `agents.dispatchMapping`).
    pub fn maps(&self) -> bool {
        !self.input_mapping.is_empty()
            || !self.output_mapping.is_empty()
            || self.per_worker_input.values().any(|m| !m.is_empty())
            || self.per_worker_output.values().any(|m| !m.is_empty())
    }

    /// The input mapping for `worker`.
    pub fn input_for(&self, worker: &str) -> &Mapping {
        self.per_worker_input.get(worker).unwrap_or(&self.input_mapping)
    }

    /// The output mapping for `worker`.
    pub fn output_for(&self, worker: &str) -> &Mapping {
        self.per_worker_output.get(worker).unwrap_or(&self.output_mapping)
    }
}

/// Whether a raw `core.dispatch` config has a non-empty mapping field (the refusal scan runs
/// before the config is parsed).
pub fn raw_maps(config: &Value) -> bool {
    let non_empty = |field: &str| config.get(field).and_then(Value::as_object).is_some_and(|m| !m.is_empty());
    let per_worker_non_empty = |field: &str| {
        config
            .get(field)
            .and_then(Value::as_object)
            .is_some_and(|m| m.values().any(|inner| inner.as_object().is_some_and(|i| !i.is_empty())))
    };
    non_empty("inputMapping")
        || non_empty("outputMapping")
        || per_worker_non_empty("perWorkerInputMappings")
        || per_worker_non_empty("perWorkerOutputMappings")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: Value) -> Result<DispatchConfig, String> {
        DispatchConfig::parse(value.as_object().unwrap())
    }

    #[test]
    fn per_worker_mappings_take_precedence() {
        let config = parse(json!({"inputMapping": {"input": "defaultX"},
            "perWorkerInputMappings": {"b": {"input": "sharedVar"}}}))
        .unwrap();
        assert_eq!(config.input_for("a"), &vec![("input".to_owned(), "defaultX".to_owned())]);
        assert_eq!(config.input_for("b"), &vec![("input".to_owned(), "sharedVar".to_owned())]);
        assert!(config.output_for("a").is_empty());
        assert!(config.maps());
    }

    #[test]
    fn parallel_and_unknown_fields_are_refused() {
        for bad in [
            json!({"fanOutPolicy": "parallel"}),
            json!({"joinPolicy": {"mode": "wait-all"}}),
            json!({"surprise": 1}),
            json!({"inputMapping": "prdId"}),
            json!({"workerDispatchModel": "in-process"}),
            json!({"askUserRouting": "conversation"}),
        ] {
            assert!(parse(bad.clone()).is_err(), "{bad}");
        }
        assert_eq!(parse(json!({"fanOutPolicy": "reject"})).unwrap().fan_out, Some(FanOut::Reject));
    }
}
