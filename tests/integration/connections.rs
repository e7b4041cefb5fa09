//! Connections on both sides of sturnus: the provider connections follow Pingora's server
//! configuration (`-c pingora.yaml`), and a client that pipelines requests on one connection
//! gets every answer in order, or a first answer that says `Connection: close`.

use crate::common;

use common::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A provider `up` (answering after `latency`) behind alias `fast`, and sturnus in front,
/// started with `args`.
async fn start(latency: Duration, args: &[&str]) -> (FakeProvider, Proxy) {
    let up = FakeProvider::start("up").await.unwrap();
    up.behaviour.set_latency(latency);
    let config = fast_alias_config("up", &up, "m", None);
    let proxy = Proxy::start_with(&config, &[], args).await;
    (up, proxy)
}

/// Sends `n` chat requests at once and checks every answer.
async fn burst(proxy: &Proxy, n: usize) {
    let answers = futures_util::future::join_all(
        (0..n).map(|_| post(proxy, "/v1/chat/completions", chat_body("fast", false))),
    )
    .await;
    for resp in answers {
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
    }
}

/// Waits until no request is in flight, so every provider connection is back in the pool.
async fn wait_idle(proxy: &Proxy) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while proxy.status().await["totals"]["in_flight"] != 0 {
        assert!(Instant::now() < deadline, "requests still in flight");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two bursts of `n` concurrent requests: how many provider connections were accepted, and
/// how many carried a second request.
async fn two_bursts(proxy: &Proxy, up: &FakeProvider, n: usize) -> (u64, u64) {
    burst(proxy, n).await;
    wait_idle(proxy).await;
    burst(proxy, n).await;
    wait_idle(proxy).await;
    (up.accepted_connections(), up.reused_connections())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_configurations_pool_size_bounds_the_kept_alive_provider_connections() {
    const N: usize = 8;
    let latency = Duration::from_millis(300);

    // Pingora's default pool keeps every connection of the first burst for the second.
    let (up, proxy) = start(latency, &[]).await;
    let (accepted, reused) = two_bursts(&proxy, &up, N).await;
    assert_eq!((accepted, reused), (N as u64, N as u64));
    assert!(
        proxy.logs().contains("up to 128 idle kept alive"),
        "{}",
        proxy.logs()
    );
    drop(proxy);

    let yaml = scratch_dir().join("pingora.yaml");
    std::fs::write(
        &yaml,
        "---\nversion: 1\nthreads: 1\nupstream_keepalive_pool_size: 1\n",
    )
    .unwrap();
    let (up, proxy) = start(latency, &["-c", yaml.to_str().unwrap()]).await;
    let (accepted, reused) = two_bursts(&proxy, &up, N).await;
    assert!(reused <= 1, "{reused} provider connections were reused");
    assert!(accepted >= 2 * N as u64 - 1, "only {accepted} accepted");
    assert!(
        proxy
            .logs()
            .contains("up to 1 idle kept alive (upstream_keepalive_pool_size 1 × 1 thread(s))"),
        "{}",
        proxy.logs()
    );
}

/// One response read off a raw connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        sturnus::fake_provider::header_value(&self.headers, name)
    }
}

/// Reads up to `n` `Content-Length` responses off `stream` (fewer if it closes first), and
/// whether it was closed after them.
async fn read_answers(stream: &mut TcpStream, n: usize) -> (Vec<Answer>, bool) {
    let mut got = Vec::new();
    let mut answers = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        while answers.len() < n {
            let mut hs = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut hs);
            let Ok(httparse::Status::Complete(head)) = resp.parse(&got) else {
                break;
            };
            let headers: Vec<(String, String)> = resp
                .headers
                .iter()
                .map(|h| {
                    let value = String::from_utf8_lossy(h.value).into_owned();
                    (h.name.to_ascii_lowercase(), value)
                })
                .collect();
            let len: usize = headers
                .iter()
                .find(|(n, _)| n == "content-length")
                .map(|(_, v)| v.parse().unwrap())
                .expect("a Content-Length answer");
            if got.len() < head + len {
                break;
            }
            answers.push(Answer {
                status: resp.code.unwrap(),
                headers,
                body: got[head..head + len].to_vec(),
            });
            got.drain(..head + len);
        }
        if answers.len() == n {
            // Anything after the last answer, or a close, shows within a moment.
            let more = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut buf));
            let closed = matches!(more.await, Ok(Ok(0)) | Ok(Err(_)));
            return (answers, closed);
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (answers, true),
            Ok(Ok(read)) => got.extend_from_slice(&buf[..read]),
            Err(_) => panic!("timed out with {} answer(s)", answers.len()),
        }
    }
}

/// A chat request with a `Content-Length` body.
fn chat_request(model: &str) -> String {
    let body = chat_body(model, false);
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn pipelined_requests_in_one_write_are_answered_in_order() {
    let (up, proxy) = start(Duration::ZERO, &[]).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let requests = format!(
        "{}{}GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n{}",
        chat_request("fast"),
        chat_request("nope"),
        chat_request("fast")
    );
    stream.write_all(requests.as_bytes()).await.unwrap();
    let (answers, closed) = read_answers(&mut stream, 4).await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [200, 404, 200, 200]);
    assert!(!closed, "the connection was closed after the answers");
    for a in &answers {
        assert_eq!(a.header("connection"), Some("keep-alive"), "{a:?}");
    }
    let models: serde_json::Value = serde_json::from_slice(&answers[2].body).unwrap();
    assert_eq!(models["data"][0]["id"], "fast");
    assert_eq!(up.request_count(), 2);
    // The connection goes on serving.
    stream
        .write_all(chat_request("fast").as_bytes())
        .await
        .unwrap();
    let (answers, _) = read_answers(&mut stream, 1).await;
    assert_eq!(answers[0].status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_pipelined_while_the_provider_works_is_answered_after_the_first() {
    let (up, proxy) = start(Duration::from_millis(600), &[]).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(chat_request("fast").as_bytes())
        .await
        .unwrap();
    // The second request arrives while sturnus waits for the provider (and watches the
    // client's socket): it must stay there for after the first answer.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stream
        .write_all(chat_request("fast").as_bytes())
        .await
        .unwrap();
    let (answers, closed) = read_answers(&mut stream, 2).await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(statuses, [200, 200]);
    assert!(!closed);
    assert_eq!(answers[0].header("connection"), Some("keep-alive"));
    assert_eq!(up.request_count(), 2);
    assert!(up.abandoned_answers().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chunked_request_is_answered_with_connection_close_never_a_silent_one() {
    let (_up, proxy) = start(Duration::ZERO, &[]).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let body = chat_body("fast", false);
    let chunked = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x}\r\n{body}\r\n0\r\n\r\n",
        body.len()
    );
    let requests = format!("{chunked}{}", chat_request("fast"));
    stream.write_all(requests.as_bytes()).await.unwrap();
    let (answers, closed) = read_answers(&mut stream, 2).await;
    assert_eq!(answers[0].status, 200);
    assert_eq!(answers[0].header("connection"), Some("close"));
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert!(closed);
}
