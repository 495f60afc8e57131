//! The `trellis` client commands end to end: the real binary against a real embedded host
//! started by the test. The scenarios live in tests/common/client.rs as functions of a target
//! `{url, key}`, so the AWS stack's suite (tests/e2e_client_aws.rs) plays the same ones; this
//! file adds what only makes sense here: HTTPS through a local TLS front (`--ca-cert`), the
//! configuration precedence, the development key file of `trellis serve` (also when `ping --wait`
//! started before the host), shell completions and usage errors, and a watch against a stub
//! host whose child run's stream is slow to answer.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::client::{self, bare, cli, run_command, Target, GUARD};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use trellis::host::EmbeddedHost;

/// An in-process embedded host on its own runtime (the scenarios block on child processes).
struct Host {
    runtime: tokio::runtime::Runtime,
    host: Option<EmbeddedHost>,
    addr: SocketAddr,
    target: Target,
    dir: tempfile::TempDir,
}

impl Host {
    fn start() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let host = runtime.block_on(common::start(common::serve_args(None)));
        let addr = host.addr;
        let target = Target::new(format!("http://{addr}"), common::KEY);
        Self { runtime, host: Some(host), addr, target, dir: tempfile::tempdir().unwrap() }
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

#[test]
fn watch_on_a_terminal_draws_the_live_view() {
    let host = Host::start();
    client::watch_terminal(&host.target, host.dir());
}

/// A certificate for the name `localhost` and its PKCS#8 key.
struct ServedCert {
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
}

/// A CA made here and a `localhost` leaf it signed: the leaf, and the CA certificate's PEM.
fn signed_by_a_private_ca() -> (ServedCert, String) {
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
    let leaf_key = KeyPair::generate().expect("leaf key");
    let leaf_params = CertificateParams::new(vec!["localhost".to_owned()]).expect("leaf params");
    let leaf = leaf_params.signed_by(&leaf_key, &ca, &ca_key).expect("leaf certificate");
    (ServedCert { chain: vec![leaf.der().clone()], key: pkcs8(&leaf_key) }, pem(ca.der()))
}

/// A self-signed `localhost` certificate (a CA one when `is_ca`, as `openssl req -x509` makes
/// by default): it, and its PEM.
fn self_signed(is_ca: bool) -> (ServedCert, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    if is_ca {
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    }
    let certificate = params.self_signed(&key).expect("certificate");
    (ServedCert { chain: vec![certificate.der().clone()], key: pkcs8(&key) }, pem(certificate.der()))
}

fn pkcs8(key: &KeyPair) -> rustls::pki_types::PrivateKeyDer<'static> {
    rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into())
}

fn pem(der: &[u8]) -> String {
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der);
    let lines: Vec<&str> = encoded.as_bytes().chunks(64).map(|line| std::str::from_utf8(line).unwrap()).collect();
    format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", lines.join("\n"))
}

