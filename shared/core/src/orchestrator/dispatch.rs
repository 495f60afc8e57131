//! The `core.dispatch` config (`DispatchConfig`, closed), the per-worker mapping rules of
//! RFC 0022 §A (`effective = perWorker…Mappings[workerId] ?? …Mapping ?? {}`) and RFC 0118's
//! parallel fan-out: `fanOutPolicy: parallel`, `joinPolicy {mode, quorum?, onChildFailure}`
//! and `maxConcurrency`, with the registration refusals of `node-packs.md` (a `joinPolicy` or
//! `maxConcurrency` without `parallel`, a `quorum` mode without its integer).

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
    /// RFC 0118: the workers run concurrently, at most `maxConcurrency` at a time, and join
    /// under the [`JoinPolicy`].
    Parallel,
}

/// When a parallel fan-out's join is met (`joinPolicy.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JoinMode {
    /// Every child ended.
    #[default]
    WaitAll,
    /// This many children completed; the rest are cancelled.
    Quorum(u32),
    /// One child completed; the rest are cancelled.
    First,
    /// One child ended, however; the rest are cancelled.
    Race,
}

impl JoinMode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::WaitAll => "wait-all",
            Self::Quorum(_) => "quorum",
            Self::First => "first",
            Self::Race => "race",
        }
    }
}

/// What a failed or cancelled child does to a parallel fan-out (`joinPolicy.onChildFailure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnChildFailure {
    /// Recorded in `children[]`; the join decides (`partial` when it is still met).
    #[default]
    Collect,
    /// The first failed or cancelled child fails the join and cancels the rest.
    FailFast,
    /// Like `collect`: the failure is absorbed into a `partial` outcome.
    Absorb,
}

impl OnChildFailure {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Collect => "collect",
            Self::FailFast => "fail-fast",
            Self::Absorb => "absorb",
        }
    }
}

/// The join modes this host serves, as advertised (`dispatch.joinModes`).
pub const JOIN_MODES: [&str; 4] = ["wait-all", "quorum", "first", "race"];
/// The child-failure policies this host serves (`dispatch.onChildFailureModes`).
pub const ON_CHILD_FAILURE_MODES: [&str; 3] = ["collect", "fail-fast", "absorb"];

/// A parallel fan-out's join policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JoinPolicy {
    /// When the join is met.
    pub mode: JoinMode,
    /// What a failed child does.
    pub on_child_failure: OnChildFailure,
}

impl JoinPolicy {
    /// Parses the closed `joinPolicy` object.
    pub fn parse(value: &Value) -> Result<Self, String> {
        let Some(fields) = value.as_object() else { return Err("`joinPolicy` must be an object".into()) };
        if let Some(unknown) = fields.keys().find(|key| !["mode", "quorum", "onChildFailure"].contains(&key.as_str())) {
            return Err(format!("`joinPolicy` has no field `{unknown}` (mode, quorum, onChildFailure)"));
        }
        let quorum = positive(fields.get("quorum"), "joinPolicy.quorum")?;
        let mode = match fields.get("mode").map(Value::as_str) {
            None | Some(Some("wait-all")) => JoinMode::WaitAll,
            Some(Some("quorum")) => {
                JoinMode::Quorum(quorum.ok_or("`joinPolicy.mode` `quorum` needs an integer `joinPolicy.quorum` ≥ 1")?)
            }
            Some(Some("first")) => JoinMode::First,
            Some(Some("race")) => JoinMode::Race,
            Some(_) => return Err("`joinPolicy.mode` must be one of wait-all, quorum, first, race".into()),
        };
        if quorum.is_some() && !matches!(mode, JoinMode::Quorum(_)) {
            return Err("`joinPolicy.quorum` applies only to mode `quorum`".into());
        }
        let on_child_failure = match fields.get("onChildFailure").map(Value::as_str) {
            None | Some(Some("collect")) => OnChildFailure::Collect,
            Some(Some("fail-fast")) => OnChildFailure::FailFast,
            Some(Some("absorb")) => OnChildFailure::Absorb,
            Some(_) => return Err("`joinPolicy.onChildFailure` must be one of collect, fail-fast, absorb".into()),
        };
        Ok(Self { mode, on_child_failure })
    }
}

