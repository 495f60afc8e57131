//! The scheduler, one over the store for both backends: the schedules declared by
//! definitions ([`crate::schedule::record`]) are kept as records beside them, and a tick —
//! every second on the embedded host, every minute from an EventBridge rule on AWS — starts
//! each occurrence that is due.
//!
//! **Exactly once.** Occurrence `t` of schedule `s` starts its run under the idempotency key
//! `(schedule:<s>, t)` (the one mechanism `POST /v1/runs` uses), then moves the record's
//! `nextAt` past `t` with a conditional write. A crash between the two, or two ticks racing,
//! start nothing twice (the key answers the run already started) and skip nothing (`nextAt`
//! only moves after its run exists). Occurrences missed while the host was down are started
//! late, oldest first, at most [`MAX_CATCH_UP`] per tick.
//!
//! **Paused** schedules skip their occurrences; on resume the next occurrence after now is
//! the next one (no backfill).

use serde_json::{json, Map, Value};

use super::{CreateOutcome, IdempotencyKey, Services};
use crate::error::{ServiceError, StoreError};
use crate::model::Workflow;
use crate::ports::{Expect, GLOBAL_NAMESPACE};
use crate::run::Principal;
use crate::schedule::record::{declared, ScheduleRecord, DEFAULT_TENANT, KIND, MAX_CATCH_UP};
use crate::timefmt::{rfc3339, Millis};
use crate::webhook::ALL;

/// A stored schedule and the version it was read at.
type Versioned = (u64, ScheduleRecord);

/// What one tick did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TickReport {
    /// Runs started.
    pub started: u32,
    /// Occurrences skipped.
    pub skipped: u32,
}

fn not_found() -> ServiceError {
    ServiceError::Rejected {
        status: 404,
        code: "schedule_not_found",
        message: "no schedule with this id".into(),
        details: json!({}),
    }
}

impl Services {
    /// The schedule triggers of `document`, checked (a registration refuses a bad one).
    pub(super) fn check_schedules(&self, document: &Value) -> Result<(), ServiceError> {
        declared(document, self.test_seams).map(|_| ())
    }

    async fn schedule_records(&self) -> Result<Vec<Versioned>, ServiceError> {
        let records = crate::ports::all_records(self.store.as_ref(), KIND, ALL, self.clock.now()).await?;
        Ok(records
            .iter()
            .filter_map(|record| Some((record.version, ScheduleRecord::from_value(&record.value).ok()?)))
            .collect())
    }

