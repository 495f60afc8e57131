//! The worker's side of the activity model, through the embedded loop over SQLite: progress
//! reports are committed for the current attempt, a silent attempt is cut off by its
//! heartbeat watchdog (and retried), an executor that ignores its budget is cut off by the
//! worker's bound.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use trellis_core::activity::{Activity, ActivityCall, ActivityResult, Progress, ProgressSink};
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::limits::HostLimits;
use trellis_core::nodes::{NodeContext, NodeRegistry};
use trellis_core::ports::{IdGenerator, GLOBAL_NAMESPACE};
use trellis_core::run::{Principal, RunError};
use trellis_core::service::{Ports, Services};
use trellis_core::{RunEvent, RunState, RunStatus};
use trellis_store_sqlite::SqliteStore;
use trellis_worker::{run_loop, LocalNotifier, SystemClock, WorkerOptions};

/// How a test activity behaves.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// Reports five heartbeats 20 ms apart, then succeeds.
    Beats,
    /// Never returns and never reports.
    Silent,
}

#[derive(Debug)]
struct TestActivity {
    behaviour: Behaviour,
    attempts: AtomicU32,
}

#[async_trait]
impl Activity for TestActivity {
    fn type_id(&self) -> &'static str {
        "test.worker"
    }
    fn check(&self, _node_id: &str, _config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        Ok(())
    }
    fn attempt_timeout_ms(&self, config: &Map<String, Value>) -> u64 {
        config.get("timeoutMs").and_then(Value::as_u64).unwrap_or(10_000)
    }
    fn prepare(&self, _context: &NodeContext<'_>) -> Result<Value, RunError> {
        Ok(json!({}))
    }
    async fn execute(&self, call: &ActivityCall, progress: &dyn ProgressSink) -> ActivityResult {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        match self.behaviour {
            Behaviour::Beats => {
                for done in 1..=5 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    progress.report(Progress::Heartbeat { details: json!({ "done": done }) }).await;
                }
                Ok(Map::from_iter([("attempt".to_owned(), json!(call.attempt))]))
            }
            Behaviour::Silent => {
                tokio::time::sleep(Duration::from_secs(3_600)).await;
                Ok(Map::new())
            }
        }
    }
}

struct OneId;
impl IdGenerator for OneId {
    fn run_id(&self) -> String {
        "run-activity".to_owned()
    }
}

/// Runs a one-node workflow of the test activity with `settings` and `config` to its end.
async fn run(behaviour: Behaviour, settings: Value, config: Value) -> (RunState, Vec<RunEvent>, u32) {
    let sqlite = Arc::new(SqliteStore::open_in_memory().unwrap());
    let notifier = Arc::new(LocalNotifier::default());
    let ports = Ports {
        store: sqlite.clone(),
        effects: sqlite.clone(),
        clock: Arc::new(SystemClock),
        ids: Arc::new(OneId),
        notifier: notifier.clone(),
    };
    let activity = Arc::new(TestActivity { behaviour, attempts: AtomicU32::new(0) });
    let services = Arc::new(
        Services::new(ports, HostLimits::default()).with_nodes(NodeRegistry::new().register(activity.clone())),
    );
    let node = json!({"id": "call", "typeId": "test.worker", "settings": settings, "config": config});
    services.put_workflow(GLOBAL_NAMESPACE, json!({"id": "one", "name": "one", "nodes": [node]})).await.unwrap();
    let principal =
        Principal { tenant: "t".into(), subject: "s".into(), key_class: "api-key".into(), test_scope: false };
    let respond = |_: &RunState| (201, json!({}));
    services.create_run(&principal, &json!({"workflowId": "one"}), None, &respond).await.unwrap();

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let options = WorkerOptions { idle_poll: Duration::from_millis(20), ..WorkerOptions::default() };
    let worker = tokio::spawn(run_loop(services.clone(), sqlite.clone(), notifier, options, stopped));
    let started = Instant::now();
    let run = loop {
        let run = services.get_run("t", "run-activity").await.unwrap();
        if run.status.is_terminal() {
            break run;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the run never ended: {:?}", run.status);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.send(true).unwrap();
    worker.await.unwrap();
    let (_, events) = services.events("t", "run-activity", None, 1000).await.unwrap();
    (run, events, activity.attempts.load(Ordering::SeqCst))
}

fn types(events: &[RunEvent]) -> Vec<&str> {
    events.iter().map(|event| event.event_type.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_are_committed_for_the_current_attempt_and_keep_a_watched_attempt_alive() {
    // heartbeatMs 500: five beats 20 ms apart keep the attempt alive.
    let (run, events, attempts) = run(Behaviour::Beats, json!({"timeouts": {"heartbeatMs": 500}}), json!({})).await;
    assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    assert_eq!(attempts, 1);
    let beats: Vec<&RunEvent> = events.iter().filter(|e| e.event_type == "trellis.activity.heartbeat").collect();
    assert_eq!(beats.len(), 5, "{:?}", types(&events));
    assert_eq!(beats[4].payload["details"], json!({"done": 5}));
    assert_eq!(beats[0].payload["attempt"], 0);
    assert_eq!(run.variables["call"], json!({"attempt": 0}));
    let sequences: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (0..events.len() as u64).collect::<Vec<_>>(), "contiguous, no event twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_attempt_is_cut_off_by_its_heartbeat_timeout_and_retried() {
    let settings = json!({"timeouts": {"heartbeatMs": 100}, "retry": {"maxAttempts": 2, "initialIntervalMs": 0}});
    let (run, events, attempts) = run(Behaviour::Silent, settings, json!({})).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(attempts, 2, "the heartbeat timeout is retryable");
    let retried = events.iter().find(|e| e.event_type == "node.retried").expect("a retry");
    assert_eq!(retried.payload["lastError"]["code"], "heartbeat_timeout");
    let failed = events.iter().find(|e| e.event_type == "node.failed").unwrap();
    assert_eq!(
        (failed.payload["error"]["code"].as_str(), failed.payload["attempts"].as_u64()),
        (Some("heartbeat_timeout"), Some(2))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_that_ignores_its_budget_is_cut_off_by_the_worker() {
    // The kind's own budget is 200 ms; the worker gives it that plus its grace, then fails
    // the attempt with node_timeout (retryable, but no retry policy here).
    let (run, events, attempts) = run(Behaviour::Silent, json!({}), json!({"timeoutMs": 200})).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(attempts, 1);
    let failed = events.iter().find(|e| e.event_type == "node.failed").unwrap();
    assert_eq!(failed.payload["error"]["code"], "node_timeout");
    assert_eq!(failed.payload["error"]["details"]["timeoutMs"], 200);
}
