//! Child runs of `core.subWorkflow`: creating the child a parent's node asked for (only while
//! that node still waits for it, so a cancelled parent leaves no orphan), and turning a
//! child's notice (it ended, suspended or resumed) into the parent's input.

use serde_json::Map;

use super::create::new_run;
use super::Services;
use crate::engine::{self, Input};
use crate::error::{ServiceError, StoreError};
use crate::ports::CreateResult;
use crate::run::{NodeStatus, ParentLink, RunError, RunState, RunStatus};

/// What starting a child did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildStart {
    /// The child run was created and started.
    Created,
    /// It existed already (a redelivered task).
    AlreadyExists,
    /// The parent no longer waits for it (cancelled, failed, or moved on).
    NotExpected,
    /// The child workflow is unknown or not runnable; the parent's node failed.
    Refused,
}

/// The deepest nesting of child runs (a workflow that calls itself stops here).
pub const MAX_CHILD_DEPTH: u32 = 32;

impl Services {
    /// Creates and starts child `child_run_id` of `workflow_id` for `parent_run_id`'s node
    /// (the `StartChild` task): only while the parent's node still waits for it, and only if
    /// it does not exist yet — a child that exists has its outstanding effects re-sent (the
    /// sink sends only what may not have been sent).
    pub async fn start_child(
        &self,
        parent_run_id: &str,
        node_id: &str,
        child_run_id: &str,
        workflow_id: &str,
    ) -> Result<ChildStart, ServiceError> {
        let Some(parent) = self.load_hydrated(parent_run_id).await? else { return Ok(ChildStart::NotExpected) };
        if !expects(&parent, node_id, child_run_id) {
            // An earlier delivery may have created the child and then failed before it could
            // cancel it (see `cancel_if_unexpected`): a live child of this node is cancelled now.
            let stray = self.store.load_run(child_run_id).await?.filter(|child| {
                !child.status.is_terminal()
                    && child.parent.as_ref().is_some_and(|link| link.run_id == parent_run_id && link.node_id == node_id)
            });
            if stray.is_some() {
                self.cancel_if_unexpected(parent_run_id, node_id, child_run_id).await?;
            }
            return Ok(ChildStart::NotExpected);
        }
        if let Some(child) = self.store.load_run(child_run_id).await? {
            // A redelivered start may follow a crash between the child's creation and the
            // send of its first effects, which no other task of the child would repair.
            let outstanding = engine::outstanding_effects(&child);
            self.effects.resend_outstanding(child_run_id, &outstanding).await?;
            return Ok(ChildStart::AlreadyExists);
        }
        self.create_child(&parent, node_id, child_run_id, workflow_id).await
    }

    /// Creates and starts child `child_run_id` of `workflow_id` for `parent`'s node, `parent`
    /// being the parent's state as read (or as just committed): nothing if the node no longer
    /// waits for it. The creation is conditional (the child's id is deterministic), so a
    /// child that exists already is left as it is and reported [`ChildStart::AlreadyExists`].
    ///
    /// The child inherits the parent's limits; when the parent's node cancels its child and
    /// the parent's deadline comes no later than the child's, the child gets no deadline
    /// timer of its own ([`crate::run::ParentLink::deadline_covered`]): the parent's deadline
    /// cancels it first.
    pub(super) async fn create_child(
        &self,
        parent: &RunState,
        node_id: &str,
        child_run_id: &str,
        workflow_id: &str,
    ) -> Result<ChildStart, ServiceError> {
        if !expects(parent, node_id, child_run_id) {
            return Ok(ChildStart::NotExpected);
        }
        let parent_run_id = parent.run_id.as_str();
        let depth = parent.parent.as_ref().map_or(0, |link| link.depth) + 1;
        if depth > MAX_CHILD_DEPTH {
            let error =
                RunError::new("subworkflow_depth_exceeded", format!("child runs nest at most {MAX_CHILD_DEPTH} deep"));
            self.refuse_child(parent_run_id, node_id, child_run_id, error).await?;
            return Ok(ChildStart::Refused);
        }
        let found = self.find_workflow(&parent.tenant, workflow_id).await;
        let (namespace, workflow) = match found {
            Ok((_, workflow)) if workflow.gap.is_some() => {
                let gap = workflow.gap.clone().expect("checked");
                let error = RunError::new(
                    "unknown_child_workflow",
                    format!("the child workflow cannot run here: {}", gap.message),
                );
                self.refuse_child(parent_run_id, node_id, child_run_id, error).await?;
                return Ok(ChildStart::Refused);
            }
            Ok(found) => found,
            Err(ServiceError::NotFound { .. }) => {
                let error = RunError::new("unknown_child_workflow", format!("no workflow `{workflow_id}` is loaded"));
                self.refuse_child(parent_run_id, node_id, child_run_id, error).await?;
                return Ok(ChildStart::Refused);
            }
            Err(error) => return Err(error),
        };
        let mut inputs = Map::new();
        for variable in &workflow.definition.variables {
            if let Some(default) = &variable.default_value {
                inputs.insert(variable.name.clone(), default.clone());
            }
        }
        let parent_workflow = self.pinned_workflow(parent).await?;
        inputs.extend(crate::engine::child_inputs(&parent_workflow, parent, node_id));
        inputs.extend(crate::engine::agent_tool_inputs(parent, node_id));
        let now = self.clock.now();
        let mut child = new_run(
            child_run_id.to_owned(),
            &parent.principal,
            &workflow,
            namespace,
            inputs,
            parent.limits.clone(),
            now,
        );
        let child_deadline = now.saturating_add(child.limits.run_duration_ms);
        let deadline_covered = crate::engine::cancels_its_child(&parent_workflow, node_id)
            && parent.deadline().is_some_and(|deadline| deadline <= child_deadline);
        child.parent =
            Some(ParentLink { run_id: parent_run_id.to_owned(), node_id: node_id.to_owned(), depth, deadline_covered });
        child.scope_id = parent.scope_id.clone();
        child.disabled_capabilities = parent.disabled_capabilities.clone();
        child.mocks_allowed |= parent.mocks_allowed;
        child.retention_ms = parent.retention_ms;
        child.replay = self.child_link(parent, node_id, child_run_id).await?;
        // A rerun's child reruns the source's child in its place, with its cache.
        child.cache = parent.cache.as_ref().and_then(|link| {
            let activation = parent.nodes.get(node_id).map_or(0, |node| node.activation);
            let source =
                engine::counterpart_child_id(parent_run_id, &link.source_run_id, node_id, activation, child_run_id)?;
            Some(crate::cache::CacheLink { source_run_id: source })
        });
        let mut outcome = engine::apply(&workflow, &mut child, Input::Start, now);
        child.version = 1;
        let _spilled = self.spill(&mut child, None, &mut outcome.events, None).await?;
        outcome.effects.extend(self.integration_effects(&child, &outcome.events).await?);
        match self.store.create_run(&child, &outcome.events, &outcome.effects, None).await {
            Ok(CreateResult::Created) => {
                self.send_effects(child_run_id, child.version, &outcome.effects).await;
                self.cancel_if_unexpected(parent_run_id, node_id, child_run_id).await?;
                Ok(ChildStart::Created)
            }
            Ok(CreateResult::Existing(_)) | Err(StoreError::Conflict) => Ok(ChildStart::AlreadyExists),
            Err(error) => Err(error.into()),
        }
    }

