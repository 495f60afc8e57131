//! The model-backed decision source, its pure half: the supervisor config that names a model
//! route ([`ModelConfig`]), the answer the model must give (a Tier-1 JSON schema of the
//! `OrchestratorDecision`, [`answer_schema`]), what the model is told ([`prompt`]) and how
//! an answer becomes a [`Proposal`] ([`read_answer`]).
//!
//! A supervisor is model-backed when its config names a route (`route: "provider/model"`,
//! or `provider` / `model` as `core.ai.callPrompt` names them) or a `goal` (then the host's
//! default provider), and no scripted plan (`mockDispatchPlan`, `mockDecisions`,
//! `mockPendingDecision`). Its tick is then an
//! activity (the model call runs outside the engine); the engine hands the activity the
//! run's orchestration context under [`CONTEXT_INPUT`] and records the answer through the
//! same decision path as a scripted one.
//!
//! The answer is `{"decision": D}` where `D` is one of the three canonical kinds with every
//! field present (optional ones as `null`, the Tier-1 rule) and `nextWorkerInputs` items as
//! JSON-encoded objects (Tier 1 has no free-form object). Bounds the subset cannot express
//! (`minItems`, `minLength`, `confidence` in 0..1) are checked by [`Decision::parse`], and
//! the ids against the worker catalog; every problem is a violation `{path, message}` the
//! repair turn names.

use serde_json::{json, Map, Value};

use super::{plan_of, Decision, Proposal};

/// The input key under which the engine hands the activity the run's orchestration context
/// (`{tick, history, userAnswer?}`).
pub const CONTEXT_INPUT: &str = "trellis.orchestration";
/// History entries the model sees at most (the latest ones).
pub const MAX_HISTORY: usize = 20;
/// The longest JSON text (in bytes) of one worker's history entry, or of the user's answer,
/// the model sees: a longer entry has its `outputs` cut, once, to fit ([`worker_entry`]).
pub const MAX_OUTPUT_CHARS: usize = 4_000;
/// Config keys of a model-backed supervisor.
const FIELDS: [&str; 13] = [
    "route",
    "provider",
    "model",
    "goal",
    "instructions",
    "successCriteria",
    "workers",
    "temperature",
    "maxTokens",
    "timeoutMs",
    "stream",
    "agentId",
    "iterationCap",
];

/// One dispatchable worker as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Worker {
    /// The worker's workflow id.
    pub id: String,
    /// What it does.
    pub description: Option<String>,
    /// The inputs it takes (a JSON schema, or the workflow's variable declarations).
    pub input_schema: Option<Value>,
}

/// A parsed model-backed supervisor config.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The provider id (`None`: the host's default provider).
    pub provider: Option<String>,
    /// The model id (`None`: the provider's first model).
    pub model: Option<String>,
    /// What the run is for.
    pub goal: String,
    /// Extra instructions.
    pub instructions: Option<String>,
    /// `(key, description)` of each success criterion.
    pub success_criteria: Vec<(String, String)>,
    /// The workers it may dispatch (empty: any workflow id).
    pub workers: Vec<Worker>,
}

/// Whether a supervisor config is model-backed: a route or a goal, and no scripted plan.
pub fn routed(config: &Map<String, Value>) -> bool {
    let route = ["route", "provider", "model", "goal"].iter().any(|key| config.get(*key).is_some_and(|v| !v.is_null()));
    route && plan_of(config).is_none() && !config.contains_key("mockPendingDecision")
}

fn text(config: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match config.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if !text.is_empty() => Ok(Some(text.clone())),
        Some(_) => Err(format!("`{key}` must be a non-empty string")),
    }
}

