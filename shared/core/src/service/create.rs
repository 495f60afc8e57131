//! `POST /v1/runs`: validate the request, resolve the workflow, seed variables, start the
//! run and commit it — run, `run.started`, first tasks and idempotency record in one write.
//! A refused request persists nothing.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::Services;
use crate::ai::mock::{MockProvider, MockRefusal};
use crate::engine::{self, Input};
use crate::error::ServiceError;
use crate::model::Workflow;
use crate::ports::{CreateResult, IdempotencyRecord, GLOBAL_NAMESPACE};
use crate::run::{EdgeStatus, Principal, RunLimits, RunState, RunStatus, WorkflowRef};
use crate::schema;

/// An `Idempotency-Key` with the digest of the request it came with.
#[derive(Debug, Clone)]
pub struct IdempotencyKey {
    /// The endpoint id the key is scoped to.
    pub endpoint: String,
    /// The caller's key.
    pub key: String,
    /// Digest of the canonical request body.
    pub request_digest: String,
}

/// The result of a create.
#[derive(Debug)]
pub enum CreateOutcome {
    /// A new run was created.
    Created(Box<RunState>),
    /// The key was seen before with the same body: the recorded response.
    Replayed(IdempotencyRecord),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateRunBody {
    workflow_id: String,
    #[serde(default)]
    inputs: Map<String, Value>,
    tenant_id: Option<String>,
    scope_id: Option<String>,
    callback_url: Option<String>,
    configurable: Option<Value>,
    #[serde(default)]
    tags: Vec<String>,
    metadata: Option<Value>,
    mode: Option<String>,
}

impl Services {
    /// Creates a run. `respond` renders the response (status and body) for a created run;
    /// with an idempotency key it is recorded in the same commit as the run.
    pub async fn create_run(
        &self,
        principal: &Principal,
        body: &Value,
        idempotency: Option<IdempotencyKey>,
        respond: &(dyn Fn(&RunState) -> (u16, Value) + Sync),
    ) -> Result<CreateOutcome, ServiceError> {
        self.create_run_from(principal, body, idempotency, respond, None).await
    }

    /// [`Services::create_run`] for a run a trigger starts: `origin` (`{causationId, trigger:
    /// {source, subscriptionId | scheduleId, …}}`) is merged into its `run.started` payload, so
    /// the log says what started it.
    pub async fn create_run_from(
        &self,
        principal: &Principal,
        body: &Value,
        idempotency: Option<IdempotencyKey>,
        respond: &(dyn Fn(&RunState) -> (u16, Value) + Sync),
        origin: Option<&Map<String, Value>>,
    ) -> Result<CreateOutcome, ServiceError> {
        let violations = schema::create_run_violations(body);
        if !violations.is_empty() {
            return Err(ServiceError::validation("the request body is invalid", json!({ "violations": violations })));
        }
        let request: CreateRunBody = serde_json::from_value(body.clone())
            .map_err(|_| ServiceError::validation("the request body is invalid", json!({})))?;
        refuse_unsupported(&request, principal)?;
        if request.callback_url.as_deref().is_some_and(crate::interrupt::callback::is_queue_target)
            && !self.nodes.queue_notifies()
        {
            return Err(ServiceError::CapabilityRequired {
                message: "callbackUrl names an SQS queue; only the AWS backend notifies workers on a queue".to_owned(),
                details: json!({ "requiredCapability": crate::interrupt::callback::QUEUE_NOTIFY_CAPABILITY, "field": "callbackUrl" }),
            });
        }
        let (namespace, workflow) = self.find_workflow(&principal.tenant, &request.workflow_id).await?;
        if let Some(gap) = &workflow.gap {
            return Err(ServiceError::CapabilityRequired { message: gap.message.clone(), details: gap.details() });
        }
        self.check_run_options(&workflow, request.configurable.as_ref(), principal)?;
        let limits = self.run_limits_for(request.configurable.as_ref())?;
        let inputs = seed_variables(&workflow, request.inputs)?;

        let disabled = self.capability_overlay().await?.disabled();
        let now = self.clock.now();
        let mut run = new_run(self.ids.run_id(), principal, &workflow, namespace, inputs, limits, now);
        run.mocks_allowed |= self.test_seams && principal.test_scope;
        run.disabled_capabilities = disabled;
        run.configurable = request.configurable;
        run.tags = request.tags;
        run.metadata = request.metadata;
        run.scope_id = request.scope_id;
        run.callback_url = request.callback_url;
        run.retention_ms = self.retention_for(&workflow, run.configurable.as_ref())?;
        let mut outcome = engine::apply(&workflow, &mut run, Input::Start, now);
        run.version = 1;
        let spilled = self.spill(&mut run, None, &mut outcome.events, None).await?;
        let started = outcome.events.iter_mut().find(|event| event.event_type == crate::event::types::RUN_STARTED);
        if let (Some(origin), Some(started)) = (origin, started) {
            if let Value::Object(payload) = &mut started.payload {
                payload.extend(origin.clone());
            }
        }
        outcome.effects.extend(self.integration_effects(&run, &outcome.events).await?);
        let record = idempotency.as_ref().map(|key| {
            let (status, body) = respond(&run);
            IdempotencyRecord {
                tenant: principal.tenant.clone(),
                endpoint: key.endpoint.clone(),
                key: key.key.clone(),
                request_digest: key.request_digest.clone(),
                status,
                body,
                created_at: now,
            }
        });
        match self.store.create_run(&run, &outcome.events, &outcome.effects, record.as_ref()).await? {
            CreateResult::Created => {
                Self::unspill(&mut run, spilled);
                tracing::info!(run_id = %run.run_id, workflow = %run.workflow.id, to = %run.status.as_str(), "run created");
                self.send_effects(&run.run_id, run.version, &outcome.effects).await;
                // Its first step comes next: a store keeping hot runs keeps it (a new run is
                // small — one scheduled node).
                self.store.retain_run(run.clone());
                Ok(CreateOutcome::Created(Box::new(run)))
            }
            CreateResult::Existing(existing) => {
                replay_or_mismatch(existing, idempotency.as_ref().expect("existing implies a key"))
            }
        }
    }

