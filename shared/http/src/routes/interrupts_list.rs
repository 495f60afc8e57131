//! `GET /v1/interrupts?status=pending[&runId=][&workflowId=][&limit=][&cursor=]` (a host
//! extension): the caller's pending interrupts, one per run that waits on one, newest run
//! first. Each item is the snapshot's `interrupt` view ([`super::interrupts::interrupt_view`],
//! the one home of that object) plus `runId`, `workflowId`, `runStatus` and, when the
//! interrupt has one, its `resumeSchema`.
//!
//! The runs come from ONE run listing ([`trellis_core::service::Services::list_runs`], no
//! status filter, in its own order: newest first), filtered in memory: a run counts whatever
//! its status (`waiting-approval`, `waiting-input`, `waiting-external`, or another
//! non-terminal status while its state holds a pending interrupt record). One listing means
//! one position per run: a run never appears twice, even when its status changes while it is
//! read. Paging is as `GET /v1/runs`: a signed cursor bound to the tenant and the filter.
//!
//! A request reads at most [`scan_cap`] runs (`max(4 × limit, 100)`): the tenant's history
//! may hold many runs without an interrupt, and each listed run costs a read (on DynamoDB, a
//! run read per index entry). When the cap is reached before the page is full, the page comes
//! back short, or empty, with a `nextCursor` at the last run scanned: a client follows
//! `nextCursor` until it is absent, never stopping at a short page.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use trellis_core::ports::{RunFilter, RunPosition};
use trellis_core::{RunState, ServiceError};

use super::cursor;
use super::interrupts::{interrupt_view, signer};
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::links::BasePath;
use crate::AppState;

/// The listing name an interrupt-list cursor is bound to.
const LISTING: &str = "interrupts";

/// The fewest runs a request may scan, whatever its `limit`.
const MIN_SCAN: usize = 100;

/// How many runs a request scans at most: `max(4 × limit, 100)`.
fn scan_cap(limit: usize) -> usize {
    limit.saturating_mul(4).max(MIN_SCAN)
}

/// The filter a cursor is bound to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Filter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    workflow_id: Option<String>,
}

/// Where a page ends, under which filter.
#[derive(Serialize, Deserialize, PartialEq)]
struct Position {
    filter: Filter,
    after: RunPosition,
}

fn parameter_error(message: &str, parameter: &str) -> ApiError {
    ApiError::validation(message).with_details(json!({ "parameter": parameter }))
}

/// `GET /v1/interrupts`: at most `limit` pending interrupts after `cursor`, read from at most
/// [`scan_cap`]`(limit)` runs of the run listing. `nextCursor` is present whenever the listing
/// may go on past the last run scanned, and points there: a page may be short, or empty, and
/// still carry one (the cap was reached among runs without an interrupt). Only its absence
/// ends the listing.
pub(crate) async fn list(
    caller: Caller,
    State(state): State<AppState>,
    base: BasePath,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RunsRead)?;
    match query.get("status").map(String::as_str) {
        None | Some("pending") => {}
        Some(_) => return Err(parameter_error("status must be `pending`", "status")),
    }
    let filter = Filter { run_id: query.get("runId").cloned(), workflow_id: query.get("workflowId").cloned() };
    let limit = cursor::page_limit(&query)?;
    let after = match query.get("cursor") {
        None => None,
        Some(text) => {
            let position: Position = cursor::decode(&state.cursor_key[..], LISTING, caller.tenant(), text)?;
            if position.filter != filter {
                return Err(parameter_error("the cursor is invalid for this listing", "cursor"));
            }
            Some(position.after)
        }
    };
    let scan = pending_runs(&state, caller.tenant(), &filter, after, limit).await?;
    let now = state.services.clock.now();
    let signer = signer(&state);
    let interrupts: Vec<Value> = scan
        .found
        .iter()
        .filter_map(|run| {
            let mut item = interrupt_view(&signer, run, now, &base)?;
            item["runId"] = json!(run.run_id);
            item["workflowId"] = json!(run.workflow.id);
            item["runStatus"] = json!(run.status.as_str());
            if let Some(schema) = item["payload"].get("resumeSchema").cloned() {
                item["resumeSchema"] = schema;
            }
            Some(item)
        })
        .collect();
    let mut body = json!({ "interrupts": interrupts });
    if let Some(after) = scan.resume_after {
        body["nextCursor"] =
            json!(cursor::encode(&state.cursor_key[..], LISTING, caller.tenant(), Position { filter, after }));
    }
    Ok(Json(body))
}

