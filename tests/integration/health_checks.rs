//! Active health checks (`health_check = { ... }`), end to end: the real binary in front of
//! fake providers whose health endpoint fails, or which go down and come back up.

use crate::common;

use common::exposition::Exposition;
use common::*;
use std::time::{Duration, Instant};

/// A check every 0.2 s: out after 2 failures in a row, back after 1 pass.
const CHECK: &str =
    "health_check = { path = \"/health\", interval_secs = 0.2, unhealthy_after = 2, healthy_after = 1 }\n";

/// Provider `a` (no check) and provider `b` (checked, with an API key) behind alias `fast`, with
/// a large probe floor so that "no traffic at all" differs clearly from "the floor's share".
fn config(a: &FakeProvider, b_url: &str) -> String {
    format!(
        "{}[provider.b]\nbase_url = \"{b_url}/v1\"\napi_key = \"sk-b\"\n{CHECK}\
         [model]\nfast = [{{ provider = \"a\", model = \"ma\" }}, {{ provider = \"b\", model = \"mb\" }}]\n\
         [routing]\nprobe_floor = 0.2\n",
        provider_toml("a", a, None)
    )
}

/// Sends `n` chat requests (optionally pinned); returns the provider that served each, and
/// asserts every one succeeded.
async fn drive(proxy: &Proxy, n: usize, pin: Option<&str>) -> Vec<String> {
    let c = client();
    let mut served = Vec::with_capacity(n);
    for _ in 0..n {
        let mut req = c
            .post(proxy.url("/v1/chat/completions"))
            .body(chat_body("fast", false));
        if let Some(pin) = pin {
            req = req.header("x-session-affinity", pin);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let provider = resp.headers()["x-sturnus-provider"].to_str().unwrap();
        served.push(provider.to_string());
        resp.bytes().await.unwrap();
    }
    served
}

fn count(served: &[String], provider: &str) -> usize {
    served.iter().filter(|p| *p == provider).count()
}

/// Chat requests the fake provider received.
fn chats(sim: &FakeProvider) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .count()
}

/// `/status` → the candidate of alias `fast` served by `provider`.
async fn candidate(proxy: &Proxy, provider: &str) -> serde_json::Value {
    common::status_candidate(&proxy.status().await, provider).clone()
}

