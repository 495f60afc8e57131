//! Definitions compiled into every host build: the vendored OpenWOP conformance fixtures
//! (see `conformance/fixtures/NOTICE.md`) and the fixture expectation table that decides
//! which fixture ids discovery advertises. Data only; loading them is the host's job.

use serde_json::Value;

/// The fixture expectation table, `conformance/fixture-expectations.json`.
pub const EXPECTATIONS: &str = include_str!("../../../conformance/fixture-expectations.json");

/// The vendored fixture documents, by file name.
pub const FIXTURES: &[(&str, &str)] = &[
    ("conformance-noop.json", include_str!("../../../conformance/fixtures/conformance-noop.json")),
    ("conformance-delay.json", include_str!("../../../conformance/fixtures/conformance-delay.json")),
    ("conformance-cancellable.json", include_str!("../../../conformance/fixtures/conformance-cancellable.json")),
    ("conformance-idempotent.json", include_str!("../../../conformance/fixtures/conformance-idempotent.json")),
    ("conformance-multi-node.json", include_str!("../../../conformance/fixtures/conformance-multi-node.json")),
    ("conformance-replay-effect.json", include_str!("../../../conformance/fixtures/conformance-replay-effect.json")),
    (
        "conformance-replay-side-effect.json",
        include_str!("../../../conformance/fixtures/conformance-replay-side-effect.json"),
    ),
    ("conformance-failure.json", include_str!("../../../conformance/fixtures/conformance-failure.json")),
    (
        "conformance-capability-missing.json",
        include_str!("../../../conformance/fixtures/conformance-capability-missing.json"),
    ),
    ("conformance-identity.json", include_str!("../../../conformance/fixtures/conformance-identity.json")),
    ("conformance-cap-breach.json", include_str!("../../../conformance/fixtures/conformance-cap-breach.json")),
    (
        "conformance-run-duration-breach.json",
        include_str!("../../../conformance/fixtures/conformance-run-duration-breach.json"),
    ),
    (
        "conformance-subworkflow-child.json",
        include_str!("../../../conformance/fixtures/conformance-subworkflow-child.json"),
    ),
    (
        "conformance-subworkflow-parent.json",
        include_str!("../../../conformance/fixtures/conformance-subworkflow-parent.json"),
    ),
    ("conformance-approval.json", include_str!("../../../conformance/fixtures/conformance-approval.json")),
    ("conformance-clarification.json", include_str!("../../../conformance/fixtures/conformance-clarification.json")),
    (
        "conformance-interrupt-quorum.json",
        include_str!("../../../conformance/fixtures/conformance-interrupt-quorum.json"),
    ),
    (
        "conformance-interrupt-external-event.json",
        include_str!("../../../conformance/fixtures/conformance-interrupt-external-event.json"),
    ),
    (
        "conformance-interrupt-auth-required.json",
        include_str!("../../../conformance/fixtures/conformance-interrupt-auth-required.json"),
    ),
    (
        "conformance-interrupt-parent-child-cancel.json",
        include_str!("../../../conformance/fixtures/conformance-interrupt-parent-child-cancel.json"),
    ),
    (
        "conformance-interrupt-parent-child-cancel-child.json",
        include_str!("../../../conformance/fixtures/conformance-interrupt-parent-child-cancel-child.json"),
    ),
    ("conformance-dispatch-loop.json", include_str!("../../../conformance/fixtures/conformance-dispatch-loop.json")),
    (
        "conformance-orchestrator-dispatch.json",
        include_str!("../../../conformance/fixtures/conformance-orchestrator-dispatch.json"),
    ),
    (
        "conformance-orchestrator-terminate.json",
        include_str!("../../../conformance/fixtures/conformance-orchestrator-terminate.json"),
    ),
    (
        "conformance-dispatch-input-mapping.json",
        include_str!("../../../conformance/fixtures/conformance-dispatch-input-mapping.json"),
    ),
    (
        "conformance-dispatch-input-mapping-child.json",
        include_str!("../../../conformance/fixtures/conformance-dispatch-input-mapping-child.json"),
    ),
    (
        "conformance-dispatch-input-mapping-no-default.json",
        include_str!("../../../conformance/fixtures/conformance-dispatch-input-mapping-no-default.json"),
    ),
    (
        "conformance-dispatch-output-mapping.json",
        include_str!("../../../conformance/fixtures/conformance-dispatch-output-mapping.json"),
    ),
    (
        "conformance-dispatch-output-mapping-child.json",
        include_str!("../../../conformance/fixtures/conformance-dispatch-output-mapping-child.json"),
    ),
    (
        "conformance-dispatch-deterministic-fail-child.json",
        include_str!("../../../conformance/fixtures/conformance-dispatch-deterministic-fail-child.json"),
    ),
    (
        "conformance-dispatch-cancellable-child.json",
        include_str!("../../../conformance/fixtures/conformance-dispatch-cancellable-child.json"),
    ),
    (
        "conformance-dispatch-cross-worker-handoff.json",
        include_str!("../../../conformance/fixtures/conformance-dispatch-cross-worker-handoff.json"),
    ),
    (
        "conformance-dispatch-cross-worker-handoff-child-a.json",
        include_str!("../../../conformance/fixtures/conformance-dispatch-cross-worker-handoff-child-a.json"),
    ),
    (
        "conformance-dispatch-cross-worker-handoff-child-b.json",
        include_str!("../../../conformance/fixtures/conformance-dispatch-cross-worker-handoff-child-b.json"),
    ),
    (
        "conformance-dispatch-per-worker-override.json",
        include_str!("../../../conformance/fixtures/conformance-dispatch-per-worker-override.json"),
    ),
    (
        "conformance-subworkflow-input-mapping.json",
        include_str!("../../../conformance/fixtures/conformance-subworkflow-input-mapping.json"),
    ),
    (
        "conformance-subworkflow-input-mapping-child.json",
        include_str!("../../../conformance/fixtures/conformance-subworkflow-input-mapping-child.json"),
    ),
    (
        "conformance-subworkflow-input-mapping-no-default.json",
        include_str!("../../../conformance/fixtures/conformance-subworkflow-input-mapping-no-default.json"),
    ),
    (
        "conformance-subworkflow-mid-run-mutation.json",
        include_str!("../../../conformance/fixtures/conformance-subworkflow-mid-run-mutation.json"),
    ),
    (
        "conformance-subworkflow-mid-run-mutation-child.json",
        include_str!("../../../conformance/fixtures/conformance-subworkflow-mid-run-mutation-child.json"),
    ),
    (
        "conformance-orchestrator-low-confidence.json",
        include_str!("../../../conformance/fixtures/conformance-orchestrator-low-confidence.json"),
    ),
    (
        "conformance-multi-agent-confidence-escalation.json",
        include_str!("../../../conformance/fixtures/conformance-multi-agent-confidence-escalation.json"),
    ),
    (
        "conformance-multi-agent-handoff.json",
        include_str!("../../../conformance/fixtures/conformance-multi-agent-handoff.json"),
    ),
    (
        "conformance-multi-agent-handoff-child.json",
        include_str!("../../../conformance/fixtures/conformance-multi-agent-handoff-child.json"),
    ),
    (
        "openwop-smoke-byok-roundtrip.json",
        include_str!("../../../conformance/fixtures/openwop-smoke-byok-roundtrip.json"),
    ),
    (
        "conformance-agent-reasoning.json",
        include_str!("../../../conformance/fixtures/conformance-agent-reasoning.json"),
    ),
    (
        "conformance-agent-reasoning-streaming.json",
        include_str!("../../../conformance/fixtures/conformance-agent-reasoning-streaming.json"),
    ),
    (
        "conformance-agent-low-confidence.json",
        include_str!("../../../conformance/fixtures/conformance-agent-low-confidence.json"),
    ),
    ("openwop-smoke-cost-emit.json", include_str!("../../../conformance/fixtures/openwop-smoke-cost-emit.json")),
    ("conformance-stream-text.json", include_str!("../../../conformance/fixtures/conformance-stream-text.json")),
];

/// The fixture ids the expectation table covers, in table order.
pub fn expected_fixture_ids() -> Vec<String> {
    let table: Value = serde_json::from_str(EXPECTATIONS).expect("the expectation table is JSON");
    table["fixtures"]
        .as_array()
        .map(|entries| entries.iter().filter_map(|entry| entry["id"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_entry_has_a_vendored_fixture() {
        for id in expected_fixture_ids() {
            let file = format!("{id}.json");
            assert!(FIXTURES.iter().any(|(name, _)| *name == file), "{id} is in the table but not vendored");
        }
    }
}
