//! The host under test: starts `trellis serve` with the benchmark's workflows, loopback
//! allowed for `core.http.request`, and any further arguments a benchmark needs (e.g.
//! `trellis-bench-ai`'s `--ai-providers`). Shared by `trellis-bench-http` and
//! `trellis-bench-ai`.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The bearer key the host is started with.
pub(crate) const KEY: &str = "bench-key";

/// One started host process; killed when dropped.
pub(crate) struct Host {
    /// The process (only this one is ever killed).
    pub(crate) child: Child,
    /// `http://127.0.0.1:<port>`.
    pub(crate) base: String,
    /// Spawn to the first answered discovery request.
    pub(crate) startup: Duration,
}

impl Host {
    /// The host's pid, as `/proc` names it.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.id()
    }
}

/// Starts `trellis serve` on `workflows`, in memory or on a data directory under `workdir`,
/// with `--http-allow-private-nets 127.0.0.1/32` so that the workflows may call the bench's
/// loopback server, and waits until discovery answers.
#[allow(dead_code)] // trellis-bench-ai starts its host with `start_with`
pub(crate) async fn start(trellis: &Path, workflows: &Path, workdir: &Path, memory: bool) -> Host {
    start_with(trellis, workflows, workdir, memory, std::iter::empty::<&OsStr>()).await
}

/// [`start`] with `extra` arguments after the benchmark's own.
pub(crate) async fn start_with<I, S>(trellis: &Path, workflows: &Path, workdir: &Path, memory: bool, extra: I) -> Host
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut command = Command::new(trellis);
    command
        .args(["serve", "--bind", "127.0.0.1:0", "--http-allow-private-nets", "127.0.0.1/32", "--workflows"])
        .arg(workflows)
        .env("TRELLIS_API_KEY", KEY)
        .env("RUST_LOG", "warn")
        .env_remove("TRELLIS_HTTP_ALLOW_PRIVATE_NETS")
        .env_remove("TRELLIS_MAX_CONCURRENT_ACTIVITIES")
        .env_remove("TRELLIS_AI_PROVIDERS")
        .env_remove("TRELLIS_OPENAI_BASE_URL")
        .env_remove("TRELLIS_OPENAI_API_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if memory {
        command.arg("--memory");
    } else {
        command.arg("--data-dir").arg(workdir.join("data"));
    }
    command.args(extra);
    let spawned = Instant::now();
    let mut child = command.spawn().expect("start trellis (build it with `cargo build --release -p trellis`)");
    let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let line = lines.next_line().await.expect("trellis stdout").expect("trellis printed its address");
    let base = line.trim().rsplit(' ').next().unwrap_or_default().to_owned();
    // Keep draining stdout so the host never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let http = reqwest::Client::new();
    while http.get(format!("{base}/.well-known/openwop")).send().await.map(|r| r.status().as_u16()).ok() != Some(200) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Host { child, base, startup: spawned.elapsed() }
}
