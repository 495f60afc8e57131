//! Databases written by earlier releases (SQLite layout 3, `tests/data/layout3`, layout 4,
//! `tests/data/layout4`, and layout 5, `tests/data/layout5`) open with today's build, migrate,
//! and each run parked in them finishes: the overdue delay fires,
//! the standalone approval resolves (by the interrupt token minted under the copied host
//! secret), the child's approval resolves and its parent completes. Every log continues the
//! old one: the stored events stay as they were and the new ones follow without a gap.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{assert_log_well_formed, serve_args, start, types, Client, KEY};
use serde_json::{json, Value};

/// Generous: the host has to open, migrate and catch up on an overdue timer first.
const WITHIN: Duration = Duration::from_secs(60);

/// One fixture: a data directory written by an earlier release, and its parked runs.
struct Fixture {
    /// The directory under `tests/data`.
    dir: &'static str,
    /// Its `PRAGMA user_version`.
    layout: u32,
    /// `parked-delay`, parked on its 3 s timer.
    delay: &'static str,
    /// `pending-approval`, suspended on `gate`.
    approval: &'static str,
    /// `waiting-parent`, waiting on `call` for `child`.
    parent: &'static str,
    /// The parent's `pending-approval` child, suspended on `gate`.
    child: &'static str,
}

const LAYOUT_3: Fixture = Fixture {
    dir: "layout3",
    layout: 3,
    delay: "run-f1579a7d-69b0-466e-810f-ebf5ae252e05",
    approval: "run-f41511dd-3d9b-4ea0-8b35-664560c3b8bb",
    parent: "run-105fe85b-1fe5-4566-98aa-3d0fecb4c260",
    child: "run-eaea4567ad80d3e765e9f2047c61f87f",
};

const LAYOUT_4: Fixture = Fixture {
    dir: "layout4",
    layout: 4,
    delay: "run-01a234d1-0f79-7096-914b-7f7538d93709",
    approval: "run-01a234d1-1048-7244-b147-316d40e9d8a8",
    parent: "run-01a234d1-113b-7585-bd20-9645bcc1155b",
    child: "run-164d019881b7f5b9cdf6af0b181e32b7",
};

const LAYOUT_5: Fixture = Fixture {
    dir: "layout5",
    layout: 5,
    delay: "run-01a24f1e-af86-7714-b47a-2033b0e74572",
    approval: "run-01a24f1e-af95-75ba-b604-74493e39092d",
    parent: "run-01a24f1e-afa0-7132-8933-e1a4131388fc",
    child: "run-01bf95cdbccb295501278d426318297c",
};

/// The events each run had in the fixture: `(type, nodeId)` at sequence 0, 1, ...
fn stored_log(fixture: &Fixture, run_id: &str) -> Vec<(&'static str, Option<&'static str>)> {
    let suspended = vec![
        ("run.started", None),
        ("node.started", Some("gate")),
        ("node.suspended", Some("gate")),
        ("interrupt.requested", Some("gate")),
        ("approval.requested", Some("gate")),
    ];
    if run_id == fixture.delay {
        vec![("run.started", None), ("node.started", Some("wait"))]
    } else if run_id == fixture.approval || run_id == fixture.child {
        suspended
    } else if run_id == fixture.parent {
        vec![("run.started", None), ("node.started", Some("call")), ("node.dispatched", Some("call"))]
    } else {
        panic!("not a fixture run: {run_id}")
    }
}

/// A fresh data directory holding copies of the fixture's database and host secret.
///
/// The fixture's runs were started when it was written, and a run's duration limit (24 h)
/// counts from its start: left as they are, they would all time out once the fixture is a day
/// old, whatever the build. So the copy's runs are restarted a minute ago — only `createdAt`
/// and `startedAt` of each run's state document move (the layout's own JSON, as the old
/// release wrote it); timers, events and everything else stay as written, and the overdue
/// delay is still overdue.
fn copied_data_dir(fixture: &Fixture) -> tempfile::TempDir {
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data").join(fixture.dir);
    let dir = tempfile::tempdir().unwrap();
    for file in ["trellis.db", "cursor-secret"] {
        std::fs::copy(from.join(file), dir.path().join(file)).unwrap();
    }
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let connection = rusqlite::Connection::open(dir.path().join("trellis.db")).unwrap();
    let moved = connection
        .execute("UPDATE runs SET state = json_set(state, '$.createdAt', ?1, '$.startedAt', ?1)", [now_ms - 60_000])
        .unwrap();
    assert_eq!(moved, 4, "the fixture's four runs");
    drop(connection);
    dir
}

/// `PRAGMA user_version` read from the database header (a big-endian integer at byte 60).
fn header_user_version(db: &Path) -> u32 {
    let bytes = std::fs::read(db).unwrap();
    assert_eq!(&bytes[..16], b"SQLite format 3\0", "not an SQLite file");
    u32::from_be_bytes(bytes[60..64].try_into().unwrap())
}

