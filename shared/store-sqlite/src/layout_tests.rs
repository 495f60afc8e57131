//! Layout 4 and the hot-run cache: a step's writes do not grow with the workflow, a state
//! read back equals the state committed, and the cache never serves a stale version.

use serde_json::{json, Value};
use trellis_core::engine::{self, Input, Outcome};
use trellis_core::model::Workflow;
use trellis_core::ports::RunStore;
use trellis_core::testing::pending_run;
use trellis_core::{RunState, RunStatus};

use crate::SqliteStore;

fn chain(length: usize) -> Workflow {
    let nodes: Vec<Value> = (0..length).map(|i| json!({"id": format!("n{i}"), "typeId": "core.noop"})).collect();
    let edges: Vec<Value> = (1..length)
        .map(|i| json!({"id": format!("e{i}"), "sourceNodeId": format!("n{}", i - 1), "targetNodeId": format!("n{i}")}))
        .collect();
    Workflow::compile(json!({"id": format!("chain-{length}"), "name": "chain", "nodes": nodes, "edges": edges}))
        .unwrap()
}

/// Applies `input` to the stored run and commits it with its changes.
async fn step(store: &SqliteStore, workflow: &Workflow, run_id: &str, input: Input) -> (RunState, Outcome) {
    let mut run = store.take_run(run_id).await.unwrap().unwrap();
    let expected = run.version;
    let outcome = engine::apply(workflow, &mut run, input, 10 + expected);
    assert_eq!(outcome.verdict, engine::Verdict::Applied, "{run_id} at version {expected}");
    run.version = expected + 1;
    store.commit_changes(&run, expected, &outcome.changes, &outcome.events, &outcome.effects).await.unwrap();
    (run, outcome)
}

/// Starts a run of `workflow` and steps it through its first `steps` nodes.
async fn run_steps(store: &SqliteStore, workflow: &Workflow, run_id: &str, steps: usize) -> RunState {
    let mut run = pending_run(workflow, run_id, "t");
    run.limits.max_node_executions = 10_000;
    store.create_run(&run, &[], &[], None).await.unwrap();
    let (mut run, _) = step(store, workflow, run_id, Input::Start).await;
    for i in 0..steps {
        run = step(store, workflow, run_id, Input::Step { node_id: format!("n{i}"), activation: 1 }).await.0;
        store.retain_run(run.clone());
    }
    run
}

#[tokio::test]
async fn a_step_writes_the_same_rows_at_node_450_as_at_node_5() {
    let store = SqliteStore::open_in_memory().unwrap();
    let (short, long) = (chain(10), chain(500));
    run_steps(&store, &short, "run-short", 5).await;
    run_steps(&store, &long, "run-long", 450).await;
    let measure = |workflow: &Workflow, run_id: &'static str, node: usize| {
        let (store, workflow) = (&store, workflow.clone());
        async move {
            let before = store.usage();
            step(store, &workflow, run_id, Input::Step { node_id: format!("n{node}"), activation: 1 }).await;
            store.usage().since(&before)
        }
    };
    let at_5 = measure(&short, "run-short", 5).await;
    let at_450 = measure(&long, "run-long", 450).await;
    assert_eq!(at_5.rows_written, at_450.rows_written, "{at_5:?} vs {at_450:?}");
    assert_eq!(at_5.rows_read, at_450.rows_read, "the run came from the cache both times: {at_5:?} vs {at_450:?}");
    // The header and the ids grow by a few bytes (longer node ids); the edge letters by one
    // byte per edge.
    assert!(at_450.bytes_written < at_5.bytes_written + 600, "{at_5:?} vs {at_450:?}");
}

#[tokio::test]
async fn a_state_reads_back_as_committed_from_disk_and_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("trellis.db");
    let workflow = chain(12);
    let committed = {
        let store = SqliteStore::open(&path).unwrap();
        let run = run_steps(&store, &workflow, "run-a", 7).await;
        assert_eq!(store.load_run("run-a").await.unwrap().unwrap(), run, "from the cache");
        assert_eq!(store.hot.len(), 1);
        run
    };
    let reopened = SqliteStore::open(&path).unwrap();
    assert_eq!(reopened.load_run("run-a").await.unwrap().unwrap(), committed, "from disk");
    let summary = reopened.load_run_summary("run-a").await.unwrap().unwrap();
    assert_eq!((summary.status, summary.current_node()), (RunStatus::Running, Some("n7")));
}

#[tokio::test]
async fn the_cache_never_keeps_a_stale_or_finished_run() {
    let store = SqliteStore::open_in_memory().unwrap();
    let workflow = chain(3);
    let run = run_steps(&store, &workflow, "run-b", 1).await;
    let stale = run.clone();
    // Another writer (an operator request that read from disk) commits the next version.
    let (newer, _) = step(&store, &workflow, "run-b", Input::Step { node_id: "n1".into(), activation: 1 }).await;
    store.retain_run(stale);
    assert_eq!(store.hot.len(), 0, "an older version is not kept");
    assert_eq!(store.take_run("run-b").await.unwrap().unwrap(), newer);
    store.retain_run(newer);
    let (finished, _) = step(&store, &workflow, "run-b", Input::Step { node_id: "n2".into(), activation: 1 }).await;
    assert_eq!(finished.status, RunStatus::Completed);
    store.retain_run(finished.clone());
    assert_eq!(store.hot.len(), 0, "a finished run is not kept");
    let summary = store.load_run_summary("run-b").await.unwrap().unwrap();
    assert!(summary.nodes.is_empty(), "a finished run's summary reads no node rows");
    assert_eq!((summary.status, &summary.variables), (RunStatus::Completed, &finished.variables));
}

#[tokio::test]
async fn a_run_parked_on_a_person_is_not_kept() {
    let store = SqliteStore::open_in_memory().unwrap();
    let workflow = Workflow::compile(json!({"id": "gate", "name": "gate",
        "nodes": [{"id": "n0", "typeId": "core.approvalGate", "config": {"actions": ["accept", "reject"]}}]}))
    .unwrap();
    let run = run_steps(&store, &workflow, "run-gate", 0).await;
    assert_eq!(run.status, RunStatus::Running, "started, its gate scheduled");
    store.retain_run(run);
    assert_eq!(store.hot.len(), 1, "a step is on its way");
    let (parked, _) = step(&store, &workflow, "run-gate", Input::Step { node_id: "n0".into(), activation: 1 }).await;
    assert_eq!(parked.status, RunStatus::WaitingApproval);
    store.retain_run(parked);
    assert_eq!(store.hot.len(), 0, "waiting for a person: read from disk when it moves");
}
