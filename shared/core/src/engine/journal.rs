//! What a transition must restore to undo itself: the header fields the engine changes as
//! they were, and the prior value of each node, edge and variable before its first change.
//! The other header fields (the run's identity, pinned workflow, inputs, limits, creation
//! time, caller-supplied fields, parent link, disabled capabilities) are fixed when the run
//! is created and never copied; the debug-build check asserts that no transition changed them.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::interrupt::InterruptRecord;
use crate::orchestrator::OrchestratorState;
use crate::run::{Changes, ChildRun, EdgeStatus, NodeState, PauseState, RunError, RunState, RunStatus};
use crate::timefmt::Millis;

/// What a transition must restore to undo itself.
pub(super) struct Journal {
    /// The changeable header fields before the transition.
    header: Header,
    /// Prior values of the touched nodes (`None`: the node had no record).
    pub(super) nodes: BTreeMap<String, Option<NodeState>>,
    /// Prior resolutions of the touched edges.
    pub(super) edges: BTreeMap<usize, EdgeStatus>,
    /// Prior values of the touched variables (`None`: unset).
    pub(super) variables: BTreeMap<String, Option<Value>>,
    /// The whole state before, to check that every change was journaled (debug builds,
    /// which every test runs).
    #[cfg(debug_assertions)]
    before: RunState,
}

/// The header fields a transition may change.
struct Header {
    status: RunStatus,
    version: u64,
    status_version: u64,
    next_sequence: u64,
    node_executions: u32,
    started_at: Option<Millis>,
    ended_at: Option<Millis>,
    error: Option<RunError>,
    cancel_reason: Option<String>,
    interrupts: Vec<InterruptRecord>,
    pause: Option<PauseState>,
    pending_pause: Option<PauseState>,
    orchestrator: Option<OrchestratorState>,
    child_runs: Vec<ChildRun>,
    children_started: u32,
    outputs: serde_json::Map<String, Value>,
    ai: crate::ai::AiState,
    replay: Option<crate::replay::ReplayLink>,
}

impl Header {
    fn of(state: &RunState) -> Self {
        // Exhaustive, so that a new field of the run is sorted into changeable or fixed.
        let RunState {
            run_id: _,
            tenant: _,
            principal: _,
            workflow: _,
            status,
            version,
            status_version,
            next_sequence,
            inputs: _,
            variables: _,
            nodes: _,
            edges: _,
            node_executions,
            limits: _,
            created_at: _,
            started_at,
            ended_at,
            error,
            cancel_reason,
            configurable: _,
            tags: _,
            metadata: _,
            scope_id: _,
            callback_url: _,
            parent: _,
            interrupts,
            pause,
            pending_pause,
            orchestrator,
            child_runs,
            children_started,
            disabled_capabilities: _,
            outputs,
            mocks_allowed: _,
            ai,
            replay,
            retention_ms: _,
            cache: _,
            blobs: _,
        } = state;
        Self {
            status: *status,
            version: *version,
            status_version: *status_version,
            next_sequence: *next_sequence,
            node_executions: *node_executions,
            started_at: *started_at,
            ended_at: *ended_at,
            error: error.clone(),
            cancel_reason: cancel_reason.clone(),
            interrupts: interrupts.clone(),
            pause: pause.clone(),
            pending_pause: pending_pause.clone(),
            orchestrator: orchestrator.clone(),
            child_runs: child_runs.clone(),
            children_started: *children_started,
            outputs: outputs.clone(),
            ai: ai.clone(),
            replay: replay.clone(),
        }
    }

    fn restore(self, state: &mut RunState) {
        state.status = self.status;
        state.version = self.version;
        state.status_version = self.status_version;
        state.next_sequence = self.next_sequence;
        state.node_executions = self.node_executions;
        state.started_at = self.started_at;
        state.ended_at = self.ended_at;
        state.error = self.error;
        state.cancel_reason = self.cancel_reason;
        state.interrupts = self.interrupts;
        state.pause = self.pause;
        state.pending_pause = self.pending_pause;
        state.orchestrator = self.orchestrator;
        state.child_runs = self.child_runs;
        state.children_started = self.children_started;
        state.outputs = self.outputs;
        state.ai = self.ai;
        state.replay = self.replay;
    }
}

