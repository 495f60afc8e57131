//! Transition-table tests of the model-backed supervisor tick: the answer recorded as a
//! decision, the orchestration context the model call gets, CP-1 on the model's confidence,
//! an invalid answer, the admission checks before any call.

use serde_json::{json, Value};

use super::INVALID_ANSWER;
use crate::engine::tests::pending;
use crate::engine::{apply, Effect, Input, Outcome};
use crate::error::DefinitionError;
use crate::interrupt::request::ConfigIssue;
use crate::interrupt::{Resolution, Resolver};
use crate::model::{Bounds, Workflow};
use crate::nodes::NodeRegistry;
use crate::run::{RunState, RunStatus};
use crate::testing::activity::{success, ScriptedActivity};

fn supervisor_config(extra: Value) -> Value {
    let mut config = json!({"route": "openai/gpt-test", "goal": "answer the question",
        "workers": [{"id": "researcher", "description": "finds facts"}, "writer"],
        "successCriteria": [{"key": "answered", "description": "the question is answered"}]});
    for (key, value) in extra.as_object().cloned().unwrap_or_default() {
        config[key] = value;
    }
    config
}

fn looped(registry: &NodeRegistry, supervisor: Value) -> Workflow {
    let document = json!({"id": "research", "name": "research",
        "nodes": [{"id": "sup", "typeId": "core.orchestrator.supervisor", "config": supervisor},
                  {"id": "dispatch", "typeId": "core.dispatch", "config": {}}],
        "edges": [{"id": "e1", "sourceNodeId": "sup", "targetNodeId": "dispatch"},
                  {"id": "e2", "sourceNodeId": "dispatch", "targetNodeId": "sup"}]});
    Workflow::compile_with(document, registry, Bounds::default()).unwrap()
}

fn model_registry() -> NodeRegistry {
    NodeRegistry::new().with_supervisor_model(ScriptedActivity::new(vec![]))
}

fn started(wf: &Workflow) -> RunState {
    let mut state = pending(wf, json!({}));
    apply(wf, &mut state, Input::Start, 0);
    state
}

fn step(wf: &Workflow, state: &mut RunState, node: &str) -> Outcome {
    let activation = state.nodes[node].activation;
    apply(wf, state, Input::Step { node_id: node.into(), activation }, 1)
}

/// The supervisor's model call answers `answer` (as `outputs.data`).
fn answer(wf: &Workflow, state: &mut RunState, answer: Value) -> Outcome {
    let activation = state.nodes["sup"].activation;
    let result = success(json!({"text": answer.to_string(), "data": answer, "model": "gpt-test"}));
    apply(wf, state, Input::ActivityFinished { node_id: "sup".into(), activation, attempt: 0, result }, 2)
}

fn kinds(outcome: &Outcome) -> Vec<&str> {
    outcome.events.iter().map(|e| e.event_type.as_str()).collect()
}

fn executes(outcome: &Outcome) -> bool {
    outcome.effects.iter().any(|e| matches!(e, Effect::Execute { node_id, .. } if node_id == "sup"))
}

fn next_worker(ids: Value, confidence: Value) -> Value {
    json!({"decision": {"kind": "next-worker", "nextWorkerIds": ids, "nextWorkerInputs": null, "confidence": confidence}})
}

