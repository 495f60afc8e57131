//! The replay-stable request identity (OpenWOP §6.4, recipe `openwop-semantic-request-v2`):
//! SHA-256 (lowercase hex) of the RFC 8785 (JCS) canonical JSON of what decides a model's
//! answer — provider, model, messages (order and shape kept), tools (sorted by name),
//! temperature, maxOutputTokens, responseFormat — and never `stream`, a credential, the
//! tenant, a timeout or retry settings. It is not a security boundary (a cache keyed on it
//! is namespaced by tenant).
//!
//! JCS is written here (no well-kept crate fits: `serde_jcs` is unmaintained): object keys
//! sorted by their UTF-16 code units, no whitespace, strings escaped as ECMAScript's
//! `JSON.stringify` does (serde_json's escaping is the same: `\b \t \n \f \r \" \\`, other
//! controls as `\u00xx`, nothing else escaped), numbers in the ECMAScript shortest form.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// The recipe id.
pub const RECIPE: &str = "openwop-semantic-request-v2";

/// What the identity is computed over.
#[derive(Debug, Clone, Copy)]
pub struct SemanticRequest<'a> {
    /// The provider id.
    pub provider: &'a str,
    /// The model.
    pub model: &'a str,
    /// The messages, as sent (`[{role, content}]`).
    pub messages: &'a [Value],
    /// The sampling temperature.
    pub temperature: Option<f64>,
    /// The output token budget.
    pub max_output_tokens: Option<u64>,
    /// The structured-output schema.
    pub response_format: Option<&'a Value>,
}

impl SemanticRequest<'_> {
    /// The document hashed: absent parameters are left out.
    pub fn document(&self) -> Value {
        let mut document = Map::new();
        document.insert("recipe".into(), json!(RECIPE));
        document.insert("provider".into(), json!(self.provider));
        document.insert("model".into(), json!(self.model));
        document.insert("messages".into(), Value::Array(self.messages.to_vec()));
        document.insert("tools".into(), json!([]));
        if let Some(temperature) = self.temperature {
            document.insert("temperature".into(), json!(temperature));
        }
        if let Some(max) = self.max_output_tokens {
            document.insert("maxOutputTokens".into(), json!(max));
        }
        if let Some(format) = self.response_format {
            document.insert("responseFormat".into(), json!({ "type": "json_schema", "schema": format }));
        }
        Value::Object(document)
    }

    /// The identity: `sha256(jcs(document))`, lowercase hex.
    pub fn key(&self) -> String {
        hex::encode(Sha256::digest(canonicalize(&self.document()).as_bytes()))
    }

    /// The identity of a request that also sends `tools` (definitions `{name, description,
    /// inputSchema}`; hashed sorted by name).
    pub fn key_with_tools(&self, tools: &[Value]) -> String {
        let mut document = self.document();
        let mut tools = tools.to_vec();
        tools.sort_by(|a, b| a.get("name").and_then(Value::as_str).cmp(&b.get("name").and_then(Value::as_str)));
        document["tools"] = Value::Array(tools);
        hex::encode(Sha256::digest(canonicalize(&document).as_bytes()))
    }
}

/// RFC 8785 canonical JSON of `value`.
pub fn canonicalize(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => out.push_str(&value.to_string()),
        Value::Number(number) => match (number.as_i64(), number.as_u64(), number.as_f64()) {
            (Some(integer), _, _) if integer.unsigned_abs() < (1 << 53) => out.push_str(&integer.to_string()),
            (_, Some(integer), _) if integer < (1 << 53) => out.push_str(&integer.to_string()),
            (_, _, Some(float)) => out.push_str(&es6_number(float)),
            _ => out.push_str(&number.to_string()),
        },
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        Value::Object(object) => {
            let mut entries: Vec<(&String, &Value)> = object.iter().collect();
            entries.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write(item, out);
            }
            out.push('}');
        }
    }
}

/// ECMAScript `Number.prototype.toString` of a finite double (JSON has no NaN/Infinity).
fn es6_number(value: f64) -> String {
    if value == 0.0 {
        return "0".to_owned();
    }
    if !value.is_finite() {
        return "null".to_owned();
    }
    // Shortest round-trip digits and exponent, from Rust's `{:e}` (also shortest).
    let scientific = format!("{:e}", value.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let k = digits.len() as i32;
    let n = exponent + 1; // the decimal point sits after n digits
    let sign = if value < 0.0 { "-" } else { "" };
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let exponent = n - 1;
        let sign = if exponent >= 0 { "+" } else { "-" };
        let mantissa = if k == 1 { digits } else { format!("{}.{}", &digits[..1], &digits[1..]) };
        format!("{mantissa}e{sign}{}", exponent.abs())
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_utf16_code_units_and_nothing_is_padded() {
        // U+1F600 (surrogates D83D…) sorts before U+FB01 in UTF-16, after it in UTF-8/chars.
        let value = json!({"\u{fb01}": 1, "\u{1f600}": 2, "b": [1, {"z": null, "a": true}], "a": "x\u{7}\n"});
        assert_eq!(
            canonicalize(&value),
            "{\"a\":\"x\\u0007\\n\",\"b\":[1,{\"a\":true,\"z\":null}],\"\u{1f600}\":2,\"\u{fb01}\":1}"
        );
    }

    #[test]
    fn numbers_take_the_ecmascript_form() {
        let cases = [
            (0.7, "0.7"),
            (1.0, "1"),
            (-0.0, "0"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (1.5e-7, "1.5e-7"),
            (0.000001, "0.000001"),
            (123.456, "123.456"),
            (-2.5e30, "-2.5e+30"),
        ];
        for (value, expected) in cases {
            assert_eq!(es6_number(value), expected, "{value}");
        }
        assert_eq!(canonicalize(&json!([10, -3, 2.0])), "[10,-3,2]");
    }

    #[test]
    fn the_key_is_stable_and_ignores_what_is_excluded() {
        let messages = [json!({"role": "user", "content": "hi"})];
        let request = SemanticRequest {
            provider: "openai",
            model: "gpt-x",
            messages: &messages,
            temperature: Some(0.2),
            max_output_tokens: Some(64),
            response_format: None,
        };
        let key = request.key();
        assert_eq!(key.len(), 64);
        assert!(key.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(key, SemanticRequest { ..request }.key());
        assert_ne!(key, SemanticRequest { temperature: Some(0.3), ..request }.key());
        assert_ne!(key, SemanticRequest { model: "gpt-y", ..request }.key());
        let other = [json!({"content": "hi", "role": "user"})];
        assert_eq!(key, SemanticRequest { messages: &other, ..request }.key(), "key order does not matter");
    }
}
