//! A process that "dies" after a commit: a sink that sends some (or none) of the page's
//! effects and then fails without marking or enlisting anything, as a dead process would.

use std::sync::Arc;

use async_trait::async_trait;
use trellis_aws::app::node_registry;
use trellis_aws::effects::SqsEffects;
use trellis_aws::AwsApp;
use trellis_core::engine::Effect;
use trellis_core::ports::{EffectSink, IdGenerator};
use trellis_core::service::{Ports, Services};
use trellis_core::StoreError;
use trellis_worker::SystemClock;

/// Sends the first `survives` effects of a commit, then dies.
struct Dying {
    inner: Arc<SqsEffects>,
    survives: usize,
}

#[async_trait]
impl EffectSink for Dying {
    async fn send(&self, run_id: &str, effects: &[Effect]) -> Result<(), StoreError> {
        self.inner.send(run_id, effects).await
    }

    async fn send_committed(&self, run_id: &str, _version: u64, effects: &[Effect]) -> Result<(), StoreError> {
        self.inner.send(run_id, &effects[..self.survives.min(effects.len())]).await?;
        Err(StoreError::Unavailable("the process died".into()))
    }
}

struct Ids;

impl IdGenerator for Ids {
    fn run_id(&self) -> String {
        format!("run-{}", uuid::Uuid::new_v4())
    }
}

/// The use cases of `app` (its store, with or without outbox entries), sending through a
/// sink that dies after `survives` effects.
pub fn dying_services(app: &AwsApp, survives: usize) -> Services {
    let ports = Ports {
        store: app.store.clone(),
        effects: Arc::new(Dying { inner: app.effects.clone(), survives }),
        clock: Arc::new(SystemClock),
        ids: Arc::new(Ids),
        notifier: Arc::new(trellis_aws::notifier::PollingNotifier),
    };
    Services::new(ports, app.settings.limits).with_nodes(node_registry(&app.settings))
}
