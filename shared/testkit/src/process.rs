//! A host binary started by a test: the URL it announces on standard output
//! (`trellis-aws-local listening on http://ADDR/v`), read by a thread so the test never
//! blocks past its guard.

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc;
use std::time::Duration;

/// Reads `child`'s standard output (which must be piped) until a line starts with `prefix`
/// and answers the rest of that line, trimmed. Panics — after killing the child — when no
/// such line comes within `guard` or the output ends first. Later lines are drained so the
/// child never blocks on a full pipe.
pub fn announced_url(child: &mut Child, prefix: &str, guard: Duration) -> String {
    let stdout = child.stdout.take().expect("the child's stdout is piped");
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    loop {
        let Ok(line) = received.recv_timeout(guard) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the host did not print `{prefix}URL` within {guard:?}");
        };
        if let Some(url) = line.strip_prefix(prefix) {
            return url.trim().to_owned();
        }
    }
}
