//! Contract checks for host records ([`crate::ports::RecordStore`]): conditional writes and
//! their versions, deletes, listings by `(kind, scope)` in key byte order, expiry, and races
//! decided by the store (each contender a spawned task released by a barrier on the
//! multi-thread runtime, as in `races`).
//!
//! The times are far in the future (2096), so a backend's own expiry (DynamoDB's TTL, which
//! follows the wall clock) never removes a record a check still reads as live; only the
//! `now` given to each call decides.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::ports::{Expect, Record, Store};
use crate::timefmt::Millis;
use crate::StoreError;

/// The checks' time origin (milliseconds, in 2096).
const T0: Millis = 4_000_000_000_000;

/// The kind every check but the isolation ones writes.
const KIND: &str = "contract-rec";

/// Contenders per race.
const RACERS: usize = 8;

/// Runs every host record check (kinds and scopes unique to them).
pub(super) async fn host_records_round_trip(store: Arc<dyn Store>) {
    conditional_writes_bump_the_version(&store).await;
    deletes_follow_their_condition(&store).await;
    listings_are_in_key_order_per_kind_and_scope(&store).await;
    lapsed_records_are_absent(&store).await;
    names_both_stores_can_keep_are_required(&store).await;
    racing_writers_one_wins(&store).await;
}

fn record(scope: &str, key: &str, version: u64, value: Value, expires_at: Option<Millis>) -> Record {
    Record { kind: KIND.into(), scope: scope.into(), key: key.into(), version, value, expires_at }
}

async fn put(store: &Arc<dyn Store>, scope: &str, key: &str, value: Value, expect: Expect) -> Result<u64, StoreError> {
    store.put_record(KIND, scope, key, &value, None, expect, T0).await
}

async fn read(store: &Arc<dyn Store>, scope: &str, key: &str, now: Millis) -> Option<Record> {
    store.record(KIND, scope, key, now).await.unwrap()
}

/// Keys of the live records of `(KIND, scope)` at `now`, after `after`, at most `limit`.
async fn keys(store: &Arc<dyn Store>, scope: &str, after: Option<&str>, limit: usize, now: Millis) -> Vec<String> {
    store.records(KIND, scope, after, limit, now).await.unwrap().into_iter().map(|record| record.key).collect()
}

/// `Absent` creates at version 1 and only then; `Version(v)` writes only over version `v`;
/// `Any` upserts (one more than the stored version, or 1); a refused write changes nothing.
async fn conditional_writes_bump_the_version(store: &Arc<dyn Store>) {
    let scope = "writes";
    assert_eq!(read(store, scope, "a", T0).await, None, "nothing stored yet");
    assert!(store.records(KIND, scope, None, 10, T0).await.unwrap().is_empty());
    let document = json!({"url": "https://example.test/hook", "events": ["run.completed"], "n": 3, "ok": true,
                          "text": "ünïcode ✓", "nested": {"list": [1, {"a": null}]}});
    assert_eq!(put(store, scope, "a", document.clone(), Expect::Absent).await, Ok(1), "created at version 1");
    assert_eq!(read(store, scope, "a", T0).await, Some(record(scope, "a", 1, document.clone(), None)));
    assert_eq!(put(store, scope, "a", json!("again"), Expect::Absent).await, Err(StoreError::Conflict));
    assert_eq!(read(store, scope, "a", T0).await.unwrap().value, document, "a refused create changes nothing");

    assert_eq!(put(store, scope, "a", json!({"v": 2}), Expect::Version(1)).await, Ok(2), "over version 1");
    assert_eq!(put(store, scope, "a", json!({"v": "stale"}), Expect::Version(1)).await, Err(StoreError::Conflict));
    assert_eq!(put(store, scope, "a", json!({"v": "ahead"}), Expect::Version(5)).await, Err(StoreError::Conflict));
    assert_eq!(read(store, scope, "a", T0).await, Some(record(scope, "a", 2, json!({"v": 2}), None)));

    assert_eq!(put(store, scope, "a", json!({"v": 3}), Expect::Any).await, Ok(3), "an upsert bumps the version");
    assert_eq!(put(store, scope, "a", json!([]), Expect::Any).await, Ok(4));
    assert_eq!(read(store, scope, "a", T0).await, Some(record(scope, "a", 4, json!([]), None)));
    assert_eq!(put(store, scope, "b", json!(null), Expect::Any).await, Ok(1), "an upsert creates at version 1");
    assert_eq!(read(store, scope, "b", T0).await, Some(record(scope, "b", 1, json!(null), None)));

    assert_eq!(put(store, scope, "none", json!(1), Expect::Version(1)).await, Err(StoreError::Conflict));
    assert_eq!(read(store, scope, "none", T0).await, None, "a refused write creates nothing");
    assert_eq!(keys(store, scope, None, 10, T0).await, ["a", "b"]);
}

