//! One fake AI model provider on 127.0.0.1 for every test that makes a model call: it speaks
//! the OpenAI chat-completions API (`POST /v1/chat/completions`) and the Anthropic Messages
//! API (`POST /v1/messages`) on the same listener, streaming (SSE) or not, with each
//! provider's own body, event and error shapes. Nothing leaves loopback.
//!
//! Point a provider at it with these `baseUrl`s (the client appends the endpoint path):
//!
//! | kind              | `baseUrl`                                     | the client calls      |
//! |-------------------|-----------------------------------------------|-----------------------|
//! | OpenAI-compatible | [`FakeModel::openai_base_url`] `http://127.0.0.1:PORT/v1` | `{baseUrl}/chat/completions` |
//! | Anthropic         | [`FakeModel::anthropic_base_url`] `http://127.0.0.1:PORT` | `{baseUrl}/v1/messages` |
//!
//! Replies come from a queue ([`FakeModel::script`], [`FakeModel::push`]), one per model
//! request; with the queue empty every request gets the default deterministic reply
//! ([`ModelReply::echo`]): the text `echo: <last user message>`, with usage counted in
//! whitespace-separated words (input: every message's words, the Anthropic `system` prompt
//! included; output: the answer's words). An OpenAI request with a `response_format` JSON
//! schema gets instead the smallest JSON value that schema accepts. A streamed answer is sent as its
//! [`ModelReply::tokens`], or split into words (each after the first keeps its leading
//! whitespace, so the tokens concatenate to the text).
//!
//! Replies can also be routed by content ([`FakeModel::route`]): a request whose messages (the
//! Anthropic `system` prompt included) contain a route's `when` text takes that route's next
//! reply before the queue is consulted, so parallel callers get their own answers whatever
//! order they arrive in. [`fixture`] reads routes from a JSON file (the pattern examples ship
//! theirs; `trellis-fake-model --fixture FILE` serves one).
//!
//! Each request is recorded ([`FakeModel::requests`]) and then answered in this order:
//! a path it does not serve gets a 404; with [`FakeModel::require_key`] set, a request
//! without the key (`Authorization: Bearer` for OpenAI, `x-api-key` for Anthropic) gets a
//! 401; a body that is not JSON, has no `messages` array, or (Anthropic) lacks `max_tokens`
//! or the `anthropic-version` header gets a 400, as the real APIs do. None of these
//! consumes a scripted reply. Every response waits the global [`FakeModel::set_latency`]
//! plus the reply's own [`ModelReply::delay`]; requests are served concurrently.
//!
//! ```no_run
//! # async fn example() {
//! use trellis_testkit::fake_model::{FakeModel, FinishReason, ModelReply};
//! let model = FakeModel::start().await;
//! model.require_key("sk-test-1");
//! model.script(vec![
//!     ModelReply::rate_limited(2),                                   // 429, Retry-After: 2
//!     ModelReply::text("Hello there").finish(FinishReason::Length),  // then an answer
//! ]);
//! let base_url = model.openai_base_url(); // http://127.0.0.1:PORT/v1
//! // … configure the provider with `base_url` and key `sk-test-1`, make the call …
//! assert_eq!(model.requests().len(), 2);
//! assert_eq!(model.last_request().unwrap().last_user_text(), Some("hi".to_owned()));
//! # }
//! ```

pub mod fixture;
mod server;
mod wire;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tokio::net::TcpListener;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which provider API a request used (from its path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Api {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
}

/// Why the model stopped; each provider spells it its own way.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FinishReason {
    /// A natural end: OpenAI `stop`, Anthropic `end_turn`.
    #[default]
    Stop,
    /// The token limit: OpenAI `length`, Anthropic `max_tokens`.
    Length,
    /// Filtered or refused: OpenAI `content_filter`, Anthropic `refusal`.
    ContentFilter,
    /// A tool call: OpenAI `tool_calls`, Anthropic `tool_use`.
    ToolCalls,
    /// Sent as given to both providers.
    Other(String),
}

impl FinishReason {
    /// The OpenAI `finish_reason`.
    pub fn openai(&self) -> &str {
        match self {
            Self::Stop => "stop",
            Self::Length => "length",
            Self::ContentFilter => "content_filter",
            Self::ToolCalls => "tool_calls",
            Self::Other(other) => other,
        }
    }

    /// The Anthropic `stop_reason`.
    pub fn anthropic(&self) -> &str {
        match self {
            Self::Stop => "end_turn",
            Self::Length => "max_tokens",
            Self::ContentFilter => "refusal",
            Self::ToolCalls => "tool_use",
            Self::Other(other) => other,
        }
    }
}

