//! The workflows the benchmark runs, and writing them where a host reads them.

use std::path::Path;

use serde_json::{json, Value};

use crate::error::{BenchError, Fallible};
use crate::fanout_shapes;

/// A named workflow and how many nodes one run of it executes.
pub(crate) struct Scenario {
    /// The workflow id the host knows it by.
    pub(crate) id: &'static str,
    /// How `--scenarios` names it: the id without `bench-`.
    pub(crate) name: &'static str,
    pub(crate) nodes: usize,
    pub(crate) definition: Value,
    /// For a run that suspends: the node and the resume value the client sends as soon as
    /// it reads `interrupt.requested`.
    pub(crate) resolve: Option<(&'static str, Value)>,
}

fn chain(id: &'static str, name: &'static str, length: usize) -> Scenario {
    let nodes: Vec<Value> = (0..length).map(|i| json!({"id": format!("n{i}"), "typeId": "core.noop"})).collect();
    let edges: Vec<Value> = (1..length)
        .map(|i| json!({"id": format!("e{i}"), "sourceNodeId": format!("n{}", i - 1), "targetNodeId": format!("n{i}")}))
        .collect();
    Scenario {
        id,
        name,
        nodes: length,
        definition: json!({"id": id, "name": id, "nodes": nodes, "edges": edges}),
        resolve: None,
    }
}

fn fan_out(id: &'static str, name: &'static str, width: usize) -> Scenario {
    let mut nodes = vec![json!({"id": "start", "typeId": "core.noop"})];
    let mut edges = Vec::new();
    for i in 0..width {
        nodes.push(json!({"id": format!("b{i}"), "typeId": "core.noop"}));
        edges.push(json!({"id": format!("s{i}"), "sourceNodeId": "start", "targetNodeId": format!("b{i}")}));
        edges.push(json!({"id": format!("j{i}"), "sourceNodeId": format!("b{i}"), "targetNodeId": "join"}));
    }
    nodes.push(json!({"id": "join", "typeId": "core.noop"}));
    Scenario {
        id,
        name,
        nodes: width + 2,
        definition: json!({"id": id, "name": id, "nodes": nodes, "edges": edges}),
        resolve: None,
    }
}

/// `noop → approval gate → noop`, accepted by the client as soon as the gate asks.
fn approval(id: &'static str, name: &'static str) -> Scenario {
    let nodes = json!([{"id": "before", "typeId": "core.noop"},
        {"id": "gate", "typeId": "core.approvalGate", "config": {"title": "Benchmark approval"}},
        {"id": "after", "typeId": "core.noop"}]);
    let edges = json!([{"id": "e1", "sourceNodeId": "before", "targetNodeId": "gate"},
        {"id": "e2", "sourceNodeId": "gate", "targetNodeId": "after"}]);
    Scenario {
        id,
        name,
        nodes: 3,
        definition: json!({"id": id, "name": id, "nodes": nodes, "edges": edges}),
        resolve: Some(("gate", json!({"action": "accept"}))),
    }
}

/// A supervisor whose plan dispatches three one-node worker runs, then terminates: seven node
/// executions (two supervisor ticks, two dispatch steps, three workers) and three child runs.
fn dispatch(id: &'static str, name: &'static str) -> Scenario {
    let plan = json!([{"kind": "next-worker", "nextWorkerIds": ["bench-worker", "bench-worker", "bench-worker"]}]);
    let nodes = json!([{"id": "supervisor", "typeId": "core.orchestrator.supervisor", "config": {"mockDispatchPlan": plan}},
        {"id": "dispatch", "typeId": "core.dispatch", "config": {}}]);
    let edges = json!([{"id": "e1", "sourceNodeId": "supervisor", "targetNodeId": "dispatch"},
        {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "supervisor"}]);
    Scenario {
        id,
        name,
        nodes: 7,
        definition: json!({"id": id, "name": id, "nodes": nodes, "edges": edges}),
        resolve: None,
    }
}

/// `noop → approval gate → noop`, never resolved: a run of it parks at the gate.
pub(crate) fn parked() -> Scenario {
    let mut scenario = approval(PARKED, "parked");
    scenario.resolve = None;
    scenario
}

/// The id of [`parked`]'s workflow.
pub(crate) const PARKED: &str = "bench-parked";

/// The worker the dispatch scenario runs.
pub(crate) fn worker() -> Value {
    json!({"id": "bench-worker", "name": "bench-worker", "nodes": [{"id": "work", "typeId": "core.noop"}]})
}

/// Chains of 10, 50 and 500 `core.noop` nodes, an 8-wide fan-out with a join, a three-node
/// run through an approval gate resolved by the client, and a supervisor dispatching three
/// workers; in the order they are driven.
pub(crate) fn all() -> Vec<Scenario> {
    vec![
        chain("bench-chain-10", "chain-10", 10),
        chain("bench-chain-50", "chain-50", 50),
        chain("bench-chain-500", "chain-500", 500),
        fan_out("bench-fan-out-8", "fan-out-8", 8),
        approval("bench-approval", "approval"),
        dispatch("bench-dispatch-3", "dispatch-3"),
    ]
}

/// The scenario named `name` (`chain-10`, ...).
pub(crate) fn named(name: &str) -> Option<Scenario> {
    all().into_iter().find(|scenario| scenario.name == name || scenario.id == name)
}

/// The ids of every workflow the benchmark starts runs of.
pub(crate) fn workflow_ids() -> Vec<&'static str> {
    let mut ids: Vec<&'static str> = all().iter().map(|scenario| scenario.id).collect();
    ids.extend([PARKED, "bench-worker"]);
    ids.extend([
        fanout_shapes::NOOP_CHILD,
        fanout_shapes::DELAY_CHILD,
        fanout_shapes::LOOP_NOOP,
        fanout_shapes::LOOP_DELAY,
        fanout_shapes::DISPATCH_PARALLEL,
    ]);
    ids
}

/// Writes every workflow the benchmark uses into `dir` (one `<id>.json` each), for a host
/// started with `--workflows dir`.
pub(crate) fn write_all(dir: &Path) -> Fallible<()> {
    let io = |error: std::io::Error| {
        BenchError::new("io_failed", format!("writing workflows to {}: {error}", dir.display()))
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut definitions: Vec<Value> = all().into_iter().map(|scenario| scenario.definition).collect();
    definitions.extend([parked().definition, worker()]);
    definitions.extend(fanout_shapes::workflows(fanout_shapes::ITEMS));
    for definition in definitions {
        let id = definition["id"].as_str().unwrap_or_default().to_owned();
        std::fs::write(dir.join(format!("{id}.json")), definition.to_string()).map_err(io)?;
    }
    Ok(())
}
