//! # trellis-testkit
//!
//! One runner for scripted run scenarios, driven against any backend through [`Driver`]: the
//! embedded host over HTTP ([`HttpDriver`]) or the emulated AWS stack (whose driver plays API
//! Gateway and pumps the queues on [`Driver::tick`]). The fixture expectation table
//! (`conformance/fixture-expectations.json`) and the scenario list
//! (`conformance/scenarios.json`) are written in the script format [`script`] reads, so both
//! backends are held to the same behaviour by the same code.

pub mod callback;
pub mod campaign;
pub mod external;
pub mod fake_bedrock;
pub mod fake_lambda;
pub mod fake_model;
pub mod host;
pub mod http_server;
pub mod net;
pub mod patterns;
pub mod payloads;
pub mod process;
pub mod replay;
pub mod rerun;
pub mod script;
pub mod supervisor_model;
pub mod webhooks;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

/// Deadlines the spec sets (a run completes or cancels within 5 s); waits use them.
pub const SPEC_DEADLINE: Duration = Duration::from_secs(5);

/// A backend under test, as an API client that can also let the backend make progress.
#[async_trait]
pub trait Driver: Send {
    /// Sends a request, with the test's bearer key or without any; returns status and body.
    async fn call(&mut self, method: &str, path: &str, body: Option<Value>, bearer: bool) -> (u16, Value);
    /// Lets the backend make progress for a moment (the AWS driver processes queued
    /// messages; the embedded host has its own worker and just waits a little).
    async fn tick(&mut self);
    /// Told the name of the scenario a check plays next (a metering driver labels its figures
    /// with it); nothing by default.
    fn scenario(&mut self, _name: &str) {}
}

/// A driver for a host served over HTTP (the embedded host).
pub struct HttpDriver {
    base: String,
    key: String,
    http: reqwest::Client,
}

impl HttpDriver {
    /// A driver for the host at `base` (`http://127.0.0.1:port`) with bearer `key`.
    pub fn new(base: impl Into<String>, key: &str) -> Self {
        Self { base: base.into(), key: key.to_owned(), http: reqwest::Client::new() }
    }
}

#[async_trait]
impl webhooks::SignedDriver for HttpDriver {
    async fn post_raw(&mut self, path: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, Value) {
        let mut request = self.http.post(format!("{}{path}", self.base)).body(body.to_vec());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

#[async_trait]
impl Driver for HttpDriver {
    async fn call(&mut self, method: &str, path: &str, body: Option<Value>, bearer: bool) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("HTTP method");
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if bearer {
            request = request.bearer_auth(&self.key);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn tick(&mut self) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
