//! Contract checks that really race: each contender is a spawned task on the (required)
//! multi-thread runtime, released together by a barrier, so the store's atomicity — not the
//! order of awaits — decides who wins.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::Barrier;

use super::{pending_run, record, started};
use crate::engine::{self, Effect, Input};
use crate::event::RunEvent;
use crate::ports::{CreateResult, IdempotencyClaim, Store};
use crate::run::RunState;
use crate::StoreError;

/// Contenders per race.
const RACERS: usize = 8;

/// Runs `contenders` as spawned tasks that start together; returns their results in order.
pub(super) async fn race<T: Send + 'static>(
    contenders: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>>,
) -> Vec<T> {
    let flavor = tokio::runtime::Handle::current().runtime_flavor();
    assert_eq!(
        flavor,
        tokio::runtime::RuntimeFlavor::MultiThread,
        "the store contract races tasks: run it on a multi-thread runtime"
    );
    let barrier = Arc::new(Barrier::new(contenders.len()));
    let handles: Vec<_> = contenders
        .into_iter()
        .map(|contender| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                contender.await
            })
        })
        .collect();
    let mut results = Vec::new();
    for handle in handles {
        results.push(handle.await.expect("a racer panicked"));
    }
    results
}

/// Commits `(state, expected version, events, effects)` racing; returns how many won. Every
/// loser must get [`StoreError::Conflict`].
pub(super) async fn commits_racing(
    store: &Arc<dyn Store>,
    commits: Vec<(RunState, u64, Vec<RunEvent>, Vec<Effect>)>,
) -> usize {
    let contenders = commits
        .into_iter()
        .map(|(state, expected, events, effects)| {
            let store = store.clone();
            Box::pin(async move { store.commit(&state, expected, &events, &effects).await }) as _
        })
        .collect();
    let mut wins = 0;
    for result in race(contenders).await {
        match result {
            Ok(()) => wins += 1,
            Err(StoreError::Conflict) => {}
            Err(other) => panic!("a losing commit must get Conflict, got {other:?}"),
        }
    }
    wins
}

/// Of writers racing from the same version, exactly one commits.
pub(super) async fn concurrent_writers_one_wins(store: Arc<dyn Store>) {
    let (workflow, run) = started(&store, "run-c").await;
    let mut commits = Vec::new();
    let mut appended = 0;
    for writer in 0..RACERS {
        let mut mine = run.clone();
        let step = Input::Step { node_id: "a".into(), activation: 1 };
        let outcome = engine::apply(&workflow, &mut mine, step, 1_002 + writer as u64);
        mine.version = 2;
        appended = outcome.events.len();
        commits.push((mine, 1, outcome.events, outcome.effects));
    }
    assert_eq!(commits_racing(&store, commits).await, 1, "exactly one writer commits");
    let stored = store.load_run("run-c").await.unwrap().unwrap();
    assert_eq!(stored.version, 2);
    let events = store.events_after("run-c", None, 100).await.unwrap();
    assert!(events.iter().enumerate().all(|(i, e)| e.sequence == i as u64), "one writer's events, contiguous");
    assert!(appended > 0);
    assert_eq!(events.len(), 1 + appended, "the losers appended nothing");
}

/// Of requests racing to claim one idempotency key, exactly one holds it; the others see it
/// in flight.
pub(super) async fn concurrent_claims_one_wins(store: Arc<dyn Store>) {
    let contenders = (0..RACERS)
        .map(|_| {
            let store = store.clone();
            Box::pin(async move {
                store.claim_idempotency("t-race", "POST /v1/runs/r/cancel", "k-race", "d", 100, 1_100).await
            }) as _
        })
        .collect();
    let results = race(contenders).await;
    let claimed = results.iter().filter(|result| **result == Ok(IdempotencyClaim::Claimed)).count();
    assert_eq!(claimed, 1, "exactly one claim: {results:?}");
    let in_flight = Ok(IdempotencyClaim::InFlight { request_digest: "d".into() });
    assert!(results.iter().all(|result| *result == Ok(IdempotencyClaim::Claimed) || *result == in_flight));
}

/// Of keyed creates racing (no claim beforehand), exactly one writes its run; each other one
/// gets the winner's record or the typed conflict, and writes nothing.
pub(super) async fn concurrent_keyed_creates_write_once(store: Arc<dyn Store>) {
    let workflow = super::chain_workflow();
    let contenders = (0..RACERS)
        .map(|racer| {
            let store = store.clone();
            let run = pending_run(&workflow, &format!("run-race-{racer}"), "t1");
            let answer = record("k-create-race", "d", json!({ "runId": run.run_id }));
            Box::pin(async move { store.create_run(&run, &[], &[], Some(&answer)).await }) as _
        })
        .collect();
    let results = race(contenders).await;
    let mut winner = None;
    for (racer, result) in results.iter().enumerate() {
        match result {
            Ok(CreateResult::Created) => {
                assert!(winner.replace(racer).is_none(), "two creates won: {results:?}");
            }
            Ok(CreateResult::Existing(_)) | Err(StoreError::Conflict) => {}
            Err(other) => panic!("a losing create must get the record or Conflict, got {other:?}"),
        }
    }
    let winner = winner.expect("one create wins");
    for (racer, result) in results.iter().enumerate() {
        let stored = store.load_run(&format!("run-race-{racer}")).await.unwrap();
        assert_eq!(stored.is_some(), racer == winner, "only the winner's run exists");
        if let Ok(CreateResult::Existing(existing)) = result {
            assert_eq!(existing.body, json!({ "runId": format!("run-race-{winner}") }));
        }
    }
}
