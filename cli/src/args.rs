//! Command-line arguments. Every `serve` flag also reads an environment variable; the client
//! commands (ping, workflows, runs, interrupts, completions) share the global options of
//! [`GlobalArgs`], accepted before or after the subcommand.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Trellis — an OpenWOP workflow host.
#[derive(Debug, Parser)]
#[command(
    name = "trellis",
    version,
    about = "Trellis: an OpenWOP workflow host. 'trellis serve' runs the embedded host (HTTP API, engine and SQLite store in one process); the other commands are a client of any Trellis host.",
    after_help = TOP_AFTER_HELP
)]
pub struct Cli {
    /// The client commands' connection and output options.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// What the top-level help adds: where the client finds its host and key, and exit codes.
const TOP_AFTER_HELP: &str = "\
Client commands talk to TRELLIS_URL (default http://127.0.0.1:8080; a path such as an API
Gateway stage /v is kept) with the bearer key TRELLIS_API_KEY. Precedence: flag, environment,
config file (TRELLIS_CONFIG, default $XDG_CONFIG_HOME/trellis/config.json), then the development
key file trellis serve writes (TRELLIS_DATA_DIR/dev-api-key, default trellis-data/dev-api-key).

Exit codes of the client commands: 0 success (a watched or awaited run completed), 1 the run
failed, 2 the run was cancelled, 3 usage, HTTP or connection error, or invalid input, 4 runs wait
--timeout passed. serve and hash-key keep clap's exit 2 for a usage error.";

/// The client commands' global options.
#[derive(Debug, Clone, clap::Args)]
pub struct GlobalArgs {
    /// The host's base URL; a path in it (an API Gateway stage) is kept.
    #[arg(long, global = true, help_heading = "Global options", env = "TRELLIS_URL", value_name = "URL")]
    pub url: Option<String>,
    /// The bearer API key (the variable trellis serve reads too).
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "TRELLIS_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    pub key: Option<String>,
    /// A JSON config file {"url", "key"} (both optional).
    #[arg(long, global = true, help_heading = "Global options", env = "TRELLIS_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A PEM file of extra trusted root certificates for https:// (e.g. a local TLS proxy's own CA);
    /// the platform's roots stay trusted.
    #[arg(long, global = true, help_heading = "Global options", env = "TRELLIS_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Output: human tables, or the server's JSON for scripts.
    #[arg(short = 'o', long, global = true, help_heading = "Global options", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
    /// No colours (NO_COLOR is honoured too).
    #[arg(long, global = true, help_heading = "Global options")]
    pub no_color: bool,
}

/// How a client command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Human-readable tables and lines.
    Table,
    /// The server's JSON, pretty (events: one JSON document per line).
    Json,
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
    /// Check that a host answers (its discovery document) and whether the key is accepted.
    #[command(after_help = "Example: trellis ping --wait 10 (retries until the host answers, up to 10 s).")]
    Ping {
        /// Keep retrying until the host answers, up to this many seconds (0: one try).
        #[arg(long, default_value_t = 0, value_name = "SECONDS")]
        wait: u64,
    },
    /// List, show, register and validate workflow definitions.
    #[command(subcommand)]
    Workflows(WorkflowsCommand),
    /// Start, list, inspect, watch, wait for and control runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// List, inspect and answer pending interrupts (approvals, questions, external events).
    #[command(subcommand)]
    Interrupts(InterruptsCommand),
    /// Outbound webhook subscriptions: list, create, delete, and a subscription's deliveries.
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// Inbound webhook triggers: list, create, pause, resume, delete, and a subscription's log.
    #[command(subcommand)]
    Triggers(TriggersCommand),
    /// The schedules workflows declare: list, pause, resume.
    #[command(subcommand)]
    Schedules(SchedulesCommand),
    /// Print a shell completion script on standard output.
    #[command(after_help = "Example: trellis completions bash > /etc/bash_completion.d/trellis")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// trellis webhooks ... (docs/webhooks.md)
