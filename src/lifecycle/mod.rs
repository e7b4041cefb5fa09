//! The process lifecycle around Pingora's server: signals, the drain after SIGTERM, and the
//! hand-over of routing state across a graceful upgrade (`-u` + SIGQUIT).
//!
//! Pingora's own sequence is kept (SIGQUIT: send the listening sockets to the new process, keep
//! accepting 5 s, stop; SIGTERM: stop accepting; then up to `grace_period_seconds` for what is
//! in flight and `graceful_shutdown_timeout_seconds` for the runtimes). On top of it:
//!
//! - [`signals`]: signal handlers are armed before any listener accepts, SIGTERM flips `/health`
//!   to 503 `{"status":"shutting_down"}`, SIGQUIT writes the routing-state snapshot first;
//! - [`drain`]: counts open proxy connections and ends the process (exit 0) as soon as the last
//!   one is done, instead of sleeping out the whole grace period;
//! - [`outlive`]: keeps the metrics listener answering during a SIGTERM drain;
//! - [`handover`]: the per-candidate EWMA snapshot the new process imports.

pub mod drain;
pub mod handover;
pub mod outlive;
pub mod signals;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Shared lifecycle state of one sturnus process.
#[derive(Debug, Default)]
pub struct Lifecycle {
    /// SIGTERM received: the process is draining and `/health` says so.
    draining: AtomicBool,
    /// SIGQUIT received: the listening sockets go to a new process.
    upgrading: AtomicBool,
    /// Open downstream connections on the proxy listener.
    connections: AtomicU64,
}

impl Lifecycle {
    /// A running process: not draining, not upgrading, no connections.
    pub fn new() -> Lifecycle {
        Lifecycle::default()
    }

    /// Whether SIGTERM was received (`/health` then answers 503).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Marks the process as draining after SIGTERM.
    pub fn begin_drain(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// Whether SIGQUIT was received (a new process takes the sockets over).
    pub fn is_upgrading(&self) -> bool {
        self.upgrading.load(Ordering::Acquire)
    }

    /// Marks the process as handing over to a new one after SIGQUIT.
    pub fn begin_upgrade(&self) {
        self.upgrading.store(true, Ordering::Release);
    }

    /// Open connections on the proxy listener (in flight or idle keep-alive).
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Acquire)
    }

    /// Counts a proxy connection as open until the returned guard drops (it may move into the
    /// connection's own task).
    pub fn open_connection(self: &Arc<Self>) -> ConnectionGuard {
        self.connections.fetch_add(1, Ordering::AcqRel);
        ConnectionGuard {
            lifecycle: self.clone(),
        }
    }
}

/// Keeps one proxy connection counted as open; releases it on drop (also when cancelled).
#[must_use = "the connection stops counting as open as soon as the guard drops"]
#[derive(Debug)]
pub struct ConnectionGuard {
    lifecycle: Arc<Lifecycle>,
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.lifecycle.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_start_clear_and_latch() {
        let l = Lifecycle::new();
        assert!(!l.is_draining() && !l.is_upgrading());
        l.begin_drain();
        assert!(l.is_draining() && !l.is_upgrading());
        l.begin_upgrade();
        assert!(l.is_upgrading());
    }

    #[test]
    fn connection_guards_count_and_release() {
        let l = Arc::new(Lifecycle::new());
        {
            let _a = l.open_connection();
            let _b = l.open_connection();
            assert_eq!(l.connections(), 2);
        }
        assert_eq!(l.connections(), 0);
    }
}
