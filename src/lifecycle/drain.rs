//! The drain: count open proxy connections and end the process once the last one is done.
//!
//! [`Draining`] wraps the proxy's Pingora app. Pingora calls `process_new` once per downstream
//! connection; [`Draining`] serves the connection in a task of its own (HTTP/1.1 keep-alive
//! requests loop inside it) and counts it open for that task's life, whether a request is in
//! flight or the connection waits for the next one.
//!
//! When Pingora stops the proxy listener (SIGTERM, or 5 s after SIGQUIT handed the sockets over)
//! it calls `cleanup`. The inner cleanup (the header guard's, then Pingora's) closes idle
//! keep-alive connections at once, which races with a client that is just sending its next
//! request on one. So `cleanup` first settles
//! ([`SETTLE`], so connections accepted just before are counted), then waits up to
//! [`LAST_REQUEST_WAIT`] while connections are open: each request arriving meanwhile is served,
//! with `Connection: close` (Pingora disables keep-alive once shutdown started), and the client
//! moves to a new connection — to the new process, in an upgrade. Then idle connections are
//! closed, and once no connection is left the process exits with status 0, rather than sleeping
//! out the rest of `grace_period_seconds` as unmodified Pingora does. A stream still running when
//! the grace period ends is cut by Pingora's runtime shutdown, as before.

use super::Lifecycle;
use async_trait::async_trait;
use pingora_core::apps::ServerApp;
use pingora_core::protocols::Stream;
use pingora_core::server::ShutdownWatch;
use std::sync::Arc;
use std::time::Duration;

/// Longest wait for busy keep-alive connections to finish a last request before idle ones are
/// closed.
pub const LAST_REQUEST_WAIT: Duration = Duration::from_secs(2);

/// Pause before the first look at the connection count: a connection accepted just before the
/// listener closed is counted once its task starts, and its request is then still served.
pub const SETTLE: Duration = Duration::from_millis(200);

/// How often the drain looks at the connection count.
const POLL: Duration = Duration::from_millis(10);

/// What happens once the proxy has drained: normally [`exit`], replaceable for tests.
pub type OnDrained = fn();

/// Ends the process with status 0 after a completed drain.
pub fn exit() {
    log::info!("drained: no proxy connection left, exiting");
    crate::observe::log_sink::flush();
    std::process::exit(0);
}

/// The proxy app with connection counting and a drain that ends the process.
pub struct Draining<A> {
    inner: Arc<A>,
    lifecycle: Arc<Lifecycle>,
    last_request_wait: Duration,
    on_drained: OnDrained,
}

impl<A> Draining<A> {
    /// Wraps `inner`; after the drain, `on_drained` runs (use [`exit`] in the server).
    pub fn new(inner: A, lifecycle: Arc<Lifecycle>, on_drained: OnDrained) -> Draining<A> {
        Draining {
            inner: Arc::new(inner),
            lifecycle,
            last_request_wait: LAST_REQUEST_WAIT,
            on_drained,
        }
    }

    /// Waits while connections are open, at most `limit` (forever when `None`).
    async fn wait_idle(&self, limit: Option<Duration>) {
        let deadline = limit.map(|d| tokio::time::Instant::now() + d);
        while self.lifecycle.connections() > 0 {
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

#[async_trait]
impl<A: ServerApp + Send + Sync + 'static> ServerApp for Draining<A> {
    async fn process_new(
        self: &Arc<Self>,
        session: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let open = self.lifecycle.open_connection();
        let inner = self.inner.clone();
        let shutdown = shutdown.clone();
        // Pingora's accept task holds its TLS handshake state inline (about 5 KiB, on the plain
        // listener too) for as long as `process_new` runs, idle keep-alive included. The
        // connection goes on in a task of its own, sized to what it holds, and the accept task
        // ends now.
        tokio::spawn(async move {
            let _open = open;
            let mut next = Some(session);
            while let Some(stream) = next.take() {
                next = inner.process_new(stream, &shutdown).await;
            }
        });
        None
    }

    async fn cleanup(&self) {
        let open = self.lifecycle.connections();
        log::info!("proxy listener closed; draining {open} open connection(s)");
        tokio::time::sleep(SETTLE).await;
        self.wait_idle(Some(self.last_request_wait)).await;
        self.inner.cleanup().await;
        self.wait_idle(None).await;
        (self.on_drained)();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    static DRAINED: AtomicBool = AtomicBool::new(false);

    struct Nothing;

    #[async_trait]
    impl ServerApp for Nothing {
        async fn process_new(self: &Arc<Self>, _: Stream, _: &ShutdownWatch) -> Option<Stream> {
            None
        }
    }

    /// Holds its connection until told to let go.
    struct Held(tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>);

    #[async_trait]
    impl ServerApp for Held {
        async fn process_new(self: &Arc<Self>, _: Stream, _: &ShutdownWatch) -> Option<Stream> {
            let release = self.0.lock().await.take();
            if let Some(release) = release {
                let _ = release.await;
            }
            None
        }
    }

    #[tokio::test]
    async fn a_connection_is_served_in_its_own_task_and_counted_until_it_ends() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        let (_client, accepted) = (client.unwrap(), accepted.unwrap().0);
        let stream: Stream = Box::new(pingora_core::protocols::l4::stream::Stream::from(accepted));
        let (release_tx, release_rx) = tokio::sync::oneshot::channel();
        let lifecycle = Arc::new(Lifecycle::new());
        let held = Held(tokio::sync::Mutex::new(Some(release_rx)));
        let draining = Arc::new(Draining::new(held, lifecycle.clone(), || {}));
        let (_tx, shutdown) = tokio::sync::watch::channel(false);
        // Pingora's accept task gets the call back at once; the connection lives on.
        let back = tokio::time::timeout(
            Duration::from_secs(5),
            draining.process_new(stream, &shutdown),
        );
        assert!(back.await.expect("returned at once").is_none());
        assert_eq!(lifecycle.connections(), 1);
        release_tx.send(()).unwrap();
        while lifecycle.connections() > 0 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn cleanup_waits_for_open_connections_then_reports_drained() {
        let lifecycle = Arc::new(Lifecycle::new());
        let mut draining = Draining::new(Nothing, lifecycle.clone(), || {
            DRAINED.store(true, Ordering::SeqCst)
        });
        draining.last_request_wait = Duration::from_millis(20);
        let draining = Arc::new(draining);
        let guard_owner = lifecycle.clone();
        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
        let held = tokio::spawn(async move {
            let _open = guard_owner.open_connection();
            let _ = release_rx.await;
        });
        while lifecycle.connections() == 0 {
            tokio::task::yield_now().await;
        }
        let cleanup = tokio::spawn({
            let draining = draining.clone();
            async move { draining.cleanup().await }
        });
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(
            !DRAINED.load(Ordering::SeqCst),
            "drained with a connection open"
        );
        release_tx.send(()).unwrap();
        held.await.unwrap();
        cleanup.await.unwrap();
        assert!(DRAINED.load(Ordering::SeqCst));
    }
}
