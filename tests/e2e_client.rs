//! The `trellis` client commands end to end: the real binary against a real embedded host
//! started by the test. The scenarios live in tests/common/client.rs as functions of a target
//! `{url, key}`, so a suite of the AWS stack can play the same ones; this file adds what only
//! makes sense here: the live view through a pseudo-terminal, the configuration precedence,
//! the development key file of `trellis serve`, and shell completions.

mod common;

use std::io::Read as _;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::client::{self, bare, cli, run_command, Target, GUARD};
use trellis::host::EmbeddedHost;

/// An in-process embedded host on its own runtime (the scenarios block on child processes).
struct Host {
    runtime: tokio::runtime::Runtime,
    host: Option<EmbeddedHost>,
    target: Target,
    dir: tempfile::TempDir,
}

impl Host {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let host = runtime.block_on(common::start(common::serve_args(None)));
        let target = Target::new(format!("http://{}", host.addr), common::KEY);
        Self { runtime, host: Some(host), target, dir: tempfile::tempdir().unwrap() }
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(host) = self.host.take() {
            self.runtime.block_on(host.stop());
        }
    }
}

#[test]
fn ping_reports_the_host_and_the_key_and_keeps_the_url_path() {
    let host = Host::start();
    client::ping(&host.target, host.dir());
}

#[test]
fn workflows_register_validate_list_and_show() {
    let host = Host::start();
    client::workflows(&host.target, host.dir());
}

#[test]
fn an_approval_run_through_start_list_show_interrupts_and_events() {
    let host = Host::start();
    client::approval_run(&host.target, host.dir());
}

#[test]
fn exit_codes_follow_the_final_status_and_errors_exit_3() {
    let host = Host::start();
    client::exit_codes(&host.target, host.dir());
}

#[test]
fn pause_resume_and_cancel() {
    let host = Host::start();
    client::pause_resume(&host.target, host.dir());
}

#[test]
fn answer_checks_the_resume_schema_before_sending() {
    let host = Host::start();
    client::answer_checks_the_schema(&host.target, host.dir());
}

#[test]
fn watch_in_line_mode_until_another_process_approves() {
    let host = Host::start();
    client::watch_lines(&host.target, host.dir());
}

#[test]
fn watch_follows_child_runs() {
    let host = Host::start();
    client::watch_children(&host.target, host.dir());
}

