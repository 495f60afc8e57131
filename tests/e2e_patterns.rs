//! The six agent-workflow patterns of `examples/workflows/patterns/` on the embedded host, each
//! against its shipped model fixture (the testkit's content-routed fake model) and a local HTTP
//! server: every scenario runs to its documented outcome. The checks are
//! `trellis_testkit::patterns`, which the emulated AWS suite runs too.

mod common;

use common::{serve_args, start, KEY};
use serde_json::json;
use trellis_testkit::fake_model::FakeModel;
use trellis_testkit::http_server::TestServer;
use trellis_testkit::patterns::{self, Env};
use trellis_testkit::HttpDriver;

/// A fresh host whose default provider `fake` is the fake model, and the HTTP server the
/// patterns' actions call.
struct Harness {
    _dir: tempfile::TempDir,
    model: FakeModel,
    http: TestServer,
    host: trellis::host::EmbeddedHost,
}

impl Harness {
    async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let model = FakeModel::start().await;
        let http = TestServer::start().await;
        let providers = dir.path().join("providers.json");
        let document = json!([{"id": "fake", "kind": "openai", "baseUrl": model.openai_base_url(),
                               "models": ["fake-model"], "default": true}]);
        std::fs::write(&providers, document.to_string()).unwrap();
        let mut args = serve_args(None);
        args.ai.providers_file = Some(providers);
        let host = start(args).await;
        Self { _dir: dir, model, http, host }
    }
}

/// A test running `patterns::<name>::check` on a fresh embedded host.
macro_rules! pattern_test {
    ($name:ident) => {
        #[tokio::test]
        async fn $name() {
            let harness = Harness::start().await;
            let mut driver = HttpDriver::new(format!("http://{}", harness.host.addr), KEY);
            let mut env = Env { driver: &mut driver, model: &harness.model, http: &harness.http };
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
