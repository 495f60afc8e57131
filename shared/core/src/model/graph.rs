//! The workflow graph and its rules.
//!
//! - Edges into a `core.orchestrator.supervisor` node are *loop edges*.
//! - An edge with a `condition` back to an *earlier* node is a *back-edge* (a bounded loop,
//!   see [`Graph::back_edge`] and `settings.maxLoopbackIterations`): walking the graph
//!   depth-first from the first listed node without an incoming edge other than a loop edge
//!   (else the first listed node whose incoming edges other than loop edges all have a
//!   condition, else the first listed node; then from any node not reached), successors in
//!   the order their edges are listed,
//!   an edge into a node still on the walk's path closes a cycle; when it has a condition it
//!   is a back-edge.
//! - Loop edges and back-edges are the only cycles allowed; neither counts as an incoming
//!   (or outgoing) *forward* edge.
//! - The entry node is the first listed node without an incoming forward edge, else the
//!   first listed node.
//! - Any other cycle (an unconditional edge closing one included), an edge naming an unknown
//!   node, a repeated node id, or a node the entry cannot reach is refused.
//! - A node's trigger rule is the `triggerRule` of its incoming edges; edges into one node
//!   that name different rules are refused (the rule belongs to the target).

use std::collections::{BTreeSet, HashMap, VecDeque};

use serde_json::{Map, Value};

use crate::error::DefinitionError;
use crate::model::definition::WorkflowDefinition;

/// The type id whose incoming edges are loop edges.
pub const SUPERVISOR_TYPE_ID: &str = "core.orchestrator.supervisor";

/// How many times back-edges may re-enter one node in a run, unless the workflow's
/// `settings.maxLoopbackIterations` says otherwise.
pub const DEFAULT_MAX_LOOPBACK_ITERATIONS: u32 = 5;

/// The largest `settings.maxLoopbackIterations` a workflow may name.
pub const MAX_LOOPBACK_ITERATIONS: u32 = 10_000;

/// The workflow's `settings.maxLoopbackIterations` ([`DEFAULT_MAX_LOOPBACK_ITERATIONS`] when
/// absent); `None` when it is not an integer from 1 to [`MAX_LOOPBACK_ITERATIONS`].
pub fn max_loopback_iterations(settings: &Map<String, Value>) -> Option<u32> {
    let Some(value) = settings.get("maxLoopbackIterations") else {
        return Some(DEFAULT_MAX_LOOPBACK_ITERATIONS);
    };
    let number = value.as_u64().or_else(|| value.as_f64().filter(|n| n.fract() == 0.0 && *n >= 1.0).map(|n| n as u64));
    number.and_then(|n| u32::try_from(n).ok()).filter(|n| (1..=MAX_LOOPBACK_ITERATIONS).contains(n))
}

/// Adjacency of a validated workflow, by node index (authoring order) and edge index.
#[derive(Debug, Clone)]
pub struct Graph {
    index: HashMap<String, usize>,
    /// The node the run starts at.
    pub entry: usize,
    /// Outgoing forward (non-loop) edge indexes per node.
    pub outgoing: Vec<Vec<usize>>,
    /// Incoming forward (non-loop) edge indexes per node.
    pub incoming: Vec<Vec<usize>>,
    /// `(source, target)` node indexes per edge.
    pub ends: Vec<(usize, usize)>,
    /// Whether each edge is a loop edge: into a supervisor, or a back-edge.
    pub is_loop: Vec<bool>,
    /// Whether each edge is a back-edge (a conditional edge to an earlier node; a loop edge
    /// that is not into a supervisor).
    pub back_edge: Vec<bool>,
    /// Outgoing back-edge indexes per node, in the order the edges are listed.
    pub back_outgoing: Vec<Vec<usize>>,
    /// Each node's trigger rule (from its incoming forward edges).
    pub trigger: Vec<TriggerRule>,
}

/// When a node runs, given how the sources of its incoming edges ended (the spec's edge
/// `triggerRule`). An edge is *taken* (its source completed and its condition held), *not
/// taken* (skipped source or false condition) or *failed* (its source failed).
///
/// | rule | runs when | skipped when |
/// |------|-----------|--------------|
/// | `all_success` (default) | every edge resolved, none failed, one taken | otherwise, once every edge resolved |
/// | `any_success` | one edge is taken (at once) | every edge resolved, none taken |
/// | `all_complete` | every edge resolved, one taken or failed | every edge resolved as not taken |
/// | `none_failed` | every edge resolved, none failed | one edge failed |
/// | `any_failed` | one edge failed (at once) | every edge resolved, none failed |
///
/// A node failure that reaches a target through an `any_failed` or `all_complete` edge is
/// *handled*: the run does not fail, the target reads `variables[<failed node>].error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TriggerRule {
    /// Every source succeeded (skips tolerated, as without a rule).
    #[default]
    AllSuccess,
    /// Any source succeeded.
    AnySuccess,
    /// Every source ended, however.
    AllComplete,
    /// No source failed.
    NoneFailed,
    /// Any source failed: a failure route.
    AnyFailed,
}

