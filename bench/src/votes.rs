//! `trellis-bench-votes`: the cost of one vote on an approval gate as the votes on it pile
//! up, through the use case (`Services::resolve_interrupt`) on a durable SQLite file (WAL,
//! synchronous commits). Prints the latency of the votes around each checkpoint and the
//! store rows they touched; asserts nothing (the constant-work property is the test
//! `store-sqlite/tests/vote_cost.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;
use trellis_core::engine::Input;
use trellis_core::ports::WorkflowStore;
use trellis_core::testing::votes::{self, GATE_RUN_ID};
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

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(SqliteStore::open(&dir.path().join("votes.db")).expect("store"));
    store.put_workflow(&votes::gate_workflow(), 0).await.expect("workflow");
    let services = votes::services(store.clone());
    let principal = trellis_core::run::Principal {
        tenant: "t".into(),
        subject: "bench".into(),
        key_class: "api-key".into(),
        test_scope: false,
    };
    let respond = |_: &trellis_core::RunState| (201, json!({}));
    services.create_run(&principal, &json!({"workflowId": "many-votes"}), None, &respond).await.expect("run");
    let step = Input::Step { node_id: "gate".into(), activation: 1 };
    let noop = trellis_core::service::NoHooks;
    services.advance(None, GATE_RUN_ID, step, &noop).await.expect("suspended at the gate").expect("the run");
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
        services.resolve_interrupt(Some("t"), GATE_RUN_ID, votes::vote(voter)).await.expect("vote");
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
