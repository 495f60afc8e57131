//! Run budgets (RFC 0084, `RunOptions.configurable.budget`): the policy a run is created
//! with, what it consumed so far, and the content-free `budget.*` events. Pure — the engine
//! (`engine/budget.rs`) calls in and acts on the answers.
//!
//! - **Policy** ([`BudgetPolicy::parse`], checked at run creation): a closed object with the
//!   dimensions `maxTokens` (integer ≥ 1), `maxCostUsd` (number ≥ 0), `maxToolCalls`
//!   (integer ≥ 1), `maxRetries` (integer ≥ 0), the model lists `modelAllow[]` /
//!   `modelDeny[]` (unique strings, `*` matches any run of characters), `thresholdPercent`
//!   (0..100, default [`DEFAULT_THRESHOLD_PERCENT`]) and `onExhaustion` (`fail`, the
//!   default, or `interrupt`). An absent dimension is unbounded. Wall time is not a budget
//!   dimension (RFC 0058's `runTimeoutMs` is): a wall-time field is refused by name.
//!   Enforcement is always hard; the host advertises `enforce: "hard"`.
//! - **Effective budget**: the run scope only (this host resolves no workflow, agent or
//!   project budgets and advertises no `limits.maxBudget*` ceilings), recorded in
//!   `budget.reserved{effectiveBudget, scope: "run"}` when the run starts, and again after
//!   every allowance added on an exhaustion interrupt.
//! - **Consumption** ([`BudgetState::consume`]): tokens (input + output) and cost from every
//!   `provider.usage`, one retry per `node.retried`, one tool call per `agent.toolCalled`.
//!   Each consumption of a bounded dimension emits `budget.consumed{dimension, consumed,
//!   limit, remaining}`; the first that reaches `thresholdPercent` of the limit
//!   `budget.threshold.crossed{dimension, consumed, limit, percent}`; the first that
//!   exhausts it `budget.exhausted{dimension, consumed, limit}` — each once per dimension per
//!   reservation.
//! - **Exhaustion**: tokens and cost are metered after the spend, so they are exhausted when
//!   the consumption *reaches* the limit (nothing is left for another call); retries and tool
//!   calls are counted as they are about to happen, so they are exhausted when one *exceeds*
//!   the limit (`maxRetries: 2` allows two retries; the third exhausts it).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::run::RunError;

/// `budget.reserved`: the effective budget, at the start and after each added allowance.
pub const RESERVED: &str = "budget.reserved";
/// `budget.consumed`: a running projection of one dimension's spend.
pub const CONSUMED: &str = "budget.consumed";
/// `budget.threshold.crossed`: a dimension crossed `thresholdPercent` of its limit.
pub const THRESHOLD_CROSSED: &str = "budget.threshold.crossed";
/// `budget.exhausted`: a dimension hit its limit.
pub const EXHAUSTED: &str = "budget.exhausted";

/// `thresholdPercent` when the policy names none.
pub const DEFAULT_THRESHOLD_PERCENT: f64 = 80.0;
/// The `run.failed` error code of a run whose budget ran out (or whose exhaustion interrupt
/// was rejected).
pub const EXHAUSTED_CODE: &str = "budget_exhausted";
/// The `node.failed` error code of a model call the model policy refuses.
pub const MODEL_DENIED_CODE: &str = "budget_model_denied";
/// The `artifactType` of an exhaustion approval interrupt.
pub const GATE_ARTIFACT_TYPE: &str = "budget";

/// The budget fields a wall-time limit could be mistaken for (refused by name).
const WALL_TIME_FIELDS: [&str; 8] = [
    "maxWallTimeMs",
    "wallTimeMs",
    "maxDurationMs",
    "durationMs",
    "maxRunDurationMs",
    "runTimeoutMs",
    "timeoutMs",
    "maxWallClockMs",
];

/// A budget dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Dimension {
    /// Input plus output tokens over every `provider.usage`.
    Tokens,
    /// `costEstimateUsd` summed over every `provider.usage`.
    Cost,
    /// `agent.toolCalled` events.
    ToolCalls,
    /// `node.retried` events.
    Retries,
}

impl Dimension {
    /// Every dimension, in the order events report them.
    pub const ALL: [Dimension; 4] = [Self::Tokens, Self::Cost, Self::ToolCalls, Self::Retries];

