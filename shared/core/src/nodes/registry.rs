//! The node registry: which node kinds a host runs. Pure kinds are the engine's own (see
//! [`super::kind`]); activities (kinds with side effects, [`crate::activity::Activity`]) are
//! registered by each composition root with their executors, so the embedded binary carries
//! only what it registers. Workflow compilation, the capability gap, config checks and
//! discovery (`nodeTypes`, capability blocks) are all derived from one registry.

use std::sync::Arc;

use serde_json::Value;

use crate::activity::Activity;

/// The node kinds one host runs.
#[derive(Debug, Clone, Default)]
pub struct NodeRegistry {
    activities: Vec<Arc<dyn Activity>>,
    supervisor_model: Option<Arc<dyn Activity>>,
    queue_notifies: bool,
}

impl NodeRegistry {
    /// A registry with the engine's pure kinds and no activity.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same registry on a host whose external workers may be notified on an SQS queue
    /// (`settings.notifyUrl` or `callbackUrl` an SQS queue ARN; the AWS host).
    pub fn with_queue_notifies(mut self) -> Self {
        self.queue_notifies = true;
        self
    }

    /// Whether notifies may go to SQS queues ([`NodeRegistry::with_queue_notifies`]).
    pub fn queue_notifies(&self) -> bool {
        self.queue_notifies
    }

    /// Registers an activity kind and its executor.
    ///
    /// # Panics
    ///
    /// When its `typeId` is already taken (a pure kind or another activity): a composition
    /// mistake, found at start.
    pub fn register(mut self, activity: Arc<dyn Activity>) -> Self {
        let type_id = activity.type_id();
        assert!(
            super::kind(type_id).is_none() && self.activity(type_id).is_none(),
            "node kind `{type_id}` registered twice"
        );
        self.activities.push(activity);
        self
    }

    /// Registers the executor of a model-backed `core.orchestrator.supervisor` (a supervisor
    /// whose config names a model route, [`crate::orchestrator::model::routed`]): such a
    /// node compiles as an activity of this executor. The type id stays the pure kind's.
    pub fn with_supervisor_model(mut self, activity: Arc<dyn Activity>) -> Self {
        self.supervisor_model = Some(activity);
        self
    }

    /// The activity a node of `type_id` with `config` runs as, if it is one: a registered
    /// activity, or the model-backed supervisor.
    pub fn activity_for(&self, type_id: &str, config: &serde_json::Map<String, Value>) -> Option<&Arc<dyn Activity>> {
        if type_id == crate::model::graph::SUPERVISOR_TYPE_ID && crate::orchestrator::model::routed(config) {
            return self.supervisor_model.as_ref();
        }
        self.activity(type_id)
    }

    /// The activity implementing `type_id`, if one is registered.
    pub fn activity(&self, type_id: &str) -> Option<&Arc<dyn Activity>> {
        self.activities.iter().find(|activity| activity.type_id() == type_id)
    }

    /// Whether this host runs `type_id` (pure or activity).
    pub fn runs(&self, type_id: &str) -> bool {
        super::kind(type_id).is_some() || self.activity(type_id).is_some()
    }

    /// Every type id this host runs, pure kinds first, then activities in registration order.
    pub fn type_ids(&self) -> Vec<&'static str> {
        let mut ids = super::pure_type_ids();
        ids.extend(self.activities.iter().map(|activity| activity.type_id()));
        ids
    }

    /// The discovery capability blocks the registered activities add.
    pub fn capabilities(&self) -> Vec<(&'static str, Value)> {
        self.activities.iter().chain(&self.supervisor_model).flat_map(|activity| activity.capabilities()).collect()
    }
}
