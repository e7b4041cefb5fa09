//! The benchmark's fast mock provider: [`sturnus::fake_provider::FakeProvider`] as a standalone
//! process on a single-threaded runtime (so it can be pinned to one core), with recording off.
//!
//! ```text
//! cargo run --release --example mock_provider -- --port 9101 --chunks 20
//! ```
//!
//! With `--control-port`, a second loopback listener takes one line per connection and
//! changes the behaviour live, so the proxies in front keep their pooled connections between
//! scenarios: `latency_ms=200 chunk_interval_ms=50 chunks=5` answers `ok`.

use clap::Parser;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use sturnus::fake_provider::{Behaviour, FakeProvider};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// A fast fake OpenAI-compatible provider for benchmarks.
#[derive(Parser, Debug)]
struct Args {
    /// Port on 127.0.0.1 for the provider.
    #[arg(long, default_value_t = 9101)]
    port: u16,
    /// Port on 127.0.0.1 for live behaviour changes (none by default).
    #[arg(long)]
    control_port: Option<u16>,
    /// Delay before the response headers, in milliseconds.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Pause between SSE events of a streaming answer, in milliseconds.
    #[arg(long, default_value_t = 0)]
    chunk_interval_ms: u64,
    /// Content chunks in a streaming answer.
    #[arg(long, default_value_t = 20)]
    chunks: u32,
    /// Name shown in answers (`Hello from NAME`).
    #[arg(long, default_value = "mock")]
    name: String,
}

fn main() {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(run(args)) {
        eprintln!("mock_provider: {e}");
        std::process::exit(1);
    }
}

async fn run(args: Args) -> std::io::Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port));
    let sim = FakeProvider::start_on(&args.name, addr).await?;
    sim.set_recording(false);
    let b = &sim.behaviour;
    b.set_latency(Duration::from_millis(args.latency_ms));
    b.set_chunk_interval(Duration::from_millis(args.chunk_interval_ms));
    b.set_chunks(args.chunks);
    if let Some(port) = args.control_port {
        let control = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
        tokio::spawn(serve_control(control, Arc::clone(&sim.behaviour)));
    }
    println!(
        "mock_provider listening on {} ({:?})",
        sim.addr, sim.behaviour
    );
    tokio::signal::ctrl_c().await?;
    println!("mock_provider: {} requests served", sim.request_count());
    Ok(())
}

/// Applies one `key=value ...` line per control connection and answers `ok` or the problem.
async fn serve_control(listener: TcpListener, behaviour: Arc<Behaviour>) {
    while let Ok((stream, _)) = listener.accept().await {
        let (read, mut write) = stream.into_split();
        let mut line = String::new();
        if BufReader::new(read).read_line(&mut line).await.is_err() {
            continue;
        }
        let answer = match apply(&behaviour, &line) {
            Ok(()) => format!("ok {behaviour:?}\n"),
            Err(e) => format!("error: {e}\n"),
        };
        let _ = write.write_all(answer.as_bytes()).await;
    }
}

/// Parses `latency_ms=N chunk_interval_ms=N chunks=N` (any subset) and applies it.
fn apply(behaviour: &Behaviour, line: &str) -> Result<(), String> {
    for pair in line.split_whitespace() {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("expected key=value, got {pair:?}"))?;
        let n: u64 = value
            .parse()
            .map_err(|_| format!("{key}: not a number: {value:?}"))?;
        match key {
            "latency_ms" => behaviour.set_latency(Duration::from_millis(n)),
            "chunk_interval_ms" => behaviour.set_chunk_interval(Duration::from_millis(n)),
            "chunks" => behaviour.set_chunks(u32::try_from(n).map_err(|e| e.to_string())?),
            other => return Err(format!("unknown key {other:?}")),
        }
    }
    Ok(())
}