    pub(super) fn run_limits_for(&self, configurable: Option<&Value>) -> Result<RunLimits, ServiceError> {
        let max_executions = self.limits.max_node_executions;
        let max_duration = self.limits.max_run_duration_ms;
        let mut limits = RunLimits { max_node_executions: max_executions, run_duration_ms: max_duration };
        let Some(configurable) = configurable else { return Ok(limits) };
        if let Some(limit) = configurable.get("recursionLimit").and_then(Value::as_u64) {
            if limit > u64::from(max_executions) {
                return Err(ServiceError::validation(
                    format!("configurable.recursionLimit must be between 1 and {max_executions}"),
                    json!({ "field": "configurable.recursionLimit", "maximum": max_executions }),
                ));
            }
            limits.max_node_executions = limit as u32;
        }
        if let Some(timeout) = configurable.get("runTimeoutMs").and_then(Value::as_f64) {
            limits.run_duration_ms = (timeout.floor() as u64).clamp(1, max_duration);
        }
        Ok(limits)
    }
}

impl Services {
    /// The retention of a new run of `workflow` with `configurable` (see [`crate::retention`]).
    pub(super) fn retention_for(
        &self,
        workflow: &Workflow,
        configurable: Option<&Value>,
    ) -> Result<Option<u64>, ServiceError> {
        crate::retention::for_run(configurable, &workflow.definition.settings, self.limits.default_retention_ms)
            .map_err(|(field, message)| ServiceError::validation(message, json!({ "field": field })))
    }

