//! The TLS listener (`[listen_tls]`, Pingora's own rustls listener, ALPN `h2` and
//! `http/1.1`) end to end with a throwaway CA: the OpenAI Python SDK over HTTP/1.1, an HTTP/2
//! client, streams relayed chunk by chunk, oversize and malformed requests refused with their
//! 4xx, `[auth]` over TLS, and a client that leaves (an HTTP/1.1 connection closed, an HTTP/2
//! stream reset, an HTTP/2 connection dropped) closing its provider request within a second.

use crate::common::tls::{edge_config, h2_connection, throwaway_certificate, Throwaway, EDGE_KEY};
use crate::common::{self, chat_body, free_port, FakeProvider, Proxy};
use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::SendStream;
use std::time::{Duration, Instant};

const KEY: &str = EDGE_KEY;

/// The longest a provider may go on working for a client that left.
const NOTICED_WITHIN: Duration = Duration::from_secs(1);

/// sturnus with `[listen_tls]` on a free loopback port and one client key; its HTTPS base URL.
async fn edge(sim: &FakeProvider, cert: &Throwaway, extra: &str) -> (Proxy, String) {
    let port = free_port();
    let proxy = Proxy::start(&edge_config(sim, cert, port, extra)).await;
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

/// The port of an HTTPS base URL.
fn port_of(base: &str) -> u16 {
    base.rsplit(':').next().unwrap().parse().unwrap()
}

/// Opens one chat request on an HTTP/2 connection and sends its whole body: the answer to come,
/// and the request's stream (to reset).
async fn open_chat(
    streams: &SendRequest<Bytes>,
    base: &str,
    body: String,
) -> (ResponseFuture, SendStream<Bytes>) {
    let mut streams = streams.clone().ready().await.unwrap();
    let request = http::Request::post(format!("{base}/v1/chat/completions"))
        .header("authorization", format!("Bearer {KEY}"))
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(())
        .unwrap();
    let (answer, mut stream) = streams.send_request(request, false).unwrap();
    stream.send_data(Bytes::from(body), true).unwrap();
    (answer, stream)
}

/// An HTTP/2 answer's status and its body as it came, piece by piece (the head's first piece
/// is read only when `first_only`).
async fn read_answer(answer: ResponseFuture, first_only: bool) -> (u16, Vec<Bytes>) {
    let resp = answer.await.unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut pieces = Vec::new();
    while let Some(piece) = body.data().await {
        let piece = piece.unwrap();
        let _ = body.flow_control().release_capacity(piece.len());
        if piece.is_empty() {
            continue;
        }
        pieces.push(piece);
        if first_only {
            break;
        }
    }
    (status, pieces)
}

/// Whether `pieces` make a whole answer: an event stream ending in `[DONE]`, or a chat
/// completion.
fn whole(pieces: &[Bytes], stream: bool) -> bool {
    let text: String = pieces.iter().map(|p| String::from_utf8_lossy(p)).collect();
    if stream {
        text.trim_end().ends_with("data: [DONE]")
    } else {
        serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v["choices"].is_array())
    }
}

