//! `trellis-bench-ai`: the host's cost of a `core.ai.callPrompt` model call against
//! `core.noop`, in one session of one host. Starts the fake model provider
//! (`trellis_testkit::fake_model`) in this process, writes a providers file naming it, and
//! starts `trellis serve --ai-providers <file>`, then measures:
//!
//! 1. a `--length`-node `core.noop` chain and a `--length`-node chain of model calls, each
//!    driven by `--clients` clients for `--runs` runs with the fake answering at once:
//!    steps/s, create→terminal p50/p99, and CPU per step of the host and (separately) of
//!    this process, which runs the clients and the fake. The host's overhead per model call
//!    is the AI chain's host CPU per step less the noop chain's; the fake's own CPU is in
//!    the bench figure, never in the host's;
//! 2. `--burst` runs of one model call created at once, the fake answering after
//!    `--latency-ms`: first create to last terminal (about `--latency-ms` when the calls
//!    run concurrently), per-run create→terminal p50/max, and the CPU used;
//! 3. the same burst streamed (`stream: true`), each answer `--stream-tokens` tokens sent
//!    `--token-delay-ms` apart after the latency: the same figures and the `output.chunk`
//!    events committed per call.
//!
//! CPU is utime + stime of `/proc/<pid>/stat` before and after each scenario. Prints
//! figures; asserts nothing.

mod calls;
#[path = "../error.rs"]
mod error;
#[path = "../follow.rs"]
mod follow;
#[path = "../http/host.rs"]
mod host;
#[path = "../http/load.rs"]
#[allow(dead_code)] // trellis-bench-http's workflows and helpers this bench does not use
mod load;
#[path = "../procfs.rs"]
#[allow(dead_code)] // the throughput bench's readers this bench does not use
mod procfs;
mod reruns;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use trellis_testkit::fake_model::{FakeModel, ModelReply};

use crate::load::{Figures, Outcome};
use crate::procfs::{CpuSample, CpuUsed};

