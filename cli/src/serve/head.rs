//! The request-head pre-parser: decides, before hyper sees a request, whether hyper would
//! accept its head, and answers with an envelope what hyper would refuse with an empty body
//! (`414`, `431`, a malformed request line or header, a target that is not ASCII, two
//! `Content-Length`s that disagree). It also frames bodies (`Content-Length` or `chunked`) so
//! the next head on a keep-alive connection is found and checked too.
//!
//! The rules mirror hyper 1.x's `Server::parse` (httparse with hyper's default parser
//! configuration, `http::Uri`, `Content-Length` digits only, `Transfer-Encoding` ending in
//! `chunked`), with limits no larger than hyper's, so hyper never refuses a head this module
//! let through.

use axum::http::{Method, StatusCode, Uri};
use serde_json::{json, Value};

/// A request head (request line and headers) is at most this long; hyper's own buffer
/// limit is larger (about 400 KiB), so this one is the binding one.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// A request target is at most this long (hyper's limit is 65,534).
pub(crate) const MAX_TARGET_BYTES: usize = 16 * 1024;
/// Headers per request at most (hyper's default).
pub(crate) const MAX_HEADERS: usize = 100;
/// The longest chunk-size line (with extensions) or trailer line followed.
const MAX_CHUNK_LINE: usize = 4096;

/// A refusal answered by the connection layer itself.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rejection {
    /// The HTTP status.
    pub(crate) status: StatusCode,
    /// The envelope's `error`.
    pub(crate) code: &'static str,
    /// The envelope's `message` (fixed text; never caller input).
    pub(crate) message: &'static str,
    /// The envelope's `details`.
    pub(crate) details: Value,
}

impl Rejection {
    fn bad_request(part: &'static str, message: &'static str) -> Self {
        Self { status: StatusCode::BAD_REQUEST, code: "validation_error", message, details: json!({ "part": part }) }
    }

    fn bad_header(header: &'static str, message: &'static str) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            code: "validation_error",
            message,
            details: json!({ "part": "header", "header": header }),
        }
    }

    /// What httparse and `http::Uri` both refuse in a target: the one message for both.
    fn invalid_target() -> Self {
        Self::bad_request(
            "request-target",
            "the request target is not a valid URI (only ASCII is allowed; percent-encode other bytes)",
        )
    }

    fn target_too_long() -> Self {
        Self {
            status: StatusCode::URI_TOO_LONG,
            code: "uri_too_long",
            message: "the request target is longer than the host accepts",
            details: json!({ "part": "request-target", "limitBytes": MAX_TARGET_BYTES }),
        }
    }

    fn head_too_large() -> Self {
        Self {
            status: StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            code: "headers_too_large",
            message: "the request headers are larger or more numerous than the host accepts",
            details: json!({ "part": "head", "limitBytes": MAX_HEAD_BYTES, "limitHeaders": MAX_HEADERS }),
        }
    }

    /// `408 request_timeout`: the head or the body did not arrive in time.
    pub(crate) fn timeout(part: &'static str, after: std::time::Duration) -> Self {
        Self {
            status: StatusCode::REQUEST_TIMEOUT,
            code: "request_timeout",
            message: if part == "body" {
                "the request body did not arrive within the body-read timeout"
            } else {
                "the request head did not arrive within the header-read timeout"
            },
            details: json!({ "part": part, "timeoutMs": u64::try_from(after.as_millis()).unwrap_or(u64::MAX) }),
        }
    }

    /// `503 service_unavailable`: the host is at its connection limit.
    pub(crate) fn connection_limit(max: usize) -> Self {
        Self {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "service_unavailable",
            message: "the host is at its connection limit; retry later",
            details: json!({ "retriable": true, "retryAfter": 1, "maxConnections": max }),
        }
    }

    /// The envelope body.
    pub(crate) fn body(&self) -> String {
        json!({ "error": self.code, "message": self.message, "details": self.details }).to_string()
    }

    /// The whole answer as bytes, for a connection hyper never sees.
    pub(crate) fn to_http(&self) -> Vec<u8> {
        let body = self.body();
        let reason = self.status.canonical_reason().unwrap_or("Error");
        let retry = if self.status == StatusCode::SERVICE_UNAVAILABLE { "retry-after: 1\r\n" } else { "" };
        format!(
            "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n{retry}\r\n{body}",
            self.status.as_u16(),
            body.len()
        )
        .into_bytes()
    }
}