    /// The wire spelling (`budget.*` `dimension`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tokens => "tokens",
            Self::Cost => "cost",
            Self::ToolCalls => "toolCalls",
            Self::Retries => "retries",
        }
    }

    /// The `cap.breached` kind of its exhaustion.
    pub fn cap_kind(self) -> &'static str {
        match self {
            Self::Tokens => "budget-tokens",
            Self::Cost => "budget-cost",
            Self::ToolCalls => "budget-tool-calls",
            Self::Retries => "budget-retries",
        }
    }

    /// The policy field of its limit.
    pub fn field(self) -> &'static str {
        match self {
            Self::Tokens => "maxTokens",
            Self::Cost => "maxCostUsd",
            Self::ToolCalls => "maxToolCalls",
            Self::Retries => "maxRetries",
        }
    }

    /// Whether it is metered after the spend (exhausted on reaching the limit) rather than
    /// counted before the unit happens (exhausted on exceeding it).
    fn metered(self) -> bool {
        matches!(self, Self::Tokens | Self::Cost)
    }

    /// A figure of this dimension as JSON: cost as a number, the others as integers.
    fn figure(self, value: f64) -> Value {
        if self == Self::Cost {
            json!(value)
        } else {
            json!(value.max(0.0).round() as u64)
        }
    }
}

/// What happens when a dimension is exhausted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnExhaustion {
    /// `cap.breached{kind: budget-*}`, then `run.failed{budget_exhausted}` at once.
    #[default]
    Fail,
    /// The next model call suspends on an approval interrupt that may add an allowance.
    Interrupt,
}

/// The limit of each dimension (`None`: unbounded). Also the shape of an added allowance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// `maxTokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// `maxCostUsd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// `maxToolCalls`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u64>,
    /// `maxRetries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u64>,
}

impl Limits {
    /// The limit of `dimension`, as a number.
    pub fn get(&self, dimension: Dimension) -> Option<f64> {
        match dimension {
            Dimension::Tokens => self.max_tokens.map(|v| v as f64),
            Dimension::Cost => self.max_cost_usd,
            Dimension::ToolCalls => self.max_tool_calls.map(|v| v as f64),
            Dimension::Retries => self.max_retries.map(|v| v as f64),
        }
    }

    /// `effectiveBudget`: the bounded dimensions' ceilings.
    pub fn effective_budget(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| json!({}))
    }
}

/// A budget policy that is not acceptable: the field (`configurable.budget.<field>`) and the
/// rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetRefusal {
    /// `configurable.budget` or `configurable.budget.<field>`.
    pub field: String,
    /// The rule, in words.
    pub message: String,
}

impl BudgetRefusal {
    fn new(field: &str, message: impl Into<String>) -> Self {
        let field =
            if field.is_empty() { "configurable.budget".to_owned() } else { format!("configurable.budget.{field}") };
        Self { field, message: message.into() }
    }
}

/// `configurable.budget`, checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetPolicy {
    /// The ceilings.
    pub limits: Limits,
    /// `modelAllow`: when non-empty, only matching models may be called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_allow: Vec<String>,
    /// `modelDeny`: matching models may never be called (wins over `modelAllow`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub model_deny: Vec<String>,
    /// `thresholdPercent`.
    pub threshold_percent: f64,
    /// `onExhaustion`.
    #[serde(default)]
    pub on_exhaustion: OnExhaustion,
}

fn integer(value: &Value, field: &str, minimum: u64) -> Result<u64, BudgetRefusal> {
    value
        .as_u64()
        .filter(|n| *n >= minimum)
        .ok_or_else(|| BudgetRefusal::new(field, format!("configurable.budget.{field} must be an integer ≥ {minimum}")))
}

fn number(value: &Value, field: &str, low: f64, high: Option<f64>) -> Result<f64, BudgetRefusal> {
    let within = |n: f64| n.is_finite() && n >= low && high.is_none_or(|high| n <= high);
    value.as_f64().filter(|n| within(*n)).ok_or_else(|| {
        let rule = match high {
            Some(high) => format!("a number from {low} to {high}"),
            None => format!("a number ≥ {low}"),
        };
        BudgetRefusal::new(field, format!("configurable.budget.{field} must be {rule}"))
    })
}

fn patterns(value: &Value, field: &str) -> Result<Vec<String>, BudgetRefusal> {
    let rule = || BudgetRefusal::new(field, format!("configurable.budget.{field} must be an array of unique strings"));
    let items = value.as_array().ok_or_else(rule)?;
    let mut list: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        let text = item.as_str().ok_or_else(rule)?;
        if list.iter().any(|seen| seen == text) {
            return Err(rule());
        }
        list.push(text.to_owned());
    }
    Ok(list)
}

