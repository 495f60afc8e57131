//! # trellis-worker
//!
//! Runs due tasks — node steps, timers, run deadlines — through the engine and the store:
//! claim, decide, commit, send, acknowledge. Delivery is at least once, so every task is
//! safe to run twice: a task whose node already moved on re-issues the run's outstanding
//! effects and is acknowledged.
//!
//! The embedded host runs [`run_loop`] in-process; the serverless dispatcher will call
//! [`process_task`] once per queue message.

mod crash;
mod local;
mod step;

pub use crash::CrashPoint;
pub use local::{run_loop, LocalNotifier, SystemClock, WorkerOptions};
pub use step::{process_task, TaskResult};
