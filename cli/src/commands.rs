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

/// The exit code of a command line clap refused (`args`, the whole command line): 0 for help
/// and version; for a usage error, clap's own 2 under `serve` and `hash-key` (they keep their
/// behaviour) and 3 under the client commands (their usage-error code). Prints clap's message.
pub fn parse_error(error: &clap::Error, args: &[std::ffi::OsString]) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = error.print();
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ if matches!(subcommand_of(args).as_deref(), Some("serve" | "hash-key")) => ExitCode::from(2),
        _ => crate::client::exit::Exit::Error.into(),
    }
}

/// The subcommand a command line names, as far as clap can tell from a line it refused.
fn subcommand_of(args: &[std::ffi::OsString]) -> Option<String> {
    let matches = <Cli as clap::CommandFactory>::command().ignore_errors(true).try_get_matches_from(args).ok()?;
    matches.subcommand_name().map(str::to_owned)
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
    trellis_http::shutdown::signal().await;
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

#[cfg(test)]
mod tests {
    use super::subcommand_of;

    #[test]
    fn a_refused_command_line_still_names_its_subcommand() {
        let line = |args: &[&str]| args.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert_eq!(subcommand_of(&line(&["trellis", "serve", "--bad-flag"])).as_deref(), Some("serve"));
        assert_eq!(
            subcommand_of(&line(&["trellis", "--url", "http://x", "hash-key", "extra"])).as_deref(),
            Some("hash-key")
        );
        assert_eq!(
            subcommand_of(&line(&["trellis", "runs", "wait", "r", "--timeout", "inf"])).as_deref(),
            Some("runs")
        );
    }
}