impl BudgetPolicy {
    /// The policy of a run's `configurable` (`None` without a `budget` key), or why it is
    /// refused.
    pub fn parse(configurable: Option<&Value>) -> Result<Option<Self>, BudgetRefusal> {
        let Some(value) = configurable.and_then(|configurable| configurable.get("budget")) else { return Ok(None) };
        let fields: &Map<String, Value> =
            value.as_object().ok_or_else(|| BudgetRefusal::new("", "configurable.budget must be an object"))?;
        let mut policy = Self {
            limits: Limits::default(),
            model_allow: Vec::new(),
            model_deny: Vec::new(),
            threshold_percent: DEFAULT_THRESHOLD_PERCENT,
            on_exhaustion: OnExhaustion::Fail,
        };
        for (field, value) in fields {
            match field.as_str() {
                "maxTokens" => policy.limits.max_tokens = Some(integer(value, field, 1)?),
                "maxCostUsd" => policy.limits.max_cost_usd = Some(number(value, field, 0.0, None)?),
                "maxToolCalls" => policy.limits.max_tool_calls = Some(integer(value, field, 1)?),
                "maxRetries" => policy.limits.max_retries = Some(integer(value, field, 0)?),
                "modelAllow" => policy.model_allow = patterns(value, field)?,
                "modelDeny" => policy.model_deny = patterns(value, field)?,
                "thresholdPercent" => policy.threshold_percent = number(value, field, 0.0, Some(100.0))?,
                "onExhaustion" => {
                    policy.on_exhaustion = match value.as_str() {
                        Some("fail") => OnExhaustion::Fail,
                        Some("interrupt") => OnExhaustion::Interrupt,
                        _ => {
                            return Err(BudgetRefusal::new(
                                field,
                                "configurable.budget.onExhaustion must be `fail` or `interrupt`",
                            ))
                        }
                    }
                }
                other if WALL_TIME_FIELDS.contains(&other) => {
                    return Err(BudgetRefusal::new(
                        other,
                        format!(
                            "configurable.budget.{other}: wall time is not a budget dimension; \
                             use configurable.runTimeoutMs (RFC 0058)"
                        ),
                    ))
                }
                other => {
                    return Err(BudgetRefusal::new(
                        other,
                        format!(
                            "configurable.budget has no field `{other}` (it is closed: maxTokens, maxCostUsd, \
                             maxToolCalls, maxRetries, modelAllow, modelDeny, thresholdPercent, onExhaustion)"
                        ),
                    ))
                }
            }
        }
        Ok(Some(policy))
    }

    /// Whether `model` may be called: a `modelDeny` match refuses (whatever `modelAllow`
    /// says); a non-empty `modelAllow` must match. A call naming no model is refused only
    /// under an allowlist.
    pub fn permits(&self, model: Option<&str>) -> bool {
        let Some(model) = model else { return self.model_allow.is_empty() };
        if self.model_deny.iter().any(|pattern| glob_matches(pattern, model)) {
            return false;
        }
        self.model_allow.is_empty() || self.model_allow.iter().any(|pattern| glob_matches(pattern, model))
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters (possibly
/// empty) and everything else for itself.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let (pattern, text): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|c| *c == '*')
}

/// What the run consumed so far, per dimension.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Consumed {
    /// Tokens.
    pub tokens: u64,
    /// Cost in USD.
    pub cost_usd: f64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Retries.
    pub retries: u64,
}

impl Consumed {
    /// The consumption of `dimension`, as a number.
    pub fn get(&self, dimension: Dimension) -> f64 {
        match dimension {
            Dimension::Tokens => self.tokens as f64,
            Dimension::Cost => self.cost_usd,
            Dimension::ToolCalls => self.tool_calls as f64,
            Dimension::Retries => self.retries as f64,
        }
    }

