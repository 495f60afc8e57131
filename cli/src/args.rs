//! Command-line arguments. Every `serve` flag also reads an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Trellis — an OpenWOP workflow host.
#[derive(Debug, Parser)]
#[command(
    name = "trellis",
    version,
    about = "Trellis: an OpenWOP workflow host. 'trellis serve' runs the embedded host (HTTP API, engine and SQLite store in one process)."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// What `serve --help` adds after the flags: where keys come from, and logging.
const SERVE_AFTER_HELP: &str = "\
API keys (send one as Authorization: Bearer KEY):
  TRELLIS_API_KEY=SECRET   one key with every scope for tenant default.
  --keys FILE              hashed keys bound to tenants and scopes (see trellis hash-key).
  With neither, a development key with every scope is generated and printed at start; it is
  kept in DATA_DIR/dev-api-key (mode 0600), or lives only as long as the process with --memory.

Logs go to standard error: RUST_LOG sets the filter (default info), --log-format the format;
text is coloured only when standard error is a terminal.";

/// What `hash-key --help` adds.
const HASH_KEY_AFTER_HELP: &str = "\
Reads standard input to its end (from a terminal: one line, after a prompt on standard error);
surrounding whitespace is trimmed. Example:
  printf %s \"$KEY\" | trellis hash-key";

/// Subcommands.
// Parsed once at start and matched once: the size of the `Serve` variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the embedded host: HTTP API, engine and durable SQLite store in one process.
    #[command(after_help = SERVE_AFTER_HELP)]
    Serve {
        /// Host settings.
        #[command(flatten)]
        args: ServeArgs,
        /// Process settings: connections and logs.
        #[command(flatten)]
        process: ProcessArgs,
    },
    /// Print the SHA-256 of an API key read from standard input: the sha256 field of a
    /// keys-file entry (the key itself is never stored).
    #[command(after_help = HASH_KEY_AFTER_HELP)]
    HashKey,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured only on a terminal).
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// `trellis serve` settings of the process around the host.
#[derive(Debug, Clone, clap::Args)]
pub struct ProcessArgs {
    /// Open connections at most; one more is answered 503 and closed, with a warning logged.
    #[arg(long, env = "TRELLIS_MAX_CONNECTIONS", default_value_t = crate::serve::DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Log format: text, or json (one object per line).
    #[arg(long, env = "TRELLIS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `trellis serve` settings.
#[derive(Debug, Clone, Parser)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "TRELLIS_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// Directory of the durable store (created if missing).
    #[arg(long, env = "TRELLIS_DATA_DIR", default_value = "trellis-data")]
    pub data_dir: PathBuf,
    /// Keep everything in memory: nothing survives the process.
    #[arg(long, env = "TRELLIS_MEMORY")]
    pub memory: bool,
    /// A directory of workflow definitions (*.json) to load at start; repeatable.
    #[arg(long = "workflows", env = "TRELLIS_WORKFLOWS", value_delimiter = ',')]
    pub workflows: Vec<PathBuf>,
    /// A directory of OpenWOP conformance fixtures to load at start.
    #[arg(long, env = "OPENWOP_FIXTURES_DIR")]
    pub fixtures_dir: Option<PathBuf>,
    /// A JSON file of hashed API keys, each bound to a tenant and scopes.
    #[arg(long = "keys", env = "TRELLIS_KEYS_FILE")]
    pub keys_file: Option<PathBuf>,
    /// Node executions allowed per run (the ceiling for configurable.recursionLimit).
    #[arg(long, env = "TRELLIS_MAX_NODE_EXECUTIONS", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_node_executions: u32,
    /// Longest run in milliseconds, at most 2592000000 (30 days): the ceiling for
    /// `configurable.runTimeoutMs` and for the durations a registered definition gives.
    #[arg(long, env = "TRELLIS_MAX_RUN_DURATION_MS", default_value_t = 86_400_000, value_parser = clap::value_parser!(u64).range(1000..=trellis_core::limits::MAX_RUN_DURATION_MS))]
    pub max_run_duration_ms: u64,
    /// Serve the conformance test seams (/v1/host/sample/...) to keys with the test:seams
    /// scope, and honour the capability overlay they set. Off by default; never in production.
    #[arg(long, env = "OPENWOP_TEST_SEAM_ENABLED")]
    pub test_seams: bool,
    /// Activity attempts (HTTP calls, …) executing at once; more wait their turn, and a slow
    /// call never holds up other runs' steps.
    #[arg(long, env = "TRELLIS_MAX_CONCURRENT_ACTIVITIES", default_value_t = trellis_worker::DEFAULT_MAX_CONCURRENT_ACTIVITIES as u32, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_concurrent_activities: u32,
    /// Private destinations `core.http.request` may reach, as a comma list of IPs or CIDRs
    /// (e.g. `10.1.0.0/16,127.0.0.1`). Empty by default: loopback, RFC 1918, link-local and
    /// unique-local addresses are refused; cloud metadata addresses can never be allowed.
    #[arg(long, env = "TRELLIS_HTTP_ALLOW_PRIVATE_NETS", default_value = "")]
    pub http_allow_private_nets: String,
    /// Where `core.http.request` cuts a response body (`bodyTruncated: true`), in bytes.
    #[arg(long, env = "TRELLIS_HTTP_MAX_RESPONSE_BYTES", default_value_t = 1_048_576, value_parser = clap::value_parser!(u64).range(1..=67_108_864))]
    pub http_max_response_bytes: u64,
    /// A JSON file of secrets that nodes name by `credentialsRef` (`{"secrets": {"<ref>":
    /// "<value>" | {"value", "tenants"}}}`), read once at start. Must be mode 0600 (or
    /// stricter): the host refuses to start otherwise. See docs/secrets.md.
    #[arg(long, env = "TRELLIS_SECRETS_FILE")]
    pub secrets_file: Option<PathBuf>,
    /// Resolve `credentialsRef` from `TRELLIS_SECRET_<NAME>` environment variables too (the
    /// reference upper-cased, `-` and `.` as `_`; read once at start; after the secrets file).
    #[arg(long, env = "TRELLIS_SECRETS_FROM_ENV")]
    pub secrets_from_env: bool,
    /// Model providers for `core.ai.callPrompt`.
    #[command(flatten)]
    pub ai: AiArgs,
}

