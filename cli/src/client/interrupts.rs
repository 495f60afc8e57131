//! `trellis interrupts list|show|approve|reject|answer`: the pending interrupts of the key's
//! tenant, by run and node (`POST /v1/runs/{run}/interrupts/{node}`) or by token (`GET` /
//! `POST /v1/interrupts/{token}`). `answer` checks its value against the interrupt's resume
//! schema before anything is sent.

use serde_json::{json, Value};

use super::exit::ClientError;
use super::http::{encode, Api};
use super::output::{print_fields, print_json, print_table, say, text, Out};
use super::runs::{parse_pairs, read_json_file};
use crate::args::{InterruptTarget, InterruptsCommand};

/// Runs one `interrupts` subcommand.
pub async fn run(api: &Api, out: Out, command: &InterruptsCommand) -> Result<(), ClientError> {
    match command {
        InterruptsCommand::List { run_id } => list(api, out, run_id.as_deref()).await,
        InterruptsCommand::Show { target } => show(api, out, target).await,
        InterruptsCommand::Approve { target, comment } => {
            let mut value = json!({ "action": "accept" });
            if let Some(comment) = comment {
                value["comment"] = json!(comment);
            }
            resolve(api, out, target, value).await
        }
        InterruptsCommand::Reject { target, reason } => {
            let mut value = json!({ "action": "reject" });
            if let Some(reason) = reason {
                value["reason"] = json!(reason);
            }
            resolve(api, out, target, value).await
        }
        InterruptsCommand::Answer { target, value, value_file, set } => {
            let value = match (value, value_file) {
                (Some(text), _) => serde_json::from_str(text)
                    .map_err(|error| ClientError::Input(format!("--value is not JSON: {error}")))?,
                (None, Some(path)) => read_json_file(path, "--value-file")?,
                (None, None) if !set.is_empty() => Value::Object(parse_pairs(set, "--set")?),
                (None, None) => return Err(ClientError::Input("give --value, --value-file or --set".to_owned())),
            };
            let interrupt = fetch(api, target).await?;
            check(&interrupt, &value)?;
            resolve(api, out, target, value).await
        }
    }
}

/// The command that answers an interrupt of `kind` at `node` of `run_id`.
pub fn answer_command(run_id: &str, node: &str, kind: &str) -> String {
    match kind {
        "approval" => format!("trellis interrupts approve {run_id} {node}"),
        _ => format!("trellis interrupts answer {run_id} {node} --value JSON"),
    }
}

/// `GET /v1/interrupts?status=pending`, of one run when `run_id` is given.
fn pending_path(run_id: Option<&str>) -> String {
    match run_id {
        Some(run_id) => format!("/v1/interrupts?status=pending&runId={}", encode(run_id)),
        None => "/v1/interrupts?status=pending".to_owned(),
    }
}

async fn list(api: &Api, out: Out, run_id: Option<&str>) -> Result<(), ClientError> {
    let interrupts = api.pages(&pending_path(run_id), "interrupts", true).await?;
    if out.json() {
        print_json(&json!({ "interrupts": interrupts }));
        return Ok(());
    }
    let rows = interrupts
        .iter()
        .map(|item| {
            vec![
                text(item, "runId"),
                text(item, "nodeId"),
                text(item, "kind"),
                text(item, "requestedAt"),
                text(item, "workflowId"),
                title(item),
            ]
        })
        .collect();
    print_table(&["RUN ID", "NODE", "KIND", "REQUESTED", "WORKFLOW", "TITLE"], rows);
    Ok(())
}

/// The data an interrupt carries (the snapshot's view nests it in `payload`).
fn data(interrupt: &Value) -> &Value {
    match interrupt.get("data") {
        Some(data) => data,
        None => &interrupt["payload"]["data"],
    }
}

/// A one-line title: the data's title, description or first question.
fn title(interrupt: &Value) -> String {
    let data = data(interrupt);
    data["title"]
        .as_str()
        .or(data["description"].as_str())
        .or(data["questions"][0]["question"].as_str())
        .or(data["question"].as_str())
        .unwrap_or("-")
        .to_owned()
}

/// The interrupt's resume schema, wherever its view keeps it.
fn resume_schema(interrupt: &Value) -> Option<&Value> {
    interrupt.get("resumeSchema").or(interrupt["payload"].get("resumeSchema")).filter(|schema| !schema.is_null())
}