impl ModelConfig {
    /// Parses and checks a model-backed supervisor config; the message names the field.
    pub fn parse(config: &Map<String, Value>) -> Result<Self, String> {
        if let Some(unknown) = config.keys().find(|key| !FIELDS.contains(&key.as_str())) {
            return Err(format!("a model-backed supervisor has no config field `{unknown}`"));
        }
        let (mut provider, mut model) = (text(config, "provider")?, text(config, "model")?);
        if let Some(route) = text(config, "route")? {
            if provider.is_some() || model.is_some() {
                return Err("name the model either as `route` or as `provider` + `model`, not both".into());
            }
            match route.split_once('/') {
                Some((p, m)) if !p.is_empty() && !m.is_empty() => (provider, model) = (Some(p.into()), Some(m.into())),
                _ => return Err("`route` must be \"provider/model\"".into()),
            }
        }
        let goal = text(config, "goal")?.ok_or("a model-backed supervisor needs a `goal`")?;
        check_call_params(config)?;
        let instructions = text(config, "instructions")?;
        let mut success_criteria = Vec::new();
        for (index, item) in config.get("successCriteria").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let key = item.get("key").and_then(Value::as_str).filter(|k| !k.is_empty());
            let key = key.ok_or_else(|| format!("successCriteria[{index}].key must be a non-empty string"))?;
            let description = item.get("description").and_then(Value::as_str).unwrap_or_default();
            if success_criteria.iter().any(|(k, _)| k == key) {
                return Err(format!("successCriteria key `{key}` is listed twice"));
            }
            success_criteria.push((key.to_owned(), description.to_owned()));
        }
        if config.get("successCriteria").is_some_and(|v| !v.is_array() && !v.is_null()) {
            return Err("`successCriteria` must be an array of {key, description}".into());
        }
        let mut workers = Vec::new();
        for (index, item) in config.get("workers").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let worker = match item {
                Value::String(id) => Worker { id: id.clone(), description: None, input_schema: None },
                Value::Object(entry) => Worker {
                    id: entry.get("id").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    description: entry.get("description").and_then(Value::as_str).map(str::to_owned),
                    input_schema: entry.get("inputSchema").cloned(),
                },
                _ => {
                    return Err(format!("workers[{index}] must be a workflow id or {{id, description?, inputSchema?}}"))
                }
            };
            if worker.id.is_empty() || worker.id.len() > 256 {
                return Err(format!("workers[{index}].id must be 1 to 256 characters"));
            }
            workers.push(worker);
        }
        if config.get("workers").is_some_and(|v| !v.is_array() && !v.is_null()) {
            return Err("`workers` must be an array".into());
        }
        Ok(Self { provider, model, goal, instructions, success_criteria, workers })
    }
}

/// The call parameters, as `core.ai.callPrompt` checks them: `temperature` 0..=2,
/// `maxTokens` ≥ 1, `stream` a boolean, `timeoutMs` 1..=600000.
fn check_call_params(config: &Map<String, Value>) -> Result<(), String> {
    let present = |key: &str| config.get(key).filter(|v| !v.is_null());
    if present("temperature").is_some_and(|t| !t.as_f64().is_some_and(|t| (0.0..=2.0).contains(&t))) {
        return Err("`temperature` must be a number from 0 to 2".into());
    }
    if present("maxTokens").is_some_and(|n| n.as_u64().is_none_or(|n| n < 1)) {
        return Err("`maxTokens` must be an integer of at least 1".into());
    }
    if present("stream").is_some_and(|b| !b.is_boolean()) {
        return Err("`stream` must be a boolean".into());
    }
    if present("timeoutMs").is_some_and(|ms| !ms.as_u64().is_some_and(|ms| (1..=600_000).contains(&ms))) {
        return Err("`timeoutMs` must be an integer from 1 to 600000".into());
    }
    Ok(())
}

fn nullable(schema: Value) -> Value {
    json!({ "anyOf": [schema, { "type": "null" }] })
}

fn variant(kind: &str, mut properties: Map<String, Value>) -> Value {
    properties.insert("kind".into(), json!({ "type": "string", "enum": [kind] }));
    let required: Vec<String> = properties.keys().cloned().collect();
    json!({ "type": "object", "additionalProperties": false, "properties": properties, "required": required })
}

