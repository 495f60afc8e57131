//! Starting and stopping the local stack: the endpoint check, the functions' settings from
//! the options and the environment, the table and queues (the trigger queue too) and the
//! run-event bus, the `api` function's app behind the HTTP server, the dispatcher's app
//! behind the queue mappings and the reconciler's timer; SIGINT or SIGTERM stops it all.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};
use trellis_aws::local::pump::{run_mapping, run_trigger_mapping, QueueKind};
use trellis_aws::local::resources;
use trellis_aws::local::schedule::{run_reconciler, run_scheduler, RECONCILE_EVERY, SCHEDULER_EVERY};
use trellis_aws::settings::ApiSettings;
use trellis_aws::{AwsApp, Settings};

use crate::args::Args;
use crate::server::{serve, Gateway};

/// Step-queue batches handled at once (the dispatcher's concurrency on AWS is larger; a
/// batch's runs are handled concurrently within it).
const STEP_MAPPINGS: usize = 4;
/// How long a batch in a handler gets to finish after a stop.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Why the stack did not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// No endpoint override and no `--allow-real-aws`.
    #[error(
        "no endpoint override for {0} (AWS_ENDPOINT_URL, or AWS_ENDPOINT_URL_DYNAMODB and AWS_ENDPOINT_URL_SQS): \
         this would create the table and queues `{1}…` in the AWS account of your credentials. Point it at the \
         emulators (scripts/emulators.sh) or LocalStack (AWS_ENDPOINT_URL=http://localhost:4566), or pass \
         --allow-real-aws"
    )]
    RealAws(String, String),
    /// A setting is missing or malformed.
    #[error(transparent)]
    Settings(#[from] trellis_aws::SettingsError),
    /// Keys or secrets.
    #[error(transparent)]
    Keys(#[from] trellis_http::devkeys::KeyError),
    /// The table or queues.
    #[error(transparent)]
    Resources(#[from] resources::ResourcesError),
    /// `--ai-providers` names a file that cannot be read.
    #[error("cannot read the model providers file {0}: {1}")]
    Providers(String, std::io::Error),
    /// The stage is not one path segment.
    #[error("--stage `{0}` is invalid: use letters, digits, `-` or `_`")]
    Stage(String),
    /// The router's state or the workflows.
    #[error("{0}")]
    Service(String),
    /// The address could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(std::net::SocketAddr, std::io::Error),
}

/// Prints `message` as the binary's error; exit code 1.
pub(crate) fn fail(message: &str) -> ExitCode {
    eprintln!("trellis-aws-local: {message}");
    ExitCode::FAILURE
}

/// The services (DynamoDB, SQS) whose endpoint is not overridden in `lookup`'s environment.
fn real_services(lookup: &dyn Fn(&str) -> Option<String>) -> Vec<&'static str> {
    let set = |name: &str| lookup(name).is_some_and(|value| !value.trim().is_empty());
    let global = set("AWS_ENDPOINT_URL");
    [("DynamoDB", "AWS_ENDPOINT_URL_DYNAMODB"), ("SQS", "AWS_ENDPOINT_URL_SQS")]
        .into_iter()
        .filter(|(_, specific)| !global && !set(specific))
        .map(|(service, _)| service)
        .collect()
}

/// Whether the stack may create its run-event bus: EventBridge's endpoint is overridden (an
/// emulator), or real AWS is allowed.
fn eventbridge_reachable(lookup: &dyn Fn(&str) -> Option<String>, allow_real_aws: bool) -> bool {
    let set = |name: &str| lookup(name).is_some_and(|value| !value.trim().is_empty());
    allow_real_aws || set("AWS_ENDPOINT_URL") || set("AWS_ENDPOINT_URL_EVENTBRIDGE")
}

/// Whether S3 can be reached: an emulator's endpoint is set, or real AWS is allowed.
fn s3_reachable(lookup: &dyn Fn(&str) -> Option<String>, allow_real_aws: bool) -> bool {
    let set = |name: &str| lookup(name).is_some_and(|value| !value.trim().is_empty());
    allow_real_aws || set("AWS_ENDPOINT_URL") || set("AWS_ENDPOINT_URL_S3")
}

/// The functions' `TRELLIS_PUBLIC_URL` when the environment (`set`) gives none: the stack's
/// own address under its stage (`http://127.0.0.1:8080/v`; loopback for an unspecified bind
/// address), so the links of an external-event notification (`resolvePath`, `resolveUrl`)
/// keep the stage the local gateway serves the API under.
fn default_public_url(set: Option<&str>, addr: SocketAddr, stage: &str) -> Option<String> {
    if set.is_some_and(|value| !value.trim().is_empty()) {
        return None;
    }
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    Some(format!("http://{}/{stage}", SocketAddr::new(ip, addr.port())))
}

/// The model providers document: `value` itself when it is JSON, else the file it names.
fn providers_document(value: Option<&str>) -> Result<String, StartError> {
    let Some(value) = value.map(str::trim).filter(|value| !value.is_empty()) else { return Ok(String::new()) };
    if value.starts_with('[') || value.starts_with('{') {
        return Ok(value.to_owned());
    }
    std::fs::read_to_string(value).map_err(|error| StartError::Providers(value.to_owned(), error))
}

/// The functions' settings: `overlay` first, then the process environment.
fn settings_with(overlay: &HashMap<&'static str, String>) -> Result<(Settings, ApiSettings), StartError> {
    let lookup = |name: &str| overlay.get(name).cloned().or_else(|| std::env::var(name).ok());
    Ok((Settings::from_lookup(&lookup)?, ApiSettings::from_lookup(&lookup)?))
}

/// The running stack.
struct Running {
    shutdown: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    workers: JoinSet<()>,
}

async fn start(args: &Args) -> Result<Running, StartError> {
    let missing = real_services(&|name| std::env::var(name).ok());
    if !missing.is_empty() && !args.allow_real_aws {
        return Err(StartError::RealAws(missing.join(" and "), args.name.clone()));
    }
    if args.stage.is_empty() || !args.stage.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(StartError::Stage(args.stage.clone()));
    }
    resources::check_name(&args.name)?;
    // Bound first: the address is the default public URL of the links in notifications.
    let listener =
        tokio::net::TcpListener::bind(args.bind).await.map_err(|error| StartError::Bind(args.bind, error))?;
    let addr = listener.local_addr().map_err(|error| StartError::Bind(args.bind, error))?;
    let keys = crate::keys::collect(
        args.keys_file.as_deref(),
        std::env::var("TRELLIS_API_KEY").ok().as_deref(),
        args.test_seams,
    )?;
    let mut overlay: HashMap<&'static str, String> = HashMap::from([
        ("TRELLIS_TABLE_NAME", args.name.clone()),
        ("TRELLIS_STEP_QUEUE_URL", "pending".to_owned()),
        ("TRELLIS_COMPLETION_QUEUE_URL", "pending".to_owned()),
        ("TRELLIS_API_KEYS", crate::keys::to_setting(&keys.keys)),
        ("TRELLIS_CURSOR_SECRET", crate::keys::cursor_secret()?),
        ("TRELLIS_HTTP_ALLOW_PRIVATE_NETS", args.http_allow_private_nets.clone()),
        ("TRELLIS_AI_PROVIDERS", providers_document(args.ai_providers.as_deref())?),
        ("OPENWOP_TEST_SEAM_ENABLED", args.test_seams.to_string()),
    ]);
    if let Some(public_url) = default_public_url(std::env::var("TRELLIS_PUBLIC_URL").ok().as_deref(), addr, &args.stage)
    {
        overlay.insert("TRELLIS_PUBLIC_URL", public_url);
    }
    // Checked before anything is created; read again with the queues' URLs.
    let (checked, _) = settings_with(&overlay)?;
    let config = trellis_aws::app::sdk_config().await;
    // A new queue's visibility timeout: 6x the dispatcher's timeout, as the template's.
    let visibility = u32::try_from(checked.dispatcher_timeout_ms * 6 / 1000).unwrap_or(u32::MAX);
    let made = resources::ensure(&config, &args.name, checked.max_receive_count, visibility).await?;
    overlay.insert("TRELLIS_STEP_QUEUE_URL", made.queues.step.clone());
    overlay.insert("TRELLIS_COMPLETION_QUEUE_URL", made.queues.completion.clone());
    // Run events go to the stack's own bus where EventBridge is reachable (an emulator's
    // endpoint, or real AWS when allowed), unless the environment names one.
    let bus = match std::env::var("TRELLIS_EVENT_BUS_NAME").ok().filter(|bus| !bus.trim().is_empty()) {
        Some(named) => Some(named),
        None if eventbridge_reachable(&|name| std::env::var(name).ok(), args.allow_real_aws) => {
            Some(resources::ensure_bus(&config, &args.name).await?)
        }
        None => None,
    };
    if let Some(bus) = &bus {
        overlay.insert("TRELLIS_EVENT_BUS_NAME", bus.clone());
    }
    // Values over 256 KiB go to the stack's own bucket where S3 is reachable (an emulator's
    // endpoint uses path-style addressing), unless the environment names one.
    let lookup = |name: &str| std::env::var(name).ok();
    let bucket = match std::env::var("TRELLIS_BLOB_BUCKET").ok().filter(|bucket| !bucket.trim().is_empty()) {
        Some(named) => Some(named),
        None if s3_reachable(&lookup, args.allow_real_aws) => {
            let emulated = !args.allow_real_aws;
            let s3 = aws_sdk_s3::Client::from_conf(
                aws_sdk_s3::config::Builder::from(&config).force_path_style(emulated).build(),
            );
            overlay.insert("TRELLIS_S3_PATH_STYLE", if emulated { "on" } else { "off" }.to_owned());
            Some(resources::ensure_bucket(&s3, &args.name).await?)
        }
        None => None,
    };
    if let Some(bucket) = &bucket {
        overlay.insert("TRELLIS_BLOB_BUCKET", bucket.clone());
    }
    let (settings, api) = settings_with(&overlay)?;

    let api_app = AwsApp::new_api(settings.clone(), &config);
    let state = api_app.api_state(&api).await.map_err(|error| StartError::Service(error.to_string()))?;
    register_workflows(&api_app, &args.workflows).await?;
    // Links (statusUrl, Location, …) keep the `/{stage}` prefix, as on the `api` function.
    let router = trellis_aws::stage::router_with_stage_links(trellis_http::router(state));

    let (shutdown, stopped) = watch::channel(false);
    let worker_app = Arc::new(AwsApp::new(settings, &config));
    let sqs = aws_sdk_sqs::Client::new(&config);
    let mut workers = JoinSet::new();
    for _ in 0..STEP_MAPPINGS {
        workers.spawn(run_mapping(
            worker_app.clone(),
            sqs.clone(),
            made.queues.step.clone(),
            QueueKind::Steps,
            stopped.clone(),
        ));
    }
    workers.spawn(run_mapping(
        worker_app.clone(),
        sqs.clone(),
        made.queues.completion.clone(),
        QueueKind::Completions,
        stopped.clone(),
    ));
    let (trigger_url, trigger_arn) = made.triggers.clone();
    workers.spawn(run_trigger_mapping(worker_app.clone(), sqs, trigger_url, trigger_arn, stopped.clone()));
    workers.spawn(run_scheduler(worker_app.clone(), SCHEDULER_EVERY, stopped.clone()));
    workers.spawn(run_reconciler(worker_app, RECONCILE_EVERY, stopped.clone()));
    let gateway = Arc::new(Gateway { router, stage: args.stage.clone() });
    let server = tokio::spawn(serve(listener, gateway, stopped));

    info!(
        table = %made.table,
        steps = %made.queues.step,
        completions = %made.queues.completion,
        triggers = %made.triggers.1,
        bus = bus.as_deref().unwrap_or("none"),
        blobs = bucket.as_deref().unwrap_or("none"),
        "resources ready"
    );
    println!("trellis-aws-local listening on http://{addr}/{}", args.stage);
    println!("trigger queue (bind it with trellis triggers create --sqs-queue-arn): {}", made.triggers.1);
    if let Some(key) = &keys.dev_key {
        println!("development API key (Authorization: Bearer …): {key}");
    }
    Ok(Running { shutdown, server, workers })
}

