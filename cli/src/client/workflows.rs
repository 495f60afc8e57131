//! `trellis workflows list|show|register|validate`.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::exit::ClientError;
use super::http::{encode, Api};
use super::output::{print_fields, print_json, print_table, say, text, Out};
use crate::args::WorkflowsCommand;

/// Runs one `workflows` subcommand.
pub async fn run(api: &Api, out: Out, command: &WorkflowsCommand) -> Result<(), ClientError> {
    match command {
        WorkflowsCommand::List => list(api, out).await,
        WorkflowsCommand::Show { id } => show(api, out, id).await,
        WorkflowsCommand::Register { files } => register(api, out, files, false).await,
        WorkflowsCommand::Validate { files } => register(api, out, files, true).await,
    }
}

/// Every page of `GET /v1/workflows`.
async fn list(api: &Api, out: Out) -> Result<(), ClientError> {
    let workflows = api.pages("/v1/workflows?limit=100", "workflows", true).await?;
    if out.json() {
        print_json(&json!({ "workflows": workflows }));
        return Ok(());
    }
    // The list has no node counts: each definition is read for its nodes.
    let mut rows = Vec::new();
    for workflow in &workflows {
        let id = text(workflow, "workflowId");
        let nodes = match api.get(&format!("/v1/workflows/{}", encode(&id))).await {
            Ok(definition) => definition["nodes"].as_array().map_or(0, Vec::len).to_string(),
            Err(_) => "-".to_owned(),
        };
        rows.push(vec![id, text(workflow, "version"), text(workflow, "name"), nodes]);
    }
    print_table(&["ID", "VERSION", "NAME", "NODES"], rows);
    Ok(())
}

async fn show(api: &Api, out: Out, id: &str) -> Result<(), ClientError> {
    let definition = api.get(&format!("/v1/workflows/{}", encode(id))).await?;
    if out.json() {
        print_json(&definition);
        return Ok(());
    }
    let nodes = definition["nodes"].as_array().cloned().unwrap_or_default();
    let edges = definition["edges"].as_array().cloned().unwrap_or_default();
    print_fields(vec![
        ("workflow", text(&definition, "id")),
        ("version", text(&definition, "version")),
        ("name", text(&definition, "name")),
        ("description", text(&definition, "description")),
        ("nodes", nodes.len().to_string()),
    ]);
    say!("");
    let rows = nodes
        .iter()
        .map(|node| {
            let node_id = text(node, "id");
            let next: Vec<String> = edges
                .iter()
                .filter(|edge| edge["sourceNodeId"].as_str() == Some(node_id.as_str()))
                .map(|edge| text(edge, "targetNodeId"))
                .collect();
            let next = if next.is_empty() { "-".to_owned() } else { next.join(", ") };
            vec![node_id, text(node, "typeId"), next]
        })
        .collect();
    print_table(&["NODE", "TYPE", "NEXT"], rows);
    Ok(())
}

/// The files named: each file, and each `*.json` of a directory (sorted).
fn expand(files: &[PathBuf]) -> Result<Vec<PathBuf>, ClientError> {
    let mut expanded = Vec::new();
    for path in files {
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|error| {
                ClientError::Input(format!("{}: cannot read the directory: {error}", path.display()))
            })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|path| path.is_file() && path.extension().is_some_and(|ext| ext == "json"))
                .collect();
            found.sort();
            expanded.extend(found);
        } else {
            expanded.push(path.clone());
        }
    }
    Ok(expanded)
}

fn read_definition(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read it: {error}"))?;
    serde_json::from_str(&text).map_err(|error| format!("not JSON: {error}"))
}

/// `register` (or, with `dry_run`, `validate`) of every file; exit 3 when any is refused.
async fn register(api: &Api, out: Out, files: &[PathBuf], dry_run: bool) -> Result<(), ClientError> {
    let route = if dry_run { "/v1/workflows:validate" } else { "/v1/workflows" };
    let mut answers = Vec::new();
    let mut refused = 0usize;
    for path in expand(files)? {
        let shown = path.display().to_string();
        let definition = match read_definition(&path) {
            Ok(definition) => definition,
            Err(error) => {
                refused += 1;
                eprintln!("invalid: {shown}: {error}");
                answers.push(json!({ "file": shown, "valid": false, "error": error }));
                continue;
            }
        };
        match api.post(route, &definition).await {
            Ok(answer) => {
                if !out.json() {
                    let id = text(&answer, "workflowId");
                    if dry_run {
                        say!("valid: {id}");
                    } else {
                        say!("registered {id} (version {})", text(&answer, "version"));
                    }
                }
                answers.push(json!({ "file": shown, "result": answer }));
            }
            Err(ClientError::Http { status, error, message, details }) => {
                refused += 1;
                let lines = error_lines(&message, details.as_ref());
                if !out.json() {
                    say!("invalid: {shown}: {status} {error}");
                    lines.iter().for_each(|line| say!("  {line}"));
                }
                answers.push(json!({ "file": shown, "valid": false,
                    "error": { "status": status, "error": error, "message": message, "details": details } }));
            }
            Err(other) => return Err(other),
        }
    }
    if out.json() {
        print_json(&Value::Array(answers));
    }
    if refused > 0 {
        let verb = if dry_run { "invalid" } else { "refused" };
        return Err(ClientError::Invalid { message: format!("{refused} file(s) {verb}"), errors: Vec::new() });
    }
    Ok(())
}

/// Each error of a refusal: `PATH: message (rule: R)`.
fn error_lines(message: &str, details: Option<&Value>) -> Vec<String> {
    let Some(details) = details else { return vec![message.to_owned()] };
    if let Some(violations) = details["violations"].as_array().filter(|list| !list.is_empty()) {
        return violations
            .iter()
            .map(|violation| {
                let rule = violation["keyword"].as_str().or(violation["rule"].as_str()).unwrap_or("?");
                format!("{}: {} (rule: {rule})", text(violation, "path"), text(violation, "message"))
            })
            .collect();
    }
    let rule = details["rule"].as_str().or(details["reason"].as_str());
    match (details["path"].as_str(), rule) {
        (Some(path), Some(rule)) => vec![format!("{path}: {message} (rule: {rule})")],
        (Some(path), None) => vec![format!("{path}: {message}")],
        _ => vec![format!("{message} {details}")],
    }
}
