//! The client commands' exit codes and their one error type: every failure a client command
//! meets ([`ClientError`]) ends the process with [`Exit::Error`] after one message on standard
//! error; a watched or awaited run's final status picks its own code ([`Exit::for_status`]).

use std::process::ExitCode;

use serde_json::Value;

/// A client command's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success (a watched or awaited run completed).
    Success = 0,
    /// The run failed.
    Failed = 1,
    /// The run was cancelled.
    Cancelled = 2,
    /// A usage, HTTP or connection error, or invalid input.
    Error = 3,
    /// `runs wait --timeout` passed before the condition held.
    Timeout = 4,
}

impl Exit {
    /// The code for a run that ended (or stopped being waited for) in `status`.
    pub fn for_status(status: &str) -> Self {
        match status {
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            _ => Self::Success,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

/// Whether `status` is a terminal run status.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// Why a client command could not do its work (all exit [`Exit::Error`]).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The host answered with a non-2xx status and (usually) the `{error, message, details}`
    /// envelope.
    #[error("{status} {error}: {message}")]
    Http {
        /// The HTTP status code.
        status: u16,
        /// The envelope's `error` code (the reason phrase when the body was not an envelope).
        error: String,
        /// The envelope's `message` (or the start of the body).
        message: String,
        /// The envelope's `details`.
        details: Option<Value>,
    },
    /// The host could not be reached, or the exchange broke off.
    #[error("cannot reach {url}: {message}")]
    Connect {
        /// The URL asked for.
        url: String,
        /// What went wrong.
        message: String,
    },
    /// The command line or a local file is not usable.
    #[error("{0}")]
    Input(String),
    /// A value or a file was checked and refused; each line says where and why.
    #[error("{message}")]
    Invalid {
        /// The summary line.
        message: String,
        /// One line per error.
        errors: Vec<String>,
    },
}

impl ClientError {
    /// Prints the error on standard error: `trellis: <status> <error>: <message>`, then the
    /// details (pretty JSON) or the listed errors.
    pub fn report(&self) {
        eprintln!("trellis: {self}");
        match self {
            Self::Http { details: Some(details), .. } => {
                let text = serde_json::to_string_pretty(details).unwrap_or_default();
                eprintln!("details: {text}");
            }
            Self::Invalid { errors, .. } => {
                for error in errors {
                    eprintln!("  {error}");
                }
            }
            _ => {}
        }
    }
}
