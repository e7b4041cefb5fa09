//! One accepted connection: reading HTTP/1.1 requests, answering them in OpenAI's formats,
//! and misbehaving as the current [`Fault`] says.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes, BytesMut};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::behaviour::Fault;
use super::chunked::{ChunkedDecoder, ChunkedError};
use super::http::{parse_head, BodyFraming, HeadError, Operation, RequestHead, MAX_BODY_BYTES};
use super::kept::{Rendered, Reply};
use super::quota::Verdict;
use super::responses::{
    push_chat_body, push_completion_body, push_embedding_body, push_error_body, push_json_head,
    push_json_response, push_response_object, push_stream_head, sane_status, Conn, Ctx,
};
use super::server::Shared;
use super::stream::{push_http_chunk, StreamApi, StreamPlan};

/// The renderings a new Responses API answer is kept with: its stream's events, and the
/// response object completed (as the stream ends it when `streamed`), running and cancelled.
fn render_kept(plan: &StreamPlan<'_>, streamed: bool) -> Rendered {
    let events: Vec<Vec<u8>> = (0..plan.len())
        .map(|i| {
            let mut event = Vec::new();
            plan.push_event(i, &mut event);
            event
        })
        .collect();
    let object = |status: &str, text: Option<&str>| {
        let mut out = Vec::new();
        push_response_object(&mut out, &plan.ctx, status, text);
        out
    };
    let completed = match events.last().filter(|_| streamed) {
        Some(last) => completed_of(last),
        None => object("completed", Some(plan.ctx.content)),
    };
    Rendered {
        completed,
        running: object("in_progress", None),
        cancelled: object("cancelled", None),
        events,
    }
}

/// The response object a `response.completed` event carries.
fn completed_of(event: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(event);
    let data = text
        .lines()
        .find_map(|line| line.strip_prefix("data: "))
        .unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(data)
        .ok()
        .and_then(|v| serde_json::to_vec(&v["response"]).ok())
        .unwrap_or_default()
}

/// What `Fault::Garbage` writes.
const GARBAGE: &[u8] = b"\x00\xffSIMULATED GARBAGE \x1b[0m not http at all\r\n\r\n\x7f";
/// What `Fault::CloseDuringHeaders` writes before closing.
const HALF_STATUS_LINE: &[u8] = b"HTTP/1.1 20";
/// Size of one write of a huge or endless answer.
const BLOCK: usize = 64 * 1024;
/// The header a 429 answer adds.
const RETRY_AFTER: &[u8] = b"retry-after: 1\r\n";
/// How long a graceful close waits for the peer to finish sending.
const CLOSE_WAIT: Duration = Duration::from_millis(500);

/// How a request left the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// Ready for the next request.
    KeepAlive,
    /// Close after the response: send FIN, then drain briefly so the peer reads the response.
    Close,
    /// Drop the socket now (peer gone, or a fault that closes without a word).
    Abort,
    /// Reset the connection (RST).
    Reset,
}

/// Serves requests on `stream` until the peer leaves, a request asks to close, or a fault ends it.
pub(crate) async fn serve_until_done(stream: TcpStream, shared: &Shared) {
    let mut conn = Connection {
        stream,
        buf: BytesMut::with_capacity(8 * 1024),
        out: Vec::with_capacity(4 * 1024),
        scratch: Vec::with_capacity(4 * 1024),
        headers: Vec::with_capacity(256),
        shared,
    };
    match conn.run().await {
        Flow::KeepAlive | Flow::Abort => {}
        Flow::Close => conn.close_gracefully().await,
        Flow::Reset => {
            let _ = conn.stream.set_zero_linger();
        }
    }
}

/// Why reading a request stopped.
#[derive(Debug)]
enum ReadError {
    /// The peer vanished or sent a truncated request: just drop the connection.
    Io,
    /// The request is unacceptable: answer with this status and message, then close.
    Reject(u16, &'static str),
}

impl From<HeadError> for ReadError {
    fn from(e: HeadError) -> ReadError {
        ReadError::Reject(e.status(), e.message())
    }
}

/// The parts of a JSON request body the simulator looks at.
#[derive(Debug, Deserialize)]
struct Probe<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
}

/// `stream_options` of a chat or completions request.
#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// One accepted connection with its reusable buffers.
struct Connection<'s> {
    stream: TcpStream,
    /// Bytes read but not yet consumed (may hold a pipelined next request).
    buf: BytesMut,
    /// The bytes of the next write.
    out: Vec<u8>,
    /// Room to render a body or event before framing it into `out`.
    scratch: Vec<u8>,
    /// The current request's extra response headers (`x-sim-provider` and any set by a test).
    headers: Vec<u8>,
    shared: &'s Shared,
}

