//! The workflow graph and its rules.
//!
//! - The entry node is the first listed node without an incoming edge (edges into a
//!   `core.orchestrator.supervisor` node do not count), else the first listed node.
//! - Edges into a supervisor node are *loop edges*: the only cycles allowed.
//! - Any other cycle, an edge naming an unknown node, a repeated node id, or a node the
//!   entry cannot reach is refused.
//! - A node's trigger rule is the `triggerRule` of its incoming edges; edges into one node
//!   that name different rules are refused (the rule belongs to the target).

use std::collections::{BTreeSet, HashMap, VecDeque};

use crate::error::DefinitionError;
use crate::model::definition::WorkflowDefinition;

/// The type id whose incoming edges are loop edges.
pub const SUPERVISOR_TYPE_ID: &str = "core.orchestrator.supervisor";

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
    /// Whether each edge is a loop edge.
    pub is_loop: Vec<bool>,
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
        let mut outgoing = vec![Vec::new(); node_count];
        let mut incoming = vec![Vec::new(); node_count];
        let mut ends = Vec::with_capacity(definition.edges.len());
        let mut is_loop = Vec::with_capacity(definition.edges.len());
        let mut all_successors = vec![Vec::new(); node_count];
        for (edge_index, edge) in definition.edges.iter().enumerate() {
            let lookup = |node_id: &str| {
                index.get(node_id).copied().ok_or_else(|| DefinitionError::DanglingEdge {
                    edge_id: edge.id.clone(),
                    node_id: node_id.to_owned(),
                })
            };
            let source = lookup(&edge.source_node_id)?;
            let target = lookup(&edge.target_node_id)?;
            let looping = definition.nodes[target].type_id == SUPERVISOR_TYPE_ID;
            ends.push((source, target));
            is_loop.push(looping);
            all_successors[source].push(target);
            if !looping {
                outgoing[source].push(edge_index);
                incoming[target].push(edge_index);
            }
        }
        let entry = (0..node_count).find(|&node| incoming[node].is_empty()).unwrap_or(0);
        let trigger = trigger_rules(definition, &incoming)?;
        let graph = Self { index, entry, outgoing, incoming, ends, is_loop, trigger };
        graph.refuse_forward_cycles(definition)?;
        graph.refuse_unreachable(definition, &all_successors)?;
        Ok(graph)
    }

    /// Whether a failure of node `index` is handled by one of its outgoing edges' targets.
    pub fn failure_handled(&self, index: usize) -> bool {
        self.outgoing[index].iter().any(|&edge| self.trigger[self.ends[edge].1].handles_failure())
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
