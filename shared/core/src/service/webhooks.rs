//! Webhook subscriptions and deliveries (see [`crate::webhook`]): register, list, read and
//! delete a tenant's subscriptions; the effects a commit adds for the subscriptions that want
//! its events; one delivery attempt.

use serde_json::json;

use super::Services;
use crate::engine::Effect;
use crate::error::ServiceError;
use crate::event::RunEvent;
use crate::ports::Expect;
use crate::run::{Principal, RunState};
use crate::webhook::subscription::{parse_request, url_rejected};
use crate::webhook::{
    delivery, DeliveryRecord, DeliveryState, SubscriptionState, WebhookSubscription, Webhooks, ALL, DELIVERY_KIND,
    SUBSCRIPTION_KIND,
};

/// At most this many subscriptions per tenant.
pub const MAX_WEBHOOKS_PER_TENANT: usize = 25;

/// How one delivery attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome {
    /// The receiver took it.
    Delivered,
    /// It failed; the next attempt is due at this time.
    Retry(crate::timefmt::Millis),
    /// No attempt is left: recorded as dead-lettered.
    DeadLettered,
    /// Nothing to do: the subscription is gone, the delivery was already settled, or the
    /// event or run no longer exists.
    Skipped,
}

fn not_found() -> ServiceError {
    ServiceError::Rejected {
        status: 404,
        code: "subscription_not_found",
        message: "no webhook subscription with this id".into(),
        details: json!({}),
    }
}

fn not_configured() -> ServiceError {
    ServiceError::CapabilityRequired {
        message: "this host delivers no webhooks".into(),
        details: json!({ "requiredCapability": "webhooks" }),
    }
}

/// `403 tenant_membership_required` unless `named` is the caller's tenant (or absent).
pub(super) fn check_tenant(principal_tenant: &str, named: Option<&str>) -> Result<(), ServiceError> {
    match named {
        Some(tenant) if tenant != principal_tenant => Err(ServiceError::Rejected {
            status: 403,
            code: "tenant_membership_required",
            message: "the caller is not a member of the named tenant".into(),
            details: json!({ "field": "tenantId" }),
        }),
        _ => Ok(()),
    }
}

impl Services {
    /// The same services delivering webhooks through `webhooks`.
    pub fn with_webhooks(mut self, webhooks: Webhooks) -> Self {
        self.webhooks = Some(std::sync::Arc::new(webhooks));
        self
    }

    fn webhooks(&self) -> Result<&Webhooks, ServiceError> {
        self.webhooks.as_deref().ok_or_else(not_configured)
    }

    /// Registers a subscription for the caller's tenant with the host-made `secret` (shown to
    /// the caller once). Refusals persist nothing.
    pub async fn register_webhook(
        &self,
        principal: &Principal,
        body: &serde_json::Value,
        webhook_id: String,
        secret: String,
    ) -> Result<WebhookSubscription, ServiceError> {
        let webhooks = self.webhooks()?;
        let request = parse_request(body)?;
        check_tenant(&principal.tenant, request.tenant_id.as_deref())?;
        webhooks.transport.check_destination(&request.url).await.map_err(url_rejected)?;
        let now = self.clock.now();
        if self.list_webhooks(&principal.tenant).await?.len() >= MAX_WEBHOOKS_PER_TENANT {
            return Err(ServiceError::Conflict {
                code: "subscription_limit_reached",
                message: format!("a tenant may hold at most {MAX_WEBHOOKS_PER_TENANT} webhook subscriptions"),
                details: json!({ "limit": MAX_WEBHOOKS_PER_TENANT }),
            });
        }
        let subscription = WebhookSubscription {
            webhook_id,
            tenant_id: principal.tenant.clone(),
            url: request.url,
            events: request.events,
            secret,
            tags: request.tags,
            description: request.description,
            created_at: now,
            state: SubscriptionState::Active,
            consecutive_dead_letters: 0,
        };
        let value = subscription.to_value();
        self.store
            .put_record(SUBSCRIPTION_KIND, ALL, &subscription.webhook_id, &value, None, Expect::Absent, now)
            .await?;
        webhooks.set.invalidate();
        tracing::info!(webhook_id = %subscription.webhook_id, tenant = %subscription.tenant_id, "webhook registered");
        Ok(subscription)
    }

    /// The tenant's subscriptions, by id.
    pub async fn list_webhooks(&self, tenant: &str) -> Result<Vec<WebhookSubscription>, ServiceError> {
        let records = crate::ports::all_records(self.store.as_ref(), SUBSCRIPTION_KIND, ALL, self.clock.now()).await?;
        Ok(records
            .iter()
            .filter_map(|record| WebhookSubscription::from_value(&record.value).ok())
            .filter(|subscription| subscription.tenant_id == tenant)
            .collect())
    }

