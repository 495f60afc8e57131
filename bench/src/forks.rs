//! Forks of a long run: one finished `chain-500` run (about 1,000 events), then `count`
//! replay forks of it one at a time — the latency of `POST :fork` (the `201`), the time until
//! the fork is terminal, and the host's CPU per fork (its whole re-execution: every step,
//! every divergence comparison with the source's log).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::driver::percentile;
use crate::error::{BenchError, Fallible};
use crate::follow::json_of;
use crate::host::Host;
use crate::procfs::CpuSample;
use crate::scenarios;

/// What `count` forks of one source measured.
pub(crate) struct Forks {
    /// Events in the source's log.
    pub(crate) source_events: u64,
    /// `POST :fork` until its `201`, sorted.
    pub(crate) accepted: Vec<Duration>,
    /// `POST :fork` until the fork is terminal, sorted.
    pub(crate) finished: Vec<Duration>,
    /// Host CPU over all forks.
    pub(crate) host_cpu: Option<Duration>,
}

/// Waits until `run_id` is terminal (long-polling its events); its last sequence.
async fn until_terminal(http: &reqwest::Client, host: &Host, run_id: &str) -> Fallible<u64> {
    let mut cursor = -1i64;
    loop {
        let url = format!("{}/v1/runs/{run_id}/events/poll?lastSequence={cursor}&timeout=5", host.base);
        let page = json_of(http.get(url), &host.key, "poll").await?;
        cursor = page["lastEventSeq"].as_i64().unwrap_or(cursor);
        if page["isComplete"] == true {
            return Ok(u64::try_from(cursor + 1).unwrap_or_default());
        }
    }
}

/// One `chain-500` source, then `count` replay forks of it.
pub(crate) async fn measure(host: &Host, count: usize) -> Fallible<Forks> {
    let http = reqwest::Client::new();
    let scenario = scenarios::named("chain-500")
        .ok_or_else(|| BenchError::new("workflow_missing", "no scenario chain-500".to_owned()))?;
    let source = crate::follow::follow_run(&http, &host.base, &host.key, scenario.id, None).await?;
    let source_events = until_terminal(&http, host, &source.run_id).await?;
    let url = format!("{}/v1/runs/{}:fork", host.base, source.run_id);
    let (mut accepted, mut finished) = (Vec::with_capacity(count), Vec::with_capacity(count));
    let before = CpuSample::now(host.pid);
    for _ in 0..count {
        let sent = Instant::now();
        let fork = json_of(http.post(&url).json(&json!({"mode": "replay"})), &host.key, "fork").await?;
        accepted.push(sent.elapsed());
        let fork_id = fork["runId"].as_str().unwrap_or_default().to_owned();
        let events = until_terminal(&http, host, &fork_id).await?;
        finished.push(sent.elapsed());
        if events != source_events {
            return Err(BenchError::new(
                "fork_diverged",
                format!("the fork has {events} events, the source {source_events}"),
            ));
        }
    }
    let host_cpu = CpuSample::now(host.pid).since(&before).host;
    accepted.sort();
    finished.sort();
    Ok(Forks { source_events, accepted, finished, host_cpu })
}

/// The table.
pub(crate) fn table(text: &mut String, forks: &Forks) {
    let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1000.0);
    let row = |name: &str, list: &[Duration]| {
        format!(
            "{name:<22} {:>9} {:>9} {:>9}",
            ms(percentile(list, 0.0)),
            ms(percentile(list, 0.5)),
            ms(percentile(list, 1.0))
        )
    };
    let _ = writeln!(text, "{} replay forks of a chain-500 run ({} events)", forks.accepted.len(), forks.source_events);
    let _ = writeln!(text, "{:<22} {:>9} {:>9} {:>9}", "ms", "min", "median", "max");
    let _ = writeln!(text, "{}", row("POST :fork → 201", &forks.accepted));
    let _ = writeln!(text, "{}", row("POST :fork → terminal", &forks.finished));
    let per_fork = forks.host_cpu.map(|cpu| cpu.as_secs_f64() * 1000.0 / forks.accepted.len().max(1) as f64);
    let _ = writeln!(
        text,
        "host CPU per fork: {}",
        per_fork.map_or_else(
            || "n/a".to_owned(),
            |ms| format!("{ms:.1} ms ({:.1} µs per event)", ms * 1000.0 / forks.source_events.max(1) as f64)
        )
    );
}

/// The JSON figures.
pub(crate) fn to_json(forks: &Forks) -> Value {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    json!({
        "sourceEvents": forks.source_events,
        "forks": forks.accepted.len(),
        "acceptedMs": {"min": ms(percentile(&forks.accepted, 0.0)), "median": ms(percentile(&forks.accepted, 0.5)), "max": ms(percentile(&forks.accepted, 1.0))},
        "terminalMs": {"min": ms(percentile(&forks.finished, 0.0)), "median": ms(percentile(&forks.finished, 0.5)), "max": ms(percentile(&forks.finished, 1.0))},
        "hostCpuMsPerFork": forks.host_cpu.map(|cpu| cpu.as_secs_f64() * 1000.0 / forks.accepted.len().max(1) as f64),
    })
}
