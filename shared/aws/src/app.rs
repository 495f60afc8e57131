//! The composition shared by the functions: DynamoDB store, SQS effects, the use cases, and
//! (for the API) the router state.

use std::sync::Arc;
use std::time::Duration;

use trellis_activities::ai::agent::AgentActivity;
use trellis_activities::ai::CallPromptActivity;
use trellis_activities::callback::HttpCallbackSender;
use trellis_activities::http::{HttpClient, HttpRequestActivity};
use trellis_activities::webhook::HttpWebhookTransport;
use trellis_core::bus::EventBus;
use trellis_core::interrupt::callback::Callbacks;
use trellis_core::nodes::NodeRegistry;
use trellis_core::ports::IdGenerator;
use trellis_core::secrets::SecretResolver;
use trellis_core::service::{Ports, Services};
use trellis_core::webhook::Webhooks;
use trellis_http::{ApiKey, AppState, Discovery, KeyRing, StreamSettings};
use trellis_store_dynamodb::DynamoStore;
use trellis_worker::{SystemClock, TaskContext};

use crate::bus::EventBridgePublisher;
use crate::effects::SqsEffects;
use crate::notifier::PollingNotifier;
use crate::settings::{ApiSettings, Settings};

/// Opaque run ids.
struct UuidRunIds;

impl IdGenerator for UuidRunIds {
    fn run_id(&self) -> String {
        format!("run-{}", uuid::Uuid::new_v4())
    }
}

/// The AWS SDK configuration from the environment, with a rustls + ring HTTPS client.
pub async fn sdk_config() -> aws_config::SdkConfig {
    use aws_smithy_http_client::{tls, Builder};
    let http = Builder::new().tls_provider(tls::Provider::Rustls(tls::rustls_provider::CryptoMode::Ring)).build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http).load().await
}

/// Everything a function needs, built once per cold start.
pub struct AwsApp {
    /// The use cases.
    pub services: Arc<Services>,
    /// The store (for the reconciler's outbox sweep).
    pub store: Arc<DynamoStore>,
    /// The effect sink (for re-sending deferred tasks).
    pub effects: Arc<SqsEffects>,
    /// The settings.
    pub settings: Settings,
    /// What a step's processing may use beyond the services (test hooks; default none).
    pub task_context: TaskContext,
}

/// The node kinds the AWS functions run, without a secret resolver (see
/// [`node_registry_with`]).
pub fn node_registry(settings: &Settings) -> NodeRegistry {
    node_registry_with(settings, None)
}

/// The node kinds the AWS functions run: the engine's pure kinds and these activities
/// (`core.http.request`, `core.ai.callPrompt` with the providers of `TRELLIS_AI_PROVIDERS`), whose
/// `credentialsRef` resolves through `secrets` (discovery advertises `secrets` only with one).
/// `conformance.secret.echo`, which outputs the hash and length of any secret the run's tenant
/// reaches, only with the test seams on (`OPENWOP_TEST_SEAM_ENABLED`: a stack that runs
/// conformance).
pub fn node_registry_with(settings: &Settings, secrets: Option<Arc<dyn SecretResolver>>) -> NodeRegistry {
    node_registry_of(settings, secrets, settings.providers())
}

/// [`node_registry_with`] over `providers` (the functions': `bedrock` ones with the Converse
/// client attached, [`crate::bedrock::with_backend`]).
pub fn node_registry_of(
    settings: &Settings,
    secrets: Option<Arc<dyn SecretResolver>>,
    providers: trellis_activities::ai::Providers,
) -> NodeRegistry {
    let http = HttpClient::system(settings.http.clone());
    let ai = CallPromptActivity::new(http.clone(), providers, secrets.clone(), settings.test_seams);
    let agent = AgentActivity::new(ai.clone(), HttpRequestActivity::new(http.clone()));
    let nodes = NodeRegistry::new()
        .register(Arc::new(HttpRequestActivity::new(http).with_secrets(secrets.clone())))
        .with_supervisor_model(Arc::new(trellis_activities::ai::supervisor::SupervisorModelActivity::new(&ai)))
        .register(Arc::new(ai))
        .register(Arc::new(agent));
    if settings.test_seams {
        trellis_activities::conformance::register(nodes, secrets)
    } else {
        nodes
    }
}

/// How the dispatcher notifies external workers: tokens signed with the key the API derives
/// from the same `TRELLIS_CURSOR_SECRET`, POSTs through `core.http.request`'s client and address
/// policy or messages on SQS queues ([`crate::callbacks`]), their links under
/// `TRELLIS_PUBLIC_URL` when set; `None` without the secret.
pub fn callbacks(settings: &Settings, config: &aws_config::SdkConfig) -> Option<Callbacks> {
    let secret = settings.callback_secret.as_deref()?;
    let http = HttpCallbackSender::new(HttpClient::system(settings.http.clone()));
    let sender = crate::callbacks::AwsCallbackSender::new(http, aws_sdk_sqs::Client::new(config));
    Some(Callbacks::new(&ApiKey::hash_of(secret)[..], Arc::new(sender)).with_public_url(settings.public_url.clone()))
}

impl AwsApp {
    /// Builds the app of a function whose tasks are redelivered (dispatcher, completion)
    /// from settings and an SDK configuration.
    pub fn new(settings: Settings, config: &aws_config::SdkConfig) -> Self {
        Self::build(settings, config, false)
    }

