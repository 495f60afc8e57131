//! Model fixtures as files: named scenarios of content-routed replies for the fake model, so a
//! workflow example ships the answers it is tested with and a person can replay them offline
//! (`trellis-fake-model --fixture FILE --scenario NAME`).
//!
//! ```json
//! { "description": "What the fixture is for",
//!   "scenarios": {
//!     "happy": { "description": "Every step answers",
//!                "routes": [ { "when": "You are the judge",
//!                              "replies": [ { "json": { "winner": "A" } },
//!                                           { "text": "plain answer", "usage": { "input": 10, "output": 3 } },
//!                                           { "error": { "status": 400, "message": "refused" } },
//!                                           { "malformedJson": true } ] } ] } } }
//! ```
//!
//! A request whose system or user messages contain a route's `when` takes that route's next
//! reply (routes are tried in file order; a used-up route no longer matches); see
//! [`super::FakeModel::route`]. Every reply is exactly one of `text`, `json` (sent as compact
//! JSON text), `error` (`status` 400–599, `message`) or `malformedJson: true`, with optional
//! `usage` (`input`, `output` tokens) and `delayMs`. Anything else is refused with the path of
//! the offending field.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{ModelReply, Route};

/// One fixture file: named scenarios.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fixture {
    /// The file's `description`.
    pub description: String,
    scenarios: BTreeMap<String, Vec<Route>>,
}

impl Fixture {
    /// Reads and checks the fixture at `path`.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text =
            std::fs::read_to_string(path).map_err(|error| format!("{}: cannot read it: {error}", path.display()))?;
        let document: Value =
            serde_json::from_str(&text).map_err(|error| format!("{}: not JSON: {error}", path.display()))?;
        Self::parse(&document).map_err(|error| format!("{}: {error}", path.display()))
    }

    /// Checks a fixture document.
    pub fn parse(document: &Value) -> Result<Self, String> {
        let description = document.get("description").and_then(Value::as_str).unwrap_or_default().to_owned();
        let scenarios = document
            .get("scenarios")
            .and_then(Value::as_object)
            .filter(|scenarios| !scenarios.is_empty())
            .ok_or("scenarios: must be a non-empty object")?;
        let mut parsed = BTreeMap::new();
        for (name, scenario) in scenarios {
            let at = format!("scenarios.{name}");
            let routes = scenario
                .get("routes")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("{at}.routes: must be an array"))?;
            let routes = routes
                .iter()
                .enumerate()
                .map(|(index, route)| parse_route(route, &format!("{at}.routes[{index}]")))
                .collect::<Result<Vec<_>, _>>()?;
            parsed.insert(name.clone(), routes);
        }
        Ok(Self { description, scenarios: parsed })
    }

    /// The scenario names, sorted.
    pub fn scenario_names(&self) -> Vec<&str> {
        self.scenarios.keys().map(String::as_str).collect()
    }

    /// The routes of scenario `name`.
    pub fn routes(&self, name: &str) -> Result<Vec<Route>, String> {
        self.scenarios
            .get(name)
            .cloned()
            .ok_or_else(|| format!("no scenario `{name}` (the fixture has: {})", self.scenario_names().join(", ")))
    }

    /// How many replies scenario `name` holds (the model calls it scripts).
    pub fn reply_count(&self, name: &str) -> Result<usize, String> {
        Ok(self.routes(name)?.iter().map(|route| route.replies.len()).sum())
    }
}