#[test]
fn a_model_answer_is_recorded_as_the_decision_and_the_next_tick_sees_the_history() {
    let wf = looped(&model_registry(), supervisor_config(json!({})));
    assert!(wf.activity("sup").is_some(), "a routed supervisor compiles as an activity node");
    let mut state = started(&wf);
    let tick = step(&wf, &mut state, "sup");
    assert_eq!(kinds(&tick), ["node.started"]);
    assert!(executes(&tick), "the tick is a model call outside the engine");
    let request = &state.nodes["sup"].activity.as_ref().unwrap().request;
    assert_eq!(request["inputs"]["trellis.orchestration"], json!({"tick": 1, "history": []}));

    let decided = answer(&wf, &mut state, next_worker(json!(["researcher"]), json!(0.9)));
    assert_eq!(kinds(&decided), ["runOrchestrator.decided", "node.completed"]);
    assert_eq!(
        decided.events[0].payload,
        json!({"agentId": "trellis.supervisor",
               "decision": {"kind": "next-worker", "nextWorkerIds": ["researcher"], "confidence": 0.9}})
    );
    assert_eq!(decided.events[1].payload["outputs"], json!({"decision": "next-worker"}));
    assert!(!state.variables.contains_key("sup"), "a supervisor's answer is not a plain completion");

    step(&wf, &mut state, "dispatch");
    let child_run_id = state.nodes["dispatch"].child_run_id.clone().unwrap();
    let finished = Input::ChildFinished {
        node_id: "dispatch".into(),
        child_run_id: child_run_id.clone(),
        status: RunStatus::Completed,
        variables: json!({"facts": "the sky is blue"}).as_object().cloned().unwrap(),
        error: None,
    };
    apply(&wf, &mut state, finished, 3);
    step(&wf, &mut state, "sup");
    let request = &state.nodes["sup"].activity.as_ref().unwrap().request;
    let context = &request["inputs"]["trellis.orchestration"];
    assert_eq!(context["tick"], 2);
    assert_eq!(context["history"][0]["decision"]["nextWorkerIds"], json!(["researcher"]));
    assert_eq!(
        context["history"][1],
        json!({"workerId": "researcher", "childRunId": child_run_id, "status": "completed",
               "outputs": {"facts": "the sky is blue"}})
    );

    let terminate = json!({"decision": {"kind": "terminate", "reason": "goal-reached", "confidence": null,
        "successCriteria": [{"key": "answered", "met": true}]}});
    let ended = answer(&wf, &mut state, terminate);
    assert_eq!(kinds(&ended), ["runOrchestrator.decided", "node.completed"]);
    step(&wf, &mut state, "dispatch");
    assert_eq!(state.status, RunStatus::Completed);
}

#[test]
fn a_large_worker_output_is_cut_once_keeping_the_other_fields_of_its_history_entry() {
    use crate::orchestrator::model::MAX_OUTPUT_CHARS;
    let wf = looped(&model_registry(), supervisor_config(json!({})));
    let mut state = started(&wf);
    step(&wf, &mut state, "sup");
    answer(&wf, &mut state, next_worker(json!(["researcher"]), json!(0.9)));
    step(&wf, &mut state, "dispatch");
    let child_run_id = state.nodes["dispatch"].child_run_id.clone().unwrap();
    // Quotes escape to two bytes: the cut must leave room for them too.
    let facts = "\"quoted\" ".repeat(MAX_OUTPUT_CHARS);
    let finished = Input::ChildFinished {
        node_id: "dispatch".into(),
        child_run_id: child_run_id.clone(),
        status: RunStatus::Completed,
        variables: json!({"facts": facts}).as_object().cloned().unwrap(),
        error: None,
    };
    apply(&wf, &mut state, finished, 3);
    step(&wf, &mut state, "sup");
    let request = &state.nodes["sup"].activity.as_ref().unwrap().request;
    let entry = &request["inputs"]["trellis.orchestration"]["history"][1];
    assert_eq!(entry["workerId"], "researcher", "{entry}");
    assert_eq!(entry["status"], "completed", "{entry}");
    assert_eq!(entry["childRunId"], json!(child_run_id));
    let whole = json!({"facts": facts}).to_string();
    assert_eq!(entry["outputsTruncated"], json!({"totalChars": whole.len()}));
    let shown = entry["outputs"].as_str().expect("the cut outputs are their JSON text");
    assert!(shown.starts_with("{\"facts\":\"\\\"quoted") && whole.starts_with(shown), "escaped once: {shown:.40}");
    let length = entry.to_string().len();
    assert!(length <= MAX_OUTPUT_CHARS && length > MAX_OUTPUT_CHARS - 16, "the entry fills its room: {length}");
}

