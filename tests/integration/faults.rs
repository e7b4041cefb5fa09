//! The upstream fault matrix: for each way a provider can fail, what the client receives, that
//! the candidate's statistics record it, and that sturnus goes on serving. Every fault is tried
//! with a small body (spliced into one buffer) and a 100 KiB body (sent as pieces of the
//! received body).

use crate::common;

use common::*;
use futures_util::StreamExt;
use serde_json::Value;
use std::time::{Duration, Instant};

/// A small body and one over 64 KiB, for `model`.
fn bodies(model: &str, stream: bool) -> [String; 2] {
    let large = chat_of_size(model, 100 * 1024);
    let large = if stream {
        large.replacen('{', "{\"stream\":true,", 1)
    } else {
        large
    };
    [chat_body(model, stream), large]
}

/// `up` behind alias `fast` (the provider that misbehaves), `ok` behind `steady`, plus extras.
struct Bench {
    up: FakeProvider,
    _ok: FakeProvider,
    proxy: Proxy,
}

async fn bench(extra_providers: &str, extra_aliases: &str, env: &[(&str, &str)]) -> Bench {
    let up = FakeProvider::start("up").await.unwrap();
    let ok = FakeProvider::start("ok").await.unwrap();
    let config = format!(
        "{}{}{extra_providers}\n[model]\nfast = [{{ provider = \"up\", model = \"m\" }}]\nsteady = [{{ provider = \"ok\", model = \"m\" }}]\n{extra_aliases}\n[routing]\nread_timeout_secs = 1\nconnect_timeout_secs = 1\n",
        provider_toml("up", &up, Some("sk-fault-test")),
        provider_toml("ok", &ok, None),
    );
    let proxy = Proxy::start_with(&config, env, &[]).await;
    Bench { up, _ok: ok, proxy }
}

