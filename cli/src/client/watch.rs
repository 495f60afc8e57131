//! `trellis runs watch` (and `runs start --watch`): the run's snapshot and its workflow's node
//! list, then its event stream (and the streams of its child runs) turned into [`Change`]s,
//! shown live on a terminal (indicatif: a header, a progress bar over the nodes, one line per
//! started node, the command that answers a pending interrupt, child runs indented under their
//! node) or as plain lines when standard output is not a terminal (no escape codes).

use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use tokio::sync::mpsc;

use super::events::{error_text, seconds, EventStream};
use super::exit::{is_terminal, ClientError, Exit};
use super::http::{encode, Api};
use super::interrupts::answer_command;
use super::output::{clock, print_json_line, say, text, Out};

/// One thing that happened, as the views show it.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// The run (or a child run) is now in `status`.
    Run {
        /// The run.
        run_id: String,
        /// The parent's node of a child run.
        parent_node: Option<String>,
        /// Its status.
        status: String,
        /// An error's `code: message`, for a failed run.
        detail: Option<String>,
    },
    /// A node is now in `status`.
    Node {
        /// The node id (`parent/child` for a child run's node).
        path: String,
        /// Its status: running, completed, failed, skipped, waiting-…
        status: String,
        /// How long it ran, once finished.
        duration_ms: Option<u64>,
        /// A failure's `code: message`.
        detail: Option<String>,
    },
    /// An interrupt is pending at `node` of `run_id`.
    Interrupt {
        /// The run (parent or child) holding it.
        run_id: String,
        /// Its node.
        node: String,
        /// Its kind (approval, clarification, …).
        kind: String,
    },
    /// The interrupt at `node` was resolved.
    Resolved {
        /// Its node.
        node: String,
        /// The outcome, when the event names one.
        outcome: Option<String>,
    },
}

/// Where a watched run (parent or child) stands.
#[derive(Debug, Default)]
struct RunState {
    /// The parent's node of a child run.
    parent_node: Option<String>,
    /// Node id → status.
    nodes: HashMap<String, String>,
}

/// The state of the whole watch: the parent run and each followed child.
#[derive(Debug)]
pub struct Watch {
    root: String,
    runs: HashMap<String, RunState>,
    /// Child runs to follow, found since the last call of [`Watch::take_children`].
    new_children: Vec<String>,
    /// The root run's final status, once its terminal event was read.
    pub final_status: Option<String>,
    /// The root run's duration, from its terminal event.
    pub final_duration_ms: Option<u64>,
}

/// The waiting status a suspended node shows (the engine's mapping; input for a kind it
/// does not know).
fn waiting_status(kind: &str) -> String {
    super::events::waiting_status(kind).unwrap_or("waiting-input").to_owned()
}

impl Watch {
    /// A watch of `root`.
    pub fn new(root: &str) -> Self {
        let mut runs = HashMap::new();
        runs.insert(root.to_owned(), RunState::default());
        Self { root: root.to_owned(), runs, new_children: Vec::new(), final_status: None, final_duration_ms: None }
    }

    /// Child runs found and not yet handed out.
    pub fn take_children(&mut self) -> Vec<String> {
        std::mem::take(&mut self.new_children)
    }

