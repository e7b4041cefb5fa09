//! Observability, black-box: Prometheus metrics parsed from a real scrape, W3C trace context as
//! the provider receives it, `x-request-id` on every answer, JSON access logs without secrets,
//! the extended `/status`, and the separate `metrics_listen` listener.

use crate::common;

use common::exposition::{labels_of, Exposition, Labels};
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const PROM_CONTENT_TYPE: &str = "text/plain; version=0.0.4";
const LE: [&str; 14] = [
    "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "20", "30", "60", "120", "+Inf",
];
const OVERHEAD_LE: [&str; 12] = [
    "0.00005", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
    "0.1", "+Inf",
];
const KINDS: [&str; 7] = [
    "connect",
    "timeout",
    "tls",
    "dns",
    "auth",
    "reset",
    "client_closed",
];

/// A chat request for `model`, optionally pinned to a candidate, with extra headers.
async fn chat(
    proxy: &Proxy,
    model: &str,
    stream: bool,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    chat_with_body(proxy, chat_body(model, stream), headers).await
}

async fn chat_with_body(
    proxy: &Proxy,
    body: String,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = client()
        .post(proxy.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("request to sturnus")
}

/// A chat body over 64 KiB (sent upstream as pieces of the received body).
fn large_body(model: &str) -> String {
    let filler = "x".repeat(80 * 1024);
    format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"{filler}"}}]}}"#)
}

/// `GET url` → (content type, parsed exposition).
async fn scrape(url: &str) -> (String, Exposition) {
    let resp = client().get(url).send().await.expect("scrape");
    assert_eq!(resp.status(), 200);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    let text = resp.text().await.unwrap();
    let parsed = Exposition::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    (ct, parsed)
}

fn cand(alias: &str, provider: &str, model: &str) -> Vec<(&'static str, String)> {
    vec![
        ("alias", alias.to_string()),
        ("provider", provider.to_string()),
        ("model", model.to_string()),
    ]
}

