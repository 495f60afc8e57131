//! The rest of the v1 surface against a real listener: SSE, idempotency on every mutating
//! route, bulk cancel, the run list and its signed cursors, workflow registration and the
//! debug bundle.

mod common;

use std::time::{Duration, Instant};

use common::{assert_log_well_formed, serve_args, start, start_with, types, write_keys_file, Client, Reference, KEY};
use serde_json::{json, Value};
use trellis::host::HostOptions;
use trellis_http::StreamSettings;

const SPEC_DEADLINE: Duration = Duration::from_secs(5);

/// One parsed SSE frame.
#[derive(Debug)]
struct Frame {
    id: Option<String>,
    event: Option<String>,
    data: Option<Value>,
    comment: bool,
}

fn parse_frames(text: &str) -> Vec<Frame> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut frame = Frame { id: None, event: None, data: None, comment: false };
            for line in block.lines() {
                if let Some(rest) = line.strip_prefix("id: ") {
                    frame.id = Some(rest.to_owned());
                } else if let Some(rest) = line.strip_prefix("event: ") {
                    frame.event = Some(rest.to_owned());
                } else if let Some(rest) = line.strip_prefix("data: ") {
                    frame.data = Some(serde_json::from_str(rest).expect("data is one line of JSON"));
                } else if line.starts_with(':') {
                    frame.comment = true;
                }
            }
            frame
        })
        .collect()
}

struct Sse {
    response: reqwest::Response,
    text: String,
}

impl Sse {
    async fn open(base: &str, run_id: &str, query: &str, last_event_id: Option<u64>) -> Self {
        let mut request = reqwest::Client::new()
            .get(format!("{base}/v1/runs/{run_id}/events{query}"))
            .bearer_auth(KEY)
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        Self { response, text: String::new() }
    }

    /// Reads until the server closes the stream (panics after `within`).
    async fn read_to_close(mut self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.response.chunk()).await {
                Ok(Ok(Some(bytes))) => self.text.push_str(std::str::from_utf8(&bytes).unwrap()),
                Ok(Ok(None)) => return self.text,
                Ok(Err(error)) => panic!("stream error: {error}"),
                Err(_) => panic!("the server did not close the stream within {within:?}: {}", self.text),
            }
        }
    }

    /// Reads until `done` holds for the text so far.
    async fn read_until(&mut self, within: Duration, done: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + within;
        while !done(&self.text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.response.chunk()).await {
                Ok(Ok(Some(bytes))) => self.text.push_str(std::str::from_utf8(&bytes).unwrap()),
                Ok(Ok(None)) => panic!("stream closed early: {}", self.text),
                Ok(Err(error)) => panic!("stream error: {error}"),
                Err(_) => panic!("condition not met within {within:?}: {}", self.text),
            }
        }
    }
}

fn event_frames(text: &str) -> Vec<Frame> {
    parse_frames(text).into_iter().filter(|frame| !frame.comment).collect()
}

#[tokio::test]
async fn sse_replays_the_backlog_in_frame_format_and_closes_after_the_terminal_event() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let run_id = client.create(json!({"workflowId": "conformance-multi-node"})).await;
    client.wait_terminal(&run_id, SPEC_DEADLINE).await;

    let text = Sse::open(&base, &run_id, "?streamMode=debug", None).await.read_to_close(SPEC_DEADLINE).await;
    let frames = event_frames(&text);
    assert_eq!(frames.len(), 8, "{text}");
    for (sequence, frame) in frames.iter().enumerate() {
        let data = frame.data.as_ref().unwrap();
        assert_eq!(frame.id.as_deref(), Some(sequence.to_string().as_str()), "id is the sequence");
        assert_eq!(frame.event.as_deref(), data["type"].as_str(), "event is the type");
        assert_eq!(data["sequence"], json!(sequence));
        assert_eq!(data["runId"], json!(run_id));
    }
    assert_eq!(frames.last().unwrap().event.as_deref(), Some("run.completed"));

    let updates = Sse::open(&base, &run_id, "", None).await.read_to_close(SPEC_DEADLINE).await;
    let kinds: Vec<String> = event_frames(&updates).into_iter().map(|f| f.event.unwrap()).collect();
    assert!(!kinds.contains(&"node.started".to_owned()), "updates mode leaves out node.started: {kinds:?}");
    assert_eq!(kinds.first().map(String::as_str), Some("run.started"));
    assert_eq!(kinds.last().map(String::as_str), Some("run.completed"));

    // Resuming at the terminal event: 200, nothing more, closed.
    let after_end = Sse::open(&base, &run_id, "", Some(7)).await.read_to_close(SPEC_DEADLINE).await;
    assert!(event_frames(&after_end).is_empty(), "{after_end}");
    host.stop().await;
}

