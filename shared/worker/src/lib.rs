//! # trellis-worker
//!
//! Runs due tasks — node steps, timers, run deadlines — through the engine and the store:
//! claim, decide, commit, send, acknowledge. Delivery is at least once, so every task is
//! safe to run twice: a task whose node already moved on re-issues the run's outstanding
//! effects and is acknowledged.
//!
//! The embedded host runs [`run_loop`] in-process over the SQLite task table (claim due
//! tasks under a lease, run them, acknowledge or release them); [`process_task`] is the step
//! of one task, and the AWS dispatcher (`trellis-aws`) calls it once per SQS message.
//! [`schedule_loop`] ticks the scheduler (due schedule occurrences start their runs); [`every`]
//! keeps time for the embedded host's periodic loops.
//! [`CrashPoint`] names where the crash-recovery tests abort the process.
//!
//! `Execute` tasks run an activity attempt (`activity`): embedded, they run concurrently
//! with every other task, at most `WorkerOptions::max_concurrent_activities` at a time, so a
//! slow call never holds up other runs' steps. `NotifyWorker` tasks (the POST to an external
//! worker, `callback`) and `DeliverWebhook` tasks (a webhook delivery attempt, `webhook`) run
//! the same way.

mod activity;
mod callback;
mod crash;
mod local;
mod schedule;
mod step;
mod webhook;

pub use activity::{GRACE_MS, LEASE_MARGIN_MS};
pub use crash::{CrashPoint, SimulatedCrash};
pub use local::{run_loop, LocalNotifier, SystemClock, WorkerOptions, DEFAULT_MAX_CONCURRENT_ACTIVITIES};
pub use schedule::{every, schedule_loop};
pub use step::{process_task, TaskContext, TaskResult};
