//! The one template syntax work nodes render with: `{{inputs.x}}` and `{{variables.x}}`.
//! (Written with `core.http.request`; the model nodes reuse it for prompts.)
//!
//! A placeholder is `{{ root.key[.key…] }}` (whitespace inside the braces is ignored) where
//! `root` is `inputs` (the node's resolved input ports) or `variables` (the run's variables)
//! and each further key steps into an object (or, when it is a number, into an array):
//! `{{variables.user.id}}`. There is no escape syntax and no expression language.
//!
//! - [`render_string`] interpolates every placeholder into a string: strings unquoted, other
//!   values as their compact JSON text (`42`, `true`, `null`, `{"a":1}`), percent-encoded
//!   with [`Encoding::UrlComponent`] (for URLs).
//! - [`render_value`] walks a JSON value (objects' values and arrays' items; keys are never
//!   rendered). A string that is exactly one placeholder becomes the referenced value with its
//!   JSON type (`"{{inputs.count}}"` → `3`); other strings are rendered as by
//!   [`render_string`] without encoding.
//! - [`check_string`] / [`check_value`] check the syntax alone (no scope), for registration.
//!
//! Every failure (an unresolved name, an unknown root, an unterminated `{{`) is a
//! [`TemplateError`] naming the JSON pointer of the field and the name; it fails the node with
//! `validation_error` ([`TemplateError::to_run_error`]).

use std::fmt;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Map, Value};

use crate::run::RunError;

/// What a template may reference.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// The node's resolved input ports (`{{inputs.x}}`).
    pub inputs: &'a Map<String, Value>,
    /// The run's variables (`{{variables.x}}`).
    pub variables: &'a Map<String, Value>,
}

impl<'a> Scope<'a> {
    /// A scope over `inputs` and `variables`.
    pub fn new(inputs: &'a Map<String, Value>, variables: &'a Map<String, Value>) -> Self {
        Self { inputs, variables }
    }
}

/// How interpolated values are written into a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As is.
    Plain,
    /// Percent-encoded as a URL component: everything except the RFC 3986 unreserved
    /// characters (`A–Z a–z 0–9 - . _ ~`). The template's own text is never encoded.
    UrlComponent,
}

/// Characters a URL component keeps: RFC 3986 unreserved.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// A template that cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// JSON pointer of the field holding the template, relative to what was rendered (`""` for
    /// the string itself, `/name` inside a value); see [`TemplateError::prefixed`].
    pub path: String,
    /// The placeholder's name as written (`inputs.user.id`), or the raw text for a syntax error.
    pub name: String,
    /// Human text naming the problem and the name.
    pub message: String,
}

impl TemplateError {
    fn new(name: &str, message: String) -> Self {
        Self { path: String::new(), name: name.to_owned(), message }
    }

    /// The same error with `prefix` (a JSON pointer such as `/config/body`) put in front of
    /// its path.
    pub fn prefixed(mut self, prefix: &str) -> Self {
        self.path = format!("{prefix}{}", self.path);
        self
    }

    /// The error as a node failure: `validation_error` with `details: {path, name}`.
    pub fn to_run_error(&self) -> RunError {
        RunError {
            code: "validation_error".to_owned(),
            message: format!("{} (at {})", self.message, if self.path.is_empty() { "/" } else { &self.path }),
            details: Some(json!({ "path": self.path, "name": self.name })),
        }
    }
}

impl fmt::Display for TemplateError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} (at {})", self.message, self.path)
    }
}

impl std::error::Error for TemplateError {}

/// One piece of a parsed template.
enum Piece<'t> {
    Text(&'t str),
    Placeholder(Name<'t>),
}

/// A parsed placeholder name.
struct Name<'t> {
    /// As written (trimmed), for errors.
    raw: &'t str,
    /// `inputs` or `variables`.
    root: Root,
    /// The keys after the root.
    keys: Vec<&'t str>,
}

#[derive(Clone, Copy)]
enum Root {
    Inputs,
    Variables,
}