/// Registers a chain of three 200 ms delays for the caller's tenant.
async fn register_ticks(client: &Client) {
    let ticks = json!({
        "id": "ticks", "name": "Ticks", "version": "1",
        "nodes": [
            {"id": "t1", "typeId": "core.delay", "config": {"delayMs": 200}},
            {"id": "t2", "typeId": "core.delay", "config": {"delayMs": 200}},
            {"id": "t3", "typeId": "core.delay", "config": {"delayMs": 200}}
        ],
        "edges": [{"id": "a", "sourceNodeId": "t1", "targetNodeId": "t2"}, {"id": "b", "sourceNodeId": "t2", "targetNodeId": "t3"}]
    });
    let (status, body) = client.request("POST", "/v1/workflows", Some(ticks)).await;
    assert!(status == 201 || status == 200, "{body}");
}

#[tokio::test]
async fn sse_delivers_live_events_and_resumes_after_last_event_id_without_gap_or_duplicate() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    register_ticks(&client).await;
    let run_id = client.create(json!({"workflowId": "ticks"})).await;

    let mut first = Sse::open(&base, &run_id, "?streamMode=debug", None).await;
    first.read_until(SPEC_DEADLINE, |text| text.contains("event: node.completed")).await;
    let seen: Vec<u64> = event_frames(&first.text).iter().map(|f| f.id.as_ref().unwrap().parse().unwrap()).collect();
    assert_eq!(client.snapshot(&run_id).await["status"], "running", "the first stream read live events");
    drop(first);

    let resume_at = *seen.last().unwrap();
    let rest = Sse::open(&base, &run_id, "?streamMode=debug", Some(resume_at)).await.read_to_close(SPEC_DEADLINE).await;
    let resumed: Vec<u64> = event_frames(&rest).iter().map(|f| f.id.as_ref().unwrap().parse().unwrap()).collect();
    assert!(
        resumed.first().is_some_and(|first| *first == resume_at + 1),
        "resume starts right after {resume_at}: {resumed:?}"
    );
    let all: Vec<u64> = seen.iter().chain(resumed.iter()).copied().collect();
    let expected: Vec<u64> = (0..all.len() as u64).collect();
    assert_eq!(all, expected, "no gap, no duplicate");
    assert_eq!(event_frames(&rest).last().unwrap().event.as_deref(), Some("run.completed"));
    assert_log_well_formed(&client.events(&run_id).await);
    host.stop().await;
}

#[tokio::test]
async fn sse_sends_keepalive_comments_on_an_idle_run() {
    let options = HostOptions {
        api_key: Some(KEY.to_owned()),
        streams: StreamSettings { keepalive: Duration::from_millis(200), max_duration: None },
        ..HostOptions::default()
    };
    let host = start_with(serve_args(None), options).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let run_id = client.create(json!({"workflowId": "conformance-cancellable", "inputs": {"delayMs": 60000}})).await;
    let mut stream = Sse::open(&base, &run_id, "", None).await;
    stream.read_until(SPEC_DEADLINE, |text| text.matches(":keepalive").count() >= 2).await;
    client.request("POST", &format!("/v1/runs/{run_id}/cancel"), None).await;
    let text = stream.read_to_close(SPEC_DEADLINE).await;
    assert_eq!(event_frames(&text).last().unwrap().event.as_deref(), Some("run.cancelled"));
    host.stop().await;
}

