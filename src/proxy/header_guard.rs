//! The request header, read before Pingora parses it: one deadline for the whole header, a size
//! cap, and framing checks, each refused with a JSON error and a closed connection.
//!
//! Pingora 0.9.1 reads the request header itself, before any `ProxyHttp` hook runs, with only a
//! per-read timeout (a client dripping a byte every few seconds never trips it), a 1 MB size
//! cap, an empty-bodied 400 for what it cannot parse, and it quietly accepts a request carrying
//! both `Content-Length` and `Transfer-Encoding`. So this [`ServerApp`] sits in front of
//! Pingora's HTTP/1.1 handling: for each request on a connection it reads bytes until the end
//! of the header within `routing.header_timeout_secs`, checks them, and hands them to Pingora
//! as an already-received prefix (`set_pipelined_prefix`), which Pingora parses without reading
//! again. Everything after that — keep-alive, bodies, the proxy hooks — is Pingora's own code.
//!
//! Shutdown follows Pingora's order: a connection idle between requests is closed when the app
//! is cleaned up (which the drain in `lifecycle::drain` delays until in-flight
//! connections had their chance), not the moment the shutdown signal flips; a header already
//! arriving is read to its end (its deadline bounds it), so a request racing the shutdown is
//! still served.

use crate::api::ApiError;
use async_trait::async_trait;
use bytes::BytesMut;
use pingora_core::apps::{HttpServerApp, ServerApp};
use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::Stream;
use pingora_core::server::ShutdownWatch;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, Sleep};

/// Largest request header accepted, in bytes (request line and all header lines).
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Most header lines accepted (Pingora's own limit).
pub const MAX_HEADERS: usize = 256;
/// How long an idle keep-alive connection waits for its next request (Pingora's default).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);

/// Wraps Pingora's HTTP app `A` with the header deadline and checks.
pub struct HeaderGuard<A> {
    inner: Arc<A>,
    timeout: Duration,
    /// Flips to `true` in `cleanup`: connections idle between requests close then.
    closing: tokio::sync::watch::Sender<bool>,
}

impl<A> HeaderGuard<A> {
    /// Guards `inner`, allowing `timeout` to receive each request header.
    pub fn new(inner: A, timeout: Duration) -> Self {
        HeaderGuard {
            inner: Arc::new(inner),
            timeout,
            closing: tokio::sync::watch::Sender::new(false),
        }
    }
}

/// What reading one request header came to.
#[derive(Debug)]
enum Head {
    /// A complete, acceptable header (possibly followed by body bytes already read), and where
    /// the request ends in those bytes, when its framing says.
    Ready(BytesMut, Option<usize>),
    /// The client closed, went idle between requests, or the server is shutting down.
    Gone,
    /// Refused: answer this and close.
    Refused(ApiError),
}

#[async_trait]
impl<A> ServerApp for HeaderGuard<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        // HTTP/2 (ALPN `h2` on the TLS listener) is framed, not an HTTP/1.1 header to guard:
        // Pingora's own HTTP/2 handling serves it, with its own header limits.
        if stream.selected_alpn_proto() == Some(pingora_core::protocols::ALPN::H2) {
            return ServerApp::process_new(&self.inner, stream, shutdown).await;
        }
        let mut settings = None;
        let mut fresh = true;
        // Bytes received after the previous request: the start of a pipelined next one.
        let mut carried = BytesMut::new();
        let mut closing = self.closing.subscribe();
        // The keep-alive idle timer, one for the connection's life (see `idle_for`).
        let mut idle = std::pin::pin!(tokio::time::sleep(KEEPALIVE_IDLE));
        loop {
            let waits = Waits {
                idle: idle.as_mut(),
                closing: &mut closing,
                header: self.timeout,
            };
            let head = read_head(&mut stream, carried, fresh, waits).await;
            let prefix = match head {
                Head::Ready(mut prefix, request_end) => {
                    carried = split_off_next(&mut prefix, request_end);
                    prefix
                }
                Head::Gone => return None,
                Head::Refused(err) => {
                    log::debug!("refused a request header: {}", err.message);
                    refuse(stream, &err).await;
                    return None;
                }
            };
            let mut session = ServerSession::new_http1(stream);
            match settings.take() {
                Some(settings) => {
                    pingora_core::apps::HttpPersistentSettings::apply_to_session(
                        settings,
                        &mut session,
                    );
                }
                None => {
                    // What Pingora does for a new HTTP/1.1 connection.
                    let keepalive = (!*shutdown.borrow()).then_some(KEEPALIVE_IDLE.as_secs());
                    session.set_keepalive(keepalive);
                    session.set_keepalive_reuses_remaining(
                        self.inner
                            .server_options()
                            .and_then(|o| o.keepalive_request_limit),
                    );
                }
            }
            session.set_pipelined_prefix(prefix);
            let reused = self.inner.process_new_http(session, shutdown).await?;
            let (next, next_settings) = reused.consume();
            stream = next;
            settings = next_settings;
            fresh = false;
        }
    }

    async fn cleanup(&self) {
        self.closing.send_replace(true);
        self.inner.http_cleanup().await;
    }
}

