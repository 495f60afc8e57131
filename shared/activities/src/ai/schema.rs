//! Structured output: the Tier-1 subset a `responseSchema` must stay in (OpenWOP §3.4,
//! checked at registration) and reading an answer against it.
//!
//! Tier 1: the root is an object; every object sets `additionalProperties: false` and lists
//! every property in `required`; `anyOf` is allowed, `$ref` only to `#/$defs/…` /
//! `#/definitions/…`; `oneOf`, `allOf`, `not`, `if`/`then`/`else`, `prefixItems`, numeric
//! and length bounds, `pattern`, `format`, `uniqueItems`, `propertyNames` and the other
//! validation keywords outside the subset are refused; nesting depth ≤ 5 objects/arrays,
//! ≤ 100 properties in all. An answer is the model's text parsed as JSON (a markdown code
//! fence around it is stripped) and validated with `jsonschema`.

use serde_json::{json, Value};

/// The deepest nesting allowed.
pub const MAX_DEPTH: usize = 5;
/// The most properties allowed in all.
pub const MAX_PROPERTIES: usize = 100;

/// Keywords outside the subset.
const REFUSED: [&str; 24] = [
    "oneOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "prefixItems",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "pattern",
    "patternProperties",
    "format",
    "uniqueItems",
    "propertyNames",
    "dependentSchemas",
];

/// Checks `schema` against the Tier-1 subset; the error names the schema path and the rule.
pub fn check_tier1(schema: &Value) -> Result<(), String> {
    let root = schema.as_object().ok_or("responseSchema must be a JSON Schema object")?;
    if root.get("type").and_then(Value::as_str) != Some("object") {
        return Err("responseSchema: the root must be {\"type\": \"object\"}".to_owned());
    }
    let mut properties = 0;
    walk(schema, "responseSchema", 0, &mut properties)?;
    if let Some(error) = trellis_core::schema::compile_error(schema) {
        return Err(format!("responseSchema does not compile: {error}"));
    }
    Ok(())
}

fn walk(schema: &Value, path: &str, depth: usize, properties: &mut usize) -> Result<(), String> {
    let Some(object) = schema.as_object() else {
        return match schema {
            Value::Bool(_) => Ok(()),
            _ => Err(format!("{path} must be a schema object")),
        };
    };
    if let Some(keyword) = REFUSED.iter().find(|keyword| object.contains_key(**keyword)) {
        return Err(format!("{path}.{keyword} is outside the Tier-1 structured-output subset"));
    }
    if let Some(reference) = object.get("$ref") {
        let local = reference
            .as_str()
            .is_some_and(|target| target.starts_with("#/$defs/") || target.starts_with("#/definitions/"));
        if !local {
            return Err(format!("{path}.$ref: only local #/$defs/… references are in the Tier-1 subset"));
        }
    }
    let is_object = object.get("type").and_then(Value::as_str) == Some("object")
        || object.get("type").and_then(Value::as_array).is_some_and(|types| types.contains(&json!("object")))
        || object.contains_key("properties");
    let is_array = object.get("type").and_then(Value::as_str) == Some("array") || object.contains_key("items");
    let depth = if is_object || is_array { depth + 1 } else { depth };
    if depth > MAX_DEPTH {
        return Err(format!("{path}: nesting deeper than {MAX_DEPTH} levels"));
    }
    if is_object {
        if object.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Err(format!("{path}.additionalProperties must be false on every object"));
        }
        let declared = object.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = object
            .get("required")
            .and_then(Value::as_array)
            .map(|items| items.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(declared) = declared {
            *properties += declared.len();
            if *properties > MAX_PROPERTIES {
                return Err(format!("{path}: more than {MAX_PROPERTIES} properties in all"));
            }
            for (name, property) in declared {
                if !required.contains(&name.as_str()) {
                    return Err(format!(
                        "{path}.required must list `{name}` (every property is required; express optional as a null union)"
                    ));
                }
                walk(property, &format!("{path}.properties.{name}"), depth, properties)?;
            }
        }
    }
    if let Some(items) = object.get("items") {
        walk(items, &format!("{path}.items"), depth, properties)?;
    }
    if let Some(options) = object.get("anyOf") {
        let options = options.as_array().ok_or_else(|| format!("{path}.anyOf must be an array"))?;
        for (index, option) in options.iter().enumerate() {
            walk(option, &format!("{path}.anyOf[{index}]"), depth, properties)?;
        }
    }
    for defs in ["$defs", "definitions"] {
        if let Some(definitions) = object.get(defs).and_then(Value::as_object) {
            for (name, definition) in definitions {
                walk(definition, &format!("{path}.{defs}.{name}"), depth.saturating_sub(1), properties)?;
            }
        }
    }
    Ok(())
}

