//! `trellis-completion`: child-run notices (terminal) from the FIFO completion queue,
//! applied to the parent one at a time per parent (the queue groups by parent run); after a
//! failed notice the rest of the batch is reported failed so the order holds.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{service_fn, LambdaEvent};
use trellis_aws::app::sdk_config;
use trellis_aws::{AwsApp, Settings};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let app = AwsApp::new(Settings::from_env()?, &sdk_config().await);
    let app = &app;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<SqsEvent>| async move {
        Ok::<SqsBatchResponse, lambda_runtime::Error>(
            trellis_aws::dispatch::handle_fifo_batch(app, event.payload).await,
        )
    }))
    .await
}
