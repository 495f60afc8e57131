//! The `trellis` client CLI's scenarios, each a function of a [`Target`] (a host's URL and
//! key, and how to pump it): the embedded suite (tests/e2e_client.rs) plays them against an
//! in-process host, and the AWS stack's suite (tests/e2e_client_aws.rs) plays the very same
//! ones against `trellis-aws-local` at `http://127.0.0.1:PORT/v`. Every command runs the real
//! binary.
//!
//! Waits are bounded by [`GUARD`]; nothing asserts on timing.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long any wait of a scenario may take at most.
pub const GUARD: Duration = Duration::from_secs(30);

/// A host the scenarios talk to.
pub struct Target {
    /// Its base URL (with a stage path for API Gateway).
    pub url: String,
    /// A key with every scope.
    pub key: String,
    /// Makes the host progress, called while a scenario waits (the embedded host needs
    /// nothing: `None`).
    pub pump: Option<Box<dyn Fn() + Send + Sync>>,
}

impl Target {
    /// A target needing no pump.
    pub fn new(url: impl Into<String>, key: impl Into<String>) -> Self {
        Self { url: url.into(), key: key.into(), pump: None }
    }

    fn pump(&self) {
        if let Some(pump) = &self.pump {
            pump();
        }
    }
}

/// `trellis` with no configuration from the machine: an empty home and config dirs, the
/// working directory an empty temp dir (no development key file), no TRELLIS_* variables.
pub fn bare(dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("TRELLIS_") || name == "NO_COLOR" {
            command.env_remove(&name);
        }
    }
    command.env("HOME", dir).env("XDG_CONFIG_HOME", dir.join("config")).current_dir(dir).stdin(Stdio::null());
    command
}

/// `trellis` aimed at `target` through TRELLIS_URL and TRELLIS_API_KEY.
pub fn trellis(target: &Target, dir: &Path) -> Command {
    let mut command = bare(dir);
    command.env("TRELLIS_URL", &target.url).env("TRELLIS_API_KEY", &target.key);
    command
}

