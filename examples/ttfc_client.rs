//! A small closed-loop HTTP/1.1 load client that measures what load tools do not: the time
//! from sending a request to the first byte of the response body (time to first chunk, TTFC),
//! next to the time to the end of the response. Raw tokio TCP on one thread, keep-alive
//! connections, `Content-Length` and chunked responses.
//!
//! ```text
//! cargo run --release --example ttfc_client -- --addr 127.0.0.1:4000 \
//!     --path /v1/chat/completions --body-file stream.json -c 16 --seconds 8 --warmup-secs 1
//! ```
//!
//! Prints one JSON object: request and error counts, requests per second, percentiles (µs) of
//! TTFC and total time over the requests started after the warm-up, and every TTFC sample, so
//! that runs can be pooled before taking a tail percentile.

use clap::Parser;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Closed-loop HTTP/1.1 client measuring time to first body byte.
#[derive(Parser, Debug)]
struct Args {
    /// Target address.
    #[arg(long)]
    addr: SocketAddr,
    /// Request path.
    #[arg(long, default_value = "/v1/chat/completions")]
    path: String,
    /// File holding the JSON request body (POSTed).
    #[arg(long)]
    body_file: std::path::PathBuf,
    /// Concurrent connections.
    #[arg(short = 'c', long, default_value_t = 16)]
    concurrency: usize,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Warm-up seconds whose requests are not counted.
    #[arg(long, default_value_t = 1.0)]
    warmup_secs: f64,
    /// Stop after this many measured requests in total, even if time remains.
    #[arg(long, default_value_t = 1_000_000)]
    max_requests: usize,
    /// Start connection `i` after `i × stagger_ms` milliseconds, so a fixed provider delay
    /// does not keep every connection's first chunk arriving in the same instant.
    #[arg(long, default_value_t = 0)]
    stagger_ms: u64,
}

/// One measured request.
#[derive(Debug, Clone, Copy)]
struct Sample {
    ttfc_us: u64,
    total_us: u64,
}

/// What one connection's loop saw.
#[derive(Debug, Default)]
struct Tally {
    samples: Vec<Sample>,
    errors: u64,
    non_2xx: u64,
}

fn main() {
    let args = Args::parse();
    let body = std::fs::read(&args.body_file).unwrap_or_else(|e| {
        eprintln!("ttfc_client: {}: {e}", args.body_file.display());
        std::process::exit(2);
    });
    let request = build_request(&args, &body);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let started = Instant::now();
    let measure_from = started + Duration::from_secs_f64(args.warmup_secs);
    let deadline = measure_from + Duration::from_secs_f64(args.seconds);
    let per_conn_cap = args.max_requests.div_ceil(args.concurrency.max(1));
    let tallies: Vec<Tally> = rt.block_on(async {
        let tasks: Vec<_> = (0..args.concurrency.max(1))
            .map(|i| {
                let request = request.clone();
                let (addr, delay) = (args.addr, Duration::from_millis(args.stagger_ms * i as u64));
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    connection_loop(addr, request, measure_from, deadline, per_conn_cap).await
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap_or_default());
        }
        out
    });
    report(&tallies, args.seconds);
}

fn build_request(args: &Args, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Authorization: Bearer bench\r\nContent-Length: {}\r\n\r\n",
        args.path,
        args.addr,
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// Sends requests back to back on one keep-alive connection (reconnecting after an error)
/// until the deadline; counts only requests started after `measure_from`.
async fn connection_loop(
    addr: SocketAddr,
    request: Vec<u8>,
    measure_from: Instant,
    deadline: Instant,
    cap: usize,
) -> Tally {
    let mut tally = Tally::default();
    let mut conn: Option<Conn> = None;
    while Instant::now() < deadline && tally.samples.len() < cap {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => match TcpStream::connect(addr).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    conn.insert(Conn::new(s))
                }
                Err(_) => {
                    tally.errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        let t0 = Instant::now();
        let left = deadline.saturating_duration_since(t0) + Duration::from_secs(30);
        match tokio::time::timeout(left, c.exchange(&request, t0)).await {
            Ok(Ok((status, sample, keep))) => {
                if t0 >= measure_from {
                    if (200..300).contains(&status) {
                        tally.samples.push(sample);
                    } else {
                        tally.non_2xx += 1;
                    }
                }
                if !keep {
                    conn = None;
                }
            }
            _ => {
                if t0 >= measure_from {
                    tally.errors += 1;
                }
                conn = None;
            }
        }
    }
    tally
}

/// A keep-alive connection with its read buffer.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed.
    pos: usize,
}

/// How the response body is delimited.
enum Framing {
    Length(usize),
    Chunked,
    Close,
}

