//! `trellis-aws-local`: the serverless stack in one process for development — the `api`
//! function behind an API Gateway-like HTTP server on a stage, the dispatcher and completion
//! functions fed by the queues' event-source mappings, the reconciler on its schedule —
//! over DynamoDB and SQS endpoints from the standard AWS environment (emulators or
//! LocalStack). Not a production server: `infra/template.yaml` deploys the real thing.

mod args;
mod keys;
mod server;
mod stack;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = args::Args::parse();
    // As on the `api` function (infra/template.yaml): routes see `/v1/...`, not `/<stage>/v1/...`.
    // Set before the runtime starts any thread.
    std::env::set_var("AWS_LAMBDA_HTTP_IGNORE_STAGE_IN_PATH", "true");
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return stack::fail(&format!("cannot start the async runtime: {error}")),
    };
    runtime.block_on(stack::run(args))
}