#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// List the key's tenant's subscriptions: ID, STATE, EVENTS, URL.
    List,
    /// Register URL for event types; prints the secret, which is shown this once.
    #[command(
        after_help = "Example: trellis webhooks create https://hooks.example/trellis --event run.completed --event run.failed"
    )]
    Create {
        // Not named `url`: that id is the global option's, and clap would merge the two.
        /// Where deliveries go (https, or an allow-listed private address).
        #[arg(value_name = "URL")]
        destination: String,
        /// An event type, a family (run.*) or * (repeatable; at least one).
        #[arg(long = "event", value_name = "TYPE", required = true)]
        events: Vec<String>,
    },
    /// Delete a subscription.
    Delete {
        /// The webhook id.
        id: String,
    },
    /// A subscription's delivery records: RUN, SEQ, TYPE, STATE, ATTEMPTS, LAST ERROR.
    Deliveries {
        /// The webhook id.
        id: String,
        /// Only deliveries in this state: retrying, delivered or dead-lettered.
        #[arg(long)]
        state: Option<String>,
    },
}

/// trellis triggers ... (docs/triggers.md)
#[derive(Debug, Subcommand)]
pub enum TriggersCommand {
    /// List the key's tenant's trigger subscriptions: ID, STATE, WORKFLOW, INGEST URL (or the queue backend).
    List,
    /// Register a signed inbound webhook that starts WORKFLOW (prints the secret, shown once);
    /// on AWS, with --sqs-queue-arn or --event-source, a queue trigger instead (docs/aws-events.md).
    #[command(after_help = "Examples:\n  trellis triggers create order-review --map amount=/webhook/body/amount\n  \
                            trellis triggers create on-order --event-source com.example.shop --detail-type OrderPlaced \
                            --map orderId=/queue/detail/orderId")]
    Create {
        /// The workflow a delivery starts.
        workflow: String,
        /// A run input and the JSON pointer into the TriggerEvent it is taken from (repeatable).
        #[arg(long = "map", value_name = "INPUT=/POINTER")]
        mappings: Vec<String>,
        /// AWS: the SQS queue whose messages start runs.
        #[arg(long, value_name = "ARN", conflicts_with = "event_source")]
        sqs_queue_arn: Option<String>,
        /// AWS: the EventBridge source whose events (a rule delivers to the dispatcher) start runs.
        #[arg(long, value_name = "SOURCE")]
        event_source: Option<String>,
        /// AWS: only events of this detail-type (with --event-source).
        #[arg(long, value_name = "TYPE", requires = "event_source")]
        detail_type: Option<String>,
    },
    /// Stop taking deliveries (they are answered 409 until resumed).
    Pause {
        /// The subscription id.
        id: String,
    },
    /// Take deliveries again.
    Resume {
        /// The subscription id.
        id: String,
    },
    /// Delete a trigger subscription.
    Delete {
        /// The subscription id.
        id: String,
    },
    /// The subscription's log (trigger.delivery.attempted, trigger.subscription.state.changed).
    Events {
        /// The subscription id.
        id: String,
    },
}

/// trellis schedules ... (docs/triggers.md#schedules)
#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// List the key's tenant's schedules: ID, STATE, EXPRESSION, ZONE, NEXT, FIRED.
    List,
    /// Pause a schedule (WORKFLOW/TRIGGER): its occurrences are skipped.
    Pause {
        /// The schedule id.
        id: String,
    },
    /// Resume a schedule from its next occurrence after now (nothing is backfilled).
    Resume {
        /// The schedule id.
        id: String,
    },
}

/// trellis workflows ...
#[derive(Debug, Subcommand)]
pub enum WorkflowsCommand {
    /// List the workflows visible to the key (every page): ID, VERSION, NAME, NODES.
    List,
    /// Show one workflow: a summary and its nodes with their outgoing edges (json: the definition).
    Show {
        /// The workflow id.
        id: String,
    },
    /// Register definitions: each FILE, or each *.json file of a directory.
    #[command(after_help = "Prints one line per file: registered ID (version V). Exit 3 when a file is refused.")]
    Register {
        /// Definition files or directories.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// Check definitions as registration would, storing nothing.
    #[command(
        after_help = "Prints valid: ID per file, or each error with its JSON path and rule; exit 3 when any file is invalid."
    )]
    Validate {
        /// Definition files or directories.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
}

