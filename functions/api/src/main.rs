//! `trellis-api`: the OpenWOP router on Lambda, with a streaming response for every route
//! (SSE streams end before the function's deadline; clients resume with `Last-Event-ID`).
//! Settings are validated at cold start: a missing or malformed one stops the function with
//! its name. Links keep the stage of the default execute-api URL (`trellis_aws::stage`).

use trellis_aws::app::sdk_config;
use trellis_aws::settings::ApiSettings;
use trellis_aws::{AwsApp, Settings};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda_http::tracing::init_default_subscriber();
    let settings = Settings::from_env()?;
    let api = ApiSettings::from_env()?;
    let app = AwsApp::new_api(settings, &sdk_config().await);
    let router = trellis_aws::stage::router_with_stage_links(trellis_http::router(app.api_state(&api).await?));
    lambda_http::run_with_streaming_response(router).await
}
