//! The report: one table per mode for a person, or one JSON document (`--json`) for notes
//! and scripts. CPU figures are the host process's own (utime + stime from `/proc`, ±10 ms
//! per window), so they compare across runs on a busy machine where wall-clock figures do
//! not.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{json, Value};

use crate::driver::Measured;
use crate::rss::{Memory, Parked};
use crate::snapshots::Reads;

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// `used` per `count`, in µs.
fn per_us(used: Option<Duration>, count: usize) -> Option<f64> {
    used.map(|cpu| cpu.as_secs_f64() * 1e6 / count.max(1) as f64)
}

fn cell(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.decimals$}"))
}

fn mib(kib: Option<u64>) -> Option<f64> {
    kib.map(|kib| kib as f64 / 1024.0)
}

fn round(value: Option<f64>, decimals: i32) -> Value {
    let scale = 10f64.powi(decimals);
    value.map_or(Value::Null, |v| json!((v * scale).round() / scale))
}

/// The throughput table.
pub(crate) fn throughput_table(out: &mut String, rows: &[Measured]) {
    let _ = writeln!(
        out,
        "{:<11} {:>5} {:>8} {:>9} {:>8} {:>8} {:>8} {:>11} {:>12} {:>10} {:>12} {:>6}",
        "scenario",
        "runs",
        "runs/s",
        "steps/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "host ms/run",
        "host µs/step",
        "host cores",
        "bench µs/step",
        "load1"
    );
    for row in rows {
        let seconds = row.wall.as_secs_f64().max(f64::EPSILON);
        let _ = writeln!(
            out,
            "{:<11} {:>5} {:>8.1} {:>9.0} {:>8.2} {:>8.2} {:>8.2} {:>11} {:>12} {:>10} {:>12} {:>6}",
            row.name,
            row.runs,
            row.runs as f64 / seconds,
            row.steps() as f64 / seconds,
            ms(row.percentile(0.50)),
            ms(row.percentile(0.95)),
            ms(row.percentile(0.99)),
            cell(per_us(row.cpu.host, row.runs).map(|us| us / 1000.0), 3),
            cell(per_us(row.cpu.host, row.steps()), 1),
            cell(row.cpu.host.map(|cpu| cpu.as_secs_f64() / seconds), 2),
            cell(per_us(row.cpu.bench, row.steps()), 1),
            cell(row.load.1, 2),
        );
    }
}

/// The throughput rows as JSON.
pub(crate) fn throughput_json(rows: &[Measured]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|row| {
            let seconds = row.wall.as_secs_f64().max(f64::EPSILON);
            json!({
                "scenario": row.name,
                "nodes": row.nodes,
                "runs": row.runs,
                "steps": row.steps(),
                "wallMs": round(Some(ms(row.wall)), 1),
                "runsPerSecond": round(Some(row.runs as f64 / seconds), 2),
                "stepsPerSecond": round(Some(row.steps() as f64 / seconds), 1),
                "p50Ms": round(Some(ms(row.percentile(0.50))), 3),
                "p95Ms": round(Some(ms(row.percentile(0.95))), 3),
                "p99Ms": round(Some(ms(row.percentile(0.99))), 3),
                "hostCpuMs": round(row.cpu.host.map(ms), 0),
                "hostCpuUsPerRun": round(per_us(row.cpu.host, row.runs), 1),
                "hostCpuUsPerStep": round(per_us(row.cpu.host, row.steps()), 2),
                "benchCpuUsPerStep": round(per_us(row.cpu.bench, row.steps()), 2),
                "load1Before": round(row.load.0, 2),
                "load1After": round(row.load.1, 2),
            })
        })
        .collect();
    Value::Array(rows)
}

