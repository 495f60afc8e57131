//! `trellis runs start|list|show|cancel|pause|resume|wait` (`events` and `watch` have their
//! own modules).

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Map, Value};

use super::events::{error_text, is_terminal_event, EventStream};
use super::exit::{is_terminal, ClientError, Exit};
use super::http::Api;
use super::interrupts::answer_command;
use super::output::{print_fields, print_json, print_json_line, print_table, say, text, Out};
use crate::args::RunsCommand;

/// Polling interval of `runs wait` when the event stream is not available.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// Runs one `runs` subcommand; its exit code.
pub async fn run(api: &Api, out: Out, command: &RunsCommand) -> Result<Exit, ClientError> {
    match command {
        RunsCommand::Start { workflow, inputs, inputs_file, idempotency_key, watch } => {
            let run_id =
                start(api, out, workflow, inputs, inputs_file.as_ref(), idempotency_key.as_deref(), *watch).await?;
            if *watch {
                return super::watch::watch(api, out, &run_id).await;
            }
            Ok(Exit::Success)
        }
        RunsCommand::List { workflow, status, limit, all } => {
            list(api, out, workflow.as_deref(), status.as_deref(), *limit, *all).await.map(|()| Exit::Success)
        }
        RunsCommand::Show { run_id } => show(api, out, run_id).await.map(|()| Exit::Success),
        RunsCommand::Events { run_id, follow, after } => {
            super::events::run_events(api, out, run_id, *follow, *after).await.map(|()| Exit::Success)
        }
        RunsCommand::Watch { run_id } => super::watch::watch(api, out, run_id).await,
        RunsCommand::Cancel { run_id, reason } => {
            let body = reason_body(reason.as_deref());
            control(api, out, &format!("/v1/runs/{run_id}/cancel"), body, "cancel requested").await
        }
        RunsCommand::Pause { run_id, reason, immediate } => {
            let mut body = reason_body(reason.as_deref());
            if *immediate {
                body["drainPolicy"] = json!("immediate");
            }
            control(api, out, &format!("/v1/runs/{run_id}:pause"), body, "pause requested").await
        }
        RunsCommand::Resume { run_id, reason } => {
            control(api, out, &format!("/v1/runs/{run_id}:resume"), reason_body(reason.as_deref()), "resumed").await
        }
        RunsCommand::Wait { run_id, until, timeout } => wait(api, out, run_id, until.as_deref(), *timeout).await,
    }
}

fn reason_body(reason: Option<&str>) -> Value {
    match reason {
        Some(reason) => json!({ "reason": reason }),
        None => json!({}),
    }
}

/// Parses `k=v` pairs into an object: `v` as JSON when it parses, else as a string.
pub fn parse_pairs(pairs: &[String], flag: &str) -> Result<Map<String, Value>, ClientError> {
    let mut object = Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=').filter(|(key, _)| !key.is_empty()) else {
            return Err(ClientError::Input(format!("{flag} takes K=V, got {pair:?}")));
        };
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
        object.insert(key.to_owned(), value);
    }
    Ok(object)
}

/// Reads a JSON file (`what` names it in errors).
pub fn read_json_file(path: &PathBuf, what: &str) -> Result<Value, ClientError> {
    let shown = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|error| ClientError::Input(format!("{what} {shown}: cannot read it: {error}")))?;
    serde_json::from_str(&text).map_err(|error| ClientError::Input(format!("{what} {shown}: not JSON: {error}")))
}

async fn start(
    api: &Api,
    out: Out,
    workflow: &str,
    pairs: &[String],
    inputs_file: Option<&PathBuf>,
    idempotency_key: Option<&str>,
    then_watch: bool,
) -> Result<String, ClientError> {
    let mut inputs = match inputs_file {
        Some(path) => match read_json_file(path, "--inputs-file")? {
            Value::Object(object) => object,
            _ => return Err(ClientError::Input(format!("--inputs-file {}: must be a JSON object", path.display()))),
        },
        None => Map::new(),
    };
    inputs.extend(parse_pairs(pairs, "--input")?);
    let body = json!({ "workflowId": workflow, "inputs": inputs });
    let headers: Vec<(&str, &str)> = idempotency_key.map(|key| ("idempotency-key", key)).into_iter().collect();
    let created = api.send(Method::POST, "/v1/runs", Some(&body), &headers).await?;
    let run_id = created["runId"]
        .as_str()
        .ok_or_else(|| ClientError::Input(format!("the host answered no runId: {created}")))?
        .to_owned();
    if out.json() && then_watch {
        // The watch prints one JSON event per line after it: one line here too.
        print_json_line(&created);
    } else if out.json() {
        print_json(&created);
    } else {
        say!("started {run_id} ({workflow})");
    }
    Ok(run_id)
}