/// `Any` deletes what is there (whether it was is the answer); `Version(v)` only version `v`
/// (else `Conflict`, absent included); `Absent` deletes nothing and holds only when absent.
/// A deleted key is created afresh at version 1.
async fn deletes_follow_their_condition(store: &Arc<dyn Store>) {
    let scope = "deletes";
    for key in ["a", "b"] {
        put(store, scope, key, json!({ "key": key }), Expect::Absent).await.unwrap();
    }
    put(store, scope, "a", json!({"key": "a", "v": 2}), Expect::Version(1)).await.unwrap();
    let delete = |key: &'static str, expect: Expect| {
        let store = store.clone();
        async move { store.delete_record(KIND, scope, key, expect, T0).await }
    };
    assert_eq!(delete("a", Expect::Version(1)).await, Err(StoreError::Conflict), "not the stored version");
    assert_eq!(read(store, scope, "a", T0).await.map(|record| record.version), Some(2), "still there");
    assert_eq!(delete("a", Expect::Absent).await, Err(StoreError::Conflict), "`Absent` while present");
    assert!(read(store, scope, "a", T0).await.is_some(), "`Absent` deletes nothing");
    assert_eq!(delete("a", Expect::Version(2)).await, Ok(true));
    assert_eq!(read(store, scope, "a", T0).await, None);
    assert_eq!(delete("a", Expect::Version(2)).await, Err(StoreError::Conflict), "absent: no version matches");
    assert_eq!(delete("a", Expect::Any).await, Ok(false), "nothing to delete");
    assert_eq!(delete("a", Expect::Absent).await, Ok(false), "absent, as expected");
    assert_eq!(delete("b", Expect::Any).await, Ok(true));
    assert_eq!(read(store, scope, "b", T0).await, None);
    assert!(keys(store, scope, None, 10, T0).await.is_empty());
    assert_eq!(put(store, scope, "a", json!("again"), Expect::Absent).await, Ok(1), "created afresh");
    assert_eq!(put(store, scope, "b", json!("again"), Expect::Any).await, Ok(1), "upserted afresh");
}

