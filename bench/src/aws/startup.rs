//! Times a Lambda function process from spawn to its first `GET .../invocation/next` on a
//! stand-in Runtime API listening on loopback.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// Spawns `binary` with the settings it validates at cold start and a stand-in Runtime API;
/// returns the time until its first request.
pub(crate) async fn time_to_first_poll(binary: &Path) -> Result<Duration, String> {
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(binary)
        .env("AWS_LAMBDA_RUNTIME_API", address.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "trellis-dispatcher")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "bench")
        .env("TRELLIS_TABLE_NAME", "bench")
        .env("TRELLIS_STEP_QUEUE_URL", "http://127.0.0.1:1/queue")
        .env("TRELLIS_COMPLETION_QUEUE_URL", "http://127.0.0.1:1/completions.fifo")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let accepted = tokio::time::timeout(Duration::from_secs(10), listener.accept()).await;
    let elapsed = started.elapsed();
    let (mut stream, _) =
        accepted.map_err(|_| "no Runtime API call within 10 s".to_owned())?.map_err(|e| e.to_string())?;
    let mut buffer = [0u8; 256];
    let read = stream.read(&mut buffer).await.map_err(|e| e.to_string())?;
    let _ = child.kill().await;
    let request = String::from_utf8_lossy(&buffer[..read]);
    if request.contains("/runtime/invocation/next") {
        Ok(elapsed)
    } else {
        Err(format!("unexpected first request: {}", request.lines().next().unwrap_or("")))
    }
}