/// A parsed, checked `core.dispatch` config.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DispatchConfig {
    /// `reject`, `parallel` or `sequential` (default).
    pub fan_out: Option<FanOut>,
    /// The join of a parallel fan-out (wait-all, collect by default).
    pub join: JoinPolicy,
    /// At most this many children of a parallel fan-out run at once (`maxConcurrency`).
    pub max_concurrency: Option<u32>,
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

/// An optional integer ≥ 1 (that fits a `u32`) in `field`.
pub(crate) fn positive(value: Option<&Value>, field: &str) -> Result<Option<u32>, String> {
    value
        .map(|value| {
            value
                .as_u64()
                .filter(|n| *n >= 1)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| format!("`{field}` must be an integer ≥ 1"))
        })
        .transpose()
}

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
    /// Parses and checks a node's config against the closed `DispatchConfig`, with RFC
    /// 0118's cross-field rules.
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
            Some(Some("parallel")) => Some(FanOut::Parallel),
            Some(_) => return Err("fanOutPolicy must be `sequential`, `reject` or `parallel`".into()),
        };
        if fan_out != Some(FanOut::Parallel) {
            if let Some(parallel_only) = ["joinPolicy", "maxConcurrency"].into_iter().find(|f| config.contains_key(*f))
            {
                return Err(format!("`{parallel_only}` applies only to fanOutPolicy `parallel`"));
            }
        }
        let join = config.get("joinPolicy").map(JoinPolicy::parse).transpose()?.unwrap_or_default();
        let max_concurrency = positive(config.get("maxConcurrency"), "maxConcurrency")?;
        if config.get("memoryScopeIsolation").is_some_and(|v| v != "isolated") {
            return Err("memoryScopeIsolation must be `isolated`".into());
        }
        let iteration_cap = match config.get("iterationCap") {
            None | Some(Value::Null) => None,
            Some(value) => Some(value.as_u64().filter(|cap| *cap >= 1).ok_or("iterationCap must be an integer ≥ 1")?),
        };
        Ok(Self {
            fan_out,
            join,
            max_concurrency,
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
    fn parallel_configs_parse_with_their_cross_field_rules() {
        let config = parse(json!({"fanOutPolicy": "parallel", "maxConcurrency": 5,
            "joinPolicy": {"mode": "quorum", "quorum": 2, "onChildFailure": "absorb"}}))
        .unwrap();
        assert_eq!(config.fan_out, Some(FanOut::Parallel));
        assert_eq!(config.max_concurrency, Some(5));
        assert_eq!(config.join, JoinPolicy { mode: JoinMode::Quorum(2), on_child_failure: OnChildFailure::Absorb });
        assert_eq!(parse(json!({"fanOutPolicy": "parallel"})).unwrap().join, JoinPolicy::default());
        for (bad, names) in [
            (json!({"joinPolicy": {"mode": "wait-all"}}), "joinPolicy"),
            (json!({"fanOutPolicy": "sequential", "maxConcurrency": 2}), "maxConcurrency"),
            (json!({"fanOutPolicy": "parallel", "joinPolicy": {"mode": "quorum"}}), "quorum"),
            (json!({"fanOutPolicy": "parallel", "joinPolicy": {"mode": "quorum", "quorum": 0}}), "quorum"),
            (json!({"fanOutPolicy": "parallel", "joinPolicy": {"mode": "any"}}), "mode"),
            (json!({"fanOutPolicy": "parallel", "joinPolicy": {"onChildFailure": "explode"}}), "onChildFailure"),
            (json!({"fanOutPolicy": "parallel", "joinPolicy": {"mode": "wait-all", "extra": 1}}), "extra"),
            (json!({"fanOutPolicy": "parallel", "maxConcurrency": 0}), "maxConcurrency"),
            (json!({"fanOutPolicy": "broadcast"}), "fanOutPolicy"),
        ] {
            let message = parse(bad.clone()).unwrap_err();
            assert!(message.contains(names), "{bad}: {message}");
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        for bad in [
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
