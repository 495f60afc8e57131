//! The use cases, written once over the ports: create a run, read it and its events, cancel
//! it, and advance it by one task. HTTP handlers and queue workers are thin callers.

mod blobs;
mod bus;
mod children;
mod commit;
mod control;
mod create;
mod diff;
mod fork;
mod idempotency;
mod inline;
mod rerun;
mod retention;
mod schedules;
mod seam_dispatch;
mod seam_fanout;
mod seams;
mod seams_usage;
mod triggers;
mod webhooks;
mod workflows;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::engine::{self, Input, Outcome, Verdict};
use crate::error::ServiceError;
use crate::event::RunEvent;
use crate::limits::HostLimits;
use crate::model::{Bounds, Workflow};
use crate::nodes::NodeRegistry;
use crate::ports::{Clock, EffectSink, IdGenerator, Notifier, RunFilter, RunPosition, Store};
use crate::run::{RunState, RunStatus};

pub use children::{ChildStart, MAX_CHILD_DEPTH};
#[cfg(any(test, feature = "test-util"))]
pub(crate) use create::new_run;
pub use create::{CreateOutcome, IdempotencyKey};
pub use diff::{MAX_EVENTS as MAX_DIFF_EVENTS, MAX_EVENT_DIFFS};
pub use fork::ForkRequest;
pub use idempotency::Begin;
pub use rerun::RerunRequest;
pub use retention::{PruneRequest, DEFAULT_KEEP, EXPIRED_KIND, EXPIRED_MEMORY_MS, MAX_PRUNE_DELETES, MAX_PRUNE_SCAN};
pub use schedules::TickReport;
pub use seam_dispatch::{logical_invocation_id, PerItemRequest, CLAIM_ENDPOINT};
pub use seam_fanout::{FanOutRequest, MAX_SEAM_WORKERS};
pub use seams_usage::UsageRequest;
pub use triggers::{Ingested, TriggerListing, MAX_TRIGGERS_PER_TENANT};
pub use webhooks::{DeliveryOutcome, MAX_WEBHOOKS_PER_TENANT};
pub use workflows::{read_definition_files, DefinitionFiles, ListedWorkflow, LoadReport};

pub use commit::{backoff_ceiling_ms, CommitHooks, NoHooks, BACKOFF_BASE_MS, BACKOFF_CAP_MS, MAX_CONFLICT_RETRIES};

/// The ports and settings the use cases run on.
pub struct Services {
    /// Definitions and runs.
    pub store: Arc<dyn Store>,
    /// Where the effects of a commit are sent.
    pub effects: Arc<dyn EffectSink>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Id generation.
    pub ids: Arc<dyn IdGenerator>,
    /// Commit notifications.
    pub notifier: Arc<dyn Notifier>,
    /// Host limits.
    pub limits: HostLimits,
    /// The node kinds this host runs (its composition root registers the activities).
    pub nodes: Arc<NodeRegistry>,
    /// The test seams are enabled (`OPENWOP_TEST_SEAM_ENABLED`): the capability overlay is
    /// read and honoured.
    pub test_seams: bool,
    /// How external workers are notified of their interrupts (`None`: notify effects are
    /// dropped with a warning; [`Services::with_callbacks`]).
    pub callbacks: Option<Arc<crate::interrupt::callback::Callbacks>>,
    /// How webhooks are delivered (`None`: no subscriptions can be registered and no
    /// deliveries are enqueued; [`Services::with_webhooks`]).
    pub webhooks: Option<Arc<crate::webhook::Webhooks>>,
    /// Trigger subscriptions may bind queues and bus events (`source: queue`; the AWS host,
    /// whose dispatcher receives them; [`Services::with_queue_triggers`]).
    pub queue_triggers: bool,
    /// Where run events are published (`None`: nowhere; [`Services::with_event_bus`]).
    pub event_bus: Option<Arc<crate::bus::EventBus>>,
    /// How many consecutive steps of a run one commit may hold ([`Services::with_step_chaining`]).
    chain_limit: usize,
    /// Child starts and finished children's notices are carried out in the committing call
    /// ([`Services::with_inline_children`]).
    inline_children: bool,
    compiled: Mutex<HashMap<String, Arc<Workflow>>>,
}