impl TriggerRule {
    /// The rule named `name` (the schema's enum).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "all_success" => Self::AllSuccess,
            "any_success" => Self::AnySuccess,
            "all_complete" => Self::AllComplete,
            "none_failed" => Self::NoneFailed,
            "any_failed" => Self::AnyFailed,
            _ => return None,
        })
    }

    /// Whether a failed source reaching a target with this rule is handled there.
    pub fn handles_failure(self) -> bool {
        matches!(self, Self::AnyFailed | Self::AllComplete)
    }
}

impl Graph {
    /// Builds the graph and applies the rules above.
    pub fn build(definition: &WorkflowDefinition) -> Result<Self, DefinitionError> {
        let mut index = HashMap::with_capacity(definition.nodes.len());
        for (position, node) in definition.nodes.iter().enumerate() {
            if index.insert(node.id.clone(), position).is_some() {
                return Err(DefinitionError::DuplicateNode { node_id: node.id.clone() });
            }
        }
        let node_count = definition.nodes.len();
        let mut ends = Vec::with_capacity(definition.edges.len());
        let mut is_loop = Vec::with_capacity(definition.edges.len());
        let mut all_successors = vec![Vec::new(); node_count];
        for edge in &definition.edges {
            let lookup = |node_id: &str| {
                index.get(node_id).copied().ok_or_else(|| DefinitionError::DanglingEdge {
                    edge_id: edge.id.clone(),
                    node_id: node_id.to_owned(),
                })
            };
            let source = lookup(&edge.source_node_id)?;
            let target = lookup(&edge.target_node_id)?;
            ends.push((source, target));
            is_loop.push(definition.nodes[target].type_id == SUPERVISOR_TYPE_ID);
            all_successors[source].push(target);
        }
        let back_edge = back_edges(definition, &ends, &is_loop);
        let mut outgoing = vec![Vec::new(); node_count];
        let mut incoming = vec![Vec::new(); node_count];
        let mut back_outgoing = vec![Vec::new(); node_count];
        for (edge_index, &(source, target)) in ends.iter().enumerate() {
            if back_edge[edge_index] {
                is_loop[edge_index] = true;
                back_outgoing[source].push(edge_index);
            } else if !is_loop[edge_index] {
                outgoing[source].push(edge_index);
                incoming[target].push(edge_index);
            }
        }
        let entry = (0..node_count).find(|&node| incoming[node].is_empty()).unwrap_or(0);
        let trigger = trigger_rules(definition, &incoming)?;
        let graph = Self { index, entry, outgoing, incoming, ends, is_loop, back_edge, back_outgoing, trigger };
        graph.refuse_forward_cycles(definition)?;
        graph.refuse_unreachable(definition, &all_successors)?;
        Ok(graph)
    }

    /// Whether a failure of node `index` is handled by one of its outgoing edges' targets.
    pub fn failure_handled(&self, index: usize) -> bool {
        self.outgoing[index].iter().any(|&edge| self.trigger[self.ends[edge].1].handles_failure())
    }

    /// Whether `edge` is a loop edge into a supervisor (a loop edge that is not a back-edge).
    pub fn is_supervisor_loop(&self, edge: usize) -> bool {
        self.is_loop[edge] && !self.back_edge[edge]
    }

    /// The index of `node_id`.
    pub fn index_of(&self, node_id: &str) -> Option<usize> {
        self.index.get(node_id).copied()
    }

    fn refuse_forward_cycles(&self, definition: &WorkflowDefinition) -> Result<(), DefinitionError> {
        // Kahn's algorithm over forward edges: whatever cannot be ordered is on or behind a cycle.
        let mut pending: Vec<usize> = self.incoming.iter().map(Vec::len).collect();
        let mut ready: VecDeque<usize> = (0..pending.len()).filter(|&node| pending[node] == 0).collect();
        let mut ordered = 0;
        while let Some(node) = ready.pop_front() {
            ordered += 1;
            for &edge in &self.outgoing[node] {
                let target = self.ends[edge].1;
                pending[target] -= 1;
                if pending[target] == 0 {
                    ready.push_back(target);
                }
            }
        }
        if ordered == pending.len() {
            return Ok(());
        }
        let nodes = (0..pending.len())
            .filter(|&node| pending[node] > 0)
            .map(|node| definition.nodes[node].id.clone())
            .collect();
        Err(DefinitionError::Cycle { nodes })
    }

