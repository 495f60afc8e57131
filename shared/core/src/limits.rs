//! Host-wide limits. Every limit advertised in discovery is enforced: request bodies by the
//! HTTP layer, node executions and run duration by the engine.

/// The limits this host enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLimits {
    /// Ceiling for node executions per run (and for `configurable.recursionLimit`).
    pub max_node_executions: u32,
    /// Ceiling for a run's wall-clock duration (and for `configurable.runTimeoutMs`).
    pub max_run_duration_ms: u64,
    /// Largest accepted request body, in bytes.
    pub max_request_body_bytes: usize,
}

impl Default for HostLimits {
    fn default() -> Self {
        Self { max_node_executions: 1000, max_run_duration_ms: 86_400_000, max_request_body_bytes: 262_144 }
    }
}
