//! # trellis-aws
//!
//! What the serverless build adds around the engine, kept out of `trellis-core`:
//!
//! - [`settings`]: the functions' settings, read once at cold start and validated with named
//!   errors;
//! - [`message`]: the step-queue message (ids and a schema version only);
//! - [`effects`]: sending a commit's effects to the SQS queues and marking its DynamoDB page
//!   sent;
//! - [`dispatch`]: the dispatcher's batch handler (one step per message, runs handled
//!   concurrently, partial batch failures, `step_delivery_exhausted` on the last allowed
//!   delivery);
//! - [`batch`]: handling one batch's items concurrently by group (run, FIFO message group);
//! - [`reconcile`]: the scheduled sweep that sends commit pages' effects a crash left unsent;
//! - [`app`]: the composition of store, queue and use cases shared by the functions;
//! - [`provision`]: creating the queues outside CloudFormation (emulators);
//! - [`secrets`]: `credentialsRef` resolved from Secrets Manager or SSM Parameter Store under
//!   one prefix;
//! - [`bus`]: run events published to the stack's EventBridge bus;
//! - [`callbacks`]: external workers notified by POST or on an SQS queue;
//! - [`nodes`]: the AWS service nodes (Lambda invoke, SQS send, EventBridge put);
//! - [`bedrock`]: the `bedrock` model provider kind (Amazon Bedrock's Converse API);
//! - [`local`]: the local stack (`trellis-aws-local`, the emulated suites): proxy events, the
//!   queues' event-source mappings, the resources, the reconciler's schedule.
//! - [`triggers`]: runs started by SQS messages and EventBridge events;
//! - [`stage`]: links kept under the API Gateway stage the request came through.
//!
//! The Lambda functions in `functions/` are thin `main.rs` files over these.

pub mod app;
pub mod batch;
pub mod bedrock;
pub mod bus;
pub mod callbacks;
pub mod dispatch;
pub mod effects;
pub mod local;
pub mod message;
pub mod nodes;
pub mod notifier;
pub mod provision;
pub mod reconcile;
pub mod secrets;
pub mod settings;
pub mod stage;
pub mod triggers;

pub use app::AwsApp;
pub use settings::{Settings, SettingsError};
