//! SIGTERM: stop accepting, drain in-flight streams, `/health` 503 on the metrics listener
//! meanwhile, exit 0 — with sturnus's sidecar defaults (no `-c`) and with a Pingora config.

use crate::common;

use common::*;
use futures_util::StreamExt;
use nix::sys::signal::Signal;
use std::time::Duration;

/// A provider whose streams send `chunks` chunks `interval` apart, behind alias `fast`, with a
/// metrics listener; returns the provider, the proxy and the metrics listener's base URL.
async fn streaming_setup(
    chunks: u32,
    interval: Duration,
    args: &[&str],
) -> (FakeProvider, Proxy, String) {
    let sim = FakeProvider::start("p").await.unwrap();
    sim.behaviour.set_chunks(chunks);
    sim.behaviour.set_chunk_interval(interval);
    let metrics = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "metrics_listen = \"{metrics}\"\n{}[model]\nfast = [{{ provider = \"p\", model = \"m\" }}]\n",
        provider_toml("p", &sim, None)
    );
    let proxy = Proxy::start_with(&config, &[], args).await;
    (sim, proxy, format!("http://{metrics}"))
}

/// Starts a streaming request and returns the response once its first chunk has arrived.
async fn stream_in_flight(proxy: &Proxy) -> (reqwest::Response, Vec<u8>) {
    let resp = post(proxy, "/v1/chat/completions", chat_body("fast", true)).await;
    assert_eq!(resp.status(), 200);
    let mut resp = resp;
    let first = resp.chunk().await.unwrap().expect("a first chunk");
    (resp, first.to_vec())
}

/// Reads the rest of a streaming response; the whole body and whether it ended cleanly.
async fn finish(resp: reqwest::Response, mut body: Vec<u8>) -> (Vec<u8>, bool) {
    let mut stream = resp.bytes_stream();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => body.extend_from_slice(&bytes),
            Err(_) => return (body, false),
        }
    }
    (body, true)
}

/// Polls `url` until it answers `status` (bounded); the last body.
async fn wait_for_status(url: &str, status: u16) -> serde_json::Value {
    let c = client();
    for _ in 0..200 {
        if let Ok(r) = c.get(url).send().await {
            if r.status() == status {
                return r.json().await.unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{url} never answered {status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_an_in_flight_stream_while_health_says_shutting_down_then_exits_0() {
    // Ten chunks 300 ms apart: the stream is still running well after SIGTERM.
    let (_sim, mut proxy, metrics) = streaming_setup(10, Duration::from_millis(300), &[]).await;
    let (resp, first) = stream_in_flight(&proxy).await;
    assert_eq!(get_url(format!("{metrics}/health")).await.status(), 200);

    proxy.signal(Signal::SIGTERM);

    // The metrics listener keeps answering: readiness 503, liveness and metrics still 200.
    let health = wait_for_status(&format!("{metrics}/health"), 503).await;
    assert_eq!(health, serde_json::json!({"status": "shutting_down"}));
    let healthz = get_url(format!("{metrics}/healthz")).await;
    assert_eq!(healthz.status(), 200);
    let scrape = get_url(format!("{metrics}/metrics")).await;
    assert_eq!(scrape.status(), 200);
    assert!(scrape
        .text()
        .await
        .unwrap()
        .contains("sturnus_inflight_requests"));

    // The proxy listener no longer takes new connections.
    let mut refused = false;
    for _ in 0..100 {
        let fresh = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        if fresh.get(proxy.url("/health")).send().await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "the proxy listener still accepts after SIGTERM");
    assert_eq!(
        proxy.wait_exit(Duration::from_millis(200)).await,
        None,
        "exited mid-stream"
    );

    // The stream in flight completes, every chunk and the terminator.
    let (body, clean) = finish(resp, first).await;
    let text = String::from_utf8_lossy(&body);
    assert!(clean, "stream cut short: {text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert_eq!(text.matches("\"delta\"").count(), 10 + 1, "{text}");

    // Then the process exits by itself, with status 0, long before the 20 s grace period.
    let status = proxy.wait_exit(Duration::from_secs(15)).await;
    let status = status.unwrap_or_else(|| panic!("still running:\n{}", proxy.logs()));
    assert_eq!(status.code(), Some(0), "{}", proxy.logs());
    assert!(!proxy.logs().contains("panicked"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_sidecar_exits_0_at_once_on_sigterm() {
    let (_sim, mut proxy, _metrics) = streaming_setup(2, Duration::ZERO, &[]).await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", false)).await;
        assert_eq!(resp.status(), 200);
        ids.push(resp.headers()["x-request-id"].to_str().unwrap().to_string());
    }
    proxy.signal(Signal::SIGTERM);
    // Unmodified Pingora would sleep 300 s here; the sidecar default grace is 20 s; an idle
    // sturnus has nothing to wait for.
    let status = proxy.wait_exit(Duration::from_secs(10)).await;
    let status = status.unwrap_or_else(|| panic!("still running:\n{}", proxy.logs()));
    assert_eq!(status.code(), Some(0));
    let logs = proxy.logs();
    let drained = logs.find("drained").unwrap_or_else(|| panic!("{logs}"));
    // Access lines are written in batches; none is lost on the way out, and all come before
    // the exit line.
    for id in &ids {
        let line = logs.find(&format!("\"request_id\":\"{id}\""));
        assert!(line.is_some_and(|at| at < drained), "{id} missing:\n{logs}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_header_still_arriving_when_sigterm_lands_is_served_then_the_connection_closes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_sim, mut proxy, metrics) = streaming_setup(2, Duration::ZERO, &[]).await;
    let body = chat_body("fast", false);
    let mut conn = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    conn.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: sturnus\r\n")
        .await
        .unwrap();
    // The connection is accepted and its header half read before the drain starts.
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.signal(Signal::SIGTERM);
    wait_for_status(&format!("{metrics}/health"), 503).await;
    let rest = format!(
        "content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(rest.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut answer))
        .await
        .expect("the answer ends: the connection is closed after it")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).to_lowercase();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.contains("chat.completion"), "{answer}");
    let status = proxy.wait_exit(Duration::from_secs(10)).await;
    let status = status.unwrap_or_else(|| panic!("still running:\n{}", proxy.logs()));
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_outlasting_the_configured_grace_period_is_cut_and_the_process_exits_0() {
    let dir = scratch_dir();
    let yaml = dir.join("pingora.yaml");
    std::fs::write(
        &yaml,
        format!(
            "---\nversion: 1\nupgrade_sock: {}\ngrace_period_seconds: 1\ngraceful_shutdown_timeout_seconds: 1\n",
            dir.join("upgrade.sock").display()
        ),
    )
    .unwrap();
    let yaml = yaml.to_string_lossy().into_owned();
    // A 60-chunk stream, 500 ms apart: 30 s, far past the 1 s + 1 s the config allows.
    let (_sim, mut proxy, _metrics) =
        streaming_setup(60, Duration::from_millis(500), &["-c", &yaml]).await;
    let (resp, first) = stream_in_flight(&proxy).await;
    proxy.signal(Signal::SIGTERM);
    let status = proxy.wait_exit(Duration::from_secs(15)).await;
    let status = status.unwrap_or_else(|| panic!("still running:\n{}", proxy.logs()));
    assert_eq!(status.code(), Some(0), "{}", proxy.logs());
    let (body, clean) = finish(resp, first).await;
    let text = String::from_utf8_lossy(&body);
    assert!(
        !clean || !text.contains("[DONE]"),
        "the stream should have been cut: {text}"
    );
}
