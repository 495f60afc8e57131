//! The `trellis` client commands against the AWS stack: the built `trellis-aws-local` binary
//! (the API, dispatcher and completion functions over DynamoDB Local and moto's SQS, behind a
//! local API Gateway stage `/v`) plays every scenario of tests/common/client.rs, through the
//! stage prefix, as the embedded suite (tests/e2e_client.rs) does against `trellis serve`.
//!
//! Ignored by default (it needs the emulators); the binary must be built first:
//! `cargo build -p trellis-aws-local`, then run with the emulators (scripts/emulators.sh) and
//! `--include-ignored`.

mod common;

use common::aws_local::{Local, KEY};
use common::client::{self, Target};
use trellis_testkit::external::{require_emulators, Service};

/// Every client scenario (ping, workflows, an approval run, exit codes, pause/resume, the
/// resume-schema check, the line and terminal live views, child runs) through the stage.
#[test]
#[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
fn every_client_scenario_against_trellis_aws_local() {
    require_emulators(&[Service::DynamoDb, Service::Sqs]);
    let dir = tempfile::tempdir().expect("temp dir");
    let workflows = dir.path().join("workflows");
    std::fs::create_dir(&workflows).unwrap();
    let name = format!("trellis-cli-test-{}", client::unique());
    let local = Local::start(dir.path(), &name, &workflows);
    let scenarios = dir.path().join("scenarios");
    std::fs::create_dir(&scenarios).unwrap();
    let target = Target::new(local.url.clone(), KEY);
    let ping = client::cli(&target, &scenarios, &["ping", "-o", "json"]).code(0).json();
    assert_eq!(ping["url"], local.url.as_str(), "the stage is kept: {ping}");
    client::all(&target, &scenarios);
    drop(local);
}
