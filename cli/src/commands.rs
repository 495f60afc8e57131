//! The subcommands, run from parsed arguments: `serve` starts an [`EmbeddedHost`] and holds it
//! until SIGINT or SIGTERM; `hash-key` prints the hash of a key read from standard input; the
//! client commands go to [`crate::client`]. Each returns the process's exit code; `main.rs`
//! only parses and calls [`run`].

use std::process::ExitCode;

use trellis_http::ApiKey;
use trellis_worker::CrashPoint;

use crate::args::{Cli, Command, ProcessArgs, ServeArgs};
use crate::host::{EmbeddedHost, HostOptions};
use crate::serve::ConnectionSettings;

/// Runs the parsed command line to its end.
pub async fn run(cli: Cli) -> ExitCode {
    match &cli.command {
        Command::Serve { args, process } => serve(args, process).await,
        Command::HashKey => hash_key(),
        client => crate::client::run(&cli.global, client).await.into(),
    }
}

/// The exit code of a command line clap refused: 0 for help and version, 3 (a usage error,
/// as for every client command) otherwise. Prints clap's message.
pub fn parse_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = error.print();
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ => crate::client::exit::Exit::Error.into(),
    }
}

async fn serve(args: &ServeArgs, process: &ProcessArgs) -> ExitCode {
    crate::logs::init(process.log_format);
    let crash = match std::env::var("TRELLIS_TEST_CRASH_AT").ok().map(|point| point.parse::<CrashPoint>()) {
        Some(Err(error)) => return fail(&error),
        Some(Ok(point)) => Some(point),
        None => None,
    };
    let connections =
        ConnectionSettings { max_connections: process.max_connections as usize, ..ConnectionSettings::default() };
    let options =
        HostOptions { api_key: std::env::var("TRELLIS_API_KEY").ok(), crash, connections, ..HostOptions::default() };
    let host = match EmbeddedHost::start(args, options).await {
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

fn hash_key() -> ExitCode {
    let Some(key) = crate::keys::read_key_from_stdin() else { return fail("pass the key on standard input") };
    println!("{}", hex::encode(ApiKey::hash_of(&key)));
    ExitCode::SUCCESS
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