#[test]
fn default_keepalive_is_fifteen_seconds() {
    assert_eq!(StreamSettings::default().keepalive, Duration::from_secs(15));
}

#[tokio::test]
async fn live_streams_batch_with_buffer_ms_and_send_snapshots_in_values_mode() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    // Subscribed while the run is still in its delay: the frames come live.
    let run_id = client.create(json!({"workflowId": "conformance-delay", "inputs": {"delayMs": 1500}})).await;
    let values_run = client.create(json!({"workflowId": "conformance-delay", "inputs": {"delayMs": 1500}})).await;
    let batched = Sse::open(&base, &run_id, "?streamMode=updates&bufferMs=4000", None).await;
    let values = Sse::open(&base, &values_run, "?streamMode=values", None).await;
    let text = batched.read_to_close(SPEC_DEADLINE).await;
    let frames = event_frames(&text);
    assert!(!frames.is_empty(), "{text}");
    let mut events = Vec::new();
    for frame in &frames {
        assert_eq!(frame.event.as_deref(), Some("batch"), "{text}");
        let batch = frame.data.as_ref().and_then(Value::as_array).expect("a batch is an array").clone();
        assert_eq!(frame.id, batch.last().map(|event| event["sequence"].to_string()), "id is the highest sequence");
        events.extend(batch);
    }
    let kinds: Vec<&str> = events.iter().map(|event| event["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"run.started"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"run.completed"), "the terminal event is flushed: {kinds:?}");
    let sequences: Vec<u64> = events.iter().map(|event| event["sequence"].as_u64().unwrap()).collect();
    assert!(sequences.windows(2).all(|pair| pair[0] < pair[1]), "each event once, in order: {sequences:?}");

    let text = values.read_to_close(SPEC_DEADLINE).await;
    let frames = event_frames(&text);
    assert!(!frames.is_empty(), "{text}");
    assert!(frames.iter().all(|frame| frame.event.as_deref() == Some("state.snapshot")), "{text}");
    let last = frames.last().unwrap().data.as_ref().unwrap();
    assert_eq!((last["runId"].as_str(), last["status"].as_str()), (Some(values_run.as_str()), Some("completed")));
    host.stop().await;
}

#[tokio::test]
async fn sse_rejects_unserved_modes_and_bad_buffers_and_serves_json_on_request() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let run_id = client.create(json!({"workflowId": "conformance-noop"})).await;
    client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    for (query, code) in [
        ("streamMode=bogus", "unsupported_stream_mode"),
        ("streamMode=values,messages", "unsupported_stream_mode"),
        ("streamMode=values,updates", "unsupported_stream_mode"),
        ("bufferMs=9000", "validation_error"),
        ("bufferMs=abc", "validation_error"),
    ] {
        let (status, body) = client.request("GET", &format!("/v1/runs/{run_id}/events?{query}"), None).await;
        assert_eq!((status, body["error"].as_str()), (400, Some(code)), "{query}: {body}");
        if code == "unsupported_stream_mode" {
            assert_eq!(body["details"]["supported"], json!(["values", "updates", "debug", "messages"]));
        }
    }
    assert_eq!(
        types(&client.debug_events(&run_id).await),
        ["run.started", "node.started", "node.completed", "run.completed"]
    );
    host.stop().await;
}

