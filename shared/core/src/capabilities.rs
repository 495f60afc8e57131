//! Capabilities an operator may switch off at run time — the conformance suite's
//! capability-toggle seam uses this to check refusal paths on a live host. The overlay lives
//! in the store ([`crate::ports::HostSettings`]), so every process (every Lambda instance)
//! agrees; discovery, registration and run creation read it. A run keeps the switches that
//! were off when it was created, so its behaviour does not change mid-run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The settings key the overlay is stored under.
pub const OVERLAY_KEY: &str = "capability-overlay";

/// A capability that can be switched off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Toggle {
    /// `agents.dispatchMapping`: mapping fields on `core.dispatch`.
    DispatchMapping,
    /// `subWorkflow.inputMapping`: `inputMapping` on `core.subWorkflow`.
    SubWorkflowInputMapping,
    /// `dispatch.perItemInput`: `nextWorkerInputs` on a decision.
    PerItemInput,
}

impl Toggle {
    /// Every toggle.
    pub const ALL: [Toggle; 3] = [Self::DispatchMapping, Self::SubWorkflowInputMapping, Self::PerItemInput];

    /// The capability's discovery path.
    pub fn name(self) -> &'static str {
        match self {
            Self::DispatchMapping => "agents.dispatchMapping",
            Self::SubWorkflowInputMapping => "subWorkflow.inputMapping",
            Self::PerItemInput => "dispatch.perItemInput",
        }
    }

    /// Parses a discovery path.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|toggle| toggle.name() == name)
    }
}

/// Switches set by the seam: capability path → on/off. Absent means on (the build's default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlay(pub BTreeMap<String, bool>);

impl Overlay {
    /// Whether `toggle` is on.
    pub fn enabled(&self, toggle: Toggle) -> bool {
        self.0.get(toggle.name()).copied().unwrap_or(true)
    }

    /// The capabilities switched off, by name (what a new run records).
    pub fn disabled(&self) -> Vec<String> {
        Toggle::ALL.into_iter().filter(|t| !self.enabled(*t)).map(|t| t.name().to_owned()).collect()
    }
}