    /// Builds the API function's app: its commits are not redelivered, so each commit with
    /// effects first writes an outbox entry the reconciler reads.
    pub fn new_api(settings: Settings, config: &aws_config::SdkConfig) -> Self {
        Self::build(settings, config, true)
    }

    fn build(settings: Settings, config: &aws_config::SdkConfig, outbox_entries: bool) -> Self {
        let mut store = DynamoStore::new(aws_sdk_dynamodb::Client::new(config), settings.table_name.clone())
            .with_retention_days(settings.retention_days)
            .with_delta_pages(settings.delta_pages);
        if outbox_entries {
            store = store.with_outbox_entries();
        }
        if let Some(bucket) = &settings.blobs.bucket {
            let s3 = aws_sdk_s3::config::Builder::from(config).force_path_style(settings.blobs.path_style).build();
            store = store.with_blob_bucket(aws_sdk_s3::Client::from_conf(s3), bucket.clone());
        }
        let store = Arc::new(store);
        let clock = Arc::new(SystemClock);
        let effects = Arc::new(
            SqsEffects::new(
                aws_sdk_sqs::Client::new(config),
                settings.step_queue_url.clone(),
                settings.completion_queue_url.clone(),
                store.clone(),
                clock.clone(),
            )
            .with_unproven_grace_ms(settings.dispatcher_timeout_ms),
        );
        let ports = Ports {
            store: store.clone(),
            effects: effects.clone(),
            clock,
            ids: Arc::new(UuidRunIds),
            notifier: Arc::new(PollingNotifier),
        };
        let mut services = Services::new(ports, settings.limits)
            .with_test_seams(settings.test_seams)
            .with_nodes(
                crate::nodes::register(
                    node_registry_of(
                        &settings,
                        crate::secrets::resolver(&settings.secrets, config),
                        crate::bedrock::with_backend(settings.providers(), config),
                    ),
                    &crate::nodes::ServiceClients::new(config),
                )
                .with_queue_notifies(),
            )
            // A child run is created in the call that committed its parent's step, and a
            // finished child advances its parent in the call that committed its end: no
            // message and no invocation of their own (the queue stays the fallback).
            .with_inline_children(true)
            // Trigger queues and rules deliver to the dispatcher (crate::triggers).
            .with_queue_triggers();
        if let Some(callbacks) = callbacks(&settings, config) {
            services = services.with_callbacks(callbacks);
        }
        let transport = Arc::new(HttpWebhookTransport::new(HttpClient::system(settings.http.clone())));
        services =
            services.with_webhooks(Webhooks::new(transport, settings.webhook_policy, settings.webhook_set_ttl_ms));
        if let Some(bus_name) = &settings.events.bus_name {
            let publisher = EventBridgePublisher::new(aws_sdk_eventbridge::Client::new(config), bus_name.clone());
            services = services.with_event_bus(EventBus {
                publisher: Arc::new(publisher),
                events: settings.events.lifecycle.clone(),
                public_url: settings.public_url.as_ref().map(|url| url.url_of("")),
                host_id: "trellis".into(),
            });
        }
        let services = Arc::new(services);
        Self { services, store, effects, settings, task_context: TaskContext::default() }
    }

    /// The router state of the API function: the bundled fixtures are stored (once per
    /// fixture set: a later cold start reads one setting), keys and the cursor secret come
    /// from the API settings, streams end before the deadline.
    pub async fn api_state(&self, api: &ApiSettings) -> Result<AppState, trellis_core::ServiceError> {
        let fixtures = self.services.bundled_fixtures().await?;
        let keys = ApiKey::parse_list(&api.api_keys).map_err(|_| trellis_core::ServiceError::Internal)?;
        Ok(AppState {
            services: self.services.clone(),
            keys: Arc::new(KeyRing::new(keys)),
            discovery: Arc::new(
                Discovery::new(&self.settings.limits, &fixtures, &self.services.nodes, self.services.test_seams)
                    .with_integration(self.services.webhooks.as_deref())
                    .with_services_integration(&self.services),
            ),
            cursor_key: Arc::new(ApiKey::hash_of(&api.cursor_secret)),
            streams: StreamSettings {
                keepalive: Duration::from_secs(15),
                max_duration: Some(Duration::from_secs(api.stream_max_seconds)),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(test_seams: &str) -> Settings {
        let pairs = [
            ("TRELLIS_TABLE_NAME", "t"),
            ("TRELLIS_STEP_QUEUE_URL", "q"),
            ("TRELLIS_COMPLETION_QUEUE_URL", "c"),
            ("OPENWOP_TEST_SEAM_ENABLED", test_seams),
        ];
        Settings::from_lookup(&|name| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_string()))
            .expect("valid settings")
    }

    #[test]
    fn the_secret_echo_kind_is_registered_only_with_the_test_seams() {
        let echo = trellis_activities::secrets::echo::TYPE_ID;
        let off = node_registry(&settings("false")).type_ids();
        assert!(!off.contains(&echo), "{off:?}");
        assert!(off.contains(&"core.http.request"), "{off:?}");
        let on = node_registry(&settings("true")).type_ids();
        assert!(on.contains(&echo), "{on:?}");
    }
}
