//! The kinds a host registers only when it runs conformance ([`register`]):
//! `conformance.secret.echo` ([`crate::secrets::SecretEchoActivity`]) and this module's
//! `core.conformance.side-effect` (the replay fixtures' side-effecting node, RFC 0140): each
//! executed attempt performs one countable effect — it adds one to this process's effect
//! counter ([`trellis_core::activity::effects`]) — and completes with `{effect: n}`. The test seam `GET
//! /v1/host/sample/replay/effect-count` reads the counter, so a test can see that a replay
//! fork resolved the node from its source instead of performing it again.
//!
//! Registered only when the host runs conformance (`OPENWOP_TEST_SEAM_ENABLED`); elsewhere
//! it is an unknown kind. The counter is per process: on the embedded host that is the host.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{json, Map, Value};
use trellis_core::activity::{Activity, ActivityCall, ActivityResult, ProgressSink};
use trellis_core::interrupt::request::ConfigIssue;
use trellis_core::nodes::{NodeContext, NodeRegistry};
use trellis_core::run::RunError;
use trellis_core::secrets::SecretResolver;

use crate::secrets::SecretEchoActivity;

/// `nodes` with the conformance-only kinds (for a host with its test seams on), the secret
/// echo resolving through `secrets`.
pub fn register(nodes: NodeRegistry, secrets: Option<Arc<dyn SecretResolver>>) -> NodeRegistry {
    nodes.register(Arc::new(SecretEchoActivity::new(secrets))).register(Arc::new(SideEffectActivity))
}

/// The node's `typeId`.
pub const TYPE_ID: &str = "core.conformance.side-effect";

/// The `core.conformance.side-effect` executor.
#[derive(Debug, Clone, Copy, Default)]
pub struct SideEffectActivity;

#[async_trait]
impl Activity for SideEffectActivity {
    fn type_id(&self) -> &'static str {
        TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &Map<String, Value>) -> Result<(), ConfigIssue> {
        match config.keys().next() {
            Some(unknown) => {
                Err(ConfigIssue::Invalid(format!("config.{unknown} is not a {TYPE_ID} field (it takes none)")))
            }
            None => Ok(()),
        }
    }

    fn attempt_timeout_ms(&self, _config: &Map<String, Value>) -> u64 {
        1_000
    }

    fn prepare(&self, _context: &NodeContext<'_>) -> Result<Value, RunError> {
        Ok(json!({}))
    }

    async fn execute(&self, _call: &ActivityCall, _progress: &dyn ProgressSink) -> ActivityResult {
        let effect = trellis_core::activity::effects::perform();
        let mut outputs = Map::new();
        outputs.insert("effect".to_owned(), json!(effect));
        Ok(outputs)
    }
}
