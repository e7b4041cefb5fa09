//! The TLS listener (`[listen_tls]`, Pingora's own rustls listener, ALPN `h2` and
//! `http/1.1`) end to end with a throwaway CA: the OpenAI Python SDK over HTTP/1.1, an HTTP/2
//! client, streams relayed chunk by chunk, oversize and malformed requests refused with their
//! 4xx, and `[auth]` over TLS.

use crate::common::tls::{throwaway_certificate, Throwaway};
use crate::common::{self, chat_body, fast_alias_config, free_port, FakeProvider, Proxy};
use std::time::{Duration, Instant};

const KEY: &str = "sk-edge-client";

/// sturnus with `[listen_tls]` on a free loopback port and one client key; its HTTPS base URL.
async fn edge(sim: &FakeProvider, cert: &Throwaway, extra: &str) -> (Proxy, String) {
    let port = free_port();
    let config = format!(
        "{}[listen_tls]\nlisten = \"127.0.0.1:{port}\"\ncert = \"{}\"\nkey = \"{}\"\n\
         [auth]\n[[auth.key]]\nname = \"edge-client\"\nkey = \"{KEY}\"\n{extra}",
        fast_alias_config("up", sim, "m", Some("sk-provider")),
        cert.cert_pem.display(),
        cert.key_pem.display(),
    );
    let proxy = Proxy::start(&config).await;
    (proxy, format!("https://127.0.0.1:{port}"))
}

fn https_client(cert: &Throwaway, http1_only: bool) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&cert.ca_pem).unwrap()).unwrap();
    let builder = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .add_root_certificate(ca);
    let builder = if http1_only {
        builder.http1_only()
    } else {
        builder
    };
    builder.build().unwrap()
}

async fn chat(client: &reqwest::Client, base: &str, body: String) -> reqwest::Response {
    client
        .post(format!("{base}/v1/chat/completions"))
        .header("authorization", format!("Bearer {KEY}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

/// Reads a streamed answer, returning its pieces' arrival times.
async fn arrivals(mut resp: reqwest::Response) -> Vec<Instant> {
    let mut at = Vec::new();
    while let Some(piece) = resp.chunk().await.unwrap() {
        if !piece.is_empty() {
            at.push(Instant::now());
        }
    }
    at
}

#[tokio::test]
async fn http2_and_http1_clients_are_served_over_tls_with_streams_relayed_chunk_by_chunk() {
    let sim = FakeProvider::start("up").await.unwrap();
    let cert = throwaway_certificate();
    let (_proxy, base) = edge(&sim, &cert, "").await;
    sim.behaviour.set_chunk_interval(Duration::from_millis(120));
    sim.behaviour.set_chunks(5);
    for (http1_only, version) in [
        (false, http::Version::HTTP_2),
        (true, http::Version::HTTP_11),
    ] {
        let client = https_client(&cert, http1_only);
        let resp = chat(&client, &base, chat_body("fast", false)).await;
        assert_eq!(resp.version(), version);
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-sturnus-provider"], "up");
        let v: serde_json::Value = resp.json().await.unwrap();
        assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");

        let stream = chat(&client, &base, chat_body("fast", true)).await;
        assert_eq!((stream.version(), stream.status().as_u16()), (version, 200));
        let at = arrivals(stream).await;
        assert!(at.len() >= 4, "{version:?}: {} pieces", at.len());
        let spread = at.last().unwrap().duration_since(at[0]);
        assert!(
            spread >= Duration::from_millis(360),
            "{version:?}: the chunks arrived together ({spread:?})"
        );
    }
    // The credential is needed over TLS too, and never forwarded.
    let client = https_client(&cert, false);
    let resp = client
        .post(format!("{base}/v1/chat/completions"))
        .body(chat_body("fast", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    for r in sim.requests() {
        assert!(r.headers.iter().all(|(_, v)| !v.contains(KEY)));
    }
}

#[tokio::test]
async fn oversize_and_malformed_requests_get_their_4xx_over_tls_and_http2() {
    let sim = FakeProvider::start("up").await.unwrap();
    let cert = throwaway_certificate();
    let (_proxy, base) = edge(&sim, &cert, "[routing]\nmax_body_bytes = 2000\n").await;
    for http1_only in [false, true] {
        let client = https_client(&cert, http1_only);
        let big = chat(&client, &base, common::chat_of_size("fast", 10_000)).await;
        assert_eq!(big.status(), 413, "http1_only {http1_only}");
        let err = common::error_of(big).await;
        assert_eq!(err["code"], "request_too_large");
        let bad = chat(&client, &base, "{not json".to_string()).await;
        assert_eq!(bad.status(), 400, "http1_only {http1_only}");
        let unknown = chat(&client, &base, chat_body("nope", false)).await;
        assert_eq!(unknown.status(), 404);
    }
    assert_eq!(sim.request_count(), 0);
}

#[tokio::test]
async fn the_openai_python_sdk_is_served_over_tls() {
    let sim = FakeProvider::start("up").await.unwrap();
    let cert = throwaway_certificate();
    let (_proxy, base) = edge(&sim, &cert, "").await;
    let script = r#"
import sys, httpx, openai
base, key, ca = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base + "/v1", api_key=key, http_client=httpx.Client(verify=ca))
messages = [{"role": "user", "content": "hi"}]
reply = client.chat.completions.create(model="fast", messages=messages)
print("content", bool(reply.choices[0].message.content))
chunks = sum(1 for _ in client.chat.completions.create(model="fast", messages=messages, stream=True))
print("chunks", chunks)
wrong = openai.OpenAI(base_url=base + "/v1", api_key="sk-wrong", http_client=httpx.Client(verify=ca), max_retries=0)
try:
    wrong.chat.completions.create(model="fast", messages=messages)
except openai.AuthenticationError as e:
    print("refused", e.status_code, e.code)
"#;
    let ca = cert.ca_pem.clone();
    let script = script.to_string();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args(["-c", &script, &base, KEY])
            .arg(&ca)
            .output()
            .expect("python3 with the openai package (scripts/bootstrap.sh installs it)")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("content True"), "{stdout}");
    let chunks: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("chunks "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(chunks >= 2, "{stdout}");
    assert!(stdout.contains("refused 401 invalid_api_key"), "{stdout}");
    assert_eq!(sim.request_count(), 2);
}

#[tokio::test]
async fn a_client_that_leaves_over_tls_closes_the_provider_request_within_a_second() {
    let sim = FakeProvider::start("up").await.unwrap();
    let cert = throwaway_certificate();
    let (_proxy, base) = edge(&sim, &cert, "").await;
    sim.behaviour.set_latency(Duration::from_secs(5));
    let client = https_client(&cert, true);
    let request = tokio::spawn(async move { chat(&client, &base, chat_body("fast", false)).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while sim.request_count() == 0 {
        assert!(
            Instant::now() < deadline,
            "the provider never got the request"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    request.abort();
    let left = Instant::now();
    let deadline = left + Duration::from_secs(5);
    loop {
        if let Some(at) = sim.abandoned_answers().first() {
            let after = at.saturating_duration_since(left);
            assert!(
                after < Duration::from_secs(1),
                "the provider worked on for {after:?}"
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the provider never saw the request end"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
