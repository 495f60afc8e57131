//! The router through `oneshot` for the read surface: SSE stream modes (`values`, `bufferMs`
//! batches), `Last-Event-ID` and poll cursors beyond the sequence range, the discovery
//! `ETag`, the workflow listing, and the hint for a v2 run id used raw in a path.

mod support;

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Value};
use support::{assert_envelope, Answer, Harness, Setup};
use trellis_http::StreamSettings;

/// `chain`, `gated` and `conversational`; waiting for a commit sleeps, and a stream of a live
/// run ends after 300 ms, so a test reading one finishes.
async fn harness() -> Harness {
    Setup {
        workflows: &["chain", "gated", "conversational"],
        streams: StreamSettings { keepalive: Duration::from_secs(15), max_duration: Some(Duration::from_millis(300)) },
        sleeping_notifier: true,
        ..Setup::default()
    }
    .build()
    .await
}

/// A run of `gated`, suspended at its gate and then cancelled: terminal, with a
/// `node.suspended` in its log.
async fn finished_run(h: &Harness) -> String {
    let run_id = h.suspended("gated", "gate").await;
    let answer = h.send("POST", &format!("/v1/runs/{run_id}/cancel"), Some("alice-key"), &[], None).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    run_id
}

/// One SSE frame: `(id, event, data)`.
type Frame = (Option<String>, String, Value);

fn frames(text: &str) -> Vec<Frame> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty() && !block.starts_with(':'))
        .map(|block| {
            let (mut id, mut event, mut data) = (None, String::new(), Value::Null);
            for line in block.lines() {
                if let Some(rest) = line.strip_prefix("id: ") {
                    id = Some(rest.to_owned());
                } else if let Some(rest) = line.strip_prefix("event: ") {
                    event = rest.to_owned();
                } else if let Some(rest) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(rest).unwrap();
                }
            }
            (id, event, data)
        })
        .collect()
}

const SSE: (&str, &str) = ("accept", "text/event-stream");

// ---- item 3: stream modes ----

#[tokio::test]
async fn values_mode_sends_run_snapshots_and_closes_after_the_terminal_one() {
    let h = harness().await;
    let run_id = finished_run(&h).await;
    let answer = h.get(&format!("/v1/runs/{run_id}/events?streamMode=values"), "alice-key", &[SSE]).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let got = frames(&answer.text);
    assert!(!got.is_empty(), "values mode sends at least one frame");
    assert!(got.iter().all(|(_, event, _)| event == "state.snapshot"), "{got:?}");
    let (id, _, last) = got.last().unwrap();
    assert_eq!(last["runId"], run_id.as_str());
    assert_eq!(last["status"], "cancelled", "the last snapshot is the terminal state");
    let poll = h.get(&format!("/v1/runs/{run_id}/events/poll"), "alice-key", &[]).await.json();
    let terminal = poll["lastEventSeq"].as_u64().unwrap();
    assert_eq!(id.as_deref(), Some(terminal.to_string().as_str()));
    // Resuming at the terminal event: a baseline snapshot first, then the server closes.
    let resumed = h
        .get(
            &format!("/v1/runs/{run_id}/events?streamMode=values"),
            "alice-key",
            &[SSE, ("last-event-id", &terminal.to_string())],
        )
        .await;
    let resumed = frames(&resumed.text);
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    assert_eq!(resumed[0].1, "state.snapshot");
    assert_eq!(resumed[0].2["status"], "cancelled");
}

#[tokio::test]
async fn values_mode_is_served_on_v2_with_the_v2_snapshot() {
    let h = harness().await;
    let run_id = finished_run(&h).await;
    let answer = h.get(&format!("/runs/tenant-a~2F{run_id}/events?streamMode=values"), "alice-key", &[SSE]).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let got = frames(&answer.text);
    assert_eq!(got.last().unwrap().2["runId"], format!("tenant-a/{run_id}"));
    assert_eq!(got.last().unwrap().2["eventLogSchemaVersion"], 3);
}

