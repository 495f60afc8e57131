//! Parallel fan-out: one node, many child runs, a sliding window and a join. It serves
//! `core.dispatch` with `fanOutPolicy: parallel` (RFC 0118) and `vendor.trellis.forEach`.
//!
//! - **Slots.** Child `k` of node `n` is a record of its own in the run's nodes, keyed
//!   `n#k` ([`slot_key`]): its child run id, status and, once it ended, its merge position
//!   and what the join needs of it (the mapped outputs, the error). The child run records
//!   `n#k` as its `parentNodeId`, so its notices come back to the slot, and everything the
//!   single-child path does holds per slot: the creation check (`Services::start_child`), the
//!   repair of a lost start ([`super::outstanding_effects`]), the cancel cascade, the mirror
//!   of a waiting child, the deduplication of a redelivered notice (a slot that no longer
//!   waits ignores it). The node keeps only counters ([`FanOutProgress`]), so no record grows
//!   with the number of children, and a commit touches the node and the slots it changes.
//! - **Window.** Slots are created as others free: at most `width = min(maxConcurrency,
//!   host ceiling)` children run at once and one commit starts at most `width` of them.
//! - **Join.** After each child ends, the join policy is folded over the counters (O(1));
//!   once it is met or cannot be, the children still running are cancelled (the losers),
//!   the slots are read once in merge order (O(children)), the outputs are built and the
//!   slot records removed.
//!
//! Join fold (RFC 0118 / `node-packs.md`): under `fail-fast` a failed or cancelled child
//! fails the join; otherwise `wait-all` is met when every child ended, `quorum` when `n`
//! completed, `first` when one completed, `race` when one ended; a mode that can no longer
//! be met fails. A met join is `partial` when a child failed or was cancelled before it was
//! met (losers cancelled by the join do not count), else `satisfied`.

use serde_json::{json, Map, Value};

use super::orchestration::remember;
use super::progress::Transition;
use crate::event::types;
use crate::nodes::for_each::{ForEachConfig, Items};
use crate::orchestrator::dispatch::{DispatchConfig, JoinMode, JoinPolicy, OnChildFailure};
use crate::orchestrator::{self, Decision};
use crate::run::{parse_slot_key, slot_key, FanOutProgress, NodeStatus, RunError, RunStatus, SLOT_SEPARATOR};

/// Most children one fan-out may have (a decision's workers, a loop's items): what a join's
/// outputs for that many children keep within [`MAX_JOIN_BYTES`] and one DynamoDB item.
pub const MAX_CHILDREN: u32 = 1_000;
/// The most a join may write as a loop's results variable (half of it as a dispatch's
/// outputs, which a commit carries twice), serialized; more fails the node with
/// `fan_out_result_too_large` rather than a commit the store refuses.
pub const MAX_JOIN_BYTES: usize = 256 * 1024;
/// Most children of a fan-out running at once (`dispatch.maxFanOut`).
pub const MAX_WIDTH: u32 = 64;
/// Most child runs one run may start, of every kind, unless `settings.maxChildRuns` says
/// otherwise.
pub const DEFAULT_MAX_CHILD_RUNS: u32 = 10_000;
/// The highest `settings.maxChildRuns` a workflow may set.
pub const MAX_CHILD_RUNS_CEILING: u32 = 100_000;

/// `core.dispatch.fanOut`: a parallel dispatch begins.
pub const DISPATCH_FAN_OUT: &str = "core.dispatch.fanOut";
/// `core.dispatch.join`: its join was folded.
pub const DISPATCH_JOIN: &str = "core.dispatch.join";
/// A `vendor.trellis.forEach` began (debug mode).
pub const LOOP_STARTED: &str = "trellis.loop.started";
/// One of its items started (debug mode).
pub const LOOP_ITEM_STARTED: &str = "trellis.loop.itemStarted";
/// One of its items ended (debug mode).
pub const LOOP_ITEM_FINISHED: &str = "trellis.loop.itemFinished";
/// It joined (debug mode).
pub const LOOP_FINISHED: &str = "trellis.loop.finished";

/// The reason a join's losers are cancelled with (their `run.cancelled` says so; no cascade).
pub const JOIN_DECIDED: &str = "join-decided";
/// A later decision replaced the one a parallel dispatch acts on.
pub const DECISION_SUPERSEDED: &str = "decision_superseded";
/// Child errors that fail a join whatever its failure policy: the child could not be created
/// (a worker id that names no workflow, nesting too deep), so no policy can absorb it.
const REFUSALS: [&str; 2] = ["unknown_child_workflow", "subworkflow_depth_exceeded"];