async fn keyed(base: &str, key: &str, path: &str, body: Value) -> (u16, Option<String>, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .bearer_auth(KEY)
        .header("idempotency-key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let replay = response.headers().get("openwop-idempotent-replay").map(|v| v.to_str().unwrap().to_owned());
    (status, replay, response.json().await.unwrap())
}

#[tokio::test]
async fn ten_concurrent_same_key_creates_make_one_run() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let body = json!({"workflowId": "conformance-idempotent", "inputs": {"nonce": "n-1"}});
    let attempts: Vec<_> =
        (0..10).map(|_| tokio::spawn(keyed_owned(base.clone(), "same-key".to_owned(), body.clone()))).collect();
    let mut run_ids = Vec::new();
    for attempt in attempts {
        let (status, _, answer) = attempt.await.unwrap();
        match status {
            200 | 201 => run_ids.push(answer["runId"].as_str().unwrap().to_owned()),
            409 => {
                assert_eq!(answer["error"], "idempotency_in_flight");
                assert!(answer["details"]["retryAfter"].as_u64().unwrap() > 0);
            }
            other => panic!("unexpected {other}: {answer}"),
        }
    }
    assert!(!run_ids.is_empty());
    assert!(run_ids.iter().all(|id| *id == run_ids[0]), "{run_ids:?}");
    let client = Client::new(&base, KEY);
    let (_, listing) = client.request("GET", "/v1/runs?workflowId=conformance-idempotent", None).await;
    assert_eq!(listing["runs"].as_array().unwrap().len(), 1, "exactly one run");
    // Five sequential retries later: the same run, marked as replays.
    for _ in 0..5 {
        let (status, replay, answer) = keyed(&base, "same-key", "/v1/runs", body.clone()).await;
        assert_eq!((status, replay.as_deref()), (201, Some("true")));
        assert_eq!(answer["runId"], json!(run_ids[0]));
    }
    host.stop().await;
}

async fn keyed_owned(base: String, key: String, body: Value) -> (u16, Option<String>, Value) {
    keyed(&base, &key, "/v1/runs", body).await
}

#[tokio::test]
async fn cancel_and_bulk_cancel_honour_idempotency_keys() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let run_id = client.create(json!({"workflowId": "conformance-cancellable", "inputs": {"delayMs": 60000}})).await;
    let path = format!("/v1/runs/{run_id}/cancel");
    let (status, replay, first) = keyed(&base, "c-1", &path, json!({"reason": "x"})).await;
    assert_eq!((status, replay.as_deref()), (200, Some("false")));
    client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    let (status, replay, second) = keyed(&base, "c-1", &path, json!({"reason": "x"})).await;
    assert_eq!((status, replay.as_deref()), (200, Some("true")));
    assert_eq!(second, first, "the recorded answer, not a new one");
    let (status, _, mismatch) = keyed(&base, "c-1", &path, json!({"reason": "y"})).await;
    assert_eq!((status, mismatch["error"].as_str()), (409, Some("idempotency_key_mismatch")));
    assert!(mismatch.get("runId").is_none());
    let bulk = json!({"runIds": [run_id]});
    let (_, replay, first) = keyed(&base, "b-1", "/v1/runs:bulk-cancel", bulk.clone()).await;
    assert_eq!(replay.as_deref(), Some("false"));
    let (_, replay, second) = keyed(&base, "b-1", "/v1/runs:bulk-cancel", bulk).await;
    assert_eq!((replay.as_deref(), &second), (Some("true"), &first));
    // A validation failure is not kept: the same key can then carry a valid request.
    let (status, _, _) = keyed(&base, "v-1", "/v1/runs", json!({"workflowId": 5})).await;
    assert_eq!(status, 400);
    let (status, replay, _) = keyed(&base, "v-1", "/v1/runs", json!({"workflowId": "conformance-noop"})).await;
    assert_eq!((status, replay.as_deref()), (201, Some("false")));
    host.stop().await;
}

