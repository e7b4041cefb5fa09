//! A fake OpenAI-compatible LLM provider on loopback, in-process.
//!
//! One implementation serves `sturnus demo` (fast, slow and flaky providers), the integration
//! tests (providers that record what they received and misbehave on demand) and the benchmark
//! (cheap enough per request not to be the bottleneck). It speaks raw HTTP/1.1 over tokio TCP
//! (parsed with httparse, no hyper) so it can also misbehave at the byte level.
//!
//! Routes are matched by path suffix, so any prefix works: `.../chat/completions`,
//! `.../completions`, `.../embeddings`, `.../responses`, and `.../health` (a health endpoint
//! whose status a test sets); anything else is a 404 in OpenAI's error format. Responses, SSE
//! streams and errors follow OpenAI's wire formats. A provider can be given a request quota
//! per window ([`Behaviour::set_request_quota`]), announced in OpenAI- or Anthropic-style
//! rate-limit headers and enforced with `429` and `Retry-After`.

mod accounting;
mod behaviour;
mod chunked;
mod connection;
mod http;
mod kept;
mod quota;
mod record;
mod responses;
mod server;
mod stream;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;

pub use behaviour::{Behaviour, Fault, DEFAULT_CHUNKS};
pub use quota::QuotaHeaders;
pub use record::{header_value, RecordedRequest, RECORD_CAP};

use server::{accept_loop, ListenerSlot, Shared};

/// A running fake provider; dropping it shuts it down.
pub struct FakeProvider {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Its live-tunable behaviour.
    pub behaviour: Arc<Behaviour>,
    shared: Arc<Shared>,
    listener: ListenerSlot,
}

impl fmt::Debug for FakeProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeProvider")
            .field("name", &self.shared.name)
            .field("addr", &self.addr)
            .field("behaviour", &self.behaviour)
            .field("requests", &self.request_count())
            .finish()
    }
}

impl FakeProvider {
    /// Starts a provider named `name` on `127.0.0.1` with an ephemeral port, serving on the
    /// current tokio runtime.
    pub async fn start(name: &str) -> io::Result<FakeProvider> {
        FakeProvider::start_on(name, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Starts a provider named `name` on a fixed address (port 0 picks one).
    pub async fn start_on(name: &str, addr: SocketAddr) -> io::Result<FakeProvider> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let behaviour = Arc::new(Behaviour::new());
        let shared = Arc::new(Shared::new(name, Arc::clone(&behaviour)));
        let slot: ListenerSlot = Arc::new(Mutex::new(Some(listener)));
        tokio::spawn(accept_loop(Arc::clone(&slot), Arc::clone(&shared)));
        Ok(FakeProvider {
            addr,
            behaviour,
            shared,
            listener: slot,
        })
    }

    /// The name given at start (it appears in answers as `Hello from <name>`).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// `http://<addr>`, the base URL to configure a client or the router with.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The recorded requests, oldest first (at most [`RECORD_CAP`]).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.recorder.snapshot()
    }

    /// Forgets the recorded requests (the request count is kept).
    pub fn clear_requests(&self) {
        self.shared.recorder.clear();
    }

    /// Turns request recording on (the default) or off (for benchmarks).
    pub fn set_recording(&self, on: bool) {
        self.shared.recorder.set_enabled(on);
    }

    /// How many requests have been received (recorded or not).
    pub fn request_count(&self) -> u64 {
        self.shared.count.load(Ordering::Relaxed)
    }

    /// Connections open right now (accepted and not yet closed by either side).
    pub fn open_connections(&self) -> u64 {
        self.shared.open.load(Ordering::Relaxed)
    }

    /// Connections accepted so far.
    pub fn accepted_connections(&self) -> u64 {
        self.shared.connections.accepted_count()
    }

    /// Connections that carried a second request (kept alive by the client and reused).
    pub fn reused_connections(&self) -> u64 {
        self.shared.connections.reused_count()
    }

    /// When the provider noticed each peer that closed its connection before the answer was
    /// complete (while it was working on it, or writing it), oldest first.
    pub fn abandoned_answers(&self) -> Vec<std::time::Instant> {
        self.shared.connections.abandoned_at()
    }

    /// Makes every answer from now on carry these headers too (after `x-sim-provider`), the way
    /// real providers add their own (`x-request-id`, rate-limit headers, ...).
    pub fn set_response_headers(&self, headers: &[(&str, &str)]) {
        self.shared.connections.set_extra_headers(headers);
    }

    /// Stops accepting (the listening socket is closed before this returns, so new connects
    /// are refused) and drops every open connection.
    pub fn shutdown(&self) {
        self.shared.down.send_replace(true);
        let listener = self
            .listener
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(listener);
    }

    /// Whether [`FakeProvider::shutdown`] has been called.
    pub fn is_shut_down(&self) -> bool {
        *self.shared.down.borrow()
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.shutdown();
    }
}
