//! [`PreParsed`]: the socket as hyper sees it. Bytes reach hyper only after the pre-parser
//! has checked the head they belong to; a refused head is replaced by a small synthetic
//! request that the connection's service answers with the refusal envelope (so the answer
//! is written by hyper, in order, after any pipelined answer before it). The read timeouts
//! live here too, because only this layer knows whether the client is sending a head, a
//! body, or nothing at all.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::head::{self, Chunked, Framing, Head, Rejection};
use super::ConnectionSettings;

/// What hyper is handed in place of a refused head: the service answers it from the queue.
const SYNTHETIC_HEAD: &[u8] = b"GET / HTTP/1.1\r\nhost: trellis\r\n\r\n";

/// The most read from the socket at once.
const READ_CHUNK: usize = 8 * 1024;

/// State shared by a connection's reader and its service.
#[derive(Debug)]
pub(crate) struct Shared {
    /// One entry per head handed to hyper, in order: `None` to route it, `Some` to refuse it.
    pub(crate) verdicts: VecDeque<Option<Rejection>>,
    /// Requests handed to hyper whose response body has not been dropped yet.
    pub(crate) in_flight: usize,
    /// When `in_flight` last became zero (or the connection was accepted).
    pub(crate) idle_since: Instant,
    /// The body of the request in flight did not arrive in time.
    pub(crate) body_timed_out: bool,
    /// The reader's task, woken when the connection becomes idle (to start the idle timer).
    pub(crate) reader: Option<Waker>,
}

/// The shared state of one connection.
#[derive(Debug, Clone)]
pub(crate) struct SharedState(Arc<Mutex<Shared>>);

impl SharedState {
    pub(crate) fn new() -> Self {
        Self(Arc::new(Mutex::new(Shared {
            verdicts: VecDeque::new(),
            in_flight: 0,
            idle_since: Instant::now(),
            body_timed_out: false,
            reader: None,
        })))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Shared> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A response body was dropped (fully written, or abandoned).
    pub(crate) fn response_done(&self) {
        let mut shared = self.lock();
        shared.in_flight = shared.in_flight.saturating_sub(1);
        if shared.in_flight == 0 {
            shared.idle_since = Instant::now();
            if let Some(reader) = shared.reader.take() {
                reader.wake();
            }
        }
    }
}

/// Where the reader is in the request stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Expecting a head.
    Head,
    /// Inside a `Content-Length` body, this many bytes left.
    Length(u64),
    /// Inside a chunked body.
    Chunked(Chunked),
    /// A chunked body this layer cannot follow: bytes pass unchecked (hyper refuses the body
    /// and closes the connection).
    Opaque,
    /// A refusal was handed to hyper; nothing more is read.
    Refused,
    /// End of stream (the client's, or a timeout's).
    Done,
}

/// What [`PreParsed::frame`] achieved.
enum Framed {
    /// Bytes became ready, or the state changed: look again.
    Progress,
    /// More bytes are needed from the socket.
    NeedMore,
}

/// Which timer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// Waiting for a first head, or between requests: close silently when it fires.
    Idle,
    /// Part of a head arrived: `408`.
    Head,
    /// Inside a body: `408` (through the service) and close.
    Body,
}

/// The socket, seen through the pre-parser.
pub(crate) struct PreParsed {
    io: TcpStream,
    shared: SharedState,
    settings: ConnectionSettings,
    /// Bytes read; the first `ready` of them are checked and may go to hyper.
    buf: Vec<u8>,
    ready: usize,
    state: State,
    /// No head was completed yet on this connection.
    first: bool,
    /// When the first byte of the pending head arrived.
    head_started: Option<Instant>,
    /// When the body being read must have arrived.
    body_deadline: Option<Instant>,
    sleep: Pin<Box<Sleep>>,
}

impl PreParsed {
    pub(crate) fn new(io: TcpStream, shared: SharedState, settings: ConnectionSettings) -> Self {
        Self {
            io,
            shared,
            settings,
            buf: Vec::new(),
            ready: 0,
            state: State::Head,
            first: true,
            head_started: None,
            body_deadline: None,
            sleep: Box::pin(tokio::time::sleep(settings.header_timeout)),
        }
    }

