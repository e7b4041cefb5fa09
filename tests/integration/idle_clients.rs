//! Memory per idle keep-alive client: 2,000 clients, each after one request, held open while
//! the proxy's resident memory is read. The bound is generous (a debug build, a shared
//! machine); the benchmark (`bench/`) measures the release build with 10,000 clients.

use crate::common::{allow_open_files, chat_body, one_provider};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Idle clients held open.
const CLIENTS: usize = 2_000;
/// The most resident memory one idle client may add, in KiB: about twice what a debug build
/// holds (each connection in a task of its own, not in Pingora's accept task).
const MAX_KIB_PER_CLIENT: u64 = 12;

/// Opens a connection, sends one chat request and reads its whole answer, keeping the
/// connection open.
async fn one_request(addr: std::net::SocketAddr, request: &[u8]) -> TcpStream {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(request).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = conn.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the answer was complete");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .expect("a sized answer");
            if got.len() >= end + 4 + length {
                assert!(text.starts_with("HTTP/1.1 200"), "{text}");
                return conn;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_thousand_idle_keep_alive_clients_stay_within_a_generous_rss_bound() {
    allow_open_files(3 * CLIENTS as u64 + 256);
    let (_sim, proxy) = one_provider("m", None, "").await;
    let body = chat_body("fast", false);
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // Warm up: the first requests allocate what every later one reuses.
    let mut warm = Vec::new();
    for _ in 0..50 {
        warm.push(one_request(proxy.addr, request.as_bytes()).await);
    }
    drop(warm);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = proxy.memory_kib("VmRSS");
    let mut idle = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS / 100 {
        let opened = (0..100).map(|_| one_request(proxy.addr, request.as_bytes()));
        idle.extend(futures_util::future::join_all(opened).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = proxy.memory_kib("VmRSS");
    let per_client = after.saturating_sub(before) as f64 / CLIENTS as f64;
    println!(
        "idle keep-alive clients: {CLIENTS}, RSS {before} KiB -> {after} KiB, {per_client:.1} KiB each"
    );
    assert!(
        per_client <= MAX_KIB_PER_CLIENT as f64,
        "{per_client:.1} KiB per idle client"
    );
    // They are still served.
    let last = idle.last_mut().unwrap();
    last.write_all(request.as_bytes()).await.unwrap();
    let mut buf = [0u8; 16];
    last.read_exact(&mut buf).await.unwrap();
    assert!(buf.starts_with(b"HTTP/1.1 200"));
}