/// How the body after a head is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `Content-Length` bytes (0: no body).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// What the buffered bytes of a head amount to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Head {
    /// A head hyper will accept, `len` bytes long.
    Complete {
        /// Its length.
        len: usize,
        /// How its body is delimited.
        framing: Framing,
    },
    /// Not complete yet and within the limits.
    Partial,
    /// A head hyper would refuse (or one past the limits).
    Rejected(Rejection),
}

/// Checks the head at the start of `buf`.
pub(crate) fn check(buf: &[u8]) -> Head {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len > MAX_HEAD_BYTES => Head::Rejected(Rejection::head_too_large()),
        Ok(httparse::Status::Complete(len)) => match validate(&request) {
            Ok(framing) => Head::Complete { len, framing },
            Err(rejection) => Head::Rejected(rejection),
        },
        Ok(httparse::Status::Partial) => {
            let line_pending = request.version.is_none();
            if request.path.is_some_and(|path| path.len() > MAX_TARGET_BYTES)
                || (line_pending && request.path.is_none() && buf.len() > MAX_TARGET_BYTES + 32)
            {
                Head::Rejected(Rejection::target_too_long())
            } else if buf.len() > MAX_HEAD_BYTES {
                Head::Rejected(Rejection::head_too_large())
            } else {
                Head::Partial
            }
        }
        Err(error) => Head::Rejected(refusal(&request, error)),
    }
}

fn refusal(request: &httparse::Request<'_, '_>, error: httparse::Error) -> Rejection {
    match error {
        httparse::Error::TooManyHeaders => Rejection::head_too_large(),
        httparse::Error::Token if request.method.is_some() => Rejection::invalid_target(),
        httparse::Error::HeaderName => {
            Rejection::bad_request("header", "a header name is empty or holds a character outside the token set")
        }
        httparse::Error::HeaderValue => Rejection::bad_request(
            "header",
            "a header value holds a forbidden control character (such as NUL) or a header line has no colon",
        ),
        httparse::Error::NewLine if request.version.is_some() => {
            Rejection::bad_request("header", "a header line is not terminated by CRLF")
        }
        httparse::Error::Version => {
            Rejection::bad_request("request-line", "the request line must end with HTTP/1.0 or HTTP/1.1")
        }
        _ => Rejection::bad_request(
            "request-line",
            "the request line is malformed (METHOD SP request-target SP HTTP/1.x)",
        ),
    }
}

/// The checks hyper makes after httparse: method, URI, body framing headers.
fn validate(request: &httparse::Request<'_, '_>) -> Result<Framing, Rejection> {
    let method = request.method.unwrap_or_default();
    if Method::from_bytes(method.as_bytes()).is_err() {
        return Err(Rejection::bad_request("request-line", "the request method is not a valid token"));
    }
    let path = request.path.unwrap_or_default();
    if path.len() > MAX_TARGET_BYTES {
        return Err(Rejection::target_too_long());
    }
    if Uri::try_from(path).is_err() {
        return Err(Rejection::invalid_target());
    }
    let http_11 = request.version == Some(1);
    let mut length: Option<u64> = None;
    let mut chunked: Option<bool> = None;
    for header in request.headers.iter() {
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            if !http_11 {
                return Err(Rejection::bad_header(
                    "transfer-encoding",
                    "HTTP/1.0 requests cannot use Transfer-Encoding",
                ));
            }
            chunked = Some(ends_in_chunked(header.value));
        } else if header.name.eq_ignore_ascii_case("content-length") {
            if chunked.is_some() {
                continue;
            }
            let Some(value) = digits(header.value).filter(|value| *value <= u64::MAX - 2) else {
                return Err(Rejection::bad_header(
                    "content-length",
                    "Content-Length must be a decimal number of bytes",
                ));
            };
            match length {
                Some(previous) if previous != value => {
                    return Err(Rejection::bad_header(
                        "content-length",
                        "the request has two Content-Length headers that disagree",
                    ))
                }
                _ => length = Some(value),
            }
        }
    }
    match chunked {
        Some(true) => Ok(Framing::Chunked),
        Some(false) => Err(Rejection::bad_header("transfer-encoding", "Transfer-Encoding must end with chunked")),
        None => Ok(Framing::Length(length.unwrap_or(0))),
    }
}

