//! The `trellis` binary as a user meets it: its help texts, `hash-key`, and the log it writes
//! when its output is a file (no colour codes; one line per request with the route template;
//! one line per run transition; `--log-format json` parses line by line).

mod common;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const KEY: &str = "cli-key";
const GUARD: Duration = Duration::from_secs(10);

fn trellis() -> Command {
    Command::new(env!("CARGO_BIN_EXE_trellis"))
}

fn help(args: &[&str]) -> String {
    let output = trellis().args(args).output().expect("trellis runs");
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn top_level_help_has_no_markdown_backticks() {
    let text = help(&["--help"]);
    assert!(!text.contains('`'), "backticks in --help:\n{text}");
    assert!(text.contains("serve") && text.contains("hash-key"), "{text}");
}

#[test]
fn serve_help_explains_keys_and_the_new_settings() {
    let text = help(&["serve", "--help"]);
    for needle in ["TRELLIS_API_KEY", "development key", "TRELLIS_MAX_CONNECTIONS", "TRELLIS_LOG_FORMAT"] {
        assert!(text.contains(needle), "serve --help does not mention {needle}:\n{text}");
    }
    let keys = text.lines().skip_while(|line| !line.starts_with("API keys")).collect::<Vec<_>>().join("\n");
    assert!(!keys.is_empty() && !keys.contains('`'), "the keys section, free of markdown:\n{text}");
}

#[test]
fn hash_key_help_says_it_reads_standard_input() {
    let text = help(&["hash-key", "--help"]);
    assert!(text.contains("standard input"), "{text}");
    assert!(text.contains("sha256"), "names the keys-file field it fills:\n{text}");
}

#[test]
fn hash_key_from_a_pipe_prints_only_the_hash() {
    let mut child =
        trellis().arg("hash-key").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"my-secret\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let expected = hex::encode(trellis_http::ApiKey::hash_of("my-secret"));
    assert_eq!(String::from_utf8(output.stdout).unwrap(), format!("{expected}\n"));
    assert!(output.stderr.is_empty(), "no prompt when stdin is not a terminal: {:?}", output.stderr);
}

/// A `trellis serve` whose stdout and stderr are files.
struct Served {
    child: Child,
    base: String,
    out: PathBuf,
    err: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path, format: Option<&str>) -> Served {
    let out = dir.join("stdout.log");
    let err = dir.join("stderr.log");
    let mut command = trellis();
    command
        .args(["serve", "--memory", "--bind", "127.0.0.1:0"])
        .env("TRELLIS_API_KEY", KEY)
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .env_remove("TRELLIS_LOG_FORMAT")
        .env_remove("OPENWOP_FIXTURES_DIR")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    if let Some(format) = format {
        command.args(["--log-format", format]);
    }
    let child = command.spawn().expect("trellis starts");
    let started = Instant::now();
    let base = loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if let Some(line) = text.lines().find(|line| line.starts_with("trellis listening on ")) {
            break line.rsplit(' ').next().unwrap().to_owned();
        }
        assert!(started.elapsed() < GUARD, "no address line; stdout: {text}");
        std::thread::sleep(Duration::from_millis(20));
    };
    Served { child, base, out, err }
}

/// Drives a run to its end and touches an interrupt-token route; returns the run id.
async fn traffic(base: &str) -> String {
    let client = common::Client::new(base, KEY);
    let run_id = client.create(json!({"workflowId": "conformance-noop"})).await;
    client.wait_status(&run_id, "completed", GUARD).await;
    let _ = client.request("GET", "/v1/interrupts/secret-token-value", None).await;
    run_id
}

/// Both output files, once the transition and request lines are in (they are written as the
/// events happen; the wait only absorbs scheduling).
fn logs(served: &Served, ready: impl Fn(&str) -> bool) -> (Vec<u8>, String) {
    let started = Instant::now();
    loop {
        let mut bytes = std::fs::read(&served.out).unwrap();
        bytes.extend(std::fs::read(&served.err).unwrap());
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if ready(&text) || started.elapsed() > GUARD {
            return (bytes, text);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn the_text_log_in_a_file_has_no_colour_and_one_line_per_request_and_transition() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path(), None);
    let run_id = traffic(&served.base).await;
    let (bytes, text) = logs(&served, |text| text.contains("/v1/interrupts/{token}") && text.contains("to=completed"));
    assert!(!bytes.contains(&0x1b), "ANSI escape codes in a log file:\n{text}");
    let snapshot_line = text
        .lines()
        .find(|line| line.contains("route=/v1/runs/{run_id}") && line.contains("method=GET"))
        .unwrap_or_else(|| panic!("no request line with the route template:\n{text}"));
    assert!(snapshot_line.contains("status=200") && snapshot_line.contains("latency_ms="), "{snapshot_line}");
    assert!(text.lines().any(|line| line.contains("route=/v1/runs") && line.contains("status=201")), "{text}");
    assert!(text.contains("route=/v1/interrupts/{token}"), "{text}");
    assert!(!text.contains("secret-token-value"), "a token reached the log:\n{text}");
    let transitions: Vec<&str> = text.lines().filter(|line| line.contains(&run_id) && line.contains("to=")).collect();
    assert!(
        transitions.iter().any(|line| line.contains("workflow=conformance-noop") && line.contains("to=completed")),
        "no transition line to completed for {run_id}:\n{text}"
    );
}

#[tokio::test]
async fn the_json_log_parses_line_by_line() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve(dir.path(), Some("json"));
    let run_id = traffic(&served.base).await;
    let (_, _) = logs(&served, |text| text.contains("/v1/interrupts/{token}") && text.contains("\"completed\""));
    let text = std::fs::read_to_string(&served.err).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}")))
        .collect();
    assert!(
        lines.iter().any(|line| line["fields"]["route"] == "/v1/runs/{run_id}" && line["fields"]["status"] == 200),
        "{text}"
    );
    assert!(
        lines.iter().any(|line| line["fields"]["run_id"] == run_id.as_str() && line["fields"]["to"] == "completed"),
        "{text}"
    );
}
