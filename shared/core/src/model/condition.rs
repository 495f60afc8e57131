//! Edge conditions: whether an edge is taken once its source node completes.
//!
//! The left operand is a dotted path. `output.<path>` (or `outputs.<path>`) reads the source
//! node's outputs; any other path reads the run's variables. `truthy`/`falsy` ignore the
//! right operand. `expression` conditions need an expression language this host does not
//! have, so a workflow using them is stored but not runnable (see [`crate::nodes::find_gap`]).

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};

use crate::model::definition::EdgeConditionDef;

/// The largest compiled size of a regex condition's pattern (bytes of the compiled program and
/// of its lazy DFA each); a larger pattern is refused at registration.
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Compiles a regex condition's pattern within [`REGEX_SIZE_LIMIT`], as registration checks
/// it and evaluation runs it.
pub fn compile_regex(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern).size_limit(REGEX_SIZE_LIMIT).dfa_size_limit(REGEX_SIZE_LIMIT).build()
}

/// Why a condition could not be evaluated. The node that owns the edge fails with
/// `invalid_edge_condition`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ConditionError(pub String);

/// Evaluates `condition` against the source node's `outputs` and the run's `variables`.
///
/// `regex` is the condition's pattern as the workflow compiled it at registration
/// ([`crate::model::Workflow::edge_regexes`]); without it the pattern is compiled here.
pub fn evaluate(
    condition: &EdgeConditionDef,
    regex: Option<&Regex>,
    outputs: &Map<String, Value>,
    variables: &Map<String, Value>,
) -> Result<bool, ConditionError> {
    let left = resolve(condition.left.as_deref().unwrap_or(""), outputs, variables);
    let right = condition.right.as_ref().unwrap_or(&Value::Null);
    match condition.kind.as_str() {
        "equals" => Ok(left == *right),
        "notEquals" => Ok(left != *right),
        "contains" => Ok(contains(&left, right)),
        "truthy" => Ok(truthy(&left)),
        "falsy" => Ok(!truthy(&left)),
        "regex" => {
            let pattern =
                right.as_str().ok_or_else(|| ConditionError("a regex condition needs a string pattern".into()))?;
            let compiled;
            let regex = match regex {
                Some(regex) => regex,
                None => {
                    compiled = compile_regex(pattern)
                        .map_err(|_| ConditionError("the regex condition's pattern is invalid".into()))?;
                    &compiled
                }
            };
            Ok(left.as_str().is_some_and(|text| regex.is_match(text)))
        }
        other => Err(ConditionError(format!("condition type `{other}` is not supported"))),
    }
}

fn resolve(path: &str, outputs: &Map<String, Value>, variables: &Map<String, Value>) -> Value {
    let mut segments = path.split('.').filter(|segment| !segment.is_empty());
    let (root, first) = match segments.next() {
        Some("output" | "outputs") => (outputs, segments.next()),
        Some(name) => (variables, Some(name)),
        None => return Value::Null,
    };
    let Some(first) = first else {
        return Value::Object(root.clone());
    };
    let mut current = root.get(first).cloned().unwrap_or(Value::Null);
    for segment in segments {
        current = match &current {
            Value::Object(map) => map.get(segment).cloned().unwrap_or(Value::Null),
            Value::Array(items) => {
                segment.parse::<usize>().ok().and_then(|i| items.get(i).cloned()).unwrap_or(Value::Null)
            }
            _ => Value::Null,
        };
    }
    current
}

fn contains(haystack: &Value, needle: &Value) -> bool {
    match (haystack, needle) {
        (Value::String(text), Value::String(part)) => text.contains(part.as_str()),
        (Value::Array(items), needle) => items.contains(needle),
        (Value::Object(map), Value::String(key)) => map.contains_key(key),
        _ => false,
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(flag) => *flag,
        Value::Number(number) => number.as_f64().is_some_and(|n| n != 0.0),
        Value::String(text) => !text.is_empty(),
        Value::Array(items) => !items.is_empty(),
        Value::Object(map) => !map.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn condition(value: Value) -> EdgeConditionDef {
        serde_json::from_value(value).unwrap()
    }

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn reads_source_outputs_and_variables() {
        let outputs = map(json!({"approved": true, "score": {"value": 7}}));
        let variables = map(json!({"tier": "gold"}));
        let eval = |c| evaluate(&condition(c), None, &outputs, &variables).unwrap();
        assert!(eval(json!({"type": "equals", "left": "output.approved", "right": true})));
        assert!(eval(json!({"type": "equals", "left": "output.score.value", "right": 7})));
        assert!(eval(json!({"type": "notEquals", "left": "tier", "right": "silver"})));
        assert!(eval(json!({"type": "contains", "left": "tier", "right": "old"})));
        assert!(eval(json!({"type": "regex", "left": "tier", "right": "^g.l"})));
        assert!(eval(json!({"type": "falsy", "left": "output.missing"})));
        assert!(!eval(json!({"type": "truthy", "left": "output.missing"})));
    }

    #[test]
    fn a_regex_compiled_at_registration_is_the_one_evaluated() {
        let variables = map(json!({"tier": "gold"}));
        let regex_condition = condition(json!({"type": "regex", "left": "tier", "right": "^g"}));
        let compiled = compile_regex("^s").unwrap();
        assert!(!evaluate(&regex_condition, Some(&compiled), &Map::new(), &variables).unwrap());
        assert!(evaluate(&regex_condition, None, &Map::new(), &variables).unwrap());
    }

    #[test]
    fn expression_conditions_are_not_evaluated() {
        let error =
            evaluate(&condition(json!({"type": "expression", "expression": "x > 1"})), None, &Map::new(), &Map::new());
        assert!(error.is_err());
    }
}
