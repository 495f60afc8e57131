//! Schedules: when a scheduled workflow fires.
//!
//! - [`expr`]: schedule expressions in Amazon EventBridge Scheduler syntax (`rate(…)`,
//!   `cron(…)`, `at(…)`) in an IANA time zone, parsed once and asked for their next
//!   occurrence ([`ScheduleExpr`]);
//! - [`record`]: the schedule triggers a definition declares, and their stored records.
//!
//! Everything here is pure: no clock, no store; callers pass the times in. The scheduler that
//! fires them is `Services::tick_schedules`.

pub mod expr;
pub mod record;

pub use expr::ScheduleExpr;
