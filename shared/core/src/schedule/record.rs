//! Schedules as stored: one record per `(tenant, workflow, trigger)` of type `schedule` in a
//! definition's `triggers[]`, holding its next occurrence. See [`crate::service`]'s scheduler
//! (`Services::tick_schedules`) for how occurrences fire exactly once.
//!
//! A schedule trigger is `{id, type: "schedule", enabled?, config: {expression, timezone?,
//! inputs?, tenantId?}}`: `expression` in EventBridge Scheduler syntax ([`super::expr`]),
//! `timezone` an IANA name (UTC when absent), `inputs` the run's inputs. A schedule of a
//! bundled or `--workflows` definition (the global namespace) runs in `config.tenantId`, or in
//! [`DEFAULT_TENANT`]; one of a tenant's registration runs in that tenant.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::ScheduleExpr;
use crate::error::ServiceError;
use crate::timefmt::{rfc3339, Millis};

/// The record kind (scope [`crate::webhook::ALL`], key [`ScheduleRecord::key`]).
pub const KIND: &str = "schedule";
/// The tenant a global definition's schedules run in unless they name one (the tenant of the
/// host's full-access key).
pub const DEFAULT_TENANT: &str = "default";
/// At most this many missed occurrences of one schedule are started late in one tick (a host
/// that was down); older ones are counted as skipped.
pub const MAX_CATCH_UP: u32 = 100;

/// A declared schedule, as read from a definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Declared {
    /// The trigger's id.
    pub trigger_id: String,
    /// The expression.
    pub expression: String,
    /// The IANA zone.
    pub timezone: Option<String>,
    /// The run's inputs.
    pub inputs: Map<String, Value>,
    /// The tenant named (global definitions only).
    pub tenant_id: Option<String>,
}

fn invalid(index: usize, field: &str, rule: &'static str, message: String) -> ServiceError {
    crate::error::DefinitionError::Invalid { path: format!("/triggers/{index}{field}"), rule, message }.into()
}

/// The enabled schedule triggers of a definition document, checked: an expression that does
/// not parse, an unknown zone, a sub-minute rate without `allow_sub_minute` (the test seams)
/// and unknown config fields are refused, naming the trigger's path.
pub fn declared(document: &Value, allow_sub_minute: bool) -> Result<Vec<Declared>, ServiceError> {
    let Some(triggers) = document.get("triggers").and_then(Value::as_array) else { return Ok(Vec::new()) };
    let mut out: Vec<Declared> = Vec::new();
    for (index, trigger) in triggers.iter().enumerate() {
        if trigger.get("type").and_then(Value::as_str) != Some("schedule") {
            continue;
        }
        if trigger.get("enabled").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let trigger_id = trigger.get("id").and_then(Value::as_str).unwrap_or_default().to_owned();
        if trigger_id.is_empty() || trigger_id.contains('/') || trigger_id.contains(':') {
            return Err(invalid(
                index,
                "/id",
                "schedule_trigger",
                "a schedule trigger's id must be non-empty, without `/` or `:`".into(),
            ));
        }
        if out.iter().any(|seen| seen.trigger_id == trigger_id) {
            return Err(invalid(index, "/id", "schedule_trigger", format!("trigger id `{trigger_id}` is used twice")));
        }
        let empty = Map::new();
        let config = match trigger.get("config") {
            Some(Value::Object(config)) => config,
            None => &empty,
            Some(_) => return Err(invalid(index, "/config", "schedule_trigger", "config must be an object".into())),
        };
        if let Some(unknown) =
            config.keys().find(|key| !["expression", "timezone", "inputs", "tenantId"].contains(&key.as_str()))
        {
            return Err(invalid(
                index,
                &format!("/config/{unknown}"),
                "schedule_trigger",
                format!("unknown schedule config field `{unknown}` (expression, timezone, inputs, tenantId)"),
            ));
        }
        let expression = config.get("expression").and_then(Value::as_str).ok_or_else(|| {
            invalid(
                index,
                "/config/expression",
                "schedule_expression",
                "a schedule trigger needs config.expression".into(),
            )
        })?;
        let timezone = match config.get("timezone") {
            None | Some(Value::Null) => None,
            Some(Value::String(zone)) => Some(zone.clone()),
            Some(_) => {
                return Err(invalid(
                    index,
                    "/config/timezone",
                    "schedule_expression",
                    "config.timezone must be a string".into(),
                ))
            }
        };
        let parsed = ScheduleExpr::parse(expression, timezone.as_deref())
            .map_err(|message| invalid(index, "/config/expression", "schedule_expression", message))?;
        if parsed.is_sub_minute() && !allow_sub_minute {
            return Err(invalid(
                index,
                "/config/expression",
                "schedule_expression",
                "a schedule may fire at most once a minute (second rates are for the test seams only)".into(),
            ));
        }
        let inputs = match config.get("inputs") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(inputs)) => inputs.clone(),
            Some(_) => {
                return Err(invalid(
                    index,
                    "/config/inputs",
                    "schedule_trigger",
                    "config.inputs must be an object".into(),
                ))
            }
        };
        let tenant_id = config.get("tenantId").and_then(Value::as_str).map(str::to_owned);
        out.push(Declared { trigger_id, expression: expression.to_owned(), timezone, inputs, tenant_id });
    }
    Ok(out)
}

