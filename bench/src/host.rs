//! The host under test: either a `trellis serve` process this benchmark starts (a given
//! binary, on a data directory or `--memory`, with the benchmark's workflows) or a host that
//! is already running, reached at its URL and measured through its pid. Only a process this
//! benchmark started is ever killed (on drop).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::error::{BenchError, Fallible};
use crate::scenarios;

/// The bearer key a started host is given.
pub(crate) const KEY: &str = "bench-key";

/// How to get a host.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// Start `bin serve`.
    Start {
        /// The trellis binary.
        bin: PathBuf,
        /// Where the durable store lives (`None`: a fresh temporary directory).
        data_dir: Option<PathBuf>,
        /// `--memory` instead of a data directory.
        memory: bool,
    },
    /// Use a host that is already serving at `base`.
    Attach {
        /// `http://127.0.0.1:<port>`.
        base: String,
        /// Its pid, for CPU and memory figures (`None`: those figures are not reported).
        pid: Option<u32>,
        /// A key with runs and manifest scopes.
        key: String,
    },
}

/// A host being measured.
pub(crate) struct Host {
    /// `http://127.0.0.1:<port>`.
    pub(crate) base: String,
    /// The bearer key.
    pub(crate) key: String,
    /// The process whose `/proc` entries are read.
    pub(crate) pid: Option<u32>,
    /// Spawn to the first answered discovery request (started hosts only).
    pub(crate) startup: Option<Duration>,
    /// What the host is, for the report: `durable`, `memory` or `attached`.
    pub(crate) store: &'static str,
    /// Median time of one 4 KiB write + `fdatasync` in the data directory's file system
    /// (started durable hosts only): what bounds a durable commit on this disk now.
    pub(crate) fsync: Option<Duration>,
    /// The started process (killed on drop).
    _child: Option<Child>,
    /// The temporary directory holding workflows and data (removed on drop).
    _workdir: Option<tempfile::TempDir>,
}

/// Waits until `base` answers discovery with 200, for at most 30 s.
async fn wait_for_discovery(base: &str) -> Fallible<()> {
    let http = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = http.get(format!("{base}/.well-known/openwop")).send().await.map(|r| r.status().as_u16());
        if status.as_ref().ok() == Some(&200) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::new("host_unreachable", format!("{base} did not answer discovery: {status:?}")));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Gets the host `target` names; `label` names the data subdirectory when several hosts are
/// started on one `--data-dir` (one per mode).
pub(crate) async fn open(target: &Target, label: &str) -> Fallible<Host> {
    match target {
        Target::Start { bin, data_dir, memory } => {
            start(bin, data_dir.as_deref().map(|d| d.join(label)), *memory).await
        }
        Target::Attach { base, pid, key } => attach(base, *pid, key).await,
    }
}

/// Median of 21 writes of 4 KiB + `fdatasync` to a scratch file in `dir`.
fn fsync_probe(dir: &Path) -> Option<Duration> {
    use std::io::Write as _;
    std::fs::create_dir_all(dir).ok()?;
    let path = dir.join("bench-fsync-probe");
    let mut file = std::fs::File::create(&path).ok()?;
    let block = [0u8; 4096];
    let mut times = Vec::with_capacity(21);
    for _ in 0..21 {
        let started = Instant::now();
        file.write_all(&block).ok()?;
        file.sync_data().ok()?;
        times.push(started.elapsed());
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    times.sort();
    times.get(times.len() / 2).copied()
}

async fn start(bin: &Path, data_dir: Option<PathBuf>, memory: bool) -> Fallible<Host> {
    let workdir = tempfile::tempdir().map_err(|e| BenchError::new("io_failed", format!("temp dir: {e}")))?;
    let workflows = workdir.path().join("workflows");
    scenarios::write_all(&workflows)?;
    let mut command = Command::new(bin);
    command
        .args(["serve", "--bind", "127.0.0.1:0", "--workflows"])
        .arg(&workflows)
        .env("TRELLIS_API_KEY", KEY)
        // The dispatch scenario's scripted supervisor plan is honoured for a test-scope key.
        .env("OPENWOP_TEST_SEAM_ENABLED", "true")
        .env("RUST_LOG", "warn")
        .env_remove("TRELLIS_DATA_DIR")
        .env_remove("TRELLIS_MEMORY")
        .env_remove("TRELLIS_WORKFLOWS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut fsync = None;
    if memory {
        command.arg("--memory");
    } else {
        let dir = data_dir.unwrap_or_else(|| workdir.path().join("data"));
        fsync = fsync_probe(&dir);
        command.arg("--data-dir").arg(dir);
    }
    let spawned = Instant::now();
    let mut child = command.spawn().map_err(|e| {
        BenchError::new(
            "host_start_failed",
            format!("{}: {e} (build it with `cargo build --release -p trellis`)", bin.display()),
        )
    })?;
    let stdout = child.stdout.take().ok_or_else(|| BenchError::new("host_start_failed", "no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let line = lines
        .next_line()
        .await
        .ok()
        .flatten()
        .ok_or_else(|| BenchError::new("host_start_failed", format!("{} printed no address", bin.display())))?;
    let base = line.trim().rsplit(' ').next().unwrap_or_default().to_owned();
    // Keep draining stdout so the host never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    wait_for_discovery(&base).await?;
    Ok(Host {
        base,
        key: KEY.to_owned(),
        pid: child.id(),
        startup: Some(spawned.elapsed()),
        store: if memory { "memory" } else { "durable" },
        fsync,
        _child: Some(child),
        _workdir: Some(workdir),
    })
}

async fn attach(base: &str, pid: Option<u32>, key: &str) -> Fallible<Host> {
    let base = base.trim_end_matches('/').to_owned();
    wait_for_discovery(&base).await?;
    let http = reqwest::Client::new();
    for id in scenarios::workflow_ids() {
        let answer = http
            .get(format!("{base}/v1/workflows/{id}"))
            .bearer_auth(key)
            .send()
            .await
            .map_err(|e| BenchError::http("workflow lookup", e))?;
        if !answer.status().is_success() {
            return Err(BenchError::new(
                "workflow_missing",
                format!(
                    "{base} has no workflow {id} ({}): start it with --workflows DIR after \
                     `trellis-bench --write-workflows DIR`",
                    answer.status()
                ),
            ));
        }
    }
    Ok(Host {
        base,
        key: key.to_owned(),
        pid,
        startup: None,
        store: "attached",
        fsync: None,
        _child: None,
        _workdir: None,
    })
}
