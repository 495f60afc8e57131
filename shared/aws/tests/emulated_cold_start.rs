//! The API function's cold start against a table that already holds the bundled fixtures:
//! one settings read, no write, the same advertised fixtures. Needs the emulators (see
//! `scripts/test.sh`); ignored under plain `cargo test`.

mod support;

use trellis_aws::app::sdk_config;
use trellis_aws::settings::ApiSettings;
use trellis_aws::AwsApp;

#[tokio::test]
#[ignore = "needs DynamoDB Local and moto: run `bash scripts/test.sh`"]
async fn a_cold_start_on_a_stored_fixture_set_reads_one_setting_and_writes_nothing() {
    support::require_emulators();
    // The stack's own API state stored the fixtures (the first cold start on this table).
    let stack = support::stack().await;
    let advertised = stack.app.services.bundled_fixtures().await.expect("advertised");
    assert!(advertised.len() > 10, "the bundled fixtures are advertised: {advertised:?}");

    let config = sdk_config().await;
    let cold = AwsApp::new(stack.app.settings.clone(), &config);
    let api = ApiSettings { api_keys: "[]".into(), cursor_secret: "s".repeat(32), stream_max_seconds: 30 };
    cold.api_state(&api).await.expect("api state");
    let used = cold.store.usage();
    assert_eq!((used.write_requests, used.read_requests), (0, 1), "one settings read: {used:?}");
    assert_eq!(cold.services.bundled_fixtures().await.expect("advertised"), advertised);
}
