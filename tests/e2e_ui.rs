//! The run viewer (`/ui`) in a real headless Chromium: the scenarios of tests/common/ui.rs
//! (sign-in and where the key is kept, a gated run started from the page and answered on it,
//! the lists, markup shown as text, the CSP) against an in-process embedded host at
//! `http://ADDR/ui/`, and the same ones against `trellis-aws-local` behind its stage at
//! `http://ADDR/v/ui/`.
//!
//! Ignored by default: they need Debian's `chromium` and `chromium-driver` (scripts/test.sh
//! installs them), and the AWS one also the emulators and `cargo build -p trellis-aws-local`.
//! Screenshots of each stage land in `target/test-artifacts/ui/`.

mod common;

use common::aws_local::{self, Local};
use common::browser::{self, Browser};
use common::ui::{self, UiTarget};
use trellis_testkit::external::{require_emulators, Service};

/// Every viewer scenario against `trellis serve`'s host (in process, in memory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium and chromedriver: run `bash scripts/test.sh`"]
async fn the_viewer_against_the_embedded_host() {
    browser::require_browser();
    let host = common::start(common::serve_args(None)).await;
    let target = UiTarget::new(format!("http://{}", host.addr), common::KEY, "embedded");
    let browser = Browser::start().await;
    ui::all(&browser, &target).await;
    browser.close().await;
    host.stop().await;
}

/// Every viewer scenario against `trellis-aws-local`, through the stage `/v`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Chromium, chromedriver and the AWS emulators: run `bash scripts/test.sh`"]
async fn the_viewer_against_trellis_aws_local() {
    browser::require_browser();
    require_emulators(&[Service::DynamoDb, Service::Sqs]);
    let dir = tempfile::tempdir().expect("temp dir");
    let workflows = dir.path().join("workflows");
    std::fs::create_dir(&workflows).unwrap();
    let name = format!("trellis-ui-test-{}", uuid::Uuid::new_v4().simple().to_string().split_at(12).0);
    let local = Local::start(dir.path(), &name, &workflows);
    let target = UiTarget::new(local.url.clone(), aws_local::KEY, "aws");
    let browser = Browser::start().await;
    ui::all(&browser, &target).await;
    browser.close().await;
    drop(local);
}
