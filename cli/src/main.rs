//! `trellis`: parse the command line and run it.

use std::io::Read;
use std::process::ExitCode;

use clap::Parser;
use trellis::args::{Cli, Command};
use trellis::host::{EmbeddedHost, HostOptions};
use trellis_http::ApiKey;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    match Cli::parse().command {
        Command::Serve(args) => {
            let crash_at = std::env::var("TRELLIS_TEST_CRASH_AT").ok();
            let crash = match crash_at.map(|point| point.parse::<trellis_worker::CrashPoint>()) {
                Some(Err(error)) => return fail(&error),
                Some(Ok(point)) => Some(point),
                None => None,
            };
            let options =
                HostOptions { api_key: std::env::var("TRELLIS_API_KEY").ok(), crash, ..HostOptions::default() };
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
            let mut key = String::new();
            if std::io::stdin().read_to_string(&mut key).is_err() || key.trim().is_empty() {
                return fail("pass the key on standard input");
            }
            println!("{}", hex::encode(ApiKey::hash_of(key.trim())));
            ExitCode::SUCCESS
        }
    }
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
