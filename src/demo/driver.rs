//! The demo's traffic: small OpenAI clients hammering the proxy, counting who served them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Per-provider counts of answers since the last [`Tally::take`].
pub struct Tally {
    served: Vec<AtomicU64>,
    failed: Vec<AtomicU64>,
}

/// One second's counts for one provider.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// Answers with a 2xx status.
    pub ok: u64,
    /// Answers with any other status.
    pub failed: u64,
}

impl Tally {
    /// Zeroed counters for `n` providers (demo order).
    pub fn new(n: usize) -> Self {
        Tally {
            served: (0..n).map(|_| AtomicU64::new(0)).collect(),
            failed: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts since the last call, resetting them.
    pub fn take(&self) -> Vec<Counts> {
        self.served
            .iter()
            .zip(&self.failed)
            .map(|(s, f)| Counts {
                ok: s.swap(0, Relaxed),
                failed: f.swap(0, Relaxed),
            })
            .collect()
    }
}

/// Sends chat completions until `stop`, tallying the `x-sturnus-provider` of each answer.
pub async fn worker(proxy: SocketAddr, tally: std::sync::Arc<Tally>, stop: Instant) {
    while Instant::now() < stop {
        match one_request(proxy).await {
            Ok((status, provider)) => {
                let index = super::PROVIDERS.iter().position(|(n, _, _)| *n == provider);
                if let Some(i) = index {
                    let counter = if (200..300).contains(&status) {
                        &tally.served[i]
                    } else {
                        &tally.failed[i]
                    };
                    counter.fetch_add(1, Relaxed);
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The proxy did not answer `/health` with 200 within 10 s.
#[derive(Debug, thiserror::Error)]
#[error("the proxy did not become healthy")]
pub struct NotHealthy;

/// Why one demo request got no answer to count.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    /// No complete answer within 10 s.
    #[error("timed out")]
    TimedOut,
    /// Connecting, writing or reading failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The answer is not an HTTP response.
    #[error("bad response: {0}")]
    BadResponse(httparse::Error),
}

/// Polls `/health` until the proxy answers (at most 10 s).
pub async fn wait_healthy(proxy: SocketAddr) -> Result<(), NotHealthy> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(raw) = exchange(
            proxy,
            "GET /health HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n",
        )
        .await
        {
            if raw.starts_with(b"HTTP/1.1 200") {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(NotHealthy)
}

/// One non-streaming chat completion; returns the status and serving provider.
async fn one_request(proxy: SocketAddr) -> Result<(u16, String), RequestError> {
    let body = r#"{"model":"chat","messages":[{"role":"user","content":"Say hi"}]}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: demo\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let raw = exchange(proxy, &request).await?;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    response.parse(&raw).map_err(RequestError::BadResponse)?;
    let status = response.code.unwrap_or(0);
    let provider = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("x-sturnus-provider"))
        .map(|h| String::from_utf8_lossy(h.value).into_owned())
        .unwrap_or_default();
    Ok((status, provider))
}

/// Writes a request on a fresh connection and reads until the server closes it.
async fn exchange(proxy: SocketAddr, request: &str) -> Result<Vec<u8>, RequestError> {
    let io = async {
        let mut stream = TcpStream::connect(proxy).await?;
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::with_capacity(2048);
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    Ok(tokio::time::timeout(Duration::from_secs(10), io)
        .await
        .map_err(|_| RequestError::TimedOut)??)
}