/// What one run of the binary gave.
#[derive(Debug)]
pub struct Ran {
    /// The exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Ran {
    fn of(output: Output) -> Self {
        Self {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Asserts exit `code`; returns self.
    #[track_caller]
    pub fn code(self, code: i32) -> Self {
        assert_eq!(self.code, code, "exit code; stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        self
    }

    /// The standard output as one JSON document.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|error| panic!("not JSON ({error}):\n{}", self.stdout))
    }
}

/// Runs `command` with `args` to its end.
pub fn run_command(mut command: Command, args: &[&str]) -> Ran {
    Ran::of(command.args(args).output().expect("trellis runs"))
}

/// Runs `trellis ARGS` against `target`.
pub fn cli(target: &Target, dir: &Path, args: &[&str]) -> Ran {
    run_command(trellis(target, dir), args)
}

/// A unique suffix, so that scenarios can share a long-lived host.
pub fn unique() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// Starts `workflow` with `args`; the run id (from `--output json`).
pub fn start(target: &Target, dir: &Path, workflow: &str, args: &[&str]) -> String {
    let mut all = vec!["runs", "start", workflow, "-o", "json"];
    all.extend_from_slice(args);
    let started = cli(target, dir, &all).code(0).json();
    assert_eq!(started["workflowId"], workflow, "{started}");
    let run_id = started["runId"].as_str().expect("a runId").to_owned();
    // Links keep the base path of the request (the stage `/v` behind API Gateway, none on the
    // embedded host); the CLI itself never follows them.
    assert_eq!(started["statusUrl"], format!("{}/v1/runs/{run_id}", base_path(&target.url)), "{started}");
    run_id
}

/// The path of `url` (`/v` of `http://127.0.0.1:8080/v`), without a trailing `/`.
fn base_path(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.find('/').map_or("", |slash| rest[slash..].trim_end_matches('/'))
}

/// `runs wait RUN --until STATUS`, pumping the host, until the exit code is `code`.
pub fn wait_until(target: &Target, dir: &Path, run_id: &str, until: &str) -> Value {
    let started = Instant::now();
    loop {
        target.pump();
        let ran = cli(target, dir, &["runs", "wait", run_id, "--until", until, "--timeout", "2", "-o", "json"]);
        if ran.code != 4 {
            let snapshot = ran.json();
            assert_eq!(snapshot["status"], until, "{snapshot}");
            return snapshot;
        }
        assert!(started.elapsed() < GUARD, "run {run_id} never {until}: {}", ran.stderr);
    }
}

fn write(dir: &Path, name: &str, value: &Value) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    path
}

/// `ping` in both outputs; a wrong stage prefix fails with exit 3 and the envelope.
pub fn ping(target: &Target, dir: &Path) {
    let table = cli(target, dir, &["ping"]).code(0);
    assert!(table.stdout.contains(&target.url) && table.stdout.contains("OpenWOP 1.0"), "{}", table.stdout);
    assert!(table.stdout.contains("API key accepted"), "{}", table.stdout);
    let json = cli(target, dir, &["ping", "-o", "json"]).code(0).json();
    assert_eq!(json["url"], target.url.trim_end_matches('/'));
    assert!(json["protocolVersions"].as_array().unwrap().contains(&json!("1.0")), "{json}");
    assert_eq!(json["key"]["accepted"], true);
    assert!(json["host"].as_str().is_some_and(|name| !name.is_empty()), "{json}");

    let wrong = format!("{}/no-such-stage", target.url);
    let ran = cli(target, dir, &["ping", "--url", &wrong]).code(3);
    assert!(ran.stderr.starts_with("trellis: 40"), "the status and the envelope's error: {}", ran.stderr);
    // The embedded host answers 404 not_found; API Gateway (and the local stack) 403 forbidden.
    let stderr = ran.stderr.to_lowercase();
    assert!(stderr.contains("not_found") || stderr.contains("forbidden"), "{}", ran.stderr);

    let refused = cli(target, dir, &["ping", "--key", "not-a-key"]).code(3);
    assert!(refused.stdout.contains("API key refused"), "{}", refused.stdout);
}

/// `workflows register|validate|list|show` with a definition of a unique id.
pub fn workflows(target: &Target, dir: &Path) {
    let id = format!("cli-flow-{}", unique());
    let definition = json!({
        "id": id, "name": "CLI flow", "version": "1",
        "nodes": [
            {"id": "first", "typeId": "core.noop"},
            {"id": "second", "typeId": "core.noop"}
        ],
        "edges": [{"id": "first-second", "sourceNodeId": "first", "targetNodeId": "second"}]
    });
    let files = dir.join(format!("defs-{id}"));
    std::fs::create_dir_all(&files).unwrap();
    let file = write(&files, "flow.json", &definition);
    let file = file.to_str().unwrap();

    let valid = cli(target, dir, &["workflows", "validate", file]).code(0);
    assert_eq!(valid.stdout.trim(), format!("valid: {id}"));
    let invalid = write(dir, &format!("{id}-invalid.json"), &json!({"id": format!("{id}-bad"), "name": "x"}));
    let refused = cli(target, dir, &["workflows", "validate", invalid.to_str().unwrap()]).code(3);
    assert!(
        refused.stdout.contains("invalid: ") && refused.stdout.contains("400 validation_error"),
        "{}",
        refused.stdout
    );
    assert!(refused.stdout.contains("(rule: required)") && refused.stdout.contains("nodes"), "{}", refused.stdout);
    let json = cli(target, dir, &["workflows", "validate", file, "-o", "json"]).code(0).json();
    assert_eq!(json[0]["result"]["valid"], true);
    assert_eq!(json[0]["result"]["workflowId"], id.as_str());
    assert_eq!(json[0]["result"]["nodes"], 2);
    // Validation stored nothing.
    cli(target, dir, &["workflows", "show", &id]).code(3);

    let registered = cli(target, dir, &["workflows", "register", files.to_str().unwrap()]).code(0);
    assert_eq!(registered.stdout.trim(), format!("registered {id} (version 1)"));
    let again = cli(target, dir, &["workflows", "register", file, "-o", "json"]).code(0).json();
    assert_eq!(again[0]["result"]["workflowId"], id.as_str());
    assert_eq!(again[0]["result"]["version"], "1");

    let listed = cli(target, dir, &["workflows", "list", "-o", "json"]).code(0).json();
    let item = listed["workflows"].as_array().unwrap().iter().find(|item| item["workflowId"] == id.as_str());
    let item = item.unwrap_or_else(|| panic!("{id} not listed: {listed}"));
    assert_eq!((item["version"].as_str(), item["name"].as_str()), (Some("1"), Some("CLI flow")));
    let table = cli(target, dir, &["workflows", "list"]).code(0);
    let header = table.stdout.lines().next().unwrap();
    assert!(["ID", "VERSION", "NAME", "NODES"].iter().all(|column| header.contains(column)), "{header}");
    let row = table.stdout.lines().find(|line| line.split_whitespace().next() == Some(id.as_str())).unwrap();
    assert_eq!(row.split_whitespace().collect::<Vec<_>>(), [id.as_str(), "1", "CLI", "flow", "2"]);

    let shown = cli(target, dir, &["workflows", "show", &id, "-o", "json"]).code(0).json();
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["nodes"][1]["id"], "second");
    let table = cli(target, dir, &["workflows", "show", &id]).code(0);
    let first = table.stdout.lines().find(|line| line.starts_with("first")).unwrap();
    assert_eq!(first.split_whitespace().collect::<Vec<_>>(), ["first", "core.noop", "second"]);
    assert!(table.stdout.lines().any(|line| line.split_whitespace().collect::<Vec<_>>() == ["nodes", "2"]));