/// Token counts reported with an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// OpenAI `prompt_tokens`, Anthropic `input_tokens`.
    pub input: u64,
    /// OpenAI `completion_tokens`, Anthropic `output_tokens` (OpenAI `total_tokens` is the sum).
    pub output: u64,
}

/// What a reply answers with (crate-visible: the Converse fake, `fake_bedrock`, reads replies too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Content {
    /// `echo: <last user message>`.
    Echo,
    /// A text, streamed as the given tokens or as words.
    Text { text: String, tokens: Option<Vec<String>> },
    /// An HTTP error in the provider's error shape.
    Error { status: u16, message: String, retry_after: Option<u64> },
    /// The connection closes with no response.
    Disconnect,
}

/// A tool call a scripted reply asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCallReply {
    /// The tool's name.
    pub name: String,
    /// Its arguments.
    pub arguments: Value,
}

impl ToolCallReply {
    /// A call of `name` with `arguments`.
    pub fn new(name: impl Into<String>, arguments: Value) -> Self {
        Self { name: name.into(), arguments }
    }
}

/// One scripted reply: an answer (text or tokens, finish reason, usage, timing) or a failure.
/// Answer settings on an error or [`ModelReply::disconnect`] reply are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelReply {
    pub(crate) content: Content,
    pub(crate) finish: FinishReason,
    pub(crate) usage: Option<Usage>,
    pub(crate) delay: Duration,
    token_delay: Duration,
    drop_after: Option<usize>,
    pub(crate) tool_calls: Vec<ToolCallReply>,
    pub(crate) reasoning: Option<String>,
}

impl ModelReply {
    fn of(content: Content) -> Self {
        Self {
            content,
            finish: FinishReason::Stop,
            usage: None,
            delay: Duration::ZERO,
            token_delay: Duration::ZERO,
            drop_after: None,
            tool_calls: Vec::new(),
            reasoning: None,
        }
    }

    /// An answer asking for these tool calls (no text, finish reason tool calls), in each
    /// API's shape: OpenAI `message.tool_calls` (ids `call_fake<serial>_<i>`, arguments as
    /// JSON text), Anthropic `tool_use` content blocks (ids `toolu_fake<serial>_<i>`). Tool
    /// calls are sent in whole answers only; a streamed request gets the text.
    pub fn tool_calls<I>(calls: I) -> Self
    where
        I: IntoIterator<Item = ToolCallReply>,
    {
        let mut reply = Self::text("").finish(FinishReason::ToolCalls);
        reply.tool_calls = calls.into_iter().collect();
        reply
    }

    /// The same answer with reasoning text: OpenAI-compatible `message.reasoning_content`,
    /// an Anthropic `thinking` block (whole answers only).
    pub fn reasoning(mut self, text: impl Into<String>) -> Self {
        self.reasoning = Some(text.into());
        self
    }

    /// The default reply, explicitly: `echo: <last user message>`, usage in words.
    pub fn echo() -> Self {
        Self::of(Content::Echo)
    }

    /// A full answer `text`; streamed as words (see the module doc).
    pub fn text(text: impl Into<String>) -> Self {
        Self::of(Content::Text { text: text.into(), tokens: None })
    }

    /// An answer streamed as exactly these tokens (the full answer is their concatenation).
    pub fn tokens<I, S>(tokens: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let tokens: Vec<String> = tokens.into_iter().map(Into::into).collect();
        Self::of(Content::Text { text: tokens.concat(), tokens: Some(tokens) })
    }

    /// An answer whose text is `value` as compact JSON (a schema mismatch is any value the
    /// schema rejects, e.g. `json!({"wrong": 1})`).
    pub fn json(value: &Value) -> Self {
        Self::text(value.to_string())
    }