/// Answers a request whose body has no length (`Transfer-Encoding`) with `Connection: close`.
/// Pingora reads such a body in blocks that can run past its end into a pipelined next request;
/// with its pipelining mode off it would then drop those bytes and the connection after a
/// keep-alive answer, and this guard cannot split them off beforehand as it does for a
/// `Content-Length` body (`split_off_next`).
pub fn close_after_unsized_body(session: &mut pingora_proxy::Session) {
    if session
        .req_header()
        .headers
        .contains_key(http::header::TRANSFER_ENCODING)
    {
        session.set_keepalive(None);
    }
}

/// Splits what follows the request's end (a pipelined next request) off `received`, so that
/// Pingora is handed exactly one request and never reads past its body. Pingora caps its own
/// reads of a `Content-Length` body at what is left of it; bytes it held past a body would be
/// dropped with the connection after a keep-alive answer (with its pipelining mode off), and
/// with that mode on they would be parsed inside Pingora, unchecked by this guard.
fn split_off_next(received: &mut BytesMut, request_end: Option<usize>) -> BytesMut {
    match request_end {
        Some(end) if end < received.len() => received.split_off(end),
        _ => BytesMut::new(),
    }
}

/// What a connection's wait for a request header is bounded by.
struct Waits<'a> {
    /// The connection's keep-alive idle timer (see [`idle_for`]).
    idle: Pin<&'a mut Sleep>,
    /// Flips to `true` when the server shuts down.
    closing: &'a mut tokio::sync::watch::Receiver<bool>,
    /// Time allowed to receive a header from its first byte (`routing.header_timeout_secs`).
    header: Duration,
}

/// Reads one request header, starting from `carried` (bytes of it already received). On a
/// reused connection with nothing carried, the wait for its first byte is the keep-alive idle
/// time (silently closed when it passes, or when `closing` flips); the header deadline runs
/// from that first byte, or from the accept on a new connection.
async fn read_head(stream: &mut Stream, carried: BytesMut, fresh: bool, waits: Waits<'_>) -> Head {
    let timeout = waits.header;
    let mut buf = carried;
    if !fresh && buf.is_empty() {
        // An idle keep-alive connection holds no read buffer while it waits for its next
        // request (see `read_when_ready`).
        let idle_until = Instant::now() + KEEPALIVE_IDLE;
        let first = tokio::select! {
            biased;
            r = read_when_ready(stream) => r,
            () = idle_for(waits.idle, idle_until) => return Head::Gone,
            _ = waits.closing.wait_for(|c| *c) => return Head::Gone,
        };
        match first {
            Ok(received) if !received.is_empty() => buf = received,
            _ => return Head::Gone,
        }
    } else {
        buf.reserve(HEAD_CHUNK);
    }
    let deadline = Instant::now() + timeout;
    loop {
        match examine(&buf) {
            Examined::Complete(framing) => return Head::Ready(buf, framing.request_end()),
            Examined::Refuse(err) => return Head::Refused(err),
            Examined::Partial => {}
        }
        if buf.len() > MAX_HEADER_BYTES {
            let detail = format!("more than {MAX_HEADER_BYTES} bytes");
            return Head::Refused(ApiError::headers_too_large(&detail));
        }
        buf.reserve(HEAD_CHUNK);
        let read = tokio::time::timeout_at(deadline, stream.read_buf(&mut buf)).await;
        match read {
            Err(_elapsed) => return Head::Refused(ApiError::request_timeout("header", timeout)),
            Ok(Ok(0)) | Ok(Err(_)) => return Head::Gone,
            Ok(Ok(_)) => {}
        }
    }
}

/// How many bytes each read of a request header makes room for.
const HEAD_CHUNK: usize = 4096;

/// Reads what the client sends next into a new buffer of [`HEAD_CHUNK`] bytes, without holding
/// a buffer while nothing has arrived: each poll takes one and releases it when the read is
/// pending (no system call is made then: the socket is not yet readable). The bytes are read
/// by the call that finds them, one system call per request as in Pingora's own read of a
/// keep-alive connection, where a peek before the read would take two.
fn read_when_ready(stream: &mut Stream) -> impl Future<Output = std::io::Result<BytesMut>> + '_ {
    std::future::poll_fn(move |cx| {
        let mut buf = BytesMut::with_capacity(HEAD_CHUNK);
        let polled = std::pin::pin!(stream.read_buf(&mut buf)).poll(cx);
        polled.map(|read| read.map(|_| buf))
    })
}