    /// One of the tenant's subscriptions (another tenant's reads as not found).
    pub async fn get_webhook(&self, tenant: &str, webhook_id: &str) -> Result<WebhookSubscription, ServiceError> {
        let record = self.store.record(SUBSCRIPTION_KIND, ALL, webhook_id, self.clock.now()).await?;
        record
            .and_then(|record| WebhookSubscription::from_value(&record.value).ok())
            .filter(|subscription| subscription.tenant_id == tenant)
            .ok_or_else(not_found)
    }

    /// Deletes one of the tenant's subscriptions; `named` is the request's `tenantId`, if any.
    /// Deliveries already enqueued find it gone and send nothing.
    pub async fn delete_webhook(
        &self,
        tenant: &str,
        named: Option<&str>,
        webhook_id: &str,
    ) -> Result<(), ServiceError> {
        check_tenant(tenant, named)?;
        self.get_webhook(tenant, webhook_id).await?;
        self.store.delete_record(SUBSCRIPTION_KIND, ALL, webhook_id, Expect::Any, self.clock.now()).await?;
        if let Some(webhooks) = &self.webhooks {
            webhooks.set.invalidate();
        }
        tracing::info!(webhook_id, tenant, "webhook deleted");
        Ok(())
    }

    /// The delivery records of one of the tenant's subscriptions, by run and sequence, after
    /// `after` (a record key), optionally only those in `state`.
    pub async fn webhook_deliveries(
        &self,
        tenant: &str,
        webhook_id: &str,
        state: Option<DeliveryState>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<DeliveryRecord>, Option<String>), ServiceError> {
        self.get_webhook(tenant, webhook_id).await?;
        let now = self.clock.now();
        let mut out = Vec::new();
        let mut cursor = after.map(str::to_owned);
        // A filtered listing reads a few pages at most; the cursor says where it stopped.
        for _ in 0..10 {
            let page = self.store.records(DELIVERY_KIND, webhook_id, cursor.as_deref(), limit, now).await?;
            let full = page.len() == limit;
            for record in &page {
                cursor = Some(record.key.clone());
                if let Ok(delivery) = DeliveryRecord::from_value(&record.value) {
                    if state.is_none_or(|state| state == delivery.state) {
                        out.push(delivery);
                        if out.len() == limit {
                            return Ok((out, cursor));
                        }
                    }
                }
            }
            if !full {
                return Ok((out, None));
            }
        }
        Ok((out, cursor))
    }

    /// The deliveries a commit of `run` appending `events` enqueues: one per (subscription of
    /// the run's tenant, event it wants). No store read unless the cached set is stale.
    pub(super) async fn webhook_effects(
        &self,
        run: &RunState,
        events: &[RunEvent],
    ) -> Result<Vec<Effect>, ServiceError> {
        let Some(webhooks) = &self.webhooks else { return Ok(Vec::new()) };
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.clock.now();
        let subscriptions = webhooks.set.current(self.store.as_ref(), now).await?;
        let mut effects = Vec::new();
        for subscription in subscriptions.iter().filter(|subscription| subscription.tenant_id == run.tenant) {
            for event in events.iter().filter(|event| subscription.wants(&event.event_type)) {
                effects.push(Effect::DeliverWebhook {
                    webhook_id: subscription.webhook_id.clone(),
                    sequence: event.sequence,
                    due_at: now,
                });
            }
        }
        Ok(effects)
    }

