//! Inbound webhook triggers (see [`crate::trigger`]): register, list, read, pause, resume and
//! delete a tenant's trigger subscriptions; take one signed delivery and start at most one
//! run for it; read a subscription's log and deliveries.

use serde_json::{json, Map, Value};

use super::webhooks::check_tenant;
use super::{CreateOutcome, IdempotencyKey, Services};
use crate::error::{ServiceError, StoreError};
use crate::ports::Expect;
use crate::run::Principal;
use crate::timefmt::Millis;
use crate::trigger::{
    self, idempotency_endpoint, parse_request, Inbound, TriggerState, TriggerSubscription, BINDING_KIND,
    DELIVERY_ATTEMPTED, DELIVERY_KIND, LOG_KIND, RETENTION_MS, STATE_CHANGED, SUBSCRIPTION_KIND,
};
use crate::webhook::sign::{self, headers, Signed};
use crate::webhook::ALL;

/// At most this many trigger subscriptions per tenant.
pub const MAX_TRIGGERS_PER_TENANT: usize = 50;

/// The listings of a trigger subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerListing {
    /// Its log (`trigger.delivery.attempted`, `trigger.subscription.state.changed`), oldest
    /// first.
    Log,
    /// Its delivery records (by dedup key), each with its `TriggerEvent` and the run it started.
    Deliveries,
}

/// What an ingested delivery came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Ingested {
    /// The run it started (or started before, for a redelivery).
    pub run_id: String,
    /// The delivery id (the sender's, or the body's digest).
    pub delivery_id: String,
    /// The dedup key.
    pub dedup_key: String,
    /// A redelivery: nothing new was started.
    pub duplicate: bool,
}

fn not_found() -> ServiceError {
    ServiceError::Rejected {
        status: 404,
        code: "subscription_not_found",
        message: "no trigger subscription with this id".into(),
        details: json!({}),
    }
}

impl Services {
    /// Registers a webhook trigger for the caller's tenant with the host-made `secret`.
    pub async fn register_trigger(
        &self,
        principal: &Principal,
        body: &Value,
        subscription_id: String,
        secret: String,
    ) -> Result<TriggerSubscription, ServiceError> {
        let request = parse_request(body, self.queue_triggers)?;
        check_tenant(&principal.tenant, request.tenant_id.as_deref())?;
        let (_, workflow) = self.find_workflow(&principal.tenant, &request.workflow_id).await?;
        if let Some(gap) = &workflow.gap {
            return Err(ServiceError::CapabilityRequired { message: gap.message.clone(), details: gap.details() });
        }
        if self.list_triggers(&principal.tenant).await?.len() >= MAX_TRIGGERS_PER_TENANT {
            return Err(ServiceError::Conflict {
                code: "subscription_limit_reached",
                message: format!("a tenant may hold at most {MAX_TRIGGERS_PER_TENANT} trigger subscriptions"),
                details: json!({ "limit": MAX_TRIGGERS_PER_TENANT }),
            });
        }
        let now = self.clock.now();
        let subscription = TriggerSubscription {
            subscription_id,
            tenant_id: principal.tenant.clone(),
            source: if request.queue.is_some() { "queue" } else { "webhook" }.into(),
            workflow_id: request.workflow_id,
            input_mapping: request.input_mapping,
            // A queue's events are authenticated by IAM; there is nothing to sign.
            secret: if request.queue.is_some() { String::new() } else { secret },
            name: request.name,
            created_at: now,
            state: TriggerState::Active,
            queue: request.queue,
        };
        let id = subscription.subscription_id.clone();
        if let Some(binding) = &subscription.queue {
            self.claim_binding(&binding.key(), &id, &subscription.tenant_id).await?;
        }
        self.store.put_record(SUBSCRIPTION_KIND, ALL, &id, &subscription.to_value(), None, Expect::Absent, now).await?;
        tracing::info!(subscription_id = %id, tenant = %subscription.tenant_id, "trigger subscription registered");
        Ok(subscription)
    }