#[tokio::test]
async fn buffered_streams_send_batches_holding_every_event_once() {
    let h = harness().await;
    let run_id = finished_run(&h).await;
    let plain = frames(&h.get(&format!("/v1/runs/{run_id}/events?streamMode=debug"), "alice-key", &[SSE]).await.text);
    let sequences: Vec<Value> = plain.iter().map(|(_, _, data)| data["sequence"].clone()).collect();
    let answer = h.get(&format!("/v1/runs/{run_id}/events?streamMode=debug&bufferMs=200"), "alice-key", &[SSE]).await;
    assert_eq!(answer.status, StatusCode::OK);
    let batches = frames(&answer.text);
    assert!(!batches.is_empty());
    let mut batched = Vec::new();
    for (id, event, data) in &batches {
        assert_eq!(event, "batch");
        let events = data.as_array().expect("a batch's data is an array of events");
        assert!(!events.is_empty());
        assert_eq!(id.as_deref(), events.last().unwrap()["sequence"].as_u64().map(|s| s.to_string()).as_deref());
        batched.extend(events.iter().map(|event| event["sequence"].clone()));
    }
    assert_eq!(batched, sequences, "a batched stream carries the same events in the same order");
    let last = batches.last().unwrap().2.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["type"], "run.cancelled", "the terminal event is flushed before the server closes");
    // bufferMs=0 is the unbuffered stream.
    let unbuffered = frames(
        &h.get(&format!("/v1/runs/{run_id}/events?streamMode=debug&bufferMs=0"), "alice-key", &[SSE]).await.text,
    );
    assert!(unbuffered.iter().all(|(_, event, _)| event != "batch"));
    assert_eq!(unbuffered.len(), plain.len());
}

#[tokio::test]
async fn a_buffered_live_stream_flushes_what_it_holds_when_it_closes() {
    let h = harness().await;
    // No worker runs here: the run stays `running` with only its first events.
    let created = h.send("POST", "/v1/runs", Some("alice-key"), &[], Some(json!({"workflowId": "chain"}))).await;
    let run_id = created.json()["runId"].as_str().unwrap().to_owned();
    let answer = h.get(&format!("/v1/runs/{run_id}/events?bufferMs=5000"), "alice-key", &[SSE]).await;
    let got = frames(&answer.text);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].1, "batch");
    assert_eq!(got[0].2[0]["type"], "run.started");
}

#[tokio::test]
async fn messages_is_served_alone_or_with_updates_and_discovery_lists_the_modes_served() {
    let h = harness().await;
    let run_id = finished_run(&h).await;
    for mode in ["values,updates", "values,messages", "tokens"] {
        let answer = h.get(&format!("/v1/runs/{run_id}/events?streamMode={mode}"), "alice-key", &[SSE]).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{mode}");
        let body = answer.json();
        assert_envelope(&body, "unsupported_stream_mode");
        assert_eq!(body["details"]["supported"], json!(["values", "updates", "debug", "messages"]));
    }
    for mode in ["messages", "updates,messages"] {
        let answer = h.get(&format!("/v1/runs/{run_id}/events?streamMode={mode}"), "alice-key", &[SSE]).await;
        assert_eq!(answer.status, StatusCode::OK, "{mode}");
    }
    let discovery = h.send("GET", "/.well-known/openwop", None, &[], None).await.json();
    assert_eq!(discovery["streaming"]["modes"], json!(["values", "updates", "debug", "messages"]));
    assert_eq!(discovery["streaming"]["bufferMs"], json!({"minimum": 0, "maximum": 5000}));
}

// ---- item 7: cursors beyond the sequence range ----

#[tokio::test]
async fn a_last_event_id_past_every_sequence_resumes_after_everything() {
    let h = harness().await;
    let run_id = finished_run(&h).await;
    for id in ["9223372036854775808", "18446744073709551615", "99999999999999999999999"] {
        let answer = h
            .get(&format!("/v1/runs/{run_id}/events?streamMode=debug"), "alice-key", &[SSE, ("last-event-id", id)])
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{id}");
        assert_eq!(frames(&answer.text), vec![], "Last-Event-ID {id}: nothing is after it");
        let list = h
            .get(
                &format!("/v1/runs/{run_id}/events"),
                "alice-key",
                &[("accept", "application/json"), ("last-event-id", id)],
            )
            .await;
        assert_eq!(list.json()["events"], json!([]), "{id}");
        let poll = h.get(&format!("/v1/runs/{run_id}/events/poll?lastSequence={id}"), "alice-key", &[]).await;
        assert_eq!(poll.status, StatusCode::OK, "poll {id}: {}", poll.text);
        assert_eq!(poll.json()["events"], json!([]));
        let v2 = h.get(&format!("/runs/tenant-a~2F{run_id}/events/poll?afterSequence={id}"), "alice-key", &[]).await;
        assert_eq!(v2.status, StatusCode::OK, "v2 poll {id}: {}", v2.text);
        assert_eq!(v2.json()["events"], json!([]));
    }
}

