//! Unix signals, with sturnus's steps before Pingora's.
//!
//! Pingora's default watcher installs its handlers only once the main loop runs, after the
//! listeners already accept; a SIGTERM in between would kill the process outright. Here a
//! background service ([`Listener`]) arms the handlers first and reports ready, and the proxy and
//! metrics services depend on it, so nothing is served before a signal can be handled. Each signal
//! is forwarded to [`Watch`], Pingora's shutdown watcher, which acts before handing it on:
//!
//! - SIGTERM: `/health` turns 503 (the drain starts), then Pingora's graceful terminate;
//! - SIGQUIT: the routing-state snapshot is written beside `upgrade_sock`, then Pingora sends
//!   the listening sockets to the new process (which imports the snapshot once it has them).
//!   Pingora passes sockets on Linux only: elsewhere SIGQUIT drains like SIGTERM;
//! - SIGINT: Pingora's fast shutdown. A SIGINT during a drain ends the process at once.

use super::{handover, Lifecycle};
use crate::app::App;
use async_trait::async_trait;
use pingora_core::server::{ShutdownSignal, ShutdownSignalWatch, ShutdownWatch};
use pingora_core::services::background::BackgroundService;
use pingora_core::services::ServiceReadyNotifier;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, Mutex};

/// The signals sturnus acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGQUIT: graceful upgrade.
    Quit,
    /// SIGTERM: graceful terminate.
    Term,
    /// SIGINT: fast shutdown.
    Int,
}

/// Creates the connected pair: the background service arming the handlers and Pingora's watcher.
/// `snapshot` is where SIGQUIT writes the routing state (see [`handover::path_for`]).
pub fn pair(app: Arc<App>, snapshot: PathBuf) -> (Listener, Watch) {
    let (tx, rx) = mpsc::unbounded_channel();
    let listener = Listener {
        tx,
        lifecycle: app.lifecycle.clone(),
    };
    let watch = Watch {
        rx: Mutex::new(rx),
        app,
        snapshot,
    };
    (listener, watch)
}

/// Background service: arms the signal handlers, reports ready, forwards every signal.
pub struct Listener {
    tx: mpsc::UnboundedSender<Signal>,
    lifecycle: Arc<Lifecycle>,
}

#[async_trait]
impl BackgroundService for Listener {
    async fn start_with_ready_notifier(&self, _: ShutdownWatch, ready: ServiceReadyNotifier) {
        let armed = (
            signal(SignalKind::quit()),
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        let (mut quit, mut term, mut int) = match armed {
            (Ok(quit), Ok(term), Ok(int)) => (quit, term, int),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                log::error!(
                    "cannot install signal handlers ({e}); SIGTERM and SIGQUIT will not drain"
                );
                ready.notify_ready();
                return;
            }
        };
        ready.notify_ready();
        let mut forwarded = false;
        loop {
            let got = tokio::select! {
                Some(()) = quit.recv() => Signal::Quit,
                Some(()) = term.recv() => Signal::Term,
                Some(()) = int.recv() => Signal::Int,
                else => return,
            };
            if forwarded && got == Signal::Int {
                log::warn!("SIGINT during shutdown: exiting now");
                std::process::exit(0);
            }
            if forwarded {
                log::info!("{got:?} ignored: shutdown already in progress");
                continue;
            }
            forwarded = self.tx.send(got).is_ok();
            if got == Signal::Term {
                // Visible at once, even before Pingora's watcher runs.
                self.lifecycle.begin_drain();
            }
        }
    }
}

/// Pingora's shutdown watcher, fed by [`Listener`].
pub struct Watch {
    rx: Mutex<mpsc::UnboundedReceiver<Signal>>,
    app: Arc<App>,
    snapshot: PathBuf,
}

#[async_trait]
impl ShutdownSignalWatch for Watch {
    async fn recv(&self) -> ShutdownSignal {
        let Some(got) = self.rx.lock().await.recv().await else {
            return std::future::pending().await;
        };
        match got {
            Signal::Term => {
                self.app.lifecycle.begin_drain();
                log::info!("SIGTERM: draining; /health answers 503 until exit");
                ShutdownSignal::GracefulTerminate
            }
            Signal::Quit if !cfg!(target_os = "linux") => {
                // Pingora hands listening sockets over only on Linux; elsewhere it would close
                // them with no new process to take them.
                self.app.lifecycle.begin_drain();
                log::warn!("SIGQUIT: graceful upgrade needs Linux; draining as after SIGTERM");
                ShutdownSignal::GracefulTerminate
            }
            Signal::Quit => {
                self.app.lifecycle.begin_upgrade();
                match handover::save(&self.app.catalog, &self.snapshot) {
                    Ok(n) => log::info!(
                        "SIGQUIT: routing state of {n} candidate(s) written to {}",
                        self.snapshot.display()
                    ),
                    Err(e) => log::warn!(
                        "SIGQUIT: cannot write the routing state to {}: {e}; the new process starts cold",
                        self.snapshot.display()
                    ),
                }
                ShutdownSignal::GracefulUpgrade
            }
            Signal::Int => ShutdownSignal::FastShutdown,
        }
    }
}
