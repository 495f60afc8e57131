//! The step-queue message: a schema version and ids, nothing else. Everything a handler
//! needs beyond it is read from the store.

use serde::{Deserialize, Serialize};
use trellis_core::engine::Effect;
use trellis_core::ports::Task;

/// The message schema version this build writes and reads.
pub const STEP_MESSAGE_VERSION: u32 = 1;

/// A step task on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepMessage {
    /// Schema version.
    pub v: u32,
    /// The run.
    pub run_id: String,
    /// The task's deterministic id.
    pub task_id: String,
    /// What to do (node id, activation, due time).
    pub effect: Effect,
}

/// Why a message was refused (it goes to the dead-letter queue).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unusable step message: {0}")]
pub struct MessageError(pub String);

impl StepMessage {
    /// The message for `effect` of `run_id`.
    pub fn new(run_id: &str, effect: &Effect) -> Self {
        Self {
            v: STEP_MESSAGE_VERSION,
            run_id: run_id.to_owned(),
            task_id: effect.task_id(run_id),
            effect: effect.clone(),
        }
    }

    /// JSON body.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("step messages serialize")
    }

    /// Parses and checks a body: known version, and a task id that matches its effect.
    pub fn decode(body: &str) -> Result<Self, MessageError> {
        let message: Self = serde_json::from_str(body).map_err(|error| MessageError(error.to_string()))?;
        if message.v != STEP_MESSAGE_VERSION {
            return Err(MessageError(format!("schema version {} is not {STEP_MESSAGE_VERSION}", message.v)));
        }
        if message.task_id != message.effect.task_id(&message.run_id) {
            return Err(MessageError("the task id does not match the effect".into()));
        }
        Ok(message)
    }

    /// The task this message delivers, on its `deliveries`-th receive.
    pub fn task(&self, deliveries: u32) -> Task {
        Task { id: self.task_id.clone(), run_id: self.run_id.clone(), effect: self.effect.clone(), deliveries }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_does_not_know() {
        let effect = Effect::Step { node_id: "a".into(), activation: 1, due_at: 5 };
        let message = StepMessage::new("run-1", &effect);
        assert_eq!(StepMessage::decode(&message.encode()).unwrap(), message);
        assert!(message.encode().len() < 300, "messages carry ids only");
        assert!(StepMessage::decode("not json").is_err());
        let mut newer = message.clone();
        newer.v = 2;
        assert!(StepMessage::decode(&newer.encode()).is_err());
        let mut forged = message;
        forged.task_id = "run-1/step/b/1".into();
        assert!(StepMessage::decode(&forged.encode()).is_err());
    }
}