/// The model's text without a surrounding markdown code fence (```` ```json … ``` ````).
pub fn strip_fence(text: &str) -> &str {
    let trimmed = text.trim();
    let Some(rest) = trimmed.strip_prefix("```") else { return trimmed };
    let Some(body) = rest.strip_suffix("```") else { return trimmed };
    // The info string (`json`) runs to the first line break.
    match body.split_once('\n') {
        Some((_info, inner)) => inner.trim(),
        None => body.trim(),
    }
}

/// The answer parsed and validated: the value, or the violations (`[{path, message}]`; a
/// parse failure is one violation at `/`). Messages never quote the answer.
pub fn read_answer(schema: &Value, text: &str) -> Result<Value, Vec<Value>> {
    let value: Value = serde_json::from_str(strip_fence(text)).map_err(|error| {
        vec![json!({ "path": "/", "message": format!("the answer is not JSON (line {}, column {})", error.line(), error.column()) })]
    })?;
    trellis_core::schema::check_against(schema, &value).map(|()| value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strict(properties: Value, required: &[&str]) -> Value {
        json!({"type": "object", "additionalProperties": false, "properties": properties, "required": required})
    }

    #[test]
    fn a_tier1_schema_passes_and_each_rule_names_the_path() {
        let good = strict(
            json!({"name": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
                   "nick": {"anyOf": [{"type": "string"}, {"type": "null"}]}}),
            &["name", "tags", "nick"],
        );
        assert_eq!(check_tier1(&good), Ok(()));
        let cases = [
            (json!({"type": "array"}), "root must be"),
            (json!({"type": "object", "properties": {}}), "responseSchema.additionalProperties"),
            (strict(json!({"a": {"type": "string"}}), &[]), "required must list `a`"),
            (strict(json!({"a": {"type": "string", "pattern": "x"}}), &["a"]), "responseSchema.properties.a.pattern"),
            (strict(json!({"a": {"oneOf": []}}), &["a"]), "properties.a.oneOf"),
            (strict(json!({"a": {"type": "object", "properties": {}}}), &["a"]), "properties.a.additionalProperties"),
            (strict(json!({"n": {"type": "integer", "minimum": 1}}), &["n"]), "properties.n.minimum"),
        ];
        for (schema, expected) in cases {
            let error = check_tier1(&schema).unwrap_err();
            assert!(error.contains(expected), "{error} should contain {expected}");
        }
        let mut deep = json!({"type": "string"});
        for _ in 0..6 {
            deep = strict(json!({"x": deep}), &["x"]);
        }
        assert!(check_tier1(&deep).unwrap_err().contains("deeper than 5"));
        let many: serde_json::Map<String, Value> =
            (0..101).map(|i| (format!("p{i}"), json!({"type": "string"}))).collect();
        let names: Vec<String> = many.keys().cloned().collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        assert!(check_tier1(&strict(Value::Object(many), &names)).unwrap_err().contains("100 properties"));
    }

    #[test]
    fn answers_are_read_through_a_fence_and_violations_do_not_quote_them() {
        let schema = strict(json!({"city": {"type": "string"}}), &["city"]);
        assert_eq!(read_answer(&schema, "```json\n{\"city\": \"Oslo\"}\n```"), Ok(json!({"city": "Oslo"})));
        assert_eq!(read_answer(&schema, " {\"city\": \"Rome\"} "), Ok(json!({"city": "Rome"})));
        let violations = read_answer(&schema, "{\"town\": \"SECRETISH\"}").unwrap_err();
        assert!(!violations.is_empty());
        assert!(!Value::Array(violations).to_string().contains("SECRETISH"));
        let violations = read_answer(&schema, "not json at all").unwrap_err();
        assert_eq!(violations[0]["path"], "/");
    }
}
