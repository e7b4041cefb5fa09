//! How fast buffered request bodies are leaving the budget, for `Retry-After`.
//!
//! Every release adds to a running total. At most once per [`WINDOW_MS`] the caller that
//! notices the window has passed (by winning one compare-exchange) turns the bytes released
//! since the last mark into a bytes-per-second sample and folds it into an EWMA. Everything
//! is atomics; no lock is ever taken.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Shortest span a drain-rate sample covers.
pub const WINDOW_MS: u64 = 250;
/// EWMA weight of the newest sample.
const ALPHA: f64 = 0.5;
/// Bit pattern meaning "no sample yet".
const UNKNOWN: u64 = u64::MAX;

/// A lock-free meter of bytes released per second.
#[derive(Debug)]
pub struct DrainMeter {
    released: AtomicU64,
    mark_ms: AtomicU64,
    mark_released: AtomicU64,
    rate: AtomicU64,
}

impl Default for DrainMeter {
    fn default() -> Self {
        DrainMeter::new()
    }
}

impl DrainMeter {
    /// A meter with no observations, whose clock starts at 0 ms.
    pub fn new() -> Self {
        DrainMeter {
            released: AtomicU64::new(0),
            mark_ms: AtomicU64::new(0),
            mark_released: AtomicU64::new(0),
            rate: AtomicU64::new(UNKNOWN),
        }
    }

    /// Notes `bytes` leaving the budget at `now_ms`.
    pub fn note(&self, bytes: u64, now_ms: u64) {
        self.released.fetch_add(bytes, Relaxed);
        self.sample(now_ms);
    }

    /// Bytes per second drained recently; `None` until a window with a release has passed.
    pub fn rate(&self, now_ms: u64) -> Option<f64> {
        self.sample(now_ms);
        match self.rate.load(Relaxed) {
            UNKNOWN => None,
            bits => Some(f64::from_bits(bits)),
        }
    }

    /// Total bytes ever released.
    #[cfg(test)]
    pub fn released(&self) -> u64 {
        self.released.load(Relaxed)
    }

    /// Closes the current window if it is old enough (one caller wins; the others skip).
    fn sample(&self, now_ms: u64) {
        let mark = self.mark_ms.load(Relaxed);
        let elapsed = now_ms.saturating_sub(mark);
        if elapsed < WINDOW_MS {
            return;
        }
        if self
            .mark_ms
            .compare_exchange(mark, now_ms, Relaxed, Relaxed)
            .is_err()
        {
            return;
        }
        let total = self.released.load(Relaxed);
        let before = self.mark_released.swap(total, Relaxed);
        let moved = total.saturating_sub(before);
        let current = self.rate.load(Relaxed);
        if current == UNKNOWN && moved == 0 {
            // Nothing has ever drained: there is nothing to measure yet.
            return;
        }
        let sample = moved as f64 * 1000.0 / elapsed as f64;
        let next = if current == UNKNOWN {
            sample
        } else {
            ALPHA * sample + (1.0 - ALPHA) * f64::from_bits(current)
        };
        self.rate.store(next.to_bits(), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_until_a_window_with_releases_passes() {
        let m = DrainMeter::new();
        assert_eq!(m.rate(1_000), None);
        m.note(1_000, 1_100);
        assert_eq!(m.rate(1_200), None, "window not over yet");
        assert!(m.rate(1_350).is_some());
    }

    #[test]
    fn measures_bytes_per_second() {
        let m = DrainMeter::new();
        m.rate(0);
        // 1 MB released over the first second.
        for i in 0..10 {
            m.note(100_000, i * 100);
        }
        let r = m.rate(1_000).unwrap();
        assert!((r - 1_000_000.0).abs() < 150_000.0, "{r}");
        assert_eq!(m.released(), 1_000_000);
    }

    #[test]
    fn an_idle_period_lowers_the_rate() {
        let m = DrainMeter::new();
        m.note(1_000_000, 0);
        let busy = m.rate(1_000).unwrap();
        let idle = m.rate(11_000).unwrap();
        assert!(idle <= busy / 2.0, "{idle} vs {busy}");
    }

    #[test]
    fn concurrent_notes_lose_no_bytes() {
        let m = std::sync::Arc::new(DrainMeter::new());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        m.note(3, t * 100_000 + i);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(m.released(), 120_000);
        assert!(m.rate(1_000_000).is_some());
    }
}
