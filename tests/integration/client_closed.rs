//! A client that goes away cancels the provider request: whether it leaves before the response
//! header, before the first chunk of a stream, mid-stream, or after a 5 MiB upload, sturnus
//! closes the provider connection within a second, logs `499 client_closed`, counts it in
//! `sturnus_errors_total{kind="client_closed"}`, holds nothing against the provider, and goes
//! on serving.

use crate::common;

use common::*;
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest a provider may go on working for a client that left.
const NOTICED_WITHIN: Duration = Duration::from_secs(1);

/// A provider `up` behind alias `fast`, and sturnus in front.
async fn start() -> (FakeProvider, Proxy) {
    one_provider("m", None, "").await
}

/// Sends `body` on a raw connection and waits until the provider has received the request.
async fn send_and_wait_for_provider(proxy: &Proxy, up: &FakeProvider, body: &str) -> TcpStream {
    let before = up.request_count();
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    client.write_all(head.as_bytes()).await.unwrap();
    client.write_all(body.as_bytes()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while up.request_count() == before {
        assert!(
            Instant::now() < deadline,
            "the provider never got the request"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    client
}

/// Closes the client connection now and returns when that happened.
fn leave(client: TcpStream) -> Instant {
    drop(client);
    Instant::now()
}

/// Asserts the provider saw the connection of the request close within [`NOTICED_WITHIN`] of
/// `left`.
async fn expect_provider_saw_close(up: &FakeProvider, left: Instant) {
    let deadline = left + Duration::from_secs(5);
    loop {
        if let Some(at) = up.abandoned_answers().first() {
            let after = at.saturating_duration_since(left);
            assert!(
                after < NOTICED_WITHIN,
                "the provider worked on for {after:?} after the client left"
            );
            assert_eq!(up.abandoned_answers().len(), 1);
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the provider never saw the connection close"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The only candidate of `fast` on `/status`.
async fn candidate(proxy: &Proxy) -> Value {
    proxy.status().await["aliases"][0]["candidates"][0].clone()
}

/// Waits for the access line with status 499 and checks it.
async fn expect_access_line(proxy: &Proxy, stream: bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = proxy
            .logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["target"] == "sturnus::access" && v["status"] == 499);
        if let Some(line) = found {
            assert_eq!(line["outcome"], "client_closed", "{line}");
            assert_eq!(line["error_kind"], "client_closed", "{line}");
            assert_eq!(line["provider"], "up", "{line}");
            assert_eq!(line["stream"], stream, "{line}");
            return line;
        }
        assert!(Instant::now() < deadline, "no 499 access line");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const SERIES: [(&str, &str); 3] = [("alias", "fast"), ("provider", "up"), ("model", "m")];

fn with<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    SERIES
        .iter()
        .copied()
        .chain(extra.iter().copied())
        .collect()
}

/// What every case checks once the client has left: nothing in flight, no failure, the
/// `client_closed` count, no request counted as answered, no completion latency; then that
/// the next request is served.
async fn expect_accounted_and_serving(proxy: &Proxy, stream: bool) {
    expect_access_line(proxy, stream).await;
    let c = candidate(proxy).await;
    assert_eq!(c["in_flight"], 0, "{c}");
    assert_eq!(c["failures"], 0, "{c}");
    assert_eq!(c["client_errors"], 0, "{c}");
    assert_eq!(c["requests"], 0, "{c}");
    assert_eq!(c["non_streaming"]["latency_ms"], Value::Null, "{c}");
    let m = proxy.metrics().await;
    let kind = |k| m.value("sturnus_errors_total", &with(&[("kind", k)]));
    assert_eq!(kind("client_closed"), Some(1.0));
    assert_eq!(kind("reset"), Some(0.0));
    assert_eq!(kind("timeout"), Some(0.0));
    assert_eq!(
        m.value("sturnus_inflight_requests", &SERIES),
        Some(0.0),
        "in-flight gauge"
    );
    assert_eq!(
        m.value("sturnus_requests_total", &with(&[("status_code", "200")])),
        Some(0.0)
    );
    let mode = if stream { "true" } else { "false" };
    assert_eq!(
        m.value("sturnus_latency_seconds_count", &with(&[("stream", mode)])),
        Some(0.0)
    );

    let resp = post(proxy, "/v1/chat/completions", chat_body("fast", false)).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    let c = candidate(proxy).await;
    assert_eq!(
        (c["requests"].as_u64(), c["failures"].as_u64()),
        (Some(1), Some(0)),
        "{c}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_leaving_before_the_response_header_cancels_the_provider_request() {
    expect_leaving_before_the_answer_cancels_it(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_leaving_before_the_first_chunk_cancels_the_stream() {
    expect_leaving_before_the_answer_cancels_it(true).await;
}

/// A client that leaves while the provider has not answered yet: the provider's request is
/// closed, the request accounted, no latency sample taken, and sturnus serves on.
async fn expect_leaving_before_the_answer_cancels_it(stream: bool) {
    let (up, proxy) = start().await;
    up.behaviour.set_latency(Duration::from_secs(8));
    let client = send_and_wait_for_provider(&proxy, &up, &chat_body("fast", stream)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let left = leave(client);
    expect_provider_saw_close(&up, left).await;
    up.behaviour.set_latency(Duration::ZERO);
    expect_accounted_and_serving(&proxy, stream).await;
    assert_eq!(
        candidate(&proxy).await["streaming"]["latency_ms"],
        Value::Null
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_leaving_mid_stream_cancels_the_rest() {
    let (up, proxy) = start().await;
    up.behaviour.set_chunk_interval(Duration::from_secs(3));
    let mut client = send_and_wait_for_provider(&proxy, &up, &chat_body("fast", true)).await;
    // Read the head and the first event, then leave while the provider works on the next.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let deadline = Instant::now() + Duration::from_secs(5);
    while !String::from_utf8_lossy(&got).contains("data: ") {
        assert!(Instant::now() < deadline, "no first event");
        let n = tokio::time::timeout(Duration::from_secs(5), client.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    let left = leave(client);
    expect_provider_saw_close(&up, left).await;
    up.behaviour.set_chunk_interval(Duration::ZERO);
    let line = expect_access_line(&proxy, true).await;
    // The first chunk reached the client before it left: its time is the provider's own.
    assert!(line["ttfc_ms"].as_f64().is_some(), "{line}");
    expect_accounted_and_serving(&proxy, true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_leaving_after_a_5_mib_upload_cancels_the_provider_request() {
    let (up, proxy) = start().await;
    up.behaviour.set_latency(Duration::from_secs(8));
    let body = chat_of_size("fast", 5 * 1024 * 1024);
    let client = send_and_wait_for_provider(&proxy, &up, &body).await;
    assert_eq!(
        up.requests().last().map(|r| r.body.len()),
        Some(body.len() - "fast".len() + "m".len())
    );
    let left = leave(client);
    expect_provider_saw_close(&up, left).await;
    up.behaviour.set_latency(Duration::ZERO);
    expect_accounted_and_serving(&proxy, false).await;
    proxy.expect_budget_full("the client left").await;
}
