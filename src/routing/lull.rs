//! Lulls: the whole fleet lightens one candidate at a time, at the same moments, so each
//! sidecar can see how fast that candidate answers once the fleet's queue at it has drained.
//!
//! A sidecar carries a small part of a shared provider's load, so nothing it does alone shows
//! whether the latency it measures is the provider's own or a queue the fleet keeps full. Every
//! sidecar reads the same wall clock, though, and runs the same config: every `period_us`
//! the next candidate of each alias (by its position in the alias) gets a lull of
//! `window_us`: its weight in the unkeyed picks is multiplied by `e^-discount` ([`LullParams`]
//! holds the constants). When
//! every sidecar does so at once, a candidate the fleet keeps queued gets a fraction of its
//! traffic for that moment and its queue empties; the requests sent from `settle_us` into
//! the lull until it ends are answered at the candidate's unqueued latency, and
//! [`super::congestion`] lowers its reference with them. A candidate whose latency does not
//! depend on the fleet's traffic answers them as fast as any other request, so it reads as not
//! queued. Keyed picks (conversations) are left alone: moving a conversation costs its cache.
//!
//! Lulls are aligned on the Unix epoch, so sidecars on different machines agree to
//! within their clocks' offset (milliseconds under NTP); [`align_to_wall_clock`] ties the
//! routing clock to it once at start. The simulator leaves the offset at 0: its sidecars share
//! one virtual clock.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The lulls' constants (`[routing.rule.lull]`, `--param lull.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LullParams {
    /// Time between the starts of two lulls: each of an alias's `n` candidates gets one every
    /// `n` periods.
    pub period_us: u64,
    /// How long a lull lasts (at most `period_us`).
    pub window_us: u64,
    /// Time from a lull's start until the requests sent in it count as unqueued samples: the
    /// fleet's queue at the candidate has emptied by then.
    pub settle_us: u64,
    /// Discount on the lulled candidate's weight (`e^-1.5` ≈ 0.22 of it); 0 turns lulls off.
    pub discount: f64,
}

impl LullParams {
    /// The defaults, as a constant.
    pub const DEFAULT: LullParams = LullParams {
        period_us: 20_000_000,
        window_us: 1_500_000,
        settle_us: 400_000,
        discount: 1.5,
    };
}

impl Default for LullParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

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
/// candidates it lightens and how far into it we are. `None` between lulls, for aliases of
/// one candidate (nothing to move its traffic to) and when lulls are off.
fn lull(now_us: u64, of: usize, p: &LullParams) -> Option<(usize, u64)> {
    if of < 2 || p.period_us == 0 || p.discount <= 0.0 {
        return None;
    }
    let t = now_us.wrapping_add(FLEET_OFFSET_US.load(Relaxed));
    let period = t / p.period_us;
    let into = t - period * p.period_us;
    (into < p.window_us).then(|| ((period % of as u64) as usize, into))
}

/// Which position of an alias of `of` candidates is in its lull at `now_us`, if any.
#[inline]
pub fn lulled(now_us: u64, of: usize, p: &LullParams) -> Option<usize> {
    lull(now_us, of, p).map(|(index, _)| index)
}

/// Whether a request sent to `slot` at `sent_us` went out in that slot's lull after it
/// settled: its answer shows the candidate's latency with the fleet's queue drained.
pub fn unqueued_sample(sent_us: u64, slot: Slot, p: &LullParams) -> bool {
    lull(sent_us, slot.of, p)
        .is_some_and(|(index, into)| index == slot.index && into >= p.settle_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;
    const P: LullParams = LullParams::DEFAULT;

    #[test]
    fn no_discount_or_no_period_turns_lulls_off() {
        let off = LullParams { discount: 0.0, ..P };
        assert_eq!(lulled(0, 3, &off), None);
        let never = LullParams { period_us: 0, ..P };
        assert_eq!(lulled(0, 3, &never), None);
        assert!(!unqueued_sample(
            P.settle_us,
            Slot { index: 0, of: 3 },
            &off
        ));
    }

    #[test]
    fn each_position_gets_a_lull_in_turn_once_per_rotation() {
        // The offset is 0 in tests (nothing here aligns to the wall clock).
        assert_eq!(lulled(0, 3, &P), Some(0));
        assert_eq!(lulled(P.window_us - 1, 3, &P), Some(0));
        assert_eq!(lulled(P.window_us, 3, &P), None);
        assert_eq!(lulled(P.period_us - 1, 3, &P), None);
        assert_eq!(lulled(P.period_us, 3, &P), Some(1));
        assert_eq!(lulled(2 * P.period_us + S, 3, &P), Some(2));
        assert_eq!(lulled(3 * P.period_us, 3, &P), Some(0));
        // Over many periods every position gets the same number of lulls.
        let mut count = [0usize; 4];
        for p in 0..400 {
            if let Some(i) = lulled(p * P.period_us + 1, 4, &P) {
                count[i] += 1;
            }
        }
        assert_eq!(count, [100; 4]);
    }

    #[test]
    fn a_single_candidate_gets_no_lull() {
        assert_eq!(lulled(0, 1, &P), None);
        assert_eq!(lulled(0, 0, &P), None);
        assert!(!unqueued_sample(P.settle_us, Slot { index: 0, of: 1 }, &P));
    }

    #[test]
    fn only_requests_sent_after_the_lull_settles_are_unqueued_samples() {
        let first = Slot { index: 0, of: 3 };
        let second = Slot { index: 1, of: 3 };
        assert!(
            !unqueued_sample(P.settle_us - 1, first, &P),
            "queue not drained yet"
        );
        assert!(unqueued_sample(P.settle_us, first, &P));
        assert!(unqueued_sample(P.window_us - 1, first, &P));
        assert!(!unqueued_sample(P.window_us, first, &P), "lull over");
        assert!(
            !unqueued_sample(P.settle_us, second, &P),
            "another position's lull"
        );
        assert!(unqueued_sample(P.period_us + P.settle_us, second, &P));
    }
}
