//! End-to-end tests of the fake provider through a tiny raw-TCP HTTP client.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use super::{FakeProvider, Fault};

/// Upper bound for any single wait in these tests.
const WAIT: Duration = Duration::from_secs(2);

/// A response as the raw client saw it.
#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Each HTTP chunk of a chunked body with the moment it was complete.
    chunks: Vec<(Instant, Vec<u8>)>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        super::header_value(&self.headers, name)
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }

    /// The JSON payloads of the `data:` lines, `[DONE]` as a string.
    fn events(&self) -> Vec<String> {
        String::from_utf8(self.body.clone())
            .expect("utf8")
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                e.lines()
                    .find_map(|l| l.strip_prefix("data: "))
                    .expect("data line")
                    .to_string()
            })
            .collect()
    }
}

/// A minimal HTTP/1.1 client over one TCP connection.
struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let stream = timeout(WAIT, TcpStream::connect(addr))
            .await
            .expect("connect in time")
            .expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Client {
            stream,
            buf: Vec::new(),
        }
    }

    /// Writes `raw`; a failed write (peer gone) shows up as a missing response instead.
    async fn send(&mut self, raw: &[u8]) {
        let _ = self.stream.write_all(raw).await;
    }

    /// Reads more bytes; 0 at end of stream (errors such as resets count as end too).
    async fn fill(&mut self) -> usize {
        let mut tmp = vec![0u8; 64 * 1024];
        match timeout(WAIT, self.stream.read(&mut tmp)).await {
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&tmp[..n]);
                n
            }
            Ok(Err(_)) => 0,
            Err(_) => panic!("read timed out"),
        }
    }

    /// Reads everything until the peer closes.
    async fn read_to_end(&mut self) -> Vec<u8> {
        while self.fill().await > 0 {}
        std::mem::take(&mut self.buf)
    }

    /// Reads one complete response; `None` if the connection ends before it is complete.
    async fn response(&mut self) -> Option<Response> {
        loop {
            let (used, status, headers) = loop {
                let mut hs = [httparse::EMPTY_HEADER; 64];
                let mut resp = httparse::Response::new(&mut hs);
                if let Ok(httparse::Status::Complete(used)) = resp.parse(&self.buf) {
                    let headers = resp
                        .headers
                        .iter()
                        .map(|h| {
                            let value = String::from_utf8_lossy(h.value).into_owned();
                            (h.name.to_ascii_lowercase(), value)
                        })
                        .collect::<Vec<_>>();
                    break (used, resp.code.expect("status"), headers);
                }
                if self.fill().await == 0 {
                    return None;
                }
            };
            self.buf.drain(..used);
            if status == 100 {
                continue;
            }
            let mut r = Response {
                status,
                headers,
                body: Vec::new(),
                chunks: Vec::new(),
            };
            if r.header("transfer-encoding") == Some("chunked") {
                loop {
                    let (size_len, size) = loop {
                        if let Ok(httparse::Status::Complete(x)) =
                            httparse::parse_chunk_size(&self.buf)
                        {
                            break x;
                        }
                        if self.fill().await == 0 {
                            return None;
                        }
                    };
                    let size = usize::try_from(size).expect("size");
                    while self.buf.len() < size_len + size + 2 {
                        if self.fill().await == 0 {
                            return None;
                        }
                    }
                    let data = self.buf[size_len..size_len + size].to_vec();
                    self.buf.drain(..size_len + size + 2);
                    if size == 0 {
                        return Some(r);
                    }
                    r.body.extend_from_slice(&data);
                    r.chunks.push((Instant::now(), data));
                }
            } else if let Some(len) = r.header("content-length") {
                let len: usize = len.parse().expect("content-length");
                while self.buf.len() < len {
                    if self.fill().await == 0 {
                        return None;
                    }
                }
                r.body = self.buf.drain(..len).collect();
                return Some(r);
            } else {
                r.body = self.read_to_end().await;
                return Some(r);
            }
        }
    }

    async fn request(&mut self, raw: &[u8]) -> Response {
        self.send(raw).await;
        self.response().await.expect("complete response")
    }

    /// A plain chat completion request ([`CHAT`]) and its response.
    async fn chat(&mut self) -> Response {
        self.request(&post("/v1/chat/completions", CHAT, "")).await
    }
}