/// A TLS front on 127.0.0.1 serving `served` that relays each connection's bytes to
/// `upstream` once the handshake is done, as a local TLS proxy would; its port.
fn tls_front(runtime: &tokio::runtime::Runtime, upstream: SocketAddr, served: ServedCert) -> u16 {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(served.chain, served.key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let port = listener.local_addr().unwrap().port();
    runtime.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends here.
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let Ok(mut plain) = tokio::net::TcpStream::connect(upstream).await else { return };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
    port
}

/// HTTPS: through a TLS front whose CA `--ca-cert` (or `TRELLIS_CA_CERT`) trusts, `ping` and
/// `runs start --watch` work; without it the certificate is refused (exit 3, named, with the
/// fix); a CA file with no certificate is an input error naming the file.
#[test]
fn https_through_a_tls_front_trusted_with_ca_cert() {
    let host = Host::start();
    let dir = host.dir();
    let (served, ca) = signed_by_a_private_ca();
    let port = tls_front(&host.runtime, host.addr, served);
    let ca_file = write(&dir.join("ca.pem"), &ca);
    let target = Target::new(format!("https://localhost:{port}"), common::KEY);

    let ran = cli(&target, dir, &["--ca-cert", &ca_file, "ping"]).code(0);
    assert!(ran.stdout.contains(&target.url) && ran.stdout.contains("API key accepted"), "{}", ran.stdout);
    let ran = cli(&target, dir, &["runs", "start", "conformance-noop", "--watch", "--ca-cert", &ca_file]).code(0);
    assert!(ran.stdout.lines().last().unwrap().ends_with("completed"), "{}", ran.stdout);
    let mut command = client::trellis(&target, dir);
    command.env("TRELLIS_CA_CERT", &ca_file);
    let listed = run_command(command, &["workflows", "list", "-o", "json"]).code(0).json();
    assert!(listed["workflows"].is_array(), "{listed}");

    let refused = cli(&target, dir, &["ping"]).code(3);
    assert!(refused.stderr.starts_with(&format!("trellis: cannot reach {}/", target.url)), "{}", refused.stderr);
    assert!(refused.stderr.contains("certificate") && refused.stderr.contains("--ca-cert"), "{}", refused.stderr);
    let empty = write(&dir.join("empty.pem"), "no certificate here\n");
    let ran = cli(&target, dir, &["ping", "--ca-cert", &empty]).code(3);
    assert!(ran.stderr.contains("empty.pem"), "{}", ran.stderr);
}

/// A self-signed proxy certificate given to `--ca-cert` works when it is not a CA
/// certificate; a CA one (openssl's default) is refused with the fix named.
#[test]
fn https_through_a_self_signed_front() {
    let host = Host::start();
    let dir = host.dir();
    for is_ca in [false, true] {
        let (served, pem) = self_signed(is_ca);
        let port = tls_front(&host.runtime, host.addr, served);
        let file = write(&dir.join(format!("self-signed-{is_ca}.pem")), &pem);
        let target = Target::new(format!("https://localhost:{port}"), common::KEY);
        let ran = cli(&target, dir, &["ping", "--ca-cert", &file]);
        if is_ca {
            let ran = ran.code(3);
            assert!(ran.stderr.contains("CaUsedAsEndEntity") && ran.stderr.contains("CA:FALSE"), "{}", ran.stderr);
        } else {
            assert!(ran.code(0).stdout.contains("API key accepted"));
        }
    }
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

/// Usage errors of the client commands exit 3 (a `--timeout` that is not a finite number of
/// seconds 0 or more, an `--until` that is no run status); `serve` and `hash-key` keep clap's 2.
#[test]
fn usage_errors_exit_3_but_serve_and_hash_key_keep_2() {
    let dir = tempfile::tempdir().unwrap();
    for timeout in ["inf", "1e20", "-1", "NaN", "soon"] {
        let flag = format!("--timeout={timeout}");
        let ran = run_command(bare(dir.path()), &["runs", "wait", "run-1", &flag]).code(3);
        assert!(ran.stderr.contains("--timeout"), "{timeout}: {}", ran.stderr);
    }
    let ran = run_command(bare(dir.path()), &["runs", "wait", "run-1", "--until", "complete"]).code(3);
    assert!(ran.stderr.contains("completed") && ran.stderr.contains("waiting-approval"), "{}", ran.stderr);
    let ran = run_command(bare(dir.path()), &["serve", "--no-such-flag"]).code(2);
    assert!(ran.stderr.contains("--no-such-flag"), "{}", ran.stderr);
    run_command(bare(dir.path()), &["--output", "json", "hash-key", "extra"]).code(2);
    let help = run_command(bare(dir.path()), &["--help"]).code(0).stdout;
    assert!(help.contains("serve and hash-key keep clap's exit 2"), "{help}");
}

/// `ping --wait` started before `trellis serve` (as the guide's `trellis serve &` then
/// `trellis ping --wait 10` may run): the development key the host writes meanwhile is found
/// once the host answers.
#[test]
fn ping_wait_finds_the_development_key_written_while_it_waited() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut ping = bare(dir.path());
    ping.env("TRELLIS_URL", format!("http://127.0.0.1:{port}"))
        .args(["ping", "--wait", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let ping = ping.spawn().unwrap();
    // Let the ping start (and find no key) first; it retries until the host answers.
    std::thread::sleep(Duration::from_millis(300));
    assert!(!dir.path().join("trellis-data/dev-api-key").exists());
    let mut serve = bare(dir.path());
    serve
        .args(["serve", "--bind", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .env_remove("OPENWOP_FIXTURES_DIR")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let served = Served(serve.spawn().unwrap());
    let output = ping.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("API key accepted"), "{stdout}");
    drop(served);
}

/// A stub host: a parent run whose whole stream (child dispatched, parent completed) comes at
/// once, and a child run whose stream answers only after a pause longer than any fixed drain
/// (as on a loaded machine). The watch still shows the child's lines: it reads each child to
/// its end.
fn stub_host(runtime: &tokio::runtime::Runtime) -> String {
    use axum::routing::get;
    use axum::Json;
    use serde_json::{json, Value};

    fn sse(run_id: &str, events: &[(&str, Option<&str>, Value)]) -> String {
        events
            .iter()
            .enumerate()
            .map(|(sequence, (kind, node, payload))| {
                let event = json!({"sequence": sequence, "type": kind, "runId": run_id, "nodeId": node,
                    "payload": payload, "timestamp": "2026-01-01T12:00:00.000Z"});
                format!("id: {sequence}\nevent: {kind}\ndata: {event}\n\n")
            })
            .collect()
    }
    let root = || async {
        sse(
            "run-root",
            &[
                ("run.started", None, json!({})),
                ("node.started", Some("call"), json!({})),
                ("node.dispatched", Some("call"), json!({"childRunId": "run-child"})),
                ("node.completed", Some("call"), json!({"durationMs": 5})),
                ("run.completed", None, json!({"durationMs": 9})),
            ],
        )
    };
    let child = || async {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        sse(
            "run-child",
            &[
                ("run.started", None, json!({})),
                ("node.started", Some("child-n1"), json!({})),
                ("node.completed", Some("child-n1"), json!({"durationMs": 1})),
                ("run.completed", None, json!({})),
            ],
        )
    };
    let router = axum::Router::new()
        .route(
            "/v1/runs/run-root",
            get(|| async { Json(json!({"runId": "run-root", "workflowId": "flow", "status": "running"})) }),
        )
        .route("/v1/runs/run-child", get(|| async { Json(json!({"runId": "run-child", "status": "completed"})) }))
        .route("/v1/workflows/flow", get(|| async { Json(json!({"id": "flow", "nodes": [{"id": "call"}]})) }))
        .route("/v1/runs/run-root/events", get(root))
        .route("/v1/runs/run-child/events", get(child));
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    runtime.spawn(async move { axum::serve(listener, router).await });
    url
}

/// Standard output that cannot be written (a full disk) is an error, exit 3, not a quiet 0.
#[test]
fn an_unwritable_standard_output_exits_3() {
    if !Path::new("/dev/full").exists() {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let target = Target::new(stub_host(&runtime), "k");
    for args in [&["runs", "show", "run-child"][..], &["completions", "bash"]] {
        let mut command = client::trellis(&target, dir.path());
        command.stdout(std::fs::File::create("/dev/full").unwrap());
        let ran = run_command(command, args).code(3);
        assert!(ran.stderr.contains("cannot write standard output"), "{args:?}: {}", ran.stderr);
    }
}

#[test]
fn watch_reads_a_slow_child_stream_to_its_end() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let target = Target::new(stub_host(&runtime), "k");
    let ran = cli(&target, dir.path(), &["runs", "watch", "run-root"]).code(0);
    for expected in ["node call/child-n1 completed", "child run-child of call completed", "run run-root completed"] {
        assert!(ran.stdout.contains(expected), "no {expected:?}:\n{}", ran.stdout);
    }
}
