//! Times a Lambda function process from spawn to its first `GET .../invocation/next` on a
//! stand-in Runtime API listening on loopback, once or as the median of several cold starts.

use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

/// What a function's cold start reads: its name and the table it uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Function<'a> {
    /// The function's name (`AWS_LAMBDA_FUNCTION_NAME`).
    pub(crate) name: &'a str,
    /// The DynamoDB table (`TRELLIS_TABLE_NAME`); the API stores its bundled fixtures there at
    /// cold start, the other functions only read the setting.
    pub(crate) table: &'a str,
}

/// The settings every function validates at cold start, the API's own included (a throwaway
/// key hash and cursor secret), plus the Lambda environment the runtime client reads.
fn environment(function: Function<'_>, runtime_api: &str) -> Vec<(&'static str, String)> {
    let keys = r#"[{"label":"bench","sha256":"0000000000000000000000000000000000000000000000000000000000000000","tenant":"bench","scopes":[]}]"#;
    vec![
        ("AWS_LAMBDA_RUNTIME_API", runtime_api.to_owned()),
        ("AWS_LAMBDA_FUNCTION_NAME", function.name.to_owned()),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256".to_owned()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "bench".to_owned()),
        ("AWS_LAMBDA_LOG_GROUP_NAME", "bench".to_owned()),
        ("TRELLIS_TABLE_NAME", function.table.to_owned()),
        ("TRELLIS_STEP_QUEUE_URL", "http://127.0.0.1:1/queue".to_owned()),
        ("TRELLIS_COMPLETION_QUEUE_URL", "http://127.0.0.1:1/completions.fifo".to_owned()),
        ("TRELLIS_API_KEYS", keys.to_owned()),
        ("TRELLIS_CURSOR_SECRET", "bench-cursor-secret-of-32-characters".to_owned()),
    ]
}

/// Spawns `binary` with the settings it validates at cold start and a stand-in Runtime API;
/// returns the time until its first request.
pub(crate) async fn time_to_first_poll(binary: &Path, function: Function<'_>) -> Result<Duration, String> {
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(binary)
        .envs(environment(function, &address.to_string()))
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

/// Cold starts of one function binary: its size and the spread of `starts` start-ups.
#[derive(Debug)]
pub(crate) struct ColdStarts {
    /// The binary's size in bytes.
    pub(crate) bytes: u64,
    /// The median start-up.
    pub(crate) median: Duration,
    /// The fastest start-up.
    pub(crate) min: Duration,
    /// The slowest start-up.
    pub(crate) max: Duration,
}

/// Starts `binary` `starts` times, one after another (each process killed after its first
/// Runtime API call), and summarises the start-ups.
pub(crate) async fn cold_starts(binary: &Path, function: Function<'_>, starts: usize) -> Result<ColdStarts, String> {
    let bytes = std::fs::metadata(binary).map_err(|e| format!("{}: {e}", binary.display()))?.len();
    let mut times = Vec::with_capacity(starts);
    for _ in 0..starts.max(1) {
        times.push(time_to_first_poll(binary, function).await?);
    }
    times.sort();
    Ok(ColdStarts { bytes, median: times[times.len() / 2], min: times[0], max: times[times.len() - 1] })
}
