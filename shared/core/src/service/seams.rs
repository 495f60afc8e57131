//! The capability overlay and the test seams' use cases. The overlay is read only when the
//! host runs with its test seams enabled; otherwise every toggleable capability is on and no
//! read is spent on it.

use serde_json::{json, Map, Value};

use super::Services;
use crate::capabilities::{Overlay, Toggle, OVERLAY_KEY};
use crate::error::ServiceError;
use crate::orchestrator::dispatch::raw_maps;
use crate::run::RunState;

impl Services {
    /// The capability overlay in force (all on unless the test seams are enabled).
    pub async fn capability_overlay(&self) -> Result<Overlay, ServiceError> {
        if !self.test_seams {
            return Ok(Overlay::default());
        }
        match self.store.setting(OVERLAY_KEY).await? {
            Some(value) => serde_json::from_value(value).map_err(|_| ServiceError::Internal),
            None => Ok(Overlay::default()),
        }
    }

    /// Switches `name` on or off (`None` forgets the switch); `reset` forgets every switch.
    pub async fn toggle_capability(
        &self,
        name: Option<&str>,
        value: Option<bool>,
        reset: bool,
    ) -> Result<Overlay, ServiceError> {
        let mut overlay = if reset { Overlay::default() } else { self.capability_overlay().await? };
        if let Some(name) = name {
            let toggle = Toggle::parse(name).ok_or_else(|| {
                let names: Vec<&str> = Toggle::ALL.iter().map(|t| t.name()).collect();
                ServiceError::validation(format!("`{name}` cannot be toggled"), json!({ "toggleable": names }))
            })?;
            match value {
                Some(on) => overlay.0.insert(toggle.name().to_owned(), on),
                None => overlay.0.remove(toggle.name()),
            };
        }
        let stored = serde_json::to_value(&overlay).map_err(|_| ServiceError::Internal)?;
        self.store.put_setting(OVERLAY_KEY, &stored).await?;
        Ok(overlay)
    }

    /// RFC 0022's refusal rules on the raw document, before schema validation: non-empty
    /// mapping fields need their capability (`400 validation_error` with
    /// `details.requiredCapability`).
    pub(super) async fn refusal_scan(&self, document: &Value) -> Result<(), ServiceError> {
        let overlay = self.capability_overlay().await?;
        for node in document.get("nodes").and_then(Value::as_array).into_iter().flatten() {
            let type_id = node.get("typeId").and_then(Value::as_str).unwrap_or_default();
            let node_id = node.get("id").or_else(|| node.get("nodeId")).cloned().unwrap_or(Value::Null);
            let config = node.get("config").cloned().unwrap_or(Value::Null);
            let needs = match type_id {
                crate::engine::DISPATCH_TYPE_ID if raw_maps(&config) => Some(Toggle::DispatchMapping),
                "core.subWorkflow"
                    if config.get("inputMapping").and_then(Value::as_object).is_some_and(|m| !m.is_empty()) =>
                {
                    Some(Toggle::SubWorkflowInputMapping)
                }
                _ => None,
            };
            if let Some(toggle) = needs.filter(|toggle| !overlay.enabled(*toggle)) {
                return Err(ServiceError::validation(
                    format!(
                        "node {node_id} uses mapping fields that need {}, which this host does not advertise",
                        toggle.name()
                    ),
                    json!({ "requiredCapability": toggle.name(), "offendingTypeId": type_id, "nodeId": node_id }),
                ));
            }
        }
        Ok(())
    }

    /// Sets variables of a live run (the mid-run mutation seam).
    pub async fn set_run_variables(
        &self,
        tenant: &str,
        run_id: &str,
        variables: Map<String, Value>,
    ) -> Result<RunState, ServiceError> {
        Ok(self.operate(Some(tenant), run_id, crate::engine::Input::SetVariables { variables }).await?.run)
    }
}