/// The suffix of the record holding a loop's items, read from a variable when it started.
const ITEMS_RECORD: &str = "items";

/// How a fan-out's join came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JoinOutcome {
    /// Met, every child completed.
    Satisfied,
    /// Met, but a child failed or was cancelled first.
    Partial,
    /// Not met.
    Failed,
}

impl JoinOutcome {
    fn as_str(self) -> &'static str {
        match self {
            Self::Satisfied => "satisfied",
            Self::Partial => "partial",
            Self::Failed => "failed",
        }
    }
}

/// Folds `policy` over `progress`: `None` while the join is open.
pub(super) fn fold(progress: &FanOutProgress, policy: JoinPolicy) -> Option<JoinOutcome> {
    let bad = progress.failed + progress.cancelled;
    if policy.on_child_failure == OnChildFailure::FailFast && bad > 0 {
        return Some(JoinOutcome::Failed);
    }
    let ended = progress.ended();
    let remaining = progress.total - ended;
    let met = match policy.mode {
        JoinMode::WaitAll => (ended == progress.total).then_some(true),
        JoinMode::Quorum(quorum) => {
            if progress.completed >= quorum {
                Some(true)
            } else {
                (progress.completed + remaining < quorum).then_some(false)
            }
        }
        JoinMode::First => {
            if progress.completed >= 1 {
                Some(true)
            } else {
                (ended == progress.total).then_some(false)
            }
        }
        JoinMode::Race => (ended >= 1).then_some(true),
    }?;
    Some(match (met, bad) {
        (false, _) => JoinOutcome::Failed,
        (true, 0) => JoinOutcome::Satisfied,
        (true, _) => JoinOutcome::Partial,
    })
}

/// A slot as the join reads it.
struct Ended {
    index: u32,
    child_run_id: String,
    workflow_id: String,
    status: RunStatus,
    merge: u32,
    outputs: Map<String, Value>,
    error: Option<RunError>,
}

