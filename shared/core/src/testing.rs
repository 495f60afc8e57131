//! Test support shared by every adapter: fixture builders and the store contract suite.
//! Each store adapter runs [`store_contract`] against itself, so both backends are held to
//! the same behaviour. The concurrency checks ([`races`]) race spawned tasks and need a
//! multi-thread tokio runtime; [`retention`] checks idempotency expiry with explicit times;
//! [`host_records`] holds both stores to the host record port, races included.

pub mod activity;
mod blobs;
mod fanout;
mod host_records;
mod races;
mod removal;
mod retention;
pub mod votes;

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::engine::{self, Effect, Input};
use crate::model::Workflow;
use crate::ports::{
    CreateResult, IdempotencyClaim, IdempotencyRecord, LocalQueue, RunFilter, RunPosition, Store, StoredWorkflow,
    GLOBAL_NAMESPACE,
};
use crate::run::{Principal, RunLimits, RunState, RunStatus};
use crate::StoreError;

/// A compiled three-node noop chain `a → b → c`.
pub fn chain_workflow() -> Workflow {
    Workflow::compile(json!({
        "id": "contract-chain", "name": "Contract chain",
        "nodes": [{"id": "a", "typeId": "core.noop"}, {"id": "b", "typeId": "core.noop"}, {"id": "c", "typeId": "core.noop"}],
        "edges": [{"id": "ab", "sourceNodeId": "a", "targetNodeId": "b"}, {"id": "bc", "sourceNodeId": "b", "targetNodeId": "c"}]
    }))
    .expect("valid workflow")
}

/// A pending run of `workflow` for `tenant`.
pub fn pending_run(workflow: &Workflow, run_id: &str, tenant: &str) -> RunState {
    let principal = Principal {
        tenant: tenant.to_owned(),
        subject: "contract".into(),
        key_class: "api-key".into(),
        test_scope: false,
    };
    let limits = RunLimits { max_node_executions: 100, run_duration_ms: 60_000 };
    crate::service::new_run(
        run_id.to_owned(),
        &principal,
        workflow,
        GLOBAL_NAMESPACE.to_owned(),
        Map::new(),
        limits,
        1_000,
    )
}

fn record(key: &str, digest: &str, body: Value) -> IdempotencyRecord {
    IdempotencyRecord {
        tenant: "t1".into(),
        endpoint: "POST /v1/runs".into(),
        key: key.into(),
        request_digest: digest.into(),
        status: 201,
        body,
        created_at: 1_000,
    }
}

/// Runs every store contract check against one empty store (the checks use disjoint ids,
/// tenants and namespaces).
pub async fn store_contract(store: Arc<dyn Store>) {
    create_then_load_round_trips(store.clone()).await;
    commit_is_guarded_by_version(store.clone()).await;
    commit_must_write_the_next_version(store.clone()).await;
    races::concurrent_writers_one_wins(store.clone()).await;
    races::concurrent_claims_one_wins(store.clone()).await;
    races::concurrent_keyed_creates_write_once(store.clone()).await;
    retention::idempotency_records_expire(store.clone()).await;
    votes_are_stored_by_voter(store.clone()).await;
    idempotent_create_writes_once(store.clone()).await;
    workflows_are_versioned_by_content(store.clone()).await;
    idempotency_claims_are_exclusive(store.clone()).await;
    runs_list_newest_first_with_filters(store.clone()).await;
    interrupts_and_votes_are_durable_and_one_resolution_wins(store.clone()).await;
    host_settings_round_trip(store.clone()).await;
    fanout::fan_out_records_round_trip(store.clone()).await;
    host_records::host_records_round_trip(store.clone()).await;
    removal::deleting_a_run_leaves_nothing_of_it(store.clone()).await;
    blobs::blobs_belong_to_their_run(store.clone()).await;
    crash_points_lose_and_duplicate_nothing(store).await;
}

/// Host settings (the capability overlay) are absent until set, read back as written, and
/// replaced by a later write.
async fn host_settings_round_trip(store: Arc<dyn Store>) {
    assert_eq!(store.setting("contract-setting").await.unwrap(), None);
    store.put_setting("contract-setting", &json!({"agents.dispatchMapping": false})).await.unwrap();
    assert_eq!(store.setting("contract-setting").await.unwrap(), Some(json!({"agents.dispatchMapping": false})));
    store.put_setting("contract-setting", &json!({})).await.unwrap();
    assert_eq!(store.setting("contract-setting").await.unwrap(), Some(json!({})));
}

