//! The kill -9 fault campaign: an embedded host (`trellis serve` on a data directory) under a
//! closed-loop create load is killed with SIGKILL — only the process this campaign started —
//! at evenly spaced points of the load, restarted on the same data directory each time, and
//! at the end every accepted run is checked end to end.
//!
//! Every create carries its own `Idempotency-Key` and is retried with the same key until it is
//! answered (a kill can take the answer away after the commit), so each key must end as
//! exactly one run. The verdict, per run: it exists (else *lost*), it completed with exactly
//! the event types its workflow gives, sequences `0..n` with no gap, one terminal event, last,
//! and no event id twice (else *malformed*); and per key: the answer did not change across
//! retries and the tenant holds no run that no key accounts for (else *duplicated*).
//!
//! The test suite runs it at CI size (`tests/fault_campaign.rs`); `trellis-bench campaign`
//! runs it at full size and prints the report.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::watch;

use crate::host::{ServeProcess, DELAY_EVENTS, MULTI_NODE_EVENTS};

/// The bearer key the campaign's host is started with.
const KEY: &str = "campaign-key";

/// What to run.
#[derive(Debug, Clone)]
pub struct CampaignConfig {
    /// The `trellis` binary.
    pub trellis: PathBuf,
    /// The data directory (empty; the campaign owns it).
    pub data_dir: PathBuf,
    /// SIGKILLs during the load.
    pub kills: usize,
    /// Runs to create (one idempotency key each).
    pub runs: usize,
    /// Concurrent clients.
    pub clients: usize,
    /// How long one create may keep being retried, and one run may take to finish after the
    /// last restart, before it is reported stuck or lost.
    pub patience: Duration,
}

/// The campaign's findings. [`CampaignReport::is_clean`] is the verdict.
#[derive(Debug, Default)]
pub struct CampaignReport {
    /// SIGKILLs delivered.
    pub kills: usize,
    /// Runs accepted (keys answered with a run id).
    pub accepted: usize,
    /// Runs that finished with a well-formed log.
    pub verified: usize,
    /// Keys never answered within the patience (each a `key: last answer` line).
    pub stuck: Vec<String>,
    /// Accepted runs missing or not finished after the last restart.
    pub lost: Vec<String>,
    /// Keys answered with two run ids, and runs no key accounts for.
    pub duplicated: Vec<String>,
    /// Runs whose log breaks a rule (gap, repeat, wrong types, second terminal event).
    pub malformed: Vec<String>,
    /// Create attempts that got no answer or a retryable one (the kills' footprint).
    pub retried_creates: usize,
    /// Milliseconds from SIGKILL to the restarted host's first answer, per kill.
    pub restart_ms: Vec<u128>,
    /// Wall time of the load phase and of the verification.
    pub load_time: Duration,
    /// Wall time of the verification phase.
    pub verify_time: Duration,
}

impl CampaignReport {
    /// No run stuck, lost, duplicated or malformed, and every requested kill delivered.
    pub fn is_clean(&self) -> bool {
        self.stuck.is_empty() && self.lost.is_empty() && self.duplicated.is_empty() && self.malformed.is_empty()
    }
}

impl fmt::Display for CampaignReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut restarts = self.restart_ms.clone();
        restarts.sort_unstable();
        let median = restarts.get(restarts.len() / 2).copied().unwrap_or(0);
        let max = restarts.last().copied().unwrap_or(0);
        writeln!(f, "kill -9 campaign")?;
        writeln!(f, "  kills delivered      {}", self.kills)?;
        writeln!(f, "  runs accepted        {}", self.accepted)?;
        writeln!(f, "  runs verified        {}", self.verified)?;
        writeln!(f, "  lost                 {}", self.lost.len())?;
        writeln!(f, "  duplicated           {}", self.duplicated.len())?;
        writeln!(f, "  malformed logs       {}", self.malformed.len())?;
        writeln!(f, "  stuck creates        {}", self.stuck.len())?;
        writeln!(f, "  retried creates      {}", self.retried_creates)?;
        writeln!(f, "  restart to answer    median {median} ms, max {max} ms")?;
        writeln!(
            f,
            "  load / verify        {:.1} s / {:.1} s",
            self.load_time.as_secs_f64(),
            self.verify_time.as_secs_f64()
        )?;
        for line in self.stuck.iter().chain(&self.lost).chain(&self.duplicated).chain(&self.malformed).take(20) {
            writeln!(f, "  ! {line}")?;
        }
        Ok(())
    }
}

/// The workflows of the load and the event types each run of them must log.
fn workload(index: usize) -> (Value, &'static [&'static str]) {
    if index % 4 == 3 {
        (json!({"workflowId": "conformance-delay", "inputs": {"delayMs": 25}}), DELAY_EVENTS)
    } else {
        (json!({"workflowId": "conformance-multi-node"}), MULTI_NODE_EVENTS)
    }
}