/// Listings hold the records of one `(kind, scope)` only, in key byte order, strictly after
/// `after`, at most `limit`; paging by the last key read visits each record once.
async fn listings_are_in_key_order_per_kind_and_scope(store: &Arc<dyn Store>) {
    let scope = "list";
    // Byte order: upper case before lower case, '#' before digits, multi-byte UTF-8 last.
    let sorted = ["K0", "k01", "k01#x", "k02", "k03", "k10", "é"];
    for key in ["k03", "é", "k01", "k10", "K0", "k02", "k01#x"] {
        put(store, scope, key, json!({ "key": key }), Expect::Absent).await.unwrap();
    }
    put(store, scope, "k02", json!({"key": "k02", "v": 2}), Expect::Version(1)).await.unwrap();
    // Neighbours that must not show: another scope (one that extends this one's name, too)
    // and another kind, with the same keys.
    for other_scope in ["list2", "lis", "list#x"] {
        put(store, other_scope, "k01", json!("other scope"), Expect::Absent).await.unwrap();
    }
    store.put_record("contract-rec-other", scope, "k01", &json!("other kind"), None, Expect::Absent, T0).await.unwrap();
    store.put_record("contract-rec-other", scope, "k01", &json!("other kind"), None, Expect::Any, T0).await.unwrap();

    let listed = store.records(KIND, scope, None, 100, T0).await.unwrap();
    let expected: Vec<Record> = sorted
        .iter()
        .map(|key| match *key {
            "k02" => record(scope, key, 2, json!({"key": "k02", "v": 2}), None),
            _ => record(scope, key, 1, json!({ "key": key }), None),
        })
        .collect();
    assert_eq!(listed, expected, "every record of the scope, in key byte order, as written");
    assert_eq!(keys(store, scope, Some("k01"), 100, T0).await, sorted[2..], "strictly after `after`");
    assert_eq!(keys(store, scope, Some("k025"), 100, T0).await, sorted[4..], "after a key not stored");
    assert_eq!(keys(store, scope, Some("é"), 100, T0).await, Vec::<String>::new(), "after the last");
    assert_eq!(keys(store, scope, None, 3, T0).await, sorted[..3], "at most `limit`");
    assert_eq!(keys(store, scope, Some("k01"), 2, T0).await, sorted[2..4]);
    assert!(keys(store, scope, None, 0, T0).await.is_empty(), "a limit of 0");
    let mut paged: Vec<String> = Vec::new();
    loop {
        let page = keys(store, scope, paged.last().map(String::as_str), 2, T0).await;
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        paged.extend(page);
    }
    assert_eq!(paged, sorted, "paging visits each record once");

    for other_scope in ["list2", "lis", "list#x"] {
        let listed = store.records(KIND, other_scope, None, 100, T0).await.unwrap();
        assert_eq!(listed, [record(other_scope, "k01", 1, json!("other scope"), None)], "scope {other_scope}");
    }
    let other_kind = store.records("contract-rec-other", scope, None, 100, T0).await.unwrap();
    let expected = Record {
        kind: "contract-rec-other".into(),
        scope: scope.into(),
        key: "k01".into(),
        version: 2,
        value: json!("other kind"),
        expires_at: None,
    };
    assert_eq!(store.record("contract-rec-other", scope, "k01", T0).await.unwrap().as_ref(), Some(&expected));
    assert_eq!(other_kind, [expected], "kinds are listed apart");
    assert_eq!(read(store, scope, "k01", T0).await.map(|record| record.version), Some(1), "versions are per kind");
    assert!(store.records("contract-rec-none", scope, None, 100, T0).await.unwrap().is_empty());
}