#[tokio::test]
async fn a_malformed_last_event_id_is_a_validation_error_naming_the_header() {
    let h = harness().await;
    let run_id = finished_run(&h).await;
    for id in ["abc", "-2", "1.5", "0x10"] {
        let answer = h.get(&format!("/v1/runs/{run_id}/events"), "alice-key", &[SSE, ("last-event-id", id)]).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{id}: {}", answer.text);
        let body = answer.json();
        assert_envelope(&body, "validation_error");
        assert_eq!(body["details"]["header"], "Last-Event-ID", "{body}");
    }
    let answer = h.get(&format!("/v1/runs/{run_id}/events"), "alice-key", &[SSE, ("last-event-id", "-1")]).await;
    assert_eq!(answer.status, StatusCode::OK, "-1 is the start, as on poll");
}

// ---- item 5: discovery ETag ----

#[tokio::test]
async fn discovery_has_a_strong_etag_and_answers_if_none_match_with_304() {
    let h = harness().await;
    let v1 = h.send("GET", "/.well-known/openwop", None, &[], None).await;
    let v2 = h.send("GET", "/.well-known/openwop", None, &[("openwop-version", "2")], None).await;
    let tag = |answer: &Answer| answer.headers.get("etag").expect("an ETag").to_str().unwrap().to_owned();
    let (v1_tag, v2_tag) = (tag(&v1), tag(&v2));
    for tag in [&v1_tag, &v2_tag] {
        assert!(tag.starts_with('"') && tag.ends_with('"') && tag.len() > 2, "a strong entity tag: {tag}");
    }
    assert_ne!(v1_tag, v2_tag, "the v1 document and the v2 projection are different representations");
    assert!(v1.headers["vary"].to_str().unwrap().contains("OpenWOP-Version"));
    assert_eq!(v1_tag, tag(&h.send("GET", "/.well-known/openwop", None, &[], None).await), "stable");
    let cached = h.send("GET", "/.well-known/openwop", None, &[("if-none-match", &v1_tag)], None).await;
    assert_eq!(cached.status, StatusCode::NOT_MODIFIED);
    assert_eq!(cached.text, "");
    assert_eq!(tag(&cached), v1_tag);
    let listed = format!("\"other\", W/{v2_tag}");
    let cached = h
        .send("GET", "/.well-known/openwop", None, &[("if-none-match", &listed), ("openwop-version", "2")], None)
        .await;
    assert_eq!(cached.status, StatusCode::NOT_MODIFIED, "a list, and weak comparison");
    let star = h.send("GET", "/.well-known/openwop", None, &[("if-none-match", "*")], None).await;
    assert_eq!(star.status, StatusCode::NOT_MODIFIED);
    let other = h
        .send("GET", "/.well-known/openwop", None, &[("if-none-match", &v1_tag), ("openwop-version", "2")], None)
        .await;
    assert_eq!(other.status, StatusCode::OK, "the v1 tag does not match the v2 projection");
    assert!(other.json()["protocolVersion"] == "2.0");
}

// ---- item 24: a v2 run id used raw in a path ----

#[tokio::test]
async fn a_raw_v2_run_id_in_a_path_gets_a_hint_to_encode_the_slash() {
    let h = harness().await;
    let run_id = finished_run(&h).await;
    for uri in [
        format!("/runs/tenant-a/{run_id}"),
        format!("/runs/tenant-a/{run_id}/events"),
        format!("/v1/runs/tenant-a/{run_id}/events"),
        format!("/v1/runs/tenant-a/{run_id}"),
    ] {
        let answer = h.get(&uri, "alice-key", &[]).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{uri}");
        let body = answer.json();
        assert_envelope(&body, "not_found");
        let hint = body["details"]["hint"].as_str().unwrap_or_else(|| panic!("{uri}: {body}"));
        assert!(hint.contains(&format!("tenant-a~2F{run_id}")), "{uri}: {hint}");
        assert!(body["message"].as_str().unwrap().contains("~2F"), "{uri}: {body}");
    }
    // The encoded form works.
    let answer = h.get(&format!("/runs/tenant-a~2F{run_id}"), "alice-key", &[]).await;
    assert_eq!(answer.status, StatusCode::OK);
    // Other unknown routes keep the plain answer.
    let answer = h.get("/v1/nowhere/at/all", "alice-key", &[]).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert!(answer.json()["details"].get("hint").is_none());
}

