//! Deleting runs (see [`crate::retention`]): `DELETE /v1/runs/{id}[?force=true]`,
//! `POST /v1/runs:prune` (a preview with `dryRun` lists exactly what the same request
//! deletes), and the sweep of runs past their retention. A run goes with its child runs,
//! deepest first, so a delete cut short leaves the parent to be deleted again.

use serde_json::{json, Map, Value};

use super::Services;
use crate::engine::Input;
use crate::error::ServiceError;
use crate::ports::{Expect, RunFilter, RunPosition};
use crate::retention::{children, DAY_MS};
use crate::run::{RunState, RunStatus};
use crate::timefmt::rfc3339;

/// Runs a prune looks at, newest first (a tenant with more prunes in several calls).
pub const MAX_PRUNE_SCAN: usize = 10_000;
/// Runs one prune deletes at most (the rest are listed; call again).
pub const MAX_PRUNE_DELETES: usize = 1_000;
/// What a prune keeps when it names neither `keep` nor `olderThanDays`.
pub const DEFAULT_KEEP: usize = 50;
/// The host record kind remembering a run the retention sweep removed (scope: its tenant;
/// key: its id), so that a fork of it still answers `410 history_expired`, not `404`.
pub const EXPIRED_KIND: &str = "expired-run";
/// How long such a run is remembered.
pub const EXPIRED_MEMORY_MS: u64 = 30 * DAY_MS;
/// Fields of a prune request.
const PRUNE_FIELDS: [&str; 5] = ["olderThanDays", "status", "workflowId", "keep", "dryRun"];
/// Runs listed per store read while pruning.
const PAGE: usize = 200;

/// A checked `POST /v1/runs:prune` body.
#[derive(Debug, Clone, PartialEq)]
pub struct PruneRequest {
    /// Only runs that ended more than this many days ago.
    pub older_than_days: Option<f64>,
    /// Only runs with this (terminal) status.
    pub status: Option<RunStatus>,
    /// Only runs of this workflow.
    pub workflow_id: Option<String>,
    /// The newest this many ended runs are kept.
    pub keep: usize,
    /// List what would go, delete nothing.
    pub dry_run: bool,
}

impl PruneRequest {
    /// Checks a body: `400 validation_error` naming the field and the rule.
    pub fn parse(body: &Value) -> Result<Self, ServiceError> {
        let invalid = |field: &str, message: &str| ServiceError::validation(message, json!({ "field": field }));
        let empty = Map::new();
        let fields = match body {
            Value::Object(fields) => fields,
            Value::Null => &empty,
            _ => return Err(invalid("body", "the request body must be a JSON object")),
        };
        if let Some(unknown) = fields.keys().find(|name| !PRUNE_FIELDS.contains(&name.as_str())) {
            return Err(invalid(unknown, "unknown field: a prune has olderThanDays, status, workflowId, keep, dryRun"));
        }
        let older_than_days = match fields.get("olderThanDays") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_f64()
                    .filter(|days| days.is_finite() && *days > 0.0 && *days <= 36_500.0)
                    .ok_or_else(|| invalid("olderThanDays", "olderThanDays must be a number of days above 0"))?,
            ),
        };
        let status = match fields.get("status") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                serde_json::from_value::<RunStatus>(value.clone())
                    .ok()
                    .filter(|status| status.is_terminal())
                    .ok_or_else(|| {
                        invalid("status", "status must be completed, failed or cancelled: only ended runs are pruned")
                    })?,
            ),
        };
        let workflow_id = match fields.get("workflowId") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
            Some(_) => return Err(invalid("workflowId", "workflowId must be a non-empty string")),
        };
        let keep = match fields.get("keep") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                value
                    .as_u64()
                    .and_then(|keep| usize::try_from(keep).ok())
                    .ok_or_else(|| invalid("keep", "keep must be an integer of 0 or more"))?,
            ),
        };
        let dry_run = match fields.get("dryRun") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(dry)) => *dry,
            Some(_) => return Err(invalid("dryRun", "dryRun must be true or false")),
        };
        // Nothing said about age or count: the newest DEFAULT_KEEP stay (never "everything").
        let keep = keep.unwrap_or(if older_than_days.is_none() { DEFAULT_KEEP } else { 0 });
        Ok(Self { older_than_days, status, workflow_id, keep, dry_run })
    }
}

