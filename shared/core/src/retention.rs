//! How long a run is kept after it ends, and what deleting runs means.
//!
//! A retention is a duration written `<n>d`, `<n>h`, `<n>m` or `<n>s` (days, hours, minutes,
//! seconds; from one second to [`MAX_RETENTION_DAYS`] days). A run's retention is fixed at creation
//! ([`RunState::retention_ms`]): `configurable.retention` of its request, else its workflow's
//! `settings.retention`, else the host's default (none on the embedded host: runs are kept
//! until deleted; 30 days on AWS). It counts from the run's end ([`RunState::expired_at`]):
//! a run past it reads as gone — snapshot, events, lists, forks (`410 history_expired`) — and
//! is removed by the embedded host's sweeper or by DynamoDB's TTL (set to creation + the run's
//! duration limit + retention, the latest its end can be).
//!
//! Child runs keep their parent's retention but never expire on their own: they are read and
//! deleted with their parent.
//!
//! [`RunState::retention_ms`]: crate::run::RunState::retention_ms
//! [`RunState::expired_at`]: crate::run::RunState::expired_at

use serde_json::Value;

use crate::run::RunState;

/// The longest retention accepted, in days (ten years).
pub const MAX_RETENTION_DAYS: u64 = 3_650;
/// Milliseconds per day.
pub const DAY_MS: u64 = 86_400_000;

/// Parses a retention (`"30d"`, `"12h"`, `"90m"`, `"45s"`) into milliseconds; the message
/// names the rule.
pub fn parse(value: &Value) -> Result<u64, String> {
    let rule =
        || format!("a retention is `<n>d`, `<n>h`, `<n>m` or `<n>s`, from 1s to {MAX_RETENTION_DAYS}d (got {value})");
    let text = value.as_str().ok_or_else(rule)?;
    let (digits, unit) = text.split_at(text.len().saturating_sub(1));
    let amount: u64 = digits.parse().map_err(|_| rule())?;
    let ms = match unit {
        "d" => amount.checked_mul(DAY_MS),
        "h" => amount.checked_mul(3_600_000),
        "m" => amount.checked_mul(60_000),
        "s" => amount.checked_mul(1_000),
        _ => None,
    }
    .ok_or_else(rule)?;
    if !(1_000..=MAX_RETENTION_DAYS * DAY_MS).contains(&ms) {
        return Err(rule());
    }
    Ok(ms)
}

/// The retention of a new run: `configurable.retention` (checked: the message names the
/// field), else the workflow's `settings.retention` (checked at registration), else `default`.
pub fn for_run(
    configurable: Option<&Value>,
    settings: &serde_json::Map<String, Value>,
    default: Option<u64>,
) -> Result<Option<u64>, (String, String)> {
    if let Some(value) = configurable.and_then(|c| c.get("retention")) {
        return parse(value).map(Some).map_err(|message| ("configurable.retention".to_owned(), message));
    }
    if let Some(value) = settings.get("retention") {
        return parse(value).map(Some).map_err(|message| ("settings.retention".to_owned(), message));
    }
    Ok(default)
}

/// Whether `run` may be deleted without `force`: it has ended.
pub fn deletable(run: &RunState) -> bool {
    run.status.is_terminal()
}

/// The runs a run's nodes started, as far as its state knows them: its child runs and the
/// children of its parallel fan-outs.
pub fn children(run: &RunState) -> Vec<String> {
    let mut ids: Vec<String> = run.child_runs.iter().map(|child| child.run_id.clone()).collect();
    for node in run.nodes.values() {
        if let Some(id) = &node.child_run_id {
            if !ids.contains(id) {
                ids.push(id.clone());
            }
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_retention_is_a_count_of_days_hours_or_minutes() {
        assert_eq!(parse(&json!("30d")), Ok(30 * DAY_MS));
        assert_eq!(parse(&json!("12h")), Ok(12 * 3_600_000));
        assert_eq!(parse(&json!("1m")), Ok(60_000));
        assert_eq!(parse(&json!("2s")), Ok(2_000));
        for bad in
            [json!("0s"), json!("0m"), json!("30"), json!("3651d"), json!(30), json!("d"), json!("1w"), json!("-1d")]
        {
            assert!(parse(&bad).is_err(), "{bad}");
        }
        let settings = json!({"retention": "7d"}).as_object().cloned().unwrap();
        assert_eq!(for_run(None, &settings, None), Ok(Some(7 * DAY_MS)));
        assert_eq!(for_run(Some(&json!({"retention": "1h"})), &settings, None), Ok(Some(3_600_000)));
        assert_eq!(for_run(None, &Default::default(), Some(5)), Ok(Some(5)));
        let refused = for_run(Some(&json!({"retention": "soon"})), &settings, None).unwrap_err();
        assert_eq!(refused.0, "configurable.retention");
    }
}