    /// Applies one event of `run_id`; the changes it makes.
    pub fn apply(&mut self, run_id: &str, event: &Value) -> Vec<Change> {
        let kind = event["type"].as_str().unwrap_or("");
        let payload = &event["payload"];
        let node = event["nodeId"].as_str().or(payload["nodeId"].as_str()).unwrap_or("").to_owned();
        let Some(run) = self.runs.get_mut(run_id) else { return Vec::new() };
        let parent_node = run.parent_node.clone();
        let path = match &parent_node {
            Some(parent) => format!("{parent}/{node}"),
            None => node.clone(),
        };
        let mut changes = Vec::new();
        let mut node_change = |run: &mut RunState, status: &str, duration_ms, detail| {
            run.nodes.insert(node.clone(), status.to_owned());
            changes.push(Change::Node { path: path.clone(), status: status.to_owned(), duration_ms, detail });
        };
        match kind {
            "node.started" => node_change(run, "running", None, None),
            "node.resumed" => node_change(run, "resumed", None, None),
            "node.completed" => node_change(run, "completed", payload["durationMs"].as_u64(), None),
            "node.failed" => {
                node_change(run, "failed", payload["durationMs"].as_u64(), Some(error_text(&payload["error"])))
            }
            "node.skipped" => node_change(run, "skipped", None, None),
            "node.cancelled" => node_change(run, "cancelled", None, None),
            "node.suspended" => node_change(run, &waiting_status(payload["kind"].as_str().unwrap_or("")), None, None),
            "interrupt.requested" => changes.push(Change::Interrupt {
                run_id: run_id.to_owned(),
                node: node.clone(),
                kind: payload["kind"].as_str().unwrap_or("input").to_owned(),
            }),
            "interrupt.resolved" => changes
                .push(Change::Resolved { node: path.clone(), outcome: payload["outcome"].as_str().map(str::to_owned) }),
            _ => {}
        }
        let status = match kind {
            "run.started" | "run.resumed" => Some("running"),
            "run.paused" => Some("paused"),
            "run.completed" => Some("completed"),
            "run.failed" => Some("failed"),
            "run.cancelled" => Some("cancelled"),
            _ => None,
        };
        if let Some(status) = status {
            let detail = (status == "failed").then(|| error_text(&payload["error"])).filter(|text| !text.is_empty());
            changes.push(Change::Run { run_id: run_id.to_owned(), parent_node, status: status.to_owned(), detail });
            if run_id == self.root && is_terminal(status) {
                self.final_status = Some(status.to_owned());
                self.final_duration_ms = payload["durationMs"].as_u64();
            }
        }
        // A node whose event names a child run: follow the child (once).
        if let Some(child) = payload["childRunId"].as_str().filter(|_| kind.starts_with("node.")) {
            if !self.runs.contains_key(child) && !node.is_empty() {
                self.runs.insert(child.to_owned(), RunState { parent_node: Some(path), ..RunState::default() });
                self.new_children.push(child.to_owned());
            }
        }
        changes
    }

    /// Finished nodes of the root run (completed, skipped or failed) and nodes seen.
    fn progress(&self) -> (usize, usize) {
        let nodes = &self.runs[&self.root].nodes;
        let finished =
            nodes.values().filter(|status| matches!(status.as_str(), "completed" | "skipped" | "failed")).count();
        (finished, nodes.len())
    }
}

/// One change as a plain line (without the time prefix).
pub fn line(change: &Change) -> String {
    match change {
        Change::Run { run_id, parent_node: None, status, detail } => match detail {
            Some(detail) => format!("run {run_id} {status}: {detail}"),
            None => format!("run {run_id} {status}"),
        },
        Change::Run { run_id, parent_node: Some(node), status, detail } => match detail {
            Some(detail) => format!("child {run_id} of {node} {status}: {detail}"),
            None => format!("child {run_id} of {node} {status}"),
        },
        Change::Node { path, status, detail, .. } => match (status.as_str(), detail) {
            ("running", _) => format!("node {path} started"),
            ("resumed", _) => format!("node {path} resumed"),
            (_, Some(detail)) if !detail.is_empty() => format!("node {path} {status}: {detail}"),
            _ => format!("node {path} {status}"),
        },
        Change::Interrupt { run_id, node, kind } => {
            format!("interrupt {node} {kind} pending — answer: {}", answer_command(run_id, node, kind))
        }
        Change::Resolved { node, outcome: Some(outcome) } => format!("interrupt {node} resolved ({outcome})"),
        Change::Resolved { node, outcome: None } => format!("interrupt {node} resolved"),
    }
}