    /// The tenant's trigger subscriptions, by id.
    pub async fn list_triggers(&self, tenant: &str) -> Result<Vec<TriggerSubscription>, ServiceError> {
        let records = crate::ports::all_records(self.store.as_ref(), SUBSCRIPTION_KIND, ALL, self.clock.now()).await?;
        Ok(records
            .iter()
            .filter_map(|record| TriggerSubscription::from_value(&record.value).ok())
            .filter(|subscription| subscription.tenant_id == tenant)
            .collect())
    }

    async fn stored_trigger(&self, subscription_id: &str) -> Result<Option<(u64, TriggerSubscription)>, ServiceError> {
        let record = self.store.record(SUBSCRIPTION_KIND, ALL, subscription_id, self.clock.now()).await?;
        Ok(record.and_then(|record| Some((record.version, TriggerSubscription::from_value(&record.value).ok()?))))
    }

    /// One of the tenant's trigger subscriptions (another tenant's reads as not found).
    pub async fn get_trigger(&self, tenant: &str, subscription_id: &str) -> Result<TriggerSubscription, ServiceError> {
        let found = self.stored_trigger(subscription_id).await?;
        found.map(|(_, subscription)| subscription).filter(|s| s.tenant_id == tenant).ok_or_else(not_found)
    }

    /// Pauses (`active: false`) or resumes one of the tenant's trigger subscriptions; logs the
    /// change. A subscription already in that state is answered as it is.
    pub async fn set_trigger_active(
        &self,
        tenant: &str,
        subscription_id: &str,
        active: bool,
    ) -> Result<TriggerSubscription, ServiceError> {
        let to = if active { TriggerState::Active } else { TriggerState::Paused };
        for _ in 0..8 {
            let (version, mut subscription) = self
                .stored_trigger(subscription_id)
                .await?
                .filter(|(_, s)| s.tenant_id == tenant)
                .ok_or_else(not_found)?;
            if subscription.state == to {
                return Ok(subscription);
            }
            let from = subscription.state;
            subscription.state = to;
            let now = self.clock.now();
            let value = subscription.to_value();
            match self
                .store
                .put_record(SUBSCRIPTION_KIND, ALL, subscription_id, &value, None, Expect::Version(version), now)
                .await
            {
                Ok(_) => {
                    self.log_state_change(&subscription, from.as_str(), to.as_str(), "operator-paused").await;
                    return Ok(subscription);
                }
                Err(StoreError::Conflict) => continue,
                Err(error) => return Err(error.into()),
            }
        }
        Err(ServiceError::Unavailable)
    }

    /// Deletes one of the tenant's trigger subscriptions (its log keeps the removal).
    pub async fn delete_trigger(
        &self,
        tenant: &str,
        named: Option<&str>,
        subscription_id: &str,
    ) -> Result<(), ServiceError> {
        check_tenant(tenant, named)?;
        let subscription = self.get_trigger(tenant, subscription_id).await?;
        self.store.delete_record(SUBSCRIPTION_KIND, ALL, subscription_id, Expect::Any, self.clock.now()).await?;
        if let Some(binding) = &subscription.queue {
            let now = self.clock.now();
            let key = binding.key();
            if let Some(record) = self.store.record(BINDING_KIND, ALL, &key, now).await? {
                if record.value["subscriptionId"] == subscription_id {
                    self.store.delete_record(BINDING_KIND, ALL, &key, Expect::Version(record.version), now).await.ok();
                }
            }
        }
        self.log_state_change(&subscription, subscription.state.as_str(), "removed", "source-removed").await;
        Ok(())
    }

    async fn log_state_change(&self, subscription: &TriggerSubscription, from: &str, to: &str, reason: &str) {
        let payload = json!({
            "subscriptionId": subscription.subscription_id,
            "source": subscription.source,
            "fromState": from,
            "toState": to,
            "reason": reason,
        });
        self.append_trigger_log(&subscription.subscription_id, STATE_CHANGED, payload).await;
    }

