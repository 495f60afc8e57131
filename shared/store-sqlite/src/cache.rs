//! The hot-run cache: the committed state of recently stepped live runs, kept in memory so
//! a step neither reads nor parses its run. The store's exclusive file lock makes this
//! process the only writer, so an entry stays true until the next commit of its run, which
//! forgets it first; the commit loop hands the new state back ([`HotRuns::keep`]) once the
//! commit is in. Taking an entry moves it out (no copy); a reader gets a copy. Bounded: past
//! [`CAPACITY`] runs the least recently kept is dropped, and only runs with a step or an
//! activity attempt in flight are kept (finished runs, and runs parked on a person, a timer
//! or a child, are read from disk when they move again).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use trellis_core::RunState;

/// Runs kept at most.
pub(crate) const CAPACITY: usize = 256;

/// See the module docs.
#[derive(Default)]
pub(crate) struct HotRuns {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Run id → (when kept, state).
    runs: HashMap<String, (u64, RunState)>,
    /// Increases with every keep.
    clock: u64,
}

impl HotRuns {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Moves the run's state out, if kept.
    pub(crate) fn take(&self, run_id: &str) -> Option<RunState> {
        self.lock().runs.remove(run_id).map(|(_, run)| run)
    }

    /// A copy of the run's state, if kept.
    pub(crate) fn copy(&self, run_id: &str) -> Option<RunState> {
        self.lock().runs.get(run_id).map(|(_, run)| run.clone())
    }

    /// The run's summary, if kept: its header, its variables and its active nodes (copying
    /// no other node).
    pub(crate) fn summary(&self, run_id: &str) -> Option<RunState> {
        let inner = self.lock();
        let (_, run) = inner.runs.get(run_id)?;
        let mut summary = run.header();
        summary.variables = run.variables.clone();
        summary.edges = run.edges.clone();
        for (node_id, node) in run.nodes.iter().filter(|(_, node)| node.is_active()) {
            summary.nodes.insert(node_id.clone(), node.clone());
        }
        Some(summary)
    }

    /// Drops the run's entry (its commit is about to change it).
    pub(crate) fn forget(&self, run_id: &str) {
        self.lock().runs.remove(run_id);
    }

    /// Keeps `run` (the caller checked it is the stored version), dropping the least
    /// recently kept run when full.
    pub(crate) fn keep(&self, run: RunState) {
        let mut inner = self.lock();
        inner.clock += 1;
        let at = inner.clock;
        if inner.runs.len() >= CAPACITY && !inner.runs.contains_key(&run.run_id) {
            let oldest = inner.runs.iter().min_by_key(|(_, (kept, _))| *kept).map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                inner.runs.remove(&oldest);
            }
        }
        inner.runs.insert(run.run_id.clone(), (at, run));
    }

    /// How many runs are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().runs.len()
    }
}