impl Services {
    /// `DELETE /v1/runs/{id}`: deletes `tenant`'s run and its child runs. A run that has not
    /// ended is `409 run_state_conflict` unless `force` (it is cancelled first); a child run
    /// of a parent that has not ended is refused (it goes with its parent). Answers
    /// `{runId, deleted: [ids], bytes}`.
    pub async fn delete_run(&self, tenant: &str, run_id: &str, force: bool) -> Result<Value, ServiceError> {
        let run = match self.store.load_run_summary(run_id).await? {
            Some(run) if run.tenant == tenant => run,
            _ => return Err(ServiceError::NotFound { what: "run" }),
        };
        if let Some(parent) = &run.parent {
            let live = self.store.load_run_summary(&parent.run_id).await?.is_some_and(|p| !p.status.is_terminal());
            if live {
                return Err(ServiceError::Conflict {
                    code: "run_state_conflict",
                    message: "this is a child run of a parent that has not ended; it is deleted with its parent"
                        .to_owned(),
                    details: json!({ "parentRunId": parent.run_id, "runStatus": run.status.as_str() }),
                });
            }
        }
        if !run.status.is_terminal() {
            if !force {
                return Err(ServiceError::Conflict {
                    code: "run_state_conflict",
                    message: format!("the run is {}; cancel it first, or delete with force=true", run.status.as_str()),
                    details: json!({ "runStatus": run.status.as_str(), "force": false }),
                });
            }
            self.advance(Some(tenant), run_id, Input::Cancel { reason: Some("deleted".to_owned()) }, &super::NoHooks)
                .await?;
        }
        let (deleted, bytes) = self.delete_tree(run_id).await?;
        self.store.reclaim_space().await?;
        tracing::info!(run_id, runs = deleted.len(), bytes, "run deleted");
        Ok(json!({ "runId": run_id, "deleted": deleted, "bytes": bytes }))
    }

    /// Deletes `run_id` and its child runs (deepest first); the ids deleted and the bytes.
    async fn delete_tree(&self, run_id: &str) -> Result<(Vec<String>, u64), ServiceError> {
        let order = self.tree(run_id).await?;
        let mut bytes = 0;
        for id in order.iter().rev() {
            bytes += self.store.delete_run(id).await?;
        }
        Ok((order, bytes))
    }

    /// `run_id` and every run below it, parents before their children.
    async fn tree(&self, run_id: &str) -> Result<Vec<String>, ServiceError> {
        let mut order = vec![run_id.to_owned()];
        let mut next = 0;
        while next < order.len() {
            if let Some(run) = self.store.load_run(&order[next]).await? {
                for child in children(&run) {
                    if !order.contains(&child) {
                        order.push(child);
                    }
                }
            }
            next += 1;
        }
        Ok(order)
    }

    /// The bytes `run_id` and its child runs store.
    async fn tree_bytes(&self, run_id: &str) -> Result<u64, ServiceError> {
        let mut bytes = 0;
        for id in self.tree(run_id).await? {
            bytes += self.store.run_bytes(&id).await?;
        }
        Ok(bytes)
    }