fn parse(template: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find("{{") {
        if open > 0 {
            pieces.push(Piece::Text(&rest[..open]));
        }
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            let raw = &rest[open..];
            return Err(TemplateError::new(
                raw,
                format!("unterminated template placeholder `{raw}` (no closing `}}}}`)"),
            ));
        };
        pieces.push(Piece::Placeholder(parse_name(after[..close].trim())?));
        rest = &after[close + 2..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

fn parse_name(raw: &str) -> Result<Name<'_>, TemplateError> {
    let mut parts = raw.split('.');
    let root = match parts.next() {
        Some("inputs") => Root::Inputs,
        Some("variables") => Root::Variables,
        _ => {
            return Err(TemplateError::new(
                raw,
                format!("template placeholder `{{{{{raw}}}}}` must start with `inputs.` or `variables.`"),
            ))
        }
    };
    let keys: Vec<&str> = parts.collect();
    if keys.is_empty() || keys.iter().any(|key| key.is_empty() || key.chars().any(char::is_whitespace)) {
        return Err(TemplateError::new(
            raw,
            format!(
                "template placeholder `{{{{{raw}}}}}` must be a dotted name such as `inputs.x` or `variables.user.id`"
            ),
        ));
    }
    Ok(Name { raw, root, keys })
}

fn resolve<'s>(name: &Name<'_>, scope: &Scope<'s>) -> Result<&'s Value, TemplateError> {
    let unresolved = || TemplateError::new(name.raw, format!("unresolved template name `{}`", name.raw));
    let map = match name.root {
        Root::Inputs => scope.inputs,
        Root::Variables => scope.variables,
    };
    let (first, rest) = name.keys.split_first().ok_or_else(unresolved)?;
    let mut value = map.get(*first).ok_or_else(unresolved)?;
    for key in rest {
        value = match value {
            Value::Object(object) => object.get(*key),
            Value::Array(items) => key.parse::<usize>().ok().and_then(|index| items.get(index)),
            _ => None,
        }
        .ok_or_else(unresolved)?;
    }
    Ok(value)
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Renders every placeholder of `template` into a string (see the module docs).
pub fn render_string(template: &str, scope: &Scope<'_>, encoding: Encoding) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len());
    for piece in parse(template)? {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Placeholder(name) => {
                let text = text_of(resolve(&name, scope)?);
                match encoding {
                    Encoding::Plain => out.push_str(&text),
                    Encoding::UrlComponent => out.extend(utf8_percent_encode(&text, COMPONENT)),
                }
            }
        }
    }
    Ok(out)
}

/// Renders the strings inside `value` (see the module docs); an error's path points into
/// `value`.
pub fn render_value(value: &Value, scope: &Scope<'_>) -> Result<Value, TemplateError> {
    match value {
        Value::String(template) => {
            let pieces = parse(template)?;
            if let [Piece::Placeholder(name)] = pieces.as_slice() {
                return resolve(name, scope).cloned();
            }
            render_string(template, scope, Encoding::Plain).map(Value::String)
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(index, item)| render_value(item, scope).map_err(|error| error.prefixed(&format!("/{index}"))))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(object) => object
            .iter()
            .map(|(key, item)| {
                render_value(item, scope)
                    .map(|rendered| (key.clone(), rendered))
                    .map_err(|error| error.prefixed(&format!("/{}", pointer_token(key))))
            })
            .collect::<Result<Map<_, _>, _>>()
            .map(Value::Object),
        other => Ok(other.clone()),
    }
}

/// Checks the syntax of `template` (roots and braces), without resolving names.
pub fn check_string(template: &str) -> Result<(), TemplateError> {
    parse(template).map(drop)
}

/// Checks the syntax of every string inside `value`; an error's path points into `value`.
pub fn check_value(value: &Value) -> Result<(), TemplateError> {
    match value {
        Value::String(template) => check_string(template),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(index, item)| check_value(item).map_err(|error| error.prefixed(&format!("/{index}")))),
        Value::Object(object) => object.iter().try_for_each(|(key, item)| {
            check_value(item).map_err(|error| error.prefixed(&format!("/{}", pointer_token(key))))
        }),
        _ => Ok(()),
    }
}

/// Whether `template` is exactly one placeholder (then [`render_value`] keeps the value's
/// JSON type, and a URL field takes the value as the whole URL).
pub fn is_single_placeholder(template: &str) -> bool {
    matches!(parse(template).as_deref(), Ok([Piece::Placeholder(_)]))
}

/// Whether `template` holds a placeholder at all.
pub fn has_placeholders(template: &str) -> bool {
    template.contains("{{")
}

/// `key` as one JSON pointer reference token (RFC 6901: `~` → `~0`, `/` → `~1`).
pub fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
#[path = "template_tests.rs"]
mod tests;