    /// Appends to a subscription's log (best effort: the log is an account, not the truth).
    async fn append_trigger_log(&self, subscription_id: &str, event_type: &str, payload: Value) {
        let now = self.clock.now();
        let key = trigger::log_key(now, self.ids.random());
        let entry = trigger::log_entry(event_type, payload, now);
        let expires = Some(now + RETENTION_MS);
        if let Err(error) =
            self.store.put_record(LOG_KIND, subscription_id, &key, &entry, expires, Expect::Absent, now).await
        {
            tracing::warn!(subscription_id, %error, "appending to a trigger subscription's log failed");
        }
    }

    /// A page of one of a subscription's listings after the record key `after`; the key of
    /// the page's last entry when more may follow.
    pub async fn trigger_listing(
        &self,
        tenant: &str,
        subscription_id: &str,
        listing: TriggerListing,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Value>, Option<String>), ServiceError> {
        self.get_trigger(tenant, subscription_id).await?;
        let kind = match listing {
            TriggerListing::Log => LOG_KIND,
            TriggerListing::Deliveries => DELIVERY_KIND,
        };
        self.record_page(kind, subscription_id, after, limit).await
    }

    async fn record_page(
        &self,
        kind: &str,
        scope: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Value>, Option<String>), ServiceError> {
        let page = self.store.records(kind, scope, after, limit, self.clock.now()).await?;
        let next = page.last().filter(|_| page.len() == limit).map(|record| record.key.clone());
        Ok((page.into_iter().map(|record| record.value).collect(), next))
    }

    /// Binds `key` (a queue or an event source) to `subscription_id`: refused with `409
    /// binding_taken` while another subscription holds it; a binding whose subscription is
    /// gone (a registration that died half-way) is taken over.
    async fn claim_binding(&self, key: &str, subscription_id: &str, tenant: &str) -> Result<(), ServiceError> {
        let now = self.clock.now();
        let value = json!({ "subscriptionId": subscription_id });
        for _ in 0..4 {
            let expect = match self.store.record(BINDING_KIND, ALL, key, now).await? {
                None => Expect::Absent,
                Some(record) => {
                    let holder = record.value["subscriptionId"].as_str().unwrap_or_default().to_owned();
                    if let Some((_, held)) = self.stored_trigger(&holder).await? {
                        // Another tenant's subscription is not named.
                        let mut details = json!({ "field": "queue" });
                        if held.tenant_id == tenant {
                            details["subscriptionId"] = json!(holder);
                        }
                        return Err(ServiceError::Conflict {
                            code: "binding_taken",
                            message: "another trigger subscription already listens to this queue or event source"
                                .into(),
                            details,
                        });
                    }
                    Expect::Version(record.version)
                }
            };
            match self.store.put_record(BINDING_KIND, ALL, key, &value, None, expect, now).await {
                Ok(_) => return Ok(()),
                Err(StoreError::Conflict) => continue,
                Err(error) => return Err(error.into()),
            }
        }
        Err(ServiceError::Unavailable)
    }

    /// The subscription bound to the first of `keys` that has one.
    async fn bound_trigger(&self, keys: &[String]) -> Result<Option<TriggerSubscription>, ServiceError> {
        let now = self.clock.now();
        for key in keys {
            let Some(record) = self.store.record(BINDING_KIND, ALL, key, now).await? else { continue };
            let holder = record.value["subscriptionId"].as_str().unwrap_or_default();
            if let Some((_, subscription)) = self.stored_trigger(holder).await? {
                return Ok(Some(subscription));
            }
        }
        Ok(None)
    }