    /// Frames buffered bytes past `ready`.
    fn frame(&mut self) -> Framed {
        let pending = &self.buf[self.ready..];
        match self.state {
            State::Head if pending.is_empty() => Framed::NeedMore,
            State::Head => match head::check(pending) {
                Head::Complete { len, framing } => {
                    self.ready += len;
                    self.first = false;
                    self.head_started = None;
                    self.body_deadline = None;
                    self.state = match framing {
                        Framing::Length(0) => State::Head,
                        Framing::Length(left) => State::Length(left),
                        Framing::Chunked => State::Chunked(Chunked::Size),
                    };
                    let mut shared = self.shared.lock();
                    shared.in_flight += 1;
                    shared.verdicts.push_back(None);
                    Framed::Progress
                }
                Head::Partial => {
                    self.head_started.get_or_insert_with(Instant::now);
                    Framed::NeedMore
                }
                Head::Rejected(rejection) => {
                    self.refuse(rejection);
                    Framed::Progress
                }
            },
            State::Length(left) => {
                if pending.is_empty() {
                    return Framed::NeedMore;
                }
                let take = usize::try_from(left).unwrap_or(usize::MAX).min(pending.len());
                self.ready += take;
                let left = left - take as u64;
                self.state = if left == 0 { State::Head } else { State::Length(left) };
                Framed::Progress
            }
            State::Chunked(mut chunked) => match head::advance_chunked(&mut chunked, pending) {
                Ok((used, done)) => {
                    self.ready += used;
                    self.state = if done { State::Head } else { State::Chunked(chunked) };
                    if used > 0 || done {
                        Framed::Progress
                    } else {
                        Framed::NeedMore
                    }
                }
                Err(head::Unframeable) => {
                    self.state = State::Opaque;
                    Framed::Progress
                }
            },
            State::Opaque if pending.is_empty() => Framed::NeedMore,
            State::Opaque => {
                self.ready = self.buf.len();
                Framed::Progress
            }
            State::Refused | State::Done => Framed::NeedMore,
        }
    }

    /// Replaces the unchecked bytes by the synthetic head and queues the refusal.
    fn refuse(&mut self, rejection: Rejection) {
        self.buf.truncate(self.ready);
        self.buf.extend_from_slice(SYNTHETIC_HEAD);
        self.ready = self.buf.len();
        self.state = State::Refused;
        let mut shared = self.shared.lock();
        shared.in_flight += 1;
        shared.verdicts.push_back(Some(rejection));
    }

    /// Registers `waker` to be woken when the connection becomes idle, and returns the timer
    /// that runs now, if any, and its deadline (one lock of the shared state).
    fn arm(&mut self, waker: &Waker) -> Option<(Instant, Timer)> {
        let mut shared = self.shared.lock();
        if !shared.reader.as_ref().is_some_and(|reader| reader.will_wake(waker)) {
            shared.reader = Some(waker.clone());
        }
        match self.state {
            State::Head => {
                if shared.in_flight > 0 {
                    // A response is in flight (an SSE stream, a long-poll): not idle.
                    return None;
                }
                let since = shared.idle_since;
                match self.head_started {
                    Some(started) => Some((started.max(since) + self.settings.header_timeout, Timer::Head)),
                    None if self.first => Some((since + self.settings.header_timeout, Timer::Idle)),
                    None => Some((since + self.settings.idle_timeout, Timer::Idle)),
                }
            }
            State::Length(_) | State::Chunked(_) => {
                let deadline = *self.body_deadline.get_or_insert_with(|| Instant::now() + self.settings.body_timeout);
                Some((deadline, Timer::Body))
            }
            State::Opaque | State::Refused | State::Done => None,
        }
    }
}

impl AsyncRead for PreParsed {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.ready > 0 {
                let n = this.ready.min(out.remaining());
                out.put_slice(&this.buf[..n]);
                this.buf.drain(..n);
                this.ready -= n;
                if this.buf.is_empty() {
                    // Everything handed over: the buffer goes with it (see the read below).
                    this.buf = Vec::new();
                }
                return Poll::Ready(Ok(()));
            }
            if let Framed::Progress = this.frame() {
                continue;
            }
            match this.state {
                // The refusal is with hyper; it closes the connection after answering it.
                State::Refused => return Poll::Pending,
                State::Done => return Poll::Ready(Ok(())),
                _ => {}
            }
            // Read into an uninitialised chunk on the stack and keep only what arrived: an
            // idle connection (a keep-alive waiting for its next request, an open SSE stream)
            // holds no read buffer, and no chunk is zeroed first.
            let mut chunk = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
            let mut read = ReadBuf::uninit(&mut chunk);
            let polled = Pin::new(&mut this.io).poll_read(cx, &mut read);
            let got = read.filled().len();
            this.buf.extend_from_slice(read.filled());
            match polled {
                Poll::Ready(Ok(())) if got == 0 => {
                    // The client closed. Unchecked bytes of a partial head are dropped: hyper
                    // sees the end of stream where the head would have started.
                    this.buf.truncate(this.ready);
                    this.state = State::Done;
                    return Poll::Ready(Ok(()));
                }
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Pending => {
                    let Some((deadline, timer)) = this.arm(cx.waker()) else { return Poll::Pending };
                    if this.sleep.deadline() != deadline {
                        this.sleep.as_mut().reset(deadline);
                    }
                    if this.sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    match timer {
                        Timer::Idle => {
                            this.state = State::Done;
                            return Poll::Ready(Ok(()));
                        }
                        Timer::Head => this.refuse(Rejection::timeout("head", this.settings.header_timeout)),
                        Timer::Body => {
                            this.shared.lock().body_timed_out = true;
                            this.state = State::Done;
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "the request body did not arrive within the body-read timeout",
                            )));
                        }
                    }
                }
            }
        }
    }
}

impl AsyncWrite for PreParsed {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, bytes)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
