//! Named crash points. The crash-recovery tests start the real binary with
//! `TRELLIS_TEST_CRASH_AT=<point>`; the worker aborts the process (no unwinding, no cleanup,
//! like `kill -9`) the first time it reaches that point. A host that cannot abort — the
//! emulated Lambda harness runs the dispatcher in the test process — arms a
//! [`SimulatedCrash`] instead: the first time the point is reached the task ends with an
//! error, so its delivery is not acknowledged and it comes back, as after a dead invocation.

use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// A crash the test process survives: the first time `point` is reached, the task fails as
/// if its process had died there (nothing after the point happens, the delivery is not
/// acknowledged). Only [`CrashPoint::AfterActivity`] is simulated.
#[derive(Debug)]
pub struct SimulatedCrash {
    point: CrashPoint,
    fired: AtomicBool,
}

impl SimulatedCrash {
    /// Armed at `point`.
    pub fn at(point: CrashPoint) -> Self {
        Self { point, fired: AtomicBool::new(false) }
    }

    /// Whether the crash happens now (`point` is the armed one and it has not fired yet).
    pub(crate) fn hit(&self, point: CrashPoint) -> bool {
        self.point == point && !self.fired.swap(true, Ordering::SeqCst)
    }

    /// Whether it has fired.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}
