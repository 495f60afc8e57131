//! The command line: every option also read from an environment variable. AWS endpoints,
//! region and credentials come from the standard AWS environment (`AWS_ENDPOINT_URL`,
//! `AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL_SQS`, `AWS_REGION`, …); the functions'
//! other settings (`TRELLIS_MAX_RECEIVE_COUNT`, `TRELLIS_SECRETS_BACKEND`, …) are read from
//! the environment as the functions read them; `TRELLIS_PUBLIC_URL` (the links of callback
//! notifications) defaults to the stack's own address under its stage.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// `trellis-aws-local`'s options.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "trellis-aws-local",
    version,
    about = "The Trellis serverless stack (API Gateway + Lambda functions + DynamoDB + SQS) in one process, for development against emulators or LocalStack"
)]
pub(crate) struct Args {
    /// Address to listen on (port 0: any free port, printed at start).
    #[arg(long, env = "TRELLIS_BIND", default_value = "127.0.0.1:8080")]
    pub(crate) bind: SocketAddr,
    /// The API Gateway stage: routes are served under `/{stage}/…`.
    #[arg(long, env = "TRELLIS_STAGE", default_value = "v")]
    pub(crate) stage: String,
    /// Resource name prefix: the table `{name}`, the queues `{name}-steps`,
    /// `{name}-steps-dlq`, `{name}-completions.fifo`, `{name}-completions-dlq.fifo`. Created
    /// when missing, reused when they exist (a restart keeps its runs).
    #[arg(long, env = "TRELLIS_LOCAL_NAME", default_value = "trellis-local")]
    pub(crate) name: String,
    /// A JSON file of hashed API keys, each bound to a tenant and scopes. Without it (and
    /// without `TRELLIS_API_KEY`), a development key is generated, printed, and kept in
    /// `.trellis-aws-local/dev-api-key` (mode 0600).
    #[arg(long = "keys", env = "TRELLIS_KEYS_FILE")]
    pub(crate) keys_file: Option<PathBuf>,
    /// A directory of workflow definitions (*.json) registered at start; repeatable.
    #[arg(long = "workflows", env = "TRELLIS_WORKFLOWS", value_delimiter = ',')]
    pub(crate) workflows: Vec<PathBuf>,
    /// Serve the conformance test seams to keys with the test:seams scope. Never in production.
    #[arg(long, env = "OPENWOP_TEST_SEAM_ENABLED")]
    pub(crate) test_seams: bool,
    /// Private destinations `core.http.request` may reach, as a comma list of IPs or CIDRs
    /// (e.g. `127.0.0.1,10.1.0.0/16`). Empty by default.
    #[arg(long, env = "TRELLIS_HTTP_ALLOW_PRIVATE_NETS", default_value = "")]
    pub(crate) http_allow_private_nets: String,
    /// `core.ai.callPrompt`'s model providers: the JSON document the functions read from
    /// `TRELLIS_AI_PROVIDERS`, or the path of a file holding it (as `trellis serve
    /// --ai-providers`).
    #[arg(long = "ai-providers", env = "TRELLIS_AI_PROVIDERS")]
    pub(crate) ai_providers: Option<String>,
    /// Start without an endpoint override: the table and queues are then created in the
    /// AWS account of the environment's credentials.
    #[arg(long, env = "TRELLIS_ALLOW_REAL_AWS")]
    pub(crate) allow_real_aws: bool,
}