/// A provider with `fault` set, and a client that has sent it a chat request.
async fn chat_sent_with(fault: Fault) -> (FakeProvider, Client) {
    let p = start("f").await;
    p.behaviour.set_fault(fault);
    let mut c = Client::connect(p.addr).await;
    c.send(&post("/v1/chat/completions", CHAT, "")).await;
    (p, c)
}

/// A POST with a Content-Length body and extra header lines (each ending in CRLF).
fn post(path: &str, body: &str, extra: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const CHAT: &str = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;
const CHAT_STREAM: &str =
    r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

async fn start(name: &str) -> FakeProvider {
    FakeProvider::start(name).await.expect("start")
}

#[tokio::test]
async fn non_streaming_chat_has_openai_shape() {
    let p = start("fast").await;
    let mut c = Client::connect(p.addr).await;
    let r = c.chat().await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("x-sim-provider"), Some("fast"));
    let v = r.json();
    assert_eq!(v["id"], "chatcmpl-sim-1");
    assert_eq!(v["object"], "chat.completion");
    assert!(v["created"].as_u64().expect("created") > 1_600_000_000);
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from fast");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let usage = &v["usage"];
    let prompt = usage["prompt_tokens"].as_u64().expect("prompt");
    let completion = usage["completion_tokens"].as_u64().expect("completion");
    assert!(prompt > 0 && completion > 0);
    assert_eq!(usage["total_tokens"].as_u64(), Some(prompt + completion));
    assert_eq!(p.request_count(), 1);
}

#[tokio::test]
async fn streaming_events_arrive_separately_and_end_with_done() {
    let p = start("slow").await;
    let interval = Duration::from_millis(40);
    p.behaviour.set_chunk_interval(interval);
    p.behaviour.set_chunks(3);
    let mut c = Client::connect(p.addr).await;
    let r = c
        .request(&post("/v1/chat/completions", CHAT_STREAM, ""))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    // 3 content chunks + the finish chunk + [DONE], each in its own HTTP chunk.
    assert_eq!(r.chunks.len(), 5);
    // Paced: the four gaps add up to at least half their nominal 160 ms. (One gap alone can
    // shrink when a busy reader takes two chunks in one go; their sum cannot.)
    let span = r.chunks[4].0.duration_since(r.chunks[0].0);
    assert!(span > 2 * interval, "events not paced: {span:?} for 4 gaps");
    for (_, data) in &r.chunks {
        assert!(data.starts_with(b"data: ") && data.ends_with(b"\n\n"));
    }
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let first: Value = serde_json::from_str(&events[0]).expect("json");
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["model"], "gpt-4o-mini");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let text: String = events[..3]
        .iter()
        .map(|e| {
            let v: Value = serde_json::from_str(e).expect("json");
            v["choices"][0]["delta"]["content"]
                .as_str()
                .expect("content")
                .to_string()
        })
        .collect();
    assert_eq!(text, "tok0 tok1 tok2 ");
    let fin: Value = serde_json::from_str(&events[3]).expect("json");
    assert_eq!(fin["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn streaming_usage_and_other_streaming_apis() {
    let p = start("s").await;
    p.behaviour.set_chunks(2);
    let mut c = Client::connect(p.addr).await;
    let body = r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#;
    let r = c.request(&post("/v1/chat/completions", body, "")).await;
    let events = r.events();
    assert_eq!(events.len(), 5);
    let usage: Value = serde_json::from_str(&events[3]).expect("json");
    assert_eq!(usage["usage"]["completion_tokens"], 2);

    let r = c
        .request(&post(
            "/v1/completions",
            r#"{"model":"m","stream":true}"#,
            "",
        ))
        .await;
    let events = r.events();
    let first: Value = serde_json::from_str(&events[0]).expect("json");
    assert_eq!(first["object"], "text_completion");
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));

    let r = c
        .request(&post("/v1/responses", r#"{"model":"m","stream":true}"#, ""))
        .await;
    let events = r.events();
    assert_eq!(events.len(), 4);
    let done: Value = serde_json::from_str(&events[3]).expect("json");
    assert_eq!(done["type"], "response.completed");
    assert_eq!(
        done["response"]["output"][0]["content"][0]["text"],
        "tok0 tok1 "
    );

    // Embeddings never stream.
    let r = c
        .request(&post(
            "/v1/embeddings",
            r#"{"model":"e","stream":true}"#,
            "",
        ))
        .await;
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json()["object"], "list");
}