    /// Takes one queue message or bus event (AWS: an SQS record's `messageId`, an EventBridge
    /// event's `id` as `delivery_id`) for the subscription bound to the first of `keys` (see
    /// [`crate::trigger::sqs_key`], [`crate::trigger::events_key`]); `queue` is the
    /// `TriggerEvent`'s `queue` sub-object. At most one run per delivery id; `404
    /// subscription_not_found` when nothing is bound.
    pub async fn ingest_queue(
        &self,
        keys: &[String],
        delivery_id: &str,
        queue: Value,
    ) -> Result<Ingested, ServiceError> {
        let subscription = self.bound_trigger(keys).await?.ok_or_else(not_found)?;
        let now = self.clock.now();
        let (dedup_key, attempt, record) = self.open_delivery(&subscription.subscription_id, delivery_id).await?;
        let event = trigger::queue_event(&subscription.subscription_id, delivery_id, now, queue);
        self.start_from_event(&subscription, delivery_id, &dedup_key, attempt, record, event).await
    }

    /// A delivery's dedup key (of the subscription and the delivery id), its attempt (one more
    /// than its record counts) and the start of its new record.
    async fn open_delivery(
        &self,
        subscription_id: &str,
        delivery_id: &str,
    ) -> Result<(String, u64, Value), ServiceError> {
        let now = self.clock.now();
        let dedup_key = sign::sha256_hex(format!("{subscription_id}\n{delivery_id}").as_bytes())[..32].to_owned();
        let prior = self.store.record(DELIVERY_KIND, subscription_id, &dedup_key, now).await?;
        let attempt = prior.as_ref().and_then(|record| record.value["attempts"].as_u64()).unwrap_or(0) + 1;
        let record = json!({
            "dedupKey": dedup_key,
            "deliveryId": delivery_id,
            "attempts": attempt,
            "receivedAt": crate::timefmt::rfc3339(now),
        });
        Ok((dedup_key, attempt, record))
    }

    /// Takes one inbound delivery for `subscription_id` (see [`crate::trigger`]).
    pub async fn ingest_trigger(&self, subscription_id: &str, inbound: &Inbound) -> Result<Ingested, ServiceError> {
        let (_, subscription) = self.stored_trigger(subscription_id).await?.ok_or_else(not_found)?;
        if inbound.body.len() > trigger::MAX_BODY_BYTES {
            return Err(ServiceError::Rejected {
                status: 413,
                code: "payload_too_large",
                message: format!("a trigger delivery may carry at most {} bytes", trigger::MAX_BODY_BYTES),
                details: json!({ "limit": trigger::MAX_BODY_BYTES }),
            });
        }
        let now = self.clock.now();
        let delivery_id = inbound
            .either(headers::DELIVERY_ID)
            .or_else(|| inbound.header("idempotency-key"))
            .filter(|id| !id.is_empty() && id.len() <= 255)
            .map_or_else(|| format!("sha256-{}", &sign::sha256_hex(&inbound.body)[..32]), str::to_owned);
        let (dedup_key, attempt, mut record) = self.open_delivery(subscription_id, &delivery_id).await?;
        let signed = Signed {
            timestamp: inbound.either(headers::TIMESTAMP),
            signature: inbound.either(headers::SIGNATURE),
            algorithm: inbound.either(headers::ALGORITHM),
        };
        if let Err(refusal) = sign::verify(&subscription.secret, signed, &inbound.body, now / 1_000) {
            record["outcome"] = json!("dead-lettered");
            record["reason"] = json!("signature-invalid");
            record["verification"] = json!(refusal.reason());
            self.settle_delivery(&subscription, &dedup_key, &record, attempt, "dead-lettered", None).await;
            return Err(ServiceError::Rejected {
                status: 401,
                code: "signature_invalid",
                message: format!("the delivery's signature was not accepted: {refusal}"),
                details: json!({ "reason": refusal.reason(), "deliveryId": delivery_id }),
            });
        }
        let event = trigger::trigger_event(subscription_id, &delivery_id, now, inbound);
        self.start_from_event(&subscription, &delivery_id, &dedup_key, attempt, record, event).await
    }

