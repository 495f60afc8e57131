//! `trellis-aws-local` as a child process for the suites that play their scenarios against the
//! AWS stack (tests/e2e_client_aws.rs, tests/e2e_ui.rs): the API, dispatcher and completion
//! functions over DynamoDB Local and moto's SQS, behind a local API Gateway stage `/v`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::client::GUARD;

/// The key `trellis-aws-local` accepts (TRELLIS_API_KEY: every scope, tenant default).
pub const KEY: &str = "cli-aws-local-key";

/// `trellis-aws-local`, from the same target directory as the `trellis` binary under test.
fn aws_local_binary() -> PathBuf {
    let binary = Path::new(env!("CARGO_BIN_EXE_trellis")).with_file_name("trellis-aws-local");
    assert!(binary.exists(), "{} is missing: build it: cargo build -p trellis-aws-local", binary.display());
    binary
}

/// A running `trellis-aws-local`, killed when dropped.
pub struct Local {
    child: Child,
    /// `http://ADDR/v`, the stage URL it printed.
    pub url: String,
}

impl Local {
    /// Starts it on a free port with resources named `name` and the definitions of `workflows`.
    pub fn start(dir: &Path, name: &str, workflows: &Path) -> Self {
        let mut child = Command::new(aws_local_binary())
            .current_dir(dir)
            .args(["--bind", "127.0.0.1:0", "--name", name, "--http-allow-private-nets", "127.0.0.1/32", "--workflows"])
            .arg(workflows)
            .env("TRELLIS_API_KEY", KEY)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("trellis-aws-local starts");
        let url = trellis_testkit::process::announced_url(&mut child, "trellis-aws-local listening on ", GUARD * 4);
        assert!(url.ends_with("/v"), "the stage URL: {url}");
        Self { child, url }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