/// Whether `run-q` of tenant `t1` is listed under `status`.
async fn listed(store: &Arc<dyn Store>, status: RunStatus) -> bool {
    let filter = RunFilter { workflow_id: None, status: Some(status) };
    store.list_runs("t1", &filter, None, 100).await.unwrap().iter().any(|run| run.run_id == "run-q")
}

/// An interrupt occurrence, its votes and its resolution live in the run's state: they
/// survive a reload as written, and of resolutions racing from the same version exactly one
/// commits (the conditional write the serverless store and the transaction the embedded one
/// use), so a quorum closes once.
async fn interrupts_and_votes_are_durable_and_one_resolution_wins(store: Arc<dyn Store>) {
    use crate::interrupt::{InterruptState, Resolution, Resolver};
    let workflow = Workflow::compile(json!({
        "id": "contract-quorum", "name": "Contract quorum",
        "nodes": [{"id": "gate", "typeId": "core.approvalGate", "config": {"requiredApprovals": 2}},
                  {"id": "after", "typeId": "core.noop"}],
        "edges": [{"id": "e", "sourceNodeId": "gate", "targetNodeId": "after"}]
    }))
    .expect("valid workflow");
    let mut run = pending_run(&workflow, "run-q", "t1");
    let outcome = engine::apply(&workflow, &mut run, Input::Start, 1_000);
    run.version = 1;
    store.create_run(&run, &outcome.events, &outcome.effects, None).await.unwrap();
    let mut commit = |input: Input, at: u64| {
        let expected = run.version;
        let outcome = engine::apply(&workflow, &mut run, input, at);
        run.version = expected + 1;
        (run.clone(), expected, outcome)
    };
    let (state, expected, outcome) = commit(Input::Step { node_id: "gate".into(), activation: 1 }, 1_001);
    store.commit(&state, expected, &outcome.events, &outcome.effects).await.unwrap();
    let vote = |voter: &str| {
        Input::Resolve(Resolution {
            node_id: "gate".into(),
            interrupt_id: None,
            value: json!({"action": "accept", "voter": voter}),
            resolver: Resolver::Principal("contract".into()),
            prior_vote: None,
        })
    };
    let (state, expected, outcome) = commit(vote("first"), 1_002);
    store.commit(&state, expected, &outcome.events, &outcome.effects).await.unwrap();
    let loaded = store.load_run("run-q").await.unwrap().unwrap();
    assert_eq!(loaded, state, "the occurrence and its tally round-trip");
    assert!(listed(&store, RunStatus::WaitingApproval).await, "listed as waiting");
    assert_eq!(loaded.interrupts[0].tally(), (1, 0));
    let interrupt_id = loaded.interrupts[0].id.clone();
    let first = store.vote("run-q", &interrupt_id, "first").await.unwrap().expect("the vote is stored by voter");
    assert_eq!((first.action.as_str(), first.at), ("accept", 1_002));

    let mut racers = Vec::new();
    for voter in 0..8 {
        let mut mine = loaded.clone();
        let outcome = engine::apply(&workflow, &mut mine, vote(&format!("second-{voter}")), 1_003);
        mine.version = loaded.version + 1;
        racers.push((mine, loaded.version, outcome.events, outcome.effects));
    }
    assert_eq!(races::commits_racing(&store, racers).await, 1, "one resolution commits");
    let resolved = store.load_run("run-q").await.unwrap().unwrap();
    assert!(matches!(resolved.interrupts[0].state, InterruptState::Resolved { .. }));
    assert_eq!(resolved.interrupts[0].tally(), (2, 0));
    let mut stored = 0;
    for voter in 0..8 {
        stored += usize::from(store.vote("run-q", &interrupt_id, &format!("second-{voter}")).await.unwrap().is_some());
    }
    assert_eq!(stored, 1, "only the winning commit's vote is stored");
    let events = store.events_after("run-q", None, 100).await.unwrap();
    assert_eq!(events.iter().filter(|e| e.event_type == "interrupt.resolved").count(), 1);
    assert!(events.iter().enumerate().all(|(i, e)| e.sequence == i as u64), "contiguous");
    assert_eq!(resolved.status, RunStatus::Running);
    assert!(listed(&store, RunStatus::Running).await, "listed as running again");
    assert!(!listed(&store, RunStatus::WaitingApproval).await, "no longer listed as waiting");
}

