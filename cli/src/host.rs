//! [`EmbeddedHost`]: starts the store, loads definitions, runs the worker loop and serves the
//! router until told to stop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use trellis_activities::ai::agent::AgentActivity;
use trellis_activities::ai::{parse_providers, CallPromptActivity, Providers};
use trellis_activities::callback::HttpCallbackSender;
use trellis_activities::http::{AllowList, HttpClient, HttpRequestActivity, HttpSettings};
use trellis_activities::secrets::{EnvSecrets, FileSecrets, SecretChain};
use trellis_activities::webhook::HttpWebhookTransport;
use trellis_core::interrupt::callback::{CallbackSender, Callbacks};
use trellis_core::limits::HostLimits;
use trellis_core::nodes::NodeRegistry;
use trellis_core::ports::IdGenerator;
use trellis_core::secrets::{Secret, SecretResolver};
use trellis_core::service::{Ports, Services};
use trellis_core::webhook::Webhooks;
use trellis_http::{router, ApiKey, AppState, Discovery, KeyRing, StreamSettings};
use trellis_store_sqlite::SqliteStore;
use trellis_worker::{run_loop, schedule_loop, CrashPoint, LocalNotifier, SystemClock, WorkerOptions};

use crate::args::ServeArgs;
use crate::keys;
use crate::serve::ConnectionSettings;

/// Why the host could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The data directory could not be created.
    #[error("cannot create data directory {0}: {1}")]
    DataDir(String, std::io::Error),
    /// The store could not be opened (another process may own it).
    #[error("cannot open the store: {0}")]
    Store(#[from] trellis_core::StoreError),
    /// Keys could not be loaded.
    #[error(transparent)]
    Keys(#[from] keys::KeyError),
    /// A workflow directory could not be loaded.
    #[error("cannot load workflows: {0}")]
    Workflows(trellis_core::ServiceError),
    /// The address could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// A setting has a value it cannot take.
    #[error("{0}")]
    Setting(String),
}

/// The node kinds the embedded host runs: the engine's pure kinds and these activities
/// (no AWS kind: the embedded binary carries no AWS SDK). `conformance.secret.echo`, which
/// outputs the hash and length of any secret the run's tenant reaches, only with the test
/// seams on (`OPENWOP_TEST_SEAM_ENABLED`: a host that runs conformance).
pub fn node_registry(args: &ServeArgs) -> Result<NodeRegistry, StartError> {
    let allow = AllowList::parse(&args.http_allow_private_nets).map_err(|error| {
        StartError::Setting(format!("--http-allow-private-nets / TRELLIS_HTTP_ALLOW_PRIVATE_NETS: {error}"))
    })?;
    let max_response_body_bytes = usize::try_from(args.http_max_response_bytes).unwrap_or(usize::MAX);
    let http = HttpClient::system(HttpSettings { allow, max_response_body_bytes, ..HttpSettings::default() });
    let secrets = secret_resolver(args)?;
    let providers = ai_providers(args)?;
    let ai = CallPromptActivity::new(http.clone(), providers, secrets.clone(), args.test_seams);
    let agent = AgentActivity::new(ai.clone(), HttpRequestActivity::new(http.clone()));
    let nodes = NodeRegistry::new()
        .register(Arc::new(HttpRequestActivity::new(http).with_secrets(secrets.clone())))
        .with_supervisor_model(Arc::new(trellis_activities::ai::supervisor::SupervisorModelActivity::new(&ai)))
        .register(Arc::new(ai))
        .register(Arc::new(agent));
    Ok(if args.test_seams { trellis_activities::conformance::register(nodes, secrets) } else { nodes })
}

/// The model providers of `core.ai.callPrompt`: the `--ai-providers` file, then the
/// `TRELLIS_OPENAI_BASE_URL` shorthand. None configured is fine: a real model call then fails
/// with `provider_not_supported` (the run's mock providers still answer).
pub fn ai_providers(args: &ServeArgs) -> Result<Providers, StartError> {
    let mut providers = match &args.ai.providers_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|error| {
                StartError::Setting(format!(
                    "--ai-providers / TRELLIS_AI_PROVIDERS: cannot read {}: {error}",
                    path.display()
                ))
            })?;
            parse_providers(&text)
                .map_err(|error| StartError::Setting(format!("--ai-providers / TRELLIS_AI_PROVIDERS: {error}")))?
        }
        None => Providers::none(),
    };
    if let Some(base_url) = &args.ai.openai_base_url {
        let key = args.ai.openai_api_key.as_ref().map(|key| Secret::new(key.0.expose().to_vec()));
        providers
            .add_openai_shorthand(base_url, key, args.ai.openai_models.clone())
            .map_err(|error| StartError::Setting(format!("--openai-base-url / TRELLIS_OPENAI_*: {error}")))?;
    } else if args.ai.openai_api_key.is_some() {
        return Err(StartError::Setting(
            "TRELLIS_OPENAI_API_KEY is set without TRELLIS_OPENAI_BASE_URL (the shorthand needs both)".to_owned(),
        ));
    }
    for provider in providers.list() {
        info!(id = %provider.id, kind = provider.kind.as_str(), models = provider.models.len(), "model provider configured");
    }
    Ok(providers)
}