/// trellis runs ...
#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Start a run of a workflow and print its id.
    #[command(after_help = RUNS_START_AFTER_HELP)]
    Start {
        /// The workflow id.
        workflow: String,
        /// An input k=v (repeatable); v is parsed as JSON when it parses, else taken as a string.
        #[arg(long = "input", value_name = "K=V")]
        inputs: Vec<String>,
        /// A JSON object of inputs (--input keys override its keys).
        #[arg(long, value_name = "FILE")]
        inputs_file: Option<PathBuf>,
        /// Sent as the Idempotency-Key header: the same key starts the run once.
        #[arg(long, value_name = "KEY")]
        idempotency_key: Option<String>,
        /// Then watch the run live; the exit code follows its final status.
        #[arg(long)]
        watch: bool,
    },
    /// List runs (newest first): RUN ID, WORKFLOW, STATUS, CREATED, UPDATED.
    List {
        /// Only runs of this workflow.
        #[arg(long, value_name = "ID")]
        workflow: Option<String>,
        /// Only runs in this status (running, waiting-approval, completed, ...).
        #[arg(long, value_name = "STATUS")]
        status: Option<String>,
        /// Runs per page.
        #[arg(long, value_name = "N")]
        limit: Option<u32>,
        /// Follow the cursors: every page.
        #[arg(long)]
        all: bool,
    },
    /// Show a run: status, times, current node, error, pending interrupt and outputs.
    Show {
        /// The run id.
        run_id: String,
    },
    /// Print a run's event log: SEQ TIME TYPE NODE summary (json: one event per line).
    Events {
        /// The run id.
        run_id: String,
        /// Keep streaming until the run ends.
        #[arg(long)]
        follow: bool,
        /// Only events after this sequence.
        #[arg(long, value_name = "SEQ")]
        after: Option<u64>,
    },
    /// Compare two runs: where they part (SEQ OP A-TYPE B-TYPE per differing event) and which
    /// variables differ (names only).
    Diff {
        /// The first run.
        run_id: String,
        /// The run to compare it with.
        against: String,
    },
    /// Fork a run: a new run of its workflow and inputs that re-tells its history. `replay`
    /// answers every side effect from the source's log (nothing is called again); `branch`
    /// keeps the events before --from-seq and runs live after it.
    Fork {
        /// The source run.
        run_id: String,
        /// `replay` or `branch`.
        #[arg(long, default_value = "replay")]
        mode: String,
        /// The sequence the fork departs at (required for a branch).
        #[arg(long)]
        from_seq: Option<u64>,
        /// Watch the fork until it ends.
        #[arg(long)]
        watch: bool,
    },
    /// Run a failed run again from its failed node: a branch fork whose history before that
    /// node is the source's (side effects before it are not repeated).
    Redrive {
        /// The failed run.
        run_id: String,
        /// Watch the new run until it ends.
        #[arg(long)]
        watch: bool,
    },
    /// Run an ended run's workflow version again, with its inputs or with some changed: its
    /// model calls and GET/HEAD requests whose request is unchanged take the source's results
    /// (a cache hit records trellis.node.replayed); --no-cache calls everything again.
    Rerun {
        /// The source run.
        run_id: String,
        /// An input to change, k=v (repeatable; v parsed as JSON when it parses); the others
        /// stay the source's.
        #[arg(long = "input", value_name = "K=V")]
        inputs: Vec<String>,
        /// A JSON object of inputs to change (--input keys override its keys).
        #[arg(long, value_name = "FILE")]
        inputs_file: Option<PathBuf>,
        /// Call every node again instead of taking cached results.
        #[arg(long)]
        no_cache: bool,
        /// Watch the rerun until it ends.
        #[arg(long)]
        watch: bool,
    },
    /// Delete a run that has ended, with its child runs (--force cancels a live one first).
    Delete {
        /// The run id.
        run_id: String,
        /// Cancel the run first if it has not ended.
        #[arg(long)]
        force: bool,
    },
    /// Delete ended runs: the newest --keep stay, and of the rest those matching
    /// --older-than, --status and --workflow go (with no --keep or --older-than, the newest
    /// 50 stay). --dry-run lists them and deletes nothing.
    Prune {
        /// Only runs that ended longer ago than this: `7d`, `24h`, `90m`.
        #[arg(long, value_name = "DURATION")]
        older_than: Option<String>,
        /// Keep the newest N ended runs.
        #[arg(long)]
        keep: Option<u64>,
        /// Only runs with this status (completed, failed, cancelled).
        #[arg(long)]
        status: Option<String>,
        /// Only runs of this workflow.
        #[arg(long)]
        workflow: Option<String>,
        /// List what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Watch a run live until it ends; the exit code follows its final status.
    #[command(after_help = WATCH_AFTER_HELP)]
    Watch {
        /// The run id.
        run_id: String,
    },
    /// Cancel a run.
    Cancel {
        /// The run id.
        run_id: String,
        /// Why (recorded on the run).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Pause a run (after its current node, or at once with --immediate).
    Pause {
        /// The run id.
        run_id: String,
        /// Why (recorded on the run).
        #[arg(long)]
        reason: Option<String>,
        /// Pause now instead of after the current node.
        #[arg(long)]
        immediate: bool,
    },
    /// Resume a paused run.
    Resume {
        /// The run id.
        run_id: String,
        /// Why (recorded on the run).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Wait until a run reaches a status (default: any terminal status).
    #[command(after_help = "Exit: 0 completed (or --until reached), 1 failed, 2 cancelled, 4 --timeout passed first.")]
    Wait {
        /// The run id.
        run_id: String,
        /// The status to wait for (e.g. waiting-approval); a terminal status ends the wait too.
        #[arg(long, value_name = "STATUS", value_parser = clap::builder::PossibleValuesParser::new(run_statuses()))]
        until: Option<String>,
        /// Give up after this many seconds (exit 4): a finite number, 0 or more (e.g. 0.5).
        #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
        timeout: Option<std::time::Duration>,
    },
}

/// Every run status, as the wire spells it (`runs wait --until`'s values).
pub fn run_statuses() -> Vec<&'static str> {
    use trellis_core::RunStatus;
    [
        RunStatus::Pending,
        RunStatus::Running,
        RunStatus::Paused,
        RunStatus::WaitingApproval,
        RunStatus::WaitingInput,
        RunStatus::WaitingExternal,
        RunStatus::Completed,
        RunStatus::Failed,
        RunStatus::Cancelling,
        RunStatus::Cancelled,
    ]
    .map(RunStatus::as_str)
    .to_vec()
}

/// A number of seconds: finite, 0 or more, and no larger than a `Duration` holds.
fn parse_seconds(text: &str) -> Result<std::time::Duration, String> {
    let seconds: f64 = text.trim().parse().map_err(|_| format!("not a number of seconds: {text}"))?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("must be a finite number of seconds, 0 or more: {text}"));
    }
    std::time::Duration::try_from_secs_f64(seconds).map_err(|_| format!("too many seconds: {text}"))
}

