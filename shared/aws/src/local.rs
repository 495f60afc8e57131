//! The local serverless stack (`trellis-aws-local`, and the emulated test suites): what AWS
//! does around the three functions, played in one process against DynamoDB and SQS
//! endpoints (emulators or LocalStack).
//!
//! - [`event`]: an incoming HTTP request turned into the API Gateway REST proxy event the
//!   `api` function receives (stage, headers, query string, body), parsed by `lambda_http`;
//! - [`pump`]: the SQS event-source mappings — long-poll a queue, hand a batch to the
//!   dispatcher's handler, delete what it did not report failed, leave the rest for
//!   redelivery after the visibility timeout;
//! - [`resources`]: the table and queues created when missing, reused by name on a restart;
//! - [`schedule`]: the reconciler on a timer, like its schedule in `infra/template.yaml`.

pub mod event;
pub mod pump;
pub mod resources;
pub mod schedule;
