//! Bounded back-edges: an edge with a `condition` back to an earlier node (see
//! [`crate::model::graph`]). When its source completes and the condition holds (evaluated
//! like a forward edge's, against the source's outputs and the run's variables), the part of
//! the graph from the target on (its *region*) is reset — nodes go back to idle, their
//! forward edges to unresolved — and the target is scheduled again, in the same transition as
//! the completion, so a run whose forward graph is done does not complete meanwhile. A taken
//! back-edge wins over the source's forward edges: they are resolved as not taken, so what
//! follows the source runs only once the loop exits.
//!
//! Each re-entry counts on the target's record ([`crate::run::NodeState::loopbacks`]). The
//! count is kept across the target's own resets, so a single loop counts per run; a reset by
//! an outer loop clears the counters of the region's other nodes, so inner loops start afresh
//! on each outer round. The back-edges are decided before the source's completion is
//! recorded, like its forward edges, and two cases fail the source instead of completing it
//! (one terminal event; a failure route out of the source runs as for any failure):
//! - the re-entry that would pass the workflow's `settings.maxLoopbackIterations` (default
//!   [`DEFAULT_MAX_LOOPBACK_ITERATIONS`]) emits `workflow.loopback-limit`
//!   `{nodeId: <target>, iterations: <limit + 1>, limit}` and fails with
//!   [`LOOPBACK_LIMIT_EXCEEDED`];
//! - a node of the region other than the source still active (scheduled, executing, retrying,
//!   waiting on a timer or a child, suspended) fails it with [`LOOPBACK_REGION_ACTIVE`]: its
//!   previous round's result would otherwise feed the new round.

use std::collections::VecDeque;

use serde_json::{json, Map, Value};

use super::progress::Transition;
use crate::event::types;
use crate::model::condition;
use crate::model::graph::{max_loopback_iterations, DEFAULT_MAX_LOOPBACK_ITERATIONS};
use crate::run::{EdgeStatus, NodeStatus, RunError};

/// The error code of a node whose back-edge would re-enter its target past the limit.
pub(super) const LOOPBACK_LIMIT_EXCEEDED: &str = "loopback_limit_exceeded";

/// The error code of a node whose back-edge would reset a region with a node still active.
pub(super) const LOOPBACK_REGION_ACTIVE: &str = "loopback_region_active";