/// Waits (up to 10 s) until `/status` shows `provider` unhealthy (`true`) or not.
async fn wait_unhealthy(proxy: &Proxy, provider: &str, unhealthy: bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = candidate(proxy, provider).await["state"].clone();
        if (state == "unhealthy") == unhealthy {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{provider} still {state} after 10 s:\n{}",
            proxy.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn healthy_gauge(m: &Exposition, provider: &str) -> Option<f64> {
    m.value("sturnus_provider_healthy", &[("provider", provider)])
}

fn share(m: &Exposition, provider: &str, model: &str) -> f64 {
    let labels = [("alias", "fast"), ("provider", provider), ("model", model)];
    m.value("sturnus_routing_share", &labels).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_failing_its_health_check_gets_no_traffic_until_it_passes_again() {
    let a = FakeProvider::start("a").await.unwrap();
    let b = FakeProvider::start("b").await.unwrap();
    // b is the faster one: without its check failing it takes most of the traffic.
    a.behaviour.set_latency(Duration::from_millis(5));
    let proxy = Proxy::start(&config(&a, &b.base_url())).await;
    let before = drive(&proxy, 60, None).await;
    assert!(count(&before, "b") > 0, "b got no traffic while healthy");
    let m = proxy.metrics().await;
    assert_eq!(healthy_gauge(&m, "b"), Some(1.0));
    assert_eq!(healthy_gauge(&m, "a"), None, "a has no check, so no gauge");

    // b's API keeps answering; only its health endpoint fails.
    b.behaviour.set_health_status(503);
    wait_unhealthy(&proxy, "b", true).await;
    let b_chats = chats(&b);
    let during = drive(&proxy, 300, None).await;
    assert_eq!(count(&during, "a"), 300, "b served some of {during:?}");
    // A pin to the unhealthy candidate breaks: a answers and the header names it.
    let pinned = drive(&proxy, 20, Some("b/mb")).await;
    assert_eq!(count(&pinned, "a"), 20);
    assert_eq!(
        chats(&b),
        b_chats,
        "requests reached the unhealthy provider"
    );

    let cand = candidate(&proxy, "b").await;
    assert_eq!(cand["state"], "unhealthy");
    assert_eq!(cand["share"]["non_streaming"], 0.0);
    assert_eq!(cand["share"]["streaming"], 0.0);
    assert_eq!(candidate(&proxy, "a").await["share"]["non_streaming"], 1.0);
    let m = proxy.metrics().await;
    assert_eq!(healthy_gauge(&m, "b"), Some(0.0));
    assert_eq!(share(&m, "b", "mb"), 0.0);
    assert_eq!(share(&m, "a", "ma"), 1.0);
    let logs = proxy.logs();
    assert!(
        logs.contains("provider b failed its health check (GET /health) 2 time(s) in a row"),
        "{logs}"
    );

    // Every check sent b's own credentials and Host, never anything else.
    let checks: Vec<_> = b
        .requests()
        .into_iter()
        .filter(|r| r.path == "/health")
        .collect();
    assert!(checks.len() >= 3, "{} checks", checks.len());
    for check in &checks {
        assert_eq!(check.method, "GET");
        assert_eq!(check.header("authorization"), Some("Bearer sk-b"));
        assert_eq!(check.header("host"), Some(b.addr.to_string().as_str()));
    }

    b.behaviour.set_health_status(200);
    wait_unhealthy(&proxy, "b", false).await;
    let after = drive(&proxy, 100, None).await;
    assert!(
        count(&after, "b") > 20,
        "traffic did not return to b: {after:?}"
    );
    assert!(chats(&b) > b_chats);
    assert_eq!(healthy_gauge(&proxy.metrics().await, "b"), Some(1.0));
    assert!(proxy
        .logs()
        .contains("provider b passes its health check (GET /health) again"));
    assert!(!proxy.logs().contains("sk-b"), "the key reached the logs");
    let status = get(&proxy, "/status").await.text().await.unwrap();
    assert!(!status.contains("sk-b"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_that_goes_down_is_taken_out_and_its_traffic_returns_when_it_is_back() {
    let a = FakeProvider::start("a").await.unwrap();
    let b = FakeProvider::start("b").await.unwrap();
    let b_addr = b.addr;
    let proxy = Proxy::start(&config(&a, &b.base_url())).await;
    assert!(count(&drive(&proxy, 40, None).await, "b") > 0);

    // b goes away entirely: connections to it are refused.
    b.shutdown();
    wait_unhealthy(&proxy, "b", true).await;
    // Every request succeeds: not one is routed to b (it would fail with a 502).
    let during = drive(&proxy, 200, None).await;
    assert_eq!(count(&during, "a"), 200);
    assert_eq!(candidate(&proxy, "b").await["state"], "unhealthy");
    assert_eq!(healthy_gauge(&proxy.metrics().await, "b"), Some(0.0));

    // b comes back on the same address.
    let back = restart_on(b_addr).await;
    wait_unhealthy(&proxy, "b", false).await;
    let after = drive(&proxy, 100, None).await;
    assert!(count(&after, "b") > 0, "traffic did not return to b");
    assert_eq!(chats(&back), count(&after, "b"));
    assert_eq!(healthy_gauge(&proxy.metrics().await, "b"), Some(1.0));
}

#[tokio::test(flavor = "multi_thread")]
async fn when_every_candidate_is_unhealthy_the_alias_routes_as_if_none_were() {
    let a = FakeProvider::start("a").await.unwrap();
    let b = FakeProvider::start("b").await.unwrap();
    let config = config(&a, &b.base_url()).replace("[provider.b]", &format!("{CHECK}[provider.b]"));
    let proxy = Proxy::start(&config).await;
    a.behaviour.set_health_status(500);
    b.behaviour.set_health_status(500);
    wait_unhealthy(&proxy, "a", true).await;
    wait_unhealthy(&proxy, "b", true).await;
    let served = drive(&proxy, 100, None).await;
    assert!(
        count(&served, "a") > 0 && count(&served, "b") > 0,
        "{served:?}"
    );
    let pinned = drive(&proxy, 10, Some("b/mb")).await;
    assert_eq!(
        count(&pinned, "b"),
        10,
        "the pin holds when no candidate is healthy"
    );
    let m = proxy.metrics().await;
    assert_eq!(healthy_gauge(&m, "a"), Some(0.0));
    assert_eq!(healthy_gauge(&m, "b"), Some(0.0));
    assert!((share(&m, "a", "ma") + share(&m, "b", "mb") - 1.0).abs() < 1e-9);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_https_provider_is_checked_over_tls_against_the_trusted_roots() {
    let sim = FakeProvider::start("secure").await.unwrap();
    let front = tls::front(sim.addr).await;
    let config = format!(
        "[provider.secure]\nbase_url = \"https://127.0.0.1:{}/v1\"\napi_key = \"sk-tls\"\n{CHECK}\
         [model]\nfast = [{{ provider = \"secure\", model = \"m\" }}]\n",
        front.addr.port()
    );
    let ca = front.ca_pem.to_string_lossy().into_owned();
    let proxy = Proxy::start_with(&config, &[("SSL_CERT_FILE", ca.as_str())], &[]).await;
    // Checks pass over TLS: several arrive, with the key, and the provider stays healthy.
    let deadline = Instant::now() + Duration::from_secs(10);
    while sim
        .requests()
        .iter()
        .filter(|r| r.path == "/health")
        .count()
        < 3
    {
        assert!(
            Instant::now() < deadline,
            "no checks arrived:\n{}",
            proxy.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let check = sim
        .requests()
        .into_iter()
        .find(|r| r.path == "/health")
        .unwrap();
    assert_eq!(check.header("authorization"), Some("Bearer sk-tls"));
    assert_eq!(candidate(&proxy, "secure").await["state"], "cold");
    sim.behaviour.set_health_status(503);
    wait_unhealthy(&proxy, "secure", true).await;
    sim.behaviour.set_health_status(200);
    wait_unhealthy(&proxy, "secure", false).await;

    // Without the test CA among the roots, the TLS handshake fails, and so does the check.
    let untrusted = Proxy::start(&config).await;
    wait_unhealthy(&untrusted, "secure", true).await;
    assert_eq!(
        healthy_gauge(&untrusted.metrics().await, "secure"),
        Some(0.0)
    );
    assert!(
        untrusted.logs().contains("becomes unhealthy"),
        "{}",
        untrusted.logs()
    );
}

#[test]
fn an_invalid_health_check_stops_startup_with_a_precise_message() {
    let dir = scratch_dir();
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        "[provider.b]\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         health_check = { path = \"health\", interval_secs = 0, unhealthy_after = 0 }\n\
         [model]\nfast = [{ provider = \"b\", model = \"mb\" }]\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sturnus"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for line in [
        "provider.b.health_check.path: \"health\" must start with '/' (a path on the provider's host)",
        "provider.b.health_check.interval_secs: 0 is out of range (must be > 0 and <= 86400 seconds)",
        "provider.b.health_check.unhealthy_after: 0 is out of range (must be an integer >= 1 and <= 1000000)",
    ] {
        assert!(stderr.contains(line), "missing {line:?} in:\n{stderr}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A fake provider started again on `addr` (retrying while the old socket lets go).
async fn restart_on(addr: std::net::SocketAddr) -> FakeProvider {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match FakeProvider::start_on("b", addr).await {
            Ok(sim) => return sim,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "cannot listen on {addr} again: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