    /// The parent was read before the child existed: a cancel of the child issued in between
    /// (the parent cancelled, a fan-out's join deciding without this child) found no run to
    /// cancel. Read the parent again; if its node no longer waits for the child, cancel it
    /// now, so no child outlives the parent's wish.
    async fn cancel_if_unexpected(
        &self,
        parent_run_id: &str,
        node_id: &str,
        child_run_id: &str,
    ) -> Result<(), ServiceError> {
        let parent = self.store.load_run(parent_run_id).await?;
        if parent.as_ref().is_some_and(|parent| expects(parent, node_id, child_run_id)) {
            return Ok(());
        }
        let input = Input::Cancel { reason: Some(crate::engine::PARENT_CANCELLED.to_owned()) };
        self.apply_until_committed(child_run_id, input).await
    }

    async fn refuse_child(
        &self,
        parent_run_id: &str,
        node_id: &str,
        child_run_id: &str,
        error: RunError,
    ) -> Result<(), ServiceError> {
        let input = Input::ChildFinished {
            node_id: node_id.to_owned(),
            child_run_id: child_run_id.to_owned(),
            status: RunStatus::Failed,
            variables: Map::new(),
            error: Some(error),
        };
        self.apply_until_committed(parent_run_id, input).await
    }

    /// The parent's input for a child's notice, from the child's current state: it ended,
    /// or it now waits on an interrupt (or runs again), which the parent mirrors.
    pub async fn child_outcome(&self, child_run_id: &str, parent_node_id: &str) -> Result<Option<Input>, ServiceError> {
        Ok(self.load_hydrated(child_run_id).await?.map(|child| notice_input(child, parent_node_id)))
    }

    /// Applies `input` to `run_id` and commits, re-deciding after lost races.
    pub async fn apply_until_committed(&self, run_id: &str, input: Input) -> Result<(), ServiceError> {
        self.advance(None, run_id, input, &super::NoHooks).await.map(|_| ())
    }
}

/// Whether `parent`'s node `node_id` still waits for child `child_run_id`.
fn expects(parent: &RunState, node_id: &str, child_run_id: &str) -> bool {
    !parent.status.is_terminal()
        && parent.nodes.get(node_id).is_some_and(|node| {
            node.status == NodeStatus::WaitingChild && node.child_run_id.as_deref() == Some(child_run_id)
        })
}

/// The parent's input for a notice from `child` in its current state: it ended, or it now
/// waits on an interrupt (or runs again).
pub(super) fn notice_input(child: RunState, parent_node_id: &str) -> Input {
    if !child.status.is_terminal() {
        return Input::ChildStatus {
            node_id: parent_node_id.to_owned(),
            child_run_id: child.run_id,
            status: child.status,
        };
    }
    Input::ChildFinished {
        node_id: parent_node_id.to_owned(),
        child_run_id: child.run_id,
        status: child.status,
        variables: child.variables,
        error: child.error.map(|error| {
            RunError::new(
                "child_failed",
                format!("the child run ended {}: {} ({})", child.status.as_str(), error.message, error.code),
            )
        }),
    }
}
