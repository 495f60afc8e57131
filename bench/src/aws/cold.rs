//! The chain's per-step cost when no step lands on an instance that has seen its run: every
//! message is handled by a fresh app (a new container: its run cache and compiled workflows
//! empty), so each read goes back to the newest checkpoint and the workflow definition is
//! read again (the commit can still be a delta: reading back to the checkpoint tells the
//! writer its basis). The worst case a busy fleet approaches; the warm figure is the best.
//! Prints figures; asserts nothing.

use aws_sdk_sqs::types::MessageSystemAttributeName;
use serde_json::json;
use trellis_aws::dispatch::handle_message;
use trellis_aws::{AwsApp, Settings};
use trellis_core::run::Principal;

/// Creates `runs` chain runs through `api` and drives each step on a fresh app.
pub(crate) async fn figures(
    api: &AwsApp,
    settings: &Settings,
    sqs: &aws_sdk_sqs::Client,
    principal: &Principal,
    runs: usize,
    nodes: usize,
) {
    let config = trellis_aws::app::sdk_config().await;
    let respond = |_: &trellis_core::RunState| (201, json!({}));
    for _ in 0..runs {
        api.services
            .create_run(principal, &json!({"workflowId": "bench-chain"}), None, &respond)
            .await
            .expect("create");
    }
    let expected = (runs * nodes) as u64;
    let (mut handled, mut write_units, mut read_units, mut sends) = (0u64, 0u64, 0u64, 0u64);
    while handled < expected {
        let received = sqs
            .receive_message()
            .queue_url(&settings.step_queue_url)
            .max_number_of_messages(1)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        let Some(message) = received.messages().first() else {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            continue;
        };
        let fresh = AwsApp::new(settings.clone(), &config);
        handle_message(&fresh, &crate::first_delivery(message)).await;
        let usage = fresh.store.usage();
        write_units += usage.write_units;
        read_units += usage.read_units;
        sends += fresh.effects.requests();
        handled += 1;
        sqs.delete_message()
            .queue_url(&settings.step_queue_url)
            .receipt_handle(message.receipt_handle().expect("a receipt handle"))
            .send()
            .await
            .expect("delete");
    }
    let steps = expected as f64;
    println!(
        "per sequential step, every step on a fresh instance (no cached run): {:.2} WRU, {:.2} RRU, {:.2} SQS sends",
        write_units as f64 / steps,
        read_units as f64 / steps,
        sends as f64 / steps,
    );
}
