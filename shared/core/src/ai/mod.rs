//! What the engine knows about model calls. The calls themselves are activities
//! (`core.ai.callPrompt` in `trellis-activities`); the engine only records what they report
//! and enforces what the run allows:
//!
//! - [`usage`]: one provider invocation's token and cost figures ([`usage::ProviderUsage`],
//!   reported through the activity's progress path and committed as `provider.usage`), and
//!   the run's durable cost rollup ([`usage::CostRollup`], the snapshot's
//!   `metrics.openwopCost`);
//! - [`mock`]: the run option `configurable.mockProvider` (the `run-options.md` catalog the
//!   host serves: `stream-text`, `error`, `usage-only`) and its checks;
//! - [`budget`]: the run option `configurable.budget` (RFC 0084), what the run consumed
//!   and the `budget.*` events the engine emits as it enforces it;
//! - [`identity`]: the replay-stable request identity (OpenWOP §6.4) and RFC 8785 JCS;
//! - [`chunk`]: the shape of a batch of streamed tokens inside `output.chunk`, which the
//!   `messages` stream mode projects as `ai.message.chunk` frames.

pub mod budget;
pub mod chunk;
pub mod identity;
pub mod mock;
pub mod usage;

use serde::{Deserialize, Serialize};

/// The run's model-call state: its cost rollup so far and its budget. Part of the run header (a commit
/// that records usage rewrites it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AiState {
    /// What the run's provider calls cost so far; `None` until one reported usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<usage::CostRollup>,
    /// The run's budget (`configurable.budget`), from its start; `None` without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<budget::BudgetState>,
}

impl AiState {
    /// Whether nothing was recorded (the field is then left out of the stored state).
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}
