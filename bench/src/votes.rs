//! `trellis-bench-votes`: the cost of one vote on an approval gate as the votes on it pile
//! up, through the use case (`Services::resolve_interrupt`) on a durable SQLite file (WAL,
//! synchronous commits). Prints the latency of the votes around each checkpoint and the
//! store rows they touched; asserts nothing (the constant-work property is the test
//! `store-sqlite/tests/vote_cost.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::Parser;
use serde_json::json;
use trellis_core::engine::Input;
use trellis_core::interrupt::{Resolution, Resolver};
use trellis_core::limits::HostLimits;
use trellis_core::model::content_hash;
use trellis_core::ports::{Clock, IdGenerator, Notifier, StoredWorkflow, WorkflowStore, GLOBAL_NAMESPACE};
use trellis_core::service::{Ports, Services};
use trellis_core::timefmt::Millis;
use trellis_store_sqlite::SqliteStore;

/// Vote latency on one gate as votes accumulate.
#[derive(Debug, Parser)]
#[command(name = "trellis-bench-votes")]
struct Args {
    /// Votes to cast on the gate.
    #[arg(long, default_value_t = 10_000)]
    votes: usize,
    /// Votes timed around each checkpoint (10 and the last).
    #[arg(long, default_value_t = 10)]
    window: usize,
}

struct Ticking(AtomicU64);
impl Clock for Ticking {
    fn now(&self) -> Millis {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

struct OneId;
impl IdGenerator for OneId {
    fn run_id(&self) -> String {
        "run-votes".to_owned()
    }
}

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

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(SqliteStore::open(&dir.path().join("votes.db")).expect("store"));
    let document = json!({
        "id": "many-votes", "name": "Many votes",
        "nodes": [{"id": "gate", "typeId": "core.approvalGate", "config": {"requiredApprovals": 1_000_000}}]
    });
    let stored = StoredWorkflow {
        namespace: GLOBAL_NAMESPACE.into(),
        workflow_id: "many-votes".into(),
        version: "1".into(),
        content_hash: content_hash(&document),
        document,
    };
    store.put_workflow(&stored, 0).await.expect("workflow");
    let ports = Ports {
        store: store.clone(),
        effects: store.clone(),
        clock: Arc::new(Ticking(AtomicU64::new(10))),
        ids: Arc::new(OneId),
        notifier: Arc::new(Quiet),
    };
    let services = Services::new(ports, HostLimits::default());
    let principal = trellis_core::run::Principal {
        tenant: "t".into(),
        subject: "bench".into(),
        key_class: "api-key".into(),
        test_scope: false,
    };
    let respond = |_: &trellis_core::RunState| (201, json!({}));
    services.create_run(&principal, &json!({"workflowId": "many-votes"}), None, &respond).await.expect("run");
    let step = Input::Step { node_id: "gate".into(), activation: 1 };
    let decision = services.decide("run-votes", step).await.expect("decide").expect("the run");
    services.commit(&decision).await.expect("suspended at the gate");
    // Windows of `window` votes centred on vote 10 and on the last vote.
    let starts: Vec<usize> = [10, args.votes]
        .iter()
        .map(|&at| at.saturating_sub(args.window / 2).max(1).min(args.votes + 1 - args.window))
        .collect();
    let mut timed: Vec<(usize, Duration, trellis_store_sqlite::RowUsage)> = Vec::new();
    let mut window: Option<(usize, Instant, trellis_store_sqlite::RowUsage)> = None;
    for voter in 1..=args.votes {
        if starts.contains(&voter) {
            window = Some((voter, Instant::now(), store.usage()));
        }
        let resolution = Resolution {
            node_id: "gate".into(),
            interrupt_id: None,
            value: json!({"action": "accept", "voter": format!("voter-{voter:06}")}),
            resolver: Resolver::Principal("bench".into()),
            prior_vote: None,
        };
        services.resolve_interrupt(Some("t"), "run-votes", resolution).await.expect("vote");
        if let Some((from, started, usage)) = window {
            if voter + 1 - from == args.window {
                timed.push((from, started.elapsed() / (voter + 1 - from) as u32, store.usage().since(&usage)));
                window = None;
            }
        }
    }
    println!("votes on one gate (durable SQLite, through Services::resolve_interrupt):");
    for (from, latency, usage) in timed {
        let count = args.window as u64;
        println!(
            "  votes {from}..{}: {:.2} ms per vote; per vote {} rows read, {} rows written, {} B read, {} B written",
            from + args.window - 1,
            latency.as_secs_f64() * 1000.0,
            usage.rows_read / count,
            usage.rows_written / count,
            usage.bytes_read / count,
            usage.bytes_written / count
        );
    }
}