    let started = start(target, dir, &id, &[]);
    let done = cli(target, dir, &["runs", "wait", &started, "--timeout", "30"]).code(0);
    assert_eq!(done.stdout.trim(), format!("run {started} completed"));
}

/// A run with an approval: start with inputs, list, show, interrupts list/show (by run and
/// by token), approve, wait, and the event log in both outputs.
pub fn approval_run(target: &Target, dir: &Path) {
    let inputs = dir.join("inputs.json");
    std::fs::write(&inputs, r#"{"a": 1, "b": "from-file"}"#).unwrap();
    let inputs = inputs.to_str().unwrap();
    let key = format!("cli-{}", unique());
    let run_id = start(
        target,
        dir,
        "conformance-approval",
        &[
            "--inputs-file",
            inputs,
            "--input",
            "b=5",
            "--input",
            "c=text",
            "--input",
            r#"d={"x":true}"#,
            "--idempotency-key",
            &key,
        ],
    );
    // The same idempotency key starts the same run.
    assert_eq!(
        start(
            target,
            dir,
            "conformance-approval",
            &[
                "--idempotency-key",
                &key,
                "--inputs-file",
                inputs,
                "--input",
                "b=5",
                "--input",
                "c=text",
                "--input",
                r#"d={"x":true}"#
            ]
        ),
        run_id
    );
    let snapshot = wait_until(target, dir, &run_id, "waiting-approval");
    assert_eq!(snapshot["inputs"], json!({"a": 1, "b": 5, "c": "text", "d": {"x": true}}));

    let table = cli(target, dir, &["runs", "start", "conformance-noop"]).code(0);
    assert!(
        table.stdout.starts_with("started run") && table.stdout.trim().ends_with("(conformance-noop)"),
        "{}",
        table.stdout
    );

    let shown = cli(target, dir, &["runs", "show", &run_id, "-o", "json"]).code(0).json();
    assert_eq!((shown["runId"].as_str(), shown["status"].as_str()), (Some(run_id.as_str()), Some("waiting-approval")));
    assert_eq!(shown["interrupt"]["nodeId"], "gate");
    let table = cli(target, dir, &["runs", "show", &run_id]).code(0).stdout;
    let approve = format!("trellis interrupts approve {run_id} gate");
    assert!(table.contains("waiting-approval") && table.contains(&approve), "{table}");
    assert!(table.contains("conformance-approval (version 1.0)"), "{table}");

    let listed = cli(
        target,
        dir,
        &["runs", "list", "--workflow", "conformance-approval", "--status", "waiting-approval", "--all", "-o", "json"],
    )
    .code(0)
    .json();
    assert!(listed["runs"].as_array().unwrap().iter().any(|run| run["runId"] == run_id.as_str()), "{listed}");
    assert!(listed["runs"].as_array().unwrap().iter().all(|run| run["status"] == "waiting-approval"), "{listed}");
    let table = cli(target, dir, &["runs", "list", "--limit", "100"]).code(0).stdout;
    assert!(table.lines().next().unwrap().contains("RUN ID"), "{table}");
    let row = table.lines().find(|line| line.starts_with(&run_id)).unwrap_or_else(|| panic!("{table}"));
    assert_eq!(row.split_whitespace().nth(2), Some("waiting-approval"), "{row}");

    let pending = cli(target, dir, &["interrupts", "list", "--run", &run_id, "-o", "json"]).code(0).json();
    let items = pending["interrupts"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{pending}");
    let item = &items[0];
    assert_eq!((item["runId"].as_str(), item["nodeId"].as_str()), (Some(run_id.as_str()), Some("gate")));
    assert_eq!((item["kind"].as_str(), item["runStatus"].as_str()), (Some("approval"), Some("waiting-approval")));
    assert_eq!(item["workflowId"], "conformance-approval");
    let token = item["interruptToken"].as_str().expect("a token").to_owned();
    let table = cli(target, dir, &["interrupts", "list", "--run", &run_id]).code(0).stdout;
    let row = table.lines().find(|line| line.starts_with(&run_id)).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("gate") && row.contains("approval") && row.contains("Conformance approval"), "{row}");

    let by_run = cli(target, dir, &["interrupts", "show", &run_id, "gate", "-o", "json"]).code(0).json();
    assert_eq!((by_run["kind"].as_str(), by_run["nodeId"].as_str()), (Some("approval"), Some("gate")));
    let by_token = cli(target, dir, &["interrupts", "show", "--token", &token, "-o", "json"]).code(0).json();
    assert_eq!(by_token["kind"], "approval");
    assert_eq!(by_token["resumeSchema"]["required"], json!(["action"]));
    let table = cli(target, dir, &["interrupts", "show", &run_id, "gate"]).code(0).stdout;
    assert!(table.contains("resume schema") && table.contains(&approve), "{table}");
    cli(target, dir, &["interrupts", "show", &run_id, "elsewhere"]).code(3);

    let resolved = cli(target, dir, &["interrupts", "approve", "--token", &token, "--comment", "fine", "-o", "json"])
        .code(0)
        .json();
    assert_eq!(resolved["outcome"], "accept");
    let done = cli(target, dir, &["runs", "wait", &run_id, "--timeout", "30", "-o", "json"]).code(0).json();
    assert_eq!(done["status"], "completed");

    let log = cli(target, dir, &["runs", "events", &run_id, "-o", "json"]).code(0).stdout;
    let events: Vec<Value> =
        log.lines().map(|line| serde_json::from_str(line).expect("one JSON event per line")).collect();
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["sequence"], json!(index), "{log}");
    }
    assert_eq!(events.first().unwrap()["type"], "run.started");
    assert_eq!(events.last().unwrap()["type"], "run.completed");
    let received = events.iter().find(|event| event["type"] == "approval.received").expect("approval.received");
    assert_eq!(received["payload"]["action"], "accept");
    let table = cli(target, dir, &["runs", "events", &run_id]).code(0).stdout;
    let first = table.lines().next().unwrap().split_whitespace().collect::<Vec<_>>();
    assert_eq!((first[0], first[2]), ("0", "run.started"), "{table}");
    assert!(table.lines().any(|line| line.contains("interrupt.requested") && line.contains("gate")), "{table}");
    let after = cli(target, dir, &["runs", "events", &run_id, "--after", "2", "-o", "json"]).code(0).stdout;
    assert_eq!(after.lines().count(), events.len() - 3, "{after}");
    let followed = cli(target, dir, &["runs", "events", &run_id, "--follow", "-o", "json"]).code(0).stdout;
    assert_eq!(followed.lines().count(), events.len(), "{followed}");
}

