//! The process's log output: `tracing` lines on standard error, filtered by `RUST_LOG`
//! (default `info`), as text (coloured only when standard error is a terminal) or as one
//! JSON object per line (`--log-format json`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::args::LogFormat;

/// Installs the global subscriber. Call once, before the host starts.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.with_ansi(false).json().init(),
    }
}
