//! Transparent passthrough: only the model value changes, every other byte and header rule holds,
//! bodies of every size take the same route, and streams are relayed as they arrive.

use crate::common;

use common::*;
use futures_util::StreamExt;
use std::time::{Duration, Instant};

async fn one_candidate(key: Option<&str>) -> (FakeProvider, Proxy) {
    one_provider("real-model", key, "").await
}

/// `body` with the first `"model": "fast"` value replaced by `real-model`.
fn expected(body: &str) -> Vec<u8> {
    body.replacen("\"fast\"", "\"real-model\"", 1).into_bytes()
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_model_bytes_change() {
    let (sim, proxy) = one_candidate(None).await;
    let body = "{\n  \"temperature\" : 0.30,\t\"model\":\"fast\" ,\r\n  \"big\": 1e400, \"n\": 1234567890123456789012345,\n  \"messages\": [{\"role\":\"user\",\"content\":\"caf\\u00e9 \\\"q\\\" \\\\ \\n\",\"model\":\"fast\"}],\n  \"x\": {\"model\": \"nested\"}, \"z\": -0.0e-0 }";
    let resp = post(&proxy, "/v1/chat/completions", body.to_string()).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-session-affinity"], "up/real-model");
    assert_eq!(resp.headers()["x-sturnus-provider"], "up");
    let answer: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(answer["object"], "chat.completion");
    let got = sim.requests().pop().unwrap();
    assert_eq!(got.body, expected(body), "spliced body differs");
    assert_eq!(
        got.header("content-length").unwrap(),
        got.body.len().to_string()
    );
    assert_eq!(got.path, "/v1/chat/completions");
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_on_both_sides_of_the_one_buffer_limit_arrive_exactly() {
    let (sim, proxy) = one_candidate(Some("sk-size")).await;
    for size in [
        1024,
        64 * 1024 - 1,
        64 * 1024,
        64 * 1024 + 1,
        5 * 1024 * 1024,
    ] {
        sim.clear_requests();
        let body = chat_of_size("fast", size);
        let resp = post(&proxy, "/v1/chat/completions", body.clone()).await;
        assert_eq!(resp.status(), 200, "size {size}");
        assert_eq!(resp.headers()["x-session-affinity"], "up/real-model");
        let text = resp.text().await.unwrap();
        assert!(text.contains("chat.completion"), "size {size}: {text}");
        let got = sim.requests().pop().expect("provider saw the request");
        assert_eq!(
            got.body.len(),
            body.len() + "real-model".len() - "fast".len()
        );
        assert!(got.body == expected(&body), "size {size}: body differs");
        assert_eq!(got.header("authorization"), Some("Bearer sk-size"));
        assert_eq!(
            got.header("content-length").unwrap(),
            got.body.len().to_string(),
            "size {size}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn chunked_uploads_are_read_whole_and_sent_with_a_length() {
    let (sim, proxy) = one_candidate(None).await;
    for total in [3_000usize, 200_000] {
        sim.clear_requests();
        let body = chat_of_size("fast", total);
        let resp = post_chunked(&proxy, &body, 997).await;
        assert_eq!(resp.status(), 200);
        let got = sim.requests().pop().unwrap();
        assert!(got.body == expected(&body), "chunked {total}: body differs");
        assert!(got.header("transfer-encoding").is_none());
        assert_eq!(
            got.header("content-length").unwrap(),
            got.body.len().to_string()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn client_credentials_stay_home_and_other_headers_pass() {
    let (sim, proxy) = one_candidate(Some("sk-provider-key")).await;
    for body in [chat_body("fast", false), chat_of_size("fast", 100 * 1024)] {
        sim.clear_requests();
        let resp = client()
            .post(proxy.url("/v1/chat/completions?trace=1&x=y"))
            .header("authorization", "Bearer client-token")
            .header("x-api-key", "client-x")
            .header("api-key", "client-azure")
            .header("cookie", "session=abc")
            .header("x-session-affinity", "garbage")
            .header("openai-beta", "assistants=v2")
            .header("x-custom", "kept")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let got = sim.requests().pop().unwrap();
        assert_eq!(got.header("authorization"), Some("Bearer sk-provider-key"));
        assert_eq!(got.header("x-api-key"), None);
        assert_eq!(got.header("api-key"), None);
        assert_eq!(got.header("cookie"), None);
        assert_eq!(got.header("x-session-affinity"), None);
        assert_eq!(got.header("openai-beta"), Some("assistants=v2"));
        assert_eq!(got.header("x-custom"), Some("kept"));
        assert_eq!(got.header("host"), Some(sim.addr.to_string().as_str()));
        assert_eq!(got.query.as_deref(), Some("trace=1&x=y"));
    }
}

/// The JSON access line of the request with this id (waits briefly: written after the answer).
async fn access_line(proxy: &Proxy, request_id: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let found = proxy
            .logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["target"] == "sturnus::access" && v["request_id"] == request_id);
        if let Some(line) = found {
            return line;
        }
        assert!(Instant::now() < deadline, "no access line for {request_id}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_response_headers_reach_the_client_verbatim() {
    let (sim, proxy) = one_candidate(None).await;
    let provider_headers = [
        ("x-request-id", "req_8f3a2b1c9d"),
        ("openai-processing-ms", "42"),
        ("openai-organization", "Sim Org; v=1"),
        ("x-ratelimit-remaining-requests", "4999"),
        ("x-ratelimit-reset-tokens", "6ms"),
        ("keep-alive", "timeout=5, max=100"),
    ];
    sim.set_response_headers(&provider_headers);
    for stream in [false, true] {
        sim.clear_requests();
        let resp = client()
            .post(proxy.url("/v1/chat/completions"))
            .header("x-request-id", "client-id-7")
            .body(chat_body("fast", stream))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let h = resp.headers().clone();
        resp.bytes().await.unwrap();
        for (name, value) in &provider_headers[..5] {
            assert_eq!(h[*name], *value, "{name} (stream {stream})");
        }
        assert_eq!(h["x-sim-provider"], "up");
        assert!(h.get("keep-alive").is_none(), "a hop-by-hop header passed");
        assert!(h.get("x-upstream-request-id").is_none());
        assert_eq!(h["x-session-affinity"], "up/real-model");
        assert_eq!(h["x-sturnus-provider"], "up");
        // The provider got sturnus's id for the request: the client's own.
        let got = sim.requests().pop().unwrap();
        assert_eq!(got.header("x-request-id"), Some("client-id-7"));
    }
    // Both ids in the access log.
    let line = access_line(&proxy, "client-id-7").await;
    assert_eq!(line["upstream_request_id"], "req_8f3a2b1c9d", "{line}");

    // A provider that sends no id: the client gets sturnus's.
    sim.set_response_headers(&[]);
    let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", false)).await;
    let ours = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(ours.len(), 36, "{ours}");
    assert_eq!(
        sim.requests().pop().unwrap().header("x-request-id"),
        Some(ours.as_str())
    );
    let line = access_line(&proxy, &ours).await;
    assert!(line["upstream_request_id"].is_null(), "{line}");
    // sturnus's own answers carry its id.
    let resp = post(&proxy, "/v1/chat/completions", chat_body("nope", false)).await;
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["x-request-id"].len(), 36);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_routed_endpoint_reaches_the_provider() {
    let (sim, proxy) = one_candidate(None).await;
    for (path, object) in [
        ("/v1/chat/completions", "chat.completion"),
        ("/v1/completions", "text_completion"),
        ("/v1/embeddings", "list"),
        ("/v1/responses", "response"),
    ] {
        let resp = post(
            &proxy,
            path,
            r#"{"model":"fast","input":"hi","prompt":"x"}"#,
        )
        .await;
        assert_eq!(resp.status(), 200, "{path}");
        let v: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(v["object"], object, "{path}");
        assert_eq!(sim.requests().pop().unwrap().path, path);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_are_relayed_chunk_by_chunk_as_they_arrive() {
    let (sim, proxy) = one_candidate(None).await;
    sim.behaviour.set_chunks(6);
    sim.behaviour.set_chunk_interval(Duration::from_millis(150));
    for body in [chat_body("fast", true), {
        // The same with a body over 64 KiB (sent upstream as pieces of the received body).
        let pad = "x".repeat(70 * 1024);
        format!(
            r#"{{"model":"fast","stream":true,"messages":[{{"role":"user","content":"{pad}"}}]}}"#
        )
    }] {
        let start = Instant::now();
        let resp = post(&proxy, "/v1/chat/completions", body).await;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        assert_eq!(resp.headers()["x-sturnus-provider"], "up");
        let mut arrivals = Vec::new();
        let mut text = String::new();
        let mut stream = resp.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
            arrivals.push((start.elapsed(), text.matches("data: ").count()));
        }
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        let events = text.matches("data: ").count();
        assert!(events >= 8, "{events} events");
        // The first event is at the client long before the last one was produced.
        let first = arrivals.iter().find(|(_, n)| *n >= 1).unwrap().0;
        let last = arrivals.last().unwrap().0;
        assert!(
            last - first >= Duration::from_millis(600),
            "events bunched: first {first:?}, last {last:?}"
        );
        assert!(arrivals.len() >= 5, "only {} reads", arrivals.len());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn stream_headers_reach_the_client_before_the_first_event() {
    let (sim, proxy) = one_candidate(None).await;
    // The provider sends its headers at once, then each event after a pause.
    let pause = Duration::from_millis(800);
    sim.behaviour.set_chunks(1);
    sim.behaviour.set_fault(Fault::SlowDrip(pause));
    let start = Instant::now();
    let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", true)).await;
    let headers_at = start.elapsed();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-sturnus-provider"], "up");
    let text = resp.text().await.unwrap();
    let done_at = start.elapsed();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert!(
        headers_at < pause && done_at >= 2 * pause,
        "headers at {headers_at:?}, stream done at {done_at:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn provider_errors_reach_the_client_verbatim() {
    let (sim, proxy) = one_candidate(None).await;
    sim.behaviour.set_fault(Fault::Status(503));
    let direct = client()
        .post(format!("{}/v1/chat/completions", sim.base_url()))
        .body(chat_body("real-model", false))
        .send()
        .await
        .unwrap();
    let direct_status = direct.status();
    let direct_type = direct.headers()["content-type"].clone();
    let direct_body = direct.bytes().await.unwrap();
    let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", false)).await;
    assert_eq!(resp.status(), direct_status);
    assert_eq!(resp.headers()["content-type"], direct_type);
    assert_eq!(resp.headers()["x-session-affinity"], "up/real-model");
    assert_eq!(resp.bytes().await.unwrap(), direct_body);
    // Exactly one attempt reached the provider: no retry.
    assert_eq!(sim.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn expect_100_continue_is_answered_before_the_body_is_sent() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (sim, proxy) = one_candidate(None).await;
    let body = chat_body("fast", false);
    let mut tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_millis(500), tcp.read(&mut buf))
        .await
        .expect("no 100 Continue within 500 ms")
        .unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 100"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    tcp.write_all(body.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !String::from_utf8_lossy(&answer).contains("chat.completion") && Instant::now() < deadline
    {
        let n = tcp.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert_eq!(sim.request_count(), 1);
}

/// Pingora writes `Content-Length` bodies through its bounded write buffer (flushed when full
/// and at the end) and flushes chunked ones per chunk; either way nothing waits for the whole
/// body. A provider dripping a JSON answer in pieces gets it to the client intact.
#[tokio::test(flavor = "multi_thread")]
async fn a_dripped_non_streaming_answer_arrives_intact() {
    let (sim, proxy) = one_candidate(None).await;
    sim.behaviour
        .set_fault(Fault::SlowDrip(Duration::from_millis(60)));
    for body in [chat_body("fast", false), chat_of_size("fast", 80 * 1024)] {
        let resp = post(&proxy, "/v1/chat/completions", body).await;
        assert_eq!(resp.status(), 200);
        let length: usize = resp.headers()["content-length"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let body = resp.bytes().await.unwrap();
        assert_eq!(body.len(), length);
        let v: serde_json::Value = serde_json::from_slice(&body).expect("whole JSON body");
        assert_eq!(v["object"], "chat.completion");
    }
}