/// Waits until `until` on `timer`, which a connection keeps for its life: the timer is moved
/// only when it fires before `until` (a connection that was busy for longer than the idle time
/// since the timer was set), so a keep-alive request neither registers nor cancels a timer of
/// its own. `until` never moves back: each wait's idle time starts after the previous one's.
async fn idle_for(mut timer: Pin<&mut Sleep>, until: Instant) {
    loop {
        timer.as_mut().await;
        if timer.deadline() >= until {
            return;
        }
        timer.as_mut().reset(until);
    }
}

/// The verdict on the bytes received so far.
#[derive(Debug)]
enum Examined {
    /// The header is complete and acceptable.
    Complete(Framing),
    /// More bytes are needed.
    Partial,
    /// The header is unacceptable.
    Refuse(ApiError),
}

/// Parses what has arrived the way Pingora will (httparse, default settings) and applies
/// sturnus's stricter rules.
fn examine(buf: &[u8]) -> Examined {
    let parsed = parse(buf);
    match parsed.0 {
        // An illegal character in the request target: Pingora percent-escapes it and parses
        // again, so judge the escaped form (Pingora is then handed the original bytes).
        Err(httparse::Error::Token | httparse::Error::Version) => {
            if !buf.contains(&b'\n') {
                return Examined::Partial;
            }
            match escape_request_target(buf) {
                Some(escaped) => match parse(&escaped) {
                    (Err(httparse::Error::Token | httparse::Error::Version), _) => {
                        Examined::Refuse(ApiError::malformed_http("invalid request line"))
                    }
                    other => verdict(other).unescaped(escaped.len() - buf.len()),
                },
                None => Examined::Refuse(ApiError::malformed_http("invalid request line")),
            }
        }
        _ => verdict(parsed),
    }
}

/// Header lines a request usually fits in: parsed with a small array first, since the full
/// one (8 KiB) would be initialised for every request.
const USUAL_HEADERS: usize = 32;

/// What httparse made of the bytes, and how the request's body is framed.
type Parsed = (httparse::Result<usize>, BodyFraming);

/// How a request's body is delimited, as its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyFraming {
    /// `Content-Length: n` (every such header agreeing), or no body at all (`n` = 0).
    Length(u64),
    /// `Transfer-Encoding` (a chunked body), or a `Content-Length` that is not one number.
    Unsized,
    /// Both `Content-Length` and `Transfer-Encoding`: refused.
    Both,
}

/// A complete header: where it ends in the received bytes, and how its body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Framing {
    header_end: usize,
    body: BodyFraming,
}

impl Framing {
    /// Where the request ends in the received bytes, when its body has a length.
    fn request_end(self) -> Option<usize> {
        match self.body {
            BodyFraming::Length(n) => usize::try_from(n).ok()?.checked_add(self.header_end),
            BodyFraming::Unsized | BodyFraming::Both => None,
        }
    }
}

impl Examined {
    /// The verdict on the original bytes, for a verdict reached on a copy whose request line
    /// was `grown` bytes longer (escaped).
    fn unescaped(self, grown: usize) -> Examined {
        match self {
            Examined::Complete(f) => Examined::Complete(Framing {
                header_end: f.header_end - grown,
                ..f
            }),
            other => other,
        }
    }
}

/// Runs httparse over `buf` the way Pingora does (default settings, Pingora's header count).
fn parse(buf: &[u8]) -> Parsed {
    let mut usual = [httparse::EMPTY_HEADER; USUAL_HEADERS];
    let mut req = httparse::Request::new(&mut usual);
    match req.parse(buf) {
        Err(httparse::Error::TooManyHeaders) => {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut req = httparse::Request::new(&mut headers);
            let result = req.parse(buf);
            (result, body_framing(req.headers))
        }
        other => (other, body_framing(req.headers)),
    }
}

/// How the parsed header lines frame the body (names compared case-insensitively).
fn body_framing(headers: &[httparse::Header]) -> BodyFraming {
    let named = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
    };
    let chunked = named("transfer-encoding").next().is_some();
    let mut lengths = named("content-length").map(|h| {
        std::str::from_utf8(h.value)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    });
    let first = lengths.next();
    match (chunked, first) {
        (true, Some(_)) => BodyFraming::Both,
        (true, None) => BodyFraming::Unsized,
        (false, None) => BodyFraming::Length(0),
        (false, Some(Some(n))) if lengths.all(|l| l == Some(n)) => BodyFraming::Length(n),
        (false, Some(_)) => BodyFraming::Unsized,
    }
}

