//! A run's event log: [`EventStream`], the SSE reader shared by `runs events --follow`, `runs
//! watch` and `runs wait` (parsed by the one SSE parser of the workspace, resuming with
//! `Last-Event-ID` when the server ends a stream before the run is terminal, as API Gateway
//! streams do, or when a stream goes silent past the host's keep-alives; once a stream was
//! open, a host that cannot be reached or answers 429/5xx is retried with a capped backoff),
//! and `runs events` itself.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde_json::Value;
use trellis_activities::ai::stream::SseParser;
use trellis_core::interrupt::InterruptKind;

use super::exit::{is_terminal, ClientError};
use super::http::{encode, Api};
use super::output::{clock, print_json_line, reader_gone, say, Out};

/// The pause before reconnecting after a stream that brought nothing.
const IDLE_BACKOFF: Duration = Duration::from_millis(250);
/// A stream that brings no byte for this long is taken as dead and resumed (the host sends a
/// `:keepalive` every 15 s on a quiet stream).
pub const STREAM_IDLE: Duration = Duration::from_secs(45);
/// The first pause after a failed reconnect; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest pause between reconnects.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A host that keeps failing for this long ends the stream with its last error.
const GIVE_UP: Duration = Duration::from_secs(300);

/// Whether `event_type` ends a run.
pub fn is_terminal_event(event_type: &str) -> bool {
    matches!(event_type, "run.completed" | "run.failed" | "run.cancelled")
}

/// The status a run is in once `event` happened, when the event says: `run.started` and
/// `run.resumed` → running, `run.paused` → paused, `node.suspended` and
/// `interrupt.requested` → the waiting status of the interrupt's kind, the terminal events →
/// their status.
pub fn status_after(event: &Value) -> Option<&'static str> {
    match event["type"].as_str().unwrap_or("") {
        "run.started" | "run.resumed" => Some("running"),
        "run.paused" => Some("paused"),
        "run.completed" => Some("completed"),
        "run.failed" => Some("failed"),
        "run.cancelled" => Some("cancelled"),
        "node.suspended" | "interrupt.requested" => waiting_status(event["payload"]["kind"].as_str()?),
        _ => None,
    }
}

/// The run status while an interrupt of `kind` is pending (the engine's own mapping).
pub fn waiting_status(kind: &str) -> Option<&'static str> {
    InterruptKind::parse(kind).map(|kind| kind.waiting_status().as_str())
}

/// Whether a failed request is worth repeating once a stream was open: the host could not be
/// reached or was overloaded (429, 5xx). 401, 403, 404 and other refusals stay final.
pub fn is_transient(error: &ClientError) -> bool {
    match error {
        ClientError::Connect { .. } => true,
        ClientError::Http { status, .. } => *status == 429 || *status >= 500,
        ClientError::Input(_) | ClientError::Invalid { .. } => false,
    }
}

/// The pauses between repeated attempts after transient failures: doubling from
/// [`FIRST_BACKOFF`] up to [`MAX_BACKOFF`], giving up once failures lasted [`GIVE_UP`].
#[derive(Debug, Default)]
pub struct Backoff {
    failing_since: Option<Instant>,
    next: Duration,
}

impl Backoff {
    /// Pauses after `error` when it is transient and the failures have not lasted too long;
    /// the error otherwise.
    pub async fn pause(&mut self, error: ClientError) -> Result<(), ClientError> {
        let since = *self.failing_since.get_or_insert_with(Instant::now);
        if !is_transient(&error) || since.elapsed() >= GIVE_UP {
            return Err(error);
        }
        self.next = if self.next.is_zero() { FIRST_BACKOFF } else { (self.next * 2).min(MAX_BACKOFF) };
        tokio::time::sleep(self.next).await;
        Ok(())
    }

    /// A success: the next failure starts over.
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// The events of one run, live, in order, each once.
#[derive(Debug)]
pub struct EventStream {
    api: Api,
    run_id: String,
    last: Option<u64>,
    parser: SseParser,
    response: Option<reqwest::Response>,
    pending: VecDeque<Value>,
    done: bool,
    /// Whether a stream was opened once: from then on transient failures are retried.
    opened: bool,
    backoff: Backoff,
    idle: Duration,
}

impl EventStream {
    /// The stream of `run_id`'s events after sequence `after` (all when `None`).
    pub fn new(api: Api, run_id: &str, after: Option<u64>) -> Self {
        Self {
            api,
            run_id: run_id.to_owned(),
            last: after,
            parser: SseParser::default(),
            response: None,
            pending: VecDeque::new(),
            done: false,
            opened: false,
            backoff: Backoff::default(),
            idle: STREAM_IDLE,
        }
    }

