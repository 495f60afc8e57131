//! The runs this instance read or wrote lately, by version: a Lambda container handles many
//! steps of the same runs, and a run's page of version `v` never changes once written, so a
//! state known at `v` plus the pages after it (usually none, or the one another instance
//! wrote) is the current state — one small query instead of reading back to a checkpoint.
//! Each entry also keeps the [`CheckpointPolicy`] of its run, which is how a writer knows
//! whether its commit may be a delta.
//!
//! Bounded by count ([`HOT_RUNS`]) and by the states' size ([`HOT_BYTES`], from each run's
//! checkpoint policy, which bounds its serialized size): past either, arbitrary entries go.
//! Losing an entry only costs the next read of that run a longer query.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use trellis_core::RunState;

use crate::delta::{CheckpointPolicy, Header};

/// How many runs an instance keeps.
pub(crate) const HOT_RUNS: usize = 256;

/// How many bytes of serialized state an instance keeps, at most (a 256 MB function holds
/// the states in memory at a few times their JSON size).
pub(crate) const HOT_BYTES: usize = 16 * 1024 * 1024;

struct Hot {
    version: u64,
    /// The state at `version`, unless a caller took it ([`HotRuns::state`]) and has not
    /// offered it back.
    state: Option<RunState>,
    policy: CheckpointPolicy,
    /// The header at `version`, which a delta on it is taken against.
    header: Arc<Header>,
}

/// What a writer needs to write a delta on a version: its run's checkpoint policy and the
/// header at that version.
pub(crate) type Basis = (CheckpointPolicy, Arc<Header>);

/// The cache.
#[derive(Default)]
pub(crate) struct HotRuns {
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_run: HashMap<String, Hot>,
    /// The sum of the entries' state size bounds.
    bytes: usize,
}

impl Hot {
    fn bytes(&self) -> usize {
        self.policy.state_bytes_bound()
    }
}

impl Entries {
    fn get_mut(&mut self, run_id: &str) -> Option<&mut Hot> {
        self.by_run.get_mut(run_id)
    }

    fn get(&self, run_id: &str) -> Option<&Hot> {
        self.by_run.get(run_id)
    }

    fn remove(&mut self, run_id: &str) {
        if let Some(hot) = self.by_run.remove(run_id) {
            self.bytes -= hot.bytes();
        }
    }

    fn insert(&mut self, run_id: String, hot: Hot) {
        self.remove(&run_id);
        while !self.by_run.is_empty() && (self.by_run.len() >= HOT_RUNS || self.bytes + hot.bytes() > HOT_BYTES) {
            let Some(evicted) = self.by_run.keys().next().cloned() else { break };
            self.remove(&evicted);
        }
        self.bytes += hot.bytes();
        self.by_run.insert(run_id, hot);
    }
}

impl std::fmt::Debug for HotRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HotRuns").field("entries", &self.entries.lock().map(|e| e.by_run.len()).ok()).finish()
    }
}

impl HotRuns {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cached state of `run_id` and its basis: handed over (the entry keeps its version
    /// and policy) when `take`, else copied.
    pub(crate) fn state(&self, run_id: &str, take: bool) -> Option<(RunState, Basis)> {
        let mut entries = self.lock();
        let hot = entries.get_mut(run_id)?;
        let state = if take { hot.state.take()? } else { hot.state.clone()? };
        Some((state, (hot.policy, hot.header.clone())))
    }

    /// The basis of a delta on `run_id`'s `version`, if that is its newest known version.
    pub(crate) fn basis_at(&self, run_id: &str, version: u64) -> Option<Basis> {
        self.lock().get(run_id).filter(|hot| hot.version == version).map(|hot| (hot.policy, hot.header.clone()))
    }

    /// Records `run_id` at `version` (with its state unless a caller holds it).
    pub(crate) fn put(&self, run_id: &str, version: u64, state: Option<RunState>, (policy, header): Basis) {
        self.lock().insert(run_id.to_owned(), Hot { version, state, policy, header });
    }

    /// Keeps `run` if it is the newest version known of its run.
    pub(crate) fn retain(&self, run: RunState) {
        let mut entries = self.lock();
        if let Some(hot) = entries.get_mut(&run.run_id) {
            if hot.version == run.version {
                hot.state = Some(run);
            }
        }
    }

    /// Drops what is known of `run_id` (a commit lost a race: another writer moved it).
    pub(crate) fn forget(&self, run_id: &str) {
        self.lock().remove(run_id);
    }
}

#[cfg(test)]
mod tests {
    use trellis_core::testing::{chain_workflow, pending_run};

    use super::*;

    #[test]
    fn a_taken_state_comes_back_only_at_the_newest_version() {
        let hot = HotRuns::default();
        let run = pending_run(&chain_workflow(), "run-h", "t");
        hot.put("run-h", run.version, Some(run.clone()), (CheckpointPolicy::checkpoint(10), Arc::default()));
        let (taken, (policy, _)) = hot.state("run-h", true).expect("cached");
        assert_eq!((taken.version, policy.checkpoint_bytes), (run.version, 10));
        assert!(hot.state("run-h", false).is_none(), "taken, not copied");
        assert_eq!(hot.basis_at("run-h", run.version).map(|b| b.0), Some(policy));
        let mut other = taken.clone();
        other.version += 1;
        hot.retain(other);
        assert!(hot.state("run-h", false).is_none(), "another version is not kept");
        hot.retain(taken);
        assert!(hot.state("run-h", false).is_some());
        hot.forget("run-h");
        assert!(hot.basis_at("run-h", run.version).is_none());
    }

    #[test]
    fn the_cache_is_bounded() {
        let hot = HotRuns::default();
        for i in 0..HOT_RUNS + 10 {
            hot.put(&format!("run-{i}"), 1, None, (CheckpointPolicy::default(), Arc::default()));
        }
        assert_eq!(hot.lock().by_run.len(), HOT_RUNS);
        assert!(hot.basis_at(&format!("run-{}", HOT_RUNS + 9), 1).is_some(), "the newest entry stays");
        // By size too: large states push others out, and the sum stays under the budget.
        for i in 0..8 {
            hot.put(&format!("big-{i}"), 1, None, (CheckpointPolicy::checkpoint(HOT_BYTES / 3), Arc::default()));
        }
        let entries = hot.lock();
        assert!(entries.bytes <= HOT_BYTES, "{} bytes kept", entries.bytes);
        assert_eq!(entries.bytes, entries.by_run.values().map(Hot::bytes).sum::<usize>());
        assert!(entries.get("big-7").is_some());
    }
}
