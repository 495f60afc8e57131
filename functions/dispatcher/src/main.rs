//! `trellis-dispatcher`: one step per SQS message with partial batch failures, and the
//! outbox reconciler on its schedule. Settings are validated at cold start.

use lambda_runtime::{service_fn, LambdaEvent};
use serde_json::Value;
use trellis_aws::app::sdk_config;
use trellis_aws::{AwsApp, Settings};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let app = AwsApp::new(Settings::from_env()?, &sdk_config().await);
    let app = &app;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        trellis_aws::dispatch::handle_trigger(app, event.payload).await.map_err(lambda_runtime::Error::from)
    }))
    .await
}