/// The adapters a [`Services`] is built from.
pub struct Ports {
    /// Definitions and runs.
    pub store: Arc<dyn Store>,
    /// Where the effects of a commit are sent.
    pub effects: Arc<dyn EffectSink>,
    /// The clock.
    pub clock: Arc<dyn Clock>,
    /// Id generation.
    pub ids: Arc<dyn IdGenerator>,
    /// Commit notifications.
    pub notifier: Arc<dyn Notifier>,
}

/// An engine decision about a stored run, ready to commit.
#[derive(Debug)]
pub struct Decision {
    /// The run after the input (unchanged unless applied).
    pub run: RunState,
    /// The version it was read at.
    pub expected_version: u64,
    /// The engine's outcome.
    pub outcome: Outcome,
    /// The run's status before the input.
    pub previous_status: RunStatus,
    /// The run as it was read, kept for interrupt resolutions (which report the occurrence
    /// they were about); `None` for other inputs.
    pub before: Option<RunState>,
}

impl Decision {
    /// Logs the status change this decision made, if any (one `info` line: run id, workflow,
    /// from and to). Call after its commit succeeded.
    pub fn log_transition(&self) {
        if self.run.status != self.previous_status {
            tracing::info!(
                run_id = %self.run.run_id,
                workflow = %self.run.workflow.id,
                from = %self.previous_status.as_str(),
                to = %self.run.status.as_str(),
                "run status changed"
            );
        }
    }
}

impl Services {
    /// Wires the use cases to their ports.
    pub fn new(ports: Ports, limits: HostLimits) -> Self {
        let Ports { store, effects, clock, ids, notifier } = ports;
        let nodes = Arc::new(NodeRegistry::new());
        let compiled = Mutex::new(HashMap::new());
        Self {
            store,
            effects,
            clock,
            ids,
            notifier,
            limits,
            nodes,
            test_seams: false,
            callbacks: None,
            webhooks: None,
            event_bus: None,
            queue_triggers: false,
            chain_limit: 0,
            inline_children: false,
            compiled,
        }
    }

    /// The same services notifying external workers through `callbacks`.
    pub fn with_callbacks(mut self, callbacks: crate::interrupt::callback::Callbacks) -> Self {
        self.callbacks = Some(Arc::new(callbacks));
        self
    }

    /// The same services running the node kinds of `nodes`.
    pub fn with_nodes(mut self, nodes: NodeRegistry) -> Self {
        self.nodes = Arc::new(nodes);
        self
    }

    /// The ceilings a registration is checked against.
    pub fn bounds(&self) -> Bounds {
        Bounds { max_duration_ms: self.limits.max_run_duration_ms, max_attempt_ms: self.limits.max_attempt_ms }
    }

    /// Compiles `document` for this host (its node kinds and the largest bounds: a stored
    /// definition stays readable when the host's ceilings are lowered).
    pub fn compile(&self, document: serde_json::Value) -> Result<Workflow, crate::DefinitionError> {
        Workflow::compile_with(document, &self.nodes, Bounds::default())
    }

    /// The same services with the test seams enabled or not.
    pub fn with_test_seams(mut self, enabled: bool) -> Self {
        self.test_seams = enabled;
        self
    }

    /// The run `run_id` if it belongs to `tenant` (another tenant's run reads as not found).
    /// A run past its retention reads as gone too (see [`crate::retention`]).
    pub async fn get_run(&self, tenant: &str, run_id: &str) -> Result<RunState, ServiceError> {
        match self.store.load_run(run_id).await? {
            Some(run) if run.tenant == tenant && run.expired_at(self.clock.now()).is_none() => Ok(run),
            _ => Err(ServiceError::NotFound { what: "run" }),
        }
    }