    /// Makes one delivery attempt of event `sequence` of `run_id` to `webhook_id` and records
    /// it (see [`crate::webhook::delivery`]).
    pub async fn deliver_webhook(
        &self,
        run_id: &str,
        webhook_id: &str,
        sequence: u64,
    ) -> Result<DeliveryOutcome, ServiceError> {
        let Some(webhooks) = self.webhooks.clone() else {
            tracing::warn!(run_id, webhook_id, "no webhook transport is configured; the delivery is dropped");
            return Ok(DeliveryOutcome::Skipped);
        };
        let now = self.clock.now();
        let Some(stored) = self.store.record(SUBSCRIPTION_KIND, ALL, webhook_id, now).await? else {
            return Ok(DeliveryOutcome::Skipped);
        };
        let subscription = WebhookSubscription::from_value(&stored.value).map_err(|_| ServiceError::Internal)?;
        let key = DeliveryRecord::key(run_id, sequence);
        let prior = self.store.record(DELIVERY_KIND, webhook_id, &key, now).await?;
        let prior = prior.and_then(|record| DeliveryRecord::from_value(&record.value).ok());
        if prior.as_ref().is_some_and(|prior| prior.state != DeliveryState::Retrying) {
            return Ok(DeliveryOutcome::Skipped);
        }
        let Some(run) = self.store.load_run_summary(run_id).await? else { return Ok(DeliveryOutcome::Skipped) };
        if run.tenant != subscription.tenant_id {
            tracing::error!(run_id, webhook_id, "a delivery crosses tenants; refusing it");
            return Ok(DeliveryOutcome::Skipped);
        }
        let events = self.store.events_after(run_id, sequence.checked_sub(1), 1).await?;
        let Some(event) = events.into_iter().find(|event| event.sequence == sequence) else {
            return Ok(DeliveryOutcome::Skipped);
        };
        let delivery_id = DeliveryRecord::id(webhook_id, run_id, sequence);
        let attempts = prior.as_ref().map_or(0, |prior| prior.attempts) + 1;
        let result = if subscription.state == SubscriptionState::Failed {
            Err(crate::interrupt::callback::CallbackError {
                code: "subscription_failed".into(),
                message: "the subscription is marked failed; register it again to resume deliveries".into(),
                retryable: false,
            })
        } else {
            let body = delivery::body(&subscription, &run, &event);
            let headers = delivery::headers(&subscription, &event.event_type, &delivery_id, now / 1_000, &body);
            webhooks.transport.post(&subscription.url, &headers, body, webhooks.policy.timeout_ms).await
        };
        let now = self.clock.now();
        let mut record = DeliveryRecord {
            delivery_id,
            webhook_id: webhook_id.to_owned(),
            run_id: run_id.to_owned(),
            sequence,
            event_type: event.event_type.clone(),
            attempts,
            state: DeliveryState::Delivered,
            last_error_code: None,
            last_error: None,
            updated_at: now,
        };
        let policy = webhooks.policy;
        let outcome = match result {
            Ok(()) => DeliveryOutcome::Delivered,
            Err(error) => {
                tracing::warn!(run_id, webhook_id, sequence, attempts, code = %error.code, "webhook delivery failed");
                record.last_error_code = Some(error.code);
                record.last_error = Some(error.message);
                if error.retryable && attempts < policy.max_attempts {
                    record.state = DeliveryState::Retrying;
                    DeliveryOutcome::Retry(now + policy.backoff_ms(attempts, self.ids.random()))
                } else {
                    record.state = DeliveryState::DeadLettered;
                    DeliveryOutcome::DeadLettered
                }
            }
        };
        let expires = Some(now.saturating_add(policy.retention_ms));
        self.store.put_record(DELIVERY_KIND, webhook_id, &key, &record.to_value(), expires, Expect::Any, now).await?;
        match outcome {
            DeliveryOutcome::Delivered if subscription.consecutive_dead_letters > 0 => {
                self.count_dead_letters(&webhooks, webhook_id, false).await;
            }
            DeliveryOutcome::DeadLettered if subscription.state == SubscriptionState::Active => {
                self.count_dead_letters(&webhooks, webhook_id, true).await;
            }
            _ => {}
        }
        Ok(outcome)
    }

    /// Counts a dead-lettered delivery against the subscription (marking it failed after
    /// [`crate::webhook::DeliveryPolicy::fail_after`] in a row), or resets the count after a
    /// delivered one. Best effort: a lost race is tried again a few times, then left.
    async fn count_dead_letters(&self, webhooks: &Webhooks, webhook_id: &str, dead_lettered: bool) {
        for _ in 0..4 {
            let now = self.clock.now();
            let Ok(Some(stored)) = self.store.record(SUBSCRIPTION_KIND, ALL, webhook_id, now).await else { return };
            let Ok(mut subscription) = WebhookSubscription::from_value(&stored.value) else { return };
            if dead_lettered {
                subscription.consecutive_dead_letters += 1;
                let fail_after = webhooks.policy.fail_after;
                if fail_after > 0 && subscription.consecutive_dead_letters >= fail_after {
                    subscription.state = SubscriptionState::Failed;
                }
            } else {
                subscription.consecutive_dead_letters = 0;
            }
            let value = subscription.to_value();
            let expect = Expect::Version(stored.version);
            match self.store.put_record(SUBSCRIPTION_KIND, ALL, webhook_id, &value, None, expect, now).await {
                Ok(_) => {
                    if subscription.state == SubscriptionState::Failed {
                        tracing::warn!(webhook_id, "webhook subscription marked failed after consecutive dead letters");
                        webhooks.set.invalidate();
                    }
                    return;
                }
                Err(crate::error::StoreError::Conflict) => continue,
                Err(error) => {
                    tracing::warn!(webhook_id, %error, "counting a dead-lettered delivery failed");
                    return;
                }
            }
        }
    }
}
