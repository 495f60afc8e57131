//! A local receiver for callback notifies (`docs/callbacks.md`): a [`TestServer`] on
//! 127.0.0.1 that answers the scripted replies on one path and hands the test each task it
//! was sent (the JSON body: `token`, `interruptId`, `attempt`, …), for either backend.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::http_server::{Reply, SeenRequest, TestServer};

/// The path notifies are posted to.
pub const HOOK_PATH: &str = "/hook";

/// The callback suites' workflow: `wait` (an external-event interrupt with `settings` and
/// `timeoutMs`) → `ok`, and `wait` → `handler` when it fails.
pub fn external_job_workflow(id: &str, settings: Value, timeout_ms: u64) -> Value {
    json!({"id": id, "name": id, "nodes": [
        {"id": "wait", "typeId": "core.interrupt", "settings": settings, "config": {"kind": "external-event",
            "data": {"eventType": "job.done", "correlation": {"job": "j-1"}}, "timeoutMs": timeout_ms}},
        {"id": "ok", "typeId": "core.noop"},
        {"id": "handler", "typeId": "core.noop"}
    ], "edges": [
        {"id": "e1", "sourceNodeId": "wait", "targetNodeId": "ok"},
        {"id": "e2", "sourceNodeId": "wait", "targetNodeId": "handler", "triggerRule": "any_failed"}
    ]})
}

/// A notify receiver.
pub struct CallbackReceiver {
    server: TestServer,
}

impl CallbackReceiver {
    /// A receiver answering `replies` in turn (the last one repeating; `[]` means `200`).
    pub async fn start(replies: Vec<Reply>) -> Self {
        let server = TestServer::start().await;
        let replies = if replies.is_empty() { vec![Reply::status(200)] } else { replies };
        server.route(HOOK_PATH, replies);
        Self { server }
    }

    /// The URL to give as `callbackUrl` or `settings.notifyUrl`.
    pub fn url(&self) -> String {
        self.server.url(HOOK_PATH)
    }

    /// Every notify request seen, in order (failed answers included).
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.server.requests_to(HOOK_PATH)
    }

    /// The bodies of every notify seen, in order.
    pub fn tasks(&self) -> Vec<Value> {
        self.requests().iter().map(SeenRequest::json).collect()
    }

    /// Waits until at least `count` notifies arrived (polling every 20 ms) and returns them;
    /// panics after `within`.
    pub async fn wait_for(&self, count: usize, within: Duration) -> Vec<Value> {
        let until = Instant::now() + within;
        loop {
            let tasks = self.tasks();
            if tasks.len() >= count {
                return tasks;
            }
            assert!(Instant::now() < until, "{count} notifies expected within {within:?}, got {}", tasks.len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
