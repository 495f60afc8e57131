//! Command-line arguments. Every `serve` flag also reads an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Trellis — an OpenWOP workflow host.
#[derive(Debug, Parser)]
#[command(name = "trellis", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the embedded host: HTTP API, engine and durable SQLite store in one process.
    Serve(ServeArgs),
    /// Read an API key on standard input and print its SHA-256, for a keys file.
    HashKey,
}

/// `trellis serve` settings.
#[derive(Debug, Clone, Parser)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "TRELLIS_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Directory of the durable store (created if missing).
    #[arg(long, env = "TRELLIS_DATA_DIR", default_value = "trellis-data")]
    pub data_dir: PathBuf,
    /// Keep everything in memory: nothing survives the process.
    #[arg(long, env = "TRELLIS_MEMORY")]
    pub memory: bool,
    /// A directory of workflow definitions (`*.json`) to load at start; repeatable.
    #[arg(long = "workflows", env = "TRELLIS_WORKFLOWS", value_delimiter = ',')]
    pub workflows: Vec<PathBuf>,
    /// A directory of OpenWOP conformance fixtures to load at start.
    #[arg(long, env = "OPENWOP_FIXTURES_DIR")]
    pub fixtures_dir: Option<PathBuf>,
    /// A JSON file of hashed API keys, each bound to a tenant and scopes.
    #[arg(long = "keys", env = "TRELLIS_KEYS_FILE")]
    pub keys_file: Option<PathBuf>,
    /// Node executions allowed per run (the ceiling for `configurable.recursionLimit`).
    #[arg(long, env = "TRELLIS_MAX_NODE_EXECUTIONS", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_node_executions: u32,
    /// Longest run in milliseconds (the ceiling for `configurable.runTimeoutMs`).
    #[arg(long, env = "TRELLIS_MAX_RUN_DURATION_MS", default_value_t = 86_400_000, value_parser = clap::value_parser!(u64).range(1000..))]
    pub max_run_duration_ms: u64,
    /// Serve the conformance test seams (`/v1/host/sample/...`) to keys with the `test:seams`
    /// scope, and honour the capability overlay they set. Off by default; never in production.
    #[arg(long, env = "OPENWOP_TEST_SEAM_ENABLED")]
    pub test_seams: bool,
}