/// The named crash points, at the store: before the commit nothing is written; after the
/// commit and before the send the effects wait in the store; an ambiguous commit retried
/// (after the send, before the acknowledgement, the worker may commit again) duplicates no
/// event.
async fn crash_points_lose_and_duplicate_nothing(store: Arc<dyn Store>) {
    let (workflow, created) = started(&store, "run-crash").await;
    let step_a = Effect::Step { node_id: "a".into(), activation: 1, due_at: 1_000 };
    assert!(
        store.pending_effects("run-crash").await.unwrap().contains(&step_a),
        "the create's effects wait in the store"
    );

    // Before commit: a decision that is never committed leaves the store as it was.
    let mut decided = created.clone();
    let outcome = engine::apply(&workflow, &mut decided, Input::Step { node_id: "a".into(), activation: 1 }, 1_001);
    assert_eq!(store.load_run("run-crash").await.unwrap().unwrap().version, 1);
    assert_eq!(store.events_after("run-crash", None, 100).await.unwrap().len(), 1);

    // After commit, before send: the new effects are in the store.
    decided.version = 2;
    store.commit(&decided, 1, &outcome.events, &outcome.effects).await.unwrap();
    let step_b = Effect::Step { node_id: "b".into(), activation: 1, due_at: 1_001 };
    assert!(store.pending_effects("run-crash").await.unwrap().contains(&step_b), "committed effects are not lost");

    // The same commit again (an ambiguous failure retried): never a duplicate event.
    let retried = store.commit(&decided, 1, &outcome.events, &outcome.effects).await;
    assert!(matches!(retried, Ok(()) | Err(StoreError::Conflict)), "{retried:?}");
    let sequences: Vec<u64> =
        store.events_after("run-crash", None, 100).await.unwrap().iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, [0, 1, 2]);
    assert_eq!(store.load_run("run-crash").await.unwrap().unwrap().version, 2);
}

/// Runs the task-queue contract against one empty queue.
pub async fn queue_contract(queue: Arc<dyn LocalQueue>) {
    tasks_lease_release_and_ack(queue).await;
}

async fn idempotency_claims_are_exclusive(store: Arc<dyn Store>) {
    let (t, e) = ("t1", "POST /v1/runs/r/cancel");
    assert_eq!(store.claim_idempotency(t, e, "k", "d1", 100, 1_100).await.unwrap(), IdempotencyClaim::Claimed);
    assert_eq!(
        store.claim_idempotency(t, e, "k", "d1", 200, 1_200).await.unwrap(),
        IdempotencyClaim::InFlight { request_digest: "d1".into() }
    );
    let mut answer = record("k", "d1", json!({"status": "cancelled"}));
    answer.endpoint = e.into();
    answer.status = 200;
    store.complete_idempotency(&answer).await.unwrap();
    match store.claim_idempotency(t, e, "k", "d2", 300, 1_300).await.unwrap() {
        IdempotencyClaim::Completed(found) => {
            assert_eq!((found.status, found.body), (200, json!({"status": "cancelled"})))
        }
        other => panic!("expected the completed record, got {other:?}"),
    }
    // An abandoned claim frees the key; an expired lease can be taken over.
    assert_eq!(store.claim_idempotency(t, e, "k2", "d", 100, 1_100).await.unwrap(), IdempotencyClaim::Claimed);
    store.abandon_idempotency(t, e, "k2").await.unwrap();
    assert_eq!(store.claim_idempotency(t, e, "k2", "d", 200, 1_200).await.unwrap(), IdempotencyClaim::Claimed);
    assert_eq!(store.claim_idempotency(t, e, "k2", "d", 1_200, 2_200).await.unwrap(), IdempotencyClaim::Claimed);
    assert_eq!(store.claim_idempotency("t2", e, "k", "d9", 100, 1_100).await.unwrap(), IdempotencyClaim::Claimed);
}

async fn runs_list_newest_first_with_filters(store: Arc<dyn Store>) {
    let workflow = chain_workflow();
    for (index, tenant) in ["list-1", "list-1", "list-2", "list-1"].into_iter().enumerate() {
        let mut run = pending_run(&workflow, &format!("run-l{index}"), tenant);
        run.created_at = 10 + index as u64;
        if index == 1 {
            run.status = RunStatus::Completed;
        }
        store.create_run(&run, &[], &[], None).await.unwrap();
    }
    let ids = |runs: Vec<RunState>| runs.into_iter().map(|run| run.run_id).collect::<Vec<_>>();
    let all = RunFilter::default();
    assert_eq!(ids(store.list_runs("list-1", &all, None, 10).await.unwrap()), ["run-l3", "run-l1", "run-l0"]);
    let page = store.list_runs("list-1", &all, None, 2).await.unwrap();
    let last = page.last().unwrap();
    let after = RunPosition { created_at: last.created_at, run_id: last.run_id.clone() };
    assert_eq!(ids(store.list_runs("list-1", &all, Some(&after), 2).await.unwrap()), ["run-l0"]);
    let completed = RunFilter { status: Some(RunStatus::Completed), ..RunFilter::default() };
    assert_eq!(ids(store.list_runs("list-1", &completed, None, 10).await.unwrap()), ["run-l1"]);
    let other = RunFilter { workflow_id: Some("other".into()), ..RunFilter::default() };
    assert!(store.list_runs("list-1", &other, None, 10).await.unwrap().is_empty());
}

