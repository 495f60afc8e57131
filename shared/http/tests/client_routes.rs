//! The routes the `trellis` client relies on: `POST /v1/workflows:validate` (a dry run of
//! registration), `GET /v1/interrupts?status=pending` (the tenant's pending interrupts), and
//! the links of an embedded host (no base path: `/v1/...`) against a request that carries a
//! [`trellis_http::BasePath`].

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use support::{assert_envelope, harness, Harness};
use tower::ServiceExt;

fn candidate(id: &str) -> Value {
    json!({ "id": id, "name": "Candidate", "version": "3",
        "nodes": [{ "id": "a", "typeId": "core.noop" }, { "id": "b", "typeId": "core.noop" }],
        "edges": [{ "id": "ab", "sourceNodeId": "a", "targetNodeId": "b" }] })
}

#[tokio::test]
async fn validate_answers_what_registration_would_and_stores_nothing() {
    let h = harness().await;
    let before = h.counts();
    let (status, body) = h.post("/v1/workflows:validate", &candidate("dry")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, json!({ "valid": true, "workflowId": "dry", "version": "3", "nodes": 2 }));
    assert_eq!(h.counts(), before, "a dry run stores nothing");
    let (status, body) = h.call("GET", "/v1/workflows/dry", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Registering it afterwards is a first registration (nothing was stored by the dry run).
    let (status, _) = h.post("/v1/workflows", &candidate("dry")).await;
    assert_eq!(status, StatusCode::CREATED);
    // The same document again validates; other content under the registered version is the
    // conflict registration answers.
    let (status, body) = h.post("/v1/workflows:validate", &candidate("dry")).await;
    assert_eq!((status, body["valid"].clone()), (StatusCode::OK, json!(true)), "{body}");
    let mut changed = candidate("dry");
    changed["name"] = json!("Changed");
    let (registered, expected) = h.post("/v1/workflows", &changed).await;
    let (status, body) = h.post("/v1/workflows:validate", &changed).await;
    assert_eq!((status, &body), (registered, &expected));
    assert_eq!(status, StatusCode::CONFLICT);
    assert_envelope(&body, "version_conflict");
}

#[tokio::test]
async fn every_refusal_of_validate_is_the_registration_refusal() {
    let h = harness().await;
    let bad_edge = json!({ "id": "broken", "name": "Broken", "nodes": [{ "id": "a", "typeId": "core.noop" }],
        "edges": [{ "id": "ax", "sourceNodeId": "a", "targetNodeId": "ghost" }] });
    let bad_schema = json!({ "id": "schema", "name": "Schema", "nodes": [{ "id": "a", "typeId": "core.noop" }],
        "configurableSchema": { "type": 12 } });
    let not_runnable =
        json!({ "id": "talk", "name": "Talk", "nodes": [{ "id": "t", "typeId": "core.conversationGate" }] });
    let mock = json!({ "id": "mocked", "name": "Mocked",
        "nodes": [{ "id": "m", "typeId": "core.conformance.mock-agent" }] });
    let cases = [
        ("a missing node", bad_edge, StatusCode::BAD_REQUEST, "validation_error"),
        ("a schema that does not compile", bad_schema, StatusCode::BAD_REQUEST, "validation_error"),
        ("an unknown field type", json!({ "id": 5 }), StatusCode::BAD_REQUEST, "validation_error"),
        ("a node kind this host cannot run", not_runnable, StatusCode::UNPROCESSABLE_ENTITY, "capability_required"),
        ("a conformance-only kind", mock, StatusCode::BAD_REQUEST, "validation_error"),
    ];
    let before = h.counts();
    for (what, document, status, code) in cases {
        let (validated, answer) = h.post("/v1/workflows:validate", &document).await;
        assert_eq!(validated, status, "{what}: {answer}");
        assert_envelope(&answer, code);
        assert!(answer["details"].is_object(), "{what}: details name the rule: {answer}");
        let (registered, expected) = h.post("/v1/workflows", &document).await;
        assert_eq!((validated, &answer), (registered, &expected), "{what}: the same answer as registration");
    }
    let (status, body) = h.call("POST", "/v1/workflows:validate", Some(Body::from("{not json"))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_envelope(&body, "validation_error");
    assert_eq!(h.counts(), before, "nothing refused is stored");
}

#[tokio::test]
async fn validate_needs_the_registration_scope_and_is_never_kept_as_a_write() {
    let h = harness().await;
    let (status, body) = h.post_as("/v1/workflows:validate", "reader-key", candidate("dry")).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let keyed = [("idempotency-key", "validate-1")];
    let first = h.send("POST", "/v1/workflows:validate", Some("alice-key"), &keyed, Some(candidate("dry"))).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert!(first.headers.get("openwop-idempotent-replay").is_none(), "a dry run is not claimed");
    // Another body under the same key is validated afresh, not refused as a key reuse.
    let second = h.send("POST", "/v1/workflows:validate", Some("alice-key"), &keyed, Some(candidate("other"))).await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.text);
    assert_eq!(second.json()["workflowId"], "other");
    // And the key is still free for a real write.
    let write = h.send("POST", "/v1/workflows", Some("alice-key"), &keyed, Some(candidate("dry"))).await;
    assert_eq!(write.status, StatusCode::CREATED, "{}", write.text);
}

/// A run of `workflow` started with `key`, suspended at `node` (its step applied by hand).
async fn suspended_as(h: &Harness, key: &str, workflow: &str, node: &str) -> String {
    let (status, created) = h.post_as("/v1/runs", key, json!({ "workflowId": workflow })).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let run_id = created["runId"].as_str().unwrap().to_owned();
    let step = trellis_core::engine::Input::Step { node_id: node.into(), activation: 1 };
    h.services.apply_until_committed(&run_id, step).await.unwrap();
    run_id
}

async fn pending(h: &Harness, key: &str, query: &str) -> (StatusCode, Value) {
    h.call_as("GET", &format!("/v1/interrupts?status=pending{query}"), Some(key), None).await
}

fn run_ids(body: &Value) -> Vec<String> {
    body["interrupts"].as_array().unwrap().iter().map(|item| item["runId"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn pending_interrupts_are_listed_per_tenant_with_the_snapshot_view() {
    let h = harness().await;
    let gated = suspended_as(&h, "alice-key", "gated", "gate").await;
    let asking = suspended_as(&h, "alice-key", "asking", "ask").await;
    let (_, finished) = h.post_as("/v1/runs", "alice-key", json!({ "workflowId": "chain" })).await;
    let bobs = suspended_as(&h, "bob-key", "gated", "gate").await;

    let (status, body) = pending(&h, "alice-key", "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut listed = run_ids(&body);
    listed.sort();
    let mut expected = vec![gated.clone(), asking.clone()];
    expected.sort();
    assert_eq!(listed, expected, "alice's waiting runs only, never bob's nor a run without an interrupt");
    assert!(!listed.contains(&finished["runId"].as_str().unwrap().to_owned()));
    assert!(body.get("nextCursor").is_none());

    // Each item is the snapshot's `interrupt` view plus the run's id, workflow and status.
    let (_, snapshot) = h.call_as("GET", &format!("/v1/runs/{gated}"), Some("alice-key"), None).await;
    let item = body["interrupts"].as_array().unwrap().iter().find(|item| item["runId"] == gated.as_str()).unwrap();
    for field in ["kind", "nodeId", "interruptId", "key", "payload", "requestedAt", "interruptToken", "callbackUrl"] {
        assert!(item.get(field).is_some(), "{field} missing: {item}");
    }
    assert_eq!(item["nodeId"], snapshot["interrupt"]["nodeId"]);
    assert_eq!(item["interruptId"], snapshot["interrupt"]["interruptId"]);
    assert_eq!(item["payload"], snapshot["interrupt"]["payload"]);
    assert_eq!((item["workflowId"].as_str(), item["runStatus"].as_str()), (Some("gated"), Some("waiting-approval")));
    let token = item["interruptToken"].as_str().unwrap();
    assert_eq!(item["callbackUrl"], format!("/v1/interrupts/{token}"));
    let asked = body["interrupts"].as_array().unwrap().iter().find(|item| item["runId"] == asking.as_str()).unwrap();
    assert_eq!(asked["runStatus"], "waiting-input");
    assert_eq!(asked["resumeSchema"], asked["payload"]["resumeSchema"]);
    assert!(asked["resumeSchema"].is_object(), "{asked}");

    let (_, body) = pending(&h, "bob-key", "").await;
    assert_eq!(run_ids(&body), vec![bobs.clone()]);
    // Filters: by workflow, by run; another tenant's run id lists nothing.
    let (_, body) = pending(&h, "alice-key", "&workflowId=asking").await;
    assert_eq!(run_ids(&body), vec![asking.clone()]);
    let (_, body) = pending(&h, "alice-key", &format!("&runId={gated}")).await;
    assert_eq!(run_ids(&body), vec![gated.clone()]);
    let (_, body) = pending(&h, "alice-key", &format!("&runId={bobs}")).await;
    assert_eq!(run_ids(&body), Vec::<String>::new());
    let (_, body) = pending(&h, "alice-key", &format!("&runId={gated}&workflowId=asking")).await;
    assert_eq!(run_ids(&body), Vec::<String>::new());
    // `status` may be left out (pending is the only one).
    let (status, body) = h.call_as("GET", "/v1/interrupts", Some("alice-key"), None).await;
    assert_eq!((status, run_ids(&body).len()), (StatusCode::OK, 2));
    // Resolved: no longer listed.
    let (status, _) = h
        .post_as(
            &format!("/v1/runs/{gated}/interrupts/gate"),
            "alice-key",
            json!({ "resumeValue": { "action": "accept" } }),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = pending(&h, "alice-key", "").await;
    assert_eq!(run_ids(&body), vec![asking]);
}

#[tokio::test]
async fn pending_interrupts_page_with_a_signed_cursor() {
    let h = harness().await;
    let mut expected = Vec::new();
    for index in 0..5 {
        expected.push(suspended_as(&h, "alice-key", "gated", "gate").await);
        if index % 2 == 0 {
            // Runs without an interrupt in between are skipped, not counted.
            h.post_as("/v1/runs", "alice-key", json!({ "workflowId": "chain" })).await;
        }
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let query = cursor.as_ref().map(|c| format!("&limit=2&cursor={c}")).unwrap_or_else(|| "&limit=2".to_owned());
        let (status, body) = pending(&h, "alice-key", &query).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let page = run_ids(&body);
        assert!(page.len() <= 2);
        seen.extend(page);
        pages += 1;
        match body["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
        assert!(pages < 10, "paging does not end");
    }
    assert_eq!(pages, 3);
    let mut sorted = seen.clone();
    sorted.sort();
    expected.sort();
    assert_eq!(sorted, expected, "every interrupt exactly once, no duplicate run: {seen:?}");

    // The cursor is bound to the tenant and the filter.
    let (_, first) = pending(&h, "alice-key", "&limit=2").await;
    let cursor = first["nextCursor"].as_str().unwrap();
    let (status, body) = pending(&h, "bob-key", &format!("&cursor={cursor}")).await;
    assert_eq!((status, body["details"]["parameter"].as_str()), (StatusCode::BAD_REQUEST, Some("cursor")));
    let (status, body) = pending(&h, "alice-key", &format!("&workflowId=gated&cursor={cursor}")).await;
    assert_eq!((status, body["details"]["parameter"].as_str()), (StatusCode::BAD_REQUEST, Some("cursor")));
    let (status, body) = pending(&h, "alice-key", &format!("&cursor={cursor}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Runs listing cursors are not interrupt-list cursors.
    let (_, runs) = h.call_as("GET", "/v1/runs?limit=1", Some("alice-key"), None).await;
    let runs_cursor = runs["nextCursor"].as_str().unwrap();
    let (status, _) = pending(&h, "alice-key", &format!("&cursor={runs_cursor}")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

/// Every page of the interrupt listing from `query` on, following `nextCursor` to its end.
async fn all_pages(h: &Harness, key: &str, query: &str) -> Vec<Value> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let next = cursor.as_ref().map(|c| format!("{query}&cursor={c}")).unwrap_or_else(|| query.to_owned());
        let (status, body) = pending(h, key, &next).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        cursor = body["nextCursor"].as_str().map(str::to_owned);
        pages.push(body);
        if cursor.is_none() {
            return pages;
        }
        assert!(pages.len() < 20, "paging does not end");
    }
}

#[tokio::test]
async fn a_page_may_come_back_short_or_empty_with_a_cursor_to_the_rest() {
    let h = harness().await;
    // Alice's oldest runs wait; 250 newer ones (never stepped, so without an interrupt) and one
    // of bob's waiting runs come after them.
    let mut waiting = Vec::new();
    for _ in 0..3 {
        waiting.push(suspended_as(&h, "alice-key", "gated", "gate").await);
    }
    for _ in 0..250 {
        let (status, body) = h.post_as("/v1/runs", "alice-key", json!({ "workflowId": "chain" })).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let bobs = suspended_as(&h, "bob-key", "gated", "gate").await;
    waiting.sort();
    // The first 120 runs of alice's run listing (what a page of limit 1 or 30 scans at most:
    // 100 or 120 runs) hold none of her waiting runs.
    let (_, head) = h.call_as("GET", "/v1/runs?limit=100", Some("alice-key"), None).await;
    let (_, rest) = h
        .call_as(
            "GET",
            &format!("/v1/runs?limit=20&cursor={}", head["nextCursor"].as_str().unwrap()),
            Some("alice-key"),
            None,
        )
        .await;
    let scanned: Vec<&str> = [&head, &rest]
        .iter()
        .flat_map(|body| body["runs"].as_array().unwrap().iter().map(|run| run["runId"].as_str().unwrap()))
        .collect();
    assert_eq!(scanned.len(), 120);
    assert!(waiting.iter().all(|id| !scanned.contains(&id.as_str())), "{scanned:?}");

    for limit in [1, 30] {
        let pages = all_pages(&h, "alice-key", &format!("&limit={limit}")).await;
        // The scan cap is reached among runs without an interrupt: an empty page, and a cursor.
        assert_eq!(run_ids(&pages[0]), Vec::<String>::new(), "limit {limit}");
        assert!(pages[0]["nextCursor"].is_string(), "limit {limit}: {}", pages[0]);
        let mut seen: Vec<String> = pages.iter().flat_map(run_ids).collect();
        assert!(pages.iter().all(|page| run_ids(page).len() <= limit));
        seen.sort();
        assert_eq!(seen, waiting, "limit {limit}: each waiting run once, never bob's");
    }
    // A page whose cap covers the whole history (4 × 100 runs) needs no cursor.
    let pages = all_pages(&h, "alice-key", "&limit=100").await;
    assert_eq!(pages.len(), 1);
    let mut seen = run_ids(&pages[0]);
    seen.sort();
    assert_eq!(seen, waiting);

    // Tenant isolation: bob lists his own run only, and alice's short-page cursor is not his.
    let (_, first) = pending(&h, "alice-key", "&limit=1").await;
    let cursor = first["nextCursor"].as_str().unwrap();
    let (status, body) = pending(&h, "bob-key", &format!("&limit=1&cursor={cursor}")).await;
    assert_eq!((status, body["details"]["parameter"].as_str()), (StatusCode::BAD_REQUEST, Some("cursor")));
    let bob_pages = all_pages(&h, "bob-key", "&limit=1").await;
    assert_eq!(bob_pages.iter().flat_map(run_ids).collect::<Vec<_>>(), vec![bobs]);
}

#[tokio::test]
async fn pending_interrupt_listing_refuses_bad_parameters_and_needs_run_read() {
    let h = harness().await;
    for (query, parameter) in [("?status=resolved", "status"), ("?status=pending&limit=0", "limit")] {
        let (status, body) = h.call_as("GET", &format!("/v1/interrupts{query}"), Some("alice-key"), None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_envelope(&body, "validation_error");
        assert_eq!(body["details"]["parameter"], parameter, "{query}: {body}");
    }
    let (status, _) = h.call_as("GET", "/v1/interrupts?status=pending", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = h.call_as("GET", "/v1/interrupts?status=pending", Some("manifest-key"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = h.call_as("GET", "/v1/interrupts?status=pending", Some("reader-key"), None).await;
    assert_eq!(status, StatusCode::OK);
}

/// One request through the router with `base` (if any) as the request's base path.
async fn with_base(
    h: &Harness,
    method: &str,
    uri: &str,
    base: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Option<String>, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", "Bearer alice-key")
        .body(body.map_or_else(Body::empty, |body| Body::from(body.to_string())))
        .unwrap();
    if let Some(base) = base {
        request.extensions_mut().insert(trellis_http::BasePath::new(base));
    }
    let response = h.app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let location = response.headers().get("location").map(|value| value.to_str().unwrap().to_owned());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, location, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn links_have_no_prefix_without_a_base_path_and_keep_one_given() {
    let h = harness().await;
    for (base, prefix) in [(None, ""), (Some("/v"), "/v")] {
        let (status, location, created) =
            with_base(&h, "POST", "/v1/runs", base, Some(json!({ "workflowId": "gated" }))).await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
        let run_id = created["runId"].as_str().unwrap().to_owned();
        assert_eq!(created["statusUrl"], format!("{prefix}/v1/runs/{run_id}"));
        assert_eq!(created["eventsUrl"], format!("{prefix}/v1/runs/{run_id}/events"));
        assert_eq!(location.as_deref(), Some(format!("{prefix}/v1/runs/{run_id}").as_str()));
        let step = trellis_core::engine::Input::Step { node_id: "gate".into(), activation: 1 };
        h.services.apply_until_committed(&run_id, step).await.unwrap();
        let (_, _, snapshot) = with_base(&h, "GET", &format!("/v1/runs/{run_id}"), base, None).await;
        assert_eq!(snapshot["eventsUrl"], format!("{prefix}/v1/runs/{run_id}/events"));
        let token = snapshot["interrupt"]["interruptToken"].as_str().unwrap();
        assert_eq!(snapshot["interrupt"]["callbackUrl"], format!("{prefix}/v1/interrupts/{token}"));
        let (_, _, listed) = with_base(&h, "GET", &format!("/v1/interrupts?runId={run_id}"), base, None).await;
        let token = listed["interrupts"][0]["interruptToken"].as_str().unwrap();
        assert_eq!(listed["interrupts"][0]["callbackUrl"], format!("{prefix}/v1/interrupts/{token}"));
        let (_, _, runs) = with_base(&h, "GET", "/v1/runs?limit=1", base, None).await;
        assert!(runs["runs"][0]["eventsUrl"].as_str().unwrap().starts_with(&format!("{prefix}/v1/runs/")), "{runs}");
        // v2: unversioned links, under the same prefix.
        let v2_id = format!("tenant-a~2F{run_id}");
        let (_, _, v2) = with_base(&h, "GET", &format!("/runs/{v2_id}"), base, None).await;
        assert_eq!(v2["statusUrl"], format!("{prefix}/runs/{v2_id}"), "{v2}");
        let token = v2["interrupt"]["interruptToken"].as_str().unwrap();
        assert_eq!(v2["interrupt"]["callbackUrl"], format!("{prefix}/interrupts/{token}"));
    }
}
