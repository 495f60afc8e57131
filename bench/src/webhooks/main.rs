//! `trellis-bench-webhooks`: what webhook delivery costs the embedded host, in one session of
//! one host. Starts a loopback receiver in this process (`200` at once) and `trellis serve`
//! with `--http-allow-private-nets 127.0.0.1/32`, then drives a `--length`-node `core.noop`
//! chain with `--clients` clients for `--runs` runs three times:
//!
//! 1. with no subscription (the baseline: a step's cost without webhooks);
//! 2. with one subscription to `run.completed` (one delivery per run);
//! 3. with one subscription to every event (`*`: 2 + 2·length deliveries per run).
//!
//! For each: steps/s, create→terminal p50/p99, the host's CPU per step (utime+stime of
//! `/proc/<pid>/stat`), deliveries received, deliveries/s (first create to last delivery), and
//! delivery latency p50/p99 — the event's timestamp to the receiver having the body. Prints
//! figures; asserts nothing.

#[path = "../error.rs"]
mod error;
#[path = "../follow.rs"]
mod follow;
#[path = "../http/host.rs"]
mod host;
#[path = "../http/load.rs"]
#[allow(dead_code)] // the HTTP bench's chains and burst
mod load;
#[path = "../procfs.rs"]
#[allow(dead_code)] // the throughput bench's readers it does not use
mod procfs;

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use serde_json::json;
use trellis_testkit::http_server::{Reply, TestServer};

use crate::procfs::CpuSample;

/// Benchmark webhook delivery (and, with `--schedule-minutes`, real-minute schedules) on the
/// embedded host.
#[derive(Debug, Parser)]
#[command(name = "trellis-bench-webhooks")]
struct Args {
    /// The trellis binary to start.
    #[arg(long, default_value = "target/release/trellis")]
    trellis: PathBuf,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Runs per scenario.
    #[arg(long, default_value_t = 300)]
    runs: usize,
    /// Nodes per chain.
    #[arg(long, default_value_t = 10)]
    length: usize,
    /// Benchmark an in-memory host instead of the durable data directory.
    #[arg(long)]
    memory: bool,
    /// Instead: declare a `rate(1 minute)` schedule and watch it for this many minutes; prints
    /// each occurrence's lateness (its `run.started` after its `scheduledAt`) and whether any
    /// was missed or doubled.
    #[arg(long, default_value_t = 0)]
    schedule_minutes: u64,
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn millis_of(text: &str) -> Option<SystemTime> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    let nanos = u64::try_from(at.unix_timestamp_nanos()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos))
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let receiver = TestServer::start().await;
    let workdir = tempfile::tempdir().expect("temp dir");
    let workflows = workdir.path().join("workflows");
    std::fs::create_dir_all(&workflows).expect("workflow dir");
    let chain = load::noop_chain("bench-webhook-chain", args.length);
    std::fs::write(workflows.join("chain.json"), chain.to_string()).expect("write workflow");
    if args.schedule_minutes > 0 {
        let minutely = json!({"id": "bench-minutely", "name": "bench-minutely",
            "triggers": [{"id": "minute", "type": "schedule", "config": {"expression": "rate(1 minute)"}}],
            "nodes": [{"id": "n0", "typeId": "core.noop"}]});
        std::fs::write(workflows.join("minutely.json"), minutely.to_string()).expect("write workflow");
    }
    let host = host::start(&args.trellis, &workflows, workdir.path(), args.memory).await;
    if args.schedule_minutes > 0 {
        schedule_figures(&host, args.schedule_minutes).await;
        return;
    }
    let pid = host.pid();
    let http = reqwest::Client::new();
    let mode = if args.memory { "--memory" } else { "durable data dir (SQLite WAL, synchronous=FULL)" };
    println!("trellis-bench-webhooks: {mode}; receiver {} in the bench process (200 at once)", receiver.addr());
    println!("host start-up to first discovery answer: {:.1} ms", ms(host.startup));
    println!(
        "{}-node noop chains, {} clients, {} runs per scenario; CPU per step = host utime+stime / steps",
        args.length, args.clients, args.runs
    );
    println!(
        "{:<22} {:>9} {:>9} {:>9} {:>9} {:>18} {:>11} {:>13} {:>13} {:>16}",
        "subscriptions",
        "steps/s",
        "p50 ms",
        "p99 ms",
        "host µs/step",
        "deliveries",
        "deliv/s",
        "latency p50",
        "latency p99",
        "host µs/delivery"
    );
    let mut baseline_cpu_per_step = None;
    for (name, events) in
        [("none", None), ("1: run.completed", Some("run.completed")), ("1: every event (*)", Some("*"))]
    {
        let path = format!("/hook/{}", name.len());
        receiver.route(&path, vec![Reply::status(200)]);
        let mut webhook_id = None;
        if let Some(events) = events {
            let response = http
                .post(format!("{}/v1/webhooks", host.base))
                .bearer_auth(host::KEY)
                .json(&json!({"url": receiver.url(&path), "events": [events]}))
                .send()
                .await
                .expect("register");
            let body: serde_json::Value = response.json().await.expect("registration answer");
            webhook_id = body["webhookId"].as_str().map(str::to_owned);
            assert!(webhook_id.is_some(), "registration refused: {body}");
        }
        let per_run = match events {
            None => 0,
            Some("run.completed") => 1,
            Some(_) => 2 + 2 * args.length,
        };
        let started = Instant::now();
        let before = CpuSample::now(pid);
        let figures = load::clients(&host.base, "bench-webhook-chain", args.clients, args.runs).await;
        let expected = per_run * figures.runs;
        let deadline = Instant::now() + Duration::from_secs(120);
        while receiver.requests_to(&path).len() < expected && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let delivered_in = started.elapsed();
        let cpu = CpuSample::now(pid).since(&before);
        let seen = receiver.requests_to(&path);
        let mut ids: Vec<String> =
            seen.iter().filter_map(|request| request.header("x-openwop-delivery-id").map(str::to_owned)).collect();
        ids.sort_unstable();
        ids.dedup();
        let duplicates = seen.len() - ids.len();
        let mut latencies: Vec<f64> = seen
            .iter()
            .filter_map(|request| {
                let at = millis_of(request.json()["timestamp"].as_str()?)?;
                Some(request.received.duration_since(at).unwrap_or_default().as_secs_f64() * 1000.0)
            })
            .collect();
        latencies.sort_by(f64::total_cmp);
        let steps = figures.runs * args.length;
        let seconds = figures.wall.as_secs_f64().max(f64::EPSILON);
        let host_per_step = cpu.host.map(|used| used.as_secs_f64() * 1e6 / steps.max(1) as f64);
        if events.is_none() {
            baseline_cpu_per_step = host_per_step;
        }
        let per_delivery = match (cpu.host, baseline_cpu_per_step, seen.len()) {
            (Some(used), Some(base), n) if n > 0 => {
                let extra = used.as_secs_f64() * 1e6 - base * steps as f64;
                format!("{:.1}", extra / n as f64)
            }
            _ => "-".to_owned(),
        };
        println!(
            "{:<22} {:>9.1} {:>9.1} {:>9.1} {:>9} {:>18} {:>11} {:>13} {:>13} {:>16}",
            name,
            steps as f64 / seconds,
            ms(figures.percentile(0.50)),
            ms(figures.percentile(0.99)),
            host_per_step.map_or("n/a".to_owned(), |us| format!("{us:.1}")),
            format!("{}/{} ({duplicates} dup)", seen.len(), expected),
            if seen.is_empty() {
                "-".to_owned()
            } else {
                format!("{:.1}", seen.len() as f64 / delivered_in.as_secs_f64())
            },
            if latencies.is_empty() { "-".to_owned() } else { format!("{:.1} ms", percentile(&latencies, 0.50)) },
            if latencies.is_empty() { "-".to_owned() } else { format!("{:.1} ms", percentile(&latencies, 0.99)) },
            per_delivery,
        );
        if let Some(id) = webhook_id {
            let _ = http.delete(format!("{}/v1/webhooks/{id}", host.base)).bearer_auth(host::KEY).send().await;
        }
    }
    println!("latency: the event's timestamp (its commit) to the receiver holding the delivery's body");
    println!("host µs/delivery: the host's CPU above the no-subscription baseline, per delivery received");
    println!("dup: deliveries received more than once (by delivery id; at least once allows them)");
    drop(host);
}