async fn started(store: &Arc<dyn Store>, run_id: &str) -> (Workflow, RunState) {
    let workflow = chain_workflow();
    let mut run = pending_run(&workflow, run_id, "t1");
    let outcome = engine::apply(&workflow, &mut run, Input::Start, 1_000);
    run.version = 1;
    let created = store.create_run(&run, &outcome.events, &outcome.effects, None).await.unwrap();
    assert_eq!(created, CreateResult::Created);
    (workflow, run)
}

async fn create_then_load_round_trips(store: Arc<dyn Store>) {
    let (_, run) = started(&store, "run-a").await;
    assert_eq!(store.load_run("run-a").await.unwrap(), Some(run));
    assert_eq!(store.load_run("run-missing").await.unwrap(), None);
    let events = store.events_after("run-a", None, 100).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, "run.started");
    assert!(store.events_after("run-a", Some(0), 100).await.unwrap().is_empty());
}

async fn commit_is_guarded_by_version(store: Arc<dyn Store>) {
    let (workflow, mut run) = started(&store, "run-b").await;
    let outcome = engine::apply(&workflow, &mut run, Input::Step { node_id: "a".into(), activation: 1 }, 1_001);
    run.version = 2;
    store.commit(&run, 1, &outcome.events, &outcome.effects).await.unwrap();
    assert_eq!(store.commit(&run, 1, &[], &[]).await, Err(StoreError::Conflict));
    let sequences: Vec<u64> =
        store.events_after("run-b", None, 100).await.unwrap().iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, [0, 1, 2]);
    let limited = store.events_after("run-b", Some(0), 1).await.unwrap();
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0].sequence, 1);
}

/// A commit whose state does not carry `expected + 1` is refused as a typed error and
/// writes nothing.
async fn commit_must_write_the_next_version(store: Arc<dyn Store>) {
    let (workflow, mut run) = started(&store, "run-skip").await;
    let outcome = engine::apply(&workflow, &mut run, Input::Step { node_id: "a".into(), activation: 1 }, 1_001);
    for wrong in [1, 3] {
        run.version = wrong;
        let refused = store.commit(&run, 1, &outcome.events, &outcome.effects).await;
        assert_eq!(refused, Err(StoreError::VersionSkip { expected: 1, found: wrong }));
    }
    assert_eq!(store.load_run("run-skip").await.unwrap().unwrap().version, 1, "nothing written");
    assert_eq!(store.events_after("run-skip", None, 100).await.unwrap().len(), 1);
}

/// The votes a commit's `approval.received` events cast are stored by `(run, occurrence,
/// voter)`; a later vote of the same voter replaces the earlier; a refine is not a vote.
async fn votes_are_stored_by_voter(store: Arc<dyn Store>) {
    let (_, run) = started(&store, "run-votes").await;
    let received = |sequence: u64, voter: &str, action: &str, at: u64| crate::event::RunEvent {
        sequence,
        event_type: crate::event::types::APPROVAL_RECEIVED.into(),
        node_id: Some("gate".into()),
        payload: json!({"nodeId": "gate", "interruptId": "int-v", "action": action, "decidedBy": "key", "voter": voter}),
        timestamp: at,
        causation: None,
    };
    let mut next = run.clone();
    (next.version, next.next_sequence) = (2, 3);
    let events = [received(1, "alice", "accept", 2_000), received(2, "bob", "refine", 2_000)];
    store.commit(&next, 1, &events, &[]).await.unwrap();
    let mut last = next.clone();
    (last.version, last.next_sequence) = (3, 4);
    store.commit(&last, 2, &[received(3, "alice", "reject", 3_000)], &[]).await.unwrap();
    let alice = store.vote("run-votes", "int-v", "alice").await.unwrap().expect("stored");
    assert_eq!((alice.action.as_str(), alice.decided_by.as_str(), alice.at), ("reject", "key", 3_000));
    assert_eq!(store.vote("run-votes", "int-v", "bob").await.unwrap(), None, "a refine is not a vote");
    assert_eq!(store.vote("run-votes", "int-other", "alice").await.unwrap(), None);
    assert_eq!(store.vote("run-missing", "int-v", "alice").await.unwrap(), None);
}

