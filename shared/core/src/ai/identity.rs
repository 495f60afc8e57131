//! The replay-stable request identity (OpenWOP §6.4, RFC 0150 §C, recipe
//! `openwop-semantic-request-v2`): SHA-256 (lowercase hex) of the RFC 8785 (JCS) canonical
//! JSON of what decides a model's answer —
//! `{recipe, provider, model, request: {messages, tools?, temperature?, topP?, topK?,
//! maxOutputTokens?, seed?, stop?, responseFormat?, safetySettings?}, providerOptions?}`, with
//! absent parameters left out, tools sorted by name and provider options carried, never
//! dropped — and never `stream`, metadata, `user`, request or trace ids, a credential, the
//! tenant, a timeout or retry settings. It is not a security boundary (the result cache keyed
//! on it is namespaced by tenant, see [`crate::cache`]).
//!
//! JCS is written here (no well-kept crate fits: `serde_jcs` is unmaintained): object keys
//! sorted by their UTF-16 code units, no whitespace, strings escaped as ECMAScript's
//! `JSON.stringify` does (serde_json's escaping is the same: `\b \t \n \f \r \" \\`, other
//! controls as `\u00xx`, nothing else escaped), numbers in the ECMAScript shortest form.

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

/// The recipe id.
pub const RECIPE: &str = "openwop-semantic-request-v2";

/// The numeric request parameters the recipe keeps (when they are numbers).
const NUMBERS: [&str; 5] = ["temperature", "topP", "topK", "maxOutputTokens", "seed"];

/// The recipe's document for a raw request (`{provider, model, messages, tools?,
/// temperature?, …, providerOptions?}`, the seam's body): everything else is left out.
pub fn project(raw: &Map<String, Value>) -> Value {
    let mut request = Map::new();
    request.insert("messages".into(), raw.get("messages").cloned().unwrap_or(Value::Null));
    if let Some(tools) = raw.get("tools").and_then(Value::as_array).filter(|tools| !tools.is_empty()) {
        let mut tools = tools.clone();
        tools.sort_by_key(|tool| {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            (name.to_lowercase(), name.to_owned())
        });
        request.insert("tools".into(), Value::Array(tools));
    }
    for name in NUMBERS {
        if let Some(number) = raw.get(name).filter(|value| value.is_number()) {
            request.insert(name.into(), number.clone());
        }
    }
    if let Some(stop) = raw.get("stop").filter(|value| value.is_array()) {
        request.insert("stop".into(), stop.clone());
    }
    for name in ["responseFormat", "safetySettings"] {
        if let Some(value) = raw.get(name).filter(|value| value.is_object() || value.is_array()) {
            request.insert(name.into(), value.clone());
        }
    }
    let mut document = Map::new();
    document.insert("recipe".into(), json!(RECIPE));
    document.insert("provider".into(), raw.get("provider").cloned().unwrap_or(Value::Null));
    document.insert("model".into(), raw.get("model").cloned().unwrap_or(Value::Null));
    document.insert("request".into(), Value::Object(request));
    if let Some(options) = raw.get("providerOptions").filter(|value| value.is_object()) {
        document.insert("providerOptions".into(), options.clone());
    }
    Value::Object(document)
}

/// `sha256(jcs(value))`, lowercase hex.
pub fn digest(value: &Value) -> String {
    hex::encode(Sha256::digest(canonicalize(value).as_bytes()))
}

/// The identity of a raw request ([`project`]ed, then [`digest`]ed).
pub fn key_of(raw: &Map<String, Value>) -> String {
    digest(&project(raw))
}

/// What a model node's call is identified by.
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
    /// The request as the recipe reads it (absent parameters left out).
    fn raw(&self) -> Map<String, Value> {
        let mut raw = Map::new();
        raw.insert("provider".into(), json!(self.provider));
        raw.insert("model".into(), json!(self.model));
        raw.insert("messages".into(), Value::Array(self.messages.to_vec()));
        if let Some(temperature) = self.temperature {
            raw.insert("temperature".into(), json!(temperature));
        }
        if let Some(max) = self.max_output_tokens {
            raw.insert("maxOutputTokens".into(), json!(max));
        }
        if let Some(format) = self.response_format {
            raw.insert("responseFormat".into(), json!({ "type": "json_schema", "schema": format }));
        }
        raw
    }

    /// The document hashed.
    pub fn document(&self) -> Value {
        project(&self.raw())
    }

    /// The identity: `sha256(jcs(document))`, lowercase hex.
    pub fn key(&self) -> String {
        key_of(&self.raw())
    }

    /// The identity of a request that also sends `tools` (definitions `{name, description,
    /// inputSchema}`; hashed sorted by name).
    pub fn key_with_tools(&self, tools: &[Value]) -> String {
        let mut raw = self.raw();
        raw.insert("tools".into(), Value::Array(tools.to_vec()));
        key_of(&raw)
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

    #[test]
    fn the_document_is_the_v2_projection() {
        let raw = json!({
            "provider": "openai", "model": "gpt-4", "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0.5, "seed": 7, "stop": ["X"], "stream": true, "user": "u", "tenantId": "t",
            "metadata": {"traceId": "a"}, "timeoutMs": 30000, "providerOptions": {"vendor.openai.logitBias": {"1": 2}},
            "tools": [{"name": "b"}, {"name": "a"}], "topP": "not a number"
        });
        let document = project(raw.as_object().unwrap());
        assert_eq!(
            canonicalize(&document),
            "{\"model\":\"gpt-4\",\"provider\":\"openai\",\"providerOptions\":{\"vendor.openai.logitBias\":{\"1\":2}},\
             \"recipe\":\"openwop-semantic-request-v2\",\"request\":{\"messages\":[{\"content\":\"hi\",\"role\":\"user\"}],\
             \"seed\":7,\"stop\":[\"X\"],\"temperature\":0.5,\"tools\":[{\"name\":\"a\"},{\"name\":\"b\"}]}}"
        );
        let bare = json!({"provider": "openai", "model": "gpt-4", "messages": [], "tools": []});
        assert_eq!(
            canonicalize(&project(bare.as_object().unwrap())),
            "{\"model\":\"gpt-4\",\"provider\":\"openai\",\"recipe\":\"openwop-semantic-request-v2\",\"request\":{\"messages\":[]}}",
            "no empty tools, no placeholders"
        );
    }
}
