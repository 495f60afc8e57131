//! Executing one activity attempt: the worker reads the attempt the engine asked for
//! ([`trellis_core::engine::activity_call`]; a superseded attempt is not executed), runs the
//! registered executor bounded by the attempt's budget (plus a grace) and, when the node
//! asks for one, a heartbeat watchdog, then hands the outcome back as
//! `Input::ActivityFinished` for the one commit loop. An attempt of a fork resolves the
//! source's recorded outcome instead, where [`Services::replayed_attempt`] says so, and a
//! rerun's cacheable first attempt the source's result, where [`Services::cached_result`]
//! finds one. Progress reports are committed as
//! `Input::ActivityProgress` as they come. Executors never touch the store.
//!
//! Crash point `after-activity`: the executor returned and nothing is committed yet — the
//! task is redelivered and the attempt runs again (at least once, with the same
//! `Idempotency-Key`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tracing::{debug, warn};
use trellis_core::activity::policy::{attempt_timeout, heartbeat_timeout};
use trellis_core::activity::{ActivityCall, Progress, ProgressSink};
use trellis_core::engine::{activity_call, Input, Verdict};
use trellis_core::ports::Task;
use trellis_core::service::{NoHooks, Services};
use trellis_core::ServiceError;

use crate::crash::{maybe_crash, CrashPoint};
use crate::step::TaskContext;

/// How long past its budget an attempt may run before the worker gives up on it (the
/// executor's own timeout should fire first).
pub const GRACE_MS: u64 = 1_000;
/// How much longer than the attempt's budget a locally claimed `Execute` task stays leased.
pub const LEASE_MARGIN_MS: u64 = 5_000;

/// The attempt an `Execute` task asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempt<'a> {
    pub(crate) node_id: &'a str,
    pub(crate) activation: u32,
    pub(crate) attempt: u32,
}

/// Runs the attempt if it is still the node's current one; returns the input to commit, or
/// `None` when there is nothing to do (superseded, finished, run gone).
pub(crate) async fn execute(
    services: &Services,
    task: &Task,
    attempt: Attempt<'_>,
    context: &TaskContext,
) -> Result<Option<Input>, ServiceError> {
    let Some(mut run) = services.store.take_run(&task.run_id).await? else { return Ok(None) };
    services.hydrate(&mut run).await?;
    let workflow = services.pinned_workflow(&run).await;
    let now = services.clock.now();
    let call = workflow
        .as_ref()
        .ok()
        .and_then(|workflow| activity_call(workflow, &run, attempt.node_id, attempt.activation, attempt.attempt, now));
    let replay = run.replay.clone();
    let workflow = match workflow {
        Ok(workflow) => workflow,
        Err(error) => {
            services.store.retain_run(run);
            return Err(error);
        }
    };
    let Some(mut call) = call else {
        services.store.retain_run(run);
        debug!(run_id = %task.run_id, task = %task.id, "attempt superseded or finished; not executing it");
        return Ok(None);
    };
    let Some(compiled) = workflow.activity(attempt.node_id) else {
        services.store.retain_run(run);
        return Ok(None);
    };
    // A rerun's cacheable activity: the source's result under the same key, when it has one.
    let cached = match &run.cache {
        Some(link) if compiled.cacheable && replay.is_none() => services.cached_result(link, &run, &call).await,
        _ => Ok(None),
    };
    services.store.retain_run(run);
    let cached = cached?;
    // A definition stored under a higher ceiling still runs: its attempts get this host's.
    call.timeout_ms = call.timeout_ms.min(services.limits.max_attempt_ms);
    if let Some(queue) = &context.lease {
        let until = now + call.timeout_ms + GRACE_MS + LEASE_MARGIN_MS;
        if let Err(error) = queue.release(&task.id, until).await {
            warn!(task = %task.id, %error, "extending the attempt's lease failed; it may be redelivered early");
        }
    }
    let sink = WorkerProgress::new(services, &call);
    // A fork's side effects: the source's recorded outcome, or a live call (see `trellis_core::replay`).
    let recorded = match (&replay, cached) {
        (Some(link), _) => services.replayed_attempt(link, &call).await?,
        (None, Some((hit, outputs))) => Some((vec![hit], Ok(outputs))),
        (None, None) => None,
    };
    let result = match recorded {
        Some((progress, result)) => {
            debug!(run_id = %call.run_id, node = %call.node_id, attempt = call.attempt, "attempt resolved from the source run (a fork's record or a rerun's cache)");
            for report in progress {
                sink.report(report).await;
            }
            result
        }
        None => bounded(&call, compiled.kind.execute(&call, &sink), &sink, compiled.timeouts.heartbeat_ms).await,
    };
    // A result larger than the host keeps at all fails its node, clearly and for good.
    let result = match result {
        Ok(outputs) if trellis_core::blob::size(&outputs) > services.limits.max_value_bytes => {
            let (size, limit) = (trellis_core::blob::size(&outputs), services.limits.max_value_bytes);
            let error = trellis_core::activity::ActivityError::new(
                trellis_core::blob::PAYLOAD_TOO_LARGE,
                format!("the node's result is {size} bytes of JSON; a run keeps values of at most {limit}"),
                false,
            )
            .with_details(serde_json::json!({ "bytes": size, "limit": limit }));
            Err(error)
        }
        other => other,
    };
    maybe_crash(context.crash, CrashPoint::AfterActivity);
    if context.simulated.as_ref().is_some_and(|crash| crash.hit(CrashPoint::AfterActivity)) {
        warn!(run_id = %call.run_id, node = %call.node_id, "simulated crash after the activity returned");
        return Err(ServiceError::Unavailable);
    }
    match &result {
        Ok(_) => debug!(run_id = %call.run_id, node = %call.node_id, attempt = call.attempt, "attempt succeeded"),
        Err(error) => {
            debug!(run_id = %call.run_id, node = %call.node_id, attempt = call.attempt, %error, "attempt failed")
        }
    }
    Ok(Some(Input::ActivityFinished {
        node_id: call.node_id,
        activation: call.activation,
        attempt: call.attempt,
        result,
    }))
}

