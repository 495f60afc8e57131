//! Contract check for a parallel fan-out's records: the per-child slot records (`<nodeId>#<k>`)
//! a store may keep apart from the run's other state survive every commit as written, and
//! a record a commit removes is gone, whether the commit tracked its changes or not.

use std::sync::Arc;

use serde_json::json;

use crate::ports::Store;
use crate::run::{Changes, FanOutProgress, NodeState, NodeStatus, RunState};

fn slot(child: &str) -> NodeState {
    serde_json::from_value(json!({"status": "waiting-child", "activation": 1, "childRunId": child,
                                  "childWorkflowId": "kid"}))
    .expect("a slot record")
}

fn progress(started: u32, running: u32, completed: u32) -> FanOutProgress {
    FanOutProgress { total: 3, width: 3, started, running, completed, failed: 0, cancelled: 0, decision: None }
}

fn touched(keys: &[&str]) -> Changes {
    Changes { nodes: keys.iter().map(|key| (*key).to_owned()).collect(), ..Changes::default() }
}

/// Commits `run` at the next version with `changes` (all of them when `None`) and checks
/// that the store reads back exactly that state.
async fn commit_and_reload(store: &Arc<dyn Store>, run: &mut RunState, changes: Option<Changes>) {
    let expected = run.version;
    run.version += 1;
    match changes {
        Some(changes) => store.commit_changes(run, expected, &changes, &[], &[]).await.unwrap(),
        None => store.commit(run, expected, &[], &[]).await.unwrap(),
    }
    let loaded = store.load_run(&run.run_id).await.unwrap().expect("the run exists");
    assert_eq!(&loaded, run, "version {}: the state read is the state committed", run.version);
}

/// A fan-out's node and slot records round-trip through tracked commits, an untracked
/// commit drops a record it no longer has, and after the join no slot record is left.
pub(super) async fn fan_out_records_round_trip(store: Arc<dyn Store>) {
    let (_, mut run) = super::started(&store, "run-fan").await;
    let mut node: NodeState =
        serde_json::from_value(json!({"status": "waiting-child", "activation": 1})).expect("a node record");
    node.fan_out = Some(progress(3, 3, 0));
    run.nodes.insert("b".into(), node);
    for k in 0..3 {
        run.nodes.insert(format!("b#{k}"), slot(&format!("run-kid-{k}")));
    }
    commit_and_reload(&store, &mut run, Some(touched(&["b", "b#0", "b#1", "b#2"]))).await;
    // A child ends: its slot and the counters change.
    let ended = run.nodes.get_mut("b#1").expect("slot 1");
    (ended.status, ended.merge) = (NodeStatus::Completed, Some(0));
    ended.outputs.insert("x".into(), json!(1));
    run.nodes.get_mut("b").expect("node b").fan_out = Some(progress(3, 2, 1));
    commit_and_reload(&store, &mut run, Some(touched(&["b", "b#1"]))).await;
    // A commit that tracks nothing writes every record, and a record it lacks is gone.
    run.nodes.remove("b#2");
    commit_and_reload(&store, &mut run, None).await;
    assert!(!run.nodes.contains_key("b#2"));
    // The join: the slot records go, the node completes.
    run.nodes.retain(|key, _| !key.starts_with("b#"));
    let joined = run.nodes.get_mut("b").expect("node b");
    (joined.status, joined.fan_out) = (NodeStatus::Completed, None);
    commit_and_reload(&store, &mut run, Some(touched(&["b", "b#0", "b#1"]))).await;
    let loaded = store.load_run("run-fan").await.unwrap().expect("the run exists");
    assert!(loaded.nodes.keys().all(|key| !key.contains('#')), "no slot record after the join: {loaded:?}");
}