/// The Tier-1 schema of the answer: `{decision}`, one of the three kinds (worker ids and
/// criterion keys as enums when the config lists them).
pub fn answer_schema(config: &ModelConfig) -> Value {
    let mut worker_id = json!({ "type": "string" });
    if !config.workers.is_empty() {
        worker_id["enum"] = json!(config.workers.iter().map(|w| w.id.as_str()).collect::<Vec<_>>());
    }
    let mut criterion_key = json!({ "type": "string" });
    if !config.success_criteria.is_empty() {
        criterion_key["enum"] = json!(config.success_criteria.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>());
    }
    let confidence = nullable(json!({ "type": "number" }));
    let mut next = Map::new();
    next.insert("nextWorkerIds".into(), json!({ "type": "array", "items": worker_id }));
    next.insert("nextWorkerInputs".into(), nullable(json!({ "type": "array", "items": { "type": "string" } })));
    next.insert("confidence".into(), confidence.clone());
    let mut ask = Map::new();
    ask.insert("prompt".into(), json!({ "type": "string" }));
    let mut terminate = Map::new();
    terminate.insert("reason".into(), nullable(json!({ "type": "string" })));
    terminate.insert("confidence".into(), confidence);
    let criterion = json!({ "type": "object", "additionalProperties": false,
        "properties": { "key": criterion_key, "met": { "type": "boolean" } }, "required": ["key", "met"] });
    terminate.insert("successCriteria".into(), nullable(json!({ "type": "array", "items": criterion })));
    json!({
        "type": "object",
        "additionalProperties": false,
        "properties": { "decision": { "anyOf": [
            variant("next-worker", next), variant("ask-user", ask), variant("terminate", terminate)
        ] } },
        "required": ["decision"],
    })
}

fn violation(path: &str, message: impl Into<String>) -> Value {
    json!({ "path": path, "message": message.into() })
}