/// The first candidate of `alias` on `/status`.
async fn candidate(proxy: &Proxy, alias: &str) -> Value {
    let status = proxy.status().await;
    status["aliases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["alias"] == alias)
        .unwrap_or_else(|| panic!("no alias {alias}"))["candidates"][0]
        .clone()
}

/// Asserts the candidate of `alias` has recorded `failures` failures, the last of `kind`.
async fn expect_failures(proxy: &Proxy, alias: &str, failures: u64, kind: &str) {
    // The outcome is recorded when the request's logging hook runs, just after the answer.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let c = candidate(proxy, alias).await;
        if c["failures"] == failures && c["in_flight"] == 0 {
            assert_eq!(c["last_error"]["kind"], kind, "{c}");
            assert!(c["last_error"]["at_unix_ms"].as_u64().unwrap() > 0, "{c}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "expected {failures} failures: {c}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// POSTs `body` and checks a JSON error with `status` and `code` comes back.
async fn expect_error(proxy: &Proxy, body: &str, status: u16, code: &str) {
    let resp = post(proxy, "/v1/chat/completions", body.to_string()).await;
    assert_eq!(resp.status(), status, "body of {} bytes", body.len());
    assert_eq!(resp.headers()["content-type"], "application/json");
    let err = error_of(resp).await;
    assert_eq!(err["code"], code, "{err}");
    assert!(
        !err["message"].as_str().unwrap().contains("sk-fault-test"),
        "{err}"
    );
}

/// Both body sizes are served by `alias` with a complete answer.
async fn expect_served(proxy: &Proxy, alias: &str) {
    for body in bodies(alias, false) {
        let resp = post(proxy, "/v1/chat/completions", body).await;
        assert_eq!(resp.status(), 200, "{alias} not served");
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["object"], "chat.completion");
    }
}

/// One fault, both body sizes: each request gets `status` with `code`, the candidate counts two
/// failures of `kind`, and once the fault clears the next request is served.
async fn expect_fault_answered(fault: Fault, status: u16, code: &str, kind: &str) {
    let b = bench("", "", &[]).await;
    b.up.behaviour.set_fault(fault);
    for body in bodies("fast", false) {
        expect_error(&b.proxy, &body, status, code).await;
    }
    expect_failures(&b.proxy, "fast", 2, kind).await;
    b.up.behaviour.set_fault(Fault::None);
    expect_served(&b.proxy, "fast").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn connection_refused() {
    let b = bench("", "", &[]).await;
    // Warm the pool first, so the dead provider's pooled connections are tried too.
    expect_served(&b.proxy, "fast").await;
    let addr = b.up.addr;
    b.up.shutdown();
    for body in bodies("fast", false) {
        expect_error(&b.proxy, &body, 502, "upstream_connect_error").await;
    }
    expect_failures(&b.proxy, "fast", 2, "connect").await;
    let _back = FakeProvider::start_on("up", addr).await.unwrap();
    expect_served(&b.proxy, "fast").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn accepts_but_never_answers_times_out_with_504() {
    expect_fault_answered(Fault::NeverAnswer, 504, "upstream_timeout", "timeout").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn closes_while_sending_headers() {
    expect_fault_answered(Fault::CloseDuringHeaders, 502, "upstream_error", "reset").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_that_closes_after_reading_the_request_sees_exactly_one_attempt() {
    let b = bench("", "", &[]).await;
    b.up.behaviour.set_fault(Fault::DropReused);
    for body in bodies("fast", false) {
        // The first request opens a connection and is answered; it goes back to the pool.
        let resp = post(&b.proxy, "/v1/chat/completions", body.clone()).await;
        assert_eq!(resp.status(), 200, "body of {} bytes", body.len());
        wait_until_idle(&b.proxy, "fast").await;
        b.up.clear_requests();
        // The next one goes out whole on that pooled connection, which the provider closes
        // after reading it: it may be generating, so the request is not sent again.
        expect_error(&b.proxy, &body, 502, "upstream_error").await;
        let seen = b.up.requests();
        assert_eq!(
            seen.len(),
            1,
            "the provider saw the request {} times",
            seen.len()
        );
    }
    let metrics = b.proxy.metrics_text().await;
    assert!(
        metrics.contains("sturnus_upstream_resends_total 0"),
        "{metrics}"
    );
}

/// Waits until no request of `alias` is in flight (its connection is back in the pool).
async fn wait_until_idle(proxy: &Proxy, alias: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while candidate(proxy, alias).await["in_flight"] != 0 {
        assert!(Instant::now() < deadline, "request still in flight");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_instead_of_http() {
    expect_fault_answered(Fault::Garbage, 502, "upstream_error", "reset").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resets_mid_stream_end_the_clients_stream_without_a_hang() {
    let b = bench("", "", &[]).await;
    b.up.behaviour.set_fault(Fault::ResetMidStream);
    let mut failures = 0;
    for stream in [true, false] {
        for body in bodies("fast", stream) {
            let resp = post(&b.proxy, "/v1/chat/completions", body).await;
            assert_eq!(resp.status(), 200, "headers were already relayed");
            let mut received = Vec::new();
            let mut broken = false;
            let mut chunks = resp.bytes_stream();
            let read_all = async {
                while let Some(piece) = chunks.next().await {
                    match piece {
                        Ok(bytes) => received.extend_from_slice(&bytes),
                        Err(_) => {
                            broken = true;
                            break;
                        }
                    }
                }
            };
            tokio::time::timeout(Duration::from_secs(10), read_all)
                .await
                .expect("the client's stream hung after the reset");
            let text = String::from_utf8_lossy(&received);
            if stream {
                assert!(text.contains("data: "), "no event before the reset: {text}");
                assert!(!text.contains("[DONE]"), "{text}");
            } else {
                assert!(
                    broken || serde_json::from_slice::<Value>(&received).is_err(),
                    "a cut answer looked complete: {text}"
                );
            }
            failures += 1;
            expect_failures(&b.proxy, "fast", failures, "reset").await;
        }
    }
    b.up.behaviour.set_fault(Fault::None);
    expect_served(&b.proxy, "fast").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_drip_just_inside_the_read_timeout_succeeds() {
    let b = bench("", "", &[]).await;
    // Gaps of 0.4 s under a 1 s read timeout; the whole answer takes over 2 s.
    b.up.behaviour
        .set_fault(Fault::SlowDrip(Duration::from_millis(400)));
    b.up.behaviour.set_chunks(5);
    for body in bodies("fast", true) {
        let resp = post(&b.proxy, "/v1/chat/completions", body).await;
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.unwrap();
        let tokens: Vec<&str> = text
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .collect();
        assert_eq!(tokens.len(), 7, "{text}");
        for (i, event) in tokens[..5].iter().enumerate() {
            assert!(
                event.contains(&format!("\"tok{i} \"")),
                "event {i}: {event}"
            );
        }
        assert_eq!(tokens[6], "[DONE]");
    }
    for body in bodies("fast", false) {
        let resp = post(&b.proxy, "/v1/chat/completions", body).await;
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["object"], "chat.completion");
    }
    let c = candidate(&b.proxy, "fast").await;
    assert_eq!(c["failures"], 0, "{c}");
    assert_eq!(c["last_error"], Value::Null, "{c}");
    assert_eq!(c["requests"], 4, "{c}");
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_handshake_failure_with_an_untrusted_certificate() {
    let secure = FakeProvider::start("secure").await.unwrap();
    let front = tls::front(secure.addr).await;
    let provider = format!(
        "[provider.secure]\nbase_url = \"https://127.0.0.1:{}/v1\"\napi_key = \"sk-fault-test\"\n",
        front.addr.port()
    );
    let b = bench(
        &provider,
        "tls = [{ provider = \"secure\", model = \"m\" }]\n",
        &[],
    )
    .await;
    for body in bodies("tls", false) {
        expect_error(&b.proxy, &body, 502, "upstream_tls_error").await;
    }
    expect_failures(&b.proxy, "tls", 2, "tls").await;
    assert_eq!(secure.request_count(), 0);
    expect_served(&b.proxy, "steady").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_that_does_not_resolve() {
    let b = bench(
        "[provider.ghost]\nbase_url = \"http://sturnus-fault-test.invalid:8080/v1\"\n",
        "ghost = [{ provider = \"ghost\", model = \"m\" }]\n",
        &[],
    )
    .await;
    for body in bodies("ghost", false) {
        expect_error(&b.proxy, &body, 502, "upstream_dns_error").await;
    }
    expect_failures(&b.proxy, "ghost", 2, "dns").await;
    expect_served(&b.proxy, "steady").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_leaving_mid_stream_closes_the_upstream_connection() {
    let b = bench("", "", &[]).await;
    // A 20-second stream; the client reads three events and leaves.
    b.up.behaviour.set_chunks(400);
    b.up.behaviour.set_chunk_interval(Duration::from_millis(50));
    for body in bodies("fast", true) {
        let resp = post(&b.proxy, "/v1/chat/completions", body).await;
        assert_eq!(resp.status(), 200);
        let mut chunks = resp.bytes_stream();
        let mut events = 0;
        while events < 3 {
            let piece = chunks.next().await.expect("stream ended early").unwrap();
            events += String::from_utf8_lossy(&piece).matches("data: ").count();
        }
        drop(chunks);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let c = candidate(&b.proxy, "fast").await;
            if b.up.open_connections() == 0 && c["in_flight"] == 0 {
                // The client left; the provider did nothing wrong.
                assert_eq!(c["failures"], 0, "{c}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "upstream still open ({}) or in flight: {c}",
                b.up.open_connections()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    b.up.behaviour.set_chunks(DEFAULT_CHUNKS);
    b.up.behaviour.set_chunk_interval(Duration::ZERO);
    expect_served(&b.proxy, "fast").await;
}