    /// The same stream, taking one silent for `idle` as dead (default [`STREAM_IDLE`]).
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle = idle;
        self
    }

    /// The run this stream reads.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The next event, or `None` once the run's terminal event was read (or the run is
    /// terminal and nothing more comes). The first stream's failure is the caller's; once
    /// one was open, a dead stream (silent for the idle timeout) is resumed like an ended
    /// one, and transient failures of the host are retried with a capped backoff.
    pub async fn next(&mut self) -> Result<Option<Value>, ClientError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(Some(event));
            }
            if self.done {
                return Ok(None);
            }
            if self.response.is_none() {
                match self.open().await {
                    Ok(response) => {
                        self.response = Some(response);
                        self.opened = true;
                    }
                    Err(error) if !self.opened => return Err(error),
                    Err(error) => {
                        self.backoff.pause(error).await?;
                        continue;
                    }
                }
            }
            let Some(response) = self.response.as_mut() else { continue };
            match tokio::time::timeout(self.idle, response.chunk()).await {
                Ok(Ok(Some(bytes))) => {
                    self.backoff.reset();
                    let events = self.parser.push(&bytes);
                    self.accept(events);
                }
                // The server ended the stream, it broke off, or it went silent: take what is
                // left, then resume after the last event read, unless the run is over.
                Ok(Ok(None) | Err(_)) | Err(_) => {
                    if let Err(error) = self.ended().await {
                        self.backoff.pause(error).await?;
                    }
                }
            }
        }
    }

    /// Opens the stream after the last event read, within the idle timeout.
    async fn open(&self) -> Result<reqwest::Response, ClientError> {
        let path = format!("/v1/runs/{}/events?streamMode=debug", encode(&self.run_id));
        match tokio::time::timeout(self.idle, self.api.open_stream(&path, self.last)).await {
            Ok(result) => result,
            Err(_) => Err(ClientError::Connect {
                url: self.api.url(&path),
                message: format!("no answer within {} s", self.idle.as_secs_f64()),
            }),
        }
    }

    /// After a stream ended: the events left in the parser; when there were none and the run
    /// is terminal with every event read, the stream is done; else a short pause.
    async fn ended(&mut self) -> Result<(), ClientError> {
        self.response = None;
        let rest: Vec<_> = self.parser.finish().into_iter().collect();
        let before = self.pending.len();
        self.accept(rest);
        self.parser = SseParser::default();
        if self.pending.len() == before && !self.done {
            let snapshot = self.api.get(&format!("/v1/runs/{}", encode(&self.run_id))).await?;
            let status = snapshot["status"].as_str().unwrap_or("");
            if is_terminal(status) && self.caught_up().await? {
                self.done = true;
            } else {
                tokio::time::sleep(IDLE_BACKOFF).await;
            }
        }
        Ok(())
    }

    /// Whether every event of the (terminal) run has been read.
    async fn caught_up(&mut self) -> Result<bool, ClientError> {
        let after = self.last.map_or(-1, |last| last as i64);
        let page = self
            .api
            .get(&format!("/v1/runs/{}/events/poll?timeout=0&lastSequence={after}", encode(&self.run_id)))
            .await?;
        let events: Vec<Value> = page["events"].as_array().cloned().unwrap_or_default();
        if events.is_empty() {
            return Ok(true);
        }
        for event in events {
            self.admit(event);
        }
        Ok(false)
    }

    fn accept(&mut self, events: Vec<trellis_activities::ai::stream::SseEvent>) {
        for frame in events {
            let Ok(data) = serde_json::from_str::<Value>(&frame.data) else { continue };
            match (frame.event.as_deref(), data) {
                (Some("batch"), Value::Array(items)) => items.into_iter().for_each(|item| self.admit(item)),
                (Some("state.snapshot" | "ai.message.chunk"), _) => {}
                (_, event) => self.admit(event),
            }
            if let Some(id) = frame.id.as_deref().and_then(|id| id.parse::<u64>().ok()) {
                self.last = Some(self.last.map_or(id, |last| last.max(id)));
            }
        }
    }

    fn admit(&mut self, event: Value) {
        let Some(sequence) = event["sequence"].as_u64() else { return };
        if self.last.is_some_and(|last| sequence <= last) {
            // Already delivered (a resumed stream repeats nothing, but a batch may overlap).
            return;
        }
        self.last = Some(sequence);
        if event["type"].as_str().is_some_and(is_terminal_event) {
            self.done = true;
        }
        self.pending.push_back(event);
    }
}