async fn list(
    api: &Api,
    out: Out,
    workflow: Option<&str>,
    status: Option<&str>,
    limit: Option<u32>,
    all: bool,
) -> Result<(), ClientError> {
    let mut query = Vec::new();
    if let Some(workflow) = workflow {
        query.push(format!("workflowId={}", encode(workflow)));
    }
    if let Some(status) = status {
        query.push(format!("status={}", encode(status)));
    }
    if let Some(limit) = limit {
        query.push(format!("limit={limit}"));
    }
    let mut runs = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut parts = query.clone();
        if let Some(cursor) = &cursor {
            parts.push(format!("cursor={}", encode(cursor)));
        }
        let path = if parts.is_empty() { "/v1/runs".to_owned() } else { format!("/v1/runs?{}", parts.join("&")) };
        let page = api.get(&path).await?;
        runs.extend(page["runs"].as_array().cloned().unwrap_or_default());
        match page["nextCursor"].as_str() {
            Some(next) if all && !next.is_empty() => cursor = Some(next.to_owned()),
            _ => break,
        }
    }
    if out.json() {
        print_json(&json!({ "runs": runs }));
        return Ok(());
    }
    let rows = runs
        .iter()
        .map(|run| {
            let updated = run["endedAt"].as_str().or(run["startedAt"].as_str()).unwrap_or("-").to_owned();
            vec![text(run, "runId"), text(run, "workflowId"), text(run, "status"), text(run, "createdAt"), updated]
        })
        .collect();
    print_table(&["RUN ID", "WORKFLOW", "STATUS", "CREATED", "UPDATED"], rows);
    Ok(())
}

/// Percent-encodes a query value.
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (byte as char).to_string(),
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

async fn show(api: &Api, out: Out, run_id: &str) -> Result<(), ClientError> {
    let run = api.get(&format!("/v1/runs/{run_id}")).await?;
    if out.json() {
        print_json(&run);
        return Ok(());
    }
    let mut fields = vec![
        ("run", text(&run, "runId")),
        ("workflow", format!("{} (version {})", text(&run, "workflowId"), text(&run, "workflowVersion"))),
        ("status", text(&run, "status")),
        ("created", text(&run, "createdAt")),
        ("started", text(&run, "startedAt")),
        ("ended", text(&run, "endedAt")),
    ];
    if run.get("currentNodeId").is_some() {
        fields.push(("current node", text(&run, "currentNodeId")));
    }
    if let Some(error) = run.get("error") {
        fields.push(("error", error_text(error)));
    }
    if let Some(interrupt) = run.get("interrupt") {
        let node = text(interrupt, "nodeId");
        let kind = text(interrupt, "kind");
        fields.push(("interrupt", format!("{kind} pending at {node}")));
        fields.push(("answer with", answer_command(run_id, &node, &kind)));
    }
    if let Some(children) = run["childRuns"].as_array() {
        for child in children {
            fields.push((
                "child run",
                format!("{} at {} ({})", text(child, "runId"), text(child, "nodeId"), text(child, "status")),
            ));
        }
    }
    if let Some(outputs) = run.get("outputs") {
        fields.push(("outputs", outputs.to_string()));
    }
    print_fields(fields);
    Ok(())
}

async fn control(api: &Api, out: Out, path: &str, body: Value, done: &str) -> Result<Exit, ClientError> {
    let answer = api.post(path, &body).await?;
    if out.json() {
        print_json(&answer);
    } else {
        say!("{done}: {} (status {})", text(&answer, "runId"), text(&answer, "status"));
    }
    Ok(Exit::Success)
}

/// `runs wait`: until the run's status is `until` (or terminal); exit 4 after `timeout`.
async fn wait(
    api: &Api,
    out: Out,
    run_id: &str,
    until: Option<&str>,
    timeout: Option<f64>,
) -> Result<Exit, ClientError> {
    let waiting = wait_for(api, run_id, until);
    let snapshot = match timeout {
        Some(seconds) => match tokio::time::timeout(Duration::from_secs_f64(seconds.max(0.0)), waiting).await {
            Ok(result) => result?,
            Err(_) => {
                let status = api.get(&format!("/v1/runs/{run_id}")).await.map(|run| text(&run, "status"));
                let status = status.unwrap_or_else(|_| "unknown".to_owned());
                eprintln!("trellis: run {run_id} still {status} after {seconds}s");
                return Ok(Exit::Timeout);
            }
        },
        None => waiting.await?,
    };
    let status = text(&snapshot, "status");
    if out.json() {
        print_json(&snapshot);
    } else {
        say!("run {run_id} {status}");
    }
    Ok(Exit::for_status(&status))
}

/// The snapshot once the condition holds: events from the stream trigger a re-read of the
/// snapshot; a host whose stream fails is polled instead.
async fn wait_for(api: &Api, run_id: &str, until: Option<&str>) -> Result<Value, ClientError> {
    let holds = |snapshot: &Value| {
        let status = snapshot["status"].as_str().unwrap_or("");
        is_terminal(status) || until == Some(status)
    };
    let snapshot = api.get(&format!("/v1/runs/{run_id}")).await?;
    if holds(&snapshot) {
        return Ok(snapshot);
    }
    let mut stream = EventStream::new(api.clone(), run_id, None);
    loop {
        match stream.next().await {
            Ok(Some(event)) => {
                let kind = event["type"].as_str().unwrap_or("");
                let relevant = is_terminal_event(kind) || kind.starts_with("run.") || kind.starts_with("interrupt.");
                if relevant || kind == "node.suspended" || kind == "node.resumed" {
                    let snapshot = api.get(&format!("/v1/runs/{run_id}")).await?;
                    if holds(&snapshot) {
                        return Ok(snapshot);
                    }
                }
            }
            Ok(None) => break,
            Err(ClientError::Http { status, .. }) if status != 404 => break,
            Err(error @ ClientError::Http { .. }) => return Err(error),
            Err(_) => break,
        }
    }
    loop {
        let snapshot = api.get(&format!("/v1/runs/{run_id}")).await?;
        if holds(&snapshot) {
            return Ok(snapshot);
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}
