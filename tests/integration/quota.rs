//! Quota pacing end to end: providers announcing their quota in rate-limit headers, the
//! proxy pacing the candidate before its quota runs out, /status and /metrics showing it.

use crate::common;

use common::*;
use std::sync::Arc;
use std::time::{Duration, Instant};
use sturnus::fake_provider::QuotaHeaders;

/// Providers `a` (the faster) and `b` behind alias `fast`, warmed so both have a latency.
async fn warm_pair(a_ms: u64, b_ms: u64) -> (FakeProvider, FakeProvider, Proxy) {
    let a = FakeProvider::start("a").await.unwrap();
    let b = FakeProvider::start("b").await.unwrap();
    a.behaviour.set_latency(Duration::from_millis(a_ms));
    b.behaviour.set_latency(Duration::from_millis(b_ms));
    let config = format!(
        "{}{}\n[model]\nfast = [{{ provider = \"a\", model = \"ma\" }}, {{ provider = \"b\", model = \"mb\" }}]\n",
        provider_toml("a", &a, None),
        provider_toml("b", &b, None)
    );
    let proxy = Proxy::start(&config).await;
    let mut seen = (false, false);
    for _ in 0..200 {
        let (provider, _) = send(&client(), &proxy).await;
        match provider.as_str() {
            "a" => seen.0 = true,
            _ => seen.1 = true,
        }
        if seen == (true, true) {
            break;
        }
    }
    assert_eq!(seen, (true, true), "both candidates answer while cold");
    (a, b, proxy)
}

/// One chat completion through the proxy: the serving provider and the status.
async fn send(c: &reqwest::Client, proxy: &Proxy) -> (String, u16) {
    let resp = c
        .post(proxy.url("/v1/chat/completions"))
        .body(chat_body("fast", false))
        .send()
        .await
        .unwrap();
    let provider = resp.headers()["x-sturnus-provider"]
        .to_str()
        .unwrap()
        .to_string();
    let status = resp.status().as_u16();
    resp.bytes().await.unwrap();
    (provider, status)
}

