//! Congestion discount: how much of a candidate's latency is queueing that traffic like ours
//! causes, turned slowly into a share discount.
//!
//! Many sidecars sharing a provider's capacity all see it get slower as they send it more.
//! Ranking by average latency alone then settles where the faster providers are queued until
//! they are as slow as the slowest one used (every sidecar is content, the fleet is not), and
//! a sharp preference swings the whole fleet in step. Instead, each sidecar keeps, per
//! candidate and mode, from the latency of its successful answers:
//!
//! - a **level**: the lower of a fast (`ewma_alpha`) and a slow ([`SLOW_ALPHA`]) EWMA (fast
//!   down, so a recovery shows at once; slow up, so jitter does not);
//! - a **floor**: the lowest value of a steady EWMA ([`STEADY_ALPHA`]; the plain mean of the
//!   first answers until it has 50), each value raised by `CONFIDENCE / √n` so a lucky
//!   start does not set it, and rising by [`FLOOR_RISE`] per answer: the candidate's latency
//!   when nothing queues;
//! - a **discount** `d`: with excess = level ÷ floor − 1, each answer adds [`GAIN`] ×
//!   (excess − [`TARGET`]) when the excess is above the target, or takes off [`RELIEF`] ×
//!   (TARGET − excess) when below; `d` stays in `[0, MAX_DISCOUNT]`. An excess above
//!   [`SLOWER`] (twice the floor) leaves `d` alone: that is a provider that became slower
//!   (the latency ranking deals with it), not a queue our shares should settle against.
//!
//! The selector multiplies the candidate's weight by `e^-d`. The discount moves a little per
//! answer, so shares drift towards the point where the loaded candidates queue about
//! [`TARGET`] above their floor instead of jumping with every sample: integral action, which
//! a fleet reacting to the same queues with a delay needs to stay stable, and it is what
//! makes each sidecar weigh a provider by the latency *more* traffic would get there rather
//! than by the average it gets now. A candidate whose latency does not grow with load (a
//! hosted API, a provider that is simply slower) never accumulates a discount; one that
//! answers errors is left to the success rate: only successful answers feed it, since a fast
//! 503 is not a short queue.

use super::attempt::Mode;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Smoothing of the slow latency EWMA (per answer).
pub const SLOW_ALPHA: f64 = 0.1;

/// Smoothing of the steady latency EWMA whose lowest value is the floor (per answer).
pub const STEADY_ALPHA: f64 = 0.02;

/// Successful answers before the floor is tracked.
pub const WARM_ANSWERS: u64 = 2;

/// Relative uncertainty of one latency sample: the steady EWMA of `n` answers is raised by
/// `CONFIDENCE / √n` before it may lower the floor.
pub const CONFIDENCE: f64 = 0.25;

/// Relative rise of the floor per answer (so a provider that really became slower is
/// eventually measured from its new floor: ×2 after about 3 500 answers).
pub const FLOOR_RISE: f64 = 0.0002;

/// Queueing above the floor (as a fraction of it) the discount steers towards.
pub const TARGET: f64 = 0.15;

/// Discount added per answer per unit of excess above [`TARGET`].
pub const GAIN: f64 = 0.3;

/// Discount taken off per answer per unit below [`TARGET`].
pub const RELIEF: f64 = 2.0;

/// Largest discount (weight × e^-8 ≈ 0.03%; a candidate 1.75× faster has e^(6 ln 1.75) ≈ 29×
/// the weight, so the discount must reach well past 3.4 to hand its traffic over).
pub const MAX_DISCOUNT: f64 = 8.0;

/// Excess above which a candidate counts as slower rather than queued: `d` is left alone.
pub const SLOWER: f64 = 1.0;

/// Bit pattern for "no value yet".
const EMPTY: u64 = u64::MAX;

/// Per-mode congestion state of one candidate.
#[derive(Debug)]
pub(crate) struct Congestion {
    fast: [AtomicU64; 2],
    slow: [AtomicU64; 2],
    steady: [AtomicU64; 2],
    /// Successful answers folded in, per mode.
    answers: [AtomicU64; 2],
    floor: [AtomicU64; 2],
    discount: [AtomicU64; 2],
    /// Latest latency sample per mode, until its outcome says whether it was a success.
    last: [AtomicU64; 2],
    /// Mode slot of the latest sample.
    last_mode: AtomicU64,
}

impl Default for Congestion {
    fn default() -> Self {
        let empty = || [AtomicU64::new(EMPTY), AtomicU64::new(EMPTY)];
        Self {
            fast: empty(),
            slow: empty(),
            steady: empty(),
            answers: [AtomicU64::new(0), AtomicU64::new(0)],
            floor: empty(),
            discount: [AtomicU64::new(0), AtomicU64::new(0)],
            last: empty(),
            last_mode: AtomicU64::new(0),
        }
    }
}

/// Reads an f64 cell; `None` when empty.
#[cfg(test)]
fn load(cell: &AtomicU64) -> Option<f64> {
    match cell.load(Relaxed) {
        EMPTY => None,
        bits => Some(f64::from_bits(bits)),
    }
}

/// Atomically applies `f` to the value in `cell` (`None` when empty); returns the new value.
fn update(cell: &AtomicU64, f: impl Fn(Option<f64>) -> f64) -> f64 {
    let mut out = 0.0;
    let _ = cell.fetch_update(Relaxed, Relaxed, |cur| {
        out = f((cur != EMPTY).then_some(f64::from_bits(cur)));
        Some(out.to_bits())
    });
    out
}

