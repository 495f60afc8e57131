//! A database written by the previous release (SQLite layout 3, `tests/data/layout3`) opens
//! with today's build, migrates, and each run parked in it finishes: the overdue delay fires,
//! the standalone approval resolves (by the interrupt token minted under the copied host
//! secret), the child's approval resolves and its parent completes. Every log continues the
//! old one: the stored events stay as they were and the new ones follow without a gap.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{assert_log_well_formed, serve_args, start, types, Client, KEY};
use serde_json::{json, Value};

/// Generous: the host has to open, migrate and catch up on an overdue timer first.
const WITHIN: Duration = Duration::from_secs(60);

/// `parked-delay`, parked on its 3 s timer.
const DELAY: &str = "run-f1579a7d-69b0-466e-810f-ebf5ae252e05";
/// `pending-approval`, suspended on `gate`.
const APPROVAL: &str = "run-f41511dd-3d9b-4ea0-8b35-664560c3b8bb";
/// `waiting-parent`, waiting on `call` for [`CHILD`].
const PARENT: &str = "run-105fe85b-1fe5-4566-98aa-3d0fecb4c260";
/// The parent's `pending-approval` child, suspended on `gate`.
const CHILD: &str = "run-eaea4567ad80d3e765e9f2047c61f87f";

/// The events each run had in the layout-3 file: `(type, nodeId)` at sequence 0, 1, ...
fn stored_log(run_id: &str) -> Vec<(&'static str, Option<&'static str>)> {
    let suspended = vec![
        ("run.started", None),
        ("node.started", Some("gate")),
        ("node.suspended", Some("gate")),
        ("interrupt.requested", Some("gate")),
        ("approval.requested", Some("gate")),
    ];
    match run_id {
        DELAY => vec![("run.started", None), ("node.started", Some("wait"))],
        APPROVAL | CHILD => suspended,
        PARENT => vec![("run.started", None), ("node.started", Some("call")), ("node.dispatched", Some("call"))],
        other => panic!("not a fixture run: {other}"),
    }
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/layout3")
}

/// A fresh data directory holding copies of the fixture's database and host secret.
fn copied_data_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["trellis.db", "cursor-secret"] {
        std::fs::copy(fixture_dir().join(file), dir.path().join(file)).unwrap();
    }
    dir
}

/// `PRAGMA user_version` read from the database header (a big-endian integer at byte 60).
fn header_user_version(db: &Path) -> u32 {
    let bytes = std::fs::read(db).unwrap();
    assert_eq!(&bytes[..16], b"SQLite format 3\0", "not an SQLite file");
    u32::from_be_bytes(bytes[60..64].try_into().unwrap())
}

/// The run's whole log, asserted well formed and continuing the stored one.
async fn assert_log_continues(client: &Client, run_id: &str) -> Vec<Value> {
    let events = client.events(run_id).await;
    assert_log_well_formed(&events);
    let stored = stored_log(run_id);
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
    let dir = copied_data_dir();
    let db = dir.path().join("trellis.db");
    assert_eq!(header_user_version(&db), 3, "the fixture is a layout-3 file");
    // No --workflows: the definitions the runs are pinned to are stored in the file.
    let host = start(serve_args(Some(dir.path()))).await;
    let base = format!("http://{}", host.addr);
    let client = Client::new(&base, KEY);

    // Nothing moved the runs that wait for a person.
    for run_id in [APPROVAL, CHILD] {
        let snapshot = client.snapshot(run_id).await;
        assert_eq!(snapshot["status"], "waiting-approval", "{run_id}: {snapshot}");
    }
    let parent = client.snapshot(PARENT).await;
    assert_eq!(parent["childRuns"][0]["runId"], CHILD, "{parent}");
    assert!(!matches!(parent["status"].as_str(), Some("completed" | "failed" | "cancelled")), "{parent}");

    // The delay's timer is long overdue: it fires without anyone's help.
    let delay = client.wait_terminal(DELAY, WITHIN).await;
    assert_eq!(delay["status"], "completed", "{delay}");
    let events = assert_log_continues(&client, DELAY).await;
    assert!(events.iter().any(|e| e["type"] == "node.completed" && e["nodeId"] == "wait"), "{:?}", types(&events));

    // The standalone approval, by the token minted before the upgrade: it still verifies
    // under the key derived from the copied host secret.
    let waiting = client.snapshot(APPROVAL).await;
    let token = waiting["interrupt"]["interruptToken"].as_str().unwrap_or_else(|| panic!("no token: {waiting}"));
    let resolved = reqwest::Client::new()
        .post(format!("{base}/v1/interrupts/{token}"))
        .json(&json!({"resumeValue": {"action": "accept"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resolved.status(), 200, "{}", resolved.text().await.unwrap());
    let approval = client.wait_terminal(APPROVAL, WITHIN).await;
    assert_eq!(approval["status"], "completed", "{approval}");
    let events = assert_log_continues(&client, APPROVAL).await;
    assert_eq!(types(&events).iter().filter(|t| *t == "interrupt.resolved").count(), 1, "{:?}", types(&events));

    // The child's approval; then its parent, which was waiting for it, completes.
    approve(&client, CHILD).await;
    let child = client.wait_terminal(CHILD, WITHIN).await;
    assert_eq!(child["status"], "completed", "{child}");
    assert_log_continues(&client, CHILD).await;
    let parent = client.wait_terminal(PARENT, WITHIN).await;
    assert_eq!(parent["status"], "completed", "{parent}");
    assert_eq!(parent["childRuns"][0]["status"], "completed", "{parent}");
    let events = assert_log_continues(&client, PARENT).await;
    let completed = events.iter().find(|e| e["type"] == "node.completed" && e["nodeId"] == "call");
    assert_eq!(
        completed.map(|e| e["payload"]["outputs"]["childRunId"].clone()),
        Some(json!(CHILD)),
        "{:?}",
        types(&events)
    );
    host.stop().await;

    // The migrated file opens again (the host released it), and closing it checkpoints the
    // write-ahead log, so the header holds the layout the open wrote.
    drop(trellis_store_sqlite::SqliteStore::open(&db).expect("the migrated database reopens"));
    assert!(!dir.path().join("trellis.db-wal").exists(), "the write-ahead log is checkpointed at close");
    let layout = header_user_version(&db);
    assert!(layout >= 3, "user_version after open is {layout}");
}
