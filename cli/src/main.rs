//! `trellis`: parse the command line and run it.

use std::process::ExitCode;

use clap::Parser;

/// The process's allocator: a step allocates and frees many small values on several threads
/// (the request handlers, the worker, the SQLite writer), which mimalloc serves from
/// thread-local pages at a fraction of glibc malloc's instructions.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match trellis::args::Cli::try_parse_from(&args) {
        Ok(cli) => trellis::commands::run(cli).await,
        Err(error) => trellis::commands::parse_error(&error, &args),
    }
}