/// Waits until the provider has received `n` requests in all.
async fn wait_for_requests(sim: &FakeProvider, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while sim.request_count() < n {
        assert!(
            Instant::now() < deadline,
            "the provider got {} of {n} requests",
            sim.request_count()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Asserts the provider saw `n` requests' connections close, each within [`NOTICED_WITHIN`] of
/// `left`.
async fn expect_abandoned(sim: &FakeProvider, n: usize, left: Instant) {
    let deadline = left + Duration::from_secs(5);
    while sim.abandoned_answers().len() < n {
        assert!(
            Instant::now() < deadline,
            "the provider saw {} of {n} requests end",
            sim.abandoned_answers().len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for at in sim.abandoned_answers() {
        let after = at.saturating_duration_since(left);
        assert!(
            after < NOTICED_WITHIN,
            "the provider worked on for {after:?} after the client left"
        );
        eprintln!("the provider saw its request end {after:?} after the client left");
    }
}

/// The access-log statuses of `proxy`'s chat requests, once `n` are logged.
async fn access_statuses(proxy: &Proxy, n: usize) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let statuses: Vec<u64> = proxy
            .logs()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["target"] == "sturnus::access" && v["path"] == "/v1/chat/completions")
            .filter_map(|v| v["status"].as_u64())
            .collect();
        if statuses.len() >= n {
            return statuses;
        }
        assert!(Instant::now() < deadline, "access lines: {statuses:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two requests on one HTTP/2 connection to a slow provider; one stream is reset (before the
/// answer, or once `after_first_piece` of it arrived): its provider request is closed within a
/// second, the other stream gets its whole answer, and the connection serves on.
async fn expect_reset_stream_cancelled_alone(leaver_streams: bool, after_first_piece: bool) {
    let case = format!("leaver streams: {leaver_streams}, after first piece: {after_first_piece}");
    let sim = FakeProvider::start("up").await.unwrap();
    let cert = throwaway_certificate();
    let (proxy, base) = edge(&sim, &cert, "").await;
    let stayer_streams = if after_first_piece {
        // Only a stream has pieces to wait between: both stream, 2 s apart.
        sim.behaviour.set_chunk_interval(Duration::from_secs(2));
        sim.behaviour.set_chunks(3);
        true
    } else {
        sim.behaviour.set_latency(Duration::from_secs(3));
        !leaver_streams
    };
    let (streams, _connection) = h2_connection(port_of(&base), &cert).await;
    let (leaver_answer, mut leaver) =
        open_chat(&streams, &base, chat_body("fast", leaver_streams)).await;
    let (stayer_answer, _stayer) =
        open_chat(&streams, &base, chat_body("fast", stayer_streams)).await;
    wait_for_requests(&sim, 2).await;
    if after_first_piece {
        let (status, first) = read_answer(leaver_answer, true).await;
        assert_eq!((status, first.len()), (200, 1), "{case}");
    } else {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    leaver.send_reset(h2::Reason::CANCEL);
    let left = Instant::now();
    expect_abandoned(&sim, 1, left).await;

    let (status, pieces) = read_answer(stayer_answer, false).await;
    assert_eq!(status, 200, "{case}");
    assert!(whole(&pieces, stayer_streams), "{case}: {pieces:?}");
    assert_eq!(sim.abandoned_answers().len(), 1, "{case}");
    sim.behaviour.set_latency(Duration::ZERO);
    sim.behaviour.set_chunk_interval(Duration::ZERO);
    let (next, _) = open_chat(&streams, &base, chat_body("fast", false)).await;
    let (status, pieces) = read_answer(next, false).await;
    assert_eq!(status, 200, "{case}: the connection serves on");
    assert!(whole(&pieces, false), "{case}");
    let mut statuses = access_statuses(&proxy, 3).await;
    statuses.sort();
    assert_eq!(statuses, [200, 200, 499], "{case}");
}

#[tokio::test(flavor = "multi_thread")]
async fn over_http2_a_stream_reset_before_its_answer_cancels_its_provider_request_alone() {
    expect_reset_stream_cancelled_alone(false, false).await;
    expect_reset_stream_cancelled_alone(true, false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn over_http2_a_stream_reset_mid_answer_cancels_the_rest_and_spares_the_other_stream() {
    expect_reset_stream_cancelled_alone(true, true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn over_http2_a_dropped_connection_cancels_every_provider_request_on_it() {
    let sim = FakeProvider::start("up").await.unwrap();
    let cert = throwaway_certificate();
    let (proxy, base) = edge(&sim, &cert, "").await;
    sim.behaviour.set_latency(Duration::from_secs(5));
    let (streams, connection) = h2_connection(port_of(&base), &cert).await;
    let _answers = [
        open_chat(&streams, &base, chat_body("fast", false)).await,
        open_chat(&streams, &base, chat_body("fast", true)).await,
    ];
    wait_for_requests(&sim, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    connection.abort();
    let left = Instant::now();
    expect_abandoned(&sim, 2, left).await;
    assert_eq!(access_statuses(&proxy, 2).await, [499, 499]);

    // A new connection is served.
    sim.behaviour.set_latency(Duration::ZERO);
    let (streams, _connection) = h2_connection(port_of(&base), &cert).await;
    let (answer, _) = open_chat(&streams, &base, chat_body("fast", true)).await;
    let (status, pieces) = read_answer(answer, false).await;
    assert_eq!(status, 200);
    assert!(whole(&pieces, true), "{pieces:?}");
}
