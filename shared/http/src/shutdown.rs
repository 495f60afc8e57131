//! How the HTTP hosts that run as a process (`trellis serve`, `trellis-aws-local`) learn to
//! stop: SIGINT (Ctrl-C) or SIGTERM, whichever comes first.

/// Resolves at the first SIGINT or SIGTERM (SIGINT only off Unix).
pub async fn signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