/// The verdict for one parse of a header.
fn verdict((parsed, body): Parsed) -> Examined {
    let end = match parsed {
        Ok(httparse::Status::Complete(end)) => end,
        Ok(httparse::Status::Partial) => return Examined::Partial,
        Err(httparse::Error::TooManyHeaders) => {
            let detail = format!("more than {MAX_HEADERS} header lines");
            return Examined::Refuse(ApiError::headers_too_large(&detail));
        }
        Err(e) => return Examined::Refuse(ApiError::malformed_http(&e.to_string())),
    };
    if end > MAX_HEADER_BYTES {
        let detail = format!("more than {MAX_HEADER_BYTES} bytes");
        return Examined::Refuse(ApiError::headers_too_large(&detail));
    }
    if body == BodyFraming::Both {
        return Examined::Refuse(ApiError::malformed_http(
            "both Content-Length and Transfer-Encoding are present",
        ));
    }
    Examined::Complete(Framing {
        header_end: end,
        body,
    })
}

/// Pingora's rescue of a request line with illegal target bytes: when the line reads
/// `WORD SP target SP HTTP/digit`, the target's controls, spaces, `<`, `>` and `"` are
/// percent-escaped. `None` when the first line does not have that shape.
fn escape_request_target(buf: &[u8]) -> Option<Vec<u8>> {
    let line_end = buf.iter().position(|b| *b == b'\n')?;
    let line = &buf[..line_end];
    let method_end = line.iter().position(|b| *b == b' ')?;
    let word = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    if method_end == 0 || !line[..method_end].iter().all(word) {
        return None;
    }
    let rest = &line[method_end + 1..];
    let version = rest.windows(6).rposition(|w| w == b" HTTP/")?;
    if version == 0 || !rest.get(version + 6).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let mut out = Vec::with_capacity(buf.len() + 32);
    out.extend_from_slice(&buf[..=method_end]);
    for &b in &rest[..version] {
        if b < 0x20 || b == 0x7f || matches!(b, b' ' | b'<' | b'>' | b'"') {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        } else {
            out.push(b);
        }
    }
    out.extend_from_slice(&rest[version..]);
    out.extend_from_slice(&buf[line_end..]);
    Some(out)
}

