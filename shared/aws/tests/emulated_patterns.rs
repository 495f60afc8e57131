//! The six agent-workflow patterns of `examples/workflows/patterns/` on the emulated AWS stack:
//! the same checks as the embedded host's suite (`tests/e2e_patterns.rs`,
//! `trellis_testkit::patterns`), played through the API function's router with the step and
//! completion queues pumped, against one content-routed fake model and a local HTTP server.
//! Without the emulators the suite is ignored.

mod support;

use serde_json::json;
use support::{require_emulators, stack_with, AwsDriver};
use trellis_testkit::fake_model::FakeModel;
use trellis_testkit::http_server::TestServer;
use trellis_testkit::patterns::{self, Env};

/// A test running `patterns::<name>::check` on a fresh emulated stack.
macro_rules! pattern_test {
    ($name:ident) => {
        #[tokio::test]
        #[ignore = "needs the AWS emulators: run `bash scripts/test.sh`"]
        async fn $name() {
            require_emulators();
            let model = FakeModel::start().await;
            let http = TestServer::start().await;
            let providers = json!([{"id": "fake", "kind": "openai", "baseUrl": model.openai_base_url(),
                                    "models": ["fake-model"], "default": true}]);
            let mut stack = stack_with(Default::default(), providers.to_string()).await;
            let mut driver = AwsDriver(&mut stack);
            let mut env = Env { driver: &mut driver, model: &model, http: &http };
            env.register_all().await;
            patterns::$name::check(&mut env).await;
        }
    };
}

pattern_test!(classify_and_act);
pattern_test!(fan_out_and_synthesize);
pattern_test!(adversarial_verification);
pattern_test!(generate_and_filter);
pattern_test!(tournament);
pattern_test!(loop_until_done);