    fn add(&mut self, dimension: Dimension, amount: f64) {
        let amount = if amount.is_finite() { amount.max(0.0) } else { 0.0 };
        match dimension {
            Dimension::Tokens => self.tokens = self.tokens.saturating_add(amount as u64),
            Dimension::Cost => self.cost_usd += amount,
            Dimension::ToolCalls => self.tool_calls = self.tool_calls.saturating_add(amount as u64),
            Dimension::Retries => self.retries = self.retries.saturating_add(amount as u64),
        }
    }
}

/// A `budget.*` event to emit: its type and payload.
pub type BudgetEvent = (&'static str, Value);

/// The run's budget: its policy, its consumption and which events were already emitted.
/// Part of the run header (`RunState.ai.budget`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetState {
    /// The policy, with the limits raised by every added allowance.
    pub policy: BudgetPolicy,
    /// What was consumed.
    #[serde(default)]
    pub consumed: Consumed,
    /// Dimensions whose `budget.threshold.crossed` was emitted (this reservation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crossed: Vec<Dimension>,
    /// Dimensions whose `budget.exhausted` was emitted (this reservation).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exhausted: Vec<Dimension>,
    /// How many `budget.reserved` were emitted.
    #[serde(default)]
    pub reservations: u32,
}

impl BudgetState {
    /// A fresh budget under `policy`.
    pub fn new(policy: BudgetPolicy) -> Self {
        Self { policy, consumed: Consumed::default(), crossed: Vec::new(), exhausted: Vec::new(), reservations: 0 }
    }

    /// The next `budget.reserved` (counted).
    pub fn reserve(&mut self) -> BudgetEvent {
        self.reservations += 1;
        (RESERVED, json!({ "effectiveBudget": self.policy.limits.effective_budget(), "scope": "run" }))
    }

    /// Whether `dimension` has nothing left: a metered dimension (tokens, cost) reached its
    /// limit, a counted one (tool calls, retries) went past it.
    pub fn is_spent(&self, dimension: Dimension) -> bool {
        let Some(limit) = self.policy.limits.get(dimension) else { return false };
        let consumed = self.consumed.get(dimension);
        if dimension.metered() {
            consumed >= limit
        } else {
            consumed > limit
        }
    }

    /// The first dimension with nothing left, if any; `dimensions` restricts the search.
    pub fn spent(&self, dimensions: &[Dimension]) -> Option<Dimension> {
        dimensions.iter().copied().find(|dimension| self.is_spent(*dimension))
    }

    /// `budget.exhausted` for `dimension` unless it was emitted this reservation.
    pub fn exhaust(&mut self, dimension: Dimension) -> Option<BudgetEvent> {
        if self.exhausted.contains(&dimension) {
            return None;
        }
        self.exhausted.push(dimension);
        let (consumed, limit) = self.figures(dimension);
        Some((EXHAUSTED, json!({ "dimension": dimension.as_str(), "consumed": consumed, "limit": limit })))
    }

    /// Adds `amount` to `dimension`. Returns the events it causes (none for an unbounded
    /// dimension) and whether this consumption exhausted the dimension.
    pub fn consume(&mut self, dimension: Dimension, amount: f64) -> (Vec<BudgetEvent>, bool) {
        self.consumed.add(dimension, amount);
        let Some(limit) = self.policy.limits.get(dimension) else { return (Vec::new(), false) };
        let consumed = self.consumed.get(dimension);
        let (consumed_figure, limit_figure) = self.figures(dimension);
        let remaining = dimension.figure((limit - consumed).max(0.0));
        let mut events = vec![(
            CONSUMED,
            json!({
                "dimension": dimension.as_str(),
                "consumed": consumed_figure,
                "limit": limit_figure,
                "remaining": remaining,
            }),
        )];
        let percent = self.policy.threshold_percent;
        if !self.crossed.contains(&dimension) && consumed >= limit * percent / 100.0 {
            self.crossed.push(dimension);
            events.push((
                THRESHOLD_CROSSED,
                json!({
                    "dimension": dimension.as_str(),
                    "consumed": consumed_figure,
                    "limit": limit_figure,
                    "percent": percent,
                }),
            ));
        }
        let mut exhausted = false;
        if self.is_spent(dimension) {
            if let Some(event) = self.exhaust(dimension) {
                events.push(event);
                exhausted = true;
            }
        }
        (events, exhausted)
    }

    /// `(consumed, limit)` of `dimension` as JSON figures.
    pub fn figures(&self, dimension: Dimension) -> (Value, Value) {
        let limit = self.policy.limits.get(dimension).unwrap_or_default();
        (dimension.figure(self.consumed.get(dimension)), dimension.figure(limit))
    }

    /// The `cap.breached` payload of `dimension`'s exhaustion at `node_id`.
    pub fn breach(&self, dimension: Dimension, node_id: Option<&str>) -> Value {
        let (observed, limit) = self.figures(dimension);
        let mut payload = json!({ "kind": dimension.cap_kind(), "limit": limit, "observed": observed });
        if let Some(node_id) = node_id {
            payload["nodeId"] = json!(node_id);
        }
        payload
    }

