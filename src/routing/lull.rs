//! Lulls: the whole fleet lightens one candidate at a time, at the same moments, so each
//! sidecar can see how fast that candidate answers once the fleet's queue at it has drained.
//!
//! A sidecar carries a small part of a shared provider's load, so nothing it does alone shows
//! whether the latency it measures is the provider's own or a queue the fleet keeps full. Every
//! sidecar reads the same wall clock, though, and runs the same config: every [`PERIOD_US`]
//! the next candidate of each alias (by its position in the alias) gets a lull of
//! [`WINDOW_US`]: its weight in the unkeyed picks is multiplied by `e^-`[`DISCOUNT`]. When
//! every sidecar does so at once, a candidate the fleet keeps queued gets a fraction of its
//! traffic for that moment and its queue empties; the requests sent from [`SETTLE_US`] into
//! the lull until it ends are answered at the candidate's unqueued latency, and
//! [`super::congestion`] lowers its reference with them. A candidate whose latency does not
//! depend on the fleet's traffic answers them as fast as any other request, so it reads as not
//! queued. Keyed picks (conversations) are left alone: moving a conversation costs its cache.
//!
//! Lulls are aligned on the Unix epoch, so sidecars on different machines agree to
//! within their clocks' offset (milliseconds under NTP); [`align_to_wall_clock`] ties the
//! routing clock to it once at start. The simulator leaves the offset at 0: its sidecars share
//! one virtual clock.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Time between the starts of two lulls: each of an alias's `n` candidates gets one every `n`
/// periods.
pub const PERIOD_US: u64 = 20_000_000;

/// How long a lull lasts.
pub const WINDOW_US: u64 = 1_500_000;

/// Time from a lull's start until the requests sent in it count as unqueued samples: the
/// fleet's queue at the candidate has emptied by then.
pub const SETTLE_US: u64 = 400_000;

/// Discount on the lulled candidate's weight (`e^-1.5` ≈ 0.22 of it).
pub const DISCOUNT: f64 = 1.5;

/// Offset from the routing clock to Unix time (µs); 0 until [`align_to_wall_clock`].
static FLEET_OFFSET_US: AtomicU64 = AtomicU64::new(0);

/// Ties the routing clock ([`super::pressure::now_us`]) to the wall clock, so this process's
/// lulls start when every other sidecar's do. Call once when the proxy starts.
pub fn align_to_wall_clock() {
    let unix = crate::clock::unix_now().as_micros() as u64;
    let offset = unix.saturating_sub(super::pressure::now_us());
    FLEET_OFFSET_US.store(offset, Relaxed);
}

/// Where a candidate sits in the rotation: its position among its alias's candidates, and
/// how many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Position in the alias.
    pub index: usize,
    /// Candidates in the alias.
    pub of: usize,
}

/// The lull under way at `now_us` on the routing clock: which position of an alias of `of`
/// candidates it lightens and how far into it we are. `None` between lulls and for aliases of
/// one candidate (nothing to move its traffic to).
fn lull(now_us: u64, of: usize) -> Option<(usize, u64)> {
    if of < 2 {
        return None;
    }
    let t = now_us.wrapping_add(FLEET_OFFSET_US.load(Relaxed));
    let into = t % PERIOD_US;
    (into < WINDOW_US).then(|| (((t / PERIOD_US) % of as u64) as usize, into))
}

/// Which position of an alias of `of` candidates is in its lull at `now_us`, if any.
#[inline]
pub fn lulled(now_us: u64, of: usize) -> Option<usize> {
    lull(now_us, of).map(|(index, _)| index)
}

/// Whether a request sent to `slot` at `sent_us` went out in that slot's lull after it
/// settled: its answer shows the candidate's latency with the fleet's queue drained.
pub fn unqueued_sample(sent_us: u64, slot: Slot) -> bool {
    lull(sent_us, slot.of).is_some_and(|(index, into)| index == slot.index && into >= SETTLE_US)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    #[test]
    fn each_position_gets_a_lull_in_turn_once_per_rotation() {
        // The offset is 0 in tests (nothing here aligns to the wall clock).
        assert_eq!(lulled(0, 3), Some(0));
        assert_eq!(lulled(WINDOW_US - 1, 3), Some(0));
        assert_eq!(lulled(WINDOW_US, 3), None);
        assert_eq!(lulled(PERIOD_US - 1, 3), None);
        assert_eq!(lulled(PERIOD_US, 3), Some(1));
        assert_eq!(lulled(2 * PERIOD_US + S, 3), Some(2));
        assert_eq!(lulled(3 * PERIOD_US, 3), Some(0));
        // Over many periods every position gets the same number of lulls.
        let mut count = [0usize; 4];
        for p in 0..400 {
            if let Some(i) = lulled(p * PERIOD_US + 1, 4) {
                count[i] += 1;
            }
        }
        assert_eq!(count, [100; 4]);
    }

    #[test]
    fn a_single_candidate_gets_no_lull() {
        assert_eq!(lulled(0, 1), None);
        assert_eq!(lulled(0, 0), None);
        assert!(!unqueued_sample(SETTLE_US, Slot { index: 0, of: 1 }));
    }

    #[test]
    fn only_requests_sent_after_the_lull_settles_are_unqueued_samples() {
        let first = Slot { index: 0, of: 3 };
        let second = Slot { index: 1, of: 3 };
        assert!(
            !unqueued_sample(SETTLE_US - 1, first),
            "queue not drained yet"
        );
        assert!(unqueued_sample(SETTLE_US, first));
        assert!(unqueued_sample(WINDOW_US - 1, first));
        assert!(!unqueued_sample(WINDOW_US, first), "lull over");
        assert!(
            !unqueued_sample(SETTLE_US, second),
            "another position's lull"
        );
        assert!(unqueued_sample(PERIOD_US + SETTLE_US, second));
    }
}