/// Exit codes: completed 0, failed 1, cancelled 2, HTTP and usage errors 3, wait timeout 4.
pub fn exit_codes(target: &Target, dir: &Path) {
    let ran = cli(target, dir, &["runs", "start", "conformance-noop", "--watch"]).code(0);
    assert!(ran.stdout.lines().last().unwrap().ends_with("completed"), "{}", ran.stdout);
    let ran = cli(target, dir, &["runs", "start", "conformance-failure", "--watch"]).code(1);
    assert!(ran.stdout.contains("failed"), "{}", ran.stdout);
    let failed = start(target, dir, "conformance-failure", &[]);
    cli(target, dir, &["runs", "wait", &failed, "--timeout", "30"]).code(1);
    let shown = cli(target, dir, &["runs", "show", &failed]).code(0).stdout;
    assert!(shown.lines().any(|line| line.starts_with("error")), "{shown}");

    let slow = start(target, dir, "conformance-delay", &["--input", "delayMs=30000"]);
    let timed_out = cli(target, dir, &["runs", "wait", &slow, "--timeout", "0.5"]).code(4);
    assert!(timed_out.stderr.contains("still"), "{}", timed_out.stderr);
    let cancelled = cli(target, dir, &["runs", "cancel", &slow, "--reason", "cli test", "-o", "json"]).code(0).json();
    assert_eq!(cancelled["runId"], slow.as_str());
    cli(target, dir, &["runs", "wait", &slow, "--timeout", "30"]).code(2);
    cli(target, dir, &["runs", "watch", &slow]).code(2);

    let unknown = cli(target, dir, &["runs", "show", "run-does-not-exist"]).code(3);
    assert!(unknown.stderr.starts_with("trellis: 404 not_found: "), "{}", unknown.stderr);
    cli(target, dir, &["runs", "watch", "run-does-not-exist"]).code(3);
    let bad_flag = cli(target, dir, &["runs", "list", "--no-such-flag"]).code(3);
    assert!(bad_flag.stderr.contains("--no-such-flag"), "{}", bad_flag.stderr);
    cli(target, dir, &["runs", "start", "conformance-noop", "--input", "novalue"]).code(3);
    cli(target, dir, &["runs", "list", "--status", "no-such-status"]).code(3);
}

