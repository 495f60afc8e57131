//! `POST /v1/runs/{runId}:rerun` (`{inputs?, useCache?}`): a new run of a run's pinned
//! workflow version, with its inputs or new ones, owned by the source's owner, whose cacheable
//! activities take the source's completed results when nothing that decides them changed
//! (see [`crate::cache`]); and the lookup an activity attempt of such a run makes
//! ([`Services::cached_result`]).

use serde_json::{json, Map, Value};

use super::create::seed_variables;
use super::Services;
use crate::activity::{ActivityCall, Progress};
use crate::cache::{self, CacheLink};
use crate::error::ServiceError;
use crate::run::{Principal, RunState};

/// Fields a rerun request may carry.
const FIELDS: [&str; 2] = ["inputs", "useCache"];

/// A checked rerun request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RerunRequest {
    /// New inputs (replacing the source's); `None`: the source's.
    pub inputs: Option<Map<String, Value>>,
    /// Whether cacheable activities may take the source's results (default `true`).
    pub use_cache: bool,
}

impl RerunRequest {
    /// Checks a request body (`{}` and no body are a rerun with the source's inputs and the
    /// cache): `400 validation_error` naming the field and the rule.
    pub fn parse(body: &Value) -> Result<Self, ServiceError> {
        let invalid = |field: &str, message: &str| ServiceError::validation(message, json!({ "field": field }));
        let Some(fields) = body.as_object() else {
            return Err(invalid("body", "the request body must be a JSON object"));
        };
        if let Some(unknown) = fields.keys().find(|name| !FIELDS.contains(&name.as_str())) {
            return Err(invalid(unknown, "unknown field: a rerun request has inputs and useCache"));
        }
        let inputs = match fields.get("inputs") {
            None | Some(Value::Null) => None,
            Some(Value::Object(inputs)) => Some(inputs.clone()),
            Some(_) => return Err(invalid("inputs", "inputs must be an object (the run's new inputs)")),
        };
        let use_cache = match fields.get("useCache") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(flag)) => *flag,
            Some(_) => return Err(invalid("useCache", "useCache must be a boolean")),
        };
        Ok(Self { inputs, use_cache })
    }
}

impl Services {
    /// Reruns `principal`'s run `source_run_id` as `request` says and starts the rerun: `404`
    /// for a run the caller cannot see, `410 history_expired` for one past its retention,
    /// `409 run_state_conflict` for one that has not ended (its results are not final), `400`
    /// for inputs the workflow refuses.
    pub async fn rerun_run(
        &self,
        principal: &Principal,
        source_run_id: &str,
        request: RerunRequest,
    ) -> Result<RunState, ServiceError> {
        let now = self.clock.now();
        let mut source = self.source_run(principal, source_run_id, 0).await?;
        if !source.status.is_terminal() {
            return Err(ServiceError::Conflict {
                code: "run_state_conflict",
                message: format!("only an ended run can be rerun; this one is {}", source.status.as_str()),
                details: json!({ "status": source.status.as_str() }),
            });
        }
        let workflow = self.pinned_workflow(&source).await?;
        self.hydrate(&mut source).await?;
        let inputs = match request.inputs {
            Some(inputs) => seed_variables(&workflow, inputs)?,
            None => source.inputs.clone(),
        };
        let configurable = source.configurable.clone();
        let mut run = self.successor(principal, &source, &workflow, inputs, configurable, now)?;
        run.cache = request.use_cache.then(|| CacheLink { source_run_id: source.run_id.clone() });
        let rerun_of = json!({ "runId": source.run_id, "useCache": request.use_cache });
        let run = self
            .start_successor(&workflow, run, now, |payload| {
                payload.insert("rerunOf".into(), rerun_of);
            })
            .await?;
        tracing::info!(run_id = %run.run_id, source = %source.run_id, use_cache = request.use_cache, "run rerun");
        Ok(run)
    }

    /// For a first attempt of a cacheable activity of a rerun (`link`), the source's result
    /// under the attempt's key — the progress to record (`trellis.node.replayed`) and the
    /// outputs — or `None` (a miss: the attempt executes).
    pub async fn cached_result(
        &self,
        link: &CacheLink,
        run: &RunState,
        call: &ActivityCall,
    ) -> Result<Option<(Progress, Map<String, Value>)>, ServiceError> {
        if call.attempt != 0 {
            return Ok(None);
        }
        let key = cache::key(&run.tenant, &run.workflow, &call.node_id, call.activation, &call.request);
        let (events, _) = match self.all_events(&link.source_run_id).await {
            Ok(found) => found,
            Err(ServiceError::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(error),
        };
        let Some(mut hit) = cache::recorded(&events, &call.node_id, &key) else { return Ok(None) };
        self.hydrate_map(&link.source_run_id, &mut hit.outputs).await?;
        let progress = Progress::Replayed {
            source_run_id: link.source_run_id.clone(),
            source_sequence: hit.sequence,
            cache_key: key,
        };
        Ok(Some((progress, hit.outputs)))
    }
}
