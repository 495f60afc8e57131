//! A `trellis serve` child process on a data directory, for the tests and the campaign that
//! kill it: started on a loopback port with one bearer key, its address read from the first
//! line it prints, its stdout drained so it never blocks, killed if dropped. The child may
//! call loopback servers from `core.http.request` nodes (its private-network allow-list is
//! [`LOOPBACK_ALLOW_LIST`], so a test's local server is reachable and nothing else private).
//! Also the event types the conformance workflows those tests run must log.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The event types a completed run of `conformance-multi-node` logs.
pub const MULTI_NODE_EVENTS: &[&str] = &[
    "run.started",
    "node.started",
    "node.completed",
    "node.started",
    "node.completed",
    "node.started",
    "node.completed",
    "run.completed",
];

/// The event types a completed run of `conformance-delay` logs.
pub const DELAY_EVENTS: &[&str] = &["run.started", "node.started", "node.completed", "run.completed"];

/// The `TRELLIS_HTTP_ALLOW_PRIVATE_NETS` every spawned host gets: `127.0.0.1` alone, where
/// test servers listen.
pub const LOOPBACK_ALLOW_LIST: &str = "127.0.0.1/32";

/// One started host process.
#[derive(Debug)]
pub struct ServeProcess {
    /// The process (only this one is ever killed).
    pub child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
}

/// Starts `trellis serve` (the binary at `trellis`) on `data_dir` with the API key `key`,
/// without fixtures, with loopback allowed for outbound HTTP ([`LOOPBACK_ALLOW_LIST`]), and
/// with the worker crash point `crash_at` armed if given.
pub async fn spawn(trellis: &Path, data_dir: &Path, key: &str, crash_at: Option<&str>) -> ServeProcess {
    spawn_with_env(trellis, data_dir, key, crash_at, &[]).await
}

/// [`spawn`] with extra environment variables (e.g. `TRELLIS_OPENAI_BASE_URL`).
pub async fn spawn_with_env(
    trellis: &Path,
    data_dir: &Path,
    key: &str,
    crash_at: Option<&str>,
    env: &[(&str, &str)],
) -> ServeProcess {
    let mut command = Command::new(trellis);
    command.envs(env.iter().copied());
    command
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .env("TRELLIS_API_KEY", key)
        .env("RUST_LOG", "warn")
        .env("TRELLIS_HTTP_ALLOW_PRIVATE_NETS", LOOPBACK_ALLOW_LIST)
        .env_remove("OPENWOP_FIXTURES_DIR")
        .env_remove("TRELLIS_TEST_CRASH_AT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Some(point) = crash_at {
        command.env("TRELLIS_TEST_CRASH_AT", point);
    }
    let mut child = command.spawn().expect("the trellis binary starts");
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let line = lines.next_line().await.expect("trellis stdout").expect("trellis printed its address");
    let base = line.trim().rsplit(' ').next().unwrap_or_default().to_owned();
    assert!(base.starts_with("http://"), "unexpected first line {line:?}");
    // Keep draining stdout so the host never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    ServeProcess { child, base }
}
