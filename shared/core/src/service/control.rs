//! Operator and human inputs to a live run: resolving (or voting on) an interrupt, pausing
//! and resuming. Each is one API commit against the run's version, so of two racing
//! requests exactly one wins; the loser re-decides against the new state and gets the
//! precise refusal (`interrupt_already_resolved`, `run_state_conflict`, …).

use super::{Decision, NoHooks, Services};
use crate::engine::{Input, Verdict};
use crate::error::ServiceError;
use crate::interrupt::{InterruptKind, InterruptRecord, Refusal, Resolution};
use crate::run::{DrainPolicy, RunState};

impl Services {
    /// Applies an operator `input` to `run_id` and commits it; returns the run as it was read
    /// and as committed. With `tenant`, another tenant's run reads as not found; without (a
    /// signed token authorised the caller), the run is addressed directly. One read per
    /// attempt: a lost version race re-reads and re-decides.
    pub(super) async fn operate(
        &self,
        tenant: Option<&str>,
        run_id: &str,
        input: Input,
    ) -> Result<Decision, ServiceError> {
        let decision = self.advance(tenant, run_id, input, &NoHooks).await?;
        let decision = decision.ok_or(ServiceError::NotFound { what: "run" })?;
        if let Verdict::Refused(refusal) = decision.outcome.verdict {
            return Err(ServiceError::Refused(refusal));
        }
        Ok(decision)
    }

    /// A vote on an approval carries the voter's earlier vote on that occurrence, read by key
    /// from the store (after the run, so a vote committed since is seen or the commit loses
    /// the version race): the engine adjusts the tally without reading every vote.
    pub(super) async fn with_prior_vote(&self, run: &RunState, input: Input) -> Result<Input, ServiceError> {
        let Input::Resolve(mut resolution) = input else { return Ok(input) };
        let occurrence = match &resolution.interrupt_id {
            Some(id) => run.interrupts.iter().find(|record| &record.id == id),
            None => run.interrupts.iter().find(|record| record.node_id == resolution.node_id && record.is_pending()),
        };
        if let Some(record) = occurrence.filter(|record| record.kind == InterruptKind::Approval) {
            let voter = crate::interrupt::resolve::voter_of(&resolution.value, &resolution.resolver);
            resolution.prior_vote = self.store.vote(&run.run_id, &record.id, &voter).await?;
        }
        Ok(Input::Resolve(resolution))
    }

    /// Resolves or votes on an interrupt. Returns the run after the commit and the
    /// occurrence as it now stands.
    pub async fn resolve_interrupt(
        &self,
        tenant: Option<&str>,
        run_id: &str,
        resolution: Resolution,
    ) -> Result<(RunState, InterruptRecord), ServiceError> {
        let (node_id, named) = (resolution.node_id.clone(), resolution.interrupt_id.clone());
        let decision = self.operate(tenant, run_id, Input::Resolve(resolution)).await?;
        let (before, run) = (decision.before.ok_or(ServiceError::Internal)?, decision.run);
        // The occurrence the resolution was about: the one named, else the node's pending one
        // as it was read (after a refine, the run's pending occurrence is a new one).
        let id = named.or_else(|| {
            before.interrupts.iter().find(|r| r.node_id == node_id && r.is_pending()).map(|r| r.id.clone())
        });
        let record = id.and_then(|id| run.interrupts.iter().find(|record| record.id == id).cloned());
        Ok((run, record.ok_or(ServiceError::Internal)?))
    }

    /// Pauses a running run.
    pub async fn pause_run(
        &self,
        tenant: &str,
        run_id: &str,
        reason: Option<String>,
        drain_policy: DrainPolicy,
    ) -> Result<RunState, ServiceError> {
        Ok(self.operate(Some(tenant), run_id, Input::Pause { reason, drain_policy }).await?.run)
    }

    /// Resumes a paused run.
    pub async fn resume_run(
        &self,
        tenant: &str,
        run_id: &str,
        reason: Option<String>,
    ) -> Result<RunState, ServiceError> {
        Ok(self.operate(Some(tenant), run_id, Input::Resume { reason }).await?.run)
    }

    /// Why `resolution` would be refused against `run`, without committing anything (token
    /// inspection of an occurrence that is no longer pending).
    pub async fn probe_resolution(&self, run: &RunState, resolution: Resolution) -> Result<Refusal, ServiceError> {
        let workflow = self.pinned_workflow(run).await?;
        let mut copy = run.clone();
        match crate::engine::apply(&workflow, &mut copy, Input::Resolve(resolution), self.clock.now()).verdict {
            Verdict::Refused(refusal) => Ok(refusal),
            _ => Ok(Refusal::NotFound),
        }
    }

    /// The run behind a verified interrupt token, whoever its tenant.
    pub async fn run_for_token(&self, run_id: &str) -> Result<RunState, ServiceError> {
        self.store.load_run(run_id).await?.ok_or(ServiceError::NotFound { what: "run" })
    }
}