#[test]
fn a_low_confidence_answer_is_held_until_ratified() {
    let wf = looped(&model_registry(), supervisor_config(json!({})));
    let mut state = started(&wf);
    step(&wf, &mut state, "sup");
    let held = answer(&wf, &mut state, next_worker(json!(["writer"]), json!(0.4)));
    assert_eq!(kinds(&held), ["node.suspended", "interrupt.requested"]);
    assert_eq!(held.events[0].payload["reason"], "low-confidence");
    assert_eq!(held.events[0].payload["observed"].as_f64(), Some(0.4));
    assert_eq!(state.status, RunStatus::WaitingApproval);
    let resolution = Resolution {
        node_id: "sup".into(),
        interrupt_id: None,
        value: json!({"action": "accept"}),
        resolver: Resolver::Principal("ops".into()),
        prior_vote: None,
    };
    let ratified = apply(&wf, &mut state, Input::Resolve(resolution), 3);
    assert!(kinds(&ratified).contains(&"runOrchestrator.decided"));
    let dispatched = step(&wf, &mut state, "dispatch");
    assert!(dispatched
        .effects
        .iter()
        .any(|e| matches!(e, Effect::StartChild { workflow_id, .. } if workflow_id == "writer")));
}

#[test]
fn an_answer_that_is_no_valid_decision_fails_the_node_with_the_spec_code() {
    let wf = looped(&model_registry(), supervisor_config(json!({})));
    let cases = [
        next_worker(json!(["someone-else"]), json!(null)),
        next_worker(json!([]), json!(null)),
        json!({"decision": {"kind": "terminate", "reason": null, "confidence": null, "successCriteria": null}}),
        json!({"decision": {"kind": "escalate"}}),
    ];
    for case in cases {
        let mut state = started(&wf);
        step(&wf, &mut state, "sup");
        let failed = answer(&wf, &mut state, case.clone());
        assert!(!kinds(&failed).contains(&"runOrchestrator.decided"), "{case}");
        let node_failed = failed.events.iter().find(|e| e.event_type == "node.failed").unwrap();
        assert_eq!(node_failed.payload["error"]["code"], INVALID_ANSWER, "{case}");
        assert_eq!(state.status, RunStatus::Failed);
    }
}

#[test]
fn the_admission_checks_run_before_any_model_call() {
    let wf = looped(&model_registry(), supervisor_config(json!({"iterationCap": 1})));
    let mut state = started(&wf);
    step(&wf, &mut state, "sup");
    answer(&wf, &mut state, next_worker(json!(["writer"]), json!(null)));
    step(&wf, &mut state, "dispatch");
    let child_run_id = state.nodes["dispatch"].child_run_id.clone().unwrap();
    let finished = Input::ChildFinished {
        node_id: "dispatch".into(),
        child_run_id,
        status: RunStatus::Completed,
        variables: Default::default(),
        error: None,
    };
    apply(&wf, &mut state, finished, 3);
    let capped = step(&wf, &mut state, "sup");
    assert!(!executes(&capped), "no model call past the cap");
    assert_eq!(kinds(&capped), ["node.started", "cap.breached", "node.failed", "run.failed"]);
}

#[test]
fn a_routed_supervisor_on_a_host_without_the_model_source_fails_plainly() {
    let wf = looped(&NodeRegistry::new(), supervisor_config(json!({})));
    assert!(wf.activity("sup").is_none());
    let mut state = pending(&wf, json!({}));
    state.mocks_allowed = true;
    apply(&wf, &mut state, Input::Start, 0);
    let tick = step(&wf, &mut state, "sup");
    let failed = tick.events.iter().find(|e| e.event_type == "node.failed").unwrap();
    assert_eq!(failed.payload["error"]["code"], "decision_source_unavailable");
}