// ---- item 20: GET /v1/workflows ----

#[tokio::test]
async fn the_workflow_list_shows_global_and_own_definitions_only() {
    let h = harness().await;
    let mine = json!({"id": "mine", "name": "Mine", "version": "2", "nodes": [{"id": "a", "typeId": "core.noop"}]});
    let registered = h.send("POST", "/v1/workflows", Some("alice-key"), &[], Some(mine)).await;
    assert_eq!(registered.status, StatusCode::CREATED, "{}", registered.text);
    let alice = h.get("/v1/workflows", "alice-key", &[]).await;
    assert_eq!(alice.status, StatusCode::OK, "{}", alice.text);
    let alice = alice.json();
    assert_eq!(
        alice["workflows"],
        json!([
            {"workflowId": "chain", "version": "1", "name": "Chain", "namespace": "global", "runnable": true},
            {"workflowId": "conversational", "version": alice["workflows"][1]["version"], "name": "Conversational",
             "namespace": "global", "runnable": false, "requiredCapability": "conversationPrimitive"},
            {"workflowId": "gated", "version": alice["workflows"][2]["version"], "name": "Gated", "namespace": "global", "runnable": true},
            {"workflowId": "mine", "version": "2", "name": "Mine", "namespace": "tenant", "runnable": true},
        ])
    );
    assert!(alice.get("nextCursor").is_none_or(Value::is_null));
    let bob = h.get("/v1/workflows", "bob-key", &[]).await.json();
    let ids: Vec<&str> =
        bob["workflows"].as_array().unwrap().iter().map(|w| w["workflowId"].as_str().unwrap()).collect();
    assert_eq!(ids, ["chain", "conversational", "gated"], "another tenant's registration is never listed");
    let scoped = h.get("/v1/workflows", "manifest-key", &[]).await;
    assert_eq!(scoped.status, StatusCode::OK, "manifest:read is enough");
    let refused = h.get("/v1/workflows", "reader-key", &[]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_envelope(&refused.json(), "forbidden");
}

#[tokio::test]
async fn the_workflow_list_pages_with_a_tenant_bound_cursor() {
    let h = harness().await;
    let mine = json!({"id": "mine", "name": "Mine", "nodes": [{"id": "a", "typeId": "core.noop"}]});
    h.send("POST", "/v1/workflows", Some("alice-key"), &[], Some(mine)).await;
    let first = h.get("/v1/workflows?limit=3", "alice-key", &[]).await.json();
    assert_eq!(first["workflows"].as_array().unwrap().len(), 3);
    let cursor = first["nextCursor"].as_str().expect("a next page").to_owned();
    let second = h.get(&format!("/v1/workflows?limit=3&cursor={cursor}"), "alice-key", &[]).await.json();
    assert_eq!(second["workflows"][0]["workflowId"], "mine");
    assert!(second.get("nextCursor").is_none_or(Value::is_null));
    let stolen = h.get(&format!("/v1/workflows?limit=3&cursor={cursor}"), "bob-key", &[]).await;
    assert_eq!(stolen.status, StatusCode::BAD_REQUEST);
    assert_envelope(&stolen.json(), "validation_error");
    for _ in 0..2 {
        let created = h.send("POST", "/v1/runs", Some("alice-key"), &[], Some(json!({"workflowId": "chain"}))).await;
        assert_eq!(created.status, StatusCode::CREATED);
    }
    let runs = h.get("/v1/runs?limit=1", "alice-key", &[]).await.json();
    let run_cursor = runs["nextCursor"].as_str().unwrap();
    let crossed = h.get(&format!("/v1/workflows?cursor={run_cursor}"), "alice-key", &[]).await;
    assert_eq!(crossed.status, StatusCode::BAD_REQUEST, "a run-list cursor is not a workflow-list cursor");
    for bad in ["limit=0", "limit=101", "limit=x", "cursor=garbage"] {
        let answer = h.get(&format!("/v1/workflows?{bad}"), "alice-key", &[]).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_envelope(&answer.json(), "validation_error");
    }
}