/// Sends requests over `workers` connections until `until`; each answer's provider and status.
async fn drive_until(proxy: &Arc<Proxy>, workers: usize, until: Instant) -> Vec<(String, u16)> {
    let mut handles = Vec::new();
    for _ in 0..workers {
        let proxy = Arc::clone(proxy);
        handles.push(tokio::spawn(async move {
            let c = client();
            let mut out = Vec::new();
            while Instant::now() < until && out.len() < 5_000 {
                out.push(send(&c, &proxy).await);
            }
            out
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

fn candidate<'s>(status: &'s serde_json::Value, provider: &str) -> &'s serde_json::Value {
    common::status_candidate(status, provider)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quota_that_would_run_out_lowers_the_share_before_any_429() {
    // Unpaced, a (10 ms against 13 ms) would take over 80% of the traffic and use its 200
    // requests in about a second; the window lasts 5 s and the run stops at 3 s, inside it.
    let (a, _b, proxy) = warm_pair(10, 13).await;
    let proxy = Arc::new(proxy);
    a.behaviour
        .set_request_quota(200, Duration::from_secs(5), QuotaHeaders::OpenAi);
    let started = Instant::now();
    let served = drive_until(&proxy, 4, started + Duration::from_secs(3)).await;
    let inside = started.elapsed() < Duration::from_millis(4_800);
    let from_a: Vec<u16> = served
        .iter()
        .filter(|(p, _)| p == "a")
        .map(|(_, s)| *s)
        .collect();
    let share_a = from_a.len() as f64 / served.len() as f64;
    assert!(served.len() >= 200, "only {} requests", served.len());
    if inside {
        assert!(
            from_a.iter().all(|s| *s == 200),
            "a answered 429 within its window: {} of {} requests",
            from_a.iter().filter(|s| **s == 429).count(),
            from_a.len()
        );
    }
    assert!(!from_a.is_empty(), "a got no traffic at all");
    assert!(share_a < 0.5, "a kept {share_a} of the traffic");
    assert!(
        served.iter().all(|(_, s)| *s == 200) || !inside,
        "a client saw a failure"
    );

    // /status: the last reading and a pacing factor below 1 (still inside the window).
    let status = proxy.status().await;
    let ca = candidate(&status, "a");
    let requests = &ca["quota"]["requests"];
    assert_eq!(requests["limit"], 200, "{ca}");
    let remaining = requests["remaining"].as_u64().unwrap();
    assert!(remaining > 0 && remaining < 200, "{ca}");
    let reset_in = requests["reset_in_ms"].as_u64().unwrap();
    assert!(reset_in <= 5_000, "{ca}");
    assert!(ca["quota"]["tokens"].is_null(), "{ca}");
    if started.elapsed() < Duration::from_millis(4_800) {
        let pacing = ca["pacing"].as_f64().unwrap();
        assert!((0.01..1.0).contains(&pacing), "a's pacing {pacing}");
    }
    let cb = candidate(&status, "b");
    assert_eq!(cb["pacing"], 1.0);
    assert!(cb["quota"]["requests"].is_null() && cb["quota"]["tokens"].is_null());

    // /metrics: remaining ÷ limit for a, no series for b (it announced nothing).
    let m = proxy.metrics().await;
    let labels = |p: &'static str, model: &'static str| {
        [
            ("alias", "fast"),
            ("provider", p),
            ("model", model),
            ("kind", "requests"),
        ]
    };
    let ratio = m
        .value("sturnus_quota_remaining_ratio", &labels("a", "ma"))
        .expect("a's quota ratio");
    assert!(ratio > 0.0 && ratio < 1.0, "{ratio}");
    assert_eq!(
        m.value("sturnus_quota_remaining_ratio", &labels("b", "mb")),
        None
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exhausted_quota_keeps_traffic_off_until_the_reset() {
    // a may answer 3 requests per 2 s window, announced the Anthropic way: its third answer
    // says none is left, so it gets no fourth request (and answers no 429) until the reset.
    let (a, b, proxy) = warm_pair(5, 15).await;
    let window = Duration::from_secs(2);
    a.behaviour
        .set_request_quota(3, window, QuotaHeaders::Anthropic);
    let started = Instant::now();
    let (a_before, b_before) = (a.request_count(), b.request_count());
    let c = client();
    let mut statuses = Vec::new();
    while started.elapsed() < Duration::from_millis(1_600) && statuses.len() < 2_000 {
        statuses.push(send(&c, &proxy).await);
    }
    let inside = started.elapsed() < Duration::from_millis(1_900);
    assert!(
        statuses.iter().all(|(_, s)| *s == 200),
        "a client saw a failure"
    );
    if inside {
        assert_eq!(
            a.request_count() - a_before,
            3,
            "a got traffic after its quota ran out"
        );
    }
    assert!(
        b.request_count() - b_before >= 10,
        "b did not take the rest"
    );
    let status = proxy.status().await;
    let ca = candidate(&status, "a");
    assert_eq!(ca["quota"]["requests"]["remaining"], 0, "{ca}");
    assert_eq!(ca["quota"]["requests"]["limit"], 3, "{ca}");
    // The answer that announced the quota spent was itself a success: no probation after it.
    assert_eq!(ca["on_probation"], false, "{ca}");

    // After the reset, the faster candidate gets traffic again.
    tokio::time::sleep_until((started + window + Duration::from_millis(100)).into()).await;
    let before = a.request_count();
    for _ in 0..300 {
        if send(&c, &proxy).await.0 == "a" {
            break;
        }
    }
    assert!(a.request_count() > before, "a got nothing after its reset");
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_rate_limit_headers_change_nothing() {
    let (a, _b, proxy) = warm_pair(5, 15).await;
    a.set_response_headers(&[
        ("x-ratelimit-remaining-requests", "lots"),
        ("x-ratelimit-limit-requests", "100"),
        ("x-ratelimit-reset-requests", "soon"),
        ("x-ratelimit-remaining-tokens", "-5"),
        ("anthropic-ratelimit-requests-remaining", "0x0"),
        ("anthropic-ratelimit-tokens-remaining", "1e3"),
    ]);
    let c = client();
    let mut from_a = 0;
    for _ in 0..100 {
        let (provider, status) = send(&c, &proxy).await;
        assert_eq!(status, 200);
        from_a += usize::from(provider == "a");
    }
    assert!(from_a > 60, "the faster a got only {from_a} of 100");
    let status = proxy.status().await;
    for p in ["a", "b"] {
        let cand = candidate(&status, p);
        assert_eq!(cand["pacing"], 1.0, "{cand}");
        assert_eq!(
            cand["quota"],
            serde_json::json!({"requests": null, "tokens": null}),
            "{cand}"
        );
    }
    let text = proxy.metrics_text().await;
    assert!(!text.contains("sturnus_quota_remaining_ratio{"), "{text}");
}
