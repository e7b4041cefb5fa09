//! Errors sturnus produces itself: OpenAI's error shape, the right status, nothing forwarded.

use crate::common;

use common::*;
use std::time::Duration;

async fn setup() -> (FakeProvider, Proxy) {
    let sim = FakeProvider::start("up").await.unwrap();
    let config = format!(
        "{}\n[model]\nfast = [{{ provider = \"up\", model = \"m1\" }}]\nsmart = [{{ provider = \"up\", model = \"m2\" }}]\n[routing]\nread_timeout_secs = 1\n",
        provider_toml("up", &sim, Some("sk-test"))
    );
    let proxy = Proxy::start(&config).await;
    (sim, proxy)
}

async fn expect_error(
    resp: reqwest::Response,
    status: u16,
    param: Option<&str>,
    code: Option<&str>,
    message_part: &str,
) {
    assert_eq!(resp.status(), status);
    assert_eq!(resp.headers()["content-type"], "application/json");
    let err = error_of(resp).await;
    let message = err["message"].as_str().unwrap();
    assert!(message.contains(message_part), "{message}");
    assert_eq!(err["param"].as_str(), param, "{err}");
    assert_eq!(err["code"].as_str(), code, "{err}");
    assert!(err["type"].is_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_bodies_get_400_and_reach_no_provider() {
    let (sim, proxy) = setup().await;
    let cases: &[(&str, Option<&str>, &str)] = &[
        ("{\"model\": \"fast\",}", None, "not valid JSON"),
        ("{\"model\": \"fast\"", None, "not valid JSON"),
        ("", None, "not valid JSON"),
        ("[1, 2]", None, "must be a JSON object"),
        ("\"fast\"", None, "must be a JSON object"),
        ("{\"messages\": []}", Some("model"), "model"),
        ("{\"model\": 42}", Some("model"), "model"),
        ("{\"model\": null}", Some("model"), "model"),
        ("{\"model\": \"fast\"} trailing", None, "not valid JSON"),
    ];
    for (body, param, part) in cases {
        let resp = post(&proxy, "/v1/chat/completions", body.to_string()).await;
        let status = resp.status();
        assert_eq!(status, 400, "body {body:?}");
        let err = error_of(resp).await;
        assert_eq!(err["type"], "invalid_request_error", "{body:?}");
        assert_eq!(err["param"].as_str(), *param, "{body:?}");
        assert!(
            err["message"].as_str().unwrap().contains(part),
            "{body:?}: {err}"
        );
    }
    // Invalid UTF-8 inside a string.
    let resp = post(
        &proxy,
        "/v1/chat/completions",
        b"{\"model\":\"f\xffst\"}".to_vec(),
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(sim.request_count(), 0, "a bad request reached the provider");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_with_two_model_keys_gets_400_and_reaches_no_provider() {
    let (sim, proxy) = setup().await;
    let messages = r#""messages":[{"role":"user","content":"hi"}]"#;
    let large = "x".repeat(200 * 1024);
    let cases = [
        (
            format!(r#"{{"model":"fast",{messages},"model":"smart"}}"#),
            "another at byte 68",
        ),
        (
            format!(r#"{{"model":"fast","mod\u0065l":"fast",{messages}}}"#),
            "another at byte 29",
        ),
        (
            format!(r#"{{"model":"fast","model":null,{messages}}}"#),
            "another at byte 24",
        ),
        (
            format!(r#"{{"model":"fast","pad":"{large}",{messages},"model":"smart"}}"#),
            "another at byte",
        ),
    ];
    for (body, at) in cases {
        let resp = post(&proxy, "/v1/chat/completions", body.clone()).await;
        assert!(resp.headers().contains_key("x-request-id"));
        let shown = &body[..body.len().min(80)];
        assert_eq!(resp.status(), 400, "{shown}");
        assert_eq!(resp.headers()["content-type"], "application/json");
        let v: serde_json::Value = resp.json().await.unwrap();
        let err = &v["error"];
        assert_eq!(err["type"], "invalid_request_error", "{shown}");
        assert_eq!(err["param"], "model", "{shown}");
        assert_eq!(err["code"], serde_json::Value::Null, "{shown}");
        let message = err["message"].as_str().unwrap();
        assert!(
            message.starts_with("duplicate parameter 'model': ") && message.contains(at),
            "{shown}: {message}"
        );
    }
    assert_eq!(
        sim.request_count(),
        0,
        "a body with two models was forwarded"
    );
    // A nested "model" is no duplicate, and the next request is served.
    let nested = r#"{"model":"fast","messages":[{"role":"user","content":"hi","model":"x"}]}"#;
    let resp = post(&proxy, "/v1/chat/completions", nested.to_string()).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(sim.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_models_paths_and_methods() {
    let (sim, proxy) = setup().await;
    let resp = post(
        &proxy,
        "/v1/chat/completions",
        chat_body("gpt-5-nope", false),
    )
    .await;
    expect_error(
        resp,
        404,
        Some("model"),
        Some("model_not_found"),
        "gpt-5-nope",
    )
    .await;

    let resp = post(&proxy, "/v1/audio/speech", chat_body("fast", false)).await;
    expect_error(resp, 404, None, Some("unknown_url"), "/v1/audio/speech").await;
    let resp = get(&proxy, "/nothing/here").await;
    expect_error(resp, 404, None, Some("unknown_url"), "/nothing/here").await;

    let resp = get(&proxy, "/v1/chat/completions").await;
    expect_error(resp, 405, None, Some("method_not_allowed"), "GET").await;
    let resp = client()
        .delete(proxy.url("/v1/models"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(sim.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_stay_usable_after_errors() {
    let (sim, proxy) = setup().await;
    let c = client();
    for _ in 0..3 {
        let resp = c
            .post(proxy.url("/v1/chat/completions"))
            .body("{oops")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400);
        let resp = send_chat(&c, proxy.url("/v1/chat/completions"), false).await;
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
    }
    assert_eq!(sim.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn models_lists_aliases_in_openai_shape() {
    let (_sim, proxy) = setup().await;
    let v: serde_json::Value = get(&proxy, "/v1/models").await.json().await.unwrap();
    assert_eq!(
        v,
        serde_json::json!({"object": "list", "data": [
            {"id": "fast", "object": "model", "created": 0, "owned_by": "sturnus"},
            {"id": "smart", "object": "model", "created": 0, "owned_by": "sturnus"},
        ]})
    );
    for path in ["/health", "/healthz"] {
        let v: serde_json::Value = get(&proxy, path).await.json().await.unwrap();
        assert_eq!(v, serde_json::json!({"status": "ok"}));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn unreachable_and_silent_providers_get_json_502_and_504() {
    let (sim, proxy) = setup().await;
    sim.behaviour.set_fault(Fault::NeverAnswer);
    let started = std::time::Instant::now();
    let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", false)).await;
    expect_error(resp, 504, None, Some("upstream_timeout"), "`up` timed out").await;
    assert!(started.elapsed() < Duration::from_secs(5));

    sim.shutdown();
    let resp = post(&proxy, "/v1/chat/completions", chat_body("fast", false)).await;
    expect_error(resp, 502, None, Some("upstream_connect_error"), "`up`").await;
    let logs = proxy.logs();
    assert!(!logs.contains("sk-test"), "the key leaked into logs");
}
