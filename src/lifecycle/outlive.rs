//! Keeps the metrics listener serving through a SIGTERM drain.
//!
//! Pingora stops every listening service when shutdown starts. During a SIGTERM drain the metrics
//! listener must keep answering, so that `/health` can report 503 `{"status":"shutting_down"}`
//! to the probes and `/metrics` stays scrapable while streams finish; it ends with the process.
//! In a graceful upgrade the new process owns the socket, so there it stops as Pingora says.

use super::Lifecycle;
use async_trait::async_trait;
use pingora_core::server::{ListenFds, ShutdownWatch};
use pingora_core::services::Service;
use std::sync::Arc;
use tokio::sync::watch;

/// A listening service that outlives Pingora's shutdown unless the process is upgrading.
pub struct Outliving<S> {
    inner: S,
    lifecycle: Arc<Lifecycle>,
}

impl<S> Outliving<S> {
    /// Wraps `inner`, reading the shutdown kind from `lifecycle`.
    pub fn new(inner: S, lifecycle: Arc<Lifecycle>) -> Outliving<S> {
        Outliving { inner, lifecycle }
    }
}

/// The shutdown watch handed to the wrapped service: it turns true when Pingora's does and the
/// process is upgrading, and never otherwise (its sender lives as long as the task).
fn follow_upgrades(mut pingora: ShutdownWatch, lifecycle: Arc<Lifecycle>) -> ShutdownWatch {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        while pingora.changed().await.is_ok() {
            if *pingora.borrow() && lifecycle.is_upgrading() {
                let _ = tx.send(true);
                return;
            }
        }
        // Pingora's sender is gone or shutdown is a drain: keep the wrapped service running.
        std::future::pending::<()>().await;
        drop(tx);
    });
    rx
}

#[async_trait]
impl<S: Service> Service for Outliving<S> {
    async fn start_service(
        &mut self,
        fds: Option<ListenFds>,
        shutdown: ShutdownWatch,
        listeners_per_fd: usize,
    ) {
        let shutdown = follow_upgrades(shutdown, self.lifecycle.clone());
        self.inner
            .start_service(fds, shutdown, listeners_per_fd)
            .await
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn threads(&self) -> Option<usize> {
        self.inner.threads()
    }

    fn listen_addresses(&self) -> Option<Vec<String>> {
        self.inner.listen_addresses()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn fires_within(rx: &mut ShutdownWatch, wait: Duration) -> bool {
        tokio::time::timeout(wait, rx.wait_for(|v| *v))
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_drain_never_stops_the_wrapped_service() {
        let lifecycle = Arc::new(Lifecycle::new());
        let (tx, rx) = watch::channel(false);
        let mut inner = follow_upgrades(rx, lifecycle.clone());
        lifecycle.begin_drain();
        tx.send(true).unwrap();
        assert!(!fires_within(&mut inner, Duration::from_millis(100)).await);
        drop(tx);
        assert!(!fires_within(&mut inner, Duration::from_millis(50)).await);
        assert!(inner.has_changed().is_ok(), "sender must stay alive");
    }

    #[tokio::test]
    async fn an_upgrade_stops_it_with_pingora() {
        let lifecycle = Arc::new(Lifecycle::new());
        let (tx, rx) = watch::channel(false);
        let mut inner = follow_upgrades(rx, lifecycle.clone());
        lifecycle.begin_upgrade();
        assert!(!fires_within(&mut inner, Duration::from_millis(30)).await);
        tx.send(true).unwrap();
        assert!(fires_within(&mut inner, Duration::from_secs(5)).await);
    }
}
