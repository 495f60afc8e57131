//! Network fakes for the outbound HTTP client's ports: a [`ScriptedResolver`] (names answer
//! what the test says, counted) and a [`RecordingConnector`] that records every address it is
//! asked for and connects only loopback ones (anything else is refused and recorded as a
//! violation; tests assert [`RecordingConnector::violations`] is empty).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use trellis_activities::http::client::{Connector, Resolver, Stream};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Parses an IP address literal (test helper; panics on a typo).
pub fn ip(text: &str) -> IpAddr {
    text.parse().unwrap_or_else(|_| panic!("`{text}` is not an IP address"))
}

#[derive(Debug, Default)]
struct Script {
    /// The answers still to give; the last one repeats.
    answers: Vec<Vec<IpAddr>>,
    /// How many times the name was resolved.
    resolutions: usize,
}

/// A resolver answering from a script. A name may answer a sequence (for rebinding tests):
/// the `n`-th resolution gets the `n`-th answer, the last one repeating. Unknown names fail
/// with `NotFound`.
#[derive(Debug, Default)]
pub struct ScriptedResolver {
    names: Mutex<HashMap<String, Script>>,
}

impl ScriptedResolver {
    /// An empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// `name` answers `addresses` (IP literals) on every resolution.
    pub fn answer(&self, name: &str, addresses: &[&str]) -> &Self {
        self.answer_sequence(name, &[addresses])
    }

    /// `name` answers each of `answers` in turn, the last one repeating.
    pub fn answer_sequence(&self, name: &str, answers: &[&[&str]]) -> &Self {
        let answers = answers.iter().map(|answer| answer.iter().map(|text| ip(text)).collect()).collect();
        lock(&self.names).entry(name.to_owned()).or_default().answers = answers;
        self
    }

    /// How many times `name` was resolved.
    pub fn resolutions(&self, name: &str) -> usize {
        lock(&self.names).get(name).map_or(0, |script| script.resolutions)
    }

    /// How many resolutions there were in all (unknown names included).
    pub fn total_resolutions(&self) -> usize {
        lock(&self.names).values().map(|script| script.resolutions).sum()
    }
}

#[async_trait]
impl Resolver for ScriptedResolver {
    async fn resolve(&self, host: &str, _port: u16) -> io::Result<Vec<IpAddr>> {
        let mut names = lock(&self.names);
        let script = names.entry(host.to_owned()).or_default();
        script.resolutions += 1;
        let index = (script.resolutions - 1).min(script.answers.len().saturating_sub(1));
        script
            .answers
            .get(index)
            .cloned()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no scripted answer for {host}")))
    }
}

/// A connector that records every address it is asked for, connects loopback addresses over
/// real TCP, and refuses everything else (recording a violation: in tests nothing may leave
/// loopback).
#[derive(Debug, Default)]
pub struct RecordingConnector {
    connects: Mutex<Vec<SocketAddr>>,
    violations: Mutex<Vec<SocketAddr>>,
}

impl RecordingConnector {
    /// Nothing recorded yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every address asked for, in order (refused ones included).
    pub fn connects(&self) -> Vec<SocketAddr> {
        lock(&self.connects).clone()
    }

    /// The non-loopback addresses asked for (refused, never connected).
    pub fn violations(&self) -> Vec<SocketAddr> {
        lock(&self.violations).clone()
    }
}

#[async_trait]
impl Connector for RecordingConnector {
    async fn connect(&self, addr: SocketAddr) -> io::Result<Box<dyn Stream>> {
        lock(&self.connects).push(addr);
        if !addr.ip().to_canonical().is_loopback() {
            lock(&self.violations).push(addr);
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("test connector refuses non-loopback address {addr}"),
            ));
        }
        Ok(Box::new(tokio::net::TcpStream::connect(addr).await?))
    }
}