async fn spawn_host(trellis: &Path, data_dir: &Path) -> ServeProcess {
    crate::host::spawn(trellis, data_dir, KEY, None).await
}

struct Shared {
    http: reqwest::Client,
    base: watch::Receiver<String>,
    next_key: AtomicUsize,
    answered: AtomicUsize,
    retried: AtomicUsize,
    /// key index → (run id, expected types), and keys answered with a different id later.
    runs: Mutex<HashMap<usize, (String, &'static [&'static str])>>,
    changed_answers: Mutex<Vec<String>>,
    stuck: Mutex<Vec<String>>,
}

async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<&Value>,
    key: Option<&str>,
) -> Option<(u16, Value)> {
    let mut request = http.request(method, url).bearer_auth(KEY).timeout(Duration::from_secs(10));
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.ok()?;
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    Some((status, body))
}

/// One closed-loop client: takes the next key, creates until answered, repeats.
async fn client(shared: Arc<Shared>, runs: usize, patience: Duration) {
    loop {
        let index = shared.next_key.fetch_add(1, Ordering::SeqCst);
        if index >= runs {
            return;
        }
        let key = format!("campaign-{index}");
        let (body, expected) = workload(index);
        let started = Instant::now();
        let mut last = String::from("no answer");
        let run_id = loop {
            let base = shared.base.borrow().clone();
            match call(&shared.http, reqwest::Method::POST, format!("{base}/v1/runs"), Some(&body), Some(&key)).await {
                Some((200 | 201, answer)) if answer["runId"].is_string() => {
                    break Some(answer["runId"].as_str().unwrap_or_default().to_owned());
                }
                Some((status, answer)) => last = format!("{status} {answer}"),
                None => last = String::from("no answer"),
            }
            shared.retried.fetch_add(1, Ordering::Relaxed);
            if started.elapsed() > patience {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let Some(run_id) = run_id else {
            shared.stuck.lock().unwrap().push(format!("{key}: {last}"));
            shared.answered.fetch_add(1, Ordering::SeqCst);
            continue;
        };
        let mut recorded = shared.runs.lock().unwrap();
        if let Some((earlier, _)) = recorded.get(&index) {
            if *earlier != run_id {
                shared.changed_answers.lock().unwrap().push(format!("{key}: answered {earlier}, then {run_id}"));
            }
        } else {
            recorded.insert(index, (run_id, expected));
        }
        drop(recorded);
        shared.answered.fetch_add(1, Ordering::SeqCst);
    }
}

/// Runs the campaign and reports; it asserts nothing itself.
pub async fn run(config: &CampaignConfig) -> CampaignReport {
    let mut report = CampaignReport::default();
    let mut host = spawn_host(&config.trellis, &config.data_dir).await;
    let (base_tx, base_rx) = watch::channel(host.base.clone());
    let shared = Arc::new(Shared {
        http: reqwest::Client::new(),
        base: base_rx,
        next_key: AtomicUsize::new(0),
        answered: AtomicUsize::new(0),
        retried: AtomicUsize::new(0),
        runs: Mutex::new(HashMap::new()),
        changed_answers: Mutex::new(Vec::new()),
        stuck: Mutex::new(Vec::new()),
    });

    let load_started = Instant::now();
    let clients: Vec<_> = (0..config.clients.max(1))
        .map(|_| tokio::spawn(client(shared.clone(), config.runs, config.patience)))
        .collect();
    for kill in 1..=config.kills {
        let threshold = config.runs * kill / (config.kills + 1);
        while shared.answered.load(Ordering::SeqCst) < threshold {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let killed_at = Instant::now();
        host.child.start_kill().expect("SIGKILL delivered to the host this campaign started");
        host.child.wait().await.expect("the killed host is reaped");
        report.kills += 1;
        host = spawn_host(&config.trellis, &config.data_dir).await;
        wait_answering(&shared.http, &host.base).await;
        report.restart_ms.push(killed_at.elapsed().as_millis());
        let _ = base_tx.send(host.base.clone());
    }
    for client in clients {
        client.await.expect("a client task panicked");
    }
    report.load_time = load_started.elapsed();

    let verify_started = Instant::now();
    let runs = std::mem::take(&mut *shared.runs.lock().unwrap());
    report.accepted = runs.len();
    report.stuck = std::mem::take(&mut *shared.stuck.lock().unwrap());
    report.duplicated = std::mem::take(&mut *shared.changed_answers.lock().unwrap());
    report.retried_creates = shared.retried.load(Ordering::Relaxed);
    let mut keyed: Vec<_> = runs.into_iter().collect();
    keyed.sort_by_key(|(index, _)| *index);
    let known: HashSet<String> = keyed.iter().map(|(_, (run_id, _))| run_id.clone()).collect();
    for (index, (run_id, expected)) in &keyed {
        match verify_run(&shared.http, &host.base, run_id, expected, config.patience).await {
            Verdict::Ok => report.verified += 1,
            Verdict::Lost(why) => report.lost.push(format!("campaign-{index} {run_id}: {why}")),
            Verdict::Malformed(why) => report.malformed.push(format!("campaign-{index} {run_id}: {why}")),
        }
    }
    for run_id in list_runs(&shared.http, &host.base).await {
        if !known.contains(&run_id) {
            report.duplicated.push(format!("{run_id}: a run no idempotency key accounts for"));
        }
    }
    report.verify_time = verify_started.elapsed();
    host.child.start_kill().ok();
    host.child.wait().await.ok();
    report
}

async fn wait_answering(http: &reqwest::Client, base: &str) {
    let started = Instant::now();
    while call(http, reqwest::Method::GET, format!("{base}/.well-known/openwop"), None, None).await.is_none() {
        assert!(started.elapsed() < Duration::from_secs(30), "the restarted host never answered");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

enum Verdict {
    Ok,
    Lost(String),
    Malformed(String),
}

async fn verify_run(
    http: &reqwest::Client,
    base: &str,
    run_id: &str,
    expected: &[&str],
    patience: Duration,
) -> Verdict {
    let started = Instant::now();
    loop {
        match call(http, reqwest::Method::GET, format!("{base}/v1/runs/{run_id}"), None, None).await {
            Some((200, snapshot))
                if matches!(snapshot["status"].as_str(), Some("completed" | "failed" | "cancelled")) =>
            {
                if snapshot["status"] != "completed" {
                    return Verdict::Malformed(format!("ended {}: {}", snapshot["status"], snapshot["error"]));
                }
                break;
            }
            Some((404, _)) => return Verdict::Lost(String::from("404 after the last restart")),
            _ if started.elapsed() > patience => return Verdict::Lost(String::from("not finished in time")),
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    let Some((200, page)) = call(
        http,
        reqwest::Method::GET,
        format!("{base}/v1/runs/{run_id}/events/poll?lastSequence=-1&timeout=0"),
        None,
        None,
    )
    .await
    else {
        return Verdict::Lost(String::from("its events could not be read"));
    };
    let events = page["events"].as_array().cloned().unwrap_or_default();
    log_verdict(&events, expected)
}

/// The rules a finished run's log must keep.
fn log_verdict(events: &[Value], expected: &[&str]) -> Verdict {
    let mut ids = HashSet::new();
    for (position, event) in events.iter().enumerate() {
        if event["sequence"] != json!(position) {
            return Verdict::Malformed(format!("sequence {} at position {position}", event["sequence"]));
        }
        if let Some(id) = event["eventId"].as_str() {
            if !ids.insert(id.to_owned()) {
                return Verdict::Malformed(format!("event id {id} twice"));
            }
        }
    }
    let types: Vec<&str> = events.iter().map(|event| event["type"].as_str().unwrap_or("?")).collect();
    if types != expected {
        return Verdict::Malformed(format!("types {types:?}"));
    }
    Verdict::Ok
}

/// Every run id of the campaign's tenant, through the paged listing.
async fn list_runs(http: &reqwest::Client, base: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(cursor) => format!("{base}/v1/runs?limit=100&cursor={cursor}"),
            None => format!("{base}/v1/runs?limit=100"),
        };
        let Some((200, page)) = call(http, reqwest::Method::GET, url, None, None).await else {
            return ids;
        };
        for run in page["runs"].as_array().into_iter().flatten() {
            if let Some(id) = run["runId"].as_str() {
                ids.push(id.to_owned());
            }
        }
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return ids,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(types: &[&str]) -> Vec<Value> {
        types
            .iter()
            .enumerate()
            .map(|(sequence, kind)| json!({"sequence": sequence, "type": kind, "eventId": format!("e{sequence}")}))
            .collect()
    }

    #[test]
    fn a_well_formed_log_passes_and_each_rule_is_checked() {
        let expected = ["run.started", "node.started", "node.completed", "run.completed"];
        assert!(matches!(log_verdict(&log(&expected), &expected), Verdict::Ok));

        let mut gap = log(&expected);
        gap.remove(1);
        assert!(matches!(log_verdict(&gap, &expected), Verdict::Malformed(_)));

        let mut repeated = log(&expected);
        repeated[2]["eventId"] = json!("e1");
        assert!(matches!(log_verdict(&repeated, &expected), Verdict::Malformed(_)));

        let doubled = log(&["run.started", "node.started", "node.completed", "run.completed", "run.completed"]);
        assert!(matches!(log_verdict(&doubled, &expected), Verdict::Malformed(_)));
    }
}