    /// An answer whose text is truncated, unparsable JSON (`{"answer": "unterminated`), for
    /// a caller's repair path.
    pub fn malformed_json() -> Self {
        Self::text(r#"{"answer": "unterminated"#)
    }

    /// An HTTP error `status` with `message`, in the provider's error shape (the error type
    /// follows the status: 400 invalid request, 401 authentication, 404 not found, 429 rate
    /// limit, 5xx server/api error, 529 overloaded).
    pub fn error(status: u16, message: impl Into<String>) -> Self {
        Self::of(Content::Error { status, message: message.into(), retry_after: None })
    }

    /// A 429 rate-limit error with `Retry-After: <seconds>`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        Self::of(Content::Error {
            status: 429,
            message: "Rate limit reached (fake model)".to_owned(),
            retry_after: Some(retry_after_secs),
        })
    }

    /// The connection closes without any response (a network failure).
    pub fn disconnect() -> Self {
        Self::of(Content::Disconnect)
    }

    /// The same answer with this finish reason (default [`FinishReason::Stop`]).
    pub fn finish(mut self, finish: FinishReason) -> Self {
        self.finish = finish;
        self
    }

    /// The same answer reporting this usage instead of the word counts.
    pub fn usage(mut self, input: u64, output: u64) -> Self {
        self.usage = Some(Usage { input, output });
        self
    }

    /// The same reply, answered `delay` after the request arrived (added to the global latency).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The same answer, streamed with `delay` before each token after the first.
    pub fn token_delay(mut self, delay: Duration) -> Self {
        self.token_delay = delay;
        self
    }

    /// The same answer, but the connection drops after `tokens` streamed tokens (before any
    /// finish event); a request that does not stream gets no response at all.
    pub fn drop_after(mut self, tokens: usize) -> Self {
        self.drop_after = Some(tokens);
        self
    }
}

/// A request the fake model received.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The API its path names (`None` for a path it does not serve).
    pub api: Option<Api>,
    /// The method.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// Headers, names lower-case, in order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Null` if it is not JSON).
    pub body: Value,
    /// When it was received (wall clock).
    pub received_at: SystemTime,
    /// When it was received (monotonic, for measuring latency and overlap).
    pub received: Instant,
}

impl ModelRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(seen, _)| seen.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
    }

    /// The `model` field.
    pub fn model(&self) -> Option<&str> {
        self.body.get("model").and_then(Value::as_str)
    }

    /// Whether the body asked for a stream (`"stream": true`).
    pub fn stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool).unwrap_or(false)
    }

    /// The `messages` array (empty if absent).
    pub fn messages(&self) -> &[Value] {
        self.body.get("messages").and_then(Value::as_array).map_or(&[], Vec::as_slice)
    }

    /// The text of the last `user` message (string content, or its text parts joined).
    pub fn last_user_text(&self) -> Option<String> {
        wire::last_user_text(&self.body)
    }

    /// The bearer token of `Authorization: Bearer …`.
    pub fn bearer(&self) -> Option<&str> {
        self.header("authorization").and_then(|value| value.strip_prefix("Bearer "))
    }
}

/// Replies for the requests whose text contains `when` ([`FakeModel::route`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// A text the request's messages must contain (case-sensitive).
    pub when: String,
    /// The replies, one per matching request, in order.
    pub replies: VecDeque<ModelReply>,
}

impl Route {
    /// A route answering requests that contain `when` with `replies`, in order.
    pub fn new(when: impl Into<String>, replies: Vec<ModelReply>) -> Self {
        Self { when: when.into(), replies: replies.into() }
    }
}

#[derive(Debug, Default)]
struct State {
    routes: Vec<Route>,
    /// With [`FakeModel::serve_routes`]: the routes to start again once every one is used up.
    replay: Option<Vec<Route>>,
    queue: VecDeque<ModelReply>,
    requests: Vec<ModelRequest>,
    key: Option<String>,
    latency: Duration,
    served: u64,
}

/// The fake provider; stops (with every open connection) when dropped.
#[derive(Debug)]
pub struct FakeModel {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: tokio::task::JoinHandle<()>,
}

impl FakeModel {
    /// Starts one on `127.0.0.1:0` (an ephemeral port).
    pub async fn start() -> Self {
        Self::bind(0).await.expect("bind 127.0.0.1:0")
    }