/// A record whose `expires_at` is at or before `now` is not read, not listed and not
/// deleted; it counts as absent for `Absent`, matches no version, and a write over it starts
/// again at version 1. An upsert sets or clears the expiry.
async fn lapsed_records_are_absent(store: &Arc<dyn Store>) {
    let scope = "expiry";
    let at = T0 + 100;
    let put_at = |key: &'static str, value: Value, expires_at: Option<Millis>, expect: Expect, now: Millis| {
        let store = store.clone();
        async move { store.put_record(KIND, scope, key, &value, expires_at, expect, now).await }
    };
    assert_eq!(put_at("e1", json!(1), Some(at), Expect::Absent, T0).await, Ok(1));
    put_at("live", json!("stays"), None, Expect::Absent, T0).await.unwrap();
    assert_eq!(read(store, scope, "e1", at - 1).await, Some(record(scope, "e1", 1, json!(1), Some(at))));
    assert_eq!(keys(store, scope, None, 10, at - 1).await, ["e1", "live"]);
    assert_eq!(read(store, scope, "e1", at).await, None, "lapsed at its `expires_at`");
    assert_eq!(keys(store, scope, None, 10, at).await, ["live"], "not listed");
    assert_eq!(keys(store, scope, None, 1, at).await, ["live"], "not counted towards the limit");
    assert_eq!(put_at("e1", json!(2), None, Expect::Version(1), at).await, Err(StoreError::Conflict));
    assert_eq!(put_at("e1", json!(2), None, Expect::Absent, at).await, Ok(1), "absent: created afresh");
    assert_eq!(read(store, scope, "e1", T0 + 1_000_000).await, Some(record(scope, "e1", 1, json!(2), None)));

    // Upserts: the expiry is set, cleared and set again; a lapsed record starts again at 1.
    assert_eq!(put_at("e2", json!("a"), Some(at), Expect::Any, T0).await, Ok(1));
    assert_eq!(put_at("e2", json!("b"), Some(at), Expect::Any, T0 + 10).await, Ok(2), "live: bumped");
    assert_eq!(put_at("e2", json!("c"), None, Expect::Any, T0 + 20).await, Ok(3));
    assert_eq!(read(store, scope, "e2", T0 + 1_000).await, Some(record(scope, "e2", 3, json!("c"), None)), "cleared");
    assert_eq!(put_at("e2", json!("d"), Some(T0 + 2_000), Expect::Any, T0 + 1_000).await, Ok(4));
    let lapsing = Some(record(scope, "e2", 4, json!("d"), Some(T0 + 2_000)));
    assert_eq!(read(store, scope, "e2", T0 + 1_999).await, lapsing);
    assert_eq!(read(store, scope, "e2", T0 + 2_000).await, None);
    assert_eq!(put_at("e2", json!("e"), None, Expect::Any, T0 + 2_000).await, Ok(1), "lapsed: starts again at 1");
    assert_eq!(put_at("e3", json!(1), Some(at), Expect::Absent, T0).await, Ok(1));
    assert_eq!(put_at("e3", json!(2), Some(at), Expect::Version(1), at - 1).await, Ok(2), "live until `expires_at`");
    assert_eq!(put_at("e3", json!(3), Some(T0 + 500), Expect::Version(2), at).await, Err(StoreError::Conflict));

    // Deletes: a lapsed record is not there to delete.
    let delete = |key: &'static str, expect: Expect, now: Millis| {
        let store = store.clone();
        async move { store.delete_record(KIND, scope, key, expect, now).await }
    };
    assert_eq!(delete("e3", Expect::Version(2), at).await, Err(StoreError::Conflict));
    assert_eq!(delete("e3", Expect::Absent, at).await, Ok(false));
    assert_eq!(delete("e3", Expect::Any, at).await, Ok(false));
    assert_eq!(read(store, scope, "e3", at).await, None);
    assert_eq!(put_at("e4", json!(1), Some(at), Expect::Absent, T0).await, Ok(1));
    assert_eq!(delete("e4", Expect::Version(1), at - 1).await, Ok(true), "live until `expires_at`");
    assert_eq!(keys(store, scope, None, 10, at).await, ["e1", "e2", "live"]);
}

/// Names the serverless store could not keep apart or store are refused by every store, so
/// a host behaves the same on both: a kind that is empty or holds `#`, an empty key.
async fn names_both_stores_can_keep_are_required(store: &Arc<dyn Store>) {
    fn refused<T>(result: Result<T, StoreError>) -> bool {
        matches!(result, Err(StoreError::LimitExceeded(_)))
    }
    for kind in ["", "contract#rec"] {
        assert!(refused(store.put_record(kind, "s", "k", &json!(1), None, Expect::Any, T0).await), "kind {kind:?}");
        assert!(refused(store.record(kind, "s", "k", T0).await), "kind {kind:?}");
        assert!(refused(store.delete_record(kind, "s", "k", Expect::Any, T0).await), "kind {kind:?}");
        assert!(refused(store.records(kind, "s", None, 10, T0).await), "kind {kind:?}");
    }
    assert!(refused(store.put_record(KIND, "names", "", &json!(1), None, Expect::Any, T0).await));
    assert!(refused(store.record(KIND, "names", "", T0).await));
    assert!(refused(store.delete_record(KIND, "names", "", Expect::Any, T0).await));
    // A scope and a key may hold anything else, `#` included; an empty `after` is no bound.
    assert_eq!(put(store, "names#1", "a#b", json!(1), Expect::Absent).await, Ok(1));
    assert_eq!(keys(store, "names#1", Some(""), 10, T0).await, ["a#b"]);
    assert_eq!(put(store, "", "k", json!(1), Expect::Absent).await, Ok(1), "an empty scope");
    assert_eq!(read(store, "", "k", T0).await.map(|record| record.version), Some(1));
}