#[tokio::test]
async fn chunked_request_bodies_are_decoded() {
    let p = start("c").await;
    let mut c = Client::connect(p.addr).await;
    c.send(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: sim\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await;
    let pieces: [&str; 3] = [r#"{"model":"#, r#""chunky","#, r#""messages":[]}"#];
    for piece in pieces {
        c.send(format!("{:x};ext=1\r\n{piece}\r\n", piece.len()).as_bytes())
            .await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    c.send(b"0\r\nx-trailer: t\r\n\r\n").await;
    let r = c.response().await.expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["model"], "chunky");
    let recorded = p.requests();
    assert_eq!(recorded[0].body, pieces.concat().as_bytes());
    assert_eq!(recorded[0].header("transfer-encoding"), Some("chunked"));
}

#[tokio::test]
async fn keep_alive_serves_several_requests_and_connection_close_is_honoured() {
    let p = start("k").await;
    let mut c = Client::connect(p.addr).await;
    let a = c.chat().await;
    let b = c.chat().await;
    assert_eq!(a.json()["id"], "chatcmpl-sim-1");
    assert_eq!(b.json()["id"], "chatcmpl-sim-2");
    assert_eq!(a.header("connection"), None);
    let last = c
        .request(&post("/v1/chat/completions", CHAT, "connection: close\r\n"))
        .await;
    assert_eq!(last.status, 200);
    assert_eq!(last.header("connection"), Some("close"));
    assert!(c.read_to_end().await.is_empty(), "server should close");
    assert_eq!(p.request_count(), 3);
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let p = start("pipe").await;
    let mut c = Client::connect(p.addr).await;
    let mut both = post("/v1/chat/completions", r#"{"model":"one"}"#, "");
    both.extend_from_slice(&post("/v1/embeddings", r#"{"model":"two"}"#, ""));
    c.send(&both).await;
    let first = c.response().await.expect("first");
    let second = c.response().await.expect("second");
    assert_eq!(first.json()["model"], "one");
    assert_eq!(second.json()["model"], "two");
    assert_eq!(second.json()["object"], "list");
}

#[tokio::test]
async fn http_1_0_requests_close_unless_keep_alive() {
    let p = start("old").await;
    let mut c = Client::connect(p.addr).await;
    let raw = format!(
        "POST /v1/chat/completions HTTP/1.0\r\nconnection: keep-alive\r\ncontent-length: {}\r\n\r\n{CHAT}",
        CHAT.len()
    );
    let r = c.request(raw.as_bytes()).await;
    assert_eq!(r.header("connection"), Some("keep-alive"));
    let raw = raw.replace("connection: keep-alive\r\n", "");
    let r = c.request(raw.as_bytes()).await;
    assert_eq!(r.json()["id"], "chatcmpl-sim-2");
    assert!(c.read_to_end().await.is_empty());

    // Streaming to an HTTP/1.0 client: no chunked encoding, the body ends at close.
    let mut c = Client::connect(p.addr).await;
    let raw = format!(
        "POST /v1/chat/completions HTTP/1.0\r\nconnection: keep-alive\r\ncontent-length: {}\r\n\r\n{CHAT_STREAM}",
        CHAT_STREAM.len()
    );
    let r = c.request(raw.as_bytes()).await;
    assert_eq!(r.header("transfer-encoding"), None);
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
}

#[tokio::test]
async fn failure_every_fails_deterministically_with_openai_errors() {
    let p = start("flaky").await;
    p.behaviour.set_failure_every(3, 503);
    let mut c = Client::connect(p.addr).await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let r = c.chat().await;
        if r.status == 503 {
            let v = r.json();
            assert_eq!(v["error"]["message"], "simulated failure");
            assert_eq!(v["error"]["type"], "server_error");
            assert!(v["error"]["param"].is_null() && v["error"]["code"].is_null());
        }
        statuses.push(r.status);
    }
    assert_eq!(statuses, [200, 200, 503, 200, 200, 503]);

    p.behaviour.set_failure_every(1, 429);
    let r = c.chat().await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");

    p.behaviour.set_failure_every(1, 401);
    let r = c.chat().await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");

    p.behaviour.set_failure_every(0, 0);
    let r = c.chat().await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_request_quota_is_announced_and_enforced_per_window() {
    let p = start("limited").await;
    p.behaviour
        .set_request_quota(2, Duration::from_millis(600), super::QuotaHeaders::OpenAi);
    let mut c = Client::connect(p.addr).await;
    // The health endpoint does not count.
    let r = c
        .request(b"GET /health HTTP/1.1\r\nhost: sim\r\n\r\n")
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-remaining-requests"), None);
    let started = Instant::now();
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = c.request(&post("/v1/chat/completions", CHAT, "")).await;
        assert_eq!(r.header("x-ratelimit-limit-requests"), Some("2"));
        assert!(r
            .header("x-ratelimit-reset-requests")
            .unwrap()
            .ends_with('s'));
        seen.push((
            r.status,
            r.header("x-ratelimit-remaining-requests")
                .map(str::to_owned),
        ));
        if r.status == 429 {
            assert_eq!(r.header("retry-after"), Some("1"));
            let ms: u64 = r.header("retry-after-ms").unwrap().parse().unwrap();
            assert!((1..=600).contains(&ms), "{ms}");
            assert_eq!(r.json()["error"]["type"], "rate_limit_error");
        }
    }
    if started.elapsed() < Duration::from_millis(500) {
        let s = |n: &str| Some(n.to_owned());
        assert_eq!(seen, [(200, s("1")), (200, s("0")), (429, s("0"))]);
    }
    // A new window starts full.
    tokio::time::sleep(Duration::from_millis(650)).await;
    let r = c
        .request(&post("/v1/embeddings", r#"{"input":"x"}"#, ""))
        .await;
    assert_eq!(r.status, 200);
    assert!(r.header("x-ratelimit-remaining-requests").is_some());
    p.behaviour
        .set_request_quota(0, Duration::ZERO, super::QuotaHeaders::OpenAi);
    let r = c.request(&post("/v1/chat/completions", CHAT, "")).await;
    assert_eq!(r.header("x-ratelimit-remaining-requests"), None);
    assert!(p.behaviour.request_quota().is_none());
}

#[tokio::test]
async fn requests_are_recorded_with_headers_query_and_body() {
    let p = start("rec").await;
    let mut c = Client::connect(p.addr).await;
    let path = "/openai/v1/chat/completions?api-version=2024-06-01&x=1";
    c.request(&post(
        path,
        CHAT,
        "Authorization: Bearer sk-test\r\nX-Custom: Yes\r\n",
    ))
    .await;
    let recorded = p.requests();
    assert_eq!(recorded.len(), 1);
    let r = &recorded[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/openai/v1/chat/completions");
    assert_eq!(r.query.as_deref(), Some("api-version=2024-06-01&x=1"));
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert!(r.headers.iter().any(|(n, v)| n == "x-custom" && v == "Yes"));
    assert_eq!(r.body, CHAT.as_bytes());
    assert_eq!(r.json().expect("json")["model"], "gpt-4o-mini");

    p.set_recording(false);
    c.chat().await;
    assert_eq!(p.requests().len(), 1);
    assert_eq!(p.request_count(), 2);
    p.clear_requests();
    assert!(p.requests().is_empty());
}

#[tokio::test]
async fn shutdown_refuses_new_connections_and_drops_open_ones() {
    let p = start("down").await;
    let mut open = Client::connect(p.addr).await;
    open.chat().await;
    p.shutdown();
    assert!(p.is_shut_down());
    let connect = timeout(WAIT, TcpStream::connect(p.addr))
        .await
        .expect("in time");
    assert!(connect.is_err(), "connect after shutdown must fail");
    open.send(&post("/v1/chat/completions", CHAT, "")).await;
    assert!(
        open.response().await.is_none(),
        "open connection must be closed"
    );
}

#[tokio::test]
async fn five_megabyte_bodies_are_accepted() {
    let p = start("big").await;
    let filler = "x".repeat(5 * 1024 * 1024);
    let body = format!(r#"{{"model":"big","messages":[{{"role":"user","content":"{filler}"}}]}}"#);
    let mut c = Client::connect(p.addr).await;
    let r = c.request(&post("/v1/chat/completions", &body, "")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["model"], "big");

    // The same body chunked in 1 MiB pieces.
    let mut raw =
        b"POST /v1/chat/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for piece in body.as_bytes().chunks(1024 * 1024) {
        raw.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        raw.extend_from_slice(piece);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    let r = c.request(&raw).await;
    assert_eq!(r.status, 200);
    let recorded = p.requests();
    assert_eq!(recorded.len(), 2);
    assert!(recorded.iter().all(|r| r.body.len() == body.len()));
}

#[tokio::test]
async fn model_falls_back_to_the_deployment_or_unknown() {
    let p = start("az").await;
    let mut c = Client::connect(p.addr).await;
    let r = c
        .request(&post(
            "/openai/deployments/my-gpt/chat/completions?api-version=1",
            r#"{"messages":[]}"#,
            "",
        ))
        .await;
    assert_eq!(r.json()["model"], "my-gpt");
    let r = c
        .request(&post(
            "/v1/projects/p/locations/l/endpoints/openapi/chat/completions",
            r#"{"messages":[]}"#,
            "",
        ))
        .await;
    assert_eq!(r.json()["model"], "unknown");
}

#[tokio::test]
async fn completions_embeddings_and_responses_have_their_shapes() {
    let p = start("multi").await;
    let mut c = Client::connect(p.addr).await;
    let v = c
        .request(&post(
            "/v1/completions",
            r#"{"model":"c","prompt":"x"}"#,
            "",
        ))
        .await
        .json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], "Hello from multi");
    let v = c
        .request(&post("/v1/embeddings", r#"{"model":"e","input":"x"}"#, ""))
        .await
        .json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["object"], "embedding");
    assert_eq!(v["data"][0]["embedding"].as_array().map(Vec::len), Some(3));
    assert_eq!(v["model"], "e");
    let v = c
        .request(&post("/v1/responses", r#"{"model":"r","input":"x"}"#, ""))
        .await
        .json();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert!(v["id"].as_str().expect("id").starts_with("resp_sim_"));
    assert_eq!(v["output"][0]["content"][0]["text"], "Hello from multi");
}

#[tokio::test]
async fn unknown_paths_bad_methods_and_bad_json_get_openai_errors() {
    let p = start("e").await;
    let mut c = Client::connect(p.addr).await;
    let r = c.request(&post("/v1/nothing", CHAT, "")).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    assert!(r.json()["error"]["message"]
        .as_str()
        .expect("msg")
        .contains("/v1/nothing"));
    let r = c
        .request(b"GET /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r\n")
        .await;
    assert_eq!(r.status, 405);
    let r = c
        .request(&post("/v1/chat/completions", "{not json", ""))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    // The connection survives all of that.
    assert_eq!(c.chat().await.status, 200);
}

#[tokio::test]
async fn malformed_and_oversized_heads_are_rejected() {
    let p = start("h").await;
    let mut c = Client::connect(p.addr).await;
    let r = c.request(b"\x01\x02 nonsense\r\n\r\n").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.header("connection"), Some("close"));

    let many: String = (0..70).map(|i| format!("h{i}: v\r\n")).collect();
    let mut c = Client::connect(p.addr).await;
    let r = c.request(&post("/v1/chat/completions", CHAT, &many)).await;
    assert_eq!(r.status, 431);

    // A big (but allowed) header grows the buffer instead of failing.
    let big = format!("x-big: {}\r\n", "b".repeat(200 * 1024));
    let mut c = Client::connect(p.addr).await;
    let r = c.request(&post("/v1/chat/completions", CHAT, &big)).await;
    assert_eq!(r.status, 200);
    let recorded = p.requests();
    let last = recorded.last().expect("recorded");
    assert_eq!(last.header("x-big").map(str::len), Some(200 * 1024));
}

#[tokio::test]
async fn expect_continue_gets_an_interim_response() {
    let p = start("cont").await;
    let mut c = Client::connect(p.addr).await;
    c.send(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
            CHAT.len()
        )
        .as_bytes(),
    )
    .await;
    while !c.buf.starts_with(b"HTTP/1.1 100 Continue\r\n\r\n") {
        assert!(c.fill().await > 0, "expected 100 Continue");
    }
    c.send(CHAT.as_bytes()).await;
    let r = c.response().await.expect("response");
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn latency_delays_the_response() {
    let p = start("slow").await;
    p.behaviour.set_latency(Duration::from_millis(150));
    let mut c = Client::connect(p.addr).await;
    let t = Instant::now();
    let r = c.chat().await;
    assert_eq!(r.status, 200);
    assert!(t.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn fault_refuse_connections_closes_without_answering() {
    let (p, mut c) = chat_sent_with(Fault::RefuseConnections).await;
    assert!(c.read_to_end().await.is_empty());
    // Also on a connection opened before the fault was set.
    p.behaviour.set_fault(Fault::None);
    let mut c = Client::connect(p.addr).await;
    c.chat().await;
    p.behaviour.set_fault(Fault::RefuseConnections);
    c.send(&post("/v1/chat/completions", CHAT, "")).await;
    assert!(c.read_to_end().await.is_empty());
}

#[tokio::test]
async fn fault_never_answer_holds_the_socket_silently() {
    let (p, mut c) = chat_sent_with(Fault::NeverAnswer).await;
    let mut byte = [0u8; 1];
    let read = timeout(Duration::from_millis(300), c.stream.read(&mut byte)).await;
    assert!(read.is_err(), "expected silence, got {read:?}");
    assert_eq!(p.request_count(), 1);
    // Shutdown releases held sockets.
    p.shutdown();
    assert!(c.read_to_end().await.is_empty());
}

#[tokio::test]
async fn fault_close_during_headers_sends_half_a_status_line() {
    let (_p, mut c) = chat_sent_with(Fault::CloseDuringHeaders).await;
    assert_eq!(c.read_to_end().await, b"HTTP/1.1 20");
}

#[tokio::test]
async fn fault_garbage_is_not_http() {
    let (_p, mut c) = chat_sent_with(Fault::Garbage).await;
    let bytes = c.read_to_end().await;
    assert!(!bytes.is_empty());
    let mut hs = [httparse::EMPTY_HEADER; 8];
    assert!(httparse::Response::new(&mut hs).parse(&bytes).is_err());
}

#[tokio::test]
async fn fault_reset_mid_stream_cuts_the_stream_with_a_reset() {
    let p = start("f").await;
    p.behaviour.set_fault(Fault::ResetMidStream);
    let mut c = Client::connect(p.addr).await;
    c.send(&post("/v1/chat/completions", CHAT_STREAM, "")).await;
    assert!(c.response().await.is_none(), "stream must not complete");
    assert!(!String::from_utf8_lossy(&c.buf).contains("[DONE]"));

    // A non-streaming answer is cut in the middle of its body.
    let mut c = Client::connect(p.addr).await;
    c.send(&post("/v1/chat/completions", CHAT, "")).await;
    assert!(c.response().await.is_none(), "body must be incomplete");
}

#[tokio::test]
async fn fault_huge_body_sends_exactly_that_many_bytes_of_json() {
    let p = start("f").await;
    p.behaviour.set_fault(Fault::HugeBody(200_003));
    let mut c = Client::connect(p.addr).await;
    let r = c.chat().await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("200003"));
    assert_eq!(r.body.len(), 200_003);
    assert_eq!(r.json(), serde_json::json!({}));
    // Keep-alive still works after it.
    p.behaviour.set_fault(Fault::None);
    let r = c.chat().await;
    assert_eq!(r.json()["object"], "chat.completion");
}

#[tokio::test]
async fn fault_endless_stream_never_finishes_and_ends_when_the_peer_leaves() {
    let p = start("f").await;
    p.behaviour.set_fault(Fault::EndlessStream);
    let mut c = Client::connect(p.addr).await;
    c.send(&post("/v1/chat/completions", CHAT_STREAM, "")).await;
    while c.buf.len() < 1 << 20 {
        assert!(c.fill().await > 0, "stream ended");
    }
    let text = String::from_utf8_lossy(&c.buf);
    assert!(text.starts_with("HTTP/1.1 200"));
    assert!(text.contains("transfer-encoding: chunked"));
    assert!(text.contains("tok0 ") && text.contains("tok1000 "));
    assert!(!text.contains("[DONE]"));
    assert_eq!(p.open_connections(), 1);
    drop(c);
    let deadline = Instant::now() + WAIT;
    while p.open_connections() > 0 {
        assert!(Instant::now() < deadline, "connection not closed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn fault_slow_drip_paces_chunks() {
    let p = start("f").await;
    let pace = Duration::from_millis(30);
    p.behaviour.set_fault(Fault::SlowDrip(pace));
    p.behaviour.set_chunks(2);
    let mut c = Client::connect(p.addr).await;
    let t = Instant::now();
    let r = c
        .request(&post("/v1/chat/completions", CHAT_STREAM, ""))
        .await;
    assert_eq!(r.chunks.len(), 4);
    assert!(t.elapsed() >= pace * 3);
    assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"));
    // Non-streaming bodies drip too and still parse.
    let t = Instant::now();
    let r = c.chat().await;
    assert!(t.elapsed() >= pace * 2);
    assert_eq!(r.json()["object"], "chat.completion");
}

#[tokio::test]
async fn fault_status_always_answers_that_status() {
    let p = start("f").await;
    p.behaviour.set_fault(Fault::Status(502));
    let mut c = Client::connect(p.addr).await;
    for _ in 0..2 {
        let r = c.chat().await;
        assert_eq!(r.status, 502);
        assert_eq!(r.json()["error"]["type"], "server_error");
    }
    p.behaviour.set_fault(Fault::None);
    assert_eq!(c.chat().await.status, 200);
}

#[tokio::test]
async fn dropping_the_provider_shuts_it_down() {
    let p = start("gone").await;
    let addr = p.addr;
    assert_eq!(p.base_url(), format!("http://{addr}"));
    assert_eq!(p.name(), "gone");
    drop(p);
    assert!(TcpStream::connect(addr).await.is_err());
}

#[test]
fn dropping_after_the_runtime_is_gone_does_not_panic() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let p = rt.block_on(FakeProvider::start("late")).expect("start");
    let addr = p.addr;
    drop(rt);
    p.shutdown();
    drop(p);
    assert!(std::net::TcpStream::connect(addr).is_err());
}

#[tokio::test]
async fn fault_drop_reused_answers_each_connection_once_then_closes_it_silently() {
    let p = start("f").await;
    p.behaviour.set_fault(Fault::DropReused);
    let mut c = Client::connect(p.addr).await;
    let r = c.chat().await;
    assert_eq!(r.json()["object"], "chat.completion");
    c.send(&post("/v1/chat/completions", CHAT, "")).await;
    assert_eq!(c.fill().await, 0, "the second request got an answer");
    let mut fresh = Client::connect(p.addr).await;
    let r = fresh.chat().await;
    assert_eq!(r.json()["object"], "chat.completion");
}

#[tokio::test]
async fn the_health_endpoint_answers_its_set_status_and_follows_faults() {
    let p = start("h").await;
    let mut c = Client::connect(p.addr).await;
    let get = b"GET /health HTTP/1.1\r\nhost: sim\r\n\r\n";
    let r = c.request(get).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), serde_json::json!({"status": "ok"}));
    p.behaviour.set_health_status(503);
    let r = c.request(get).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.json()["error"]["type"], "server_error");
    // The API itself still answers: only the health endpoint fails.
    let r = c.chat().await;
    assert_eq!(r.status, 200);
    p.behaviour.set_health_status(200);
    p.behaviour.set_fault(Fault::Status(500));
    assert_eq!(c.request(get).await.status, 500);
    p.behaviour.set_fault(Fault::None);
    assert_eq!(c.request(get).await.status, 200);
    let health: Vec<_> = p
        .requests()
        .into_iter()
        .filter(|r| r.path == "/health")
        .collect();
    assert_eq!(health.len(), 4);
    assert_eq!(health[0].method, "GET");
}
