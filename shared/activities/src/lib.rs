//! # trellis-activities
//!
//! The activity executors ([`trellis_core::activity::Activity`]) that need no cloud SDK,
//! registered by the composition roots (CLI, Lambda functions):
//!
//! - [`ai`]: `core.ai.callPrompt` ([`ai::CallPromptActivity`]) over the host's configured
//!   model providers ([`ai::parse_providers`]: OpenAI-compatible and Anthropic, policies,
//!   prices), streaming, structured output and the run's mock providers;
//! - [`http`]: `core.http.request` ([`http::HttpRequestActivity`]) over the one outbound HTTP
//!   client ([`http::HttpClient`]: resolve → check every answer → pin → connect, redirects
//!   off, a capped body) and its address policy ([`http::AllowList`]), with `config.auth`
//!   taking the node's `credentialsRef`;
//! - [`callback`]: the sender of external-event notifies ([`callback::HttpCallbackSender`])
//!   over the same client;
//! - [`webhook`]: the webhook transport ([`webhook::HttpWebhookTransport`]): destination
//!   checks and signed delivery POSTs over the same client;
//! - [`secrets`]: the embedded host's secret resolvers (environment variables, a `0600`
//!   secrets file) and `conformance.secret.echo` ([`secrets::SecretEchoActivity`]);
//! - [`conformance`]: `core.conformance.side-effect`, the replay fixtures' countable effect.

pub mod ai;
pub mod callback;
pub mod conformance;
pub mod http;
pub mod secrets;
pub mod webhook;