/// The sender of external-event notifies (`docs/callbacks.md`): the same SSRF-guarded client
/// and address policy as `core.http.request`.
pub fn callback_sender(args: &ServeArgs) -> Result<Arc<dyn CallbackSender>, StartError> {
    Ok(Arc::new(HttpCallbackSender::new(outbound_client(args)?)))
}

/// Webhook deliveries (`docs/webhooks.md`): the same SSRF-guarded client and address policy,
/// `https` only outside the allow-listed nets.
pub fn webhooks(args: &ServeArgs) -> Result<Webhooks, StartError> {
    let transport = Arc::new(HttpWebhookTransport::new(outbound_client(args)?));
    // One process writes the subscriptions (the data directory is locked) and invalidates the
    // set when it does; the TTL is a backstop only.
    Ok(Webhooks::new(transport, args.integration.delivery_policy(), WEBHOOK_SET_TTL_MS))
}

/// How old the cached webhook subscriptions may get (embedded: a backstop, see [`webhooks`]).
const WEBHOOK_SET_TTL_MS: u64 = 60_000;

/// The outbound client of notifies and webhooks (no body cap beyond the default).
fn outbound_client(args: &ServeArgs) -> Result<HttpClient, StartError> {
    let allow = AllowList::parse(&args.http_allow_private_nets).map_err(|error| {
        StartError::Setting(format!("--http-allow-private-nets / TRELLIS_HTTP_ALLOW_PRIVATE_NETS: {error}"))
    })?;
    Ok(HttpClient::system(HttpSettings { allow, ..HttpSettings::default() }))
}

/// The embedded host's secret resolver: the secrets file (`--secrets-file`, each entry for
/// every tenant or the ones it names), then the environment (`--secrets-from-env`, for the
/// runs of the default tenant only: the variables are the host's, and a named tenant of a
/// keys file must not reach them); `None` when neither is configured (discovery then
/// advertises no `secrets`, and a node needing one fails with `credential_unavailable`).
pub fn secret_resolver(args: &ServeArgs) -> Result<Option<Arc<dyn SecretResolver>>, StartError> {
    let mut resolvers: Vec<Arc<dyn SecretResolver>> = Vec::new();
    if let Some(path) = &args.secrets_file {
        // A small file read once at start, before the host serves anything.
        let file = FileSecrets::load(path)
            .map_err(|error| StartError::Setting(format!("--secrets-file / TRELLIS_SECRETS_FILE: {error}")))?;
        info!(path = %path.display(), secrets = file.len(), "secrets file loaded");
        resolvers.push(Arc::new(file));
    }
    if args.secrets_from_env {
        let env = EnvSecrets::from_process(&[keys::DEFAULT_TENANT]);
        info!(
            variables = env.len(),
            tenant = keys::DEFAULT_TENANT,
            "secrets from TRELLIS_SECRET_* environment variables"
        );
        resolvers.push(Arc::new(env));
    }
    Ok(SecretChain::compose(resolvers))
}

