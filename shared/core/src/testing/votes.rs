//! One approval gate that never closes, for measuring what a vote costs as votes pile up:
//! the vote-cost test of the SQLite store and the `trellis-bench-votes` bench share it.
//! [`services`] wires a store to the use cases with a ticking clock, one run id
//! ([`GATE_RUN_ID`]) and a notifier that never wakes anyone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use crate::interrupt::{Resolution, Resolver};
use crate::limits::HostLimits;
use crate::model::content_hash;
use crate::ports::{Clock, EffectSink, IdGenerator, Notifier, Store, StoredWorkflow, GLOBAL_NAMESPACE};
use crate::service::{Ports, Services};
use crate::timefmt::Millis;

/// The id of the gate's run.
pub const GATE_RUN_ID: &str = "run-votes";

/// The workflow `many-votes`: one `core.approvalGate` node `gate` needing a million approvals.
pub fn gate_workflow() -> StoredWorkflow {
    let document = json!({
        "id": "many-votes", "name": "Many votes",
        "nodes": [{"id": "gate", "typeId": "core.approvalGate", "config": {"requiredApprovals": 1_000_000}}]
    });
    StoredWorkflow {
        namespace: GLOBAL_NAMESPACE.into(),
        workflow_id: "many-votes".into(),
        version: "1".into(),
        content_hash: content_hash(&document),
        document,
    }
}

/// An accepting vote on `gate` by the new voter number `voter`.
pub fn vote(voter: usize) -> Resolution {
    Resolution {
        node_id: "gate".into(),
        interrupt_id: None,
        value: json!({"action": "accept", "voter": format!("voter-{voter:06}")}),
        resolver: Resolver::Principal("bench".into()),
        prior_vote: None,
    }
}

/// The use cases over `store` (also the effect sink), with default limits.
pub fn services<S: Store + EffectSink + 'static>(store: Arc<S>) -> Services {
    let ports = Ports {
        store: store.clone(),
        effects: store,
        clock: Arc::new(Ticking(AtomicU64::new(10))),
        ids: Arc::new(GateRunId),
        notifier: Arc::new(Quiet),
    };
    Services::new(ports, HostLimits::default())
}

/// A clock one millisecond later at every reading.
struct Ticking(AtomicU64);
impl Clock for Ticking {
    fn now(&self) -> Millis {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Every run is [`GATE_RUN_ID`].
struct GateRunId;
impl IdGenerator for GateRunId {
    fn run_id(&self) -> String {
        GATE_RUN_ID.to_owned()
    }
}

/// Wakes no one; a wait is a sleep.
struct Quiet;
#[async_trait]
impl Notifier for Quiet {
    fn committed(&self, _run_id: &str) {}
    fn generation(&self) -> u64 {
        0
    }
    async fn wait(&self, _seen: u64, timeout: Duration) {
        tokio::time::sleep(timeout).await;
    }
}