    /// The checks a run's `configurable` passes before a run (or a fork) is created: the mock
    /// provider, the budget policy, the workflow's `configurableSchema`, the escalation
    /// thresholds.
    pub(super) fn check_run_options(
        &self,
        workflow: &Workflow,
        configurable: Option<&Value>,
        principal: &Principal,
    ) -> Result<(), ServiceError> {
        self.check_mock_provider(configurable, principal)?;
        check_budget(configurable)?;
        check_configurable(workflow, configurable)?;
        check_escalation(configurable)
    }
}

/// A pending run of `workflow` with seeded `inputs`, ready for the engine's start.
pub(crate) fn new_run(
    run_id: String,
    principal: &Principal,
    workflow: &Workflow,
    namespace: String,
    inputs: Map<String, Value>,
    limits: RunLimits,
    now: crate::timefmt::Millis,
) -> RunState {
    // Scripted supervisor plans: only for definitions of the read-only global namespace
    // (compiled-in, `OPENWOP_FIXTURES_DIR`, `--workflows`); a test-scope caller on a host with its
    // seams on is added by `create_run`. Never for a tenant's own registrations, whatever the id.
    let mocks_allowed = namespace == GLOBAL_NAMESPACE;
    // `settings.maxNodeExecutions` lowers the host's limit for this workflow's runs.
    let mut limits = limits;
    if let Some(setting) = crate::model::fanout_rules::max_node_executions(&workflow.definition.settings) {
        limits.max_node_executions = limits.max_node_executions.min(setting);
    }
    RunState {
        run_id,
        tenant: principal.tenant.clone(),
        principal: principal.clone(),
        workflow: WorkflowRef {
            id: workflow.id().to_owned(),
            version: workflow.definition.version.clone(),
            content_hash: workflow.content_hash.clone(),
            namespace,
        },
        status: RunStatus::Pending,
        version: 0,
        status_version: 0,
        next_sequence: 0,
        variables: inputs.clone(),
        inputs,
        nodes: Default::default(),
        edges: vec![EdgeStatus::Unresolved; workflow.definition.edges.len()],
        node_executions: 0,
        limits,
        created_at: now,
        started_at: None,
        ended_at: None,
        error: None,
        cancel_reason: None,
        configurable: None,
        tags: Vec::new(),
        metadata: None,
        scope_id: None,
        callback_url: None,
        parent: None,
        interrupts: Vec::new(),
        pause: None,
        pending_pause: None,
        orchestrator: None,
        child_runs: Vec::new(),
        children_started: 0,
        disabled_capabilities: Vec::new(),
        outputs: Map::new(),
        mocks_allowed,
        ai: crate::ai::AiState::default(),
        replay: None,
        retention_ms: None,
        cache: None,
        blobs: Default::default(),
    }
}

fn replay_or_mismatch(record: IdempotencyRecord, key: &IdempotencyKey) -> Result<CreateOutcome, ServiceError> {
    if record.request_digest == key.request_digest {
        Ok(CreateOutcome::Replayed(record))
    } else {
        Err(ServiceError::IdempotencyKeyMismatch)
    }
}

impl Services {
    /// `configurable.mockProvider`: only a `test:seams` caller on a host with its seams on
    /// (`403 mock_provider_forbidden`), an id of the catalog (`400
    /// unsupported_mock_provider`), a config that keeps its entry's rules.
    fn check_mock_provider(&self, configurable: Option<&Value>, principal: &Principal) -> Result<(), ServiceError> {
        let Some(mock) = configurable.and_then(|configurable| configurable.get("mockProvider")) else { return Ok(()) };
        if !(self.test_seams && principal.test_scope) {
            return Err(ServiceError::Rejected {
                status: 403,
                code: "mock_provider_forbidden",
                message: "a mock provider needs a test:seams key on a host with its test seams enabled".to_owned(),
                details: json!({ "field": "configurable.mockProvider" }),
            });
        }
        match MockProvider::parse(mock) {
            Ok(_) => Ok(()),
            Err(refusal @ MockRefusal::Unsupported(_)) => Err(ServiceError::Rejected {
                status: 400,
                code: "unsupported_mock_provider",
                message: "this host does not serve that mock provider".to_owned(),
                details: refusal.details(),
            }),
            Err(MockRefusal::Invalid { field, message }) => {
                Err(ServiceError::validation(message, json!({ "field": field })))
            }
        }
    }
}

fn refuse_unsupported(request: &CreateRunBody, principal: &Principal) -> Result<(), ServiceError> {
    if request.tenant_id.as_deref().is_some_and(|tenant| tenant != principal.tenant) {
        return Err(ServiceError::Forbidden {
            message: "the credential is not bound to the requested tenant".to_owned(),
            details: json!({ "field": "tenantId" }),
        });
    }
    if request.mode.is_some() {
        return Err(ServiceError::CapabilityRequired {
            message: "run modes (eval) are not supported by this host".to_owned(),
            details: json!({ "requiredCapability": "eval" }),
        });
    }
    if let Some(url) = &request.callback_url {
        // The worker of each external-event interrupt is notified there (docs/callbacks.md).
        crate::interrupt::callback::check_url("callbackUrl", url)
            .map_err(|message| ServiceError::validation(message, json!({ "field": "callbackUrl" })))?;
    }
    Ok(())
}

fn check_configurable(workflow: &Workflow, configurable: Option<&Value>) -> Result<(), ServiceError> {
    let Some(schema) = &workflow.definition.configurable_schema else { return Ok(()) };
    let validator = jsonschema::options().offline().build(schema).map_err(|_| {
        ServiceError::validation("the workflow's configurableSchema is not a valid JSON Schema", json!({}))
    })?;
    let empty = json!({});
    let violations: Vec<Value> = validator
        .iter_errors(configurable.unwrap_or(&empty))
        .map(|error| json!({ "path": error.instance_path().to_string(), "message": error.masked().to_string() }))
        .collect();
    if violations.is_empty() {
        Ok(())
    } else {
        Err(ServiceError::validation(
            "configurable does not match the workflow's configurableSchema",
            json!({ "violations": violations }),
        ))
    }
}

/// `configurable.budget` (RFC 0084, see [`crate::ai::budget`]): a closed policy. An unknown
/// or wall-time field, or a bad value, is `400 validation_error` with `details.field` =
/// `configurable.budget.<field>` and a message naming the rule.
fn check_budget(configurable: Option<&Value>) -> Result<(), ServiceError> {
    crate::ai::budget::BudgetPolicy::parse(configurable)
        .map(|_| ())
        .map_err(|refusal| ServiceError::validation(refusal.message, json!({ "field": refusal.field })))
}

/// The supervisor thresholds a run may set: `escalationThreshold` (CP-1, 0..1, default 0.7)
/// and `confidenceEscalationFloor` (RFC 0039, 0.5..1; the spec floor 0.5 cannot be lowered).
fn check_escalation(configurable: Option<&Value>) -> Result<(), ServiceError> {
    for (key, low) in [("escalationThreshold", 0.0), ("confidenceEscalationFloor", crate::engine::CONFIDENCE_FLOOR)] {
        let Some(value) = configurable.and_then(|c| c.get(key)) else { continue };
        if !value.as_f64().is_some_and(|v| v.is_finite() && (low..=1.0).contains(&v)) {
            return Err(ServiceError::validation(
                format!("configurable.{key} must be a number between {low} and 1"),
                json!({ "field": format!("configurable.{key}"), "minimum": low, "maximum": 1 }),
            ));
        }
    }
    Ok(())
}

/// Folds variable defaults, then the caller's inputs (the caller wins); checks declared
/// types and required variables.
pub(super) fn seed_variables(
    workflow: &Workflow,
    inputs: Map<String, Value>,
) -> Result<Map<String, Value>, ServiceError> {
    let mut seeded = Map::new();
    for variable in &workflow.definition.variables {
        if let Some(default) = &variable.default_value {
            seeded.insert(variable.name.clone(), default.clone());
        }
    }
    let mut wrong_types = Vec::new();
    for (name, value) in inputs {
        let declared = workflow.definition.variables.iter().find(|v| v.name == name);
        if declared.is_some_and(|variable| !variable.accepts(&value)) {
            let expected = declared.map(|v| v.kind.clone()).unwrap_or_default();
            wrong_types.push(json!({ "path": format!("/inputs/{name}"), "message": format!("expected {expected}") }));
        }
        seeded.insert(name, value);
    }
    if !wrong_types.is_empty() {
        return Err(ServiceError::validation(
            "inputs do not match the workflow's variables",
            json!({ "violations": wrong_types }),
        ));
    }
    let missing: Vec<&str> = workflow
        .definition
        .variables
        .iter()
        .filter(|variable| variable.required && !seeded.contains_key(&variable.name))
        .map(|variable| variable.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(ServiceError::validation("required inputs are missing", json!({ "missing": missing })));
    }
    Ok(seeded)
}
