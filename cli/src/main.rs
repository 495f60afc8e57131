//! `trellis`: parse the command line and run it.

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;

use clap::Parser;
use trellis::args::{Cli, Command};
use trellis::host::{EmbeddedHost, HostOptions};
use trellis::serve::ConnectionSettings;
use trellis_http::ApiKey;

#[tokio::main]
async fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Serve { args, process } => {
            trellis::logs::init(process.log_format);
            let crash_at = std::env::var("TRELLIS_TEST_CRASH_AT").ok();
            let crash = match crash_at.map(|point| point.parse::<trellis_worker::CrashPoint>()) {
                Some(Err(error)) => return fail(&error),
                Some(Ok(point)) => Some(point),
                None => None,
            };
            let connections = ConnectionSettings {
                max_connections: process.max_connections as usize,
                ..ConnectionSettings::default()
            };
            let options = HostOptions {
                api_key: std::env::var("TRELLIS_API_KEY").ok(),
                crash,
                connections,
                ..HostOptions::default()
            };
            let host = match EmbeddedHost::start(&args, options).await {
                Ok(host) => host,
                Err(error) => return fail(&error.to_string()),
            };
            println!("trellis listening on http://{}", host.addr);
            if let Some(key) = &host.dev_key {
                println!("development API key (Authorization: Bearer …): {key}");
            }
            wait_for_signal().await;
            host.stop().await;
            ExitCode::SUCCESS
        }
        Command::HashKey => {
            let Some(key) = read_key() else { return fail("pass the key on standard input") };
            println!("{}", hex::encode(ApiKey::hash_of(key.trim())));
            ExitCode::SUCCESS
        }
    }
}

/// The key on standard input: one line after a prompt from a terminal, else all of it.
fn read_key() -> Option<String> {
    let stdin = std::io::stdin();
    let mut key = String::new();
    let read = if stdin.is_terminal() {
        eprint!("API key to hash (one line): ");
        let _ = std::io::stderr().flush();
        stdin.read_line(&mut key).map(drop)
    } else {
        stdin.lock().read_to_string(&mut key).map(drop)
    };
    if read.is_err() || key.trim().is_empty() {
        return None;
    }
    Some(key.trim().to_owned())
}

fn fail(message: &str) -> ExitCode {
    eprintln!("trellis: {message}");
    ExitCode::FAILURE
}

async fn wait_for_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