/// A stored schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleRecord {
    /// The tenant its runs belong to.
    pub tenant_id: String,
    /// Where the declaring definition is stored: the tenant, or the global namespace.
    #[serde(default)]
    pub namespace: String,
    /// The workflow it starts (the latest version the tenant sees, at each occurrence).
    pub workflow_id: String,
    /// The trigger's id in the definition.
    pub trigger_id: String,
    /// The expression.
    pub expression: String,
    /// The IANA zone, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// The run's inputs.
    #[serde(default)]
    pub inputs: Map<String, Value>,
    /// When the schedule was (re)declared: `rate` occurrences count from here.
    pub anchor: Millis,
    /// The next occurrence (`None`: none is left).
    pub next_at: Option<Millis>,
    /// Paused schedules skip their occurrences (never backfilled on resume).
    #[serde(default)]
    pub paused: bool,
    /// Occurrences started.
    #[serde(default)]
    pub fired: u64,
    /// Occurrences skipped (paused, too far behind, or refused by the workflow).
    #[serde(default)]
    pub skipped: u64,
    /// The last occurrence started, and its run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_fired_at: Option<Millis>,
    /// The run the last occurrence started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_id: Option<String>,
    /// Why the last occurrence started nothing, if it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<Value>,
}

impl ScheduleRecord {
    /// The record key: `<tenant>/<workflowId>/<triggerId>`.
    pub fn key_of(tenant: &str, workflow_id: &str, trigger_id: &str) -> String {
        format!("{tenant}/{workflow_id}/{trigger_id}")
    }

    /// This schedule's record key.
    pub fn key(&self) -> String {
        Self::key_of(&self.tenant_id, &self.workflow_id, &self.trigger_id)
    }

    /// The id the API shows: `<workflowId>/<triggerId>`.
    pub fn schedule_id(&self) -> String {
        format!("{}/{}", self.workflow_id, self.trigger_id)
    }

    /// The parsed expression (a stored one always parses; `None` if a later build refuses it).
    pub fn expr(&self) -> Option<ScheduleExpr> {
        ScheduleExpr::parse(&self.expression, self.timezone.as_deref()).ok()
    }

    /// Reads a stored value.
    pub fn from_value(value: &Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(value.clone())
    }

    /// The stored value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("a schedule serializes")
    }

    /// Whether `declared` says the same as this record (so re-registering keeps its place).
    pub fn same_as(&self, declared: &Declared) -> bool {
        self.expression == declared.expression && self.timezone == declared.timezone && self.inputs == declared.inputs
    }

    /// What the API shows.
    pub fn view(&self) -> Value {
        let at = |ms: Option<Millis>| ms.map(rfc3339);
        json!({
            "scheduleId": self.schedule_id(),
            "tenantId": self.tenant_id,
            "workflowId": self.workflow_id,
            "triggerId": self.trigger_id,
            "expression": self.expression,
            "timezone": self.timezone.as_deref().unwrap_or("UTC"),
            "inputs": self.inputs,
            "state": if self.paused { "paused" } else { "active" },
            "nextAt": at(self.next_at.filter(|_| !self.paused)),
            "fired": self.fired,
            "skipped": self.skipped,
            "lastFiredAt": at(self.last_fired_at),
            "lastRunId": self.last_run_id,
            "lastError": self.last_error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_of(error: ServiceError) -> String {
        match error {
            ServiceError::Validation { details, .. } => details["path"].as_str().unwrap_or_default().to_owned(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn schedule_triggers_are_read_and_checked() {
        let document = json!({"triggers": [
            {"id": "manual", "type": "manual"},
            {"id": "nightly", "type": "schedule", "config": {"expression": "cron(0 2 * * ? *)", "timezone": "Europe/Berlin", "inputs": {"a": 1}}},
            {"id": "off", "type": "schedule", "enabled": false, "config": {"expression": "nonsense"}},
        ]});
        let declared = declared(&document, false).unwrap();
        assert_eq!(declared.len(), 1);
        assert_eq!((declared[0].trigger_id.as_str(), declared[0].inputs["a"].clone()), ("nightly", json!(1)));
        let bad = json!({"triggers": [{"id": "t", "type": "schedule", "config": {"expression": "cron(0 2 * * *)"}}]});
        assert_eq!(path_of(super::declared(&bad, false).unwrap_err()), "/triggers/0/config/expression");
        let fast = json!({"triggers": [{"id": "t", "type": "schedule", "config": {"expression": "rate(2 seconds)"}}]});
        assert_eq!(path_of(super::declared(&fast, false).unwrap_err()), "/triggers/0/config/expression");
        assert_eq!(super::declared(&fast, true).unwrap().len(), 1);
        let zone = json!({"triggers": [{"id": "t", "type": "schedule", "config": {"expression": "rate(1 hour)", "timezone": "Mars/Olympus"}}]});
        assert!(super::declared(&zone, false).is_err());
        let missing = json!({"triggers": [{"id": "t", "type": "schedule"}]});
        assert_eq!(path_of(super::declared(&missing, false).unwrap_err()), "/triggers/0/config/expression");
    }
}