/// How long a graceful stop waits for open connections.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Opaque run ids: `run-` and a version 7 UUID (a millisecond timestamp, then 74 random
/// bits). Their text sorts by creation time, so the rows of the runs in flight — events,
/// node rows, tasks, all keyed by run id first — sit together at the end of their SQLite
/// indexes instead of scattered across them: a commit dirties fewer pages and an insert
/// seldom splits one in the middle. (The serverless host keeps random ids: DynamoDB spreads
/// its keys by hash either way.)
struct UuidRunIds;

impl IdGenerator for UuidRunIds {
    fn run_id(&self) -> String {
        format!("run-{}", uuid::Uuid::now_v7())
    }
}

/// Everything a host needs besides the command line.
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// The key from `TRELLIS_API_KEY`, if set.
    pub api_key: Option<String>,
    /// Test hook: crash at this point (`TRELLIS_TEST_CRASH_AT`).
    pub crash: Option<CrashPoint>,
    /// SSE settings (keep-alive interval).
    pub streams: StreamSettings,
    /// Accept runs but hold the worker until [`EmbeddedHost::start_worker`] (tests use it to
    /// act on a run whose first step is still in flight).
    pub hold_worker: bool,
    /// Connection limit and read timeouts (`--max-connections`; the timeouts are fixed
    /// outside tests).
    pub connections: ConnectionSettings,
}

/// A running embedded host.
pub struct EmbeddedHost {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The development key, when one was generated or read (printed at start).
    pub dev_key: Option<String>,
    /// Ids discovery advertises as runnable fixtures.
    pub fixtures: Vec<String>,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    worker: Option<JoinHandle<()>>,
    held: Option<HeldWorker>,
}

/// Consecutive steps of one run the embedded host applies before one commit (their events
/// become visible together; a serverless host keeps one invocation per step).
pub const STEP_CHAIN_LIMIT: usize = 64;

/// A worker loop not started yet.
type HeldWorker = Box<dyn FnOnce() -> JoinHandle<()> + Send>;

impl EmbeddedHost {
    /// Opens the store, loads definitions, binds and starts serving.
    pub async fn start(args: &ServeArgs, options: HostOptions) -> Result<Self, StartError> {
        let store: Arc<SqliteStore> = if args.memory {
            Arc::new(SqliteStore::open_in_memory()?)
        } else {
            std::fs::create_dir_all(&args.data_dir)
                .map_err(|error| StartError::DataDir(args.data_dir.display().to_string(), error))?;
            Arc::new(SqliteStore::open(&args.data_dir.join("trellis.db"))?)
        };
        let limits = HostLimits {
            max_node_executions: args.max_node_executions,
            max_run_duration_ms: args.max_run_duration_ms,
            default_retention_ms: args.retention,
            ..HostLimits::default()
        };
        let notifier = Arc::new(LocalNotifier::default());
        let ports = Ports {
            store: store.clone(),
            effects: store.clone(),
            clock: Arc::new(SystemClock),
            ids: Arc::new(UuidRunIds),
            notifier: notifier.clone(),
        };
        let nodes = node_registry(args)?;
        // The token key: the API verifies interrupt tokens with it, the worker signs the
        // tokens its callback notifies carry with it.
        let cursor_key = keys::cursor_secret((!args.memory).then_some(args.data_dir.as_path()))?;
        let callbacks =
            Callbacks::new(&cursor_key[..], callback_sender(args)?).with_public_url(args.public_url.clone());
        let services = Services::new(ports, limits)
            .with_test_seams(args.test_seams)
            .with_nodes(nodes)
            .with_callbacks(callbacks)
            .with_webhooks(webhooks(args)?);
        let services = Arc::new(services.with_step_chaining(STEP_CHAIN_LIMIT));

        let fixtures = load_definitions(&services, args).await?;
        let (keys, dev_key) = collect_keys(args, &options)?;

        let state = AppState {
            services: services.clone(),
            keys: Arc::new(KeyRing::new(keys)),
            discovery: Arc::new(
                Discovery::new(&limits, &fixtures, &services.nodes, services.test_seams)
                    .with_integration(services.webhooks.as_deref()),
            ),
            cursor_key: Arc::new(cursor_key),
            streams: options.streams,
        };
        let listener = TcpListener::bind(args.bind).await.map_err(|error| StartError::Bind(args.bind, error))?;
        let addr = listener.local_addr().map_err(|error| StartError::Bind(args.bind, error))?;
        let (shutdown, stop) = watch::channel(false);

        let worker_options = WorkerOptions {
            crash: options.crash,
            max_concurrent_activities: args.max_concurrent_activities as usize,
            ..WorkerOptions::default()
        };
        let stop_worker = stop.clone();
        let tick_ms = args.integration.scheduler_tick_ms;
        let sweep_ms = args.sweep_interval_ms;
        let spawn_worker = move || {
            tokio::spawn(schedule_loop(services.clone(), tick_ms, stop_worker.clone()));
            tokio::spawn(crate::sweep::sweep_loop(services.clone(), store.clone(), sweep_ms, stop_worker.clone()));
            tokio::spawn(run_loop(services, store, notifier, worker_options, stop_worker))
        };
        let (worker, held): (_, Option<HeldWorker>) =
            if options.hold_worker { (None, Some(Box::new(spawn_worker))) } else { (Some(spawn_worker()), None) };
        let app = router(state);
        let server = tokio::spawn(crate::serve::serve(listener, app, options.connections, stop));
        info!(%addr, fixtures = fixtures.len(), "trellis is serving");
        Ok(Self { addr, dev_key, fixtures, shutdown, server, worker, held })
    }

