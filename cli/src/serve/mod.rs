//! The embedded host's connection layer: the accept loop, a connection limit, read timeouts
//! and a pre-parser that answers malformed request heads with the error envelope before
//! hyper sees them.

mod head;
mod io;
mod service;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, warn};

use head::Rejection;
use io::{PreParsed, SharedState};
use service::ConnService;

/// How connections are bounded. The defaults are the documented ones; tests shorten the
/// timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// Open connections at most; one more is answered `503` and closed.
    pub max_connections: usize,
    /// A request head must arrive within this long of its first byte (or of the connection
    /// being accepted, for the first request).
    pub header_timeout: Duration,
    /// A request body must arrive within this long of the handler starting to read it.
    pub body_timeout: Duration,
    /// A keep-alive connection with no request in flight is closed after this long. A
    /// connection with a response in flight (an SSE stream, a long-poll) is never idle.
    pub idle_timeout: Duration,
}

/// The default of `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 512;

impl Default for ConnectionSettings {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS as usize,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Refused connections being answered at once at most; past that they are closed unanswered.
const REFUSALS_IN_FLIGHT: usize = 64;
/// How long answering a refused connection may take.
const REFUSAL_BUDGET: Duration = Duration::from_secs(1);
/// The pause after a failed `accept` (out of file descriptors, say) before the next one.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `stop` turns true, then lets every connection finish
/// its request in flight (the caller bounds that wait: dropping this future closes them).
pub async fn serve(listener: TcpListener, app: Router, settings: ConnectionSettings, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(settings.max_connections));
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT));
    let mut connections = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped(&mut stop) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                warn!(%error, "accepting a connection failed; retrying");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        match slots.clone().try_acquire_owned() {
            Ok(slot) => {
                connections.spawn(connection(stream, app.clone(), settings, stop.clone(), slot));
            }
            Err(_) => {
                warn!(
                    %peer,
                    max_connections = settings.max_connections,
                    "connection refused: the host is at its connection limit (--max-connections)"
                );
                if let Ok(permit) = refusals.clone().try_acquire_owned() {
                    tokio::spawn(refuse(stream, settings.max_connections, permit));
                }
            }
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Resolves once the host is told to stop (or its handle is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// Drives one connection through hyper, behind the pre-parser.
async fn connection(
    stream: TcpStream,
    router: Router,
    settings: ConnectionSettings,
    mut stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let shared = SharedState::new();
    let io = PreParsed::new(stream, shared.clone(), settings);
    let service = ConnService { router, shared, body_timeout: settings.body_timeout };
    let mut builder = http1::Builder::new();
    // The pre-parser keeps the read timeouts; hyper's own header timer stays off.
    builder.keep_alive(true).header_read_timeout(None);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                debug!(%error, "connection ended with an error");
            }
        }
        _ = stopped(&mut stop) => {
            connection.as_mut().graceful_shutdown();
            let _ = connection.as_mut().await;
        }
    }
}

/// Answers a connection over the limit with the `503` envelope and closes it, after letting
/// the client's request arrive (closing with unread bytes would reset the connection and
/// could lose the answer).
async fn refuse(mut stream: TcpStream, max_connections: usize, _permit: OwnedSemaphorePermit) {
    let answer = Rejection::connection_limit(max_connections).to_http();
    let _ = tokio::time::timeout(REFUSAL_BUDGET, async move {
        stream.write_all(&answer).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}
