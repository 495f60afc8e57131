//! Schedules of the real `trellis serve` binary across a kill -9: a definition declaring
//! `rate(2 seconds)` (allowed under the test seams only) starts each occurrence exactly once —
//! occurrences due while the host was down start late when it is back, none twice — and a
//! paused schedule skips its occurrences, resuming from the next one after now (no backfill).
//! Occurrences are read from each run's `run.started` (`trigger.scheduledAt`). Bounded waits,
//! no timing assertions beyond "at least" counts.

mod common;

use std::path::Path;
use std::time::Duration;

use common::Client;
use serde_json::{json, Value};
use trellis_testkit::host::ServeProcess;

const KEY: &str = "schedule-key";
const PERIOD_MS: i64 = 2_000;

async fn spawn(data_dir: &Path) -> ServeProcess {
    let env = [("OPENWOP_TEST_SEAM_ENABLED", "true"), ("TRELLIS_SCHEDULER_TICK_MS", "200")];
    trellis_testkit::host::spawn_with_env(Path::new(env!("CARGO_BIN_EXE_trellis")), data_dir, KEY, None, &env).await
}

fn ticking() -> Value {
    json!({
        "id": "ticking", "name": "ticking", "version": "1",
        "triggers": [{"id": "tick", "type": "schedule", "config": {"expression": "rate(2 seconds)", "timezone": "Europe/Berlin"}}],
        "nodes": [{"id": "done", "typeId": "core.noop", "name": "done"}],
        "edges": [],
    })
}

/// The occurrences (ms since the epoch) of every run of `ticking`, sorted.
async fn occurrences(client: &Client) -> Vec<i64> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = cursor.as_ref().map(|c| format!("&cursor={c}")).unwrap_or_default();
        let (status, page) =
            client.request("GET", &format!("/v1/runs?workflowId=ticking&limit=100{query}"), None).await;
        assert_eq!(status, 200, "{page}");
        for run in page["runs"].as_array().unwrap() {
            let events = client.events(run["runId"].as_str().unwrap()).await;
            let trigger = &events[0]["payload"]["trigger"];
            assert_eq!(trigger["source"], "schedule");
            assert_eq!(trigger["scheduleId"], "ticking/tick");
            let at = time::OffsetDateTime::parse(
                trigger["scheduledAt"].as_str().unwrap(),
                &time::format_description::well_known::Rfc3339,
            )
            .unwrap();
            out.push((at.unix_timestamp_nanos() / 1_000_000) as i64);
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    out.sort_unstable();
    out
}

/// Asserts `occurrences` are distinct and each `PERIOD_MS` after the one before.
fn assert_consecutive(occurrences: &[i64]) {
    for pair in occurrences.windows(2) {
        assert_eq!(pair[1] - pair[0], PERIOD_MS, "a gap or a double: {occurrences:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_occurrence_starts_once_across_a_kill_and_a_paused_schedule_skips() {
    let dir = tempfile::tempdir().unwrap();
    let host = spawn(dir.path()).await;
    let client = Client::new(&host.base, KEY);
    let (status, body) = client.request("POST", "/v1/workflows", Some(ticking())).await;
    assert_eq!(status, 201, "{body}");
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let before = occurrences(&client).await;
    assert_consecutive(&before);
    let mut host = host;
    host.child.kill().await.unwrap();
    // Down for longer than a period: occurrences come due while nobody ticks.
    tokio::time::sleep(Duration::from_millis(3_000)).await;

    let host = spawn(dir.path()).await;
    let client = Client::new(&host.base, KEY);
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let seen = occurrences(&client).await;
    assert!(seen.len() >= before.len() + 2, "{seen:?} (before the kill: {before:?})");
    assert!(seen.starts_with(&before), "{seen:?} (before the kill: {before:?})");
    assert_consecutive(&seen);

    let (status, schedule) = client.request("GET", "/v1/schedules/ticking/tick", None).await;
    assert_eq!((status, schedule["timezone"].clone()), (200, json!("Europe/Berlin")), "{schedule}");
    let (status, paused) = client.request("POST", "/v1/schedules/ticking/tick:pause", None).await;
    assert_eq!((status, paused["state"].clone()), (200, json!("paused")), "{paused}");
    let at_pause = occurrences(&client).await;
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let while_paused = occurrences(&client).await;
    assert!(while_paused.len() <= at_pause.len() + 1, "a paused schedule started runs: {while_paused:?}");
    assert_consecutive(&while_paused);
    let resumed_at = now_ms();
    let (status, resumed) = client.request("POST", "/v1/schedules/ticking/tick:resume", None).await;
    assert_eq!((status, resumed["state"].clone()), (200, json!("active")));
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let after = occurrences(&client).await;
    let new: Vec<i64> = after.iter().copied().filter(|at| !while_paused.contains(at)).collect();
    assert!(!new.is_empty(), "the resumed schedule started nothing: {after:?}");
    assert!(
        new.iter().all(|at| *at > resumed_at),
        "the paused occurrences were backfilled: {new:?} (resumed at {resumed_at})"
    );
    assert_consecutive(&new);
    let (_, schedule) = client.request("GET", "/v1/schedules/ticking/tick", None).await;
    assert!(schedule["skipped"].as_u64().unwrap() >= 1, "{schedule}");
    assert_eq!(schedule["fired"].as_u64().unwrap() as usize, after.len(), "{schedule}");
    drop(host);
}

fn now_ms() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}
