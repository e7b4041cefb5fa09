//! The state a fake provider shares with its tasks, and its accept loop.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::accounting::ConnectionLog;
use super::behaviour::{Behaviour, Fault};
use super::connection::serve_until_done;
use super::record::Recorder;

/// State shared by the accept loop, every connection and the [`super::FakeProvider`] handle.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The provider's display name.
    pub(crate) name: String,
    /// The non-streaming answer text, `Hello from <name>`.
    pub(crate) content: String,
    /// `x-sim-provider: <name>\r\n`, added to every response.
    pub(crate) provider_header: Vec<u8>,
    /// The live-tunable behaviour.
    pub(crate) behaviour: Arc<Behaviour>,
    /// The request log.
    pub(crate) recorder: Recorder,
    /// Requests received so far.
    pub(crate) count: AtomicU64,
    /// Connections open right now.
    pub(crate) open: AtomicU64,
    /// Accepted, reused and abandoned connections; the test-set response headers.
    pub(crate) connections: ConnectionLog,
    /// Becomes `true` on shutdown; every task watches it.
    pub(crate) down: watch::Sender<bool>,
    /// The Responses API responses it keeps.
    pub(crate) kept: super::kept::Store,
}

impl Shared {
    /// Pre-renders the per-provider bits of every response.
    pub(crate) fn new(name: &str, behaviour: Arc<Behaviour>) -> Shared {
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let provider_header = format!("x-sim-provider: {safe}\r\n").into_bytes();
        Shared {
            kept: super::kept::Store::new(name),
            name: name.to_string(),
            content: format!("Hello from {name}"),
            provider_header,
            behaviour,
            recorder: Recorder::new(),
            count: AtomicU64::new(0),
            open: AtomicU64::new(0),
            connections: ConnectionLog::default(),
            down: watch::channel(false).0,
        }
    }
}

/// Where the listener lives, so `shutdown` can close it synchronously.
pub(crate) type ListenerSlot = Arc<Mutex<Option<TcpListener>>>;

/// Accepts connections until shutdown, spawning one task per connection.
pub(crate) async fn accept_loop(slot: ListenerSlot, shared: Arc<Shared>) {
    let mut down = shared.down.subscribe();
    loop {
        let accepted = tokio::select! {
            r = poll_fn(|cx| poll_accept(&slot, cx)) => r,
            _ = down.wait_for(|d| *d) => return,
        };
        match accepted {
            None => return,
            Some(Ok((stream, _))) => {
                if *shared.down.borrow() {
                    return;
                }
                if shared.behaviour.fault() == Fault::RefuseConnections {
                    drop(stream);
                    continue;
                }
                shared.connections.accepted();
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(stream, Arc::clone(&shared)));
            }
            Some(Err(e)) => {
                // Typically EMFILE or a connection aborted before accept: back off briefly.
                log::debug!("fake provider {}: accept failed: {e}", shared.name);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Polls the listener if it is still open; `Ready(None)` once it has been closed.
fn poll_accept(
    slot: &ListenerSlot,
    cx: &mut Context<'_>,
) -> Poll<Option<io::Result<(TcpStream, SocketAddr)>>> {
    let guard = slot.lock().unwrap_or_else(|e| e.into_inner());
    match guard.as_ref() {
        Some(listener) => listener.poll_accept(cx).map(Some),
        None => Poll::Ready(None),
    }
}

/// Serves one connection until it ends or the provider shuts down (which drops it at once).
async fn serve(stream: TcpStream, shared: Arc<Shared>) {
    shared.open.fetch_add(1, Ordering::Relaxed);
    let _open = OpenGuard(&shared);
    let mut down = shared.down.subscribe();
    tokio::select! {
        _ = serve_until_done(stream, &shared) => {}
        _ = down.wait_for(|d| *d) => {}
    }
}

/// Counts a connection as open until dropped.
struct OpenGuard<'a>(&'a Shared);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}