impl Conn {
    fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            buf: Vec::with_capacity(16 * 1024),
            pos: 0,
        }
    }

    /// Reads more bytes; an error at end of stream.
    async fn fill(&mut self) -> std::io::Result<usize> {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        let n = self.stream.read_buf(&mut self.buf).await?;
        Ok(n)
    }

    fn unread(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Sends one request and reads its whole response: (status, timings, keep-alive).
    async fn exchange(
        &mut self,
        request: &[u8],
        t0: Instant,
    ) -> std::io::Result<(u16, Sample, bool)> {
        self.stream.write_all(request).await?;
        let (status, framing, keep) = self.read_head().await?;
        let mut first: Option<Instant> = None;
        match framing {
            Framing::Length(left) => self.skip_body_bytes(left, &mut first).await?,
            Framing::Chunked => self.read_chunked(&mut first).await?,
            Framing::Close => {
                loop {
                    if !self.unread().is_empty() {
                        first.get_or_insert_with(Instant::now);
                        self.pos = self.buf.len();
                    }
                    if self.fill().await? == 0 {
                        break;
                    }
                }
                return Ok((status, sample(t0, first), false));
            }
        }
        Ok((status, sample(t0, first), keep))
    }

    /// Reads the response head: status, body framing and whether the connection stays open.
    async fn read_head(&mut self) -> std::io::Result<(u16, Framing, bool)> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(self.unread()) {
                Ok(httparse::Status::Complete(used)) => {
                    let status = resp.code.unwrap_or(0);
                    let mut framing = Framing::Close;
                    let mut keep = resp.version == Some(1);
                    for h in resp.headers.iter() {
                        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
                        if h.name.eq_ignore_ascii_case("content-length") {
                            framing = Framing::Length(value.parse().map_err(|_| bad())?);
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding")
                            && value.eq_ignore_ascii_case("chunked")
                        {
                            framing = Framing::Chunked;
                        } else if h.name.eq_ignore_ascii_case("connection") {
                            keep = !value.eq_ignore_ascii_case("close");
                        }
                    }
                    self.pos += used;
                    if status == 100 {
                        continue;
                    }
                    return Ok((status, framing, keep));
                }
                Ok(httparse::Status::Partial) => {
                    if self.fill().await? == 0 {
                        return Err(eof());
                    }
                }
                Err(_) => return Err(bad()),
            }
        }
    }

    /// Reads a chunked body to its end, noting when the first data byte arrived.
    async fn read_chunked(&mut self, first: &mut Option<Instant>) -> std::io::Result<()> {
        loop {
            let line = self.read_line().await?;
            let size_text = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16).map_err(|_| bad())?;
            if size == 0 {
                // Trailers (if any) up to the empty line.
                while !self.read_line().await?.is_empty() {}
                return Ok(());
            }
            self.skip_body_bytes(size + 2, first).await?;
        }
    }

    /// One CRLF-terminated line (without the CRLF).
    /// Consumes `left` body bytes, noting when the first of them arrived.
    async fn skip_body_bytes(
        &mut self,
        mut left: usize,
        first: &mut Option<Instant>,
    ) -> std::io::Result<()> {
        while left > 0 {
            if self.unread().is_empty() && self.fill().await? == 0 {
                return Err(eof());
            }
            first.get_or_insert_with(Instant::now);
            let take = left.min(self.unread().len());
            self.pos += take;
            left -= take;
        }
        Ok(())
    }

    async fn read_line(&mut self) -> std::io::Result<String> {
        loop {
            if let Some(i) = self.unread().windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.unread()[..i]).into_owned();
                self.pos += i + 2;
                return Ok(line);
            }
            if self.fill().await? == 0 {
                return Err(eof());
            }
        }
    }
}

fn sample(t0: Instant, first: Option<Instant>) -> Sample {
    let end = Instant::now();
    let first = first.unwrap_or(end);
    Sample {
        ttfc_us: first.duration_since(t0).as_micros() as u64,
        total_us: end.duration_since(t0).as_micros() as u64,
    }
}

fn eof() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed")
}

fn bad() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed response")
}

/// Percentile by nearest rank of a sorted slice (0 when empty).
fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn stats(mut v: Vec<u64>) -> String {
    v.sort_unstable();
    let mean = if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<u64>() as f64 / v.len() as f64
    };
    format!(
        "{{\"mean\":{mean:.1},\"p50\":{},\"p90\":{},\"p99\":{},\"max\":{}}}",
        pct(&v, 50.0),
        pct(&v, 90.0),
        pct(&v, 99.0),
        v.last().copied().unwrap_or(0)
    )
}

fn report(tallies: &[Tally], seconds: f64) {
    let samples: Vec<Sample> = tallies.iter().flat_map(|t| t.samples.clone()).collect();
    let errors: u64 = tallies.iter().map(|t| t.errors).sum();
    let non_2xx: u64 = tallies.iter().map(|t| t.non_2xx).sum();
    let n = samples.len();
    let ttfc_samples: Vec<String> = samples.iter().map(|s| s.ttfc_us.to_string()).collect();
    println!(
        "{{\"requests\":{n},\"errors\":{errors},\"non_2xx\":{non_2xx},\"seconds\":{seconds:.3},\
         \"rps\":{:.1},\"ttfc_us\":{},\"total_us\":{},\"ttfc_samples_us\":[{}]}}",
        n as f64 / seconds.max(1e-9),
        stats(samples.iter().map(|s| s.ttfc_us).collect()),
        stats(samples.iter().map(|s| s.total_us).collect()),
        ttfc_samples.join(","),
    );
}
