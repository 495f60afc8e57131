//! A scripted activity for engine and worker tests: `test.scripted` answers each attempt
//! with the next scripted result (the last one repeats), optionally after a delay, and
//! records every call it got. `config.idempotent: true` makes it an idempotent call;
//! `config.timeoutMs` is its own attempt budget (default 5000).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::activity::{Activity, ActivityCall, ActivityError, ActivityResult, ProgressSink};
use crate::interrupt::request::ConfigIssue;
use crate::nodes::{NodeContext, NodeRegistry};
use crate::run::RunError;

/// The type id of [`ScriptedActivity`].
pub const SCRIPTED_TYPE_ID: &str = "test.scripted";

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Scripted {
    /// What the attempt returns.
    pub result: ActivityResult,
    /// How long it takes first.
    pub delay: Duration,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct ScriptedActivity {
    script: Mutex<VecDeque<Scripted>>,
    calls: Mutex<Vec<ActivityCall>>,
}

impl ScriptedActivity {
    /// An activity answering `results` in order (the last repeats; none: empty outputs).
    pub fn new(results: Vec<ActivityResult>) -> Arc<Self> {
        let script = results.into_iter().map(|result| Scripted { result, delay: Duration::ZERO }).collect();
        Arc::new(Self { script: Mutex::new(script), calls: Mutex::new(Vec::new()) })
    }

    /// An activity answering `script` in order.
    pub fn scripted(script: Vec<Scripted>) -> Arc<Self> {
        Arc::new(Self { script: Mutex::new(script.into()), calls: Mutex::new(Vec::new()) })
    }

    /// The calls it got, in order.
    pub fn calls(&self) -> Vec<ActivityCall> {
        self.calls.lock().expect("calls lock").clone()
    }

    /// A registry with this activity.
    pub fn registry(self: &Arc<Self>) -> NodeRegistry {
        NodeRegistry::new().register(self.clone())
    }
}

/// A retryable failure with `code`.
pub fn transient(code: &str) -> ActivityResult {
    Err(ActivityError::new(code, format!("scripted {code}"), true))
}

/// A non-retryable failure with `code`.
pub fn permanent(code: &str) -> ActivityResult {
    Err(ActivityError::new(code, format!("scripted {code}"), false))
}

/// A success with `outputs`.
pub fn success(outputs: Value) -> ActivityResult {
    Ok(outputs.as_object().cloned().unwrap_or_default())
}

#[async_trait]
impl Activity for ScriptedActivity {
    fn type_id(&self) -> &'static str {
        SCRIPTED_TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        match config.get("timeoutMs") {
            Some(value) if !value.is_u64() => Err(ConfigIssue::Invalid("config.timeoutMs must be an integer".into())),
            _ => Ok(()),
        }
    }

    fn idempotent(&self, config: &Map<String, Value>) -> bool {
        config.get("idempotent").and_then(Value::as_bool).unwrap_or(false)
    }

    fn attempt_timeout_ms(&self, config: &Map<String, Value>) -> u64 {
        config.get("timeoutMs").and_then(Value::as_u64).unwrap_or(5_000)
    }

    fn prepare(&self, context: &NodeContext<'_>) -> Result<Value, RunError> {
        if context.config.get("refuse").and_then(Value::as_bool) == Some(true) {
            return Err(RunError::new("validation_error", "scripted refusal to prepare"));
        }
        Ok(serde_json::json!({ "config": context.config, "inputs": context.inputs }))
    }

    async fn execute(&self, call: &ActivityCall, _progress: &dyn ProgressSink) -> ActivityResult {
        self.calls.lock().expect("calls lock").push(call.clone());
        let next = {
            let mut script = self.script.lock().expect("script lock");
            if script.len() > 1 {
                script.pop_front()
            } else {
                script.front().cloned()
            }
        };
        let Some(next) = next else { return Ok(Map::new()) };
        if !next.delay.is_zero() {
            tokio::time::sleep(next.delay).await;
        }
        next.result
    }
}