/// Puts `(key, expect)` from [`RACERS`] writers at once, each with its own value `{"racer": i}`.
async fn puts_racing(store: &Arc<dyn Store>, key: &'static str, expect: Expect) -> Vec<Result<u64, StoreError>> {
    let contenders = (0..RACERS)
        .map(|racer| {
            let store = store.clone();
            Box::pin(
                async move { store.put_record(KIND, "races", key, &json!({ "racer": racer }), None, expect, T0).await },
            ) as _
        })
        .collect();
    super::races::race(contenders).await
}

/// The one winner of a race whose losers must get `Conflict`: its index and answer.
fn one_winner<T: std::fmt::Debug + Clone>(results: &[Result<T, StoreError>], what: &str) -> (usize, T) {
    let winners: Vec<(usize, T)> =
        results.iter().enumerate().filter_map(|(i, result)| result.clone().ok().map(|answer| (i, answer))).collect();
    assert_eq!(winners.len(), 1, "{what}: exactly one wins: {results:?}");
    assert!(
        results.iter().all(|result| matches!(result, Ok(_) | Err(StoreError::Conflict))),
        "{what}: every loser gets Conflict: {results:?}"
    );
    winners[0].clone()
}

/// Of writers racing with the same condition, exactly one writes and the others get
/// `Conflict`: creates (`Absent`) on a fresh key, writes and deletes over one version.
/// Racing upserts (`Any`) all write, each at its own version.
async fn racing_writers_one_wins(store: &Arc<dyn Store>) {
    let (winner, version) = one_winner(&puts_racing(store, "absent", Expect::Absent).await, "creates");
    assert_eq!(version, 1);
    let stored = read(store, "races", "absent", T0).await.unwrap();
    assert_eq!((stored.version, stored.value), (1, json!({ "racer": winner })), "the winner's value");

    put(store, "races", "version", json!("first"), Expect::Absent).await.unwrap();
    let (winner, version) = one_winner(&puts_racing(store, "version", Expect::Version(1)).await, "writes");
    assert_eq!(version, 2);
    let stored = read(store, "races", "version", T0).await.unwrap();
    assert_eq!((stored.version, stored.value), (2, json!({ "racer": winner })), "the winner's value");

    let contenders = (0..RACERS)
        .map(|_| {
            let store = store.clone();
            Box::pin(async move { store.delete_record(KIND, "races", "version", Expect::Version(2), T0).await }) as _
        })
        .collect();
    let deletes: Vec<Result<bool, StoreError>> = super::races::race(contenders).await;
    let (_, deleted) = one_winner(&deletes, "deletes");
    assert!(deleted);
    assert_eq!(read(store, "races", "version", T0).await, None);

    let mut versions: Vec<u64> =
        puts_racing(store, "any", Expect::Any).await.into_iter().map(|result| result.expect("an upsert")).collect();
    versions.sort_unstable();
    assert_eq!(versions, (1..=RACERS as u64).collect::<Vec<_>>(), "each upsert wrote its own version");
    assert_eq!(read(store, "races", "any", T0).await.unwrap().version, RACERS as u64);
}