#[test]
fn an_ask_user_answer_reaches_the_next_tick() {
    let wf = looped(&model_registry(), supervisor_config(json!({})));
    let mut state = started(&wf);
    step(&wf, &mut state, "sup");
    answer(&wf, &mut state, json!({"decision": {"kind": "ask-user", "prompt": "which sky?"}}));
    step(&wf, &mut state, "dispatch");
    assert_eq!(state.status, RunStatus::WaitingInput);
    let resolution = Resolution {
        node_id: "dispatch".into(),
        interrupt_id: None,
        value: json!({"answers": {"answer": "the evening sky"}}),
        resolver: Resolver::Principal("ops".into()),
        prior_vote: None,
    };
    apply(&wf, &mut state, Input::Resolve(resolution), 3);
    step(&wf, &mut state, "sup");
    let request = &state.nodes["sup"].activity.as_ref().unwrap().request;
    let context = &request["inputs"]["trellis.orchestration"];
    assert_eq!(context["userAnswer"], "the evening sky");
    assert_eq!(context["history"][0]["decision"], json!({"kind": "ask-user", "prompt": "which sky?"}));
}

/// A model-backed executor whose check refuses a goal mentioning "unserved" (as a provider
/// this host lacks) and one mentioning "broken" (as a template error).
#[derive(Debug)]
struct Checking;

#[async_trait::async_trait]
impl crate::activity::Activity for Checking {
    fn type_id(&self) -> &'static str {
        crate::model::graph::SUPERVISOR_TYPE_ID
    }

    fn check(&self, _node_id: &str, config: &serde_json::Map<String, Value>) -> Result<(), ConfigIssue> {
        match config["goal"].as_str() {
            Some("unserved") => Err(ConfigIssue::Capability("aiProviders.test")),
            Some("broken") => Err(ConfigIssue::Invalid("`goal`: a broken template".into())),
            _ => Ok(()),
        }
    }

    fn attempt_timeout_ms(&self, _config: &serde_json::Map<String, Value>) -> u64 {
        1_000
    }

    fn prepare(&self, _context: &crate::nodes::NodeContext<'_>) -> Result<Value, crate::run::RunError> {
        Ok(json!({}))
    }

    async fn execute(
        &self,
        _call: &crate::activity::ActivityCall,
        _progress: &dyn crate::activity::ProgressSink,
    ) -> crate::activity::ActivityResult {
        success(json!({}))
    }
}

#[test]
fn a_routed_supervisor_is_checked_by_its_registered_executor_at_registration() {
    let registry = NodeRegistry::new().with_supervisor_model(std::sync::Arc::new(Checking));
    let compile = |goal: &str| {
        let document = json!({"id": "research", "name": "research",
            "nodes": [{"id": "sup", "typeId": "core.orchestrator.supervisor", "config": {"route": "p/m", "goal": goal}}],
            "edges": []});
        Workflow::compile_with(document, &registry, Bounds::default())
    };
    match compile("broken") {
        Err(DefinitionError::NodeConfig { node_id, path, message }) => {
            assert_eq!((node_id.as_str(), path.as_str()), ("sup", "/nodes/0/config"));
            assert!(message.contains("`goal`"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let gap = compile("unserved").unwrap().gap.expect("a capability gap");
    assert_eq!(gap.required_capability, "aiProviders.test");
    assert_eq!(gap.node_id.as_deref(), Some("sup"));
    assert!(compile("fine").unwrap().gap.is_none());
    // The pure kind's own checks still run first.
    let document = json!({"id": "research", "name": "research",
        "nodes": [{"id": "sup", "typeId": "core.orchestrator.supervisor",
                   "config": {"route": "p/m", "goal": "fine", "iterationCap": 0}}], "edges": []});
    assert!(Workflow::compile_with(document, &registry, Bounds::default()).is_err());
}
