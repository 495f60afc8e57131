//! `trellis`: parse the command line and run it.

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    trellis::commands::run(trellis::args::Cli::parse().command).await
}
