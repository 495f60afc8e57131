//! The workflows (a 10-node `core.noop` chain, a 10-node chain of `core.http.request` GETs,
//! one slow GET) and the two ways of driving them: N clients each running runs back to
//! back, and a burst of runs created at once. `trellis-bench-ai` builds its model-call
//! chains with [`chain`] and reads its burst's runs with [`burst_outcomes`].

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::host::KEY;

/// A chain of `length` nodes built by `node(i)`.
pub(crate) fn chain(id: &str, length: usize, node: impl Fn(usize) -> Value) -> Value {
    let nodes: Vec<Value> = (0..length).map(node).collect();
    let edges: Vec<Value> = (1..length)
        .map(|i| json!({"id": format!("e{i}"), "sourceNodeId": format!("n{}", i - 1), "targetNodeId": format!("n{i}")}))
        .collect();
    json!({"id": id, "name": id, "nodes": nodes, "edges": edges})
}

/// `length` `core.noop` nodes in a row.
pub(crate) fn noop_chain(id: &str, length: usize) -> Value {
    chain(id, length, |i| json!({"id": format!("n{i}"), "typeId": "core.noop"}))
}

/// `length` `core.http.request` GETs of `url` in a row (no retries: one attempt each).
pub(crate) fn http_chain(id: &str, length: usize, url: &str) -> Value {
    chain(
        id,
        length,
        |i| json!({"id": format!("n{i}"), "typeId": "core.http.request", "config": {"url": url, "timeoutMs": 10_000}}),
    )
}

/// How one run went.
pub(crate) use crate::follow::Followed as Outcome;

/// Creates one run of `workflow` and long-polls its events until the terminal page.
async fn one_run(http: &reqwest::Client, base: &str, workflow: &str) -> Outcome {
    crate::follow::follow_run(http, base, KEY, workflow, None)
        .await
        .unwrap_or_else(|error| panic!("trellis-bench: {error}"))
}

/// What a set of runs measured.
pub(crate) struct Figures {
    /// Runs driven.
    pub(crate) runs: usize,
    /// Runs that ended `completed`.
    pub(crate) completed: usize,
    /// First create sent to last terminal read.
    pub(crate) wall: Duration,
    /// First create sent to last create answered.
    pub(crate) creates: Duration,
    /// Create → terminal per run, sorted.
    pub(crate) latencies: Vec<Duration>,
}

impl Figures {
    /// The figures of these runs.
    pub(crate) fn of(outcomes: Vec<Outcome>) -> Self {
        let first = outcomes.iter().map(|o| o.sent).min();
        let since_first = |last: Option<Instant>| first.zip(last).map_or(Duration::ZERO, |(first, last)| last - first);
        let wall = since_first(outcomes.iter().map(|o| o.terminal).max());
        let creates = since_first(outcomes.iter().map(|o| o.created).max());
        let completed = outcomes.iter().filter(|o| o.status == "completed").count();
        let mut latencies: Vec<Duration> = outcomes.iter().map(|o| o.terminal - o.sent).collect();
        latencies.sort();
        Self { runs: outcomes.len(), completed, wall, creates, latencies }
    }

    /// The `p` quantile of the latencies (0 when there are none).
    pub(crate) fn percentile(&self, p: f64) -> Duration {
        if self.latencies.is_empty() {
            return Duration::ZERO;
        }
        let index = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        self.latencies[index.min(self.latencies.len() - 1)]
    }
}

/// `clients` clients, each running `runs / clients` (rounded up) runs back to back.
pub(crate) async fn clients(base: &str, workflow: &str, clients: usize, runs: usize) -> Figures {
    let http = reqwest::Client::new();
    let per_client = runs.div_ceil(clients.max(1));
    let tasks: Vec<_> = (0..clients.max(1))
        .map(|_| {
            let (http, base, workflow) = (http.clone(), base.to_owned(), workflow.to_owned());
            tokio::spawn(async move {
                let mut outcomes = Vec::with_capacity(per_client);
                for _ in 0..per_client {
                    outcomes.push(one_run(&http, &base, &workflow).await);
                }
                outcomes
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.extend(task.await.expect("client task"));
    }
    Figures::of(outcomes)
}

/// `runs` runs created at once, each by its own task, each followed to its terminal event.
pub(crate) async fn burst(base: &str, workflow: &str, runs: usize) -> Figures {
    Figures::of(burst_outcomes(base, workflow, runs).await)
}

/// [`burst`]'s runs, one outcome each.
pub(crate) async fn burst_outcomes(base: &str, workflow: &str, runs: usize) -> Vec<Outcome> {
    let http = reqwest::Client::new();
    let tasks: Vec<_> = (0..runs)
        .map(|_| {
            let (http, base, workflow) = (http.clone(), base.to_owned(), workflow.to_owned());
            tokio::spawn(async move { one_run(&http, &base, &workflow).await })
        })
        .collect();
    let mut outcomes = Vec::with_capacity(runs);
    for task in tasks {
        outcomes.push(task.await.expect("burst task"));
    }
    outcomes
}
