//! `trellis-bench --mode fan-out`: one run of each fan-out case of [`crate::fanout_shapes`]
//! (a `vendor.trellis.forEach` over 1,000 noop children, the same over 20 ms `core.delay`
//! children, a parallel `core.dispatch` of 1,000 noop workers; `maxConcurrency` 50), each on
//! a freshly started host, followed by a client to its end. Reports the wall time (create
//! sent → terminal page read), the host's CPU in total and per child, the peak concurrency
//! (from the parent's debug-mode log and from the children's own start/end times), and the
//! host's memory. Prints figures; asserts nothing.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{json, Value};

use crate::error::{BenchError, Fallible};
use crate::fanout_shapes::{self, Case};
use crate::follow::{follow_run, json_of};
use crate::host::Host;
use crate::procfs::{self, CpuSample};

/// What one run of a case measured.
pub(crate) struct CaseFigures {
    case: Case,
    status: String,
    wall: Duration,
    host_cpu: Option<Duration>,
    bench_cpu: Option<Duration>,
    children: usize,
    log_peak: Option<usize>,
    child_peak: Option<usize>,
    events: usize,
    rss_kib: Option<u64>,
    hwm_kib: Option<u64>,
    load1: Option<f64>,
}

/// Every event of `run_id` (debug mode: the `trellis.*` events included), read as JSON pages.
async fn debug_events(http: &reqwest::Client, host: &Host, run_id: &str) -> Fallible<Vec<Value>> {
    let (mut events, mut cursor) = (Vec::new(), -1i64);
    loop {
        let url = format!("{}/v1/runs/{run_id}/events?streamMode=debug&limit=10000&lastSequence={cursor}", host.base);
        let request = http.get(url).header(reqwest::header::ACCEPT, "application/json");
        let page = json_of(request, &host.key, "debug events").await?;
        let batch = page["events"].as_array().cloned().unwrap_or_default();
        let next = page["lastEventSeq"].as_i64().unwrap_or(cursor);
        let done = batch.is_empty() || page["isComplete"] == true || next <= cursor;
        events.extend(batch);
        if done {
            return Ok(events);
        }
        cursor = next;
    }
}

/// `(startedAt, endedAt)` of every child that has both, in milliseconds.
async fn child_intervals(http: &reqwest::Client, host: &Host, children: &[String]) -> Fallible<Vec<(u64, u64)>> {
    let mut intervals = Vec::with_capacity(children.len());
    for child in children {
        let run = json_of(http.get(format!("{}/v1/runs/{child}", host.base)), &host.key, "child snapshot").await?;
        let at = |field: &str| run[field].as_str().and_then(fanout_shapes::parse_rfc3339_ms);
        if let (Some(start), Some(end)) = (at("startedAt").or_else(|| at("createdAt")), at("endedAt")) {
            intervals.push((start, end));
        }
    }
    Ok(intervals)
}

/// One run of `case` on `host`, followed to its end, then its logs read.
pub(crate) async fn measure(host: &Host, case: Case) -> Fallible<CaseFigures> {
    let http = reqwest::Client::new();
    let load1 = procfs::load1();
    let before = CpuSample::now(host.pid);
    let followed = follow_run(&http, &host.base, &host.key, case.workflow, None).await?;
    let used = CpuSample::now(host.pid).since(&before);
    let wall = followed.terminal.duration_since(followed.sent);
    let events = debug_events(&http, host, &followed.run_id).await?;
    let log = fanout_shapes::log_figures(
        case.node,
        events.iter().map(|e| (e["type"].as_str().unwrap_or_default(), e["nodeId"].as_str(), &e["payload"])),
    );
    if log.children.is_empty() {
        return Err(BenchError::new(
            "run_not_completed",
            format!("run {} of {} started no child ({})", followed.run_id, case.workflow, followed.status),
        ));
    }
    let intervals = child_intervals(&http, host, &log.children).await?;
    Ok(CaseFigures {
        case,
        status: followed.status,
        wall,
        host_cpu: used.host,
        bench_cpu: used.bench,
        children: log.children.len(),
        log_peak: log.peak,
        child_peak: (!intervals.is_empty()).then(|| fanout_shapes::peak_overlap(&intervals)),
        events: log.events,
        rss_kib: host.pid.and_then(|pid| procfs::status_kib(pid, "VmRSS")),
        hwm_kib: host.pid.and_then(|pid| procfs::status_kib(pid, "VmHWM")),
        load1,
    })
}

