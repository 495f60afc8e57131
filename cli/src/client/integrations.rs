//! `trellis webhooks|triggers|schedules`: the integration routes of `docs/webhooks.md` and
//! `docs/triggers.md`, for the key's tenant. Creating a webhook or a trigger prints its
//! secret, which the host shows only in that answer.

use reqwest::Method;
use serde_json::{json, Map, Value};

use super::exit::ClientError;
use super::http::{encode, Api};
use super::output::{print_fields, print_json, print_table, say, text, Out};
use crate::args::{SchedulesCommand, TriggersCommand, WebhooksCommand};

/// Runs one `webhooks` subcommand.
pub async fn webhooks(api: &Api, out: Out, command: &WebhooksCommand) -> Result<(), ClientError> {
    match command {
        WebhooksCommand::List => {
            let list = api.get("/v1/webhooks").await?;
            let rows = items(&list, "webhooks")
                .iter()
                .map(|hook| {
                    vec![text(hook, "webhookId"), text(hook, "state"), joined(hook, "events"), text(hook, "url")]
                })
                .collect();
            show_list(out, &list, &["ID", "STATE", "EVENTS", "URL"], rows);
        }
        WebhooksCommand::Create { destination, events } => {
            let created = api.post("/v1/webhooks", &json!({ "url": destination, "events": events })).await?;
            show_secret(out, &created, "webhookId");
        }
        WebhooksCommand::Delete { id } => {
            api.send(Method::DELETE, &format!("/v1/webhooks/{}", encode(id)), None, &[]).await?;
            done(out, id, "deleted");
        }
        WebhooksCommand::Deliveries { id, state } => {
            let query = state.as_ref().map(|state| format!("?state={}", encode(state))).unwrap_or_default();
            let records =
                api.pages(&format!("/v1/webhooks/{}/deliveries{query}", encode(id)), "deliveries", true).await?;
            let rows = records
                .iter()
                .map(|record| {
                    vec![
                        text(record, "runId"),
                        text(record, "sequence"),
                        text(record, "eventType"),
                        text(record, "state"),
                        text(record, "attempts"),
                        text(record, "lastErrorCode"),
                    ]
                })
                .collect();
            show_list(
                out,
                &json!({ "deliveries": records }),
                &["RUN", "SEQ", "TYPE", "STATE", "ATTEMPTS", "LAST ERROR"],
                rows,
            );
        }
    }
    Ok(())
}

/// Runs one `triggers` subcommand.
pub async fn triggers(api: &Api, out: Out, command: &TriggersCommand) -> Result<(), ClientError> {
    match command {
        TriggersCommand::List => {
            let list = api.get("/v1/trigger-subscriptions").await?;
            let rows = items(&list, "subscriptions")
                .iter()
                .map(|sub| {
                    vec![
                        text(sub, "subscriptionId"),
                        text(sub, "state"),
                        text(sub, "workflowId"),
                        if sub.get("queue").is_some() { text(sub, "backend") } else { text(sub, "ingestUrl") },
                    ]
                })
                .collect();
            show_list(out, &list, &["ID", "STATE", "WORKFLOW", "INGEST URL / QUEUE"], rows);
        }
        TriggersCommand::Create { workflow, mappings, sqs_queue_arn, event_source, detail_type } => {
            let mut mapping = Map::new();
            for pair in mappings {
                let (input, pointer) = pair
                    .split_once('=')
                    .ok_or_else(|| ClientError::Input(format!("--map `{pair}` is not INPUT=/POINTER")))?;
                mapping.insert(input.to_owned(), json!(pointer));
            }
            let queue = match (sqs_queue_arn, event_source) {
                (Some(arn), _) => Some(json!({ "sqsQueueArn": arn })),
                (None, Some(source)) => Some(json!({ "eventSource": source, "detailType": detail_type })),
                (None, None) => None,
            };
            let body = match queue {
                Some(queue) => {
                    json!({ "source": "queue", "workflowId": workflow, "inputMapping": mapping, "queue": queue })
                }
                None => json!({ "source": "webhook", "workflowId": workflow, "inputMapping": mapping }),
            };
            let created = api.post("/v1/trigger-subscriptions", &body).await?;
            if created.get("secret").is_some() {
                show_secret(out, &created, "subscriptionId");
            } else if out.json() {
                print_json(&created);
            } else {
                print_fields(vec![
                    ("subscriptionId", text(&created, "subscriptionId")),
                    ("backend", text(&created, "backend")),
                    ("workflowId", text(&created, "workflowId")),
                    ("state", text(&created, "state")),
                ]);
            }
        }
        TriggersCommand::Pause { id } | TriggersCommand::Resume { id } => {
            let verb = if matches!(command, TriggersCommand::Pause { .. }) { "pause" } else { "resume" };
            let answer = api.post(&format!("/v1/trigger-subscriptions/{}:{verb}", encode(id)), &json!({})).await?;
            state(out, &answer, "subscriptionId");
        }
        TriggersCommand::Delete { id } => {
            api.send(Method::DELETE, &format!("/v1/trigger-subscriptions/{}", encode(id)), None, &[]).await?;
            done(out, id, "deleted");
        }
        TriggersCommand::Events { id } => {
            let log = api.pages(&format!("/v1/trigger-subscriptions/{}/events", encode(id)), "events", true).await?;
            let rows = log
                .iter()
                .map(|entry| {
                    let payload = &entry["payload"];
                    let what = match entry["type"].as_str() {
                        Some("trigger.delivery.attempted") => {
                            format!(
                                "attempt {} {} {}",
                                text(payload, "attempt"),
                                text(payload, "outcome"),
                                text(payload, "runId")
                            )
                        }
                        _ => format!(
                            "{} -> {} ({})",
                            text(payload, "fromState"),
                            text(payload, "toState"),
                            text(payload, "reason")
                        ),
                    };
                    vec![text(entry, "timestamp"), text(entry, "type"), what]
                })
                .collect();
            show_list(out, &json!({ "events": log }), &["TIME", "TYPE", "WHAT"], rows);
        }
    }
    Ok(())
}

