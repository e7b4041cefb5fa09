//! What a fake provider saw of its connections, for tests that check how a client treats
//! them: how many were accepted, how many carried a second request (kept alive and reused),
//! and when a peer left before its answer was complete. Also the extra response headers a test
//! asks the provider to send.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Instant;

/// Connection accounting of one fake provider.
#[derive(Debug, Default)]
pub(crate) struct ConnectionLog {
    accepted: AtomicU64,
    reused: AtomicU64,
    abandoned: Mutex<Vec<Instant>>,
    extra_headers: RwLock<Vec<u8>>,
}

impl ConnectionLog {
    /// Counts an accepted connection.
    pub(crate) fn accepted(&self) {
        self.accepted.fetch_add(1, Ordering::Relaxed);
    }

    /// Notes a request arriving on a connection that already answered `answered_before` ones;
    /// the connection counts as reused at its second request.
    pub(crate) fn reused(&self, answered_before: u64) {
        if answered_before == 1 {
            self.reused.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Notes, now, that a peer closed its connection before its answer was complete.
    pub(crate) fn abandoned(&self) {
        self.abandoned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Instant::now());
    }

    /// Appends the test-set response headers (already rendered as header lines).
    pub(crate) fn push_extra_headers(&self, out: &mut Vec<u8>) {
        let extra = self.extra_headers.read().unwrap_or_else(|e| e.into_inner());
        out.extend_from_slice(&extra);
    }

    /// Replaces the test-set response headers.
    pub(crate) fn set_extra_headers(&self, headers: &[(&str, &str)]) {
        let mut rendered = Vec::new();
        for (name, value) in headers {
            rendered.extend_from_slice(name.as_bytes());
            rendered.extend_from_slice(b": ");
            rendered.extend_from_slice(value.as_bytes());
            rendered.extend_from_slice(b"\r\n");
        }
        *self
            .extra_headers
            .write()
            .unwrap_or_else(|e| e.into_inner()) = rendered;
    }

    /// Connections accepted so far.
    pub(crate) fn accepted_count(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Connections that carried more than one request.
    pub(crate) fn reused_count(&self) -> u64 {
        self.reused.load(Ordering::Relaxed)
    }

    /// When each abandoned answer was noticed, oldest first.
    pub(crate) fn abandoned_at(&self) -> Vec<Instant> {
        self.abandoned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_reuse_once_per_connection_and_renders_headers() {
        let log = ConnectionLog::default();
        log.accepted();
        for answered_before in 0..4 {
            log.reused(answered_before);
        }
        assert_eq!((log.accepted_count(), log.reused_count()), (1, 1));
        log.set_extra_headers(&[("x-request-id", "req_1"), ("X-Odd", "A b")]);
        let mut out = b"x-sim-provider: p\r\n".to_vec();
        log.push_extra_headers(&mut out);
        assert_eq!(
            out,
            b"x-sim-provider: p\r\nx-request-id: req_1\r\nX-Odd: A b\r\n"
        );
        assert!(log.abandoned_at().is_empty());
        log.abandoned();
        assert_eq!(log.abandoned_at().len(), 1);
    }
}