impl Transition<'_> {
    /// `settings.maxChildRuns` of the run's workflow.
    fn max_child_runs(&self) -> u32 {
        self.workflow
            .definition
            .settings
            .get("maxChildRuns")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(DEFAULT_MAX_CHILD_RUNS)
    }

    /// `settings.maxConcurrentChildren` of the run's workflow: the ceiling of every
    /// fan-out's width (at most [`MAX_WIDTH`]).
    fn width_ceiling(&self) -> u32 {
        self.workflow
            .definition
            .settings
            .get("maxConcurrentChildren")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .map_or(MAX_WIDTH, |n| n.clamp(1, MAX_WIDTH))
    }

    /// Whether `count` more child runs stay within `settings.maxChildRuns`; when not,
    /// `cap.breached` and `node_id` fails with `child_run_limit_exceeded`.
    pub(super) fn admit_children(&mut self, node_id: &str, count: u32) -> bool {
        let limit = self.max_child_runs();
        // The children an open fan-out has yet to start were admitted with it: they count too.
        let reserved: u32 = self
            .state
            .nodes
            .values()
            .filter_map(|node| node.fan_out.as_ref())
            .map(|progress| progress.total.saturating_sub(progress.started))
            .fold(0, u32::saturating_add);
        let observed = self.state.children_started.saturating_add(reserved).saturating_add(count);
        if observed <= limit {
            return true;
        }
        let payload = json!({ "kind": "loop-iterations", "limit": limit, "observed": observed, "nodeId": node_id,
                              "details": { "intent": "child-runs" } });
        self.emit(types::CAP_BREACHED, Some(node_id), payload);
        let message =
            format!("starting {count} more child runs would pass this run's limit of {limit} (settings.maxChildRuns)");
        self.fail_node(node_id, RunError::new("child_run_limit_exceeded", message));
        false
    }

    /// A parallel dispatch of the latest decision's `total` workers (RFC 0118), one or more.
    pub(super) fn dispatch_parallel(&mut self, node_id: &str, config: &DispatchConfig, decision: u64, total: u32) {
        if let JoinMode::Quorum(quorum) = config.join.mode {
            if quorum > total {
                let message = format!("joinPolicy.quorum {quorum} is more than the decision's {total} workers");
                return self.fail_node(node_id, RunError::new("validation_error", message));
            }
        }
        let dispatched = self.state.orchestrator.as_ref().map_or(0, |o| o.dispatched);
        if let Some(cap) = config.iteration_cap.filter(|cap| u64::from(dispatched) + u64::from(total) > *cap) {
            return self.breach_loop_cap(node_id, cap, "dispatch-iterations");
        }
        if !self.admit_children(node_id, total) {
            return;
        }
        let width = config.max_concurrency.unwrap_or(MAX_WIDTH).min(self.width_ceiling()).min(total);
        if total >= 2 {
            // The closed `core.dispatch.fanOut` schema wants two children at least; one worker
            // still joins (and emits `core.dispatch.join`).
            let payload = json!({ "fanOutPolicy": "parallel", "childCount": total, "maxConcurrency": width,
                                  "joinMode": config.join.mode.as_str() });
            self.emit(DISPATCH_FAN_OUT, Some(node_id), payload);
        }
        // Every child counts one dispatch iteration, all at once: the orchestrator's record
        // (which holds the decision and its worker list) changes here and at the join, not per child.
        if let Some(orchestrator) = self.state.orchestrator.as_mut() {
            orchestrator.dispatched += total;
        }
        self.begin_fan_out(node_id, total, width, Some(decision));
    }

    /// A `vendor.trellis.forEach` step: reads its items and begins the loop.
    pub(super) fn for_each(&mut self, node_id: &str) {
        let Some(definition) = self.workflow.node(node_id) else { return };
        let config = match ForEachConfig::parse(&definition.config) {
            Ok(config) => config,
            Err(message) => return self.fail_node(node_id, RunError::new("validation_error", message)),
        };
        let count = match &config.items {
            Items::Literal(count) => *count,
            Items::Variable(name) => match self.state.variables.get(name) {
                Some(Value::Array(items)) => items.len(),
                other => {
                    let found = other.map_or("unset", json_kind);
                    let message = format!("forEach items: run variable `{name}` must hold an array (it is {found})");
                    return self.fail_node(node_id, RunError::new("validation_error", message));
                }
            },
        };
        let Some(total) = u32::try_from(count).ok().filter(|n| *n <= MAX_CHILDREN) else {
            let message = format!("forEach has {count} items; a loop runs at most {MAX_CHILDREN}");
            return self.fail_node(node_id, RunError::new("validation_error", message));
        };
        if total > 0 && !self.admit_children(node_id, total) {
            return;
        }
        if let Items::Variable(name) = &config.items {
            // Read once: the loop runs over the items as they were when it started.
            let items = self.state.variables.get(name).cloned().unwrap_or_else(|| json!([]));
            let record = self.node_mut(&format!("{node_id}{SLOT_SEPARATOR}{ITEMS_RECORD}"));
            record.status = NodeStatus::Completed;
            record.outputs = Map::from_iter([("items".to_owned(), items)]);
        }
        let width = config.max_concurrency.min(self.width_ceiling()).min(total.max(1));
        self.emit(
            LOOP_STARTED,
            Some(node_id),
            json!({ "nodeId": node_id, "itemCount": total, "maxConcurrency": width }),
        );
        if total == 0 {
            self.set_variable(&config.results_variable, json!([]));
            self.remove_record(&format!("{node_id}{SLOT_SEPARATOR}{ITEMS_RECORD}"));
            let outputs = loop_outputs(0, &FanOutProgress { total: 0, width, ..zero() });
            return self.complete_node(node_id, outputs, false);
        }
        self.begin_fan_out(node_id, total, width, None);
    }

    /// Begins a fan-out of `total` children admitted by [`Self::admit_children`].
    fn begin_fan_out(&mut self, node_id: &str, total: u32, width: u32, decision: Option<u64>) {
        let node = self.node_mut(node_id);
        node.status = NodeStatus::WaitingChild;
        node.fan_out = Some(FanOutProgress { total, width, decision, ..zero() });
        // A sequential round before this one leaves its child on the node: the slots hold the
        // children now, and repair or cancel must not reach the old one.
        node.child_run_id = None;
        node.child_workflow_id = None;
        node.child_status = None;
        self.fill_slots(node_id);
    }

    /// Starts children while the window has room and items are left. Nothing starts while
    /// the run is paused or a `drain-current-node` pause is pending (the running children
    /// drain); `:resume` fills again ([`Self::refill_fan_outs`]).
    pub(super) fn fill_slots(&mut self, node_id: &str) {
        if self.state.status == RunStatus::Paused || self.state.status.is_terminal() || self.pause_pending() {
            return;
        }
        // The window is the run's: all fan-outs together run at most the ceiling, so no commit
        // (a cancel, a resume) touches more live slots than one transaction holds. Counted once
        // per fill, then kept up to date as this fill starts children.
        let room = self.width_ceiling().saturating_sub(self.children_running());
        let mut started = 0;
        // A loop's children all run one workflow: resolved once per fill.
        let loop_workflow = if self.is_dispatch(node_id) {
            None
        } else {
            self.workflow
                .node(node_id)
                .and_then(|node| node.config.get("workflowId"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        };
        loop {
            let Some(progress) = self.state.nodes.get(node_id).and_then(|node| node.fan_out.clone()) else { return };
            if progress.running >= progress.width || progress.started >= progress.total {
                return;
            }
            if started >= room || !self.start_slot(node_id, progress, loop_workflow.as_deref()) {
                return;
            }
            started += 1;
        }
    }

    /// Children running now, over all of the run's fan-outs.
    fn children_running(&self) -> u32 {
        self.state.nodes.values().filter_map(|node| node.fan_out.as_ref()).map(|progress| progress.running).sum()
    }

    /// Fills every fan-out whose window has room and whose children are not all started: on
    /// `:resume` (held by the pause) and whenever a child of any fan-out ended (the run-wide
    /// window freed a place). Found from the nodes holding a fan-out.
    pub(super) fn refill_fan_outs(&mut self) {
        let open: Vec<String> = self
            .state
            .nodes
            .iter()
            .filter(|(_, node)| node.fan_out.as_ref().is_some_and(|p| p.running < p.width && p.started < p.total))
            .map(|(node_id, _)| node_id.clone())
            .collect();
        for node_id in open {
            self.fill_slots(&node_id);
        }
    }

    /// Cancels what is left of `node_id`'s fan-out, which fails by another way than its own
    /// join: the running children get a `CancelChild`, every slot record and the loop's items
    /// are removed and the node holds no fan-out any more (nor its reservation of child runs).
    pub(super) fn abort_fan_out(&mut self, node_id: &str) {
        let Some(progress) = self.state.nodes.get(node_id).and_then(|node| node.fan_out.clone()) else { return };
        let now = self.now;
        for index in 0..progress.started {
            let key = slot_key(node_id, index);
            let running = self
                .state
                .nodes
                .get(&key)
                .filter(|slot| slot.status == NodeStatus::WaitingChild)
                .and_then(|slot| slot.child_run_id.clone());
            if let Some(child_run_id) = running {
                self.effects.push(super::Effect::CancelChild { child_run_id, reason: None, due_at: now });
            }
            self.remove_record(&key);
        }
        self.remove_record(&format!("{node_id}{SLOT_SEPARATOR}{ITEMS_RECORD}"));
        self.node_mut(node_id).fan_out = None;
    }

    /// `decision_superseded` when `node_id` is a parallel dispatch and the run's latest
    /// decision is not the one its fan-out acts on (its workers and mappings are gone).
    fn superseded(&self, node_id: &str, progress: &FanOutProgress) -> Option<RunError> {
        let acting = progress.decision?;
        let latest = self.state.orchestrator.as_ref().and_then(|o| o.latest.as_ref()).map(|d| d.sequence);
        (latest != Some(acting)).then(|| {
            let mut error = RunError::new(
                DECISION_SUPERSEDED,
                format!("`{node_id}` fans out decision #{acting}, and a later decision replaced it; its children were cancelled"),
            );
            error.details = Some(json!({ "decision": acting, "latestDecision": latest }));
            error
        })
    }

    /// Starts the next child; `false` when its workflow cannot be told (the decision was
    /// superseded or the config is gone), and the node has failed.
    fn start_slot(&mut self, node_id: &str, mut progress: FanOutProgress, loop_workflow: Option<&str>) -> bool {
        let index = progress.started;
        if let Some(error) = self.superseded(node_id, &progress) {
            self.fail_node(node_id, error);
            return false;
        }
        let workflow_id = match loop_workflow {
            Some(workflow_id) => Some(workflow_id.to_owned()),
            None => self.slot_workflow(node_id, index),
        };
        let Some(workflow_id) = workflow_id else {
            let error =
                RunError::new("internal_error", format!("fan-out child {index} of `{node_id}` has no workflow"));
            self.fail_node(node_id, error);
            return false;
        };
        let run_id = self.state.run_id.clone();
        let now = self.now;
        let activation = self.state.nodes.get(node_id).map_or(0, |node| node.activation);
        let child_run_id = super::child_run_id(&run_id, node_id, activation, Some(index as usize));
        let key = slot_key(node_id, index);
        let slot = self.node_mut(&key);
        slot.status = NodeStatus::WaitingChild;
        slot.activation = activation;
        slot.started_at = Some(now);
        slot.child_run_id = Some(child_run_id.clone());
        slot.child_workflow_id = Some(workflow_id.clone());
        slot.child_status = Some(RunStatus::Pending);
        progress.started += 1;
        progress.running += 1;
        self.node_mut(node_id).fan_out = Some(progress.clone());
        self.state.children_started += 1;
        if progress.decision.is_some() {
            let payload =
                json!({ "childRunId": child_run_id, "childWorkflowId": workflow_id, "childStatus": "pending" });
            self.emit(types::NODE_DISPATCHED, Some(node_id), payload);
        } else {
            self.emit(
                LOOP_ITEM_STARTED,
                Some(node_id),
                json!({ "nodeId": node_id, "index": index, "childRunId": child_run_id }),
            );
        }
        self.effects.push(super::Effect::StartChild {
            node_id: key,
            activation,
            child_run_id,
            workflow_id,
            due_at: now,
        });
        true
    }

    /// The workflow slot `index` of `node_id` runs.
    fn slot_workflow(&self, node_id: &str, index: u32) -> Option<String> {
        if self.is_dispatch(node_id) {
            let decided = self.state.orchestrator.as_ref()?.latest.as_ref()?;
            let Decision::NextWorker { next_worker_ids, .. } = &decided.decision else { return None };
            return next_worker_ids.get(index as usize).cloned();
        }
        let node = self.workflow.node(node_id)?;
        ForEachConfig::parse(&node.config).ok().map(|config| config.workflow_id)
    }

    /// The join policy of `node_id`'s fan-out.
    fn join_policy(&self, node_id: &str) -> JoinPolicy {
        let Some(node) = self.workflow.node(node_id) else { return JoinPolicy::default() };
        if self.is_dispatch(node_id) {
            return DispatchConfig::parse(&node.config).map(|config| config.join).unwrap_or_default();
        }
        let fail_fast = ForEachConfig::parse(&node.config).is_ok_and(|config| config.fail_fast);
        let on_child_failure = if fail_fast { OnChildFailure::FailFast } else { OnChildFailure::Collect };
        JoinPolicy { mode: JoinMode::WaitAll, on_child_failure }
    }

    /// A slot's child ended (the slot waits for it: checked by the caller). Records it,
    /// then folds the join: open → more children start; met or failed → the join.
    pub(super) fn slot_finished(
        &mut self,
        key: &str,
        child_run_id: &str,
        status: crate::run::RunStatus,
        variables: &Map<String, Value>,
        error: Option<RunError>,
    ) -> super::Verdict {
        let Some((node_id, index)) = parse_slot_key(key) else { return super::Verdict::Stale };
        let node_id = node_id.to_owned();
        let Some(mut progress) = self.state.nodes.get(&node_id).and_then(|node| node.fan_out.clone()) else {
            return super::Verdict::Stale;
        };
        if let Some(superseded) = self.superseded(&node_id, &progress) {
            // The mappings of the decision this child ran for are gone: nothing to harvest.
            self.remove_record(key);
            self.fail_node(&node_id, superseded);
            return super::Verdict::Applied;
        }
        let refused = error.as_ref().is_some_and(is_refusal);
        let outputs =
            if status == RunStatus::Completed { self.slot_outputs(&node_id, index, variables) } else { Map::new() };
        let merge = progress.ended();
        let slot = self.node_mut(key);
        slot.status = match status {
            RunStatus::Completed => NodeStatus::Completed,
            RunStatus::Cancelled => NodeStatus::Cancelled,
            _ => NodeStatus::Failed,
        };
        slot.child_status = Some(status);
        slot.merge = Some(merge);
        slot.outputs = outputs;
        slot.error = (status != RunStatus::Completed).then(|| {
            error.unwrap_or_else(|| RunError::new("child_failed", format!("the child run ended {}", status.as_str())))
        });
        progress.running = progress.running.saturating_sub(1);
        match status {
            RunStatus::Completed => progress.completed += 1,
            RunStatus::Cancelled => progress.cancelled += 1,
            _ => progress.failed += 1,
        }
        if progress.decision.is_none() {
            let payload =
                json!({ "nodeId": node_id, "index": index, "childRunId": child_run_id, "status": status.as_str() });
            self.emit(LOOP_ITEM_FINISHED, Some(&node_id), payload);
        }
        let policy = self.join_policy(&node_id);
        self.node_mut(&node_id).fan_out = Some(progress.clone());
        // A child that could not be created fails the join whatever the failure policy.
        let outcome = if refused { Some(JoinOutcome::Failed) } else { fold(&progress, policy) };
        match outcome {
            None => {}
            Some(outcome) => self.join(&node_id, outcome),
        }
        // The freed places (this child's, or a join's losers') go to whichever of the run's
        // fan-outs has room, this one included.
        self.refill_fan_outs();
        super::Verdict::Applied
    }

    /// What a completed child leaves in its slot: a dispatch worker's output mapping
    /// (`{parentVar: value}`, applied at the join in merge order), a loop item's variables.
    fn slot_outputs(&self, node_id: &str, index: u32, variables: &Map<String, Value>) -> Map<String, Value> {
        let Some(node) = self.workflow.node(node_id) else { return Map::new() };
        if self.is_dispatch(node_id) {
            let (Ok(config), Some(worker)) = (DispatchConfig::parse(&node.config), self.slot_workflow(node_id, index))
            else {
                return Map::new();
            };
            return config
                .output_for(&worker)
                .iter()
                .filter_map(|(parent_var, child_var)| Some((parent_var.clone(), variables.get(child_var)?.clone())))
                .collect();
        }
        match ForEachConfig::parse(&node.config).ok().and_then(|config| config.output_variables) {
            Some(names) => names.iter().filter_map(|name| Some((name.clone(), variables.get(name)?.clone()))).collect(),
            None => variables.clone(),
        }
    }

    /// The join: cancels the losers, reads the slots once, removes them and completes (or
    /// fails) the node.
    fn join(&mut self, node_id: &str, outcome: JoinOutcome) {
        let Some(mut progress) = self.state.nodes.get(node_id).and_then(|node| node.fan_out.clone()) else { return };
        let now = self.now;
        let mut ended = Vec::with_capacity(progress.started as usize);
        let mut losers = Vec::new();
        for index in 0..progress.started {
            let key = slot_key(node_id, index);
            let Some(slot) = self.state.nodes.get(&key).cloned() else { continue };
            let child_run_id = slot.child_run_id.clone().unwrap_or_default();
            let workflow_id = slot.child_workflow_id.clone().unwrap_or_default();
            if slot.status == NodeStatus::WaitingChild {
                // A loser: the join no longer needs it.
                self.effects.push(super::Effect::CancelChild {
                    child_run_id: child_run_id.clone(),
                    reason: Some(JOIN_DECIDED.to_owned()),
                    due_at: now,
                });
                losers.push(Ended {
                    index,
                    child_run_id,
                    workflow_id,
                    status: RunStatus::Cancelled,
                    merge: u32::MAX,
                    outputs: Map::new(),
                    error: Some(RunError::new(
                        "cancelled_by_join",
                        "cancelled: the fan-out's join was decided without it",
                    )),
                });
            } else {
                ended.push(Ended {
                    index,
                    child_run_id,
                    workflow_id,
                    status: slot.child_status.unwrap_or(RunStatus::Failed),
                    merge: slot.merge.unwrap_or(u32::MAX),
                    outputs: slot.outputs,
                    error: slot.error,
                });
            }
            self.remove_record(&key);
        }
        self.remove_record(&format!("{node_id}{SLOT_SEPARATOR}{ITEMS_RECORD}"));
        progress.cancelled += losers.len() as u32;
        progress.running = 0;
        ended.sort_by_key(|child| child.merge);
        ended.extend(losers);
        self.node_mut(node_id).fan_out = None;
        if progress.decision.is_some() {
            self.join_dispatch(node_id, outcome, &progress, ended);
        } else {
            self.join_loop(node_id, outcome, &progress, ended);
        }
    }

    fn join_dispatch(&mut self, node_id: &str, outcome: JoinOutcome, progress: &FanOutProgress, merged: Vec<Ended>) {
        let merge_order: Vec<&str> = merged.iter().map(|child| child.child_run_id.as_str()).collect();
        let payload = json!({ "joinOutcome": outcome.as_str(), "completedCount": progress.completed,
                              "failedCount": progress.failed, "cancelledCount": progress.cancelled,
                              "mergeOrder": merge_order });
        self.emit(DISPATCH_JOIN, Some(node_id), payload);
        let mut children: Vec<&Ended> = merged.iter().collect();
        children.sort_by_key(|child| child.index);
        let listed: Vec<Value> = children.iter().map(|child| child_entry(child)).collect();
        if outcome == JoinOutcome::Failed {
            let mut error = RunError::new(
                "fan_out_join_failed",
                format!(
                    "the parallel join failed: {} of {} children completed, {} failed, {} cancelled",
                    progress.completed, progress.total, progress.failed, progress.cancelled
                ),
            );
            let mut details = json!({ "joinOutcome": "failed", "children": listed });
            if let Some(refusal) = merged.iter().find_map(|child| child.error.as_ref().filter(|e| is_refusal(e))) {
                details["cause"] = json!(refusal);
                error.message = format!("{}; a child could not start: {}", error.message, refusal.message);
            }
            error.details = Some(details);
            return self.fail_node(node_id, error);
        }
        let mut outputs = Map::new();
        outputs.insert("decision".into(), json!("next-worker"));
        outputs.insert("joinOutcome".into(), json!(outcome.as_str()));
        outputs.insert("children".into(), Value::Array(listed));
        // Checked before anything is applied, so a failure route goes on from the variables and
        // history as they were. Half the bound: the outputs ride in the commit twice (on
        // `node.completed` and in the node's record), next to the join event's `mergeOrder`.
        if let Some(error) = too_large(&outputs, MAX_JOIN_BYTES / 2, "the dispatch's outputs (children)") {
            return self.fail_node(node_id, error);
        }
        // Output mappings in merge order: on a collision the child that ended last wins.
        for child in merged.iter().filter(|child| child.status == RunStatus::Completed) {
            for (parent_var, value) in &child.outputs {
                self.set_variable(parent_var, value.clone());
            }
            if let Some(orchestrator) = self.state.orchestrator.as_mut() {
                let outputs = Value::Object(child.outputs.clone());
                let entry =
                    orchestrator::model::worker_entry(&child.workflow_id, &child.child_run_id, "completed", &outputs);
                remember(&mut orchestrator.history, entry);
            }
        }
        self.complete_node(node_id, outputs, false);
    }

    fn join_loop(&mut self, node_id: &str, outcome: JoinOutcome, progress: &FanOutProgress, merged: Vec<Ended>) {
        let Some(config) = self.workflow.node(node_id).and_then(|node| ForEachConfig::parse(&node.config).ok()) else {
            return;
        };
        let mut results = vec![Value::Null; progress.total as usize];
        for (index, result) in results.iter_mut().enumerate() {
            *result = json!({ "index": index, "status": "not-started" });
        }
        let refusal = merged.iter().find(|child| child.error.as_ref().is_some_and(is_refusal));
        let first_failure = refusal
            .or_else(|| merged.iter().find(|child| child.status != RunStatus::Completed && child.merge != u32::MAX));
        let failure = first_failure.map(|child| (child.index, child.child_run_id.clone(), child.error.clone()));
        for child in merged {
            let mut result = json!({ "index": child.index, "childRunId": child.child_run_id,
                                     "status": child.status.as_str() });
            match child.error {
                Some(error) if child.status != RunStatus::Completed => result["error"] = json!(error),
                _ => result["outputs"] = Value::Object(child.outputs),
            }
            results[child.index as usize] = result;
        }
        let results = Value::Array(results);
        if let Some(error) =
            too_large(&results, MAX_JOIN_BYTES, "the loop's results (narrow them with outputVariables)")
        {
            return self.fail_node(node_id, error);
        }
        self.set_variable(&config.results_variable, results);
        let payload = json!({ "nodeId": node_id, "outcome": outcome.as_str(), "completedCount": progress.completed,
                              "failedCount": progress.failed, "cancelledCount": progress.cancelled });
        self.emit(LOOP_FINISHED, Some(node_id), payload);
        if outcome == JoinOutcome::Failed {
            let (index, child_run_id, cause) = failure.unwrap_or((0, String::new(), None));
            let message = match cause.as_ref().filter(|cause| is_refusal(cause)) {
                Some(refusal) => format!(
                    "forEach item {index} could not start ({}: {}); the other items were cancelled",
                    refusal.code, refusal.message
                ),
                None => format!(
                    "forEach item {index} did not complete (onItemFailure: fail-fast); the other items were cancelled"
                ),
            };
            let mut error = RunError::new("item_failed", message);
            error.details = Some(json!({ "index": index, "childRunId": child_run_id, "cause": cause }));
            return self.fail_node(node_id, error);
        }
        self.complete_node(node_id, loop_outputs(progress.total, progress), false);
    }

    /// Removes the record `key` (journaled: the store deletes it).
    fn remove_record(&mut self, key: &str) {
        if self.state.nodes.contains_key(key) {
            self.node_mut(key);
            self.state.nodes.remove(key);
        }
    }
}

/// The child inputs a loop item's slot gets: the `inputMapping` projection, the item and
/// its index.
pub(super) fn loop_item_inputs(
    config: &ForEachConfig,
    node_config: &Map<String, Value>,
    state: &crate::run::RunState,
    node_id: &str,
    index: u32,
) -> Map<String, Value> {
    let mut inputs = Map::new();
    for (child_var, parent_var) in &config.input_mapping {
        if let Some(value) = state.variables.get(parent_var) {
            inputs.insert(child_var.clone(), value.clone());
        }
    }
    let item = match &config.items {
        Items::Literal(_) => node_config.get("items").and_then(|items| items.get(index as usize)).cloned(),
        Items::Variable(_) => state
            .nodes
            .get(&format!("{node_id}{SLOT_SEPARATOR}{ITEMS_RECORD}"))
            .and_then(|record| record.outputs.get("items"))
            .and_then(|items| items.get(index as usize))
            .cloned(),
    };
    inputs.insert(config.item_variable.clone(), item.unwrap_or(Value::Null));
    inputs.insert(config.index_variable.clone(), json!(index));
    inputs
}

/// Whether a node record is a fan-out's (a slot or a loop's items), not a workflow node's.
pub fn is_fan_out_record(key: &str) -> bool {
    key.contains(SLOT_SEPARATOR)
}

/// Whether a child's error says it could not be created (see [`REFUSALS`]).
fn is_refusal(error: &RunError) -> bool {
    REFUSALS.contains(&error.code.as_str())
}

/// `fan_out_result_too_large` when `value` serializes to more than `limit` bytes.
fn too_large(value: &impl serde::Serialize, limit: usize, what: &str) -> Option<RunError> {
    let bytes = serde_json::to_vec(value).map_or(usize::MAX, |encoded| encoded.len());
    (bytes > limit).then(|| {
        let mut error = RunError::new(
            "fan_out_result_too_large",
            format!("{what} would take {bytes} bytes; a join writes at most {limit}"),
        );
        error.details = Some(json!({ "bytes": bytes, "limit": limit }));
        error
    })
}

fn child_entry(child: &Ended) -> Value {
    let mut entry = json!({ "workflowId": child.workflow_id, "childRunId": child.child_run_id,
                            "childStatus": child.status.as_str() });
    if let Some(error) = child.error.as_ref().filter(|_| child.status != RunStatus::Completed) {
        entry["error"] = json!(error);
    }
    entry
}

fn loop_outputs(total: u32, progress: &FanOutProgress) -> Map<String, Value> {
    let mut outputs = Map::new();
    outputs.insert("itemCount".into(), json!(total));
    outputs.insert("completedCount".into(), json!(progress.completed));
    outputs.insert("failedCount".into(), json!(progress.failed));
    outputs.insert("cancelledCount".into(), json!(progress.cancelled));
    outputs
}

fn zero() -> FanOutProgress {
    FanOutProgress { total: 0, width: 0, started: 0, running: 0, completed: 0, failed: 0, cancelled: 0, decision: None }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