    /// Starts the run of a verified delivery (`event`, the `TriggerEvent`), at most once per
    /// dedup key; a paused subscription refuses it (`409 subscription_paused`: deliver again).
    async fn start_from_event(
        &self,
        subscription: &TriggerSubscription,
        delivery_id: &str,
        dedup_key: &str,
        attempt: u64,
        mut record: Value,
        event: Value,
    ) -> Result<Ingested, ServiceError> {
        let subscription_id = subscription.subscription_id.as_str();
        let (delivery_id, dedup_key) = (delivery_id.to_owned(), dedup_key.to_owned());
        if subscription.state == TriggerState::Paused {
            record["outcome"] = json!("retrying");
            record["reason"] = json!("operator-paused");
            self.settle_delivery(subscription, &dedup_key, &record, attempt, "retrying", None).await;
            return Err(ServiceError::Conflict {
                code: "subscription_paused",
                message: "the trigger subscription is paused; deliver again after it is resumed".into(),
                details: json!({ "subscriptionId": subscription_id }),
            });
        }
        record["triggerEvent"] = event.clone();
        let inputs = trigger::map_inputs(&subscription.input_mapping, &event);
        let principal = Principal {
            tenant: subscription.tenant_id.clone(),
            subject: format!("trigger:{subscription_id}"),
            key_class: "trigger".into(),
            test_scope: false,
        };
        let body = json!({ "workflowId": subscription.workflow_id, "inputs": Value::Object(inputs) });
        let key = IdempotencyKey {
            endpoint: idempotency_endpoint(subscription_id),
            key: dedup_key.clone(),
            request_digest: dedup_key.clone(),
        };
        let mut origin = Map::new();
        origin.insert("causationId".into(), json!(delivery_id));
        origin.insert(
            "trigger".into(),
            json!({ "source": subscription.source, "subscriptionId": subscription_id, "deliveryId": delivery_id, "dedupKey": dedup_key }),
        );
        let respond = |run: &crate::run::RunState| (202, json!({ "runId": run.run_id }));
        match self.create_run_from(&principal, &body, Some(key), &respond, Some(&origin)).await {
            Ok(outcome) => {
                let (run_id, duplicate) = match outcome {
                    CreateOutcome::Created(run) => (run.run_id.clone(), false),
                    CreateOutcome::Replayed(prior) => {
                        (prior.body["runId"].as_str().unwrap_or_default().to_owned(), true)
                    }
                };
                record["outcome"] = json!("delivered");
                record["runId"] = json!(run_id);
                self.settle_delivery(subscription, &dedup_key, &record, attempt, "delivered", Some(&run_id)).await;
                Ok(Ingested { run_id, delivery_id, dedup_key, duplicate })
            }
            Err(error @ (ServiceError::Unavailable | ServiceError::Internal)) => {
                self.settle_delivery(subscription, &dedup_key, &record, attempt, "retrying", None).await;
                Err(error)
            }
            Err(error) => {
                record["outcome"] = json!("dead-lettered");
                record["reason"] = json!("run-start-refused");
                record["error"] = json!({ "code": error.code(), "message": error.to_string() });
                self.settle_delivery(subscription, &dedup_key, &record, attempt, "dead-lettered", None).await;
                Err(error)
            }
        }
    }

    /// Writes a delivery's record and logs its attempt.
    async fn settle_delivery(
        &self,
        subscription: &TriggerSubscription,
        dedup_key: &str,
        record: &Value,
        attempt: u64,
        outcome: &str,
        run_id: Option<&str>,
    ) {
        let now: Millis = self.clock.now();
        let id = &subscription.subscription_id;
        let expires = Some(now + RETENTION_MS);
        if let Err(error) = self.store.put_record(DELIVERY_KIND, id, dedup_key, record, expires, Expect::Any, now).await
        {
            tracing::warn!(subscription_id = %id, %error, "recording a trigger delivery failed");
        }
        let payload = json!({
            "subscriptionId": id,
            "dedupKey": dedup_key,
            "attempt": attempt,
            "outcome": outcome,
            "runId": run_id,
        });
        self.append_trigger_log(id, DELIVERY_ATTEMPTED, payload).await;
    }
}