/// Whether the snapshot of `run` shows a pending interrupt.
fn waits(run: &RunState) -> bool {
    !run.status.is_terminal() && run.pending_interrupt().is_some()
}

/// The listing position of `run`.
fn position(run: &RunState) -> RunPosition {
    RunPosition { created_at: run.created_at, run_id: run.run_id.clone() }
}

/// What one request read: the waiting runs, and where the next page starts (none when the
/// listing is known to end here).
#[derive(Default)]
struct Scan {
    found: Vec<RunState>,
    resume_after: Option<RunPosition>,
}

/// Up to `limit` runs of `tenant` after `after` (newest first) whose snapshot shows a pending
/// interrupt, scanning at most [`scan_cap`]`(limit)` runs of the one status-less listing.
async fn pending_runs(
    state: &AppState,
    tenant: &str,
    filter: &Filter,
    after: Option<RunPosition>,
    limit: usize,
) -> Result<Scan, ApiError> {
    if let Some(run_id) = &filter.run_id {
        // One run: found (in this tenant, after the cursor, of the workflow) and waiting, or none.
        let run = match state.services.get_run_summary(tenant, run_id).await {
            Ok(run) => run,
            Err(ServiceError::NotFound { .. }) => return Ok(Scan::default()),
            Err(error) => return Err(error.into()),
        };
        let in_page = after
            .as_ref()
            .is_none_or(|after| (run.created_at, run.run_id.as_str()) < (after.created_at, after.run_id.as_str()));
        let of_workflow = filter.workflow_id.as_ref().is_none_or(|id| *id == run.workflow.id);
        let found = if in_page && of_workflow && waits(&run) { vec![run] } else { Vec::new() };
        return Ok(Scan { found, resume_after: None });
    }
    let listing = RunFilter { workflow_id: filter.workflow_id.clone(), status: None };
    let cap = scan_cap(limit);
    let mut found = Vec::new();
    let mut after = after;
    let mut fetched = 0;
    let mut batch = 0;
    loop {
        // Ask for what the page still needs plus one (to learn whether the listing goes on),
        // more each round while runs keep coming back without an interrupt; never past the cap.
        batch = (limit - found.len() + 1).max(batch * 2).min(cap - fetched);
        let runs = state.services.list_runs(tenant, &listing, after.as_ref(), batch).await?;
        fetched += runs.len();
        let ended = runs.len() < batch;
        let count = runs.len();
        for (index, run) in runs.into_iter().enumerate() {
            after = Some(position(&run));
            if waits(&run) {
                found.push(run);
                if found.len() == limit {
                    // Full: the listing goes on if this batch held more, or may hold more.
                    let more = index + 1 < count || !ended;
                    return Ok(Scan { found, resume_after: after.filter(|_| more) });
                }
            }
        }
        if ended {
            return Ok(Scan { found, resume_after: None });
        }
        if fetched >= cap {
            // Short (or empty): the rest is read on the next page, from the last run scanned.
            return Ok(Scan { found, resume_after: after });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_cap_is_four_pages_and_at_least_a_hundred_runs() {
        assert_eq!(scan_cap(1), 100);
        assert_eq!(scan_cap(25), 100);
        assert_eq!(scan_cap(26), 104);
        assert_eq!(scan_cap(cursor::MAX_LIMIT), 400);
    }
}