async fn idempotent_create_writes_once(store: Arc<dyn Store>) {
    let workflow = chain_workflow();
    let first = pending_run(&workflow, "run-i1", "t1");
    let second = pending_run(&workflow, "run-i2", "t1");
    let created = store.create_run(&first, &[], &[], Some(&record("k", "d1", json!({"runId": "run-i1"})))).await;
    assert_eq!(created.unwrap(), CreateResult::Created);
    let again = store.create_run(&second, &[], &[], Some(&record("k", "d2", json!({"runId": "run-i2"})))).await;
    match again.unwrap() {
        CreateResult::Existing(existing) => {
            assert_eq!(existing.body, json!({"runId": "run-i1"}));
            assert_eq!(existing.request_digest, "d1");
        }
        other => panic!("expected the existing record, got {other:?}"),
    }
    assert_eq!(store.load_run("run-i2").await.unwrap(), None, "a replayed create writes no run");
    let other_tenant = store.claim_idempotency("t2", "POST /v1/runs", "k", "d1", 1_000, 2_000).await.unwrap();
    assert_eq!(other_tenant, IdempotencyClaim::Claimed, "records are per tenant");
}

async fn tasks_lease_release_and_ack(store: Arc<dyn LocalQueue>) {
    let effects = [
        Effect::Step { node_id: "a".into(), activation: 1, due_at: 100 },
        Effect::Wake { node_id: "d".into(), activation: 1, due_at: 500 },
    ];
    store.send("run-t", &effects).await.unwrap();
    store.send("run-t", &effects).await.unwrap();
    assert_eq!(store.next_visible_at().await.unwrap(), Some(100));
    let claimed = store.claim_due(200, 1_000, 10).await.unwrap();
    assert_eq!(claimed.len(), 1, "re-enqueued ids are not duplicated; the timer is not due");
    assert_eq!((claimed[0].id.as_str(), claimed[0].deliveries), ("run-t/step/a/1", 1));
    assert!(store.claim_due(300, 1_000, 10).await.unwrap().is_empty(), "a leased task is invisible");
    let redelivered = store.claim_due(1_300, 1_000, 10).await.unwrap();
    assert_eq!(redelivered.len(), 2, "an expired lease makes the task visible again");
    let step = redelivered.iter().find(|t| t.id == "run-t/step/a/1").unwrap();
    assert_eq!(step.deliveries, 2);
    store.ack("run-t/step/a/1").await.unwrap();
    store.release("run-t/wake/d/1", 5_000).await.unwrap();
    assert!(store.claim_due(4_999, 1_000, 10).await.unwrap().is_empty());
    assert_eq!(store.claim_due(5_000, 1_000, 10).await.unwrap().len(), 1);
}

async fn workflows_are_versioned_by_content(store: Arc<dyn Store>) {
    let v1 = json!({"id": "wf", "name": "one", "nodes": [{"id": "a", "typeId": "core.noop"}]});
    let v2 = json!({"id": "wf", "name": "two", "nodes": [{"id": "a", "typeId": "core.noop"}]});
    let stored = |document: &Value| StoredWorkflow {
        namespace: "t1".into(),
        workflow_id: "wf".into(),
        version: document["name"].as_str().unwrap().into(),
        content_hash: crate::model::content_hash(document),
        document: document.clone(),
    };
    store.put_workflow(&stored(&v1), 1).await.unwrap();
    store.put_workflow(&stored(&v2), 2).await.unwrap();
    let labelled = store.workflow_by_label("t1", "wf", "one").await.unwrap().unwrap();
    assert_eq!(labelled.content_hash, crate::model::content_hash(&v1));
    assert!(store.workflow_by_label("t1", "wf", "three").await.unwrap().is_none());
    assert_eq!(store.latest_workflow("t1", "wf").await.unwrap().unwrap().document["name"], "two");
    let old = store.workflow_version("t1", "wf", &crate::model::content_hash(&v1)).await.unwrap();
    assert_eq!(old.unwrap().document["name"], "one", "older versions stay readable for pinned runs");
    assert!(store.latest_workflow("t2", "wf").await.unwrap().is_none());
    assert_eq!(store.workflow_ids("t1").await.unwrap(), ["wf"]);
}