/// The model providers `core.ai.callPrompt` may call (host configuration: a workflow or a
/// run only names a configured provider id). See docs/ai.md.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AiArgs {
    /// A JSON file of model providers: `[{id, kind: "openai"|"anthropic", baseUrl,
    /// credentialsRef?, models: [id | {id, inputUsdPerMTok?, outputUsdPerMTok?}], default?,
    /// policy?: {mode: disabled|optional|required|restricted, allowedModels?: [glob]}}]`.
    /// A `credentialsRef` resolves through the host's secrets (--secrets-file,
    /// --secrets-from-env) for the run's tenant, inside each attempt. A `baseUrl` is pinned
    /// and never redirected; it may be a loopback or private address (a local model server).
    /// The host refuses to start on a bad entry, naming the field and the rule.
    #[arg(long = "ai-providers", env = "TRELLIS_AI_PROVIDERS")]
    pub providers_file: Option<PathBuf>,
    /// Shorthand for one OpenAI-compatible provider `openai` at this base URL (e.g.
    /// `https://api.openai.com/v1`; the client calls `{baseUrl}/chat/completions`), besides
    /// those of --ai-providers.
    #[arg(long, env = "TRELLIS_OPENAI_BASE_URL")]
    pub openai_base_url: Option<String>,
    /// The key of the shorthand `openai` provider (`Authorization: Bearer`). Held as a secret:
    /// never printed or logged. Prefer the environment variable to the flag.
    #[arg(long, env = "TRELLIS_OPENAI_API_KEY", hide_env_values = true)]
    pub openai_api_key: Option<SecretArg>,
    /// The models of the shorthand `openai` provider, comma-separated (the first is the default).
    #[arg(long, env = "TRELLIS_OPENAI_MODELS", value_delimiter = ',', default_value = "gpt-4o-mini")]
    pub openai_models: Vec<String>,
}

/// A secret given on the command line or in the environment: its `Debug` never shows it.
#[derive(Clone)]
pub struct SecretArg(pub std::sync::Arc<trellis_core::secrets::Secret>);

impl std::fmt::Debug for SecretArg {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, formatter)
    }
}

impl std::str::FromStr for SecretArg {
    type Err = std::convert::Infallible;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Ok(Self(std::sync::Arc::new(trellis_core::secrets::Secret::new(value))))
    }
}