impl Journal {
    /// An empty journal for a transition of `state`.
    pub(super) fn new(state: &RunState) -> Self {
        Self {
            header: Header::of(state),
            nodes: BTreeMap::new(),
            edges: BTreeMap::new(),
            variables: BTreeMap::new(),
            #[cfg(debug_assertions)]
            before: state.clone(),
        }
    }

    /// The run's status before the transition.
    pub(super) fn status_before(&self) -> RunStatus {
        self.header.status
    }

    /// The run's version before the transition.
    pub(super) fn version_before(&self) -> u64 {
        self.header.version
    }

    /// The touched records as a commit's changes (the journal is not needed any more).
    pub(super) fn into_changes(self) -> Changes {
        Changes {
            all: false,
            nodes: self.nodes.into_keys().collect(),
            edges: self.edges.into_keys().collect(),
            variables: self.variables.into_keys().collect(),
        }
    }

    /// Puts `state` back as it was.
    pub(super) fn roll_back(self, state: &mut RunState) {
        let Journal {
            header,
            nodes,
            edges,
            variables,
            #[cfg(debug_assertions)]
            before,
        } = self;
        header.restore(state);
        for (node_id, prior) in nodes {
            match prior {
                Some(node) => state.nodes.insert(node_id, node),
                None => state.nodes.remove(&node_id),
            };
        }
        for (edge, prior) in edges {
            state.edges[edge] = prior;
        }
        for (name, prior) in variables {
            match prior {
                Some(value) => state.variables.insert(name, value),
                None => state.variables.remove(&name),
            };
        }
        // Only the changeable header fields were restored: the others must not have changed.
        #[cfg(debug_assertions)]
        assert_eq!(before, *state, "a rolled-back transition left the run changed");
    }

    /// Panics if a node, edge or variable changed without being journaled, or a header field
    /// fixed at creation changed.
    #[cfg(debug_assertions)]
    pub(super) fn check(&self, state: &RunState) {
        let before = &self.before;
        assert_eq!(
            (&before.run_id, &before.tenant, &before.principal, &before.workflow, &before.inputs, &before.limits),
            (&state.run_id, &state.tenant, &state.principal, &state.workflow, &state.inputs, &state.limits),
            "a header field fixed at creation changed"
        );
        assert_eq!(
            (
                &before.created_at,
                &before.configurable,
                &before.tags,
                &before.metadata,
                &before.scope_id,
                &before.retention_ms
            ),
            (
                &state.created_at,
                &state.configurable,
                &state.tags,
                &state.metadata,
                &state.scope_id,
                &state.retention_ms
            ),
            "a header field fixed at creation changed"
        );
        assert_eq!(
            (
                &before.parent,
                &before.disabled_capabilities,
                &before.mocks_allowed,
                &before.version,
                &before.callback_url
            ),
            (&state.parent, &state.disabled_capabilities, &state.mocks_allowed, &state.version, &state.callback_url),
            "a header field fixed at creation changed"
        );
        for (node_id, node) in &state.nodes {
            if !self.nodes.contains_key(node_id) {
                assert_eq!(before.nodes.get(node_id), Some(node), "node {node_id} changed without being journaled");
            }
        }
        // A journaled record may go (a fan-out's slots at the join: the store deletes the row).
        assert!(
            before.nodes.keys().all(|id| state.nodes.contains_key(id) || self.nodes.contains_key(id)),
            "a node record was dropped without being journaled"
        );
        assert_eq!(before.edges.len(), state.edges.len(), "the edge list changed length");
        for (edge, status) in state.edges.iter().enumerate() {
            if !self.edges.contains_key(&edge) {
                assert_eq!(before.edges[edge], *status, "edge {edge} changed without being journaled");
            }
        }
        for name in before.variables.keys().chain(state.variables.keys()) {
            if !self.variables.contains_key(name) {
                assert_eq!(
                    before.variables.get(name),
                    state.variables.get(name),
                    "variable {name} changed unjournaled"
                );
            }
        }
    }
}