#[tokio::test]
async fn bulk_cancel_reports_each_id_in_request_order() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys_file(dir.path(), &[(KEY, "main", &["*"]), ("other-key", "other", &["*"])]);
    let mut args = serve_args(None);
    args.keys_file = Some(keys);
    let host = start_with(args, HostOptions::default()).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let other = Client::new(&base, "other-key");
    let running = client.create(json!({"workflowId": "conformance-cancellable", "inputs": {"delayMs": 60000}})).await;
    let done = client.create(json!({"workflowId": "conformance-noop"})).await;
    client.wait_terminal(&done, SPEC_DEADLINE).await;
    let foreign = other.create(json!({"workflowId": "conformance-cancellable", "inputs": {"delayMs": 60000}})).await;
    let ids = json!([running, done, "run-missing", foreign]);
    let (status, body) =
        client.request("POST", "/v1/runs:bulk-cancel", Some(json!({"runIds": ids, "reason": "bulk"}))).await;
    assert_eq!(status, 200, "{body}");
    let results = body["results"].as_array().unwrap();
    let order: Vec<&Value> = results.iter().map(|r| &r["runId"]).collect();
    assert_eq!(json!(order), ids);
    assert_eq!(results[0]["ok"], true);
    assert!(matches!(results[0]["status"].as_str(), Some("cancelling" | "cancelled")));
    assert_eq!((results[1]["ok"].as_bool(), results[1]["status"].as_str()), (Some(true), Some("completed")));
    for failed in &results[2..] {
        assert_eq!(
            (failed["ok"].as_bool(), failed["error"]["code"].as_str()),
            (Some(false), Some("not_found")),
            "{failed}"
        );
    }
    assert_eq!(client.wait_terminal(&running, SPEC_DEADLINE).await["status"], "cancelled");
    assert_eq!(other.snapshot(&foreign).await["status"], "running", "another tenant's run is untouched");
    let all_failed = client.request("POST", "/v1/runs:bulk-cancel", Some(json!({"runIds": ["x", "y"]}))).await;
    assert_eq!(all_failed.0, 200);
    let too_many: Vec<String> = (0..101).map(|i| format!("run-{i}")).collect();
    let (status, body) = client.request("POST", "/v1/runs:bulk-cancel", Some(json!({"runIds": too_many}))).await;
    assert_eq!((status, body["details"]["maxRunIds"].as_u64()), (400, Some(100)));
    for bad in [json!({"runIds": []}), json!({"runIds": ["ok", ""]}), json!({"runIds": [1]}), json!({"ids": ["a"]})] {
        assert_eq!(client.request("POST", "/v1/runs:bulk-cancel", Some(bad.clone())).await.0, 400, "{bad}");
    }
    host.stop().await;
}