fn ewma(old: Option<f64>, sample: f64, alpha: f64) -> f64 {
    old.map_or(sample, |o| o + alpha * (sample - o))
}

impl Congestion {
    /// Remembers the latest latency sample of `mode` until its outcome is known.
    pub(crate) fn sample(&self, mode: Mode, micros: f64) {
        self.last[mode.slot()].store(micros.to_bits(), Relaxed);
        self.last_mode.store(mode.slot() as u64, Relaxed);
    }

    /// The latest sample's attempt failed: it says nothing about queueing.
    pub(crate) fn failure(&self) {
        let i = (self.last_mode.load(Relaxed) as usize).min(1);
        self.last[i].store(EMPTY, Relaxed);
    }

    /// The latest sample's attempt succeeded: fold it in.
    pub(crate) fn success(&self, alpha: f64) {
        let i = (self.last_mode.load(Relaxed) as usize).min(1);
        let bits = self.last[i].swap(EMPTY, Relaxed);
        if bits == EMPTY {
            return;
        }
        let x = f64::from_bits(bits);
        let fast = update(&self.fast[i], |o| ewma(o, x, alpha));
        // Both EWMAs start as the plain mean of the first answers.
        let n = self.answers[i].fetch_add(1, Relaxed) + 1;
        let first = 1.0 / n as f64;
        let slow = update(&self.slow[i], |o| ewma(o, x, SLOW_ALPHA.max(first)));
        let steady = update(&self.steady[i], |o| ewma(o, x, STEADY_ALPHA.max(first)));
        if n < WARM_ANSWERS {
            return;
        }
        let settled = (n as f64).min(1.0 / STEADY_ALPHA);
        let candidate = steady * (1.0 + CONFIDENCE / settled.sqrt());
        let floor = update(&self.floor[i], |o| {
            o.map_or(candidate, |f| candidate.min(f * (1.0 + FLOOR_RISE)))
        });
        let level = fast.min(slow);
        let excess = if floor > 0.0 {
            level / floor - 1.0
        } else {
            0.0
        };
        let step = if excess > SLOWER {
            0.0
        } else if excess > TARGET {
            GAIN * (excess - TARGET)
        } else {
            -RELIEF * (TARGET - excess)
        };
        update(&self.discount[i], |d| {
            (d.unwrap_or(0.0) + step).clamp(0.0, MAX_DISCOUNT)
        });
    }

    /// The discount `d` of `mode` (the selector multiplies the weight by `e^-d`).
    #[inline]
    pub(crate) fn discount(&self, mode: Mode) -> f64 {
        f64::from_bits(self.discount[mode.slot()].load(Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: Mode = Mode::NonStreaming;

    fn answer(c: &Congestion, micros: f64) {
        c.sample(NS, micros);
        c.success(0.4);
    }

    #[test]
    fn steady_latency_earns_no_discount() {
        let c = Congestion::default();
        for i in 0..500 {
            // ±10% around 200 ms.
            answer(&c, 200_000.0 * (1.0 + 0.1 * ((i % 7) as f64 - 3.0) / 3.0));
        }
        assert_eq!(c.discount(NS), 0.0);
        assert_eq!(c.discount(Mode::Streaming), 0.0);
    }

    #[test]
    fn queueing_builds_a_discount_gradually_and_a_recovery_clears_it() {
        let c = Congestion::default();
        for _ in 0..50 {
            answer(&c, 200_000.0);
        }
        // 40% above the floor: the discount grows a little per answer, once the slow EWMA
        // shows it.
        for _ in 0..20 {
            answer(&c, 280_000.0);
        }
        let some = c.discount(NS);
        assert!(some > 0.0 && some < 2.0, "{some}");
        for _ in 0..200 {
            answer(&c, 280_000.0);
        }
        assert!(c.discount(NS) > 3.0, "{}", c.discount(NS));
        // Back at the floor: RELIEF x TARGET = 0.3 off per answer clears it.
        for _ in 0..30 {
            answer(&c, 200_000.0);
        }
        assert!(c.discount(NS) < 0.5, "{}", c.discount(NS));
        // Ten times slower is a slower provider, not a queue: no discount builds up.
        let d = c.discount(NS);
        for _ in 0..50 {
            answer(&c, 2_000_000.0);
        }
        assert!(c.discount(NS) <= d + 0.5, "{}", c.discount(NS));
    }

    #[test]
    fn only_successes_count() {
        let c = Congestion::default();
        c.sample(NS, 30_000.0);
        c.failure();
        c.success(0.4);
        assert_eq!(load(&c.floor[NS.slot()]), None);
        answer(&c, 200_000.0);
        answer(&c, 200_000.0);
        // Two answers: the floor is their mean raised by 0.25/√2.
        let floor = load(&c.floor[NS.slot()]).unwrap_or(0.0);
        assert!(
            (floor - 200_000.0 * (1.0 + 0.25 / 2f64.sqrt())).abs() < 1e-6,
            "{floor}"
        );
        // A sample folds in once.
        c.success(0.4);
        assert_eq!(c.answers[NS.slot()].load(Relaxed), 2);
    }
}
