//! The host under test and the CPU meter: starts `trellis serve` with the benchmark's
//! workflows and loopback allowed for `core.http.request`, and reads the CPU time (user +
//! system, all threads) of the host and of this process from `/proc/<pid>/stat`.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The bearer key the host is started with.
pub(crate) const KEY: &str = "bench-key";

/// `/proc` reports CPU times in USER_HZ ticks, which Linux fixes at 100 per second.
const TICKS_PER_SECOND: u64 = 100;

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
pub(crate) async fn start(trellis: &Path, workflows: &Path, workdir: &Path, memory: bool) -> Host {
    let mut command = Command::new(trellis);
    command
        .args(["serve", "--bind", "127.0.0.1:0", "--http-allow-private-nets", "127.0.0.1/32", "--workflows"])
        .arg(workflows)
        .env("TRELLIS_API_KEY", KEY)
        .env("RUST_LOG", "warn")
        .env_remove("TRELLIS_HTTP_ALLOW_PRIVATE_NETS")
        .env_remove("TRELLIS_MAX_CONCURRENT_ACTIVITIES")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if memory {
        command.arg("--memory");
    } else {
        command.arg("--data-dir").arg(workdir.join("data"));
    }
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

/// CPU time (utime + stime, every thread) of `/proc/<who>/stat`; `who` is a pid or `self`.
fn cpu_of(who: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{who}/stat")).ok()?;
    // Fields after the parenthesised command name start at field 3 (state); utime is field
    // 14 and stime field 15.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 1000 / TICKS_PER_SECOND))
}

/// CPU time used so far by the host and by this process (the clients and the local server).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSample {
    host: Option<Duration>,
    bench: Option<Duration>,
}

/// CPU time used between two samples.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuUsed {
    /// By the trellis host process.
    pub(crate) host: Option<Duration>,
    /// By this process: the HTTP clients driving the runs and the server the runs call.
    pub(crate) bench: Option<Duration>,
}

impl CpuSample {
    /// Reads both counters now.
    pub(crate) fn now(host_pid: Option<u32>) -> Self {
        Self { host: host_pid.and_then(|pid| cpu_of(&pid.to_string())), bench: cpu_of("self") }
    }

    /// What was used since `earlier`.
    pub(crate) fn since(&self, earlier: &Self) -> CpuUsed {
        let delta = |now: Option<Duration>, then: Option<Duration>| Some(now?.saturating_sub(then?));
        CpuUsed { host: delta(self.host, earlier.host), bench: delta(self.bench, earlier.bench) }
    }
}

/// Peak resident set of `pid` in KiB (`VmHWM`).
pub(crate) fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|line| line.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()
}
