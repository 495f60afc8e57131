//! # trellis (the binary's library)
//!
//! The embedded host: the same engine, store ports and HTTP router as the serverless build,
//! wired to SQLite, an in-process worker loop, the retention sweeper ([`sweep`]) and its own connection layer ([`serve`]). [`host::EmbeddedHost`] can
//! be started from tests; [`commands`] runs the subcommands, [`client`] holds the client
//! commands that talk to any Trellis host over HTTP, and `main.rs` only parses arguments and
//! calls it.

pub mod args;
pub mod client;
pub mod commands;
pub mod host;
pub mod keys;
pub mod logs;
pub mod serve;
pub mod sweep;