impl Connection<'_> {
    async fn run(&mut self) -> Flow {
        let mut answered = 0u64;
        loop {
            let (head, body) = match self.read_request().await {
                Ok(Some(req)) => req,
                Ok(None) | Err(ReadError::Io) => return Flow::Abort,
                Err(ReadError::Reject(status, message)) => {
                    self.refresh_headers();
                    let conn = Conn {
                        version: 1,
                        keep_alive: false,
                    };
                    return self.send_error(status, message, conn).await;
                }
            };
            let flow = self.handle(head, body, answered).await;
            answered += 1;
            if flow != Flow::KeepAlive {
                return flow;
            }
        }
    }

    /// Reads more bytes into `buf`; `Ok(0)` at end of stream.
    async fn fill(&mut self) -> Result<usize, ReadError> {
        let spare = self.buf.capacity() - self.buf.len();
        if spare < 4096 {
            self.buf.reserve(self.buf.len().max(8 * 1024));
        }
        self.stream
            .read_buf(&mut self.buf)
            .await
            .map_err(|_| ReadError::Io)
    }

    /// Reads one request (head and whole body); `Ok(None)` if the peer closed between requests.
    async fn read_request(&mut self) -> Result<Option<(RequestHead, Bytes)>, ReadError> {
        let (used, mut head) = loop {
            if !self.buf.is_empty() {
                // Read the switch per attempt: it may change while we wait for the head.
                let record = self.shared.recorder.enabled();
                if let Some(parsed) = parse_head(&self.buf, record)? {
                    break parsed;
                }
            }
            if self.fill().await? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(ReadError::Io)
                };
            }
        };
        self.buf.advance(used);

        let body_present = match head.framing {
            BodyFraming::Length(n) => self.buf.len() >= n,
            BodyFraming::Chunked => false,
        };
        if head.expect_continue && !body_present {
            self.out.clear();
            self.out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
            if !self.write_out().await {
                return Err(ReadError::Io);
            }
        }

        let body = match head.framing {
            BodyFraming::Length(n) => {
                while self.buf.len() < n {
                    self.buf.reserve(n - self.buf.len());
                    if self.fill().await? == 0 {
                        return Err(ReadError::Io);
                    }
                }
                self.buf.split_to(n).freeze()
            }
            BodyFraming::Chunked => {
                let mut decoder = ChunkedDecoder::new(MAX_BODY_BYTES);
                let mut body = Vec::new();
                loop {
                    let used = decoder.feed(&self.buf, &mut body).map_err(|e| match e {
                        ChunkedError::Malformed => {
                            ReadError::Reject(400, "malformed chunked request body")
                        }
                        ChunkedError::TooLarge => ReadError::Reject(413, "request body too large"),
                    })?;
                    self.buf.advance(used);
                    if decoder.is_done() {
                        break;
                    }
                    if self.fill().await? == 0 {
                        return Err(ReadError::Io);
                    }
                }
                Bytes::from(body)
            }
        };
        if let Some(mut rec) = head.record.take() {
            rec.body = body.to_vec();
            self.shared.recorder.push(rec);
        }
        Ok(Some((head, body)))
    }

    /// Answers one request according to the current behaviour (`reused`: an earlier request
    /// on this connection was answered).
    async fn handle(&mut self, head: RequestHead, body: Bytes, answered_before: u64) -> Flow {
        let reused = answered_before > 0;
        let shared = self.shared;
        let n = shared.count.fetch_add(1, Ordering::Relaxed) + 1;
        let behaviour = &*shared.behaviour;
        let fault = behaviour.fault();
        let conn = Conn {
            version: head.version,
            keep_alive: head.keep_alive,
        };
        match fault {
            Fault::RefuseConnections => return Flow::Abort,
            Fault::DropReused if reused => return Flow::Abort,
            Fault::NeverAnswer => {
                self.hold().await;
                return Flow::Abort;
            }
            _ => {}
        }
        if reused {
            shared.connections.reused(answered_before);
        }
        self.refresh_headers();
        if head.operation.is_api() && behaviour.take_quota(&mut self.headers) == Verdict::Refuse {
            return self
                .send_error_as_is(429, "Rate limit reached for requests", conn)
                .await;
        }
        let (latency, _in_progress) = behaviour.admit();
        if !latency.is_zero() && !self.pause(latency).await {
            return Flow::Abort;
        }
        match fault {
            Fault::CloseDuringHeaders => {
                self.out.clear();
                self.out.extend_from_slice(HALF_STATUS_LINE);
                return if self.write_out().await {
                    Flow::Close
                } else {
                    Flow::Abort
                };
            }
            Fault::Garbage => {
                self.out.clear();
                self.out.extend_from_slice(GARBAGE);
                return if self.write_out().await {
                    Flow::Close
                } else {
                    Flow::Abort
                };
            }
            Fault::Status(status) => {
                return self.send_error(status, "simulated failure", conn).await
            }
            Fault::HugeBody(len) => return self.send_huge(len, conn).await,
            Fault::EndlessStream => return self.send_endless(conn).await,
            _ => {}
        }
        if head.operation == Operation::Health {
            return self.send_health(conn).await;
        }
        if let Some(status) = behaviour.next_failure() {
            return self.send_error(status, "simulated failure", conn).await;
        }
        if let Some(object) = &head.object {
            let reply =
                shared
                    .kept
                    .answer(&object.method, &object.id, &object.action, &object.query);
            return self.send_reply(reply, conn).await;
        }
        if head.operation == Operation::NotFound || !head.is_post {
            let target = head.target.as_deref().unwrap_or("?");
            let (status, message) = if head.operation == Operation::NotFound {
                (404, format!("Invalid URL ({target})"))
            } else {
                (405, format!("Method not allowed ({target})"))
            };
            return self.send_error(status, &message, conn).await;
        }
        let probe: Probe = match serde_json::from_slice(&body) {
            Ok(p) => p,
            Err(_) => {
                let message = "We could not parse the JSON body of your request.";
                return self.send_error(400, message, conn).await;
            }
        };
        let model = probe
            .model
            .as_deref()
            .or(head.deployment.as_deref())
            .unwrap_or("unknown");
        let admitted = if head.operation == Operation::Responses {
            let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            match shared.kept.admit(&request, n) {
                Ok(admitted) => Some(admitted),
                Err(refusal) => return self.send_reply(Reply::Json(400, refusal), conn).await,
            }
        } else {
            None
        };
        let content = match &admitted {
            Some(a) if a.turn > 1 => Cow::Owned(format!("{}, turn {}", shared.content, a.turn)),
            _ => Cow::Borrowed(shared.content.as_str()),
        };
        let response_id = shared.kept.id(n);
        let ctx = Ctx {
            response_id: &response_id,
            n,
            created: unix_now(),
            model,
            content: &content,
            prompt_tokens: (body.len() as u64 / 4).max(1),
            cached_tokens: behaviour.cached_tokens(),
        };
        let pace = match fault {
            Fault::SlowDrip(d) => Some(d),
            _ => None,
        };
        let reset = fault == Fault::ResetMidStream;
        let api = match head.operation {
            Operation::Chat => Some(StreamApi::Chat),
            Operation::Completions => Some(StreamApi::Completions),
            Operation::Responses => Some(StreamApi::Responses),
            Operation::Embeddings
            | Operation::Health
            | Operation::NotFound
            | Operation::ResponseObject => None,
        };
        let streamed = probe.stream == Some(true);
        if let Some(admitted) = admitted {
            let plan = StreamPlan {
                api: StreamApi::Responses,
                ctx,
                chunks: behaviour.chunks(),
                include_usage: false,
            };
            let background = admitted.background;
            let rendered = render_kept(&plan, streamed);
            if background && !streamed {
                self.scratch.clear();
                push_response_object(&mut self.scratch, &ctx, "queued", None);
            } else if !streamed {
                self.scratch.clone_from(&rendered.completed);
            }
            shared.kept.keep(response_id.clone(), admitted, rendered);
            if !streamed {
                return self.send_json_body(conn, pace, reset).await;
            }
        }
        match api {
            Some(api) if streamed => {
                let plan = StreamPlan {
                    api,
                    ctx,
                    chunks: behaviour.chunks(),
                    include_usage: probe
                        .stream_options
                        .and_then(|o| o.include_usage)
                        .unwrap_or(false),
                };
                let interval = pace.unwrap_or_else(|| behaviour.chunk_interval());
                self.send_stream(&plan, conn, interval, pace.is_some(), reset)
                    .await
            }
            _ => {
                self.scratch.clear();
                match head.operation {
                    Operation::Completions => push_completion_body(&mut self.scratch, &ctx),
                    Operation::Embeddings => push_embedding_body(&mut self.scratch, &ctx),
                    Operation::Responses => push_response_object(
                        &mut self.scratch,
                        &ctx,
                        "completed",
                        Some(ctx.content),
                    ),
                    Operation::Chat
                    | Operation::Health
                    | Operation::NotFound
                    | Operation::ResponseObject => push_chat_body(&mut self.scratch, &ctx),
                }
                self.send_json_body(conn, pace, reset).await
            }
        }
    }

    /// Sends `scratch` as a 200 JSON response, possibly dripped or cut off by a reset.
    async fn send_json_body(&mut self, conn: Conn, pace: Option<Duration>, reset: bool) -> Flow {
        self.out.clear();
        let len = self.scratch.len();
        push_json_head(&mut self.out, 200, &self.headers, conn, len);
        if reset {
            self.out.extend_from_slice(&self.scratch[..len / 2]);
            return if self.write_out().await {
                Flow::Reset
            } else {
                Flow::Abort
            };
        }
        match pace {
            None => self.out.extend_from_slice(&self.scratch),
            Some(pace) => {
                if !self.write_out().await {
                    return Flow::Abort;
                }
                let pieces = self.shared.behaviour.chunks().max(1) as usize;
                let step = len.div_ceil(pieces).max(1);
                let mut start = 0;
                while start < len {
                    let end = (start + step).min(len);
                    if !self.pause(pace).await {
                        return Flow::Abort;
                    }
                    self.out.clear();
                    self.out.extend_from_slice(&self.scratch[start..end]);
                    if !self.write_out().await {
                        return Flow::Abort;
                    }
                    start = end;
                }
                return after(conn);
            }
        }
        if self.write_out().await {
            after(conn)
        } else {
            Flow::Abort
        }
    }

    /// Sends a streaming answer, one write per SSE event, `interval` apart.
    ///
    /// Each event is its own HTTP chunk and its own `write` (with `TCP_NODELAY`, its own
    /// segment), so a reader sees events arrive separately even with a zero interval.
    async fn send_stream(
        &mut self,
        plan: &StreamPlan<'_>,
        conn: Conn,
        interval: Duration,
        head_alone: bool,
        reset: bool,
    ) -> Flow {
        let chunked = conn.version >= 1;
        let conn = Conn {
            keep_alive: conn.keep_alive && chunked,
            ..conn
        };
        // The head goes out in the same write as the first event (one syscall less per stream);
        // a dripping provider sends it alone and pauses before every event.
        self.out.clear();
        push_stream_head(&mut self.out, &self.headers, conn);
        if head_alone && !self.write_out().await {
            return Flow::Abort;
        }
        let total = plan.len();
        let send = if reset { total.min(2) } else { total };
        for i in 0..send {
            if i > 0 || head_alone {
                if !interval.is_zero() && !self.pause(interval).await {
                    return Flow::Abort;
                }
                self.out.clear();
            }
            self.scratch.clear();
            plan.push_event(i, &mut self.scratch);
            if chunked {
                push_http_chunk(&mut self.out, &self.scratch);
                if i + 1 == total {
                    self.out.extend_from_slice(b"0\r\n\r\n");
                }
            } else {
                self.out.extend_from_slice(&self.scratch);
            }
            if !self.write_out().await {
                return Flow::Abort;
            }
        }
        if reset {
            Flow::Reset
        } else {
            after(conn)
        }
    }

    /// Sends an answer of the response store: a JSON body, or replayed SSE events.
    async fn send_reply(&mut self, reply: Reply, conn: Conn) -> Flow {
        self.out.clear();
        match reply {
            Reply::Json(status, body) => {
                push_json_response(&mut self.out, status, &self.headers, conn, &body);
            }
            Reply::Events(events) => {
                let chunked = conn.version >= 1;
                let conn = Conn {
                    keep_alive: conn.keep_alive && chunked,
                    ..conn
                };
                push_stream_head(&mut self.out, &self.headers, conn);
                for event in &events {
                    if chunked {
                        push_http_chunk(&mut self.out, event);
                    } else {
                        self.out.extend_from_slice(event);
                    }
                }
                if chunked {
                    self.out.extend_from_slice(b"0\r\n\r\n");
                }
                return if self.write_out().await {
                    after(conn)
                } else {
                    Flow::Abort
                };
            }
        }
        if self.write_out().await {
            after(conn)
        } else {
            Flow::Abort
        }
    }

    /// Sends a 200 JSON body of `len` bytes (`{`, spaces, `}`) in 64 KiB writes.
    async fn send_huge(&mut self, len: u64, conn: Conn) -> Flow {
        let len = len.max(2);
        self.out.clear();
        push_json_head(&mut self.out, 200, &self.headers, conn, len as usize);
        self.out.push(b'{');
        if !self.write_out().await {
            return Flow::Abort;
        }
        let mut left = len - 2;
        self.out.clear();
        self.out.resize(BLOCK, b' ');
        while left > 0 {
            let n = left.min(BLOCK as u64) as usize;
            if self.stream.write_all(&self.out[..n]).await.is_err() {
                return Flow::Abort;
            }
            left -= n as u64;
        }
        self.out.clear();
        self.out.push(b'}');
        if self.write_out().await {
            after(conn)
        } else {
            Flow::Abort
        }
    }

    /// Sends chat-completion SSE chunks (`tok0 `, `tok1 `, ...) until the peer goes away.
    async fn send_endless(&mut self, conn: Conn) -> Flow {
        self.out.clear();
        push_stream_head(
            &mut self.out,
            &self.headers,
            Conn {
                keep_alive: false,
                ..conn
            },
        );
        let mut i: u64 = 0;
        loop {
            while self.out.len() < BLOCK {
                self.scratch.clear();
                self.scratch.extend_from_slice(
                    b"data: {\"id\":\"chatcmpl-sim-endless\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok",
                );
                self.scratch.extend_from_slice(i.to_string().as_bytes());
                self.scratch
                    .extend_from_slice(b" \"},\"finish_reason\":null}]}\n\n");
                if conn.version >= 1 {
                    push_http_chunk(&mut self.out, &self.scratch);
                } else {
                    self.out.extend_from_slice(&self.scratch);
                }
                i += 1;
            }
            if !self.write_out().await {
                return Flow::Abort;
            }
            self.out.clear();
        }
    }

    /// Sends an OpenAI error response (a 429 with `retry-after: 1`).
    async fn send_error(&mut self, status: u16, message: &str, conn: Conn) -> Flow {
        if sane_status(status) == 429 {
            self.headers.extend_from_slice(RETRY_AFTER);
        }
        self.send_error_as_is(status, message, conn).await
    }

    /// Sends an OpenAI error response with the current headers only.
    async fn send_error_as_is(&mut self, status: u16, message: &str, conn: Conn) -> Flow {
        let status = sane_status(status);
        self.scratch.clear();
        push_error_body(&mut self.scratch, status, message);
        self.out.clear();
        push_json_response(&mut self.out, status, &self.headers, conn, &self.scratch);
        if self.write_out().await {
            after(conn)
        } else {
            Flow::Abort
        }
    }

    /// Answers the health endpoint: `{"status":"ok"}` with the configured status when it is
    /// 200, else an error body with that status.
    async fn send_health(&mut self, conn: Conn) -> Flow {
        let status = self.shared.behaviour.health_status();
        if status != 200 {
            return self.send_error(status, "simulated unhealthy", conn).await;
        }
        self.out.clear();
        let body = br#"{"status":"ok"}"#;
        push_json_response(&mut self.out, 200, &self.shared.provider_header, conn, body);
        if self.write_out().await {
            after(conn)
        } else {
            Flow::Abort
        }
    }

    /// Writes `out` in full; `false` if the peer is gone (counted as an answer it abandoned).
    async fn write_out(&mut self) -> bool {
        let written = self.stream.write_all(&self.out).await.is_ok();
        if !written {
            self.shared.connections.abandoned();
        }
        written
    }

    /// Waits `d` while watching the connection; `false` if the peer closed it meanwhile (the
    /// answer is abandoned). Bytes that arrive are kept for the next request.
    async fn pause(&mut self, d: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => return true,
                read = self.stream.read_buf(&mut self.buf) => {
                    if !matches!(read, Ok(n) if n > 0) {
                        self.shared.connections.abandoned();
                        return false;
                    }
                }
            }
        }
    }

    /// Takes this request's response headers: the provider's own plus any set by the test.
    fn refresh_headers(&mut self) {
        self.headers.clear();
        self.headers.extend_from_slice(&self.shared.provider_header);
        self.shared
            .connections
            .push_extra_headers(&mut self.headers);
    }

    /// Holds the connection silently until the peer closes it.
    async fn hold(&mut self) {
        let mut sink = [0u8; 4096];
        while let Ok(n) = self.stream.read(&mut sink).await {
            if n == 0 {
                return;
            }
        }
    }

    /// Sends FIN, then reads and discards until the peer closes (bounded), so a response
    /// followed by close is not turned into a reset by unread request bytes.
    async fn close_gracefully(&mut self) {
        let _ = self.stream.shutdown().await;
        let _ = tokio::time::timeout(CLOSE_WAIT, self.hold()).await;
    }
}

/// The flow after a complete response.
fn after(conn: Conn) -> Flow {
    if conn.keep_alive {
        Flow::KeepAlive
    } else {
        Flow::Close
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
