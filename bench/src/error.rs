//! The benchmark's one error type: a stable code and what went wrong.

use std::fmt;

/// Why a benchmark could not go on. `code` is stable (scripts may match on it).
#[derive(Debug)]
pub(crate) struct BenchError {
    /// `host_start_failed`, `host_unreachable`, `http_failed`, `unexpected_answer`,
    /// `run_not_completed`, `workflow_missing`, `client_failed` or `io_failed`.
    pub(crate) code: &'static str,
    /// What happened, for a person.
    pub(crate) message: String,
}

impl BenchError {
    /// An error with `code` and `message`.
    pub(crate) fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    /// An HTTP request that got no answer or an unreadable one.
    pub(crate) fn http(what: &str, error: impl fmt::Display) -> Self {
        Self::new("http_failed", format!("{what}: {error}"))
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for BenchError {}

/// A result of the benchmark's own operations.
pub(crate) type Fallible<T> = Result<T, BenchError>;
