//! `trellis-bench`: starts a `trellis serve` process and drives it over HTTP. Prints figures;
//! asserts nothing.

mod driver;
mod follow;
mod scenarios;

use std::path::PathBuf;

use clap::Parser;

/// Benchmark the embedded host.
#[derive(Debug, Parser)]
#[command(name = "trellis-bench")]
struct Args {
    /// The trellis binary to start.
    #[arg(long, default_value = "target/release/trellis")]
    trellis: PathBuf,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Runs per scenario.
    #[arg(long, default_value_t = 200)]
    runs: usize,
    /// Benchmark an in-memory host instead of the durable data directory.
    #[arg(long)]
    memory: bool,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let report = driver::run(&args.trellis, args.memory, args.clients, args.runs).await;
    print!("{report}");
}