async fn register_workflows(app: &AwsApp, dirs: &[std::path::PathBuf]) -> Result<(), StartError> {
    for dir in dirs {
        let owned = dir.clone();
        let files = tokio::task::spawn_blocking(move || trellis_core::service::read_definition_files(&owned))
            .await
            .map_err(|error| StartError::Service(error.to_string()))?
            .map_err(|error| StartError::Service(error.to_string()))?;
        let report =
            app.services.load_definition_files(files).await.map_err(|error| StartError::Service(error.to_string()))?;
        info!(dir = %dir.display(), runnable = %report.runnable.join(","), "workflows registered");
        for (id, reason) in &report.not_runnable {
            info!(workflow = %id, %reason, "stored but not runnable here");
        }
        for (file, reason) in &report.refused {
            warn!(%file, %reason, "workflow definition refused");
        }
    }
    Ok(())
}

/// Runs the stack until SIGINT or SIGTERM.
pub(crate) async fn run(args: Args) -> ExitCode {
    let mut running = match start(&args).await {
        Ok(running) => running,
        Err(error) => return fail(&error.to_string()),
    };
    trellis_http::shutdown::signal().await;
    info!("stopping");
    let _ = running.shutdown.send(true);
    let _ = (&mut running.server).await;
    let workers = async { while running.workers.join_next().await.is_some() {} };
    if tokio::time::timeout(STOP_GRACE, workers).await.is_err() {
        running.workers.abort_all();
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_override_is_needed_for_each_service() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_string())
        };
        assert_eq!(real_services(&env(&[])), ["DynamoDB", "SQS"]);
        assert_eq!(real_services(&env(&[("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000")])), ["SQS"]);
        assert!(real_services(&env(&[("AWS_ENDPOINT_URL", "http://localhost:4566")])).is_empty());
        let both = env(&[("AWS_ENDPOINT_URL_DYNAMODB", "http://a"), ("AWS_ENDPOINT_URL_SQS", "http://b")]);
        assert!(real_services(&both).is_empty());
    }

    #[test]
    fn the_bus_is_created_only_where_eventbridge_is_overridden_or_real_aws_allowed() {
        let none = |_: &str| None;
        assert!(!eventbridge_reachable(&none, false));
        assert!(eventbridge_reachable(&none, true));
        let moto = |name: &str| (name == "AWS_ENDPOINT_URL_EVENTBRIDGE").then(|| "http://127.0.0.1:5000".to_owned());
        assert!(eventbridge_reachable(&moto, false));
    }

    #[test]
    fn the_public_url_defaults_to_the_bound_address_under_the_stage() {
        let addr = |text: &str| text.parse::<SocketAddr>().unwrap();
        assert_eq!(default_public_url(None, addr("127.0.0.1:4100"), "v").as_deref(), Some("http://127.0.0.1:4100/v"));
        assert_eq!(
            default_public_url(Some(" "), addr("0.0.0.0:80"), "dev").as_deref(),
            Some("http://127.0.0.1:80/dev")
        );
        assert_eq!(default_public_url(None, addr("[::]:8080"), "v").as_deref(), Some("http://[::1]:8080/v"));
        assert_eq!(default_public_url(Some("https://tunnel.example/v"), addr("127.0.0.1:1"), "v"), None);
        // The default passes the functions' own check of the setting.
        let url = default_public_url(None, addr("127.0.0.1:4100"), "v").unwrap();
        let public = trellis_core::interrupt::callback::PublicUrl::parse("TRELLIS_PUBLIC_URL", &url).unwrap();
        assert_eq!(public.path_of("/v1/interrupts/T"), "/v/v1/interrupts/T");
    }

    #[test]
    fn the_providers_document_is_inline_json_or_a_file() {
        assert_eq!(providers_document(None).unwrap(), "");
        assert_eq!(providers_document(Some(" [] ")).unwrap(), "[]");
        assert!(matches!(providers_document(Some("no-such-file.json")), Err(StartError::Providers(..))));
    }
}