/// The pending interrupt `target` names (with `runId` filled in).
async fn fetch(api: &Api, target: &InterruptTarget) -> Result<Value, ClientError> {
    if let Some(token) = &target.token {
        return api.get(&format!("/v1/interrupts/{}", encode(token))).await;
    }
    let (run_id, node_id) = run_and_node(target)?;
    // The run's pending interrupts (several may be pending at once, one per node).
    let pending = api.pages(&pending_path(Some(run_id)), "interrupts", true).await?;
    if let Some(interrupt) = pending.iter().find(|item| item["nodeId"].as_str() == Some(node_id)) {
        let mut interrupt = interrupt.clone();
        interrupt["runId"] = json!(run_id);
        return Ok(interrupt);
    }
    let nodes: Vec<&str> = pending.iter().filter_map(|item| item["nodeId"].as_str()).collect();
    let pending = if nodes.is_empty() { "none pending".to_owned() } else { format!("pending at {}", nodes.join(", ")) };
    Err(ClientError::Input(format!("run {run_id} has no pending interrupt at node {node_id} ({pending})")))
}

fn run_and_node(target: &InterruptTarget) -> Result<(&str, &str), ClientError> {
    match (&target.run_id, &target.node_id) {
        (Some(run_id), Some(node_id)) => Ok((run_id, node_id)),
        _ => Err(ClientError::Input("name the interrupt: RUN_ID NODE_ID, or --token T".to_owned())),
    }
}

async fn show(api: &Api, out: Out, target: &InterruptTarget) -> Result<(), ClientError> {
    let interrupt = fetch(api, target).await?;
    if out.json() {
        print_json(&interrupt);
        return Ok(());
    }
    let node = text(&interrupt, "nodeId");
    let kind = text(&interrupt, "kind");
    let expiry = interrupt["expiresAt"].as_str().or(interrupt["tokenExpiresAt"].as_str()).unwrap_or("-").to_owned();
    let mut fields = vec![("node", node.clone()), ("kind", kind.clone()), ("title", title(&interrupt))];
    fields.push(("requested", text(&interrupt, "requestedAt")));
    fields.push(("expires", expiry));
    fields.push(("data", data(&interrupt).to_string()));
    fields.push(("resume schema", resume_schema(&interrupt).map_or("-".to_owned(), Value::to_string)));
    let by = match (&target.token, interrupt["runId"].as_str()) {
        (None, Some(run_id)) => format!("{run_id} {node}"),
        _ => "--token TOKEN".to_owned(),
    };
    if kind == "approval" {
        fields.push(("answer with", format!("trellis interrupts approve {by} [--comment C]")));
        fields.push(("", format!("trellis interrupts reject {by} [--reason R]")));
    } else {
        fields.push(("answer with", format!("trellis interrupts answer {by} --value JSON")));
    }
    print_fields(fields);
    Ok(())
}

/// Checks `value` against the interrupt's resume schema with the check the host applies
/// (`trellis_core::schema::check_against`, offline): each violation with its path and rule.
fn check(interrupt: &Value, value: &Value) -> Result<(), ClientError> {
    let Some(schema) = resume_schema(interrupt) else { return Ok(()) };
    let Err(violations) = trellis_core::schema::check_against(schema, value) else { return Ok(()) };
    Err(ClientError::Invalid {
        message: "the value does not match the interrupt's resume schema (nothing was sent)".to_owned(),
        errors: violations.iter().map(trellis_core::schema::describe).collect(),
    })
}

async fn resolve(api: &Api, out: Out, target: &InterruptTarget, value: Value) -> Result<(), ClientError> {
    let body = json!({ "resumeValue": value });
    let answer = match &target.token {
        Some(token) => api.post(&format!("/v1/interrupts/{}", encode(token)), &body).await?,
        None => {
            let (run_id, node_id) = run_and_node(target)?;
            api.post(&format!("/v1/runs/{}/interrupts/{}", encode(run_id), encode(node_id)), &body).await?
        }
    };
    if out.json() {
        print_json(&answer);
    } else {
        let outcome = answer["outcome"].as_str().map(|outcome| format!(" ({outcome})")).unwrap_or_default();
        say!(
            "resolved {} at {}{outcome}: run {}",
            text(&answer, "runId"),
            text(&answer, "nodeId"),
            text(&answer, "status")
        );
    }
    Ok(())
}
