//! Named crash points. The crash-recovery tests start the real binary with
//! `TRELLIS_TEST_CRASH_AT=<point>`; the worker aborts the process (no unwinding, no cleanup,
//! like `kill -9`) the first time it reaches that point.

use std::str::FromStr;

/// Where in a task's processing to crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// After deciding, before the commit.
    BeforeCommit,
    /// After the commit, before the effects are sent.
    AfterCommit,
    /// After the effects are sent, before the task is acknowledged.
    AfterEffects,
    /// An activity's executor returned; its outcome is not committed yet.
    AfterActivity,
}

impl FromStr for CrashPoint {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "before-commit" => Ok(Self::BeforeCommit),
            "after-commit" => Ok(Self::AfterCommit),
            "after-effects" => Ok(Self::AfterEffects),
            "after-activity" => Ok(Self::AfterActivity),
            other => Err(format!(
                "unknown crash point `{other}` (before-commit, after-commit, after-effects, after-activity)"
            )),
        }
    }
}

/// Aborts the process if `armed` names `point`.
pub(crate) fn maybe_crash(armed: Option<CrashPoint>, point: CrashPoint) {
    if armed == Some(point) {
        eprintln!("trellis: crashing at {point:?} (TRELLIS_TEST_CRASH_AT)");
        std::process::abort();
    }
}
