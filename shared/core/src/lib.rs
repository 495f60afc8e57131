//! # trellis-core
//!
//! The engine of Trellis, an OpenWOP host. No HTTP, no SQLite, no AWS and no file system
//! here: adapters reach the outside world through [`ports`], and whoever reads files (the
//! CLI's `--workflows` directories) does so off the async runtime and hands the documents in
//! ([`service::read_definition_files`]). The crate holds
//!
//! - [`model`]: workflow definitions, their validation (the project's JSON Schemas in
//!   `schemas/`, see [`schema`], plus graph and config rules) and the compiled graph the
//!   engine walks;
//! - [`run`] and [`event`]: a run's durable state and the append-only event log entries;
//! - [`engine`]: a pure function `(workflow, state, input, now) → (state', events, effects)`,
//!   whose run lifecycle is written as an explicit transition table;
//! - [`activity`]: the activity model — node kinds with side effects, executed outside the
//!   engine behind a port, with their retry and timeout policy and template syntax;
//! - [`ai`]: what the engine records of model calls (provider usage, the cost rollup, mock
//!   providers, streamed chunk batches);
//! - [`nodes`]: the engine's pure node kinds, behind one trait, and the per-backend registry (noop, delay, identity, fail,
//!   sub-workflow, the approval/clarification/conversation gates, `core.interrupt`, the
//!   orchestrator supervisor and `core.dispatch` of [`orchestrator`]);
//! - [`interrupt`]: interrupt payloads, judging resume values and quorum votes (a tally in
//!   the state; each vote stored by voter), signed interrupt tokens;
//! - [`bus`]: run events published to an event bus as CloudEvents (EventBridge on AWS);
//! - [`replay`]: forks — the link to the source, recorded outcomes, divergence;
//! - [`blob`]: large values stored apart, with a reference in their place;
//! - [`cache`]: the result cache of reruns — what is cacheable, the key, a hit;
//! - [`retention`]: how long a run is kept after it ends, and what goes with it;
//! - [`ports`]: the traits the adapters implement (stores, effect sink and local queue, host
//!   settings, clock, ids, commit notifier);
//! - [`secrets`]: the secret-resolver port (`credentialsRef` → cleartext for one call), the
//!   [`secrets::Secret`] value that never prints, and the credential error codes;
//! - [`service`]: the use cases (register and find workflows, create, read, list, cancel,
//!   resolve, pause, process a task, idempotency, test seams) written over the ports, shared
//!   by every front end and backend;
//! - [`capabilities`], [`limits`], [`bundled`], [`timefmt`], [`error`]: the runtime
//!   capability overlay, the enforced host limits, the compiled-in fixtures, timestamp
//!   rendering and the typed errors with their stable codes;
//! - `testing` (feature `test-util`): fixture builders and the store contract suite every
//!   store adapter runs.
//!
//! Nothing in this crate knows whether it runs embedded (SQLite) or on AWS.

pub mod activity;
pub mod ai;
pub mod blob;
pub mod bundled;
pub mod bus;
pub mod cache;
pub mod capabilities;
pub mod engine;
pub mod error;
pub mod event;
pub mod interrupt;
pub mod limits;
pub mod model;
pub mod nodes;
pub mod orchestrator;
pub mod ports;
pub mod replay;
pub mod retention;
pub mod run;
pub mod schedule;
pub mod schema;
pub mod secrets;
pub mod service;
pub mod timefmt;
pub mod trigger;
pub mod webhook;

#[cfg(any(test, feature = "test-util"))]
pub mod testing;

pub use error::{DefinitionError, ServiceError, StoreError};
pub use event::RunEvent;
pub use run::{RunState, RunStatus};