    /// [`Services::get_run`] as a snapshot shows it ([`crate::ports::RunStore::load_run_summary`]:
    /// the records of nodes that are not active may be left out).
    pub async fn get_run_summary(&self, tenant: &str, run_id: &str) -> Result<RunState, ServiceError> {
        match self.store.load_run_summary(run_id).await? {
            Some(run) if run.tenant == tenant && run.expired_at(self.clock.now()).is_none() => Ok(run),
            _ => Err(ServiceError::NotFound { what: "run" }),
        }
    }

    /// The tenant's runs, newest first, those past their retention left out (the store is
    /// read on until `limit` are found or it has no more, so a page is full unless it is the
    /// last).
    pub async fn list_runs(
        &self,
        tenant: &str,
        filter: &RunFilter,
        after: Option<&RunPosition>,
        limit: usize,
    ) -> Result<Vec<RunState>, ServiceError> {
        let now = self.clock.now();
        let mut runs = Vec::with_capacity(limit);
        let mut position = after.cloned();
        loop {
            let page = self.store.list_runs(tenant, filter, position.as_ref(), limit).await?;
            let full = page.len() == limit;
            position = page.last().map(|run| RunPosition { created_at: run.created_at, run_id: run.run_id.clone() });
            runs.extend(page.into_iter().filter(|run| run.expired_at(now).is_none()));
            if runs.len() >= limit || !full {
                runs.truncate(limit);
                return Ok(runs);
            }
        }
    }