    /// `POST /v1/runs:prune`: `tenant`'s ended top-level runs, newest end first; the newest
    /// `keep` stay, runs that have not ended always stay (`protectedRuns` counts both), and of
    /// the rest those matching `workflowId`, `status` and `olderThanDays` are candidates —
    /// deleted with their child runs unless `dryRun`. Answers `{deleted, protectedRuns,
    /// candidates[{runId, workflowId, status, endedAt, bytes}], bytes, dryRun, keep,
    /// truncated}`.
    pub async fn prune_runs(&self, tenant: &str, request: &PruneRequest) -> Result<Value, ServiceError> {
        let now = self.clock.now();
        let filter = RunFilter { workflow_id: request.workflow_id.clone(), status: request.status };
        let mut ended: Vec<RunState> = Vec::new();
        let mut active = 0usize;
        let mut position: Option<RunPosition> = None;
        let mut scanned = 0usize;
        loop {
            let page = self.store.list_runs(tenant, &filter, position.as_ref(), PAGE).await?;
            let full = page.len() == PAGE;
            scanned += page.len();
            position = page.last().map(|run| RunPosition { created_at: run.created_at, run_id: run.run_id.clone() });
            for run in page.into_iter().filter(|run| run.parent.is_none() && run.expired_at(now).is_none()) {
                if run.status.is_terminal() {
                    ended.push(run);
                } else {
                    active += 1;
                }
            }
            if !full || scanned >= MAX_PRUNE_SCAN {
                break;
            }
        }
        ended.sort_by(|a, b| b.ended_at.cmp(&a.ended_at).then_with(|| b.run_id.cmp(&a.run_id)));
        let kept = ended.len().min(request.keep);
        let cutoff = request.older_than_days.map(|days| now.saturating_sub((days * DAY_MS as f64) as u64));
        let mut candidates: Vec<&RunState> = ended
            .iter()
            .skip(kept)
            .filter(|run| cutoff.is_none_or(|cutoff| run.ended_at.unwrap_or(run.created_at) < cutoff))
            .collect();
        let truncated = candidates.len() > MAX_PRUNE_DELETES || scanned >= MAX_PRUNE_SCAN;
        candidates.truncate(MAX_PRUNE_DELETES);
        let mut listed = Vec::with_capacity(candidates.len());
        let mut total = 0u64;
        let mut deleted = 0usize;
        for run in &candidates {
            let bytes = if request.dry_run {
                self.tree_bytes(&run.run_id).await?
            } else {
                let (_, bytes) = self.delete_tree(&run.run_id).await?;
                deleted += 1;
                bytes
            };
            total += bytes;
            listed.push(json!({
                "runId": run.run_id,
                "workflowId": run.workflow.id,
                "status": run.status.as_str(),
                "endedAt": run.ended_at.map(rfc3339),
                "bytes": bytes,
            }));
        }
        if deleted > 0 {
            self.store.reclaim_space().await?;
            tracing::info!(tenant, deleted, bytes = total, "runs pruned");
        }
        Ok(json!({
            "deleted": deleted,
            "protectedRuns": kept + active,
            "candidates": listed,
            "bytes": total,
            "dryRun": request.dry_run,
            "keep": request.keep,
            "truncated": truncated,
        }))
    }

    /// Deletes the runs `expired` names (runs past their retention, found by the host's
    /// sweeper) with their child runs, remembering each for [`EXPIRED_MEMORY_MS`] (a fork of
    /// it answers `410`), then gives the space back; how many.
    pub async fn sweep_expired(&self, expired: &[String]) -> Result<usize, ServiceError> {
        let now = self.clock.now();
        let mut deleted = 0;
        for run_id in expired {
            // Read again: only a run still past its retention goes.
            let Some(run) = self.store.load_run_summary(run_id).await? else { continue };
            if let Some(expired_at) = run.expired_at(now) {
                let memory = json!({ "retentionBoundary": rfc3339(expired_at) });
                let until = Some(now.saturating_add(EXPIRED_MEMORY_MS));
                self.store.put_record(EXPIRED_KIND, &run.tenant, run_id, &memory, until, Expect::Any, now).await?;
                self.delete_tree(run_id).await?;
                deleted += 1;
            }
        }
        if deleted > 0 {
            self.store.reclaim_space().await?;
            tracing::info!(deleted, "runs past their retention deleted");
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prune_request_names_the_field_and_the_rule() {
        let field = |body: Value| match PruneRequest::parse(&body) {
            Err(ServiceError::Validation { details, .. }) => details["field"].as_str().unwrap_or_default().to_owned(),
            other => panic!("expected a validation error, got {other:?}"),
        };
        assert_eq!(field(json!({"olderThanDays": 0})), "olderThanDays");
        assert_eq!(field(json!({"status": "running"})), "status");
        assert_eq!(field(json!({"keep": -1})), "keep");
        assert_eq!(field(json!({"dryRun": "yes"})), "dryRun");
        assert_eq!(field(json!({"workflowId": ""})), "workflowId");
        assert_eq!(field(json!({"all": true})), "all");
        assert_eq!(PruneRequest::parse(&json!({})).unwrap().keep, DEFAULT_KEEP, "nothing said: the newest 50 stay");
        let aged = PruneRequest::parse(&json!({"olderThanDays": 7, "status": "failed", "dryRun": true})).unwrap();
        assert_eq!((aged.keep, aged.status, aged.dry_run), (0, Some(RunStatus::Failed), true));
    }
}