    fn refuse_unreachable(
        &self,
        definition: &WorkflowDefinition,
        successors: &[Vec<usize>],
    ) -> Result<(), DefinitionError> {
        let mut seen = BTreeSet::from([self.entry]);
        let mut queue = VecDeque::from([self.entry]);
        while let Some(node) = queue.pop_front() {
            for &next in &successors[node] {
                if seen.insert(next) {
                    queue.push_back(next);
                }
            }
        }
        match (0..successors.len()).find(|node| !seen.contains(node)) {
            None => Ok(()),
            Some(node) => Err(DefinitionError::Unreachable {
                node_id: definition.nodes[node].id.clone(),
                entry: definition.nodes[self.entry].id.clone(),
            }),
        }
    }
}

/// Which edges are back-edges (see the module doc). Supervisor loop edges (`is_loop`) are
/// not walked. The walk starts at the first listed node without an incoming edge — the
/// entry, whenever the graph is accepted: a back-edge never enters a node without incoming
/// edges. When every node has one, it starts at the first listed node whose incoming edges
/// all have a condition (else at the first listed node): every edge into the walk's start
/// from a node it reaches closes a cycle, so only such a node can be the entry of an accepted
/// graph, whatever the listing order. An unconditional edge that closes a cycle stays a
/// forward edge, so the forward-cycle check refuses it.
fn back_edges(definition: &WorkflowDefinition, ends: &[(usize, usize)], is_loop: &[bool]) -> Vec<bool> {
    let node_count = definition.nodes.len();
    let mut back = vec![false; ends.len()];
    let mut successors = vec![Vec::new(); node_count];
    let mut incoming = vec![0usize; node_count];
    let mut all_conditional = vec![true; node_count];
    for (edge, &(source, target)) in ends.iter().enumerate() {
        if is_loop[edge] {
            continue;
        }
        successors[source].push(edge);
        incoming[target] += 1;
        all_conditional[target] &= definition.edges[edge].condition.is_some();
    }
    // Cheap exit: without a conditional edge there is no back-edge.
    if definition.edges.iter().enumerate().all(|(edge, def)| is_loop[edge] || def.condition.is_none()) {
        return back;
    }
    let start = (0..node_count)
        .find(|&node| incoming[node] == 0)
        .or_else(|| (0..node_count).find(|&node| all_conditional[node]))
        .unwrap_or(0);
    // 0 = not reached, 1 = on the walk's path, 2 = done. An explicit stack of (node, next
    // successor position), so a long chain does not recurse.
    let mut mark = vec![0u8; node_count];
    for root in std::iter::once(start).chain(0..node_count) {
        if mark[root] != 0 {
            continue;
        }
        mark[root] = 1;
        let mut stack = vec![(root, 0usize)];
        while let Some(top) = stack.last_mut() {
            let (node, position) = *top;
            let Some(&edge) = successors[node].get(position) else {
                mark[node] = 2;
                stack.pop();
                continue;
            };
            top.1 += 1;
            let target = ends[edge].1;
            match mark[target] {
                0 => {
                    mark[target] = 1;
                    stack.push((target, 0));
                }
                1 => back[edge] = definition.edges[edge].condition.is_some(),
                _ => {}
            }
        }
    }
    back
}

