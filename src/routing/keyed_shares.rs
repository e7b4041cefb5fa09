//! The shares a conversation key is picked over: the alias's shares, smoothed across its keyed
//! picks.
//!
//! A keyed pick is a weighted rendezvous pick ([`super::rendezvous`]): every sidecar sends a
//! conversation's next turn to the same candidate as long as their shares agree. A sidecar's
//! shares move with every answer and every waiting request it sees, so two sidecars rarely
//! hold exactly the same shares at the same moment, and each difference moves some
//! conversations away from the candidate whose prompt cache holds them. Smoothing the shares
//! over the last few keyed picks takes out most of that per-sidecar noise while keeping what
//! every sidecar sees alike: a candidate that slows down or fails still loses its conversations
//! within a few picks, and one whose current share is 0 (backed off) is out at once.
//!
//! Lock-free: one cell per candidate and mode, read and written with relaxed atomics; two
//! threads smoothing at once may lose one of their steps, which only makes the smoothing a
//! little slower.

use super::attempt::Mode;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bit pattern for "no smoothed share yet".
const EMPTY: u64 = u64::MAX;

/// One candidate's smoothed share within one alias, per mode.
#[derive(Debug)]
pub struct SmoothedShare {
    cells: [AtomicU64; 2],
}

impl Default for SmoothedShare {
    fn default() -> Self {
        Self {
            cells: [AtomicU64::new(EMPTY), AtomicU64::new(EMPTY)],
        }
    }
}

impl SmoothedShare {
    /// Moves this mode's smoothed share `smoothing` of the way towards `share` (the
    /// [`super::keyed_hits::KeyedParams::smoothing`] of the rule) and
    /// returns it. The first share is taken as it is; a share that is not positive (a
    /// backed-off candidate) returns 0 and forgets the smoothed value, so the candidate starts
    /// afresh from its share when it returns.
    #[inline]
    pub fn follow(&self, mode: Mode, share: f64, smoothing: f64) -> f64 {
        let cell = &self.cells[mode.slot()];
        if !(share > 0.0 && share.is_finite()) {
            cell.store(EMPTY, Relaxed);
            return 0.0;
        }
        let smoothed = match cell.load(Relaxed) {
            EMPTY => share,
            bits => {
                let old = f64::from_bits(bits);
                old + smoothing * (share - old)
            }
        };
        cell.store(smoothed.to_bits(), Relaxed);
        smoothed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: Mode = Mode::NonStreaming;
    const SMOOTHING: f64 = 0.3;

    #[test]
    fn the_first_share_is_taken_as_it_is_and_later_ones_are_followed() {
        let s = SmoothedShare::default();
        assert_eq!(s.follow(NS, 0.5, SMOOTHING), 0.5);
        let next = s.follow(NS, 1.0, SMOOTHING);
        assert!((next - (0.5 + SMOOTHING * 0.5)).abs() < 1e-12, "{next}");
        // A steady share is reached geometrically.
        let mut last = next;
        for _ in 0..60 {
            last = s.follow(NS, 1.0, SMOOTHING);
        }
        assert!((last - 1.0).abs() < 1e-6, "{last}");
    }

    #[test]
    fn a_share_of_zero_is_out_at_once_and_starts_afresh_when_it_returns() {
        let s = SmoothedShare::default();
        s.follow(NS, 0.9, SMOOTHING);
        assert_eq!(s.follow(NS, 0.0, SMOOTHING), 0.0);
        assert_eq!(s.follow(NS, f64::NAN, SMOOTHING), 0.0);
        assert_eq!(s.follow(NS, 0.02, SMOOTHING), 0.02);
    }

    #[test]
    fn modes_are_smoothed_apart() {
        let s = SmoothedShare::default();
        s.follow(NS, 0.2, SMOOTHING);
        assert_eq!(s.follow(Mode::Streaming, 0.8, SMOOTHING), 0.8);
        let ns = s.follow(NS, 0.2, SMOOTHING);
        assert!((ns - 0.2).abs() < 1e-12, "{ns}");
    }
}
