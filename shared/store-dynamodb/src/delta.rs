//! Delta pages: what one commit changed in a run's state, and how a reader rebuilds the
//! state from the newest checkpoint page and the deltas after it.
//!
//! A page carries either the whole state (a *checkpoint*: creation, a commit whose writer
//! does not know the page before it, or one that would make the deltas since the last
//! checkpoint outweigh it) or a [`Delta`]: the header fields (every field but nodes, edges
//! and variables) that differ from the previous version's, and only the nodes, edges and
//! variables the commit touched. A step's page then costs the same at node 500 as at node 5;
//! see [`CheckpointPolicy`] for what bounds a cold read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use trellis_core::run::{Changes, EdgeStatus, NodeState};
use trellis_core::{RunState, StoreError};

/// A state's header ([`RunState::header`]) as its JSON fields: what a delta is taken
/// against.
pub(crate) type Header = Map<String, Value>;

/// The header of `run`.
pub(crate) fn header_of(run: &RunState) -> Result<Header, StoreError> {
    match serde_json::to_value(run.header()) {
        Ok(Value::Object(fields)) => Ok(fields),
        Ok(_) => Err(StoreError::Corrupt("a run header is not an object".into())),
        Err(error) => Err(StoreError::Corrupt(error.to_string())),
    }
}

/// The part of a state one commit changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Delta {
    /// Header fields set or changed.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    header: Header,
    /// Header fields gone (an optional field back to its default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    unset: Vec<String>,
    /// Touched nodes: their state, or `None` when the commit removed the record.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    nodes: BTreeMap<String, Option<NodeState>>,
    /// Touched edges by index.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    edges: BTreeMap<usize, EdgeStatus>,
    /// Variables set.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    set: Map<String, Value>,
    /// Variables removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    removed: Vec<String>,
    /// How many edges the state has (a check on the state it applies to).
    edge_count: usize,
}

impl Delta {
    /// What `changes` touched in `run`, whose previous version's header was `before`
    /// (`changes.all` is not a delta: write a checkpoint); with `run`'s header.
    pub(crate) fn of(run: &RunState, changes: &Changes, before: &Header) -> Result<(Self, Header), StoreError> {
        let after = header_of(run)?;
        let header =
            after.iter().filter(|(k, v)| before.get(*k) != Some(v)).map(|(k, v)| (k.clone(), v.clone())).collect();
        let unset = before.keys().filter(|k| !after.contains_key(*k)).cloned().collect();
        let mut set = Map::new();
        let mut removed = Vec::new();
        for name in &changes.variables {
            match run.variables.get(name) {
                Some(value) => {
                    set.insert(name.clone(), value.clone());
                }
                None => removed.push(name.clone()),
            }
        }
        let delta = Self {
            header,
            unset,
            nodes: changes.nodes.iter().map(|id| (id.clone(), run.nodes.get(id).cloned())).collect(),
            edges: changes.edges.iter().filter_map(|&i| run.edges.get(i).map(|edge| (i, *edge))).collect(),
            set,
            removed,
            edge_count: run.edges.len(),
        };
        Ok((delta, after))
    }

    /// Applies the delta to `state`, which must be its predecessor version (else
    /// [`StoreError::Corrupt`], `state` unchanged).
    pub(crate) fn apply(self, state: &mut RunState) -> Result<(), StoreError> {
        let mut fields = header_of(state)?;
        for name in &self.unset {
            fields.remove(name);
        }
        fields.extend(self.header);
        let header: RunState =
            serde_json::from_value(Value::Object(fields)).map_err(|error| StoreError::Corrupt(error.to_string()))?;
        let edges_fit = self.edges.keys().all(|&index| index < self.edge_count);
        if Some(header.version) != state.version.checked_add(1) || self.edge_count != state.edges.len() || !edges_fit {
            return Err(StoreError::Corrupt(format!(
                "a delta page of version {} ({} edges) does not follow state version {} ({} edges)",
                header.version,
                self.edge_count,
                state.version,
                state.edges.len()
            )));
        }
        let nodes = std::mem::take(&mut state.nodes);
        let edges = std::mem::take(&mut state.edges);
        let variables = std::mem::take(&mut state.variables);
        *state = header;
        state.nodes = nodes;
        state.edges = edges;
        state.variables = variables;
        for (id, node) in self.nodes {
            match node {
                Some(node) => state.nodes.insert(id, node),
                None => state.nodes.remove(&id),
            };
        }
        for (index, edge) in self.edges {
            state.edges[index] = edge;
        }
        for name in self.removed {
            state.variables.remove(&name);
        }
        state.variables.extend(self.set);
        Ok(())
    }
}

/// When a writer writes a checkpoint instead of a delta: when the pages since the last
/// checkpoint, with this one, would outweigh that checkpoint [`CHECKPOINT_RATIO`] times. A
/// cold read (no cached state) then reads at most about `1 + CHECKPOINT_RATIO` times the
/// state's size, and the checkpoints cost a step about `1 / CHECKPOINT_RATIO` of its delta
/// again, whatever the workflow's length.
/// How many times its size in deltas a checkpoint is followed by, at most.
pub(crate) const CHECKPOINT_RATIO: usize = 3;