/// Watches the `rate(1 minute)` schedule of `bench-minutely` for `minutes` minutes (plus 20 s).
async fn schedule_figures(host: &host::Host, minutes: u64) {
    println!("trellis-bench-webhooks --schedule-minutes {minutes}: rate(1 minute), embedded host ticking every second");
    tokio::time::sleep(Duration::from_secs(minutes * 60 + 20)).await;
    let http = reqwest::Client::new();
    let get = |path: String| {
        let http = http.clone();
        async move {
            let response = http.get(format!("{}{path}", host.base)).bearer_auth(host::KEY).send().await.expect("GET");
            response.json::<serde_json::Value>().await.expect("JSON")
        }
    };
    let runs = get("/v1/runs?workflowId=bench-minutely&limit=100".to_owned()).await;
    let mut occurrences = Vec::new();
    for run in runs["runs"].as_array().cloned().unwrap_or_default() {
        let run_id = run["runId"].as_str().unwrap_or_default();
        let events = get(format!("/v1/runs/{run_id}/events/poll?lastSequence=-1")).await;
        let started = &events["events"][0];
        let (Some(due), Some(at)) = (
            started["payload"]["trigger"]["scheduledAt"].as_str().and_then(millis_of),
            started["timestamp"].as_str().and_then(millis_of),
        ) else {
            continue;
        };
        occurrences.push((due, at.duration_since(due).unwrap_or_default().as_secs_f64() * 1000.0));
    }
    occurrences.sort_by_key(|(due, _)| *due);
    let mut lateness: Vec<f64> = occurrences.iter().map(|(_, late)| *late).collect();
    lateness.sort_by(f64::total_cmp);
    let gaps = occurrences
        .windows(2)
        .filter(|pair| pair[1].0.duration_since(pair[0].0).unwrap_or_default() != Duration::from_secs(60))
        .count();
    println!(
        "occurrences: {} (expected {minutes}); not one minute apart: {gaps}; lateness p50 {:.1} ms, max {:.1} ms",
        occurrences.len(),
        percentile(&lateness, 0.5),
        lateness.last().copied().unwrap_or(f64::NAN)
    );
}