/// The live view on a pseudo-terminal: the node lines with their symbols, the approve command
/// while the interrupt is pending, the final status.
#[test]
fn watch_on_a_terminal_draws_the_live_view() {
    let host = Host::start();
    let (target, dir) = (&host.target, host.dir());
    let run_id = client::start(target, dir, "conformance-approval", &[]);
    let (mut pty, pts) = pty_process::blocking::open().expect("a pseudo-terminal");
    pty.resize(pty_process::Size::new(40, 200)).unwrap();
    let mut command = client::trellis(target, dir);
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
        assert!(started.elapsed() < GUARD, "the live view shows no approve command:\n{}", text());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(text().contains("⏸ gate  waiting-approval"), "{}", text());
    cli(target, dir, &["interrupts", "approve", &run_id, "gate"]).code(0);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
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

fn write(path: &Path, text: &str) -> String {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Flag > environment > config file; the default config location; a malformed file names
/// itself and the field.
#[test]
fn the_config_file_and_its_precedence() {
    let host = Host::start();
    let (url, key) = (&host.target.url, &host.target.key);
    let dir = host.dir();
    let config = write(&dir.join("trellis.json"), &format!(r#"{{"url": "{url}", "key": "{key}"}}"#));

    let mut command = bare(dir);
    command.env("TRELLIS_CONFIG", &config);
    let ran = run_command(command, &["ping"]).code(0);
    assert!(ran.stdout.contains(url.as_str()) && ran.stdout.contains("API key accepted"), "{}", ran.stdout);

    // The environment beats the file, the flag beats the environment.
    let mut command = bare(dir);
    command.env("TRELLIS_CONFIG", &config).env("TRELLIS_API_KEY", "wrong-key");
    run_command(command, &["ping"]).code(3);
    let mut command = bare(dir);
    command.env("TRELLIS_CONFIG", &config).env("TRELLIS_API_KEY", "wrong-key");
    run_command(command, &["ping", "--key", key]).code(0);
    let mut command = bare(dir);
    command.env("TRELLIS_CONFIG", &config).env("TRELLIS_URL", "http://127.0.0.1:1");
    run_command(command, &["ping"]).code(3);
    let mut command = bare(dir);
    command.env("TRELLIS_URL", "http://127.0.0.1:1");
    run_command(command, &["--config", &config, "ping", "--url", url]).code(0);

    // The default location: $XDG_CONFIG_HOME/trellis/config.json.
    write(&dir.join("config/trellis/config.json"), &format!(r#"{{"url": "{url}/", "key": "{key}"}}"#));
    let ran = run_command(bare(dir), &["runs", "list", "-o", "json"]).code(0);
    assert!(ran.json()["runs"].is_array(), "{}", ran.stdout);

    let malformed = write(&dir.join("bad.json"), r#"{"url": 5}"#);
    let mut command = bare(dir);
    command.env("TRELLIS_CONFIG", &malformed);
    let ran = run_command(command, &["ping"]).code(3);
    assert!(ran.stderr.contains("bad.json") && ran.stderr.contains("\"url\""), "{}", ran.stderr);
    let missing = dir.join("absent.json");
    run_command(bare(dir), &["ping", "--config", missing.to_str().unwrap()]).code(3);
}

/// In the directory where `trellis serve` runs (no key configured), the client finds the
/// development key it wrote; `TRELLIS_DATA_DIR` points elsewhere.
#[test]
fn the_development_key_file_is_the_last_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("serve.out");
    let mut serve = bare(dir.path());
    serve
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .env_remove("OPENWOP_FIXTURES_DIR")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null());
    let served = Served(serve.spawn().unwrap());
    let started = Instant::now();
    let url = loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if let Some(line) = text.lines().find(|line| line.starts_with("trellis listening on ")) {
            break line.rsplit(' ').next().unwrap().to_owned();
        }
        assert!(started.elapsed() < GUARD, "no address line: {text}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(dir.path().join("trellis-data/dev-api-key").exists());
    let mut command = bare(dir.path());
    command.env("TRELLIS_URL", &url);
    let ran = run_command(command, &["ping"]).code(0);
    assert!(ran.stdout.contains("API key accepted"), "{}", ran.stdout);

    let elsewhere = tempfile::tempdir().unwrap();
    let mut command = bare(elsewhere.path());
    command.env("TRELLIS_URL", &url).env("TRELLIS_DATA_DIR", dir.path().join("trellis-data"));
    run_command(command, &["workflows", "list"]).code(0);
    let mut command = bare(elsewhere.path());
    command.env("TRELLIS_URL", &url);
    let ran = run_command(command, &["workflows", "list"]).code(3);
    assert!(ran.stderr.starts_with("trellis: 401 "), "no key at all: {}", ran.stderr);
    drop(served);
}

/// Kills the `trellis serve` child when the test ends.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn completions_and_help() {
    let dir = tempfile::tempdir().unwrap();
    let ran = run_command(bare(dir.path()), &["completions", "bash"]).code(0);
    assert!(ran.stdout.contains("runs") && ran.stdout.contains("interrupts"), "{}", ran.stdout);
    run_command(bare(dir.path()), &["completions", "zsh"]).code(0);
    for args in
        [&["runs", "--help"][..], &["runs", "watch", "--help"], &["interrupts", "answer", "--help"], &["--version"]]
    {
        let ran = run_command(bare(dir.path()), args).code(0);
        assert!(!ran.stdout.is_empty(), "{args:?}");
    }
    let help = run_command(bare(dir.path()), &["--help"]).code(0).stdout;
    assert!(help.contains("TRELLIS_URL") && help.contains("Exit codes"), "{help}");
    run_command(bare(dir.path()), &["runs"]).code(3);
    run_command(bare(dir.path()), &["completions", "nosuchshell"]).code(3);
    // A connection error is exit 3 with the URL named, also after ping --wait retried.
    let mut command = bare(dir.path());
    command.env("TRELLIS_URL", "http://127.0.0.1:1");
    let ran = run_command(command, &["ping", "--wait", "1"]).code(3);
    assert!(ran.stderr.starts_with("trellis: cannot reach http://127.0.0.1:1/"), "{}", ran.stderr);
    let mut command = bare(dir.path());
    command.env("TRELLIS_URL", "http://127.0.0.1:1/v");
    let ran = run_command(command, &["ping"]).code(3);
    assert!(ran.stderr.contains("http://127.0.0.1:1/v/.well-known/openwop"), "{}", ran.stderr);
}

/// Every scenario against a host started elsewhere (e.g. `trellis-aws-local` at
/// `http://127.0.0.1:PORT/v`): `TRELLIS_CLIENT_TARGET_URL` and `TRELLIS_CLIENT_TARGET_KEY`
/// name it. Ignored by default; run with `-- --ignored` once they are set.
#[test]
#[ignore = "needs TRELLIS_CLIENT_TARGET_URL and TRELLIS_CLIENT_TARGET_KEY"]
fn every_scenario_against_an_external_host() {
    let url = std::env::var("TRELLIS_CLIENT_TARGET_URL").expect("TRELLIS_CLIENT_TARGET_URL");
    let key = std::env::var("TRELLIS_CLIENT_TARGET_KEY").expect("TRELLIS_CLIENT_TARGET_KEY");
    let dir = tempfile::tempdir().unwrap();
    client::all(&Target::new(url, key), dir.path());
}