/// One event as a log line: `SEQ  TIME  TYPE  NODE  summary`.
pub fn event_line(event: &Value) -> String {
    let node = event["nodeId"].as_str().unwrap_or("-");
    format!(
        "{:<4} {}  {:<22} {:<16} {}",
        event["sequence"].to_string(),
        clock(event["timestamp"].as_str().unwrap_or("")),
        event["type"].as_str().unwrap_or("?"),
        node,
        summary(event)
    )
    .trim_end()
    .to_owned()
}

/// A few words on what an event says.
pub fn summary(event: &Value) -> String {
    let payload = &event["payload"];
    let text = |field: &str| payload[field].as_str().map(str::to_owned);
    match event["type"].as_str().unwrap_or("") {
        "run.started" => text("workflowId").map(|id| format!("workflow {id}")).unwrap_or_default(),
        "node.started" => text("typeId").unwrap_or_default(),
        "node.completed" | "run.completed" => payload["durationMs"].as_u64().map(seconds).unwrap_or_default(),
        "node.failed" | "run.failed" => error_text(&payload["error"]),
        "node.dispatched" => text("childRunId").map(|id| format!("child {id}")).unwrap_or_default(),
        "node.suspended" | "interrupt.requested" => text("kind").unwrap_or_default(),
        "interrupt.resolved" => text("outcome").unwrap_or_default(),
        "run.cancelled" => text("reason").unwrap_or_default(),
        _ => String::new(),
    }
}

/// An error object as `code: message`.
pub fn error_text(error: &Value) -> String {
    match (error["code"].as_str(), error["message"].as_str()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(text), None) | (None, Some(text)) => text.to_owned(),
        _ if error.is_string() => error.as_str().unwrap_or_default().to_owned(),
        _ if error.is_null() => String::new(),
        _ => error.to_string(),
    }
}