    /// Starts one on `127.0.0.1:port` (`0`: an ephemeral port).
    pub async fn bind(port: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let accept = tokio::spawn(server::accept_loop(listener, Arc::clone(&state)));
        Ok(Self { addr, state, accept })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// An OpenAI-compatible provider's `baseUrl`: `http://127.0.0.1:PORT/v1` (the client
    /// appends `/chat/completions`).
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// An Anthropic provider's `baseUrl`: `http://127.0.0.1:PORT` (the client appends
    /// `/v1/messages`).
    pub fn anthropic_base_url(&self) -> String {
        self.base_url()
    }

    /// Replaces the reply queue with `replies`, consumed one per model request.
    pub fn script(&self, replies: Vec<ModelReply>) {
        lock(&self.state).queue = replies.into();
    }

    /// Adds a route: each request whose messages contain `when` (checked in the order routes
    /// were added; the first route with a reply left wins) takes the next of `replies`. A
    /// request no route takes is answered from the queue, then by default.
    pub fn route(&self, when: impl Into<String>, replies: Vec<ModelReply>) {
        lock(&self.state).routes.push(Route::new(when, replies));
    }

    /// Replaces every route with `routes` (see [`FakeModel::route`]).
    pub fn set_routes(&self, routes: Vec<Route>) {
        let mut state = lock(&self.state);
        state.routes = routes;
        state.replay = None;
    }

    /// Like [`FakeModel::set_routes`], but once every route's replies are used up the whole
    /// set starts again (a standalone server answering one run after another).
    pub fn serve_routes(&self, routes: Vec<Route>) {
        let mut state = lock(&self.state);
        state.routes = routes.clone();
        state.replay = Some(routes);
    }

    /// How many routed replies are still unused.
    pub fn pending_routed(&self) -> usize {
        lock(&self.state).routes.iter().map(|route| route.replies.len()).sum()
    }

    /// Appends one reply to the queue.
    pub fn push(&self, reply: ModelReply) {
        lock(&self.state).queue.push_back(reply);
    }

    /// How many scripted replies are still queued.
    pub fn pending(&self) -> usize {
        lock(&self.state).queue.len()
    }

    /// From now on a request without `key` gets a 401 in its provider's error shape.
    pub fn require_key(&self, key: impl Into<String>) {
        lock(&self.state).key = Some(key.into());
    }

    /// From now on every response waits `latency` first (benchmarks; `ZERO` to stop).
    pub fn set_latency(&self, latency: Duration) {
        lock(&self.state).latency = latency;
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<ModelRequest> {
        lock(&self.state).requests.clone()
    }

    /// The requests made to `api`.
    pub fn requests_to(&self, api: Api) -> Vec<ModelRequest> {
        lock(&self.state).requests.iter().filter(|request| request.api == Some(api)).cloned().collect()
    }

    /// The last request received.
    pub fn last_request(&self) -> Option<ModelRequest> {
        lock(&self.state).requests.last().cloned()
    }

    /// How many requests it received.
    pub fn request_count(&self) -> usize {
        lock(&self.state).requests.len()
    }

    /// How many replies it has answered since it started (scripted, routed or default; not
    /// the 404/401/400 it refuses), across [`FakeModel::clear_requests`].
    pub fn served(&self) -> u64 {
        lock(&self.state).served
    }

    /// Forgets the requests received so far.
    pub fn clear_requests(&self) {
        lock(&self.state).requests.clear();
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ask(model: &FakeModel, system: &str, user: &str) -> String {
        let body = serde_json::json!({"model": "m", "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": user}]});
        let url = format!("{}/chat/completions", model.openai_base_url());
        let answer: Value = reqwest::Client::new().post(url).json(&body).send().await.unwrap().json().await.unwrap();
        answer["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn routes_answer_by_content_in_any_order_then_fall_back() {
        let model = FakeModel::start().await;
        model.set_routes(vec![
            Route::new("You are the judge", vec![ModelReply::text("A wins")]),
            Route::new("angle: risks", vec![ModelReply::text("risky"), ModelReply::text("riskier")]),
        ]);
        model.push(ModelReply::text("from the queue"));
        assert_eq!(ask(&model, "You analyse", "angle: risks").await, "risky");
        assert_eq!(ask(&model, "You are the judge", "pick").await, "A wins");
        assert_eq!(ask(&model, "You analyse", "angle: risks").await, "riskier");
        assert_eq!(model.pending_routed(), 0);
        // Used-up routes no longer match: the queue, then the default.
        assert_eq!(ask(&model, "You are the judge", "again").await, "from the queue");
        assert_eq!(ask(&model, "You are the judge", "again").await, "echo: again");
    }

    #[tokio::test]
    async fn served_routes_start_again_once_used_up() {
        let model = FakeModel::start().await;
        model.serve_routes(vec![Route::new("judge", vec![ModelReply::text("one"), ModelReply::text("two")])]);
        let answers =
            [ask(&model, "judge", "x").await, ask(&model, "judge", "x").await, ask(&model, "judge", "x").await];
        assert_eq!(answers, ["one", "two", "one"]);
    }

    #[test]
    fn finish_reasons_map_per_provider() {
        assert_eq!((FinishReason::Length.openai(), FinishReason::Length.anthropic()), ("length", "max_tokens"));
        assert_eq!((FinishReason::Stop.openai(), FinishReason::Stop.anthropic()), ("stop", "end_turn"));
    }
}