/// How long ago an RFC 3339 timestamp was (`None` when absent or unreadable).
fn since(timestamp: Option<&str>) -> Option<Duration> {
    let started = time::OffsetDateTime::parse(timestamp?, &time::format_description::well_known::Rfc3339).ok()?;
    Duration::try_from(time::OffsetDateTime::now_utc() - started).ok()
}

/// Follows `run_id`'s events into `sender` (ending with its `None` or error).
fn follow(api: &Api, run_id: &str, sender: mpsc::UnboundedSender<(String, Result<Option<Value>, ClientError>)>) {
    let mut stream = EventStream::new(api.clone(), run_id, None);
    tokio::spawn(async move {
        loop {
            let item = stream.next().await;
            let last = !matches!(item, Ok(Some(_)));
            if sender.send((stream.run_id().to_owned(), item)).is_err() || last {
                return;
            }
        }
    });
}

/// Watches `run_id` to its end; the exit code of its final status.
pub async fn watch(api: &Api, out: Out, run_id: &str) -> Result<Exit, ClientError> {
    let run = api.get(&format!("/v1/runs/{}", encode(run_id))).await?;
    let workflow_id = text(&run, "workflowId");
    let total = match api.get(&format!("/v1/workflows/{}", encode(&workflow_id))).await {
        Ok(definition) => definition["nodes"].as_array().map_or(0, Vec::len),
        Err(_) => 0,
    };
    let mut view = if std::io::stdout().is_terminal() && !out.json() {
        View::Live(Live::new(run_id, &workflow_id, total, since(run["startedAt"].as_str())))
    } else {
        View::Lines { json: out.json() }
    };
    let mut state = Watch::new(run_id);
    let (sender, mut receiver) = mpsc::unbounded_channel();
    follow(api, run_id, sender.clone());
    // Streams still open (the root's and its followed children's). Once the root ended, each
    // child's stream is read to its own end (its terminal event: a child of an ended parent
    // has ended, or ends soon), however loaded the machine; CHILD_DRAIN only bounds a child
    // that never ends.
    let mut open = 1usize;
    let mut drain_until: Option<tokio::time::Instant> = None;
    while open > 0 {
        let next = match drain_until {
            Some(deadline) => match tokio::time::timeout_at(deadline, receiver.recv()).await {
                Ok(next) => next,
                Err(_) => break,
            },
            None => receiver.recv().await,
        };
        let Some((source, item)) = next else { break };
        match item {
            Ok(Some(event)) => {
                let changes = state.apply(&source, &event);
                view.show(&event, &changes, &state);
                for child in state.take_children() {
                    open += 1;
                    follow(api, &child, sender.clone());
                }
            }
            Err(error) if source == run_id => {
                view.abandon();
                return Err(error);
            }
            // A stream ended (a child's may fail: the parent's events still tell its outcome).
            Ok(None) | Err(_) => {
                open -= 1;
                if source == run_id {
                    drain_until = Some(tokio::time::Instant::now() + CHILD_DRAIN);
                }
            }
        }
    }
    let status = match state.final_status.clone() {
        Some(status) => status,
        None => text(&api.get(&format!("/v1/runs/{}", encode(run_id))).await?, "status"),
    };
    view.finish(run_id, &status, state.final_duration_ms);
    Ok(Exit::for_status(&status))
}

/// How the changes are shown.
enum View {
    /// Plain lines (or, with `--output json`, each event as one JSON line).
    Lines {
        /// Print the events as NDJSON instead.
        json: bool,
    },
    /// The live terminal view.
    Live(Live),
}

impl View {
    fn show(&mut self, event: &Value, changes: &[Change], state: &Watch) {
        match self {
            Self::Lines { json: true } => print_json_line(event),
            Self::Lines { json: false } => {
                let time = clock(event["timestamp"].as_str().unwrap_or(""));
                for change in changes {
                    say!("{time} {}", line(change));
                }
            }
            Self::Live(live) => changes.iter().for_each(|change| live.show(change, state)),
        }
    }