    /// The `run.failed` error of `dimension`'s exhaustion.
    pub fn exhausted_error(&self, dimension: Dimension) -> RunError {
        let (consumed, limit) = self.figures(dimension);
        let mut error = RunError::new(
            EXHAUSTED_CODE,
            format!("the run's {} budget is exhausted ({consumed} of {limit})", dimension.as_str()),
        );
        error.details = Some(json!({ "dimension": dimension.as_str(), "consumed": consumed, "limit": limit }));
        error
    }

    /// Adds `allowance` to the bounded dimensions' limits (an unbounded one stays unbounded);
    /// a raised dimension may cross its threshold and be exhausted again.
    pub fn raise(&mut self, allowance: &Limits) {
        let limits = &mut self.policy.limits;
        let add = |limit: &mut Option<u64>, more: Option<u64>| {
            if let (Some(limit), Some(more)) = (limit.as_mut(), more) {
                *limit = limit.saturating_add(more);
                true
            } else {
                false
            }
        };
        let mut raised = Vec::new();
        if add(&mut limits.max_tokens, allowance.max_tokens) {
            raised.push(Dimension::Tokens);
        }
        if let (Some(limit), Some(more)) = (limits.max_cost_usd.as_mut(), allowance.max_cost_usd) {
            *limit += more;
            raised.push(Dimension::Cost);
        }
        if add(&mut limits.max_tool_calls, allowance.max_tool_calls) {
            raised.push(Dimension::ToolCalls);
        }
        if add(&mut limits.max_retries, allowance.max_retries) {
            raised.push(Dimension::Retries);
        }
        self.crossed.retain(|dimension| !raised.contains(dimension));
        self.exhausted.retain(|dimension| !raised.contains(dimension));
    }

    /// The approval data of an exhaustion interrupt on `dimension` at `node_id`: the
    /// dimension, its consumption and limit in `artifactData`, nothing else.
    pub fn gate_data(&self, dimension: Dimension, node_id: &str) -> Value {
        let (consumed, limit) = self.figures(dimension);
        json!({
            "artifactId": node_id,
            "artifactType": GATE_ARTIFACT_TYPE,
            "title": "Budget exhausted",
            "description": format!(
                "The run's {} budget is exhausted. Accept with data.budget naming an added allowance \
                 (e.g. {{\"{}\": …}}) to continue, or reject to fail the run.",
                dimension.as_str(),
                dimension.field()
            ),
            "actions": ["accept", "reject"],
            "requiredApprovals": 1,
            "rejectionPolicy": "single-veto",
            "approversList": [],
            "artifactData": { "dimension": dimension.as_str(), "consumed": consumed, "limit": limit },
        })
    }

    /// The resume schema of an exhaustion interrupt: an approval's `{action: accept|reject}`
    /// plus an optional `data.budget` allowance over the bounded dimensions (closed; each a
    /// positive amount).
    pub fn gate_resume_schema(&self) -> Value {
        let mut allowance = Map::new();
        for dimension in Dimension::ALL {
            if self.policy.limits.get(dimension).is_none() {
                continue;
            }
            let rule = if dimension == Dimension::Cost {
                json!({ "type": "number", "exclusiveMinimum": 0 })
            } else {
                json!({ "type": "integer", "minimum": 1 })
            };
            allowance.insert(dimension.field().to_owned(), rule);
        }
        json!({
            "type": "object",
            "required": ["action"],
            "properties": {
                "action": { "enum": ["accept", "reject"] },
                "feedback": { "type": "string" },
                "comment": { "type": "string" },
                "voter": { "type": "string", "minLength": 1 },
                "data": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "budget": { "type": "object", "additionalProperties": false, "properties": allowance },
                    },
                },
            },
        })
    }
}

/// Whether an interrupt's data is an exhaustion gate's.
pub fn is_gate(data: &Value) -> bool {
    data.get("artifactType").and_then(Value::as_str) == Some(GATE_ARTIFACT_TYPE)
        && data.get("artifactData").and_then(|artifact| artifact.get("dimension")).is_some()
}

/// The allowance an accepted exhaustion interrupt's resume value adds (`data.budget`; the
/// resume schema checked its shape).
pub fn allowance(resume_value: &Value) -> Limits {
    resume_value
        .get("data")
        .and_then(|data| data.get("budget"))
        .and_then(|budget| serde_json::from_value(budget.clone()).ok())
        .unwrap_or_default()
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
