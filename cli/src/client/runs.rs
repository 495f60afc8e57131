//! `trellis runs start|list|show|cancel|pause|resume|wait|diff|fork|redrive|rerun|delete|prune`
//! (`events` and `watch` have their own modules).

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Map, Value};

use super::events::{error_text, status_after, Backoff, EventStream};
use super::exit::{is_terminal, ClientError, Exit};
use super::http::{encode, Api};
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
        RunsCommand::Diff { run_id, against } => {
            let path = format!("/v1/runs/{}:diff?against={}", encode(run_id), encode(against));
            let diff = api.get(&path).await?;
            if out.json() {
                print_json(&diff);
            } else {
                print_diff(&diff);
            }
            Ok(Exit::Success)
        }
        RunsCommand::Fork { run_id, mode, from_seq, watch } => {
            let mut body = json!({ "mode": mode });
            if let Some(from_seq) = from_seq {
                body["fromSeq"] = json!(from_seq);
            }
            let forked = api.send(Method::POST, &format!("/v1/runs/{}:fork", encode(run_id)), Some(&body), &[]).await?;
            started_fork(api, out, &forked, *watch).await
        }
        RunsCommand::Redrive { run_id, watch } => {
            let path = format!("/v1/runs/{}:redrive", encode(run_id));
            let forked = api.send(Method::POST, &path, Some(&json!({})), &[]).await?;
            started_fork(api, out, &forked, *watch).await
        }
        RunsCommand::Rerun { run_id, inputs, inputs_file, no_cache, watch } => {
            let mut body = json!({ "useCache": !no_cache });
            if !inputs.is_empty() || inputs_file.is_some() {
                let source = api.get(&format!("/v1/runs/{}", encode(run_id))).await?;
                let mut merged = source["inputs"].as_object().cloned().unwrap_or_default();
                merged.extend(input_object(inputs, inputs_file.as_ref())?);
                body["inputs"] = Value::Object(merged);
            }
            let rerun = api.send(Method::POST, &format!("/v1/runs/{}:rerun", encode(run_id)), Some(&body), &[]).await?;
            let new_id = rerun["runId"]
                .as_str()
                .ok_or_else(|| ClientError::Input(format!("the host answered no runId: {rerun}")))?
                .to_owned();
            if out.json() {
                print_json(&rerun);
            } else {
                let cache = if *no_cache { "without the cache" } else { "with the cache" };
                say!("{new_id}: rerun of {} {cache}", text(&rerun, "sourceRunId"));
            }
            if *watch {
                return super::watch::watch(api, out, &new_id).await;
            }
            Ok(Exit::Success)
        }
        RunsCommand::Delete { run_id, force } => {
            let query = if *force { "?force=true" } else { "" };
            let deleted = api.send(Method::DELETE, &format!("/v1/runs/{}{query}", encode(run_id)), None, &[]).await?;
            if out.json() {
                print_json(&deleted);
            } else {
                let count = deleted["deleted"].as_array().map_or(0, Vec::len);
                say!("{run_id}: deleted ({count} runs with its children, {} bytes)", deleted["bytes"]);
            }
            Ok(Exit::Success)
        }
        RunsCommand::Prune { older_than, keep, status, workflow, dry_run } => {
            let mut body = json!({ "dryRun": dry_run });
            if let Some(text) = older_than {
                let ms = trellis_core::retention::parse(&json!(text))
                    .map_err(|message| ClientError::Input(format!("--older-than: {message}")))?;
                body["olderThanDays"] = json!(ms as f64 / trellis_core::retention::DAY_MS as f64);
            }
            if let Some(keep) = keep {
                body["keep"] = json!(keep);
            }
            if let Some(status) = status {
                body["status"] = json!(status);
            }
            if let Some(workflow) = workflow {
                body["workflowId"] = json!(workflow);
            }
            let report = api.send(Method::POST, "/v1/runs:prune", Some(&body), &[]).await?;
            if out.json() {
                print_json(&report);
            } else {
                print_prune(&report);
            }
            Ok(Exit::Success)
        }
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

