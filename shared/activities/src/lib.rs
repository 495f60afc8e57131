//! # trellis-activities
//!
//! The activity executors ([`trellis_core::activity::Activity`]) that need no cloud SDK,
//! registered by the composition roots (CLI, Lambda functions):
//!
//! - [`http`]: `core.http.request` ([`http::HttpRequestActivity`]) over the one outbound HTTP
//!   client ([`http::HttpClient`]: resolve → check every answer → pin → connect, redirects
//!   off, a capped body) and its address policy ([`http::AllowList`]);
//! - [`callback`]: the sender of external-event notifies ([`callback::HttpCallbackSender`])
//!   over the same client.

pub mod callback;
pub mod http;