/// Pause and resume a long run, then cancel it.
pub fn pause_resume(target: &Target, dir: &Path) {
    let run_id = start(target, dir, "conformance-delay", &["--input", "delayMs=30000"]);
    wait_until(target, dir, &run_id, "running");
    let paused =
        cli(target, dir, &["runs", "pause", &run_id, "--immediate", "--reason", "cli", "-o", "json"]).code(0).json();
    assert_eq!(paused["runId"], run_id.as_str());
    wait_until(target, dir, &run_id, "paused");
    let resumed = cli(target, dir, &["runs", "resume", &run_id]).code(0).stdout;
    assert!(resumed.starts_with("resumed: "), "{resumed}");
    cli(target, dir, &["runs", "cancel", &run_id]).code(0);
    cli(target, dir, &["runs", "wait", &run_id, "--timeout", "30"]).code(2);
}

/// `interrupts answer`: a value the resume schema refuses is not sent (exit 3, the run still
/// waits); a good one resumes the run. `reject` ends an approval with its outcome.
pub fn answer_checks_the_schema(target: &Target, dir: &Path) {
    let run_id = start(target, dir, "conformance-clarification", &[]);
    wait_until(target, dir, &run_id, "waiting-input");
    let refused = cli(target, dir, &["interrupts", "answer", &run_id, "ask", "--value", r#"{"answers": 5}"#]).code(3);
    assert!(refused.stderr.contains("resume schema") && refused.stderr.contains("/answers"), "{}", refused.stderr);
    let bad_json = cli(target, dir, &["interrupts", "answer", &run_id, "ask", "--value", "{not json"]).code(3);
    assert!(bad_json.stderr.contains("not JSON"), "{}", bad_json.stderr);
    let still = cli(target, dir, &["runs", "show", &run_id, "-o", "json"]).code(0).json();
    assert_eq!(still["status"], "waiting-input", "nothing was sent: {still}");
    let answered =
        cli(target, dir, &["interrupts", "answer", &run_id, "ask", "--value", r#"{"answers": {"q1": "blue"}}"#])
            .code(0);
    assert!(answered.stdout.starts_with(&format!("resolved {run_id} at ask")), "{}", answered.stdout);
    let done = cli(target, dir, &["runs", "wait", &run_id, "--timeout", "30", "-o", "json"]).code(0).json();
    assert_eq!(done["status"], "completed");

    let run_id = start(target, dir, "conformance-approval", &[]);
    wait_until(target, dir, &run_id, "waiting-approval");
    cli(target, dir, &["interrupts", "answer", &run_id, "gate", "--set", "action=maybe"]).code(3);
    let rejected =
        cli(target, dir, &["interrupts", "reject", &run_id, "gate", "--reason", "no", "-o", "json"]).code(0).json();
    assert_eq!(rejected["outcome"], "reject");
}

/// Reads `child`'s standard output lines on a thread.
fn lines_of(child: &mut std::process::Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().expect("piped stdout");
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    receiver
}

/// `runs watch` in line mode (piped) while another process approves: the node lines, the
/// pending interrupt line naming the approve command, the final status, no escape codes.
pub fn watch_lines(target: &Target, dir: &Path) {
    let run_id = start(target, dir, "conformance-approval", &[]);
    let mut command = trellis(target, dir);
    let mut watcher =
        command.args(["runs", "watch", &run_id]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let lines = lines_of(&mut watcher);
    let mut seen = Vec::new();
    let approve = format!("trellis interrupts approve {run_id} gate");
    let started = Instant::now();
    while !seen.iter().any(|line: &String| line.contains(&approve)) {
        target.pump();
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => seen.push(line),
            Err(_) => assert!(started.elapsed() < GUARD, "no interrupt line: {seen:?}"),
        }
    }
    cli(target, dir, &["interrupts", "approve", &run_id, "gate"]).code(0);
    loop {
        target.pump();
        match lines.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => seen.push(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(_) => assert!(started.elapsed() < GUARD, "watch did not end: {seen:?}"),
        }
    }
    let status = watcher.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{seen:?}");
    let text = seen.join("\n");
    assert!(!text.contains('\u{1b}'), "escape codes in line mode:\n{text}");
    let bodies: Vec<&str> = seen.iter().map(|line| line.split_once(' ').map_or("", |(_, rest)| rest)).collect();
    let clock = seen[0].split(' ').next().unwrap();
    assert!(clock.len() == 12 && clock.as_bytes()[2] == b':' && clock.as_bytes()[8] == b'.', "{clock}");
    for expected in [
        format!("run {run_id} running"),
        "node gate started".to_owned(),
        "node gate waiting-approval".to_owned(),
        format!("interrupt gate approval pending — answer: {approve}"),
        "interrupt gate resolved (accept)".to_owned(),
        "node gate completed".to_owned(),
        format!("run {run_id} completed"),
    ] {
        assert!(bodies.contains(&expected.as_str()), "no line {expected:?} in:\n{text}");
    }
    assert_eq!(*bodies.last().unwrap(), format!("run {run_id} completed"));
}

/// `runs watch` of a parent run follows its child run, indented by node path.
pub fn watch_children(target: &Target, dir: &Path) {
    let run_id = start(target, dir, "conformance-subworkflow-parent", &[]);
    let ran = cli(target, dir, &["runs", "watch", &run_id]).code(0);
    for expected in ["node subwf-call started", "node subwf-call completed", "node subwf-call/child-n1 completed"] {
        assert!(ran.stdout.contains(expected), "no {expected:?}:\n{}", ran.stdout);
    }
    assert!(
        ran.stdout.lines().any(|line| line.contains("child run-") && line.ends_with("of subwf-call completed")),
        "{}",
        ran.stdout
    );
    let json = cli(target, dir, &["runs", "watch", &run_id, "-o", "json"]).code(0).stdout;
    assert!(json.lines().all(|line| serde_json::from_str::<Value>(line).is_ok()), "{json}");
}

/// The live view on a pseudo-terminal: the node lines with their symbols, the approve command
/// while the interrupt is pending, the final status.
pub fn watch_terminal(target: &Target, dir: &Path) {
    let run_id = start(target, dir, "conformance-approval", &[]);
    let (mut pty, pts) = pty_process::blocking::open().expect("a pseudo-terminal");
    pty.resize(pty_process::Size::new(40, 200)).unwrap();
    let mut command = trellis(target, dir);
    command.args(["runs", "watch", &run_id]);
    let mut child: Child = pty_process::blocking::Command::from(command).spawn(pts).expect("trellis on the pty");
    let screen = Arc::new(Mutex::new(Vec::new()));
    let sink = screen.clone();
    let reader = std::thread::spawn(move || {
        let mut buffer = [0u8; 4096];
        // Reading fails (EIO) once the child has exited and closed its side.
        while let Ok(count @ 1..) = pty.read(&mut buffer) {
            sink.lock().unwrap().extend_from_slice(&buffer[..count]);
        }
    });
    let approve = format!("trellis interrupts approve {run_id} gate");
    let text = || String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
    let started = Instant::now();
    while !text().contains(&approve) {
        target.pump();
        assert!(started.elapsed() < GUARD, "the live view shows no approve command:\n{}", text());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(text().contains("⏸ gate  waiting-approval"), "{}", text());
    cli(target, dir, &["interrupts", "approve", &run_id, "gate"]).code(0);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        target.pump();
        assert!(started.elapsed() < GUARD, "watch did not end:\n{}", text());
        std::thread::sleep(Duration::from_millis(50));
    };
    reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "{}", text());
    let screen = text();
    assert!(screen.contains('\u{1b}'), "a terminal gets the live (redrawn) view:\n{screen}");
    assert!(screen.contains("✓ gate  completed"), "{screen}");
    assert!(screen.contains("1/1 nodes"), "{screen}");
    assert!(screen.contains(&format!("run {run_id} completed")), "{screen}");
}

/// Every scenario, in turn.
pub fn all(target: &Target, dir: &Path) {
    ping(target, dir);
    workflows(target, dir);
    approval_run(target, dir);
    exit_codes(target, dir);
    pause_resume(target, dir);
    answer_checks_the_schema(target, dir);
    watch_lines(target, dir);
    watch_terminal(target, dir);
    watch_children(target, dir);
}