fn parse_route(route: &Value, at: &str) -> Result<Route, String> {
    let object = route.as_object().ok_or_else(|| format!("{at}: must be an object"))?;
    if let Some(field) = object.keys().find(|key| !matches!(key.as_str(), "when" | "replies" | "description")) {
        return Err(format!("{at}.{field}: unknown field (a route has when, replies, description)"));
    }
    let when = object
        .get("when")
        .and_then(Value::as_str)
        .filter(|when| !when.is_empty())
        .ok_or_else(|| format!("{at}.when: must be a non-empty string"))?;
    let replies =
        object.get("replies").and_then(Value::as_array).ok_or_else(|| format!("{at}.replies: must be an array"))?;
    let replies = replies
        .iter()
        .enumerate()
        .map(|(index, reply)| parse_reply(reply, &format!("{at}.replies[{index}]")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Route::new(when, replies))
}

fn parse_reply(reply: &Value, at: &str) -> Result<ModelReply, String> {
    let object = reply.as_object().ok_or_else(|| format!("{at}: must be an object"))?;
    if let Some(field) = object
        .keys()
        .find(|key| !matches!(key.as_str(), "text" | "json" | "error" | "malformedJson" | "usage" | "delayMs"))
    {
        return Err(format!(
            "{at}.{field}: unknown field (a reply has text, json, error, malformedJson, usage, delayMs)"
        ));
    }
    let kinds: Vec<&str> =
        ["text", "json", "error", "malformedJson"].into_iter().filter(|kind| object.contains_key(*kind)).collect();
    let mut parsed = match kinds.as_slice() {
        ["text"] => ModelReply::text(object["text"].as_str().ok_or_else(|| format!("{at}.text: must be a string"))?),
        ["json"] => ModelReply::json(&object["json"]),
        ["malformedJson"] if object["malformedJson"] == true => ModelReply::malformed_json(),
        ["malformedJson"] => return Err(format!("{at}.malformedJson: must be true")),
        ["error"] => {
            let error = &object["error"];
            let status = error
                .get("status")
                .and_then(Value::as_u64)
                .filter(|status| (400..=599).contains(status))
                .ok_or_else(|| format!("{at}.error.status: must be an integer from 400 to 599"))?;
            let message = error.get("message").and_then(Value::as_str).unwrap_or("scripted failure (fake model)");
            ModelReply::error(status as u16, message)
        }
        _ => return Err(format!("{at}: must have exactly one of text, json, error, malformedJson")),
    };
    if let Some(usage) = object.get("usage") {
        let tokens = |field: &str| {
            usage
                .get(field)
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("{at}.usage.{field}: must be a whole number"))
        };
        parsed = parsed.usage(tokens("input")?, tokens("output")?);
    }
    if let Some(delay) = object.get("delayMs") {
        let delay = delay.as_u64().ok_or_else(|| format!("{at}.delayMs: must be a whole number"))?;
        parsed = parsed.delay(Duration::from_millis(delay));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parses_every_reply_kind_and_counts_them() {
        let fixture = Fixture::parse(&json!({"description": "d", "scenarios": {"happy": {"routes": [
            {"when": "judge", "replies": [{"json": {"winner": "A"}}, {"text": "t", "usage": {"input": 1, "output": 2}}]},
            {"when": "other", "replies": [{"error": {"status": 400, "message": "no"}}, {"malformedJson": true, "delayMs": 5}]}
        ]}}}))
        .unwrap();
        assert_eq!(fixture.scenario_names(), ["happy"]);
        assert_eq!(fixture.reply_count("happy").unwrap(), 4);
        let routes = fixture.routes("happy").unwrap();
        assert_eq!(routes[0].replies[0], ModelReply::json(&json!({"winner": "A"})));
        assert_eq!(routes[0].replies[1], ModelReply::text("t").usage(1, 2));
        assert_eq!(routes[1].replies[0], ModelReply::error(400, "no"));
        assert!(fixture.routes("sad").unwrap_err().contains("the fixture has: happy"));
    }

    #[test]
    fn refuses_bad_fields_by_path() {
        let bad = |routes: Value| Fixture::parse(&json!({"scenarios": {"s": {"routes": routes}}})).unwrap_err();
        assert_eq!(bad(json!([{"when": "", "replies": []}])), "scenarios.s.routes[0].when: must be a non-empty string");
        assert_eq!(
            bad(json!([{"when": "x", "replies": [{"text": "a", "json": 1}]}])),
            "scenarios.s.routes[0].replies[0]: must have exactly one of text, json, error, malformedJson"
        );
        assert_eq!(
            bad(json!([{"when": "x", "replies": [{"error": {"status": 200}}]}])),
            "scenarios.s.routes[0].replies[0].error.status: must be an integer from 400 to 599"
        );
        assert!(
            bad(json!([{"when": "x", "replies": [{"txt": "a"}]}])).starts_with("scenarios.s.routes[0].replies[0].txt")
        );
        assert_eq!(Fixture::parse(&json!({"scenarios": {}})).unwrap_err(), "scenarios: must be a non-empty object");
    }
}