/// Labels of a candidate plus one more label.
fn with(base: &[(&'static str, String)], extra: (&str, &str)) -> Labels {
    let mut l: Labels = base
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    l.insert(extra.0.to_string(), extra.1.to_string());
    l
}

fn plain(base: &[(&'static str, String)]) -> Labels {
    base.iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// Every sample of `name` as labels → value.
fn values(m: &Exposition, name: &str) -> BTreeMap<Labels, f64> {
    m.series(name)
        .into_iter()
        .map(|s| (s.labels.clone(), s.value))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_known_traffic_exactly() {
    let up = FakeProvider::start("up").await.unwrap();
    let alt = FakeProvider::start("alt").await.unwrap();
    let bad = FakeProvider::start("bad").await.unwrap();
    let gone = FakeProvider::start("gone").await.unwrap();
    let hang = FakeProvider::start("hang").await.unwrap();
    bad.behaviour.set_fault(Fault::Status(500));
    hang.behaviour.set_fault(Fault::NeverAnswer);
    let config = format!(
        "{}{}{}{}{}\n[routing]\nread_timeout_secs = 1\n\n[model]\n\
         fast = [{{ provider = \"up\", model = \"real-a\" }}, {{ provider = \"alt\", model = \"real-b\" }}]\n\
         broken = [{{ provider = \"bad\", model = \"real-c\" }}]\n\
         down = [{{ provider = \"gone\", model = \"real-d\" }}]\n\
         slow = [{{ provider = \"hang\", model = \"real-e\" }}]\n\
         shared = [{{ provider = \"up\", model = \"real-a\" }}]\n",
        provider_toml("up", &up, None),
        provider_toml("alt", &alt, None),
        provider_toml("bad", &bad, None),
        provider_toml("gone", &gone, None),
        provider_toml("hang", &hang, None),
    );
    let proxy = Proxy::start(&config).await;
    gone.shutdown();

    // Before any traffic: every configured series exists at zero.
    let (ct, m) = scrape(&proxy.url("/metrics")).await;
    assert_eq!(ct, PROM_CONTENT_TYPE);
    let fast_up = cand("fast", "up", "real-a");
    assert_eq!(
        m.value(
            "sturnus_errors_total",
            &[
                ("alias", "down"),
                ("provider", "gone"),
                ("model", "real-d"),
                ("kind", "connect")
            ]
        ),
        Some(0.0)
    );

    let pin = [("x-session-affinity", "up/real-a")];
    for _ in 0..3 {
        let r = chat(&proxy, "fast", false, &pin).await;
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
    }
    for _ in 0..2 {
        let r = chat(&proxy, "fast", true, &pin).await;
        assert_eq!(r.status(), 200);
        assert!(r.text().await.unwrap().contains("[DONE]"));
    }
    let r = chat_with_body(&proxy, large_body("fast"), &pin).await;
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    assert_eq!(chat(&proxy, "broken", false, &[]).await.status(), 500);
    assert_eq!(chat(&proxy, "down", false, &[]).await.status(), 502);
    assert_eq!(chat(&proxy, "slow", false, &[]).await.status(), 504);
    assert_eq!(chat(&proxy, "nope", false, &[]).await.status(), 404);
    let r = post(&proxy, "/v1/chat/completions", "{not json").await;
    assert_eq!(r.status(), 400);

    let m = proxy.settled_metrics().await;

    // Exactly the ten families, with their types.
    let types: BTreeMap<&str, &str> = m
        .types
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        types,
        BTreeMap::from([
            ("sturnus_build_info", "gauge"),
            ("sturnus_buffer_rejections_total", "counter"),
            ("sturnus_upstream_resends_total", "counter"),
            ("sturnus_errors_total", "counter"),
            ("sturnus_inflight_requests", "gauge"),
            ("sturnus_latency_seconds", "histogram"),
            ("sturnus_overhead_seconds", "histogram"),
            ("sturnus_requests_total", "counter"),
            ("sturnus_routes_total", "counter"),
            ("sturnus_routing_share", "gauge"),
            ("sturnus_ttfc_seconds", "histogram"),
        ])
    );

    let configured = [
        cand("fast", "up", "real-a"),
        cand("fast", "alt", "real-b"),
        cand("broken", "bad", "real-c"),
        cand("down", "gone", "real-d"),
        cand("slow", "hang", "real-e"),
        cand("shared", "up", "real-a"),
    ];

    // Requests: one pre-created 200 series per candidate, plus the 500 that was relayed.
    let mut want: BTreeMap<Labels, f64> = configured
        .iter()
        .map(|c| (with(c, ("status_code", "200")), 0.0))
        .collect();
    want.insert(with(&fast_up, ("status_code", "200")), 6.0);
    want.insert(
        with(&cand("broken", "bad", "real-c"), ("status_code", "500")),
        1.0,
    );
    assert_eq!(values(&m, "sturnus_requests_total"), want);

    // Transport failures and clients that left: every kind for every candidate, two counted.
    let mut want: BTreeMap<Labels, f64> = configured
        .iter()
        .flat_map(|c| KINDS.iter().map(move |k| (with(c, ("kind", k)), 0.0)))
        .collect();
    want.insert(
        with(&cand("down", "gone", "real-d"), ("kind", "connect")),
        1.0,
    );
    want.insert(
        with(&cand("slow", "hang", "real-e"), ("kind", "timeout")),
        1.0,
    );
    assert_eq!(values(&m, "sturnus_errors_total"), want);

    // Routes: every reason pre-created per candidate; the six pinned requests to up count as
    // session_affinity, nothing was held.
    let routes = values(&m, "sturnus_routes_total");
    let reasons = ["pick", "session_affinity", "prefix_affinity", "held_object"];
    assert_eq!(routes.len(), configured.len() * reasons.len());
    assert_eq!(routes[&with(&fast_up, ("route", "session_affinity"))], 6.0);
    assert!(routes
        .iter()
        .filter(|(l, _)| l["route"] == "held_object")
        .all(|(_, v)| *v == 0.0));

    // TTFC and latency: four non-streaming and two streaming responses from up, one from bad.
    for family in ["sturnus_ttfc_seconds", "sturnus_latency_seconds"] {
        let mut want: BTreeMap<Labels, f64> = configured
            .iter()
            .flat_map(|c| ["true", "false"].map(|s| (with(c, ("stream", s)), 0.0)))
            .collect();
        want.insert(with(&fast_up, ("stream", "false")), 4.0);
        want.insert(with(&fast_up, ("stream", "true")), 2.0);
        want.insert(
            with(&cand("broken", "bad", "real-c"), ("stream", "false")),
            1.0,
        );
        assert_eq!(values(&m, &format!("{family}_count")), want, "{family}");
        for labels in want.keys() {
            let pairs: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let les: Vec<String> = m.buckets(family, &pairs).into_iter().map(|b| b.0).collect();
            assert_eq!(les, LE, "{family} {labels:?}");
        }
    }

    // Overhead: one observation per provider response, per alias (the connect failure and the
    // timeout had none).
    let mut want: BTreeMap<Labels, f64> = ["fast", "broken", "down", "slow", "shared"]
        .iter()
        .flat_map(|a| ["true", "false"].map(|s| (labels_of(&[("alias", a), ("stream", s)]), 0.0)))
        .collect();
    want.insert(labels_of(&[("alias", "fast"), ("stream", "false")]), 4.0);
    want.insert(labels_of(&[("alias", "fast"), ("stream", "true")]), 2.0);
    want.insert(labels_of(&[("alias", "broken"), ("stream", "false")]), 1.0);
    assert_eq!(values(&m, "sturnus_overhead_seconds_count"), want);
    let les: Vec<String> = m
        .buckets(
            "sturnus_overhead_seconds",
            &[("alias", "fast"), ("stream", "true")],
        )
        .into_iter()
        .map(|b| b.0)
        .collect();
    assert_eq!(les, OVERHEAD_LE);

    // Gauges: one series per candidate, nothing in flight, shares summing to 1 per alias.
    let per_candidate: BTreeSet<Labels> = configured.iter().map(|c| plain(c)).collect();
    let inflight = values(&m, "sturnus_inflight_requests");
    assert_eq!(
        inflight.keys().cloned().collect::<BTreeSet<_>>(),
        per_candidate
    );
    assert!(inflight.values().all(|v| *v == 0.0));
    let shares = values(&m, "sturnus_routing_share");
    assert_eq!(
        shares.keys().cloned().collect::<BTreeSet<_>>(),
        per_candidate
    );
    for alias in ["fast", "broken", "down", "slow", "shared"] {
        let total: f64 = shares
            .iter()
            .filter(|(l, _)| l["alias"] == alias)
            .map(|(_, v)| *v)
            .sum();
        assert!((total - 1.0).abs() < 1e-9, "{alias}: {total}");
    }
    assert!(shares.values().all(|v| (0.0..=1.0).contains(v)));

    assert_eq!(
        values(&m, "sturnus_build_info"),
        BTreeMap::from([(labels_of(&[("version", VERSION)]), 1.0)])
    );
    assert_eq!(
        values(&m, "sturnus_buffer_rejections_total"),
        BTreeMap::from([(Labels::new(), 0.0)])
    );

    // Label values only ever come from the config.
    let aliases = BTreeSet::from(["fast", "broken", "down", "slow", "shared"]);
    for s in &m.samples {
        if let Some(a) = s.labels.get("alias") {
            assert!(aliases.contains(a.as_str()), "unexpected alias label {a}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn inflight_gauge_and_status_follow_a_request_until_it_ends() {
    let sim = FakeProvider::start("slowpoke").await.unwrap();
    sim.behaviour.set_latency(Duration::from_millis(1500));
    let config = fast_alias_config("slowpoke", &sim, "m", None);
    let proxy = std::sync::Arc::new(Proxy::start(&config).await);
    let labels = [("alias", "fast"), ("provider", "slowpoke"), ("model", "m")];
    let p = proxy.clone();
    let pending = tokio::spawn(async move {
        let r = chat(&p, "fast", false, &[]).await;
        (r.status(), r.bytes().await.unwrap().len())
    });
    let mut seen = false;
    for _ in 0..200 {
        let (_, m) = scrape(&proxy.url("/metrics")).await;
        if m.value("sturnus_inflight_requests", &labels) == Some(1.0) {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(seen, "the request never showed as in flight");
    let status = proxy.status().await;
    assert_eq!(status["aliases"][0]["candidates"][0]["in_flight"], 1);
    assert_eq!(status["totals"]["in_flight"], 1);
    let (code, len) = pending.await.unwrap();
    assert_eq!(code, 200);
    assert!(len > 0);
    let m = proxy.settled_metrics().await;
    assert_eq!(m.value("sturnus_inflight_requests", &labels), Some(0.0));
    assert_eq!(
        m.value(
            "sturnus_requests_total",
            &[labels[0], labels[1], labels[2], ("status_code", "200")]
        ),
        Some(1.0)
    );
}

/// A `traceparent` the way W3C defines version 00: lowercase hex, non-zero ids.
fn parse_traceparent(v: &str) -> (String, String, String) {
    let parts: Vec<&str> = v.split('-').collect();
    assert_eq!(parts.len(), 4, "{v}");
    assert_eq!(parts[0], "00", "{v}");
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    };
    assert!(hex(parts[1], 32) && parts[1] != "0".repeat(32), "{v}");
    assert!(hex(parts[2], 16) && parts[2] != "0".repeat(16), "{v}");
    assert!(hex(parts[3], 2), "{v}");
    (parts[1].into(), parts[2].into(), parts[3].into())
}

fn access_lines(proxy: &Proxy) -> Vec<Value> {
    proxy
        .logs()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "sturnus::access")
        .collect()
}

/// The access line of the request with this id (waits briefly: it is written after the answer).
async fn access_line(proxy: &Proxy, request_id: &str) -> Value {
    for _ in 0..200 {
        let found: Vec<Value> = access_lines(proxy)
            .into_iter()
            .filter(|v| v["request_id"] == request_id)
            .collect();
        match found.len() {
            0 => tokio::time::sleep(Duration::from_millis(25)).await,
            1 => return found.into_iter().next().unwrap(),
            n => panic!("{n} access lines for {request_id}"),
        }
    }
    panic!("no access line for {request_id}:\n{}", proxy.logs());
}

fn request_id_of(r: &reqwest::Response) -> String {
    r.headers()
        .get("x-request-id")
        .expect("x-request-id on the answer")
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_valid_traceparent_continues_upstream_on_both_paths() {
    let (sim, proxy) = one_provider("real", Some("sk-trace"), "").await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    for (flags, body) in [
        ("01", chat_body("fast", false)),
        ("00", large_body("fast")),
        ("01", chat_body("fast", true)),
    ] {
        sim.clear_requests();
        let incoming = format!("00-{trace_id}-{parent}-{flags}");
        let r = chat_with_body(
            &proxy,
            body,
            &[
                ("traceparent", &incoming),
                ("tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"),
            ],
        )
        .await;
        assert_eq!(r.status(), 200);
        let id = request_id_of(&r);
        r.bytes().await.unwrap();
        let got = sim.requests().pop().expect("provider saw the request");
        let (t, p, f) = parse_traceparent(got.header("traceparent").expect("traceparent upstream"));
        assert_eq!(t, trace_id);
        assert_ne!(p, parent, "sturnus's own span id is the new parent");
        assert_eq!(f, flags);
        assert_eq!(
            got.header("tracestate"),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        assert_eq!(got.header("x-request-id"), Some(id.as_str()));
        let line = access_line(&proxy, &id).await;
        assert_eq!(line["trace_id"], trace_id);
        assert_eq!(line["span_id"], p.as_str());
        assert_eq!(line["parent_span_id"], parent);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn absent_or_invalid_traceparents_start_a_fresh_trace() {
    let (sim, proxy) = one_provider("real", None, "").await;
    let cases = [
        None,
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1"),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-011"),
        Some("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01"),
        Some("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01"),
        Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
        Some("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"),
        Some("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        Some("not a traceparent"),
    ];
    let mut trace_ids = BTreeSet::new();
    for (i, case) in cases.iter().enumerate() {
        sim.clear_requests();
        let mut headers = vec![("tracestate", "stale=1")];
        if let Some(v) = case {
            headers.push(("traceparent", v));
        }
        let body = if i % 2 == 0 {
            chat_body("fast", false)
        } else {
            large_body("fast")
        };
        let r = chat_with_body(&proxy, body, &headers).await;
        assert_eq!(r.status(), 200, "{case:?}");
        let id = request_id_of(&r);
        r.bytes().await.unwrap();
        let got = sim.requests().pop().expect("provider saw the request");
        let (t, p, f) = parse_traceparent(got.header("traceparent").expect("traceparent"));
        assert_ne!(t, "4bf92f3577b34da6a3ce929d0e0e4736", "{case:?}");
        assert_ne!(p, "00f067aa0ba902b7", "{case:?}");
        assert_eq!(f, "01");
        assert_eq!(
            got.header("tracestate"),
            None,
            "{case:?}: stale tracestate forwarded"
        );
        assert!(trace_ids.insert(t.clone()), "trace id reused");
        let line = access_line(&proxy, &id).await;
        assert_eq!(line["trace_id"], t.as_str());
        assert_eq!(line["span_id"], p.as_str());
        assert!(line["parent_span_id"].is_null());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_answer_carries_x_request_id() {
    let up = FakeProvider::start("up").await.unwrap();
    let gone = FakeProvider::start("gone").await.unwrap();
    let config = format!(
        "{}{}\n[model]\nfast = [{{ provider = \"up\", model = \"real\" }}]\n\
         down = [{{ provider = \"gone\", model = \"real\" }}]\n",
        provider_toml("up", &up, None),
        provider_toml("gone", &gone, None)
    );
    let proxy = Proxy::start(&config).await;
    gone.shutdown();

    let mut ids = BTreeSet::new();
    let answers = [
        (chat(&proxy, "fast", false, &[]).await, 200),
        (chat(&proxy, "fast", true, &[]).await, 200),
        (chat(&proxy, "nope", false, &[]).await, 404),
        (chat(&proxy, "down", false, &[]).await, 502),
        (post(&proxy, "/v1/chat/completions", "{").await, 400),
        (post(&proxy, "/v2/elsewhere", "{}").await, 404),
        (get(&proxy, "/health").await, 200),
        (get(&proxy, "/metrics").await, 200),
    ];
    for (r, status) in answers {
        assert_eq!(r.status(), status);
        let id = request_id_of(&r);
        assert_eq!(id.len(), 36, "{id}");
        assert!(ids.insert(id.clone()), "request id reused");
        let line = access_line(&proxy, &id).await;
        assert_eq!(line["status"], status);
    }

    // A client's own id is kept, echoed and forwarded; an unsafe one is replaced.
    up.clear_requests();
    let r = chat(&proxy, "fast", false, &[("x-request-id", "client-id-42")]).await;
    assert_eq!(request_id_of(&r), "client-id-42");
    assert_eq!(
        up.requests()[0].header("x-request-id"),
        Some("client-id-42")
    );
    let r = chat(&proxy, "nope", false, &[("x-request-id", "client-id-43")]).await;
    assert_eq!(r.status(), 404);
    assert_eq!(request_id_of(&r), "client-id-43");
    let r = chat(
        &proxy,
        "fast",
        false,
        &[("x-request-id", "has spaces \"and quotes\"")],
    )
    .await;
    let id = request_id_of(&r);
    assert_eq!(id.len(), 36);
    access_line(&proxy, &id).await;
}

const ACCESS_FIELDS: [&str; 19] = [
    "timestamp",
    "level",
    "request_id",
    "trace_id",
    "span_id",
    "alias",
    "provider",
    "model",
    "stream",
    "status",
    "outcome",
    "ttfc_ms",
    "duration_ms",
    "request_bytes",
    "response_bytes",
    "method",
    "path",
    "parent_span_id",
    "error_kind",
];

#[tokio::test(flavor = "multi_thread")]
async fn logs_are_json_lines_with_access_fields_and_never_a_key() {
    let up = FakeProvider::start("up").await.unwrap();
    let denied = FakeProvider::start("denied").await.unwrap();
    let gone = FakeProvider::start("gone").await.unwrap();
    denied.behaviour.set_fault(Fault::Status(401));
    let keys = [
        "sk-up-SECRET-7f3a9c1e5b",
        "sk-denied-SECRET-2d8b6f0a4c",
        "sk-gone-SECRET-9e1c3a5b7d",
        "sk-env-SECRET-0a2c4e6f8b",
    ];
    let client_key = "sk-client-SECRET-5b7d9f1a3c";
    let config = format!(
        "{}{}{}[provider.envy]\nbase_url = \"{}/v1\"\napi_key = \"${{ENVY_KEY}}\"\n\n[model]\n\
         fast = [{{ provider = \"up\", model = \"real\" }}]\n\
         denied = [{{ provider = \"denied\", model = \"real\" }}]\n\
         down = [{{ provider = \"gone\", model = \"real\" }}]\n\
         envy = [{{ provider = \"envy\", model = \"real\" }}]\n",
        provider_toml("up", &up, Some(keys[0])),
        provider_toml("denied", &denied, Some(keys[1])),
        provider_toml("gone", &gone, Some(keys[2])),
        up.base_url(),
    );
    let proxy = Proxy::start_with(&config, &[("ENVY_KEY", keys[3])], &[]).await;
    gone.shutdown();

    let auth = format!("Bearer {client_key}");
    let client_headers = [("authorization", auth.as_str()), ("x-api-key", client_key)];
    let mut expected = Vec::new();
    for (model, stream, status, outcome) in [
        ("fast", false, 200, "success"),
        ("fast", true, 200, "success"),
        ("envy", false, 200, "success"),
        ("denied", false, 401, "failure"),
        ("down", false, 502, "failure"),
        ("nope", false, 404, "client_error"),
    ] {
        let r = chat(&proxy, model, stream, &client_headers).await;
        assert_eq!(r.status(), status, "{model}");
        let id = request_id_of(&r);
        let len = r.bytes().await.unwrap().len();
        expected.push((id, model, stream, status, outcome, len));
    }
    let status = get(&proxy, "/status").await;
    let status_text = status.text().await.unwrap();
    let metrics_text = proxy.metrics_text().await;

    for (id, model, stream, status, outcome, len) in &expected {
        let line = access_line(&proxy, id).await;
        for field in ACCESS_FIELDS {
            assert!(line.get(field).is_some(), "{field} missing in {line}");
        }
        assert_eq!(line["level"], "INFO");
        assert!(line["timestamp"].as_str().unwrap().ends_with('Z'));
        assert_eq!(line["status"], *status);
        assert_eq!(line["outcome"], *outcome);
        assert_eq!(line["method"], "POST");
        assert_eq!(line["path"], "/v1/chat/completions");
        assert_eq!(line["response_bytes"], *len as u64);
        assert_eq!(
            line["request_bytes"],
            chat_body(model, *stream).len() as u64
        );
        assert!(line["duration_ms"].as_f64().unwrap() >= 0.0);
        assert_eq!(line["trace_id"].as_str().unwrap().len(), 32);
        assert_eq!(line["span_id"].as_str().unwrap().len(), 16);
        if *model == "nope" {
            // Not a configured alias: nothing of the request is echoed.
            assert!(line["alias"].is_null() && line["provider"].is_null());
            assert!(line["model"].is_null() && line["stream"].is_null());
            assert!(line["ttfc_ms"].is_null());
        } else {
            assert_eq!(line["alias"], *model);
            assert_eq!(line["model"], "real");
            assert_eq!(line["stream"], *stream);
        }
        match *model {
            "down" => {
                assert_eq!(line["error_kind"], "connect");
                assert!(line["ttfc_ms"].is_null());
            }
            "nope" => {}
            _ => {
                assert!(line["error_kind"].is_null());
                assert!(line["ttfc_ms"].as_f64().unwrap() >= 0.0);
            }
        }
    }

    let logs = proxy.logs();
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        for field in ["timestamp", "level", "target", "message"] {
            assert!(v.get(field).is_some(), "{field} missing: {line}");
        }
    }
    assert!(
        logs.contains("alias fast -> 1 candidate(s): up/real"),
        "startup lines missing:\n{logs}"
    );
    for secret in keys.iter().chain([&client_key]) {
        for (what, text) in [
            ("logs", &logs),
            ("/status", &status_text),
            ("/metrics", &metrics_text),
        ] {
            assert!(!text.contains(secret), "{secret} appears in {what}");
            assert!(!text.contains("SECRET"), "a key fragment appears in {what}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn log_format_can_be_chosen() {
    let sim = FakeProvider::start("up").await.unwrap();
    let config = fast_alias_config("up", &sim, "real", None);
    for (env, args) in [
        (vec![], vec!["--log-format", "pretty"]),
        (vec![("STURNUS_LOG_FORMAT", "pretty")], vec![]),
    ] {
        let proxy = Proxy::start_with(&config, &env, &args).await;
        let r = chat(&proxy, "fast", false, &[]).await;
        let id = request_id_of(&r);
        let mut found = None;
        for _ in 0..200 {
            found = proxy
                .logs()
                .lines()
                .find(|l| l.contains(&id))
                .map(String::from);
            if found.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let line = found.expect("access line");
        assert!(serde_json::from_str::<Value>(&line).is_err(), "{line}");
        assert!(
            line.contains(" INFO  sturnus::access: access request_id="),
            "{line}"
        );
        assert!(
            line.contains(" alias=fast ") && line.contains(" status=200 "),
            "{line}"
        );
        assert!(proxy
            .logs()
            .contains("sturnus::observe: alias fast -> 1 candidate(s): up/real"));
    }
    let proxy = Proxy::start_with(&config, &[("STURNUS_LOG_FORMAT", "json")], &[]).await;
    assert!(proxy
        .logs()
        .lines()
        .any(|l| serde_json::from_str::<Value>(l)
            .is_ok_and(|v| v["message"] == "alias fast -> 1 candidate(s): up/real")));
}

#[tokio::test(flavor = "multi_thread")]
async fn status_shows_weights_last_errors_and_totals_in_config_order() {
    let up = FakeProvider::start("up").await.unwrap();
    let gone = FakeProvider::start("gone").await.unwrap();
    let config = format!(
        "{}{}\n[model]\nzeta = [{{ provider = \"up\", model = \"z1\" }}, {{ provider = \"gone\", model = \"z2\" }}]\n\
         alpha = [{{ provider = \"gone\", model = \"a1\" }}]\n",
        provider_toml("up", &up, Some("sk-status-SECRET")),
        provider_toml("gone", &gone, Some("sk-status-SECRET2"))
    );
    let proxy = Proxy::start(&config).await;
    gone.shutdown();
    for _ in 0..2 {
        let r = chat(&proxy, "zeta", false, &[("x-session-affinity", "up/z1")]).await;
        assert_eq!(r.status(), 200);
    }
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert_eq!(chat(&proxy, "alpha", true, &[]).await.status(), 502);
    proxy.settled_metrics().await;

    let s = proxy.status().await;
    assert!(!s.to_string().contains("SECRET"));
    let aliases: Vec<&str> = s["aliases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["alias"].as_str().unwrap())
        .collect();
    assert_eq!(aliases, ["zeta", "alpha"]);
    let zeta = &s["aliases"][0];
    assert_eq!(zeta["routed"]["non_streaming"], 2);
    let cands = zeta["candidates"].as_array().unwrap();
    let names: Vec<String> = cands
        .iter()
        .map(|c| {
            format!(
                "{}/{}",
                c["provider"].as_str().unwrap(),
                c["model"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, ["up/z1", "gone/z2"]);
    let z1 = &cands[0];
    assert_eq!(z1["requests"], 2);
    assert_eq!(z1["failures"], 0);
    assert_eq!(z1["in_flight"], 0);
    assert!(z1["last_error"].is_null());
    assert_eq!(z1["weight"]["non_streaming"], 1.0);
    assert_eq!(z1["weight"]["streaming"], 1.0);
    // The warm candidate has weight 1, the cold one a quarter of it.
    assert_eq!(cands[1]["weight"]["non_streaming"], 0.25);
    let share_sum = z1["share"]["non_streaming"].as_f64().unwrap()
        + cands[1]["share"]["non_streaming"].as_f64().unwrap();
    assert!((share_sum - 1.0).abs() < 1e-9);

    let a1 = &s["aliases"][1]["candidates"][0];
    assert_eq!(a1["failures"], 1);
    assert_eq!(a1["last_error"]["kind"], "connect");
    let at = a1["last_error"]["at_unix_ms"].as_u64().unwrap();
    assert!(at >= before, "{at} < {before}");
    let rfc = a1["last_error"]["at"].as_str().unwrap();
    assert!(rfc.len() == 24 && rfc.ends_with('Z'), "{rfc}");
    assert_eq!(s["totals"]["requests"], 3);
    assert_eq!(s["totals"]["failures"], 1);
    assert_eq!(s["totals"]["client_errors"], 0);
    assert_eq!(s["totals"]["in_flight"], 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_listen_serves_only_the_four_paths_and_never_proxies() {
    let sim = FakeProvider::start("up").await.unwrap();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let config = format!(
        "metrics_listen = \"{metrics_addr}\"\n{}\n[model]\nfast = [{{ provider = \"up\", model = \"real\" }}]\n",
        provider_toml("up", &sim, Some("sk-metrics-SECRET"))
    );
    let proxy = Proxy::start(&config).await;
    let base = format!("http://{metrics_addr}");
    let c = client();
    // The second service may bind a moment after the proxy answers.
    let mut up = false;
    for _ in 0..200 {
        if c.get(format!("{base}/health")).send().await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(up, "metrics listener never answered:\n{}", proxy.logs());

    for path in ["/health", "/healthz"] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        assert_eq!(r.headers()["content-type"], "application/json");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["status"], "ok");
    }
    let r = c.get(format!("{base}/status")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["aliases"][0]["alias"], "fast");
    assert!(!v.to_string().contains("SECRET"));
    let (ct, m) = scrape(&format!("{base}/metrics")).await;
    assert_eq!(ct, PROM_CONTENT_TYPE);
    assert_eq!(
        m.value("sturnus_build_info", &[("version", VERSION)]),
        Some(1.0)
    );

    for (method, path) in [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/embeddings"),
        ("GET", "/v1/models"),
        ("GET", "/"),
        ("GET", "/metrics/extra"),
    ] {
        let r = c
            .request(method.parse().unwrap(), format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(chat_body("fast", false))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{method} {path}");
        let err = error_of(r).await;
        assert_eq!(err["code"], "unknown_url");
        assert_eq!(err["type"], "invalid_request_error");
    }
    let r = c
        .post(format!("{base}/metrics"))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(
        sim.request_count(),
        0,
        "the metrics listener proxied a request"
    );

    // The same requests on the proxy listener do reach the provider.
    assert_eq!(chat(&proxy, "fast", false, &[]).await.status(), 200);
    assert_eq!(sim.request_count(), 1);
    proxy.settled_metrics().await;
    let (_, m) = scrape(&format!("{base}/metrics")).await;
    assert_eq!(
        m.value(
            "sturnus_requests_total",
            &[
                ("alias", "fast"),
                ("provider", "up"),
                ("model", "real"),
                ("status_code", "200")
            ]
        ),
        Some(1.0)
    );
}

/// Every `sturnus_*` name in a text, with histogram suffixes folded into their family.
fn metric_names(text: &str, families: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("sturnus_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|b| families.contains_key(*b)))
            .unwrap_or(name);
        out.insert(family.to_string());
        rest = &tail[end..];
    }
    out
}

#[test]
fn docs_and_dashboard_name_only_real_metrics() {
    // The provider has a health check and has announced a quota, so that every family has a
    // series.
    let config = sturnus::config::Config::parse(
        "[provider.p]\nbase_url = \"http://127.0.0.1:9/v1\"\nhealth_check = { path = \"/health\" }\n[model]\na = [{ provider = \"p\", model = \"m\" }]\n",
        &|_| None,
    )
    .unwrap();
    let catalog = sturnus::catalog::Catalog::build(&config).unwrap();
    catalog.candidates[0].stats.observe_quota(
        sturnus::routing::QuotaKind::Requests,
        1,
        Some(2),
        None,
        0,
        &Default::default(),
    );
    let metrics = sturnus::observe::Metrics::new(&catalog).unwrap();
    // The per-client families have series once a client is configured and refused once.
    metrics.clients.precreate("a-client");
    metrics.clients.rate_limited("a-client", "max_inflight");
    let text = String::from_utf8(metrics.render(&catalog)).unwrap();
    let families = Exposition::parse(&text).unwrap().types;
    let real: BTreeSet<String> = families.keys().cloned().collect();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = std::fs::read_to_string(root.join("docs/observability.md")).unwrap();
    let dashboard = std::fs::read_to_string(root.join("examples/grafana/sturnus.json")).unwrap();
    let _: Value = serde_json::from_str(&dashboard).expect("dashboard is JSON");
    assert_eq!(
        metric_names(&docs, &families),
        real,
        "docs/observability.md"
    );
    let used = metric_names(&dashboard, &families);
    assert!(
        used.is_subset(&real),
        "unknown metrics in the dashboard: {used:?}"
    );
    assert_eq!(used.len(), real.len(), "the dashboard leaves a metric out");
}