/// Shows a fork the host created (`runId`, its source, mode and point), then watches it.
async fn started_fork(api: &Api, out: Out, forked: &Value, watch: bool) -> Result<Exit, ClientError> {
    let run_id = forked["runId"]
        .as_str()
        .ok_or_else(|| ClientError::Input(format!("the host answered no runId: {forked}")))?
        .to_owned();
    if out.json() {
        print_json(forked);
    } else {
        say!(
            "{run_id}: {} fork of {} from event {}",
            text(forked, "mode"),
            text(forked, "sourceRunId"),
            forked["fromSeq"]
        );
    }
    if watch {
        return super::watch::watch(api, out, &run_id).await;
    }
    Ok(Exit::Success)
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

/// The inputs of `--inputs-file` with the `--input` pairs over them.
fn input_object(pairs: &[String], inputs_file: Option<&PathBuf>) -> Result<Map<String, Value>, ClientError> {
    let mut inputs = match inputs_file {
        Some(path) => match read_json_file(path, "--inputs-file")? {
            Value::Object(object) => object,
            _ => return Err(ClientError::Input(format!("--inputs-file {}: must be a JSON object", path.display()))),
        },
        None => Map::new(),
    };
    inputs.extend(parse_pairs(pairs, "--input")?);
    Ok(inputs)
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
    let inputs = input_object(pairs, inputs_file)?;
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
    let path = if query.is_empty() { "/v1/runs".to_owned() } else { format!("/v1/runs?{}", query.join("&")) };
    let runs = api.pages(&path, "runs", all).await?;
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

async fn show(api: &Api, out: Out, run_id: &str) -> Result<(), ClientError> {
    let run = api.get(&run_path(run_id)).await?;
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
    timeout: Option<Duration>,
) -> Result<Exit, ClientError> {
    let waiting = wait_for(api, run_id, until);
    let (status, snapshot) = match timeout {
        Some(limit) => match tokio::time::timeout(limit, waiting).await {
            Ok(result) => result?,
            Err(_) => {
                let status = api.get(&run_path(run_id)).await.map(|run| text(&run, "status"));
                let status = status.unwrap_or_else(|_| "unknown".to_owned());
                eprintln!("trellis: run {run_id} still {status} after {}s", limit.as_secs_f64());
                return Ok(Exit::Timeout);
            }
        },
        None => waiting.await?,
    };
    if out.json() {
        print_json(&snapshot);
    } else {
        say!("run {run_id} {status}");
    }
    Ok(Exit::for_status(&status))
}

/// `/v1/runs/{run_id}`.
fn run_path(run_id: &str) -> String {
    format!("/v1/runs/{}", encode(run_id))
}

/// The status the wait ended on and the snapshot read then. The condition is checked on the
/// snapshot first, then on the status each streamed event puts the run in (so a status the
/// run only passes through counts); the stream starts after the log's position at the start,
/// so a status the run had before is not taken for one it reaches. An event that changes the
/// status in a way it does not name (an interrupt resolved, a node resumed) has the snapshot
/// read again. A host whose stream is unavailable is polled instead.
async fn wait_for(api: &Api, run_id: &str, until: Option<&str>) -> Result<(String, Value), ClientError> {
    let holds = |status: &str| is_terminal(status) || until == Some(status);
    let position = last_sequence(api, run_id).await?;
    let snapshot = api.get(&run_path(run_id)).await?;
    let status = text(&snapshot, "status");
    if holds(&status) {
        return Ok((status, snapshot));
    }
    let mut stream = EventStream::new(api.clone(), run_id, position);
    loop {
        match stream.next().await {
            Ok(Some(event)) => {
                if let Some(status) = status_after(&event).filter(|status| holds(status)) {
                    return Ok((status.to_owned(), get_with_retries(api, &run_path(run_id)).await?));
                }
                let kind = event["type"].as_str().unwrap_or("");
                let unnamed = status_after(&event).is_none()
                    && (kind.starts_with("run.") || kind.starts_with("interrupt.") || kind == "node.resumed");
                if unnamed {
                    let snapshot = get_with_retries(api, &run_path(run_id)).await?;
                    let status = text(&snapshot, "status");
                    if holds(&status) {
                        return Ok((status, snapshot));
                    }
                }
            }
            Ok(None) => break,
            Err(error @ ClientError::Http { status: 401 | 403 | 404, .. }) => return Err(error),
            Err(_) => break,
        }
    }
    let mut backoff = Backoff::default();
    loop {
        match api.get(&run_path(run_id)).await {
            Ok(snapshot) => {
                backoff.reset();
                let status = text(&snapshot, "status");
                if holds(&status) {
                    return Ok((status, snapshot));
                }
                tokio::time::sleep(POLL_EVERY).await;
            }
            Err(error) => backoff.pause(error).await?,
        }
    }
}

/// `GET path`, repeated with a capped backoff while the host fails transiently.
async fn get_with_retries(api: &Api, path: &str) -> Result<Value, ClientError> {
    let mut backoff = Backoff::default();
    loop {
        match api.get(path).await {
            Ok(value) => return Ok(value),
            Err(error) => backoff.pause(error).await?,
        }
    }
}

/// The sequence of the run's last event so far (`None`: none yet), from the event list.
async fn last_sequence(api: &Api, run_id: &str) -> Result<Option<u64>, ClientError> {
    let mut last: Option<u64> = None;
    loop {
        let after = last.map_or(-1, |last| last as i64);
        let page =
            api.get(&format!("/v1/runs/{}/events?streamMode=debug&lastSequence={after}", encode(run_id))).await?;
        let events = page["events"].as_array().map(Vec::as_slice).unwrap_or_default();
        match events.iter().filter_map(|event| event["sequence"].as_u64()).max() {
            Some(max) if last.is_none_or(|last| max > last) => last = Some(max),
            _ => return Ok(last),
        }
    }
}

/// A diff for people: where the runs part, then one row per differing event.
fn print_prune(report: &Value) {
    let rows: Vec<Vec<String>> = report["candidates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|run| {
            vec![
                text(run, "runId"),
                text(run, "workflowId"),
                text(run, "status"),
                text(run, "endedAt"),
                run["bytes"].to_string(),
            ]
        })
        .collect();
    let listed = rows.len();
    if !rows.is_empty() {
        print_table(&["RUN", "WORKFLOW", "STATUS", "ENDED", "BYTES"], rows);
    }
    let verb = if report["dryRun"] == true { "would delete" } else { "deleted" };
    let count = if report["dryRun"] == true { listed.to_string() } else { report["deleted"].to_string() };
    say!(
        "{verb} {count} runs ({} bytes); kept {} (the newest {} and every run still going)",
        report["bytes"],
        report["protectedRuns"],
        report["keep"]
    );
    if report["truncated"] == true {
        say!("more runs match: prune again");
    }
}

fn print_diff(diff: &Value) {
    match diff["divergedAtSeq"].as_u64() {
        None => say!("{} and {} do not differ", text(diff, "a"), text(diff, "b")),
        Some(seq) => say!("{} and {} part at event {seq}", text(diff, "a"), text(diff, "b")),
    }
    let kind = |event: &Value| event["type"].as_str().unwrap_or("-").to_owned();
    let rows: Vec<Vec<String>> = diff["eventDiffs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|row| vec![row["seq"].to_string(), text(row, "op"), kind(&row["aEvent"]), kind(&row["bEvent"])])
        .collect();
    if !rows.is_empty() {
        print_table(&["SEQ", "OP", "A", "B"], rows);
    }
    for (field, label) in [("added", "only in b"), ("removed", "only in a"), ("changed", "differ")] {
        let names: Vec<&str> =
            diff["stateDiff"]["variables"][field].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        if !names.is_empty() {
            say!("variables {label}: {}", names.join(", "));
        }
    }
    if diff["truncated"] == true {
        say!("(more differences than shown)");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use axum::http::HeaderMap;
    use axum::routing::get;
    use axum::{Json, Router};
    use serde_json::json;

    use super::*;
    use crate::client::config::Target;

    /// A run that is pending at the first snapshot, then passes through `running` at once
    /// into an approval wait: every later snapshot says waiting-approval.
    async fn host() -> String {
        let snapshots = Arc::new(AtomicUsize::new(0));
        let run = move || {
            let snapshots = snapshots.clone();
            async move {
                let status = if snapshots.fetch_add(1, Ordering::SeqCst) == 0 { "pending" } else { "waiting-approval" };
                Json(json!({"runId": "run-1", "status": status}))
            }
        };
        let events = |headers: HeaderMap| async move {
            let sse = headers.get("accept").and_then(|value| value.to_str().ok()) == Some("text/event-stream");
            if !sse {
                return axum::response::IntoResponse::into_response(Json(json!({"events": []})));
            }
            let frames: String = [
                ("run.started", json!({})),
                ("node.started", json!({})),
                ("node.suspended", json!({"kind": "approval"})),
                ("interrupt.requested", json!({"kind": "approval"})),
            ]
            .iter()
            .enumerate()
            .map(|(sequence, (kind, payload))| {
                let event = json!({"sequence": sequence, "type": kind, "nodeId": "gate", "payload": payload});
                format!("id: {sequence}\nevent: {kind}\ndata: {event}\n\n")
            })
            .collect();
            axum::response::IntoResponse::into_response(frames)
        };
        let router = Router::new().route("/v1/runs/run-1", get(run)).route("/v1/runs/run-1/events", get(events));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        url
    }

    #[tokio::test]
    async fn wait_until_a_status_the_run_only_passes_through() {
        let api = Api::new(&Target { url: host().await, key: Some("k".into()), ca_cert: None }).unwrap();
        // A guard only: the wait ends at the first event.
        let waited = tokio::time::timeout(Duration::from_secs(30), wait_for(&api, "run-1", Some("running"))).await;
        let (status, snapshot) = waited.expect("the wait ended").unwrap();
        assert_eq!(status, "running");
        assert_eq!(Exit::for_status(&status), Exit::Success);
        // The snapshot read then: the run has moved on.
        assert_eq!(snapshot["status"], "waiting-approval");
    }

    #[test]
    fn events_name_the_status_they_put_the_run_in() {
        let event = |kind: &str, payload: Value| json!({"type": kind, "payload": payload});
        assert_eq!(status_after(&event("run.started", json!({}))), Some("running"));
        assert_eq!(status_after(&event("run.paused", json!({}))), Some("paused"));
        assert_eq!(status_after(&event("node.suspended", json!({"kind": "clarification"}))), Some("waiting-input"));
        assert_eq!(
            status_after(&event("interrupt.requested", json!({"kind": "external-event"}))),
            Some("waiting-external")
        );
        assert_eq!(status_after(&event("run.cancelled", json!({}))), Some("cancelled"));
        assert_eq!(status_after(&event("node.completed", json!({}))), None);
    }
}