/// hyper's rule: the last comma-separated coding is `chunked`.
fn ends_in_chunked(value: &[u8]) -> bool {
    let text = std::str::from_utf8(value).unwrap_or("");
    text.rsplit(',').next().is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
}

/// ASCII digits only (no sign, no spaces), as hyper parses `Content-Length`.
fn digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |acc, byte| {
        byte.is_ascii_digit().then_some(())?;
        acc.checked_mul(10)?.checked_add(u64::from(byte - b'0'))
    })
}

/// Where a chunked body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chunked {
    /// Expecting a chunk-size line.
    Size,
    /// Inside a chunk, this many bytes left.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
}

/// A chunked body this module cannot follow; hyper will refuse it and close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unframeable;

/// Follows a chunked body through `buf`; returns the bytes it consumed and whether the body
/// ended there.
pub(crate) fn advance_chunked(state: &mut Chunked, buf: &[u8]) -> Result<(usize, bool), Unframeable> {
    let mut at = 0;
    loop {
        let rest = &buf[at..];
        match *state {
            Chunked::Size => match httparse::parse_chunk_size(rest) {
                Ok(httparse::Status::Complete((used, size))) => {
                    at += used;
                    *state = if size == 0 { Chunked::Trailers } else { Chunked::Data(size) };
                }
                Ok(httparse::Status::Partial) if rest.len() <= MAX_CHUNK_LINE => return Ok((at, false)),
                _ => return Err(Unframeable),
            },
            Chunked::Data(left) => {
                if rest.is_empty() {
                    return Ok((at, false));
                }
                let take = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
                at += take;
                let left = left - take as u64;
                *state = if left == 0 { Chunked::DataEnd } else { Chunked::Data(left) };
            }
            Chunked::DataEnd => match rest {
                [b'\r', b'\n', ..] => {
                    at += 2;
                    *state = Chunked::Size;
                }
                [] | [b'\r'] => return Ok((at, false)),
                _ => return Err(Unframeable),
            },
            Chunked::Trailers => match rest.iter().position(|byte| *byte == b'\n') {
                Some(end) => {
                    at += end + 1;
                    if end == 0 || (end == 1 && rest[0] == b'\r') {
                        return Ok((at, true));
                    }
                }
                None if rest.len() <= MAX_CHUNK_LINE => return Ok((at, false)),
                None => return Err(Unframeable),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_complete_head_gives_its_length_and_framing() {
        let head = b"POST /v1/runs HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(check(head), Head::Complete { len: head.len() - 2, framing: Framing::Length(2) });
        let head = b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert_eq!(check(head), Head::Complete { len: head.len(), framing: Framing::Chunked });
        assert_eq!(check(b"GET / HTTP/1.1\r\nHost: x\r\n"), Head::Partial);
    }

    #[test]
    fn refusals_name_the_part() {
        let part = |bytes: &[u8]| match check(bytes) {
            Head::Rejected(rejection) => (rejection.status.as_u16(), rejection.details["part"].clone()),
            other => panic!("{other:?}"),
        };
        assert_eq!(part(b"GET /\xff HTTP/1.1\r\n\r\n"), (400, json!("request-target")));
        assert_eq!(part(b"GET / HTTP/1.1\r\nA: \0\r\n\r\n"), (400, json!("header")));
        assert_eq!(part(b"GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), (400, json!("header")));
        assert_eq!(part(b"GET / HTTP/1.1\r\nContent-Length: +1\r\n\r\n"), (400, json!("header")));
        assert_eq!(part(b"GET / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"), (400, json!("header")));
        assert_eq!(part(b"GET / HTTP/2.0\r\n\r\n"), (400, json!("request-line")));
        assert_eq!(part(&[b'G'; MAX_TARGET_BYTES + 64]), (414, json!("request-target")));
    }

    #[test]
    fn chunked_bodies_are_followed_across_reads() {
        let body = b"5\r\nhello\r\n1a;x=y\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nT: v\r\n\r\nGET";
        let mut state = Chunked::Size;
        let mut at = 0;
        for end in [4, 10, 11, 20, 60, body.len()] {
            let (used, done) = advance_chunked(&mut state, &body[at..end.min(body.len())]).unwrap();
            at += used;
            if done {
                break;
            }
        }
        assert_eq!(&body[at..], b"GET");
        assert_eq!(advance_chunked(&mut Chunked::DataEnd, b"xx"), Err(Unframeable));
    }
}
