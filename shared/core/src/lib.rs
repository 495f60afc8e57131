//! # trellis-core
//!
//! The engine of Trellis, an OpenWOP host. Everything here is free of I/O: no HTTP, no
//! SQLite, no AWS. The crate holds
//!
//! - [`model`]: workflow definitions, their validation (the project's JSON Schemas in
//!   `schemas/` plus graph rules) and the compiled graph the engine walks;
//! - [`run`] and [`event`]: a run's durable state and the append-only event log entries;
//! - [`engine`]: a pure function `(workflow, state, input, now) → (state', events, effects)`,
//!   whose run lifecycle is written as an explicit transition table;
//! - [`nodes`]: the node kinds this host runs (`core.noop`, `core.delay`, `core.identity`,
//!   `core.fail`, `core.subWorkflow`, the gates and `core.interrupt`), behind one trait;
//! - [`interrupt`]: interrupt payloads, judging resume values, signed interrupt tokens;
//! - [`ports`]: the traits the adapters implement (store, clock, ids, commit notifier);
//! - [`service`]: the use cases (create, read, cancel, process a task) written over the ports,
//!   shared by every front end and backend.
//!
//! Nothing in this crate knows whether it runs embedded (SQLite) or on AWS.

pub mod bundled;
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
pub mod run;
pub mod schema;
pub mod service;
pub mod timefmt;

#[cfg(any(test, feature = "test-util"))]
pub mod testing;

pub use error::{DefinitionError, ServiceError, StoreError};
pub use event::RunEvent;
pub use run::{RunState, RunStatus};