    /// Stops accepting requests, lets in-flight ones and the current task finish, and waits.
    /// Connections still open after [`SHUTDOWN_GRACE`] (an SSE stream on a live run, a
    /// long-poll) are closed; their clients resume with `Last-Event-ID` or a new poll.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        let mut server = self.server;
        if tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await.is_err() {
            server.abort();
        }
        if let Some(worker) = self.worker {
            let _ = worker.await;
        }
    }

    /// Starts a worker held back by [`HostOptions::hold_worker`]; no-op otherwise.
    pub fn start_worker(&mut self) {
        if let Some(spawn) = self.held.take() {
            self.worker = Some(spawn());
        }
    }
}

/// Loads the bundled fixtures, `OPENWOP_FIXTURES_DIR` and every `--workflows` directory;
/// returns the fixture ids to advertise (table entries that are loaded and runnable).
async fn load_definitions(services: &Services, args: &ServeArgs) -> Result<Vec<String>, StartError> {
    services.load_bundled_fixtures().await.map_err(StartError::Workflows)?;
    let dirs: Vec<&PathBuf> = args.fixtures_dir.iter().chain(args.workflows.iter()).collect();
    for dir in dirs {
        // Directory reading is blocking file I/O: off the async workers.
        let owned = dir.clone();
        let files = tokio::task::spawn_blocking(move || trellis_core::service::read_definition_files(&owned))
            .await
            .map_err(|_| StartError::Workflows(trellis_core::ServiceError::Internal))?
            .map_err(StartError::Workflows)?;
        let report = services.load_definition_files(files).await.map_err(StartError::Workflows)?;
        let runnable = report.runnable.join(",");
        info!(dir = %dir.display(), %runnable, not_runnable = report.not_runnable.len(), refused = report.refused.len(), "workflows loaded");
        for (id, reason) in &report.not_runnable {
            info!(workflow = %id, %reason, "stored but not runnable here");
        }
        for (file, reason) in &report.refused {
            warn!(%file, %reason, "workflow definition refused");
        }
    }
    Ok(services.advertised_fixtures().await)
}

fn collect_keys(args: &ServeArgs, options: &HostOptions) -> Result<(Vec<ApiKey>, Option<String>), StartError> {
    let dev_secret = || if args.memory { Ok(keys::generate_key()) } else { keys::dev_key(&args.data_dir) };
    let collected = keys::collect(args.keys_file.as_deref(), options.api_key.as_deref(), dev_secret, args.test_seams)?;
    Ok((collected.keys, collected.dev_key))
}