/// Writes `err` as a complete HTTP/1.1 answer with `Connection: close`, then drains what the
/// client still sends for a moment before closing, so it reads the answer rather than a reset.
async fn refuse(mut stream: Stream, err: &ApiError) {
    let body = err.to_json();
    let reason = http::StatusCode::from_u16(err.status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    let mut out = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        err.status,
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    if stream.write_all(&out).await.is_err() || stream.flush().await.is_err() {
        return;
    }
    let _ = AsyncWriteExt::shutdown(&mut stream).await;
    let mut sink = vec![0u8; 16 * 1024];
    let _ = tokio::time::timeout(crate::api::respond::REFUSAL_DRAIN, async {
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair: the proxy's side as Pingora's stream, and the client's socket.
    async fn connection() -> (Stream, tokio::net::TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let stream = pingora_core::protocols::l4::stream::Stream::from(accepted);
        (Box::new(stream), client)
    }

    #[tokio::test]
    async fn the_idle_timer_fires_only_once_the_latest_wait_has_lasted_its_whole_time() {
        let now = Instant::now();
        // Set for an earlier wait that has passed; this wait's end has passed too: moved, done.
        let mut timer = std::pin::pin!(tokio::time::sleep_until(now - Duration::from_secs(2)));
        idle_for(timer.as_mut(), now - Duration::from_secs(1)).await;
        assert_eq!(timer.deadline(), now - Duration::from_secs(1));
        // This wait's end is still ahead: the timer is moved to it and the wait goes on.
        let until = now + KEEPALIVE_IDLE;
        let pending = std::future::poll_fn(|cx| {
            let mut wait = std::pin::pin!(idle_for(timer.as_mut(), until));
            std::task::Poll::Ready(wait.as_mut().poll(cx).is_pending())
        });
        assert!(pending.await);
        assert_eq!(timer.deadline(), until);
    }

    #[tokio::test]
    async fn an_idle_connection_is_pending_until_its_next_request_which_one_read_takes_whole() {
        let (mut stream, mut client) = connection().await;
        let waiting = std::future::poll_fn(|cx| {
            let mut read = std::pin::pin!(read_when_ready(&mut stream));
            std::task::Poll::Ready(read.as_mut().poll(cx).is_pending())
        });
        assert!(waiting.await, "nothing was sent yet");
        let request = b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
        client.write_all(request).await.unwrap();
        let received = read_when_ready(&mut stream).await.unwrap();
        assert_eq!(&received[..], &request[..]);
        assert!(received.capacity() >= HEAD_CHUNK);
        drop(client);
        let closed = read_when_ready(&mut stream).await.unwrap();
        assert!(closed.is_empty(), "a closed client reads as nothing");
    }

    fn check(text: &[u8]) -> Result<bool, u16> {
        match examine(text) {
            Examined::Complete(_) => Ok(true),
            Examined::Partial => Ok(false),
            Examined::Refuse(e) => Err(e.status),
        }
    }

    #[test]
    fn complete_partial_and_with_body_bytes() {
        assert_eq!(
            check(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(true)
        );
        assert_eq!(
            check(b"POST /v1/chat/completions HTTP/1.1\r\nHo"),
            Ok(false)
        );
        assert_eq!(check(b""), Ok(false));
        assert_eq!(
            check(b"POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"),
            Ok(true)
        );
    }

    fn framing(text: &[u8]) -> Framing {
        match examine(text) {
            Examined::Complete(f) => f,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_end_of_a_request_is_found_so_a_pipelined_next_one_is_split_off() {
        let first = b"POST /v1/embeddings HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
        let second = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        let mut received = BytesMut::from(&[&first[..], &second[..]].concat()[..]);
        let end = framing(&received).request_end();
        assert_eq!(end, Some(first.len()));
        let next = split_off_next(&mut received, end);
        assert_eq!((&received[..], &next[..]), (&first[..], &second[..]));
        assert_eq!(framing(&next).request_end(), Some(second.len()));
        // A body not yet complete: nothing to split off.
        let mut partial = BytesMut::from(&first[..first.len() - 1]);
        assert!(split_off_next(&mut partial, end).is_empty());
        // An escaped request line still ends where the original bytes say.
        let odd = b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_eq!(framing(odd).request_end(), Some(odd.len()));
    }

    #[test]
    fn bodies_without_one_length_have_no_known_end() {
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(framing(chunked).body, BodyFraming::Unsized);
        assert_eq!(framing(chunked).request_end(), None);
        let disagree = b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(framing(disagree).request_end(), None);
        let agree = b"POST / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\n";
        assert_eq!(framing(agree).body, BodyFraming::Length(2));
        let none = b"GET / HTTP/1.1\r\n\r\n";
        assert_eq!(framing(none).body, BodyFraming::Length(0));
    }

    #[test]
    fn conflicting_framing_is_refused_in_any_case_and_spacing() {
        for text in [
            &b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\nCONTENT-LENGTH: 5\r\n\r\n",
        ] {
            assert_eq!(check(text), Err(400), "{}", String::from_utf8_lossy(text));
        }
        // A field that merely starts with the name is something else.
        assert_eq!(
            check(b"POST / HTTP/1.1\r\nContent-Length-X: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Ok(true)
        );
    }

    #[test]
    fn garbage_is_malformed_and_too_many_headers_is_431() {
        assert_eq!(check(b"\x00\x01\x02 nonsense\r\n\r\n"), Err(400));
        assert_eq!(check(b"POST / HTTP/1.1\r\nBad Header\r\n\r\n"), Err(400));
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("x-{i}: v\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(check(&many), Err(431));
        let big = format!(
            "GET / HTTP/1.1\r\nx: {}\r\n\r\n",
            "a".repeat(MAX_HEADER_BYTES)
        );
        assert_eq!(check(big.as_bytes()), Err(431));
    }

    #[test]
    fn illegal_request_targets_are_judged_as_pingora_escapes_them() {
        assert_eq!(check(b"GET /a b\"c HTTP/1.1\r\nHost: x\r\n"), Ok(false));
        assert_eq!(
            check(b"GET /a b\"c<> HTTP/1.1\r\nHost: x\r\n\r\n"),
            Ok(true)
        );
        assert_eq!(check(b"GET /a HTTX/1.1\r\nHost: x\r\n\r\n"), Err(400));
        assert_eq!(
            escape_request_target(b"GET /a b\"c HTTP/1.1\r\n").unwrap(),
            b"GET /a%20b%22c HTTP/1.1\r\n".to_vec()
        );
        assert_eq!(escape_request_target(b"\x00\x01 x HTTP/1.1\r\n"), None);
        assert_eq!(escape_request_target(b"GET /x\r\n"), None);
    }
}