/// Benchmark `core.ai.callPrompt` on the embedded host against the fake model provider.
#[derive(Debug, Parser)]
#[command(name = "trellis-bench-ai")]
struct Args {
    /// The trellis binary to start.
    #[arg(long, default_value = "target/release/trellis")]
    trellis: PathBuf,
    /// Concurrent clients for the chains.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Runs per chain.
    #[arg(long, default_value_t = 200)]
    runs: usize,
    /// Nodes per chain.
    #[arg(long, default_value_t = 10)]
    length: usize,
    /// Runs of one model call created at once.
    #[arg(long, default_value_t = 50)]
    burst: usize,
    /// How long the fake takes to answer in the bursts, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    latency_ms: u64,
    /// Tokens of each streamed answer.
    #[arg(long, default_value_t = 40)]
    stream_tokens: usize,
    /// The fake's pause before each streamed token after the first, in milliseconds.
    #[arg(long, default_value_t = 25)]
    token_delay_ms: u64,
    /// Benchmark an in-memory host instead of the durable data directory.
    #[arg(long)]
    memory: bool,
    /// Reruns of a finished `--length`-node model-call chain with the result cache, then as
    /// many without it (0: none).
    #[arg(long, default_value_t = 10)]
    reruns: usize,
    /// How long the fake takes to answer each call of the reruns, in milliseconds.
    #[arg(long, default_value_t = 200)]
    rerun_latency_ms: u64,
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn micros(used: Option<Duration>, count: usize) -> Option<f64> {
    used.map(|cpu| cpu.as_secs_f64() * 1e6 / count.max(1) as f64)
}

/// `used` divided by `count`, in µs, or `n/a` when `/proc` was not readable.
fn per(used: Option<Duration>, count: usize) -> String {
    micros(used, count).map_or_else(|| "n/a".to_owned(), |us| format!("{us:.1}"))
}

fn total(used: Option<Duration>) -> String {
    used.map_or_else(|| "n/a".to_owned(), |cpu| format!("{:.0} ms", ms(cpu)))
}

fn chain_row(report: &mut String, name: &str, length: usize, figures: &Figures, cpu: &CpuUsed) {
    let steps = figures.runs * length;
    let seconds = figures.wall.as_secs_f64().max(f64::EPSILON);
    let _ = writeln!(
        report,
        "{:<14} {:>5} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>16} {:>17}",
        name,
        figures.runs,
        figures.completed,
        figures.runs as f64 / seconds,
        steps as f64 / seconds,
        ms(figures.percentile(0.50)),
        ms(figures.percentile(0.99)),
        per(cpu.host, steps),
        per(cpu.bench, steps),
    );
}

fn burst_rows(report: &mut String, figures: &Figures, cpu: &CpuUsed) {
    let _ = writeln!(
        report,
        "  first create -> last create answered: {:.1} ms; -> last terminal: {:.1} ms; create -> terminal p50 {:.1} ms, max {:.1} ms; completed {}/{}",
        ms(figures.creates),
        ms(figures.wall),
        ms(figures.percentile(0.50)),
        ms(figures.percentile(1.0)),
        figures.completed,
        figures.runs
    );
    let _ = writeln!(
        report,
        "  host CPU {} ({} µs per run); bench CPU (clients + fake) {} ({} µs per run)",
        total(cpu.host),
        per(cpu.host, figures.runs),
        total(cpu.bench),
        per(cpu.bench, figures.runs)
    );
}

/// Reruns of one finished model-call chain, with and without the result cache.
async fn rerun_rows(report: &mut String, base: &str, pid: Option<u32>, model: &FakeModel, args: &Args) {
    model.set_latency(Duration::from_millis(args.rerun_latency_ms));
    let fail = |error: error::BenchError| -> ! { panic!("trellis-bench-ai: {error}") };
    let source = reruns::source(base, "bench-ai-chain").await.unwrap_or_else(|error| fail(error));
    let _ = writeln!(
        report,
        "reruns of one finished {}-node model-call chain, {} each, one at a time, the fake answering after {} ms",
        args.length, args.reruns, args.rerun_latency_ms
    );
    for (name, use_cache) in [("with the cache", true), ("without", false)] {
        let measured = reruns::measure(base, pid, model, &source, args.reruns, use_cache)
            .await
            .unwrap_or_else(|error| fail(error));
        let list = &measured.finished;
        let _ = writeln!(
            report,
            "  {name:<15} :rerun -> terminal min {:.1} / median {:.1} / max {:.1} ms; host CPU {} per rerun; model calls {}",
            ms(list[0]),
            ms(list[list.len() / 2]),
            ms(list[list.len() - 1]),
            per(measured.cpu.host, args.reruns).replace("n/a", "n/a ") + " µs",
            measured.model_calls
        );
    }
}

/// The `output.chunk` events of each run: (fewest, most, mean).
async fn chunks_per_call(base: &str, outcomes: &[Outcome]) -> (usize, usize, f64) {
    let http = reqwest::Client::new();
    let mut counts = Vec::with_capacity(outcomes.len());
    for outcome in outcomes {
        let count = calls::chunk_events(&http, base, &outcome.run_id)
            .await
            .unwrap_or_else(|error| panic!("trellis-bench-ai: {error}"));
        counts.push(count);
    }
    let mean = counts.iter().sum::<usize>() as f64 / counts.len().max(1) as f64;
    (counts.iter().copied().min().unwrap_or(0), counts.iter().copied().max().unwrap_or(0), mean)
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let model = FakeModel::start().await;

    let workdir = tempfile::tempdir().expect("temp dir");
    let providers = workdir.path().join("providers.json");
    calls::write_providers(&providers, &model.openai_base_url()).unwrap_or_else(|error| panic!("{error}"));
    let workflows = workdir.path().join("workflows");
    std::fs::create_dir_all(&workflows).expect("workflow dir");
    let definitions = [
        load::noop_chain("bench-noop-chain", args.length),
        calls::ai_chain("bench-ai-chain", args.length, false),
        calls::ai_chain("bench-ai-one", 1, false),
        calls::ai_chain("bench-ai-one-streamed", 1, true),
    ];
    for definition in &definitions {
        let id = definition["id"].as_str().unwrap_or_default();
        std::fs::write(workflows.join(format!("{id}.json")), definition.to_string()).expect("write workflow");
    }
    let extra = [std::ffi::OsString::from("--ai-providers"), providers.into_os_string()];
    let host = host::start_with(&args.trellis, &workflows, workdir.path(), args.memory, extra).await;
    let pid = host.pid();

    let mut report = String::new();
    let mode = if args.memory { "--memory" } else { "durable data dir (SQLite WAL, synchronous=FULL)" };
    let _ = writeln!(
        report,
        "trellis-bench-ai: {mode}, host with --ai-providers (one openai provider), fake model {} in the bench process",
        model.addr()
    );
    let _ = writeln!(report, "start-up to first discovery answer: {:.1} ms", ms(host.startup));
    let _ = writeln!(
        report,
        "chains of {} nodes, {} clients, {} runs each, fake latency 0 (CPU per step: utime+stime / steps)",
        args.length, args.clients, args.runs
    );
    let _ = writeln!(
        report,
        "{:<14} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>16} {:>17}",
        "scenario",
        "runs",
        "completed",
        "runs/s",
        "steps/s",
        "p50 ms",
        "p99 ms",
        "host CPU µs/step",
        "bench CPU µs/step"
    );
    let mut host_per_step = Vec::new();
    for (name, workflow) in [("noop chain", "bench-noop-chain"), ("ai chain", "bench-ai-chain")] {
        let before = CpuSample::now(pid);
        let figures = load::clients(&host.base, workflow, args.clients, args.runs).await;
        let cpu = CpuSample::now(pid).since(&before);
        chain_row(&mut report, name, args.length, &figures, &cpu);
        host_per_step.push(micros(cpu.host, figures.runs * args.length));
    }
    let calls_so_far = model.request_count();
    match (host_per_step[0], host_per_step[1]) {
        (Some(noop), Some(ai)) => {
            let _ = writeln!(
                report,
                "host overhead per model call (ai − noop host CPU per step): {:.1} µs ({calls_so_far} model calls answered)",
                ai - noop
            );
        }
        _ => {
            let _ = writeln!(report, "host overhead per model call: /proc not readable on this system");
        }
    }

    let latency = Duration::from_millis(args.latency_ms);
    model.set_latency(latency);
    let before = CpuSample::now(pid);
    let figures = Figures::of(load::burst_outcomes(&host.base, "bench-ai-one", args.burst).await);
    let cpu = CpuSample::now(pid).since(&before);
    let _ = writeln!(
        report,
        "burst: {} runs of one model call created at once, the fake answering after {} ms",
        figures.runs, args.latency_ms
    );
    burst_rows(&mut report, &figures, &cpu);

    let token_delay = Duration::from_millis(args.token_delay_ms);
    let tokens: Vec<String> =
        (0..args.stream_tokens).map(|i| if i == 0 { "tok".to_owned() } else { " tok".to_owned() }).collect();
    model.script(vec![ModelReply::tokens(tokens).token_delay(token_delay); args.burst]);
    let before = CpuSample::now(pid);
    let outcomes = load::burst_outcomes(&host.base, "bench-ai-one-streamed", args.burst).await;
    let cpu = CpuSample::now(pid).since(&before);
    let streaming = latency + token_delay * u32::try_from(args.stream_tokens.saturating_sub(1)).unwrap_or(u32::MAX);
    let _ = writeln!(
        report,
        "streamed burst: {} runs created at once, each answer {} tokens {} ms apart after {} ms (about {:.0} ms per call)",
        outcomes.len(),
        args.stream_tokens,
        args.token_delay_ms,
        args.latency_ms,
        ms(streaming)
    );
    let (fewest, most, mean) = chunks_per_call(&host.base, &outcomes).await;
    let figures = Figures::of(outcomes);
    burst_rows(&mut report, &figures, &cpu);
    let _ = writeln!(report, "  output.chunk events per call: {mean:.1} (min {fewest}, max {most})");
    if args.reruns > 0 {
        rerun_rows(&mut report, &host.base, pid, &model, &args).await;
    }
    let _ = writeln!(
        report,
        "model calls the fake answered: {} (scripted replies left unused: {})",
        model.request_count(),
        model.pending()
    );
    match pid.and_then(|pid| procfs::status_kib(pid, "VmHWM")) {
        Some(kib) => {
            let _ = writeln!(report, "peak RSS of the host: {:.1} MiB", kib as f64 / 1024.0);
        }
        None => {
            let _ = writeln!(report, "peak RSS of the host: not readable on this system");
        }
    }
    drop(host);
    print!("{report}");
}