impl Transition<'_> {
    /// The back-edges out of the node at `index` that its completion with `outputs` takes,
    /// as `(target, its re-entry count)`; evaluated like the forward edges, before the
    /// completion (so against the same variables). An edge whose condition cannot be
    /// evaluated, a re-entry past the limit (after `workflow.loopback-limit`), or a region to
    /// reset with an active node, is the error the node fails with instead of completing.
    pub(super) fn back_edges_taken(
        &mut self,
        index: usize,
        outputs: &Map<String, Value>,
    ) -> Result<Vec<(usize, u32)>, RunError> {
        let workflow = self.workflow;
        let edges = &workflow.graph.back_outgoing[index];
        if edges.is_empty() {
            return Ok(Vec::new());
        }
        let node_id = workflow.definition.nodes[index].id.as_str();
        let mut targets: Vec<usize> = Vec::new();
        for &edge in edges {
            let Some(c) = &workflow.definition.edges[edge].condition else { continue };
            let regex = workflow.edge_regexes.get(edge).and_then(Option::as_ref);
            let target = workflow.graph.ends[edge].1;
            match condition::evaluate(c, regex, outputs, &self.state.variables) {
                Ok(true) if !targets.contains(&target) => targets.push(target),
                Ok(_) => {}
                Err(error) => return Err(RunError::new("invalid_edge_condition", error.0)),
            }
        }
        let limit = max_loopback_iterations(&workflow.definition.settings).unwrap_or(DEFAULT_MAX_LOOPBACK_ITERATIONS);
        let mut counted = Vec::with_capacity(targets.len());
        for target in targets {
            let target_id = workflow.definition.nodes[target].id.as_str();
            let iterations = self.state.nodes.get(target_id).map_or(0, |node| node.loopbacks).saturating_add(1);
            if iterations > limit {
                let payload = json!({ "nodeId": target_id, "iterations": iterations, "limit": limit });
                self.emit(types::WORKFLOW_LOOPBACK_LIMIT, Some(target_id), payload);
                let mut error = RunError::new(
                    LOOPBACK_LIMIT_EXCEEDED,
                    format!(
                        "node `{node_id}` loops back to node `{target_id}` once more than its limit of {limit} \
                         (settings.maxLoopbackIterations)"
                    ),
                );
                error.details = Some(json!({ "nodeId": target_id, "iterations": iterations, "limit": limit }));
                return Err(error);
            }
            if let Some(active) = self.active_in_region(target, index) {
                let active_id = workflow.definition.nodes[active].id.as_str();
                let status = self.state.nodes.get(active_id).map(|node| node.status);
                let status = status.and_then(|status| serde_json::to_value(status).ok()).unwrap_or(Value::Null);
                let status = status.as_str().unwrap_or("active").to_owned();
                let mut error = RunError::new(
                    LOOPBACK_REGION_ACTIVE,
                    format!(
                        "node `{node_id}` cannot loop back to node `{target_id}`: node `{active_id}` in the part \
                         of the graph to run again is still active ({status}); the previous round must end there \
                         before the loop re-enters"
                    ),
                );
                error.details = Some(json!({ "nodeId": target_id, "activeNodeId": active_id, "status": status }));
                return Err(error);
            }
            counted.push((target, iterations));
        }
        Ok(counted)
    }

    /// The first node of `target`'s region (see [`Self::region`]) other than `source` that is
    /// still active.
    fn active_in_region(&self, target: usize, source: usize) -> Option<usize> {
        let nodes = &self.workflow.definition.nodes;
        self.region(target).into_iter().find(|&node| {
            node != source && self.state.nodes.get(nodes[node].id.as_str()).is_some_and(|state| state.is_active())
        })
    }

    /// The nodes reached from `target` through forward edges, `target` first.
    fn region(&self, target: usize) -> Vec<usize> {
        let graph = &self.workflow.graph;
        let mut queue = VecDeque::from([target]);
        let mut seen = vec![false; self.workflow.definition.nodes.len()];
        let mut region = Vec::new();
        while let Some(node) = queue.pop_front() {
            if std::mem::replace(&mut seen[node], true) {
                continue;
            }
            region.push(node);
            queue.extend(graph.outgoing[node].iter().map(|&edge| graph.ends[edge].1));
        }
        region
    }

    /// Follows the back-edges [`Self::back_edges_taken`] chose, once the node completed: the
    /// part of the graph from each target on is reset and the target scheduled again.
    pub(super) fn follow_back_edges(&mut self, taken: Vec<(usize, u32)>) {
        for (target, iterations) in taken {
            let target_id = self.workflow.definition.nodes[target].id.as_str();
            self.reset_from(target);
            self.node_mut(target_id).loopbacks = iterations;
            self.schedule(target_id);
        }
    }

    /// The part of the graph from `target` on, as before it ran: nodes that are not active go
    /// back to idle, forward edges to unresolved (like a supervisor loop edge's reset). The
    /// re-entry counters of the region's nodes other than `target` are cleared, so an inner
    /// loop starts afresh on each re-entry of an outer one. ([`Self::back_edges_taken`] has
    /// refused a region with an active node other than the source, which is completing.)
    fn reset_from(&mut self, target: usize) {
        for node in self.region(target) {
            let node_id = self.workflow.definition.nodes[node].id.as_str();
            if let Some(state) = self.state.nodes.get(node_id) {
                let (idle, clear) = (!state.is_active(), node != target && state.loopbacks != 0);
                if idle || clear {
                    let state = self.node_mut(node_id);
                    if idle {
                        state.status = NodeStatus::Idle;
                        state.dispatch = None;
                    }
                    if clear {
                        state.loopbacks = 0;
                    }
                }
            }
            for &edge in &self.workflow.graph.outgoing[node] {
                self.set_edge(edge, EdgeStatus::Unresolved);
            }
        }
    }
}
