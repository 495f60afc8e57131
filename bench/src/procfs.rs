//! What `/proc` says about a process and the machine: CPU time used (utime + stime of every
//! thread, dead ones included, from `/proc/<pid>/stat`), memory (`VmRSS`, `VmHWM` from
//! `/proc/<pid>/status`) and the load average (`/proc/loadavg`). Each reader answers `None`
//! where `/proc` is not there or not readable.

use std::time::Duration;

/// `/proc` reports CPU times in USER_HZ ticks, which Linux fixes at 100 per second: a CPU
/// figure is exact to ±10 ms per sample.
const TICKS_PER_SECOND: u64 = 100;

/// CPU time (utime + stime, every thread) of `/proc/<who>/stat`; `who` is a pid or `self`.
pub(crate) fn cpu_time(who: &str) -> Option<Duration> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{who}/stat")).ok()?)
}

/// utime + stime of one `/proc/<pid>/stat` line.
fn parse_stat(stat: &str) -> Option<Duration> {
    // Fields after the parenthesised command name start at field 3 (state); utime is field
    // 14 and stime field 15.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 1000 / TICKS_PER_SECOND))
}

/// One `kB` field (`VmRSS`, `VmHWM`, ...) of `/proc/<pid>/status`, in KiB.
pub(crate) fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The 1-minute load average.
pub(crate) fn load1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// CPU used by the host (`pid`) and by this process, read together.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSample {
    host: Option<Duration>,
    bench: Option<Duration>,
}

/// CPU used between two samples.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CpuUsed {
    /// By the host process.
    pub(crate) host: Option<Duration>,
    /// By this process (the clients).
    pub(crate) bench: Option<Duration>,
}

impl CpuSample {
    /// Reads both counters now.
    pub(crate) fn now(host_pid: Option<u32>) -> Self {
        Self { host: host_pid.and_then(|pid| cpu_time(&pid.to_string())), bench: cpu_time("self") }
    }

    /// What was used since `earlier`.
    pub(crate) fn since(&self, earlier: &Self) -> CpuUsed {
        let delta = |now: Option<Duration>, then: Option<Duration>| Some(now?.saturating_sub(then?));
        CpuUsed { host: delta(self.host, earlier.host), bench: delta(self.bench, earlier.bench) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utime_and_stime_are_summed_after_a_command_name_with_spaces_and_parens() {
        let stat = "4242 (trel (lis) x) S 1 4242 4242 0 -1 4194560 1 0 0 0 150 25 0 0 20 0 9 0 100 1 1";
        assert_eq!(parse_stat(stat), Some(Duration::from_millis(1750)));
        assert_eq!(parse_stat("4242 (short) S 1"), None);
    }

    #[test]
    fn this_process_is_readable() {
        let pid = std::process::id();
        assert!(cpu_time(&pid.to_string()).is_some());
        assert!(status_kib(pid, "VmRSS").is_some_and(|kib| kib > 0));
        assert_eq!(status_kib(pid, "VmNoSuchField"), None);
    }
}