fn ms(duration: Option<Duration>) -> Option<f64> {
    duration.map(|d| (d.as_secs_f64() * 1e4).round() / 10.0)
}

fn mib(kib: Option<u64>) -> Option<f64> {
    kib.map(|kib| (kib as f64 / 102.4).round() / 10.0)
}

fn shown(value: Option<f64>, unit: &str) -> String {
    value.map_or_else(|| "n/a".to_owned(), |value| format!("{value:.1}{unit}"))
}

fn count(value: Option<usize>) -> String {
    value.map_or_else(|| "n/a".to_owned(), |value| value.to_string())
}

/// The rows as a table.
pub(crate) fn table(out: &mut String, rows: &[CaseFigures]) {
    let _ = writeln!(
        out,
        "{:<24} {:<17} {:>8} {:>9} {:>10} {:>13} {:>9} {:>10} {:>8} {:>9} {:>9} {:>6}",
        "case",
        "child",
        "children",
        "wall ms",
        "host CPU",
        "CPU/child ms",
        "log peak",
        "child peak",
        "events",
        "RSS MiB",
        "HWM MiB",
        "load1"
    );
    for row in rows {
        let per_child = row.host_cpu.map(|cpu| cpu.as_secs_f64() * 1000.0 / row.children as f64);
        let _ = writeln!(
            out,
            "{:<24} {:<17} {:>8} {:>9.1} {:>10} {:>13} {:>9} {:>10} {:>8} {:>9} {:>9} {:>6}{}",
            row.case.name,
            row.case.child,
            row.children,
            row.wall.as_secs_f64() * 1000.0,
            shown(ms(row.host_cpu), " ms"),
            per_child.map_or_else(|| "n/a".to_owned(), |value| format!("{value:.2}")),
            count(row.log_peak),
            count(row.child_peak),
            row.events,
            shown(mib(row.rss_kib), ""),
            shown(mib(row.hwm_kib), ""),
            row.load1.map_or_else(|| "n/a".to_owned(), |load| format!("{load:.2}")),
            if row.status == "completed" { String::new() } else { format!("  (run {})", row.status) },
        );
    }
    let _ = writeln!(
        out,
        "wall: create sent → terminal page read; host CPU: utime+stime of the host over that span; log peak: most \
         children running after a per-child event of the parent's debug log (a dispatch logs no per-child end); \
         child peak: most child runs alive at one millisecond (their startedAt/endedAt); RSS/HWM: the host's \
         VmRSS/VmHWM after the run (one fresh host per case)"
    );
}

/// The rows as JSON.
pub(crate) fn to_json(rows: &[CaseFigures]) -> Value {
    let rows: Vec<Value> = rows
        .iter()
        .map(|row| {
            json!({
                "case": row.case.name,
                "workflowId": row.case.workflow,
                "child": row.case.child,
                "runStatus": row.status,
                "children": row.children,
                "maxConcurrency": fanout_shapes::WIDTH,
                "wallMs": ms(Some(row.wall)),
                "hostCpuMs": ms(row.host_cpu),
                "hostCpuPerChildMs": row.host_cpu.map(|cpu| cpu.as_secs_f64() * 1000.0 / row.children as f64),
                "benchCpuMs": ms(row.bench_cpu),
                "peakConcurrencyFromLog": row.log_peak,
                "peakConcurrencyFromChildren": row.child_peak,
                "parentEvents": row.events,
                "rssMiB": mib(row.rss_kib),
                "peakRssMiB": mib(row.hwm_kib),
                "load1AtStart": row.load1,
            })
        })
        .collect();
    Value::Array(rows)
}