/// What runs start --help adds.
const RUNS_START_AFTER_HELP: &str = "\
Examples:
  trellis runs start conformance-delay --input delayMs=500
  trellis runs start my-flow --inputs-file inputs.json --input name='\"quoted\"' --watch";

/// What runs watch --help adds.
const WATCH_AFTER_HELP: &str = "\
On a terminal: a header, a progress bar over the nodes, one line per started node, the command
that answers a pending interrupt, child runs under their node. Piped: one plain line per
transition. Exit: 0 completed, 1 failed, 2 cancelled.";

/// trellis interrupts ...
#[derive(Debug, Subcommand)]
pub enum InterruptsCommand {
    /// List the pending interrupts of the key's tenant.
    List {
        /// Only this run's.
        #[arg(long = "run", value_name = "RUN_ID")]
        run_id: Option<String>,
    },
    /// Show a pending interrupt: kind, data, resume schema, expiry, the commands that answer it.
    Show {
        /// Which interrupt.
        #[command(flatten)]
        target: InterruptTarget,
    },
    /// Approve: resumeValue {"action": "accept"}.
    Approve {
        /// Which interrupt.
        #[command(flatten)]
        target: InterruptTarget,
        /// A comment recorded with the decision.
        #[arg(long)]
        comment: Option<String>,
    },
    /// Reject: resumeValue {"action": "reject"}.
    Reject {
        /// Which interrupt.
        #[command(flatten)]
        target: InterruptTarget,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Answer with any value, checked against the interrupt's resume schema before it is sent.
    #[command(after_help = ANSWER_AFTER_HELP)]
    Answer {
        /// Which interrupt.
        #[command(flatten)]
        target: InterruptTarget,
        /// The resume value as JSON.
        #[arg(long, value_name = "JSON", conflicts_with_all = ["value_file", "set"])]
        value: Option<String>,
        /// A file holding the resume value as JSON.
        #[arg(long, value_name = "FILE", conflicts_with = "set")]
        value_file: Option<PathBuf>,
        /// A field k=v of an object value (repeatable); v parsed as JSON when it parses.
        #[arg(long, value_name = "K=V")]
        set: Vec<String>,
    },
}

/// What interrupts answer --help adds.
const ANSWER_AFTER_HELP: &str = "\
A value the resume schema refuses is not sent: each error is printed with its path, exit 3.
Example: trellis interrupts answer RUN ask --value '{\"answers\": {\"q1\": \"blue\"}}'";

/// Which interrupt: by run and node, or by its token.
#[derive(Debug, Clone, clap::Args)]
pub struct InterruptTarget {
    /// The run id.
    #[arg(required_unless_present = "token", requires = "node_id")]
    pub run_id: Option<String>,
    /// The node id of the interrupt.
    #[arg(required_unless_present = "token")]
    pub node_id: Option<String>,
    /// The interrupt token (instead of RUN_ID NODE_ID).
    #[arg(long, conflicts_with_all = ["run_id", "node_id"])]
    pub token: Option<String>,
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
    /// The host's public base URL, as clients reach it (e.g. `https://trellis.example/api`):
    /// a worker's callback task then carries `resolveUrl` (absolute) and its `resolvePath`
    /// keeps the URL's path. Absolute http(s), no query or fragment (see docs/callbacks.md).
    #[arg(long, env = "TRELLIS_PUBLIC_URL", value_name = "URL", value_parser = parse_public_url)]
    pub public_url: Option<trellis_core::interrupt::callback::PublicUrl>,
    /// How long a run is kept after it ends when neither its request
    /// (`configurable.retention`) nor its workflow (`settings.retention`) says: `30d`, `12h`,
    /// `90m`, `45s`. Unset: runs are kept until deleted (`trellis runs delete|prune`).
    #[arg(long, env = "TRELLIS_RETENTION", value_name = "DURATION", value_parser = parse_retention)]
    pub retention: Option<u64>,
    /// How often the sweeper deletes the runs past their retention, in milliseconds.
    #[arg(long, env = "TRELLIS_SWEEP_INTERVAL_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(10..))]
    pub sweep_interval_ms: u64,
    /// Model providers for `core.ai.callPrompt`.
    #[command(flatten)]
    pub ai: AiArgs,
    /// Webhook deliveries and schedules.
    #[command(flatten)]
    pub integration: IntegrationArgs,
}

/// How webhooks are delivered and schedules ticked (docs/webhooks.md, docs/triggers.md).
#[derive(Debug, Clone, clap::Args)]
pub struct IntegrationArgs {
    /// Attempts per webhook delivery, the first included; then it is dead-lettered.
    #[arg(long, env = "TRELLIS_WEBHOOK_MAX_ATTEMPTS", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub webhook_max_attempts: u32,
    /// The wait before a delivery's second attempt, doubled for each further one (with jitter
    /// in its upper half), at most 5 minutes.
    #[arg(long, env = "TRELLIS_WEBHOOK_BACKOFF_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub webhook_backoff_ms: u64,
    /// One delivery attempt's budget.
    #[arg(long, env = "TRELLIS_WEBHOOK_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub webhook_timeout_ms: u64,
    /// How often due schedules are looked for.
    #[arg(long, env = "TRELLIS_SCHEDULER_TICK_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub scheduler_tick_ms: u64,
}

impl Default for IntegrationArgs {
    fn default() -> Self {
        Self {
            webhook_max_attempts: 8,
            webhook_backoff_ms: 1_000,
            webhook_timeout_ms: 10_000,
            scheduler_tick_ms: 1_000,
        }
    }
}

impl IntegrationArgs {
    /// The delivery policy these settings make.
    pub fn delivery_policy(&self) -> trellis_core::webhook::DeliveryPolicy {
        trellis_core::webhook::DeliveryPolicy {
            max_attempts: self.webhook_max_attempts,
            initial_backoff_ms: self.webhook_backoff_ms,
            timeout_ms: self.webhook_timeout_ms,
            ..trellis_core::webhook::DeliveryPolicy::default()
        }
    }
}

/// `--public-url`: checked at start, the error naming the setting.
fn parse_retention(text: &str) -> Result<u64, String> {
    trellis_core::retention::parse(&serde_json::Value::String(text.to_owned()))
}

fn parse_public_url(text: &str) -> Result<trellis_core::interrupt::callback::PublicUrl, String> {
    trellis_core::interrupt::callback::PublicUrl::parse("--public-url (TRELLIS_PUBLIC_URL)", text)
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