/// Milliseconds as `1.2s`.
pub fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// `trellis runs events RUN_ID [--follow] [--after SEQ]`.
pub async fn run_events(
    api: &Api,
    out: Out,
    run_id: &str,
    follow: bool,
    after: Option<u64>,
) -> Result<(), ClientError> {
    let print = |event: &Value| {
        if out.json() {
            print_json_line(event);
        } else {
            say!("{}", event_line(event));
        }
    };
    if follow {
        let mut stream = EventStream::new(api.clone(), run_id, after);
        while let Some(event) = stream.next().await? {
            print(&event);
            if reader_gone() {
                // Nobody reads the log any more (`| head`): nothing left to do.
                break;
            }
        }
        return Ok(());
    }
    let mut cursor = after.map_or(-1, |after| after as i64);
    loop {
        let page = api
            .send(
                reqwest::Method::GET,
                &format!("/v1/runs/{run_id}/events?streamMode=debug&lastSequence={cursor}"),
                None,
                &[],
            )
            .await?;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        events.iter().for_each(print);
        let next = page["lastEventSeq"].as_i64().unwrap_or(cursor);
        if events.is_empty() || next <= cursor || page["isComplete"] == Value::Bool(true) {
            return Ok(());
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::extract::State;
    use axum::http::HeaderMap;
    use axum::routing::get;
    use axum::{Json, Router};
    use serde_json::json;

    use super::*;
    use crate::client::config::Target;

    /// The `Last-Event-ID` of each stream request (`None`: absent).
    type Seen = Arc<Mutex<Vec<Option<String>>>>;

    const EVENTS: [&str; 4] = ["run.started", "node.started", "node.completed", "run.completed"];

    /// A host whose streams each carry one event and end (as API Gateway ends them early).
    async fn host() -> (String, Seen) {
        let seen: Seen = Arc::default();
        let stream = |State(seen): State<Seen>, headers: HeaderMap| async move {
            let last = headers.get("last-event-id").and_then(|value| value.to_str().ok()).map(str::to_owned);
            seen.lock().unwrap().push(last.clone());
            let next = last.map_or(0, |last| last.parse::<usize>().unwrap() + 1);
            let Some(kind) = EVENTS.get(next) else { return String::new() };
            let event = json!({"sequence": next, "type": kind, "timestamp": "2026-01-01T00:00:00.000Z"});
            format!(": keepalive\n\nid: {next}\nevent: {kind}\ndata: {event}\n\n")
        };
        let router = Router::new()
            .route("/v/v1/runs/run-1/events", get(stream))
            .route("/v/v1/runs/run-1", get(|| async { Json(json!({"runId": "run-1", "status": "running"})) }))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/v", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        (url, seen)
    }

    /// What the flaky host answers to the n-th stream request.
    #[derive(Debug, Clone, Copy)]
    enum Answer {
        /// Event `n` and the end of the stream.
        Event(usize),
        /// 503, with the envelope.
        Unavailable,
        /// 429.
        TooMany,
        /// Headers, then silence (a dead connection).
        SilentBody,
        /// No answer at all.
        NoHeaders,
    }

    /// A host whose streams fail in each way in turn between the events: the reader must
    /// resume after the last event each time.
    async fn flaky_host(answers: Vec<Answer>) -> (String, Seen) {
        let seen: Seen = Arc::default();
        let answers = Arc::new(answers);
        let stream = move |State(seen): State<Seen>, headers: HeaderMap| {
            let answers = answers.clone();
            async move {
                let last = headers.get("last-event-id").and_then(|value| value.to_str().ok()).map(str::to_owned);
                let call = {
                    let mut seen = seen.lock().unwrap();
                    seen.push(last);
                    seen.len() - 1
                };
                match answers.get(call).copied().unwrap_or(Answer::Unavailable) {
                    Answer::Event(next) => {
                        let kind = EVENTS[next];
                        let event = json!({"sequence": next, "type": kind, "timestamp": "2026-01-01T00:00:00.000Z"});
                        axum::response::Response::new(axum::body::Body::from(format!(
                            "id: {next}\nevent: {kind}\ndata: {event}\n\n"
                        )))
                    }
                    Answer::Unavailable => axum::response::IntoResponse::into_response((
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        Json(json!({"error": "unavailable", "message": "try later"})),
                    )),
                    Answer::TooMany => {
                        axum::response::IntoResponse::into_response(axum::http::StatusCode::TOO_MANY_REQUESTS)
                    }
                    Answer::SilentBody => {
                        axum::response::Response::new(axum::body::Body::from_stream(futures_util::stream::pending::<
                            Result<axum::body::Bytes, std::convert::Infallible>,
                        >()))
                    }
                    Answer::NoHeaders => {
                        std::future::pending::<()>().await;
                        unreachable!("never answers")
                    }
                }
            }
        };
        let router = Router::new()
            .route("/v1/runs/run-1/events", get(stream))
            .route("/v1/runs/run-1", get(|| async { Json(json!({"runId": "run-1", "status": "running"})) }))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        (url, seen)
    }

    #[tokio::test]
    async fn a_dead_or_failing_reconnect_is_retried_and_the_reader_recovers() {
        use Answer::{Event, NoHeaders, SilentBody, TooMany, Unavailable};
        let answers = vec![Event(0), SilentBody, Unavailable, Event(1), NoHeaders, TooMany, Event(2), Event(3)];
        let (url, seen) = flaky_host(answers).await;
        let api = Api::new(&Target { url, key: Some("k".into()), ca_cert: None }).unwrap();
        let mut stream = EventStream::new(api, "run-1", None).with_idle_timeout(Duration::from_millis(300));
        let mut types = Vec::new();
        // A guard only: the reader recovers well within it.
        let read = async {
            while let Some(event) = stream.next().await.unwrap() {
                types.push(event["type"].as_str().unwrap().to_owned());
            }
        };
        tokio::time::timeout(Duration::from_secs(30), read).await.expect("the reader recovered");
        assert_eq!(types, EVENTS);
        let seen = seen.lock().unwrap().clone();
        let zero = Some("0".to_owned());
        let one = Some("1".to_owned());
        let two = Some("2".to_owned());
        assert_eq!(seen, [None, zero.clone(), zero.clone(), zero, one.clone(), one.clone(), one, two]);
    }

    #[tokio::test]
    async fn the_first_stream_failing_is_the_callers_error() {
        let (url, _) = flaky_host(vec![Answer::Unavailable]).await;
        let api = Api::new(&Target { url, key: Some("k".into()), ca_cert: None }).unwrap();
        let mut stream = EventStream::new(api, "run-1", None);
        assert!(matches!(stream.next().await, Err(ClientError::Http { status: 503, .. })));
    }

    #[tokio::test]
    async fn a_stream_ended_early_resumes_after_the_last_event_under_the_stage_path() {
        let (url, seen) = host().await;
        let api = Api::new(&Target { url, key: Some("k".into()), ca_cert: None }).unwrap();
        let mut stream = EventStream::new(api, "run-1", None);
        let mut types = Vec::new();
        while let Some(event) = stream.next().await.unwrap() {
            types.push(event["type"].as_str().unwrap().to_owned());
        }
        assert_eq!(types, EVENTS);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, [None, Some("0".into()), Some("1".into()), Some("2".into())]);
    }
}