/// The snapshot-read table, with the long run's cost per read against the short one's.
pub(crate) fn snapshots_table(out: &mut String, rows: &[Reads]) {
    let _ = writeln!(
        out,
        "{:<11} {:>6} {:>9} {:>9} {:>8} {:>8} {:>12} {:>13} {:>6}",
        "snapshot of", "reads", "bytes", "reads/s", "p50 ms", "p99 ms", "host µs/read", "bench µs/read", "load1"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "{:<11} {:>6} {:>9} {:>9.0} {:>8.3} {:>8.3} {:>12} {:>13} {:>6}",
            row.name,
            row.reads,
            row.bytes,
            row.reads as f64 / row.wall.as_secs_f64().max(f64::EPSILON),
            ms(row.percentile(0.50)),
            ms(row.percentile(0.99)),
            cell(per_us(row.cpu.host, row.reads), 1),
            cell(per_us(row.cpu.bench, row.reads), 1),
            cell(row.load, 2),
        );
    }
    let _ = writeln!(out, "host CPU per read, chain-500 / chain-10: {}", cell(read_ratio(rows), 2));
}

fn read_ratio(rows: &[Reads]) -> Option<f64> {
    let per = |name: &str| rows.iter().find(|row| row.name == name).and_then(|row| per_us(row.cpu.host, row.reads));
    let (short, long) = (per("chain-10")?, per("chain-500")?);
    (short > 0.0).then(|| long / short)
}

/// The snapshot reads as JSON.
pub(crate) fn snapshots_json(rows: &[Reads]) -> Value {
    let reads: Vec<Value> = rows
        .iter()
        .map(|row| {
            json!({
                "run": row.name,
                "reads": row.reads,
                "bytes": row.bytes,
                "wallMs": round(Some(ms(row.wall)), 1),
                "p50Ms": round(Some(ms(row.percentile(0.50))), 3),
                "p99Ms": round(Some(ms(row.percentile(0.99))), 3),
                "hostCpuMs": round(row.cpu.host.map(ms), 0),
                "hostCpuUsPerRead": round(per_us(row.cpu.host, row.reads), 2),
                "benchCpuUsPerRead": round(per_us(row.cpu.bench, row.reads), 2),
                "load1": round(row.load, 2),
            })
        })
        .collect();
    json!({"reads": reads, "hostCpuRatioChain500ToChain10": round(read_ratio(rows), 3)})
}

fn memory_json(memory: &Memory) -> Value {
    json!({"vmRssMiB": round(mib(memory.rss_kib), 1), "vmHwmMiB": round(mib(memory.hwm_kib), 1)})
}

/// The memory figures.
pub(crate) fn rss_table(out: &mut String, parked: &Parked) {
    let _ = writeln!(out, "{:<42} {:>10} {:>10}", "host memory", "VmRSS MiB", "VmHWM MiB");
    let rows = [
        ("started, idle".to_owned(), &parked.idle),
        (format!("{} runs parked at an approval gate", parked.parked), &parked.with_runs),
        (format!("  + {} SSE streams open ({} still open)", parked.streams, parked.open), &parked.with_streams),
    ];
    for (label, memory) in rows {
        let _ =
            writeln!(out, "{:<42} {:>10} {:>10}", label, cell(mib(memory.rss_kib), 1), cell(mib(memory.hwm_kib), 1));
    }
    let _ = writeln!(
        out,
        "host CPU with the streams open and quiet: {} ms over {:.1} s; load1 {}",
        cell(parked.quiet_cpu.host.map(ms), 0),
        parked.quiet.as_secs_f64(),
        cell(parked.load, 2)
    );
}

/// The memory figures as JSON.
pub(crate) fn rss_json(parked: &Parked) -> Value {
    json!({
        "parkedRuns": parked.parked,
        "streams": parked.streams,
        "streamsOpenAtRead": parked.open,
        "idle": memory_json(&parked.idle),
        "withParkedRuns": memory_json(&parked.with_runs),
        "withStreams": memory_json(&parked.with_streams),
        "quietHostCpuMs": round(parked.quiet_cpu.host.map(ms), 0),
        "quietSeconds": round(Some(parked.quiet.as_secs_f64()), 1),
        "load1": round(parked.load, 2),
    })
}