/// The executor's future, bounded by the attempt's budget plus [`GRACE_MS`] and, with
/// `heartbeat_ms`, by the longest silence between progress reports.
async fn bounded<F>(
    call: &ActivityCall,
    run: F,
    sink: &WorkerProgress<'_>,
    heartbeat_ms: Option<u64>,
) -> trellis_core::activity::ActivityResult
where
    F: std::future::Future<Output = trellis_core::activity::ActivityResult>,
{
    tokio::pin!(run);
    let deadline = tokio::time::sleep(Duration::from_millis(call.timeout_ms + GRACE_MS));
    tokio::pin!(deadline);
    let check = Duration::from_millis(heartbeat_ms.unwrap_or(u64::MAX / 4).div_ceil(4).max(10));
    loop {
        tokio::select! {
            result = &mut run => return result,
            () = &mut deadline => return Err(attempt_timeout(call.timeout_ms)),
            () = tokio::time::sleep(check), if heartbeat_ms.is_some() => {
                let limit = heartbeat_ms.unwrap_or_default();
                if sink.silent_for() > Duration::from_millis(limit) {
                    return Err(heartbeat_timeout(limit));
                }
            }
        }
    }
}

/// Commits an attempt's progress reports and remembers when the last one came.
struct WorkerProgress<'a> {
    services: &'a Services,
    call: &'a ActivityCall,
    last: Mutex<Instant>,
}

impl<'a> WorkerProgress<'a> {
    fn new(services: &'a Services, call: &'a ActivityCall) -> Self {
        Self { services, call, last: Mutex::new(Instant::now()) }
    }

    fn silent_for(&self) -> Duration {
        self.last.lock().map(|last| last.elapsed()).unwrap_or_default()
    }
}

#[async_trait]
impl ProgressSink for WorkerProgress<'_> {
    async fn report(&self, progress: Progress) -> bool {
        if let Ok(mut last) = self.last.lock() {
            *last = Instant::now();
        }
        let input = Input::ActivityProgress {
            node_id: self.call.node_id.clone(),
            activation: self.call.activation,
            attempt: self.call.attempt,
            progress,
        };
        match self.services.advance(None, &self.call.run_id, input, &NoHooks).await {
            // Applied to a run that goes on: keep going. Ignored (superseded), or the run ended
            // with this very commit (a budget exhausted by the usage reported): stop.
            Ok(Some(decision)) => {
                decision.outcome.verdict == Verdict::Applied
                    && !decision.run.status.is_terminal()
                    && decision.run.status != trellis_core::RunStatus::Cancelling
            }
            Ok(None) => false,
            Err(error) => {
                warn!(run_id = %self.call.run_id, node = %self.call.node_id, %error, "recording progress failed");
                true
            }
        }
    }
}
