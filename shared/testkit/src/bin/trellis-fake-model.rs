//! `trellis-fake-model`: the testkit's fake AI model provider as a standalone server, for
//! running the examples without a real provider or a network.
//!
//! ```text
//! cargo run -p trellis-testkit --bin trellis-fake-model -- [--port 8089] [--latency-ms N] [--require-key K]
//!     [--fixture FILE [--scenario NAME]]
//! ```
//!
//! It binds `127.0.0.1` only (port 8089 unless `--port`; `--port 0` picks a free one), prints
//! one line with the two base URLs and serves the default reply forever (Ctrl-C stops it):
//! the text `echo: <last user message>`, streamed or not, with usage counted in words. Set an
//! OpenAI-compatible provider's `baseUrl` to `http://127.0.0.1:8089/v1` and an Anthropic
//! provider's to `http://127.0.0.1:8089`. `--latency-ms` delays every answer (benchmarks);
//! `--require-key` answers requests without that key (`Authorization: Bearer` or
//! `x-api-key`) with a 401. `--fixture` serves the content-routed replies of one scenario of a
//! fixture file (`--scenario`, default `happy`; the pattern examples ship theirs), starting the
//! scenario again each time all its replies are used, so sequential runs of one example each
//! get the whole script. See `trellis_testkit::fake_model` for the scripting API tests use.

use std::process::ExitCode;
use std::time::Duration;

use trellis_testkit::fake_model::fixture::Fixture;
use trellis_testkit::fake_model::FakeModel;

const USAGE: &str =
    "usage: trellis-fake-model [--port 8089] [--latency-ms N] [--require-key K] [--fixture FILE [--scenario NAME]]";

/// The command line.
#[derive(Debug, PartialEq, Eq)]
struct Args {
    port: u16,
    latency_ms: u64,
    require_key: Option<String>,
    fixture: Option<std::path::PathBuf>,
    scenario: String,
}

/// Parses `--name value` and `--name=value` flags; `Err` carries the message to print.
fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args { port: 8089, latency_ms: 0, require_key: None, fixture: None, scenario: "happy".to_owned() };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Err(USAGE.to_owned());
        }
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
            None => (arg, None),
        };
        let Some(value) = inline.or_else(|| args.next()) else {
            return Err(format!("{name} needs a value\n{USAGE}"));
        };
        match name.as_str() {
            "--port" => parsed.port = value.parse().map_err(|_| format!("--port: not a port: {value}"))?,
            "--latency-ms" => {
                parsed.latency_ms = value.parse().map_err(|_| format!("--latency-ms: not a number: {value}"))?;
            }
            "--require-key" => parsed.require_key = Some(value),
            "--fixture" => parsed.fixture = Some(value.into()),
            "--scenario" => parsed.scenario = value,
            _ => return Err(format!("unknown argument {name}\n{USAGE}")),
        }
    }
    Ok(parsed)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let routes = match args.fixture.as_deref().map(|path| Fixture::load(path).and_then(|f| f.routes(&args.scenario))) {
        None => None,
        Some(Ok(routes)) => Some(routes),
        Some(Err(message)) => {
            eprintln!("trellis-fake-model: --fixture {message}");
            return ExitCode::from(2);
        }
    };
    let model = match FakeModel::bind(args.port).await {
        Ok(model) => model,
        Err(error) => {
            eprintln!("trellis-fake-model: cannot listen on 127.0.0.1:{}: {error}", args.port);
            return ExitCode::FAILURE;
        }
    };
    model.set_latency(Duration::from_millis(args.latency_ms));
    if let Some(key) = args.require_key {
        model.require_key(key);
    }
    if let Some(routes) = routes {
        println!("trellis-fake-model: serving scenario `{}` ({} routes)", args.scenario, routes.len());
        model.serve_routes(routes);
    }
    println!(
        "trellis-fake-model: OpenAI-compatible baseUrl {}  Anthropic baseUrl {}  (Ctrl-C stops)",
        model.openai_base_url(),
        model.anthropic_base_url()
    );
    if let Err(error) = tokio::signal::ctrl_c().await {
        eprintln!("trellis-fake-model: cannot wait for Ctrl-C: {error}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &[&str]) -> Result<Args, String> {
        parse(line.iter().map(|arg| (*arg).to_owned()))
    }

    #[test]
    fn flags_parse_in_both_spellings() {
        let defaults = Args { port: 8089, latency_ms: 0, require_key: None, fixture: None, scenario: "happy".into() };
        assert_eq!(args(&[]).unwrap(), defaults);
        assert_eq!(
            args(&["--port", "0", "--latency-ms=250", "--require-key", "sk-test-1", "--fixture", "f.json"]).unwrap(),
            Args {
                port: 0,
                latency_ms: 250,
                require_key: Some("sk-test-1".to_owned()),
                fixture: Some("f.json".into()),
                ..defaults
            }
        );
        assert!(args(&["--port", "x"]).is_err());
        assert!(args(&["--latency-ms"]).is_err());
        assert!(args(&["--verbose", "1"]).is_err());
    }
}