/// Each node's trigger rule; incoming edges that disagree are refused.
fn trigger_rules(
    definition: &WorkflowDefinition,
    incoming: &[Vec<usize>],
) -> Result<Vec<TriggerRule>, DefinitionError> {
    let mut rules = Vec::with_capacity(incoming.len());
    for (node, edges) in incoming.iter().enumerate() {
        let mut rule: Option<(usize, TriggerRule)> = None;
        for &edge in edges {
            let named = definition.edges[edge].trigger_rule.as_deref().unwrap_or("all_success");
            let path = format!("/edges/{edge}/triggerRule");
            let parsed = TriggerRule::parse(named).ok_or_else(|| DefinitionError::Invalid {
                path: path.clone(),
                rule: "triggerRule",
                message: format!("unknown triggerRule `{named}`"),
            })?;
            match rule {
                Some((first, seen)) if seen != parsed => {
                    return Err(DefinitionError::Invalid {
                        path,
                        rule: "triggerRule",
                        message: format!(
                            "edges into node `{}` name different trigger rules (edge `{}` and edge `{}`); \
                             the rule belongs to the target, so its incoming edges must agree",
                            definition.nodes[node].id, definition.edges[first].id, definition.edges[edge].id
                        ),
                    })
                }
                Some(_) => {}
                None => rule = Some((edge, parsed)),
            }
        }
        rules.push(rule.map(|(_, rule)| rule).unwrap_or_default());
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn definition(nodes: &[(&str, &str)], edges: &[(&str, &str)]) -> WorkflowDefinition {
        let nodes: Vec<_> = nodes.iter().map(|(id, type_id)| json!({"id": id, "typeId": type_id})).collect();
        let edges: Vec<_> = edges
            .iter()
            .enumerate()
            .map(|(i, (s, t))| json!({"id": format!("e{i}"), "sourceNodeId": s, "targetNodeId": t}))
            .collect();
        serde_json::from_value(json!({"id": "w", "name": "w", "nodes": nodes, "edges": edges})).unwrap()
    }

    #[test]
    fn entry_is_first_node_without_incoming_edge() {
        let graph = Graph::build(&definition(&[("b", "core.noop"), ("a", "core.noop")], &[("a", "b")])).unwrap();
        assert_eq!(graph.entry, 1);
        assert_eq!(graph.outgoing[1], vec![0]);
    }

    #[test]
    fn cycle_without_supervisor_is_refused() {
        let error = Graph::build(&definition(&[("a", "core.noop"), ("b", "core.noop")], &[("a", "b"), ("b", "a")]))
            .unwrap_err();
        assert!(matches!(error, DefinitionError::Cycle { ref nodes } if nodes == &["a", "b"]), "{error:?}");
    }

    #[test]
    fn edges_into_supervisor_are_loop_edges() {
        let graph = Graph::build(&definition(
            &[("sup", SUPERVISOR_TYPE_ID), ("dispatch", "core.dispatch")],
            &[("sup", "dispatch"), ("dispatch", "sup")],
        ))
        .unwrap();
        assert_eq!(graph.entry, 0);
        assert_eq!(graph.is_loop, vec![false, true]);
    }

    /// `(source, target, conditional)` edges.
    fn with_conditions(nodes: &[&str], edges: &[(&str, &str, bool)]) -> WorkflowDefinition {
        let nodes: Vec<_> = nodes.iter().map(|id| json!({"id": id, "typeId": "core.noop"})).collect();
        let edges: Vec<_> = edges
            .iter()
            .enumerate()
            .map(|(i, (s, t, conditional))| {
                let mut edge = json!({"id": format!("e{i}"), "sourceNodeId": s, "targetNodeId": t});
                if *conditional {
                    edge["condition"] = json!({"type": "notEquals", "left": "approved", "right": true});
                }
                edge
            })
            .collect();
        serde_json::from_value(json!({"id": "w", "name": "w", "nodes": nodes, "edges": edges})).unwrap()
    }

    #[test]
    fn conditional_edge_to_an_earlier_node_is_a_back_edge() {
        let graph = Graph::build(&with_conditions(
            &["draft", "review", "publish"],
            &[("draft", "review", false), ("review", "publish", true), ("review", "draft", true)],
        ))
        .unwrap();
        assert_eq!(graph.entry, 0, "the back-edge is no incoming edge of the entry");
        assert_eq!(graph.back_edge, vec![false, false, true]);
        assert_eq!(graph.is_loop, vec![false, false, true]);
        assert_eq!(graph.outgoing[1], vec![1], "the back-edge is no forward outgoing edge");
        assert!(graph.incoming[0].is_empty());
        assert_eq!(graph.back_outgoing[1], vec![2]);
    }

    #[test]
    fn without_a_node_free_of_incoming_edges_the_walk_starts_at_the_first_listed() {
        let edges = [("draft", "review", true), ("review", "draft", true)];
        let graph = Graph::build(&with_conditions(&["draft", "review"], &edges)).unwrap();
        assert_eq!((graph.entry, graph.back_edge), (0, vec![false, true]));
        let graph = Graph::build(&with_conditions(&["review", "draft"], &edges)).unwrap();
        assert_eq!((graph.entry, graph.back_edge), (0, vec![true, false]));
    }

    #[test]
    fn without_a_node_free_of_incoming_edges_the_walk_starts_where_only_conditional_edges_enter() {
        // `draft → review` has no condition, `review → draft` has one: `draft` is the only
        // possible entry, in either listing order.
        let edges = [("draft", "review", false), ("review", "draft", true)];
        for (nodes, draft) in [(["draft", "review"], 0), (["review", "draft"], 1)] {
            let graph = Graph::build(&with_conditions(&nodes, &edges)).unwrap_or_else(|e| panic!("{nodes:?}: {e:?}"));
            assert_eq!(graph.entry, draft, "{nodes:?}");
            assert_eq!(graph.back_edge, vec![false, true], "{nodes:?}: `review → draft` is the back-edge");
            assert_eq!(graph.back_outgoing[1 - draft], vec![1], "{nodes:?}");
            assert!(graph.incoming[draft].is_empty(), "{nodes:?}");
        }
    }

    #[test]
    fn a_back_edge_into_a_node_after_the_entry_leaves_the_entry_alone() {
        let graph = Graph::build(&with_conditions(
            &["review", "draft", "intake"],
            &[("intake", "draft", false), ("draft", "review", false), ("review", "draft", true)],
        ))
        .unwrap();
        assert_eq!(graph.entry, 2);
        assert_eq!(graph.back_edge, vec![false, false, true]);
        assert_eq!(graph.incoming[1], vec![0]);
    }

    #[test]
    fn nested_loops_and_a_self_loop_are_back_edges() {
        let graph = Graph::build(&with_conditions(
            &["a", "b", "c", "d"],
            &[
                ("a", "b", false),
                ("b", "c", false),
                ("c", "b", true),
                ("c", "a", true),
                ("c", "c", true),
                ("c", "d", true),
            ],
        ))
        .unwrap();
        assert_eq!(graph.back_edge, vec![false, false, true, true, true, false]);
    }

    #[test]
    fn unconditional_edge_closing_a_cycle_is_refused() {
        let error = Graph::build(&with_conditions(
            &["intake", "draft", "review"],
            &[("intake", "draft", false), ("draft", "review", true), ("review", "draft", false)],
        ))
        .unwrap_err();
        assert!(matches!(error, DefinitionError::Cycle { ref nodes } if nodes == &["draft", "review"]), "{error:?}");
    }

    #[test]
    fn without_a_node_entered_by_conditional_edges_only_an_unconditional_cycle_is_refused() {
        // Every node has an incoming edge without a condition: no node can be the entry.
        let edges = [("draft", "review", false), ("review", "draft", false), ("review", "review", true)];
        for nodes in [["draft", "review"], ["review", "draft"]] {
            let error = Graph::build(&with_conditions(&nodes, &edges)).unwrap_err();
            assert!(matches!(error, DefinitionError::Cycle { .. }), "{nodes:?}: {error:?}");
        }
    }

    #[test]
    fn a_cycle_a_conditional_edge_does_not_close_is_refused() {
        // `b → c` has a condition but is a forward edge; `c → b` closes the cycle without one.
        let error =
            Graph::build(&with_conditions(&["a", "b", "c"], &[("a", "b", false), ("b", "c", true), ("c", "b", false)]))
                .unwrap_err();
        assert!(matches!(error, DefinitionError::Cycle { ref nodes } if nodes == &["b", "c"]), "{error:?}");
    }

    #[test]
    fn a_supervisor_loop_edge_is_no_back_edge() {
        let graph = Graph::build(&definition(
            &[("sup", SUPERVISOR_TYPE_ID), ("dispatch", "core.dispatch")],
            &[("sup", "dispatch"), ("dispatch", "sup")],
        ))
        .unwrap();
        assert_eq!(graph.back_edge, vec![false, false]);
        assert!(graph.back_outgoing.iter().all(Vec::is_empty));
    }

    #[test]
    fn dangling_edge_is_refused() {
        let error = Graph::build(&definition(&[("a", "core.noop")], &[("a", "ghost")])).unwrap_err();
        assert_eq!(error, DefinitionError::DanglingEdge { edge_id: "e0".into(), node_id: "ghost".into() });
    }

    #[test]
    fn unreachable_node_is_refused() {
        let error = Graph::build(&definition(&[("a", "core.noop"), ("b", "core.noop")], &[])).unwrap_err();
        assert_eq!(error, DefinitionError::Unreachable { node_id: "b".into(), entry: "a".into() });
    }

    #[test]
    fn duplicate_node_is_refused() {
        let error = Graph::build(&definition(&[("a", "core.noop"), ("a", "core.noop")], &[])).unwrap_err();
        assert_eq!(error, DefinitionError::DuplicateNode { node_id: "a".into() });
    }
}
