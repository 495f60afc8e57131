//! `trellis-campaign`: the kill -9 fault campaign at full size. Starts `trellis serve` on a
//! fresh data directory, SIGKILLs it (only the process it started) `--kills` times under a
//! closed-loop load of `--runs` keyed creates, restarts it each time, then checks every
//! accepted run end to end and prints the report (see `trellis_testkit::campaign`). Exits 1
//! when anything was lost, duplicated, malformed or stuck.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use trellis_testkit::campaign::{run, CampaignConfig};

/// The kill -9 fault campaign against the embedded host.
#[derive(Debug, Parser)]
#[command(name = "trellis-campaign")]
struct Args {
    /// The trellis binary to start.
    #[arg(long, default_value = "target/release/trellis")]
    trellis: PathBuf,
    /// SIGKILLs during the load.
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// Runs to create.
    #[arg(long, default_value_t = 5000)]
    runs: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Seconds one create may be retried, or one run take to finish, before it counts as stuck or lost.
    #[arg(long, default_value_t = 60)]
    patience_s: u64,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let data = tempfile::tempdir().expect("a temporary data directory");
    let config = CampaignConfig {
        trellis: args.trellis,
        data_dir: data.path().to_path_buf(),
        kills: args.kills,
        runs: args.runs,
        clients: args.clients,
        patience: Duration::from_secs(args.patience_s),
    };
    let report = run(&config).await;
    print!("{report}");
    if !report.is_clean() {
        std::process::exit(1);
    }
}