/// Runs one `schedules` subcommand.
pub async fn schedules(api: &Api, out: Out, command: &SchedulesCommand) -> Result<(), ClientError> {
    match command {
        SchedulesCommand::List => {
            let list = api.get("/v1/schedules").await?;
            let rows = items(&list, "schedules")
                .iter()
                .map(|schedule| {
                    vec![
                        text(schedule, "scheduleId"),
                        text(schedule, "state"),
                        text(schedule, "expression"),
                        text(schedule, "timezone"),
                        text(schedule, "nextAt"),
                        text(schedule, "fired"),
                    ]
                })
                .collect();
            show_list(out, &list, &["ID", "STATE", "EXPRESSION", "ZONE", "NEXT", "FIRED"], rows);
        }
        SchedulesCommand::Pause { id } | SchedulesCommand::Resume { id } => {
            let verb = if matches!(command, SchedulesCommand::Pause { .. }) { "pause" } else { "resume" };
            // The id's slash separates the workflow from the trigger: both are path segments.
            let (workflow, trigger) =
                id.split_once('/').ok_or_else(|| ClientError::Input(format!("`{id}` is not WORKFLOW/TRIGGER")))?;
            let path = format!("/v1/schedules/{}/{}:{verb}", encode(workflow), encode(trigger));
            let answer = api.post(&path, &json!({})).await?;
            state(out, &answer, "scheduleId");
        }
    }
    Ok(())
}

fn items<'a>(list: &'a Value, field: &str) -> &'a [Value] {
    list[field].as_array().map_or(&[], Vec::as_slice)
}

fn joined(value: &Value, field: &str) -> String {
    let parts: Vec<&str> = items(value, field).iter().filter_map(Value::as_str).collect();
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(",")
    }
}

fn show_list(out: Out, list: &Value, headers: &[&str], rows: Vec<Vec<String>>) {
    if out.json() {
        print_json(list);
    } else {
        print_table(headers, rows);
    }
}

/// A created subscription: its id, secret and the rest.
fn show_secret(out: Out, created: &Value, id_field: &str) {
    if out.json() {
        print_json(created);
        return;
    }
    let mut fields = vec![(id_field, text(created, id_field)), ("secret", text(created, "secret"))];
    for field in ["secretFingerprint", "url", "workflowId", "ingestUrl", "state"] {
        if created.get(field).is_some() {
            fields.push((field, text(created, field)));
        }
    }
    print_fields(fields);
    say!("keep the secret now: it is not shown again");
}

fn state(out: Out, answer: &Value, id_field: &str) {
    if out.json() {
        print_json(answer);
    } else {
        say!("{} {}", text(answer, id_field), text(answer, "state"));
    }
}

fn done(out: Out, id: &str, what: &str) {
    if out.json() {
        print_json(&json!({ "id": id, "result": what }));
    } else {
        say!("{id} {what}");
    }
}