    fn abandon(&mut self) {
        if let Self::Live(live) = self {
            live.finish("stopped", None);
        }
    }

    fn finish(&mut self, run_id: &str, status: &str, duration_ms: Option<u64>) {
        if let Self::Live(live) = self {
            live.finish(status, duration_ms);
            say!("run {run_id} {status}");
        }
    }
}

/// The indicatif view: header, progress bar, node lines, interrupt line.
struct Live {
    multi: MultiProgress,
    header: ProgressBar,
    bar: ProgressBar,
    nodes: HashMap<String, ProgressBar>,
    /// Each node's last line, in order (children after their parent node).
    order: Vec<String>,
    interrupt: Option<ProgressBar>,
    run_id: String,
    workflow: String,
}

/// The spinners' tick.
const TICK: Duration = Duration::from_millis(100);
/// How long, at most, the child streams are still read after the root run ended (a guard
/// against a child that never ends, not a time to wait: a child's stream ends with it).
const CHILD_DRAIN: Duration = Duration::from_secs(30);

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner())
}

impl Live {
    fn new(run_id: &str, workflow: &str, total: usize, elapsed: Option<Duration>) -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let header = ProgressBar::new_spinner().with_style(style("{spinner} {msg}  {elapsed}"));
        let header = multi.add(match elapsed {
            Some(elapsed) => header.with_elapsed(elapsed),
            None => header,
        });
        header.set_message(format!("run {run_id}  {workflow}  running"));
        header.enable_steady_tick(TICK);
        let bar = multi.add(ProgressBar::new(total as u64).with_style(style("  [{bar:30}] {pos}/{len} nodes")));
        Self {
            multi,
            header,
            bar,
            nodes: HashMap::new(),
            order: Vec::new(),
            interrupt: None,
            run_id: run_id.to_owned(),
            workflow: workflow.to_owned(),
        }
    }

    /// The bar of `path`, created in its place when new.
    fn node_bar(&mut self, path: &str) -> ProgressBar {
        if let Some(bar) = self.nodes.get(path) {
            return bar.clone();
        }
        let bar = ProgressBar::new_spinner();
        let parent = path.split_once('/').map(|(parent, _)| parent.to_owned());
        // A child's node goes after its parent node's last line; others go last (above the
        // interrupt line).
        let anchor = parent.as_ref().and_then(|parent| {
            self.order.iter().rev().find(|other| *other == parent || other.starts_with(&format!("{parent}/"))).cloned()
        });
        let bar = match (anchor.and_then(|anchor| self.nodes.get(&anchor).cloned()), &self.interrupt) {
            (Some(anchor), _) => self.multi.insert_after(&anchor, bar),
            (None, Some(interrupt)) => self.multi.insert_before(interrupt, bar),
            (None, None) => self.multi.add(bar),
        };
        self.nodes.insert(path.to_owned(), bar.clone());
        self.order.push(path.to_owned());
        bar
    }

    fn show(&mut self, change: &Change, state: &Watch) {
        match change {
            Change::Node { path, status, duration_ms, .. } => {
                let indent = "  ".repeat(1 + path.matches('/').count());
                let name = path.rsplit('/').next().unwrap_or(path);
                let bar = self.node_bar(path);
                let (symbol, running) = match status.as_str() {
                    "running" | "resumed" => ("", true),
                    "completed" => ("✓", false),
                    "failed" => ("✗", false),
                    "skipped" => ("-", false),
                    "cancelled" => ("✗", false),
                    _ => ("⏸", false),
                };
                let duration = duration_ms.map(|ms| format!("  {}", seconds(ms))).unwrap_or_default();
                if running {
                    bar.set_style(style(&format!("{indent}{{spinner}} {{msg}}")));
                    bar.set_message(format!("{name}  running"));
                    bar.enable_steady_tick(TICK);
                } else {
                    bar.disable_steady_tick();
                    bar.set_style(style(&format!("{indent}{{msg}}")));
                    bar.set_message(format!("{symbol} {name}  {status}{duration}"));
                    bar.tick();
                }
                let (finished, seen) = state.progress();
                if seen as u64 > self.bar.length().unwrap_or(0) {
                    self.bar.set_length(seen as u64);
                }
                self.bar.set_position(finished as u64);
            }
            Change::Interrupt { run_id, node, kind } => {
                let bar = self.interrupt.get_or_insert_with(|| self.multi.add(ProgressBar::new_spinner())).clone();
                bar.set_style(style("  {msg}"));
                bar.set_message(format!("{kind} pending at {node} — answer: {}", answer_command(run_id, node, kind)));
                bar.tick();
            }
            Change::Resolved { .. } => {
                if let Some(bar) = self.interrupt.take() {
                    bar.finish_and_clear();
                    self.multi.remove(&bar);
                }
            }
            Change::Run { parent_node: None, status, .. } => {
                self.header.set_message(format!("run {}  {}  {status}", self.run_id, self.workflow));
            }
            Change::Run { .. } => {}
        }
    }

    fn finish(&mut self, status: &str, duration_ms: Option<u64>) {
        for bar in self.nodes.values() {
            bar.disable_steady_tick();
            if !bar.is_finished() {
                bar.finish();
            }
        }
        if let Some(bar) = self.interrupt.take() {
            bar.finish_and_clear();
        }
        self.bar.finish();
        let duration = duration_ms.map(|ms| format!("  {}", seconds(ms))).unwrap_or_default();
        self.header.set_style(style("{msg}"));
        self.header.finish_with_message(format!("run {}  {}  {status}{duration}", self.run_id, self.workflow));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: &str, node: Option<&str>, payload: Value) -> Value {
        json!({"type": kind, "nodeId": node, "payload": payload, "timestamp": "2026-01-01T12:00:01.234Z"})
    }

    #[test]
    fn events_become_changes_and_lines_and_children_are_followed_once() {
        let mut watch = Watch::new("run-1");
        let lines = |watch: &mut Watch, run: &str, event: Value| -> Vec<String> {
            watch.apply(run, &event).iter().map(line).collect()
        };
        assert_eq!(lines(&mut watch, "run-1", event("run.started", None, json!({}))), ["run run-1 running"]);
        assert_eq!(lines(&mut watch, "run-1", event("node.started", Some("call"), json!({}))), ["node call started"]);
        let dispatched = event("node.dispatched", Some("call"), json!({"childRunId": "run-2"}));
        assert!(lines(&mut watch, "run-1", dispatched.clone()).is_empty());
        assert!(lines(&mut watch, "run-1", dispatched).is_empty());
        assert_eq!(watch.take_children(), ["run-2"]);
        let suspended = event("node.suspended", Some("gate"), json!({"kind": "approval"}));
        assert_eq!(lines(&mut watch, "run-2", suspended), ["node call/gate waiting-approval"]);
        let requested = event("interrupt.requested", Some("gate"), json!({"kind": "approval"}));
        assert_eq!(
            lines(&mut watch, "run-2", requested),
            ["interrupt gate approval pending — answer: trellis interrupts approve run-2 gate"]
        );
        let failed = event("node.failed", Some("call"), json!({"error": {"code": "boom", "message": "it broke"}}));
        assert_eq!(lines(&mut watch, "run-1", failed), ["node call failed: boom: it broke"]);
        assert_eq!(watch.progress(), (1, 1));
        let ended = event("run.failed", None, json!({"error": {"code": "boom"}, "durationMs": 1200}));
        assert_eq!(lines(&mut watch, "run-1", ended), ["run run-1 failed: boom"]);
        assert_eq!((watch.final_status.as_deref(), watch.final_duration_ms), (Some("failed"), Some(1200)));
    }
}