/// Past this bound of the state's size every commit is a checkpoint (DynamoDB items hold
/// 400 KB; the margin covers the checkpoint's own attributes and events).
pub(crate) const MAX_DELTA_STATE_BYTES: usize = 300 * 1024;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CheckpointPolicy {
    /// Bytes of the newest checkpoint page.
    pub(crate) checkpoint_bytes: usize,
    /// Bytes of the delta pages written since.
    pub(crate) since_bytes: usize,
}

impl CheckpointPolicy {
    /// After a checkpoint page of `bytes`.
    pub(crate) fn checkpoint(bytes: usize) -> Self {
        Self { checkpoint_bytes: bytes, since_bytes: 0 }
    }

    /// Whether a delta page of `bytes` may be written (else a checkpoint): within the ratio,
    /// and only while the state stays well under what one checkpoint page can hold — a
    /// state that grew past it in deltas could never be checkpointed again (a cold
    /// instance, a lost race or the policy would need one), so the commit that would cross
    /// the item limit is refused as a checkpoint, as it was before deltas.
    pub(crate) fn allows_delta(&self, bytes: usize) -> bool {
        self.since_bytes + bytes <= CHECKPOINT_RATIO * self.checkpoint_bytes
            && self.state_bytes_bound() + bytes <= MAX_DELTA_STATE_BYTES
    }

    /// An upper bound of the state's size: the checkpoint plus everything written since (a
    /// delta carries each value it changes whole, and its events besides).
    pub(crate) fn state_bytes_bound(&self) -> usize {
        self.checkpoint_bytes + self.since_bytes
    }

    /// After a delta page of `bytes`.
    pub(crate) fn after_delta(self, bytes: usize) -> Self {
        Self { since_bytes: self.since_bytes + bytes, ..self }
    }
}

#[cfg(test)]
mod tests {
    use trellis_core::engine::{self, Input};
    use trellis_core::testing::{chain_workflow, pending_run};

    use super::*;

    #[test]
    fn a_delta_rebuilds_the_state_it_was_taken_from() {
        let workflow = chain_workflow();
        let mut run = pending_run(&workflow, "run-d", "t");
        let mut state = run.clone();
        let mut inputs = vec![Input::Start];
        while let Some(input) = inputs.pop() {
            let before = run.version;
            let outcome = engine::apply(&workflow, &mut run, input, 10);
            run.version = before + 1;
            for effect in &outcome.effects {
                if let engine::Effect::Step { node_id, activation, .. } = effect {
                    inputs.push(Input::Step { node_id: node_id.clone(), activation: *activation });
                }
            }
            run.variables.insert("x".into(), Value::from(run.version));
            // An optional header field set, then gone again: `unset` carries it.
            run.cancel_reason = (run.version % 2 == 0).then(|| "x".to_owned());
            let mut changes = outcome.changes;
            changes.variables.insert("x".into());
            changes.variables.insert("gone".into());
            let (delta, _) = Delta::of(&run, &changes, &header_of(&state).unwrap()).expect("a delta");
            let text = serde_json::to_string(&delta).expect("encodes");
            let decoded: Delta = serde_json::from_str(&text).expect("decodes");
            assert!(decoded.header.contains_key("version") && !decoded.header.contains_key("workflow"), "{text}");
            decoded.apply(&mut state).expect("applies");
            assert_eq!(state, run);
        }
        assert!(state.status.is_terminal() && state.version >= 4, "the chain ran to its end: {state:?}");
    }

    #[test]
    fn a_delta_refuses_a_state_it_does_not_follow() {
        let run = pending_run(&chain_workflow(), "run-d", "t");
        let mut next = run.clone();
        next.version += 2;
        let mut state = run.clone();
        let (delta, _) = Delta::of(&next, &Changes::default(), &header_of(&run).unwrap()).expect("a delta");
        let refused = delta.apply(&mut state);
        assert!(matches!(refused, Err(StoreError::Corrupt(_))), "{refused:?}");
        assert_eq!(state, run, "nothing applied");
    }

    #[test]
    fn checkpoints_come_when_the_deltas_outweigh_the_last_one() {
        let budget = 300 * CHECKPOINT_RATIO;
        let policy = CheckpointPolicy::checkpoint(300);
        assert!(policy.allows_delta(budget) && !policy.allows_delta(budget + 1));
        let policy = policy.after_delta(100).after_delta(100);
        assert!(policy.allows_delta(budget - 200));
        assert!(!policy.allows_delta(budget - 199));
        // A state near the item limit is only ever checkpointed.
        let large = CheckpointPolicy::checkpoint(MAX_DELTA_STATE_BYTES - 100);
        assert!(large.allows_delta(100) && !large.allows_delta(101));
    }
}