    /// The run and its events after `after`.
    pub async fn events(
        &self,
        tenant: &str,
        run_id: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<(RunState, Vec<RunEvent>), ServiceError> {
        let run = self.get_run_summary(tenant, run_id).await?;
        // The state is read before the events, so a terminal status is never shown without
        // its terminal event.
        let events = self.store.events_after(run_id, after, limit).await?;
        Ok((run, events))
    }

    /// Cancels a run. A parked run is cancelled in this call; a run with a step in flight
    /// becomes `cancelling` and that step finishes the cancel. Cancelling a terminal run
    /// changes nothing; the flag returned says the run was already terminal.
    pub async fn cancel_run(
        &self,
        tenant: &str,
        run_id: &str,
        reason: Option<String>,
    ) -> Result<(RunState, bool), ServiceError> {
        let current = self.get_run(tenant, run_id).await?;
        if current.status.is_terminal() {
            return Ok((current, true));
        }
        let input = Input::Cancel { reason };
        let decision = self.advance(Some(tenant), run_id, input, &NoHooks).await?;
        let decision = decision.ok_or(ServiceError::NotFound { what: "run" })?;
        let terminal = decision.outcome.verdict != Verdict::Applied && decision.run.status.is_terminal();
        Ok((decision.run, terminal))
    }

    /// Loads the run and its pinned workflow and applies `input` at the current time.
    /// `None` when the run does not exist.
    /// (A vote carries the voter's earlier vote, read by key after the run.) Nothing is
    /// written: [`Services::advance`] is the loop that commits.
    pub async fn decide(&self, run_id: &str, input: Input) -> Result<Option<Decision>, ServiceError> {
        let Some(mut run) = self.store.take_run(run_id).await? else { return Ok(None) };
        self.hydrate(&mut run).await?;
        let workflow = self.pinned_workflow(&run).await?;
        let expected_version = run.version;
        let previous_status = run.status;
        let before = matches!(input, Input::Resolve(_)).then(|| run.clone());
        let input = self.with_prior_vote(&run, input).await?;
        let mut outcome = engine::apply(&workflow, &mut run, input, self.clock.now());
        if outcome.verdict == Verdict::Applied {
            self.chain_steps(&workflow, &mut run, &mut outcome);
            run.version = expected_version + 1;
        }
        Ok(Some(Decision { run, expected_version, outcome, previous_status, before }))
    }

    /// On a host that allows it ([`Services::with_step_chaining`]), applies the step an
    /// applied outcome issues right away, and the one that step issues, … up to the limit,
    /// so consecutive steps of a run commit together (their events become visible at that
    /// commit). Only a lone step is followed — an outcome issuing several steps (parallel
    /// branches) or none (a timer, an activity, a child) ends the chain, and so does a step
    /// the engine does not apply (it stays an effect and runs as a task).
    fn chain_steps(&self, workflow: &Workflow, run: &mut RunState, outcome: &mut Outcome) {
        for _ in 0..self.chain_limit {
            let now = self.clock.now();
            let mut steps =
                outcome.effects.iter().enumerate().filter(|(_, e)| matches!(e, engine::Effect::Step { .. }));
            let (Some((position, engine::Effect::Step { node_id, activation, due_at })), None) =
                (steps.next(), steps.next())
            else {
                return;
            };
            if *due_at > now {
                return;
            }
            let input = Input::Step { node_id: node_id.clone(), activation: *activation };
            let next = engine::apply(workflow, run, input, now);
            if next.verdict != Verdict::Applied {
                return;
            }
            outcome.effects.remove(position);
            outcome.events.extend(next.events);
            outcome.effects.extend(next.effects);
            outcome.changes.merge(next.changes);
        }
    }

    /// The same services applying up to `limit` consecutive steps of a run before one commit
    /// (the embedded host; a serverless host keeps one invocation per step: `0`).
    pub fn with_step_chaining(mut self, limit: usize) -> Self {
        self.chain_limit = limit;
        self
    }

    /// Sends committed effects and notifies waiters. A failed send loses nothing: the effects
    /// are in the store's outbox, where redelivery or the reconciler finds them (the sink
    /// enlists a page whose send failed for the reconciler, see `EffectSink::send_committed`).
    pub async fn send_effects(&self, run_id: &str, version: u64, effects: &[crate::engine::Effect]) {
        self.send_effects_except(run_id, version, effects, &[]).await;
    }

    /// [`Services::send_effects`] for a commit whose effects `carried_out` this call already
    /// carried out: only the others are sent (the commit is recorded as sent as a whole).
    async fn send_effects_except(
        &self,
        run_id: &str,
        version: u64,
        effects: &[crate::engine::Effect],
        carried_out: &[crate::engine::Effect],
    ) {
        if !effects.is_empty() {
            let sent = if carried_out.is_empty() {
                self.effects.send_committed(run_id, version, effects).await
            } else {
                self.effects.send_committed_except(run_id, version, effects, carried_out).await
            };
            if let Err(error) = sent {
                tracing::error!(run_id, %error, "sending effects failed and no repair is enlisted");
            }
        }
        self.notifier.committed(run_id);
    }

    /// The compiled workflow a run is pinned to.
    pub async fn pinned_workflow(&self, run: &RunState) -> Result<Arc<Workflow>, ServiceError> {
        let pinned = &run.workflow;
        if let Some(workflow) = self.compiled_by_hash(&pinned.content_hash) {
            return Ok(workflow);
        }
        let stored = self
            .store
            .workflow_version(&pinned.namespace, &pinned.id, &pinned.content_hash)
            .await?
            .ok_or(ServiceError::Internal)?;
        self.compile_cached(stored.document)
    }

    /// The compiled workflow of content hash `hash`, if compiled already.
    fn compiled_by_hash(&self, hash: &str) -> Option<Arc<Workflow>> {
        self.compiled.lock().expect("cache lock").get(hash).cloned()
    }

    fn compile_cached(&self, document: serde_json::Value) -> Result<Arc<Workflow>, ServiceError> {
        let hash = crate::model::content_hash(&document);
        if let Some(workflow) = self.compiled.lock().expect("cache lock").get(&hash) {
            return Ok(workflow.clone());
        }
        // A stored definition that today's rules refuse (stored before a rule existed) is
        // answered as what it is, a validation error naming the rule, not an outage.
        let workflow = Arc::new(self.compile(document).map_err(ServiceError::from)?);
        self.compiled.lock().expect("cache lock").insert(hash, workflow.clone());
        Ok(workflow)
    }
}