/// The run's whole log, asserted well formed and continuing the stored one.
async fn assert_log_continues(client: &Client, fixture: &Fixture, run_id: &str) -> Vec<Value> {
    let events = client.events(run_id).await;
    assert_log_well_formed(&events);
    let stored = stored_log(fixture, run_id);
    assert!(events.len() > stored.len(), "{run_id}: no event after the stored ones: {:?}", types(&events));
    for (sequence, (event, (kind, node))) in events.iter().zip(&stored).enumerate() {
        assert_eq!(
            (event["type"].as_str(), event["nodeId"].as_str()),
            (Some(*kind), *node),
            "{run_id}: stored event {sequence} changed: {:?}",
            types(&events)
        );
    }
    events
}

/// Accepts the pending approval on `gate` through the run's interrupt route.
async fn approve(client: &Client, run_id: &str) {
    let body = json!({"resumeValue": {"action": "accept"}});
    let (status, answer) = client.request("POST", &format!("/v1/runs/{run_id}/interrupts/gate"), Some(body)).await;
    assert_eq!(status, 200, "{run_id}: {answer}");
}

#[tokio::test]
async fn a_layout_3_database_opens_and_every_parked_run_finishes() {
    every_parked_run_finishes(&LAYOUT_3).await;
}

#[tokio::test]
async fn a_layout_4_database_opens_and_every_parked_run_finishes() {
    every_parked_run_finishes(&LAYOUT_4).await;
}

#[tokio::test]
async fn a_layout_5_database_opens_and_every_parked_run_finishes() {
    every_parked_run_finishes(&LAYOUT_5).await;
}

async fn every_parked_run_finishes(fixture: &Fixture) {
    let dir = copied_data_dir(fixture);
    let db = dir.path().join("trellis.db");
    assert_eq!(header_user_version(&db), fixture.layout, "the fixture's layout");
    // No --workflows: the definitions the runs are pinned to are stored in the file.
    let host = start(serve_args(Some(dir.path()))).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);

    // Nothing moved the runs that wait for a person.
    for run_id in [fixture.approval, fixture.child] {
        let snapshot = client.snapshot(run_id).await;
        assert_eq!(snapshot["status"], "waiting-approval", "{run_id}: {snapshot}");
    }
    let parent = client.snapshot(fixture.parent).await;
    assert_eq!(parent["childRuns"][0]["runId"], fixture.child, "{parent}");
    assert!(!matches!(parent["status"].as_str(), Some("completed" | "failed" | "cancelled")), "{parent}");

    // The delay's timer is long overdue: it fires without anyone's help.
    let delay = client.wait_terminal(fixture.delay, WITHIN).await;
    assert_eq!(delay["status"], "completed", "{delay}");
    let events = assert_log_continues(&client, fixture, fixture.delay).await;
    assert!(events.iter().any(|e| e["type"] == "node.completed" && e["nodeId"] == "wait"), "{:?}", types(&events));

    // The standalone approval, by the token minted before the upgrade: it still verifies
    // under the key derived from the copied host secret.
    let waiting = client.snapshot(fixture.approval).await;
    let token = waiting["interrupt"]["interruptToken"].as_str().unwrap_or_else(|| panic!("no token: {waiting}"));
    let resolved = reqwest::Client::new()
        .post(format!("{base}/v1/interrupts/{token}"))
        .json(&json!({"resumeValue": {"action": "accept"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resolved.status(), 200, "{}", resolved.text().await.unwrap());
    let approval = client.wait_terminal(fixture.approval, WITHIN).await;
    assert_eq!(approval["status"], "completed", "{approval}");
    let events = assert_log_continues(&client, fixture, fixture.approval).await;
    assert_eq!(types(&events).iter().filter(|t| *t == "interrupt.resolved").count(), 1, "{:?}", types(&events));

    // The child's approval; then its parent, which was waiting for it, completes.
    approve(&client, fixture.child).await;
    let child = client.wait_terminal(fixture.child, WITHIN).await;
    assert_eq!(child["status"], "completed", "{child}");
    assert_log_continues(&client, fixture, fixture.child).await;
    let parent = client.wait_terminal(fixture.parent, WITHIN).await;
    assert_eq!(parent["status"], "completed", "{parent}");
    assert_eq!(parent["childRuns"][0]["status"], "completed", "{parent}");
    let events = assert_log_continues(&client, fixture, fixture.parent).await;
    let completed = events.iter().find(|e| e["type"] == "node.completed" && e["nodeId"] == "call");
    assert_eq!(
        completed.map(|e| e["payload"]["outputs"]["childRunId"].clone()),
        Some(json!(fixture.child)),
        "{:?}",
        types(&events)
    );
    host.stop().await;

    // The migrated file opens again (the host released it) with the host records of layout 6
    // and the incremental auto-vacuum of layout 7 in place, and closing it checkpoints the write-ahead log, so the header holds the layout
    // the open wrote.
    let store = trellis_store_sqlite::SqliteStore::open(&db).expect("the migrated database reopens");
    {
        use trellis_core::ports::{Expect, RecordStore};
        let written = store.put_record("migration", "check", "k", &json!({"ok": true}), None, Expect::Absent, 1).await;
        assert_eq!(written, Ok(1), "host records after the migration");
    }
    assert_eq!(store.auto_vacuum_mode().unwrap(), 2, "layout 7 vacuumed the file into incremental auto-vacuum");
    drop(store);
    assert!(!dir.path().join("trellis.db-wal").exists(), "the write-ahead log is checkpointed at close");
    let layout = header_user_version(&db);
    assert!(layout > fixture.layout, "user_version after open is {layout}");
}