#[tokio::test]
async fn run_list_filters_pages_and_refuses_tampered_cursors() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let mut created = Vec::new();
    for _ in 0..5 {
        created.push(client.create(json!({"workflowId": "conformance-noop"})).await);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let failed = client.create(json!({"workflowId": "conformance-failure"})).await;
    for run_id in created.iter().chain([&failed]) {
        client.wait_terminal(run_id, SPEC_DEADLINE).await;
    }
    let (_, page1) = client.request("GET", "/v1/runs?workflowId=conformance-noop&limit=2", None).await;
    let ids = |page: &Value| {
        page["runs"].as_array().unwrap().iter().map(|r| r["runId"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(ids(&page1), [created[4].clone(), created[3].clone()], "newest first");
    let cursor = page1["nextCursor"].as_str().unwrap().to_owned();
    let (_, page2) =
        client.request("GET", &format!("/v1/runs?workflowId=conformance-noop&limit=2&cursor={cursor}"), None).await;
    assert_eq!(ids(&page2), [created[2].clone(), created[1].clone()]);
    let (_, failures) = client.request("GET", "/v1/runs?status=failed", None).await;
    assert_eq!(ids(&failures), vec![failed.clone()]);
    let mut tampered = cursor.clone();
    let flipped = if tampered.ends_with('0') { "1" } else { "0" };
    tampered.replace_range(tampered.len() - 1.., flipped);
    for bad in [
        format!("/v1/runs?workflowId=conformance-noop&limit=2&cursor={tampered}"),
        format!("/v1/runs?workflowId=conformance-failure&limit=2&cursor={cursor}"),
        "/v1/runs?cursor=garbage".to_owned(),
        "/v1/runs?status=sleeping".to_owned(),
        "/v1/runs?limit=0".to_owned(),
    ] {
        let (status, body) = client.request("GET", &bad, None).await;
        assert_eq!((status, body["error"].as_str()), (400, Some("validation_error")), "{bad}");
    }
    host.stop().await;
}

#[tokio::test]
async fn workflows_register_as_immutable_versions_per_tenant() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let v1 = json!({"id": "greet", "name": "Greet", "version": "1",
        "nodes": [{"id": "echo", "typeId": "core.identity", "inputs": {"who": {"type": "variable", "variableName": "who"}}}],
        "variables": [{"name": "who", "type": "string", "defaultValue": "world"}]});
    let (status, body) = client.request("POST", "/v1/workflows", Some(v1.clone())).await;
    assert_eq!((status, body["version"].as_str()), (201, Some("1")), "{body}");
    assert_eq!(client.request("POST", "/v1/workflows", Some(v1.clone())).await.0, 200, "same document again");
    let mut changed = v1.clone();
    changed["name"] = json!("Greet, changed");
    let (status, body) = client.request("POST", "/v1/workflows", Some(changed.clone())).await;
    assert_eq!((status, body["error"].as_str()), (409, Some("version_conflict")));
    changed["version"] = json!("2");
    assert_eq!(client.request("POST", "/v1/workflows", Some(changed)).await.0, 201);
    let (_, served) = client.request("GET", "/v1/workflows/greet", None).await;
    assert_eq!(served["version"], "2");
    let run_id = client.create(json!({"workflowId": "greet"})).await;
    assert_eq!(client.wait_terminal(&run_id, SPEC_DEADLINE).await["variables"]["who"], "world");

    let cyclic = json!({"id": "loop", "name": "Loop", "nodes": [{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}],
        "edges": [{"id": "1", "sourceNodeId": "a", "targetNodeId": "b"}, {"id": "2", "sourceNodeId": "b", "targetNodeId": "a"}]});
    let (status, body) = client.request("POST", "/v1/workflows", Some(cyclic)).await;
    assert_eq!((status, body["details"]["reason"].as_str()), (400, Some("cycle")));
    let gated = json!({"id": "gated", "name": "Gated", "nodes": [{"id": "c", "typeId": "core.conversationGate"}]});
    let (status, body) = client.request("POST", "/v1/workflows", Some(gated)).await;
    assert_eq!(status, 422);
    assert_eq!(
        body["details"],
        json!({"requiredCapability": "conversationPrimitive", "offendingTypeId": "core.conversationGate", "nodeId": "c"})
    );
    let (status, _) =
        client.request("POST", "/v1/workflows", Some(json!({"id": "Bad Id", "name": "x", "nodes": []}))).await;
    assert_eq!(status, 400);
    host.stop().await;
}

#[tokio::test]
async fn debug_bundle_redacts_inputs_and_is_not_cached() {
    let host = start(serve_args(None)).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let run_id =
        client.create(json!({"workflowId": "conformance-identity", "inputs": {"payload": {"secret": "s3"}}})).await;
    client.wait_terminal(&run_id, SPEC_DEADLINE).await;
    let response = reqwest::Client::new()
        .get(format!("{base}/v1/runs/{run_id}/debug-bundle"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "no-store");
    let bundle: Value = response.json().await.unwrap();
    assert!(!bundle.to_string().contains("s3"), "inputs are redacted: {bundle}");
    assert_eq!(bundle["metrics"]["eventCount"], 4);
    assert_eq!(bundle["run"]["status"], "completed");
    if let Some(reference) = Reference::load("debug_bundle_redacts_inputs_and_is_not_cached") {
        reference.assert_valid("debug-bundle.schema.json", &bundle);
    }
    let discovery: Value = reqwest::get(format!("{base}/.well-known/openwop")).await.unwrap().json().await.unwrap();
    assert_eq!(discovery["debugBundle"]["supported"], true);
    host.stop().await;
}

/// The official `stream-text-fixture` scenario: with the `stream-text` mock, the `messages`
/// stream carries exactly one `ai.message.chunk` frame per token in order, the last with
/// `isLast`, `meta.finishReason: "stop"` and `meta.usage.completionTokens`, then the server
/// closes it; the run completes. Without seams a mock is `403 mock_provider_forbidden`; an
/// id outside the catalog is `400 unsupported_mock_provider`.
#[tokio::test]
async fn the_stream_text_mock_streams_one_message_frame_per_token_on_the_messages_mode() {
    let mut args = serve_args(None);
    args.test_seams = true;
    let host = start(args).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);
    let tokens = ["Hello", " ", "world", "!"];
    let mock = json!({"mockProvider": {"id": "stream-text", "config": {"tokens": tokens}}});
    let run_id = client.create(json!({"workflowId": "conformance-stream-text", "configurable": mock})).await;
    let text = Sse::open(&base, &run_id, "?streamMode=messages", None).await.read_to_close(SPEC_DEADLINE).await;
    let frames = event_frames(&text);
    assert_eq!(frames.len(), 4, "{text}");
    for (frame, token) in frames.iter().zip(tokens) {
        assert_eq!(frame.event.as_deref(), Some("ai.message.chunk"));
        let data = frame.data.as_ref().unwrap();
        assert_eq!(
            (data["chunk"].as_str(), data["nodeId"].as_str(), data["runId"].as_str()),
            (Some(token), Some("ai"), Some(run_id.as_str()))
        );
    }
    let last = frames[3].data.as_ref().unwrap();
    assert_eq!(last["isLast"], true);
    assert!(frames[..3].iter().all(|frame| frame.data.as_ref().unwrap()["isLast"] == false));
    assert_eq!(last["meta"]["finishReason"], "stop");
    assert_eq!(last["meta"]["usage"]["completionTokens"], 4);
    assert_eq!(client.wait_terminal(&run_id, SPEC_DEADLINE).await["status"], "completed");
    // The JSON list of the messages mode: the stored output.chunk batch itself.
    let listed: Value = reqwest::Client::new()
        .get(format!("{base}/v1/runs/{run_id}/events?streamMode=messages"))
        .bearer_auth(KEY)
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = listed["events"].as_array().cloned().unwrap_or_default();
    assert_eq!(types(&listed), ["output.chunk"], "{listed:?}");
    assert_eq!(listed[0]["payload"]["chunk"]["parts"], json!(tokens));
    let unknown =
        json!({"workflowId": "conformance-stream-text", "configurable": {"mockProvider": {"id": "tool-calls"}}});
    let (status, body) = client.request("POST", "/v1/runs", Some(unknown)).await;
    assert_eq!((status, body["error"].as_str()), (400, Some("unsupported_mock_provider")), "{body}");
    host.stop().await;

    let host = start(serve_args(None)).await;
    let client = Client::new(format!("http://{}", host.addr), KEY);
    let forbidden = json!({"workflowId": "conformance-stream-text", "configurable": mock});
    let (status, body) = client.request("POST", "/v1/runs", Some(forbidden)).await;
    assert_eq!((status, body["error"].as_str()), (403, Some("mock_provider_forbidden")), "{body}");
    let (_, listed) = client.request("GET", "/v1/runs", None).await;
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(0), "a refused request persists nothing: {listed}");
    host.stop().await;
}
