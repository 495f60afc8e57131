//! Host-wide limits. Every limit advertised in discovery is enforced: request bodies by the
//! HTTP layer, node executions and run duration by the engine.

/// How long a finished `Idempotency-Key` answer is kept (discovery's
/// `idempotency.layer1RetentionSeconds`): past it the key is free again, and both stores
/// delete the record (SQLite in bounded batches, DynamoDB by TTL on `expires_at`).
pub const IDEMPOTENCY_RETENTION_SECONDS: u64 = 86_400;

/// [`IDEMPOTENCY_RETENTION_SECONDS`] in milliseconds.
pub const IDEMPOTENCY_RETENTION_MS: u64 = IDEMPOTENCY_RETENTION_SECONDS * 1000;

/// The longest run-duration ceiling a host may be configured with (30 days), and so the
/// longest duration anything in a run may ask for: a delay, an interrupt's `timeoutMs`, a run
/// timeout. Every due time is `now + d` with `d` at most this, far inside the range every
/// store keeps times in (SQLite `INTEGER`, DynamoDB numbers, SQS delays are clamped).
pub const MAX_RUN_DURATION_MS: u64 = 30 * 24 * 60 * 60 * 1000;

/// The limits this host enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLimits {
    /// Ceiling for node executions per run (and for `configurable.recursionLimit`).
    pub max_node_executions: u32,
    /// Ceiling for a run's wall-clock duration (and for `configurable.runTimeoutMs`, and for
    /// the literal durations a definition gives: `delayMs`, `timeoutMs`); at most
    /// [`MAX_RUN_DURATION_MS`].
    pub max_run_duration_ms: u64,
    /// Largest accepted request body, in bytes.
    pub max_request_body_bytes: usize,
    /// The longest one activity attempt may be given (embedded: an hour; on AWS the
    /// dispatcher's timeout less a commit margin). A definition asking for more is refused
    /// at registration (`attempt_timeout`).
    pub max_attempt_ms: u64,
    /// How long a run is kept after it ends when neither its request nor its workflow says
    /// (`None`: until deleted; see [`crate::retention`]).
    pub default_retention_ms: Option<u64>,
    /// The largest value one activity may produce, in bytes of JSON: a larger result fails
    /// its node with `payload_too_large` (not retried).
    pub max_value_bytes: usize,
    /// Whether values over [`crate::blob::INLINE_LIMIT`] are stored apart (an AWS host
    /// without a blob bucket keeps them inline, as far as its store allows).
    pub blob_storage: bool,
}

impl Default for HostLimits {
    fn default() -> Self {
        Self {
            max_node_executions: 1000,
            max_run_duration_ms: 86_400_000,
            max_request_body_bytes: 262_144,
            max_attempt_ms: 3_600_000,
            default_retention_ms: None,
            max_value_bytes: crate::blob::MAX_VALUE_BYTES,
            blob_storage: true,
        }
    }
}