/// An answer (already valid against [`answer_schema`]) as a proposal: nulls dropped,
/// `nextWorkerInputs` decoded, [`Decision::parse`], worker ids in the catalog, and a
/// terminate judging every configured criterion. The CP-1 signal is the decision's own
/// `confidence`.
pub fn read_answer(config: &ModelConfig, answer: &Value) -> Result<Proposal, Vec<Value>> {
    let Some(raw) = answer.get("decision").and_then(Value::as_object) else {
        return Err(vec![violation("/decision", "the answer needs a `decision` object")]);
    };
    let mut decision: Map<String, Value> =
        raw.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())).collect();
    if let Some(items) = decision.get("nextWorkerInputs").and_then(Value::as_array).cloned() {
        let mut decoded = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let parsed = item.as_str().and_then(|text| serde_json::from_str::<Value>(text).ok());
            match parsed {
                Some(object @ Value::Object(_)) => decoded.push(object),
                _ => {
                    let path = format!("/decision/nextWorkerInputs/{index}");
                    return Err(vec![violation(&path, "each item is one JSON-encoded object of the worker's inputs")]);
                }
            }
        }
        decision.insert("nextWorkerInputs".into(), Value::Array(decoded));
    }
    let decision =
        Decision::parse(&Value::Object(decision)).map_err(|problem| vec![violation("/decision", problem)])?;
    let mut violations = Vec::new();
    match &decision {
        Decision::NextWorker { next_worker_ids, next_worker_inputs, .. } => {
            for (index, id) in next_worker_ids.iter().enumerate() {
                if !config.workers.is_empty() && !config.workers.iter().any(|w| &w.id == id) {
                    violations
                        .push(violation(&format!("/decision/nextWorkerIds/{index}"), "not a worker of the catalog"));
                }
            }
            if next_worker_inputs.as_ref().is_some_and(|items| items.len() != next_worker_ids.len()) {
                violations.push(violation("/decision/nextWorkerInputs", "one entry per nextWorkerIds entry, or null"));
            }
        }
        Decision::Terminate { success_criteria, .. } => {
            let judged = success_criteria.as_deref().unwrap_or_default();
            for (key, _) in &config.success_criteria {
                if !judged.iter().any(|c| &c.key == key) {
                    violations.push(violation("/decision/successCriteria", format!("judge criterion `{key}`")));
                }
            }
        }
        Decision::AskUser { .. } => {}
    }
    if !violations.is_empty() {
        return Err(violations);
    }
    let confidence = decision.confidence();
    Ok(Proposal { decision, confidence })
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
fn prefix(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `value` as the model is shown it: its JSON text cut at [`MAX_OUTPUT_CHARS`] when longer.
pub fn shown(value: &Value) -> Value {
    let text = value.to_string();
    if text.len() <= MAX_OUTPUT_CHARS {
        return value.clone();
    }
    json!(format!("{}… (cut)", prefix(&text, MAX_OUTPUT_CHARS)))
}

/// The history entry of a harvested worker: `{workerId, childRunId, status, outputs}`. When its
/// JSON text is longer than [`MAX_OUTPUT_CHARS`], only `outputs` is cut: it becomes the start of
/// its JSON text (a string), as long as the other fields leave room for, and the entry says so
/// with `outputsTruncated: {totalChars}` (the length of the whole outputs' JSON text).
pub fn worker_entry(worker_id: &str, child_run_id: &str, status: &str, outputs: &Value) -> Value {
    let mut entry = json!({ "workerId": worker_id, "childRunId": child_run_id, "status": status, "outputs": outputs });
    if entry.to_string().len() <= MAX_OUTPUT_CHARS {
        return entry;
    }
    let text = outputs.to_string();
    entry["outputs"] = json!("");
    entry["outputsTruncated"] = json!({ "totalChars": text.len() });
    // The longest cut that fits, escaping included (a binary search over its raw length).
    let fits = |entry: &mut Value, room: usize| {
        entry["outputs"] = json!(prefix(&text, room));
        entry.to_string().len() <= MAX_OUTPUT_CHARS
    };
    let (mut low, mut high) = (0, MAX_OUTPUT_CHARS.min(text.len()));
    while low < high {
        let mid = (low + high).div_ceil(2);
        if fits(&mut entry, mid) {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    entry["outputs"] = json!(prefix(&text, low));
    entry
}

/// The engine's orchestration context for one tick: `{tick, history (the latest
/// [`MAX_HISTORY`], as recorded: worker outputs were cut once, by [`worker_entry`]),
/// userAnswer? (cut by [`shown`])}`.
pub fn context(tick: u32, history: &[Value], user_answer: Option<&Value>) -> Value {
    let latest = &history[history.len().saturating_sub(MAX_HISTORY)..];
    let mut context = json!({ "tick": tick, "history": latest });
    if let Some(answer) = user_answer.filter(|a| !a.is_null()) {
        context["userAnswer"] = shown(answer);
    }
    context
}

/// The system and user messages of one tick.
pub fn prompt(config: &ModelConfig, context: &Value) -> (String, String) {
    let mut system = String::from(
        "You are the supervisor of a workflow run. Each turn you make exactly one decision: dispatch workers \
         (next-worker), ask the human a question (ask-user), or end the run (terminate). Answer with one JSON \
         object {\"decision\": …} matching the response schema: every field present, null when it does not apply. \
         nextWorkerInputs items are JSON-encoded objects of the worker's inputs, one per worker id, or null. \
         confidence is your confidence in the decision, from 0 to 1. When you terminate, judge every success \
         criterion honestly (met: false when it is not satisfied). A history entry with outputsTruncated shows only \
         the start of the worker's outputs, as JSON text.",
    );
    if let Some(instructions) = &config.instructions {
        system.push_str("\n\n");
        system.push_str(instructions);
    }
    let workers: Vec<Value> = config
        .workers
        .iter()
        .map(|w| json!({ "id": w.id, "description": w.description, "inputSchema": w.input_schema }))
        .collect();
    let criteria: Vec<Value> = config
        .success_criteria
        .iter()
        .map(|(key, description)| json!({ "key": key, "description": description }))
        .collect();
    let user = json!({
        "goal": config.goal,
        "workers": workers,
        "successCriteria": criteria,
        "tick": context.get("tick"),
        "history": context.get("history").cloned().unwrap_or_else(|| json!([])),
        "userAnswer": context.get("userAnswer"),
    });
    let user = serde_json::to_string_pretty(&user).unwrap_or_else(|_| user.to_string());
    (system, format!("The run so far, as JSON:\n{user}\n\nYour decision:"))
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
