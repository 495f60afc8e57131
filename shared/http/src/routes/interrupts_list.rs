//! `GET /v1/interrupts?status=pending[&runId=][&workflowId=][&limit=][&cursor=]` (a host
//! extension): the caller's pending interrupts, one per run that waits on one, newest run
//! first. Each item is the snapshot's `interrupt` view ([`super::interrupts::interrupt_view`],
//! the one home of that object) plus `runId`, `workflowId`, `runStatus` and, when the
//! interrupt has one, its `resumeSchema`.
//!
//! The runs come from the run listing ([`trellis_core::service::Services::list_runs`]): one
//! listing per non-terminal status, merged newest first, so a run counts whatever its status
//! (`waiting-approval`, `waiting-input`, `waiting-external`, or another non-terminal status
//! while its state holds a pending interrupt record). Paging is as `GET /v1/runs`: a signed
//! cursor bound to the tenant and the filter.

use std::collections::{HashMap, VecDeque};

use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use trellis_core::ports::{RunFilter, RunPosition};
use trellis_core::{RunState, RunStatus, ServiceError};

use super::cursor;
use super::interrupts::{interrupt_view, signer};
use crate::auth::{Caller, Scope};
use crate::error::ApiError;
use crate::links::BasePath;
use crate::AppState;

/// The listing name an interrupt-list cursor is bound to.
const LISTING: &str = "interrupts";

/// The statuses a run can hold a pending interrupt in (every non-terminal one).
const OPEN_STATUSES: [RunStatus; 7] = [
    RunStatus::WaitingApproval,
    RunStatus::WaitingInput,
    RunStatus::WaitingExternal,
    RunStatus::Running,
    RunStatus::Paused,
    RunStatus::Pending,
    RunStatus::Cancelling,
];

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

/// `GET /v1/interrupts`.
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
    let mut runs = pending_runs(&state, caller.tenant(), &filter, after, limit + 1).await?;
    let more = runs.len() > limit;
    runs.truncate(limit);
    let now = state.services.clock.now();
    let signer = signer(&state);
    let interrupts: Vec<Value> = runs
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
    if let Some(last) = runs.last().filter(|_| more) {
        let after = RunPosition { created_at: last.created_at, run_id: last.run_id.clone() };
        body["nextCursor"] =
            json!(cursor::encode(&state.cursor_key[..], LISTING, caller.tenant(), Position { filter, after }));
    }
    Ok(Json(body))
}

/// Whether the snapshot of `run` shows a pending interrupt.
fn waits(run: &RunState) -> bool {
    !run.status.is_terminal() && run.pending_interrupt().is_some()
}

/// The sort key of the run listing (newest first): larger is earlier in the list.
fn key(run: &RunState) -> (u64, &str) {
    (run.created_at, run.run_id.as_str())
}

/// Up to `limit` runs of `tenant` after `after` (newest first) whose snapshot shows a pending
/// interrupt.
async fn pending_runs(
    state: &AppState,
    tenant: &str,
    filter: &Filter,
    after: Option<RunPosition>,
    limit: usize,
) -> Result<Vec<RunState>, ApiError> {
    if let Some(run_id) = &filter.run_id {
        // One run: found (in this tenant, after the cursor, of the workflow) and waiting, or none.
        let run = match state.services.get_run_summary(tenant, run_id).await {
            Ok(run) => run,
            Err(ServiceError::NotFound { .. }) => return Ok(Vec::new()),
            Err(error) => return Err(error.into()),
        };
        let in_page = after.as_ref().is_none_or(|after| key(&run) < (after.created_at, after.run_id.as_str()));
        let of_workflow = filter.workflow_id.as_ref().is_none_or(|id| *id == run.workflow.id);
        return Ok(if in_page && of_workflow && waits(&run) { vec![run] } else { Vec::new() });
    }
    let mut sources: Vec<Source> = OPEN_STATUSES
        .iter()
        .map(|status| Source {
            filter: RunFilter { workflow_id: filter.workflow_id.clone(), status: Some(*status) },
            after: after.clone(),
            buffered: VecDeque::new(),
            exhausted: false,
        })
        .collect();
    let batch = limit.max(1);
    let mut found = Vec::new();
    while found.len() < limit {
        for source in sources.iter_mut().filter(|source| source.buffered.is_empty() && !source.exhausted) {
            source.refill(state, tenant, batch).await?;
        }
        // The newest head among the listings is the next run of the merged listing.
        let Some(next) = sources
            .iter_mut()
            .filter(|source| !source.buffered.is_empty())
            .max_by(|a, b| key(&a.buffered[0]).cmp(&key(&b.buffered[0])))
        else {
            break;
        };
        let run = next.buffered.pop_front().expect("a non-empty buffer");
        if waits(&run) {
            found.push(run);
        }
    }
    Ok(found)
}

/// One status's run listing, read a batch at a time.
struct Source {
    filter: RunFilter,
    after: Option<RunPosition>,
    buffered: VecDeque<RunState>,
    exhausted: bool,
}

impl Source {
    async fn refill(&mut self, state: &AppState, tenant: &str, batch: usize) -> Result<(), ApiError> {
        let runs = state.services.list_runs(tenant, &self.filter, self.after.as_ref(), batch).await?;
        self.exhausted = runs.len() < batch;
        if let Some(last) = runs.last() {
            self.after = Some(RunPosition { created_at: last.created_at, run_id: last.run_id.clone() });
        }
        self.buffered.extend(runs);
        Ok(())
    }
}