    /// Makes the stored schedules of `workflow` (stored in `namespace`) what its definition
    /// declares: new ones start counting now, changed ones start again, unchanged ones keep
    /// their place and pause, removed ones are deleted.
    pub(super) async fn sync_schedules(&self, namespace: &str, workflow: &Workflow) -> Result<(), ServiceError> {
        let declared = declared(&workflow.document, self.test_seams)?;
        let now = self.clock.now();
        let tenant_of = |named: &Option<String>| match namespace {
            GLOBAL_NAMESPACE => named.clone().unwrap_or_else(|| DEFAULT_TENANT.to_owned()),
            tenant => tenant.to_owned(),
        };
        let (existing, others): (Vec<Versioned>, Vec<Versioned>) = self
            .schedule_records()
            .await?
            .into_iter()
            .filter(|(_, record)| record.workflow_id == workflow.id())
            .partition(|(_, record)| record.namespace == namespace);
        let mut kept = Vec::new();
        for schedule in &declared {
            let tenant = tenant_of(&schedule.tenant_id);
            let key = ScheduleRecord::key_of(&tenant, workflow.id(), &schedule.trigger_id);
            kept.push(key.clone());
            // A tenant's own definition shadows a global one of the same id (as `find_workflow`
            // does): its schedule takes the key over, and the global one leaves it alone.
            if namespace == GLOBAL_NAMESPACE && others.iter().any(|(_, record)| record.key() == key) {
                continue;
            }
            let current = existing.iter().find(|(_, record)| record.key() == key);
            if current.is_some_and(|(_, record)| record.same_as(schedule)) {
                continue;
            }
            let Some(expr) =
                crate::schedule::ScheduleExpr::parse(&schedule.expression, schedule.timezone.as_deref()).ok()
            else {
                continue;
            };
            let record = ScheduleRecord {
                tenant_id: tenant,
                namespace: namespace.to_owned(),
                workflow_id: workflow.id().to_owned(),
                trigger_id: schedule.trigger_id.clone(),
                expression: schedule.expression.clone(),
                timezone: schedule.timezone.clone(),
                inputs: schedule.inputs.clone(),
                anchor: now,
                next_at: expr.next_after(now, now),
                paused: current.is_some_and(|(_, record)| record.paused),
                fired: current.map_or(0, |(_, record)| record.fired),
                skipped: current.map_or(0, |(_, record)| record.skipped),
                last_fired_at: current.and_then(|(_, record)| record.last_fired_at),
                last_run_id: current.and_then(|(_, record)| record.last_run_id.clone()),
                last_error: None,
            };
            self.store.put_record(KIND, ALL, &key, &record.to_value(), None, Expect::Any, now).await?;
            tracing::info!(schedule = %key, next_at = ?record.next_at.map(rfc3339), "schedule declared");
        }
        for (version, record) in existing.iter().filter(|(_, record)| !kept.contains(&record.key())) {
            let key = record.key();
            match self.store.delete_record(KIND, ALL, &key, Expect::Version(*version), now).await {
                Ok(_) | Err(StoreError::Conflict) => tracing::info!(schedule = %key, "schedule removed"),
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }

    /// The tenant's schedules, by key.
    pub async fn list_schedules(&self, tenant: &str) -> Result<Vec<ScheduleRecord>, ServiceError> {
        let records = self.schedule_records().await?;
        Ok(records.into_iter().map(|(_, record)| record).filter(|record| record.tenant_id == tenant).collect())
    }

    /// One of the tenant's schedules by its id (`<workflowId>/<triggerId>`).
    pub async fn get_schedule(&self, tenant: &str, schedule_id: &str) -> Result<(u64, ScheduleRecord), ServiceError> {
        let key = format!("{tenant}/{schedule_id}");
        let record = self.store.record(KIND, ALL, &key, self.clock.now()).await?.ok_or_else(not_found)?;
        let schedule = ScheduleRecord::from_value(&record.value).map_err(|_| ServiceError::Internal)?;
        Ok((record.version, schedule))
    }

    /// Pauses or resumes one of the tenant's schedules. A resumed schedule's next occurrence is
    /// the first after now.
    pub async fn set_schedule_paused(
        &self,
        tenant: &str,
        schedule_id: &str,
        paused: bool,
    ) -> Result<ScheduleRecord, ServiceError> {
        for _ in 0..8 {
            let (version, mut schedule) = self.get_schedule(tenant, schedule_id).await?;
            if schedule.paused == paused {
                return Ok(schedule);
            }
            let now = self.clock.now();
            schedule.paused = paused;
            if !paused {
                schedule.next_at = schedule.expr().and_then(|expr| expr.next_after(now, schedule.anchor));
            }
            let value = schedule.to_value();
            match self.store.put_record(KIND, ALL, &schedule.key(), &value, None, Expect::Version(version), now).await {
                Ok(_) => {
                    tracing::info!(schedule = %schedule.key(), paused, "schedule paused or resumed");
                    return Ok(schedule);
                }
                Err(StoreError::Conflict) => continue,
                Err(error) => return Err(error.into()),
            }
        }
        Err(ServiceError::Unavailable)
    }

    /// Starts every due occurrence of every schedule (see the module docs). Returns what it did;
    /// a schedule whose store or run start is unavailable is left for the next tick.
    pub async fn tick_schedules(&self) -> Result<TickReport, ServiceError> {
        let mut report = TickReport::default();
        for (version, schedule) in self.schedule_records().await? {
            if let Err(error) = self.tick_one(version, schedule, &mut report).await {
                tracing::warn!(%error, "a schedule's tick did not finish; the next tick goes on from there");
            }
        }
        Ok(report)
    }

    async fn tick_one(
        &self,
        mut version: u64,
        mut schedule: ScheduleRecord,
        report: &mut TickReport,
    ) -> Result<(), ServiceError> {
        let Some(expr) = schedule.expr() else { return Ok(()) };
        for _ in 0..MAX_CATCH_UP {
            let now = self.clock.now();
            let Some(due) = schedule.next_at.filter(|due| *due <= now) else { return Ok(()) };
            let mut next = expr.next_after(due, schedule.anchor);
            if schedule.paused {
                // A paused schedule skips: its place moves to the next occurrence after now.
                let skipped = count_until(&expr, due, schedule.anchor, now);
                schedule.skipped += skipped;
                report.skipped += u32::try_from(skipped).unwrap_or(u32::MAX);
                next = expr.next_after(now, schedule.anchor);
            } else {
                match self.start_occurrence(&schedule, due).await {
                    Ok(run_id) => {
                        schedule.fired += 1;
                        schedule.last_fired_at = Some(due);
                        schedule.last_run_id = Some(run_id);
                        schedule.last_error = None;
                        report.started += 1;
                    }
                    Err(error @ (ServiceError::Unavailable | ServiceError::Internal)) => return Err(error),
                    Err(error) => {
                        tracing::warn!(schedule = %schedule.key(), %error, "a scheduled run was refused; skipping the occurrence");
                        schedule.skipped += 1;
                        schedule.last_error =
                            Some(json!({ "code": error.code(), "message": error.to_string(), "at": rfc3339(due) }));
                        report.skipped += 1;
                    }
                }
            }
            schedule.next_at = next;
            let key = schedule.key();
            match self
                .store
                .put_record(KIND, ALL, &key, &schedule.to_value(), None, Expect::Version(version), now)
                .await
            {
                Ok(written) => version = written,
                Err(StoreError::Conflict) => return Ok(()),
                Err(error) => return Err(error.into()),
            }
        }
        // Still behind after the catch-up bound: skip to the next occurrence after now.
        let now = self.clock.now();
        if schedule.next_at.is_some_and(|due| due <= now) {
            let due = schedule.next_at.unwrap_or(now);
            schedule.skipped += count_until(&expr, due, schedule.anchor, now);
            schedule.next_at = expr.next_after(now, schedule.anchor);
            let key = schedule.key();
            match self
                .store
                .put_record(KIND, ALL, &key, &schedule.to_value(), None, Expect::Version(version), now)
                .await
            {
                Ok(_) | Err(StoreError::Conflict) => {}
                Err(error) => return Err(error.into()),
            }
            tracing::warn!(schedule = %key, "a schedule was more than {MAX_CATCH_UP} occurrences behind; the older ones were skipped");
        }
        Ok(())
    }

    /// Starts the run of occurrence `due` (or finds the one an earlier tick started).
    async fn start_occurrence(&self, schedule: &ScheduleRecord, due: Millis) -> Result<String, ServiceError> {
        let principal = Principal {
            tenant: schedule.tenant_id.clone(),
            subject: format!("schedule:{}", schedule.schedule_id()),
            key_class: "schedule".into(),
            test_scope: false,
        };
        let body = json!({ "workflowId": schedule.workflow_id, "inputs": Value::Object(schedule.inputs.clone()) });
        let occurrence = due.to_string();
        let key = IdempotencyKey {
            endpoint: format!("schedule:{}", schedule.key()),
            key: occurrence.clone(),
            request_digest: occurrence,
        };
        let mut origin = Map::new();
        origin.insert("causationId".into(), json!(format!("schedule:{}@{}", schedule.schedule_id(), rfc3339(due))));
        origin.insert(
            "trigger".into(),
            json!({ "source": "schedule", "scheduleId": schedule.schedule_id(), "scheduledAt": rfc3339(due) }),
        );
        let respond = |run: &crate::run::RunState| (201, json!({ "runId": run.run_id }));
        match self.create_run_from(&principal, &body, Some(key), &respond, Some(&origin)).await? {
            CreateOutcome::Created(run) => Ok(run.run_id.clone()),
            CreateOutcome::Replayed(prior) => Ok(prior.body["runId"].as_str().unwrap_or_default().to_owned()),
        }
    }
}

/// How many occurrences from `due` (included) are at or before `now` (bounded).
fn count_until(expr: &crate::schedule::ScheduleExpr, due: Millis, anchor: Millis, now: Millis) -> u64 {
    let mut count = 0;
    let mut at = Some(due);
    while let Some(occurrence) = at.filter(|at| *at <= now) {
        count += 1;
        if count >= 1_000_000 {
            break;
        }
        at = expr.next_after(occurrence, anchor);
    }
    count
}
