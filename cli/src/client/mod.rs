//! The client commands: `ping`, `workflows …`, `runs …`, `interrupts …`, `webhooks …`,
//! `triggers …`, `schedules …` and `completions`,
//! talking to any Trellis host over HTTP ([`http::Api`]) at the URL and with the key
//! [`config::resolve`] finds. Each ends with an [`exit::Exit`] code; every error is one
//! message on standard error and exit 3.

pub mod config;
pub mod events;
pub mod exit;
pub mod http;
pub mod integrations;
pub mod interrupts;
pub mod output;
pub mod runs;
pub mod watch;
pub mod workflows;

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::args::{Command, GlobalArgs};
use exit::{ClientError, Exit};
use http::Api;
use output::{print_json, say, Out};

/// How long `ping --wait` pauses between tries.
const PING_RETRY: Duration = Duration::from_millis(200);

/// Runs a client command (`serve` and `hash-key` are not client commands: [`Exit::Error`]).
pub async fn run(global: &GlobalArgs, command: &Command) -> Exit {
    let color = !global.no_color && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    let out = Out { format: global.output, color };
    match dispatch(global, out, command).await {
        Ok(exit) => exit,
        Err(error) => {
            error.report();
            Exit::Error
        }
    }
}

async fn dispatch(global: &GlobalArgs, out: Out, command: &Command) -> Result<Exit, ClientError> {
    if let Command::Completions { shell } = command {
        let mut cli = <crate::args::Cli as clap::CommandFactory>::command();
        let mut script = Vec::new();
        clap_complete::generate(*shell, &mut cli, "trellis", &mut script);
        say!("{}", String::from_utf8_lossy(&script).trim_end());
        return Ok(Exit::Success);
    }
    let target = config::resolve(global)?;
    let api = Api::new(&target)?;
    match command {
        Command::Ping { wait } => ping(&api, out, *wait).await.map(|()| Exit::Success),
        Command::Workflows(command) => workflows::run(&api, out, command).await.map(|()| Exit::Success),
        Command::Runs(command) => runs::run(&api, out, command).await,
        Command::Interrupts(command) => interrupts::run(&api, out, command).await.map(|()| Exit::Success),
        Command::Webhooks(command) => integrations::webhooks(&api, out, command).await.map(|()| Exit::Success),
        Command::Triggers(command) => integrations::triggers(&api, out, command).await.map(|()| Exit::Success),
        Command::Schedules(command) => integrations::schedules(&api, out, command).await.map(|()| Exit::Success),
        Command::Serve { .. } | Command::HashKey | Command::Completions { .. } => Ok(Exit::Error),
    }
}

/// `ping`: the discovery document (retried up to `wait` seconds), then the key's check.
async fn ping(api: &Api, out: Out, wait: u64) -> Result<(), ClientError> {
    let deadline = Instant::now() + Duration::from_secs(wait);
    let discovery = loop {
        match api.get_anonymous("/.well-known/openwop").await {
            Ok(document) => break document,
            Err(error) if Instant::now() >= deadline => return Err(error),
            Err(_) => tokio::time::sleep(PING_RETRY).await,
        }
    };
    // A host started just before (`trellis serve &`) writes its development key file while
    // this command waits: read it again now that the host answers.
    let api = match config::dev_key().filter(|_| !api.has_key()) {
        Some(key) => api.clone().with_key(key),
        None => api.clone(),
    };
    let key = if api.has_key() {
        match api.get("/v1/workflows?limit=1").await {
            Ok(_) => Some(Ok(())),
            Err(ClientError::Http { status: 401 | 403, error, message, .. }) => {
                Some(Err(format!("{error}: {message}")))
            }
            Err(other) => return Err(other),
        }
    } else {
        None
    };
    let versions = protocol_versions(&discovery);
    let name = host_name(&discovery);
    if out.json() {
        let key = match &key {
            None => Value::Null,
            Some(Ok(())) => serde_json::json!({ "accepted": true }),
            Some(Err(reason)) => serde_json::json!({ "accepted": false, "reason": reason }),
        };
        print_json(&serde_json::json!({ "url": api.base(), "protocolVersions": versions, "host": name, "key": key,
            "discovery": discovery }));
    } else {
        say!("{}: OpenWOP {} ({name})", api.base(), versions.join(", "));
        match &key {
            None => say!("no API key configured (set TRELLIS_API_KEY or --key)"),
            Some(Ok(())) => say!("API key accepted"),
            Some(Err(reason)) => say!("API key refused: {reason}"),
        }
    }
    match key {
        Some(Err(reason)) => Err(ClientError::Input(format!("the API key is refused ({reason})"))),
        _ => Ok(()),
    }
}

fn protocol_versions(discovery: &Value) -> Vec<String> {
    for field in ["protocolVersions", "supportedVersions", "versions"] {
        if let Some(list) = discovery[field].as_array() {
            return list.iter().filter_map(|item| item.as_str().map(str::to_owned)).collect();
        }
    }
    for field in ["protocolVersion", "openwopVersion", "version"] {
        if let Some(version) = discovery[field].as_str() {
            return vec![version.to_owned()];
        }
    }
    vec!["?".to_owned()]
}

fn host_name(discovery: &Value) -> String {
    let implementation = &discovery["implementation"];
    match (implementation["name"].as_str(), implementation["version"].as_str()) {
        (Some(name), Some(version)) => format!("{name} {version}"),
        (Some(name), None) => name.to_owned(),
        _ => discovery["name"].as_str().unwrap_or("unknown host").to_owned(),
    }
}
