//! Slow and hostile clients, and the memory budget: timeouts give 408, malformed requests a 4xx
//! and a closed connection, and every reserved byte comes back whatever happens to a request.

use crate::common;

use common::*;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

async fn setup(routing: &str) -> (FakeProvider, Proxy) {
    one_provider("m", None, &format!("[routing]\n{routing}")).await
}

/// A request head for a chat completion with a `Content-Length`.
fn head(len: usize) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: sturnus\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    )
}

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_drip_header_gets_408_and_the_connection_closes() {
    let (sim, proxy) = setup("header_timeout_secs = 1\n").await;
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    // One header line every 300 ms: every read is quick, the whole header is not.
    let writer = tokio::spawn(async move {
        let _ = write
            .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: sturnus\r\n")
            .await;
        for i in 0..30 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let line = format!("x-drip-{i}: y\r\n");
            if write.write_all(line.as_bytes()).await.is_err() {
                return i;
            }
        }
        30
    });
    let reply = read_until_closed(&mut read, WAIT).await;
    assert!(reply.closed, "the connection stayed open");
    assert_eq!(reply.status(), Some(408), "{:?}", reply);
    let err = reply.json()["error"].clone();
    assert_eq!(err["code"], "request_timeout", "{err}");
    assert!(err["message"].as_str().unwrap().contains("header"), "{err}");
    assert!(writer.await.unwrap() < 30, "the drip was never cut off");

    // A connection that sends nothing at all gets the same answer.
    let reply = raw_exchange(proxy.addr, b"", WAIT).await;
    assert_eq!((reply.status(), reply.closed), (Some(408), true));
    assert_eq!(sim.request_count(), 0);
    // Requests that arrive in time are served.
    let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", false)).await;
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_drip_body_gets_408_and_gives_its_budget_back() {
    let (sim, proxy) = setup("body_timeout_secs = 1\nmax_buffered_bytes = 1000000\n").await;
    let body = chat_of_size("fast", 100_000);
    let stream = TcpStream::connect(proxy.addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let bytes = body.into_bytes();
    let writer = tokio::spawn(async move {
        let _ = write.write_all(head(bytes.len()).as_bytes()).await;
        let _ = write.write_all(&bytes[..1000]).await;
        for piece in bytes[1000..].chunks(10) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write.write_all(piece).await.is_err() {
                return;
            }
        }
    });
    let reply = read_until_closed(&mut read, WAIT).await;
    assert!(reply.closed);
    assert_eq!(reply.status(), Some(408), "{reply:?}");
    assert_eq!(reply.json()["error"]["code"], "request_timeout");
    writer.abort();
    proxy.expect_budget_full("a body timeout").await;
    let status = proxy.status().await;
    assert!(status["budget"]["peak_bytes"].as_u64().unwrap() >= 100_000);
    assert_eq!(sim.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_requests_get_a_4xx_a_closed_connection_and_reach_nobody() {
    let (sim, proxy) = setup("").await;
    let body = chat_body("fast", false);
    let chunked = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let mut many = String::from("GET /health HTTP/1.1\r\nHost: x\r\n");
    for i in 0..300 {
        many.push_str(&format!("x-h{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let big = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nContent-Length: {}\r\n\r\n{body}",
        "a".repeat(70 * 1024),
        body.len()
    );
    // (case, bytes, expected status, our JSON code when sturnus itself answers)
    let cases: Vec<(&str, Vec<u8>, u16, Option<&str>)> = vec![
        (
            "not HTTP",
            b"\x16\x03\x01\x02\x00\x01\x00 hello\r\n\r\n".to_vec(),
            400,
            Some("malformed_request"),
        ),
        (
            "a header line without a colon",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost sturnus\r\n\r\n".to_vec(),
            400,
            Some("malformed_request"),
        ),
        (
            "Content-Length and Transfer-Encoding together",
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}",
                body.len()
            )
            .into_bytes(),
            400,
            Some("malformed_request"),
        ),
        (
            "a 70 KiB header",
            big.into_bytes(),
            431,
            Some("request_header_fields_too_large"),
        ),
        (
            "300 header lines",
            many.into_bytes(),
            431,
            Some("request_header_fields_too_large"),
        ),
        (
            "two different Content-Lengths",
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nContent-Length: 3\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
            400,
            None,
        ),
        (
            "HTTP/1.0 with Transfer-Encoding",
            format!(
                "POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{chunked}"
            )
            .into_bytes(),
            400,
            None,
        ),
        (
            "a malformed chunked body",
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
                .to_vec(),
            400,
            None,
        ),
    ];
    for (case, bytes, status, code) in cases {
        let reply = raw_exchange(proxy.addr, &bytes, WAIT).await;
        assert!(reply.closed, "{case}: connection left open");
        let got = reply.status();
        assert_eq!(
            got,
            Some(status),
            "{case}: {:?}",
            String::from_utf8_lossy(&reply.bytes)
        );
        if let Some(code) = code {
            assert_eq!(reply.json()["error"]["code"], code, "{case}");
            assert_eq!(
                reply.header("connection").as_deref(),
                Some("close"),
                "{case}"
            );
        }
    }
    assert_eq!(sim.request_count(), 0, "a malformed request was forwarded");
    let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", false)).await;
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_budget_comes_back_on_every_path() {
    let (sim, proxy) =
        setup("read_timeout_secs = 1\nconnect_timeout_secs = 1\nmax_buffered_bytes = 4000000\n")
            .await;
    let small = chat_body("fast", false);
    let large = chat_of_size("fast", 300_000);

    for body in [&small, &large] {
        let resp = post(&proxy, "/v1/chat/completions", body.clone()).await;
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
        proxy.expect_budget_full("a served request").await;
    }
    let resp = post(&proxy, "/v1/chat/completions", "{broken").await;
    assert_eq!(resp.status(), 400);
    proxy.expect_budget_full("a 400").await;
    let resp = post(
        &proxy,
        "/v1/chat/completions",
        chat_of_size("no-such-alias", 300_000),
    )
    .await;
    assert_eq!(resp.status(), 404);
    proxy.expect_budget_full("a 404").await;

    // The client leaves in the middle of its upload, once its body is reserved.
    let body = chat_of_size("fast", 3_000_000);
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream.write_all(head(body.len()).as_bytes()).await.unwrap();
    stream.write_all(&body.as_bytes()[..100_000]).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while proxy.budget_in_use().await < 3_000_000 {
        assert!(std::time::Instant::now() < deadline, "never reserved");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(stream);
    proxy
        .expect_budget_full("a client disconnect mid-upload")
        .await;

    // The provider never answers: 504 for the spliced and the sliced body alike.
    sim.behaviour.set_fault(Fault::NeverAnswer);
    for body in [&small, &large] {
        let resp = post(&proxy, "/v1/chat/completions", body.clone()).await;
        assert_eq!(resp.status(), 504);
        proxy.expect_budget_full("an upstream timeout").await;
    }
    // The provider is gone: 502 for both bodies.
    sim.shutdown();
    for body in [&small, &large] {
        let resp = post(&proxy, "/v1/chat/completions", body.clone()).await;
        assert_eq!(resp.status(), 502);
        proxy.expect_budget_full("a connect failure").await;
    }
    let status = proxy.status().await;
    assert_eq!(status["budget"]["rejections"], 0);
    assert!(status["budget"]["peak_bytes"].as_u64().unwrap() >= 3_000_000);
}

#[tokio::test(flavor = "multi_thread")]
async fn one_body_larger_than_the_whole_budget_gets_413_not_429() {
    let (sim, proxy) = setup("max_buffered_bytes = 100000\nmax_body_bytes = 1000000\n").await;
    let body = chat_of_size("fast", 200_000);
    let resp = post(&proxy, "/v1/chat/completions", body.clone()).await;
    assert_eq!(resp.status(), 413);
    let err = error_of(resp).await;
    assert_eq!(err["code"], "request_too_large", "{err}");
    assert!(
        err["message"].as_str().unwrap().contains("memory budget"),
        "{err}"
    );
    // The same body sent chunked is refused as it grows.
    let resp = post_chunked(&proxy, &body, 4096).await;
    assert_eq!(resp.status(), 413);
    // Over the per-request cap.
    let resp = post(
        &proxy,
        "/v1/chat/completions",
        chat_of_size("fast", 1_500_000),
    )
    .await;
    assert_eq!(resp.status(), 413);
    assert_eq!(proxy.status().await["budget"]["rejections"], 0);
    proxy.expect_budget_full("413s").await;
    assert_eq!(sim.request_count(), 0);
    let resp = post(&proxy, "/v1/chat/completions", chat_of_size("fast", 50_000)).await;
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_budget_answers_429_with_retry_after_until_it_drains() {
    let (sim, proxy) = setup("max_buffered_bytes = 100000\n").await;
    // One slow upload holds 80 of the 100 kB.
    let held = chat_of_size("fast", 80_000);
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream.write_all(head(held.len()).as_bytes()).await.unwrap();
    stream.write_all(&held.as_bytes()[..40_000]).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while proxy.budget_in_use().await < 80_000 {
        assert!(std::time::Instant::now() < deadline, "never reserved");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let resp = post(&proxy, "/v1/chat/completions", chat_of_size("fast", 50_000)).await;
    assert_eq!(resp.status(), 429);
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After in whole seconds");
    assert!((1..=30).contains(&retry), "{retry}");
    let err = error_of(resp).await;
    assert_eq!(err["code"], "memory_budget_exhausted", "{err}");
    assert_eq!(err["type"], "rate_limit_error", "{err}");
    // A chunked upload is refused as it grows past what is left.
    let body = chat_of_size("fast", 50_000);
    let resp = post_chunked(&proxy, &body, 4096).await;
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().contains_key("retry-after"));
    assert_eq!(proxy.status().await["budget"]["rejections"], 2);

    // The held upload completes and is served; then there is room again.
    stream.write_all(&held.as_bytes()[40_000..]).await.unwrap();
    let (mut read, _write) = stream.into_split();
    let reply = read_until_closed(&mut read, Duration::from_secs(2)).await;
    assert_eq!(reply.status(), Some(200));
    proxy.expect_budget_full("the held upload").await;
    let resp = post(&proxy, "/v1/chat/completions", chat_of_size("fast", 50_000)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(sim.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn startup_logs_the_budget_and_warns_about_a_non_loopback_listen() {
    let sim = FakeProvider::start("up").await.unwrap();
    let config =
        fast_alias_config("up", &sim, "m", None) + "[routing]\nmax_buffered_bytes = 12345678\n";
    let local = Proxy::start(&config).await;
    let logs = local.logs();
    assert!(
        logs.contains("memory budget for request bodies: 11.8 MiB (12345678 bytes), from routing.max_buffered_bytes"),
        "{logs}"
    );
    assert!(!logs.contains("not a loopback address"), "{logs}");
    let open = Proxy::start_listening("0.0.0.0", &config, &[], &["--allow-anonymous"]).await;
    let logs = open.logs();
    assert!(logs.contains("WARN"), "{logs}");
    assert!(
        logs.contains("is not a loopback address") && logs.contains("provider credentials"),
        "{logs}"
    );
    let status = open.status().await;
    assert_eq!(status["budget"]["limit_bytes"], 12_345_678);
}

#[tokio::test(flavor = "multi_thread")]
async fn bodies_over_the_per_request_cap_get_413_before_more_than_the_cap_is_buffered() {
    let (sim, proxy) = setup("max_body_bytes = 100000\n").await;
    let body = chat_of_size("fast", 150_000);
    // Declared up front: refused before a byte of the body is read.
    let resp = post(&proxy, "/v1/chat/completions", body.clone()).await;
    assert_eq!(resp.status(), 413);
    let err = error_of(resp).await;
    assert_eq!(err["code"], "request_too_large");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("limit of 100000 bytes"),
        "{err}"
    );
    assert_eq!(proxy.status().await["budget"]["peak_bytes"], 0);
    // Chunked: refused as soon as it passes the cap, never holding more than the cap.
    let resp = post_chunked(&proxy, &body, 4096).await;
    assert_eq!(resp.status(), 413);
    let status = proxy.status().await;
    let peak = status["budget"]["peak_bytes"].as_u64().unwrap();
    assert!(peak > 0 && peak <= 100_000, "peak {peak}");
    proxy.expect_budget_full("a 413").await;
    assert_eq!(sim.request_count(), 0);
    // Exactly at the cap is fine.
    let resp = post(
        &proxy,
        "/v1/chat/completions",
        chat_of_size("fast", 100_000),
    )
    .await;
    assert_eq!(resp.status(), 200);
}
