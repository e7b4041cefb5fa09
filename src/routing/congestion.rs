//! Congestion discount: how much of a candidate's latency is queueing that traffic like ours
//! causes, turned slowly into a share discount.
//!
//! Many sidecars sharing a provider's capacity all see it get slower as they send it more.
//! Ranking by average latency alone then settles where the faster providers are queued until
//! they are as slow as the slowest one used (every sidecar is content, the fleet is not), and
//! a sharp preference swings the whole fleet in step. Instead, each sidecar keeps, per
//! candidate and mode, from the latency of its successful answers:
//!
//! - a **level**: the candidate's latency estimate ([`super::latency_mean`]), the mean of its
//!   answers since their level last changed, which a recovery moves within an answer or two
//!   and jitter barely moves;
//! - a **floor**: the lowest value of a steady EWMA (`steady_alpha`; the plain mean of the
//!   first answers until it has 50), each value raised by `confidence / √n` so a lucky
//!   start does not set it, and rising by `floor_rise` per second of answers: the candidate's latency
//!   when nothing queues, as this sidecar first saw it. The EWMA takes the answers in the
//!   order their requests were sent ([`super::send_order`]): a busy proxy hears a burst's
//!   fastest answers first, and their mean would set the floor far below the candidate's;
//! - an **unqueued latency**: the mean of the answers to requests sent while the whole fleet
//!   lightened the candidate ([`super::lull`]), its queue empty, each new one weighing at
//!   least `unqueued_alpha` (about the last forty), raised by `unqueued_margin` ÷ √n for its
//!   few answers, and counted once it has
//!   `unqueued_min`: what the candidate does when the fleet sends it less, measured rather
//!   than inferred;
//! - a **reference**: the lower of the floor and the unqueued latency (lulls can only lower
//!   it: where they drain nothing, the rule is the same as without them);
//! - **lasting**: whether consecutive answers' log-latencies correlate (lag 1, an EWMA at
//!   `spread_alpha` of their covariance over the jitter's variance) by more than
//!   `correlation_z` standard errors of the estimate for answers that do not (the jitter's
//!   variance, an EWMA at `spread_alpha`, starts from `jitter_prior`²): a queue lasts from one
//!   answer to the next, jitter is drawn afresh for each;
//! - a **discount** `d`: with excess = ln(level ÷ reference), the unit the shares weigh
//!   latency in (a tenfold slowdown is an excess of ln 10 ≈ 2.3, not 9; near the target the
//!   two agree), each answer adds `gain` ×
//!   (excess − `target`) when the excess is above the target and lasting, takes off as much
//!   when it is above the target but does not last (a floor set low by a lucky start reads as
//!   a permanent excess, and only the lasting test tells it from a queue), or takes off
//!   `relief` × (target − excess) when below; `d` stays in `[0, max_discount]`. An answer to a request
//!   the pick sent at the probe floor never adds to `d` (it may take off): the candidate's
//!   score already gives it no more than the floor, so a lower share cannot shorten any queue
//!   there, and growing `d` would only leave a debt to repay once the candidate is fast again.
//!   A provider that became much slower loses its traffic to the latency ranking within a few
//!   answers, its answers become probes, and `d` stops where it was. Nor does `d` grow past
//!   its **ceiling**, `ceiling` × `exploit_k` × ln(slowest ÷ level), the slowest being the
//!   highest latency estimate among the alias's serving candidates when the pick was drawn
//!   ([`super::Drawn`]): at `ceiling` 2 the candidate's latency advantage over the slowest
//!   has then been turned into as large a disadvantage. A provider that slows down until it
//!   is about as slow as the others builds no debt to repay once it is fast again; a discount
//!   already above the ceiling is not cut, only its growth stops.
//!
//! [`CongestionParams`] holds every constant named here. The selector multiplies the
//! candidate's weight by `e^-d`. The discount moves a little per answer, so shares drift towards the point where the loaded candidates queue about
//! `target` above their reference instead of jumping with every sample: integral action, which
//! a fleet reacting to the same queues with a delay needs to stay stable, and it is what
//! makes each sidecar weigh a provider by the latency *more* traffic would get there rather
//! than by the average it gets now. A candidate whose latency does not grow with load (a
//! hosted API, a provider that is simply slower) keeps at most the small discount its jitter's
//! excursions above the target leave; one that answers errors is left to the success rate:
//! only successful answers feed it, since a fast 503 is not a short queue.

use super::attempt::Mode;
use super::send_order::SendOrder;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The congestion discount's constants (`[routing.rule.congestion]`, `--param congestion.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CongestionParams {
    /// Smoothing of the steady latency EWMA whose lowest value is the floor (per answer).
    pub steady_alpha: f64,
    /// Successful answers before the floor is tracked.
    pub warm_answers: u64,
    /// Relative uncertainty of one latency sample: the steady EWMA of `n` answers is raised by
    /// `confidence / √n` before it may lower the floor.
    pub confidence: f64,
    /// Relative rise of the floor per `period_us` of answers (so a provider that really became
    /// slower is eventually measured from its new floor: ×2 after about an hour of answers).
    pub floor_rise: f64,
    /// Log-normal jitter σ the jitter's variance starts from (the simulator's providers'), a
    /// prior that fades over about `1 / spread_alpha` answers.
    pub jitter_prior: f64,
    /// Smoothing of the log-latency mean and variance that measure the jitter, and of the
    /// covariance of consecutive answers' log-latencies (per answer).
    pub spread_alpha: f64,
    /// The discount grows only while consecutive answers' log-latencies correlate by more
    /// than this many standard errors of the estimate for answers that do not
    /// (`√(spread_alpha ÷ (2 − spread_alpha))`, 0.1): a queue lasts from one answer to the
    /// next, jitter does not.
    pub correlation_z: f64,
    /// Queueing above the reference the discount steers towards, as ln(level ÷ reference)
    /// (0.08: about 8 % above it).
    pub target: f64,
    /// Discount added per answer per unit of excess above `target`.
    pub gain: f64,
    /// Discount taken off per answer per unit below `target`.
    pub relief: f64,
    /// Least weight of a new answer sent in a lull in the unqueued latency (the plain mean of
    /// the first `1 / unqueued_alpha`): its memory, about forty lull answers at 0.05, keeps its
    /// noise (σ ÷ √40 ≈ 4 % at σ 0.25) at half the discount's `target`, so that sidecars whose
    /// references differ by noise alone do not steer apart.
    pub unqueued_alpha: f64,
    /// Answers sent in lulls before the unqueued latency counts towards the reference.
    pub unqueued_min: u64,
    /// Relative uncertainty of one lull answer: the unqueued latency of `n` answers is raised by
    /// `unqueued_margin / √n` (`n` counted up to the EWMA's memory, `(2 − α) / α` = 39 answers),
    /// so that its jitter does not read as a queue on a candidate that has none.
    pub unqueued_margin: f64,
    /// Largest discount (weight × e^-8 ≈ 0.03%; a candidate 1.75× faster has e^(6 ln 1.75) ≈ 29×
    /// the weight, so the discount must reach well past 3.4 to hand its traffic over).
    pub max_discount: f64,
    /// The time one answer's step stands for: `gain` and `relief` are per second of answers,
    /// so the discount moves as fast at an edge proxy with hundreds of answers a second as at a
    /// sidecar with one (each step is scaled by the time since the candidate's previous answer).
    pub period_us: u64,
    /// Most periods one answer's step may stand for (after a silence).
    pub max_periods: f64,
    /// Most answers held back for the floor's send order (a memory bound: past it the oldest
    /// join anyway; 0 takes answers in the order they come).
    pub max_held: usize,
    /// How far the discount grows, in units of `exploit_k` × ln(slowest ÷ level), the slowest
    /// being the highest latency estimate among the alias's serving candidates: at 2 the
    /// discount turns the candidate's latency advantage over the slowest into an equal
    /// disadvantage and grows no further (`inf`: no ceiling).
    pub ceiling: f64,
}

impl CongestionParams {
    /// The defaults, as a constant.
    pub const DEFAULT: CongestionParams = CongestionParams {
        steady_alpha: 0.02,
        warm_answers: 2,
        confidence: 0.25,
        floor_rise: 0.0002,
        jitter_prior: 0.25,
        spread_alpha: 0.02,
        correlation_z: 0.5,
        target: 0.08,
        gain: 0.3,
        relief: 4.0,
        unqueued_alpha: 0.05,
        unqueued_min: 3,
        unqueued_margin: 0.1,
        max_discount: 8.0,
        period_us: 1_000_000,
        max_periods: 5.0,
        max_held: 4096,
        ceiling: 2.0,
    };
}

impl Default for CongestionParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Bit pattern for "no value yet".
const EMPTY: u64 = u64::MAX;

/// Per-mode congestion state of one candidate.
#[derive(Debug)]
pub(crate) struct Congestion {
    /// The steady EWMA whose lowest value is the floor, fed in send order, per mode.
    steady: [AtomicU64; 2],
    /// Successful answers folded in, per mode.
    answers: [AtomicU64; 2],
    floor: [AtomicU64; 2],
    discount: [AtomicU64; 2],
    /// The reference as of the latest answer, per mode: read on every pick beside the discount.
    reference: [AtomicU64; 2],
    /// When the latest answer came, per mode (routing clock, µs; 0 = none yet).
    last_at: [AtomicU64; 2],
    /// EWMA of the log-latency, and of its squared deviation (the jitter σ²), per mode.
    log_mean: [AtomicU64; 2],
    log_var: [AtomicU64; 2],
    /// The latest answer's log-latency, and the EWMA of consecutive answers' covariance.
    last_log: [AtomicU64; 2],
    log_lag_cov: [AtomicU64; 2],
    /// EWMA of the answers sent in lulls, and how many there were, per mode.
    unqueued: [AtomicU64; 2],
    unqueued_answers: [AtomicU64; 2],
    /// Answers held for the floor's send order, and how many the steady EWMA has folded in.
    send_order: [SendOrder; 2],
    in_order: [AtomicU64; 2],
}

impl Default for Congestion {
    fn default() -> Self {
        let empty = || [AtomicU64::new(EMPTY), AtomicU64::new(EMPTY)];
        Self {
            steady: empty(),
            answers: [AtomicU64::new(0), AtomicU64::new(0)],
            floor: empty(),
            log_mean: empty(),
            log_var: empty(),
            last_log: empty(),
            log_lag_cov: empty(),
            discount: [AtomicU64::new(0), AtomicU64::new(0)],
            last_at: [AtomicU64::new(0), AtomicU64::new(0)],
            unqueued: empty(),
            unqueued_answers: [AtomicU64::new(0), AtomicU64::new(0)],
            reference: empty(),
            send_order: Default::default(),
            in_order: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }
}

/// Reads an f64 cell; `None` when empty.
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

/// How far an answer may grow the discount: `ceiling` × `exploit_k` × ln(slowest ÷ level),
/// at which (at `ceiling` 2) the candidate's latency advantage over the slowest serving
/// candidate has been turned into as large a disadvantage; unbounded without a slowest or
/// with an infinite `ceiling`.
fn growth_ceiling(answer: &Sample, level: f64, p: &CongestionParams) -> f64 {
    match answer.slowest_us {
        Some(slowest) if p.ceiling.is_finite() && slowest > 0.0 && level > 0.0 => {
            (p.ceiling * answer.exploit_k * (slowest / level).ln()).max(0.0)
        }
        _ => f64::INFINITY,
    }
}

fn ewma(old: Option<f64>, sample: f64, alpha: f64) -> f64 {
    old.map_or(sample, |o| o + alpha * (sample - o))
}

/// One successful answer, as the congestion discount reads it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    /// Its latency (µs).
    pub latency_us: f64,
    /// The candidate's latency estimate with it (µs): the level.
    pub level_us: f64,
    /// When its request was sent (µs, the routing clock).
    pub sent_us: u64,
    /// The send time of the oldest request of the mode still waiting for its first chunk.
    pub oldest_waiting_us: Option<u64>,
    /// Its request was sent in the candidate's lull.
    pub in_lull: bool,
    /// The pick sent it at the probe floor: it never adds to the discount.
    pub probe: bool,
    /// The highest latency estimate among the alias's serving candidates at the pick (µs),
    /// which bounds the discount's growth (`ceiling`); `None`: no bound.
    pub slowest_us: Option<f64>,
    /// The rule's `exploit_k`, the unit of that bound.
    pub exploit_k: f64,
}

impl Congestion {
    /// Folds in one successful answer of `mode`; `at_us` is when it came (the routing clock),
    /// which scales the discount's step by the time since the previous answer (see
    /// `period_us`); `None` takes one `period_us` per answer.
    pub(crate) fn answer(
        &self,
        mode: Mode,
        answer: &Sample,
        at_us: Option<u64>,
        p: &CongestionParams,
    ) {
        let Sample {
            latency_us: x,
            level_us: level,
            in_lull: unqueued,
            probe,
            ..
        } = *answer;
        if !(x.is_finite() && x >= 0.0 && level.is_finite() && level >= 0.0) {
            return;
        }
        let i = mode.slot();
        let periods = at_us.map_or(1.0, |now| {
            let last = self.last_at[i].swap(now, Relaxed);
            if last == 0 {
                1.0
            } else {
                (now.saturating_sub(last) as f64 / p.period_us as f64).min(p.max_periods)
            }
        });
        // The EWMAs start as the plain mean of the first answers.
        let n = self.answers[i].fetch_add(1, Relaxed) + 1;
        let first = 1.0 / n as f64;
        let steady = self.steady_in_send_order(i, answer, p);
        let lx = x.max(1.0).ln();
        let mean = update(&self.log_mean[i], |o| {
            ewma(o, lx, p.spread_alpha.max(first))
        });
        // The variance starts at `jitter_prior`², a prior that fades over ~50 answers.
        let var = update(&self.log_var[i], |o| {
            let prior = p.jitter_prior * p.jitter_prior;
            ewma(
                Some(o.unwrap_or(prior)),
                (lx - mean) * (lx - mean),
                p.spread_alpha,
            )
        });
        let previous = self.last_log[i].swap(lx.to_bits(), Relaxed);
        let correlation = if previous == EMPTY {
            0.0
        } else {
            let lag = (lx - mean) * (f64::from_bits(previous) - mean);
            let cov = update(&self.log_lag_cov[i], |o| {
                ewma(o, lag, p.spread_alpha.max(first))
            });
            cov / var.max(f64::MIN_POSITIVE)
        };
        let standard_error = (p.spread_alpha / (2.0 - p.spread_alpha)).sqrt();
        let lasting = correlation > p.correlation_z * standard_error;
        let (Some(steady), in_order) = steady else {
            return;
        };
        if n < p.warm_answers {
            return;
        }
        let settled = (in_order.max(1) as f64).min(1.0 / p.steady_alpha);
        let candidate = steady * (1.0 + p.confidence / settled.sqrt());
        let floor = update(&self.floor[i], |o| {
            o.map_or(candidate, |f| {
                candidate.min(f * (1.0 + p.floor_rise * periods))
            })
        });
        let reference = self
            .unqueued(i, x, unqueued, p)
            .map_or(floor, |u| floor.min(u));
        self.reference[i].store(reference.to_bits(), Relaxed);
        let excess = if reference > 0.0 {
            (level / reference).max(f64::MIN_POSITIVE).ln()
        } else {
            0.0
        };
        let step = if excess > p.target {
            match (probe, lasting) {
                (true, _) => 0.0,
                (false, true) => p.gain * (excess - p.target),
                (false, false) => -p.gain * (excess - p.target),
            }
        } else {
            -p.relief * (p.target - excess)
        };
        let ceiling = growth_ceiling(answer, level, p);
        update(&self.discount[i], |d| {
            let d = d.unwrap_or(0.0);
            let next = d + step * periods;
            // Growth stops at the ceiling; a discount above it comes off as it always does.
            let next = if step > 0.0 {
                next.min(d.max(ceiling))
            } else {
                next
            };
            next.clamp(0.0, p.max_discount)
        });
    }

    /// The steady EWMA of mode slot `i` once the answers this one lets through in send order
    /// are folded in ([`SendOrder`]), and how many answers it has folded in all; `None` while
    /// it has none.
    fn steady_in_send_order(
        &self,
        i: usize,
        answer: &Sample,
        p: &CongestionParams,
    ) -> (Option<f64>, u64) {
        self.send_order[i].answer(
            answer.sent_us,
            answer.latency_us,
            answer.oldest_waiting_us,
            p.max_held,
            |x| {
                let n = self.in_order[i].fetch_add(1, Relaxed) + 1;
                update(&self.steady[i], |o| {
                    ewma(o, x, p.steady_alpha.max(1.0 / n as f64))
                });
            },
        );
        (load(&self.steady[i]), self.in_order[i].load(Relaxed))
    }

    /// The unqueued latency of mode slot `i`, with its margin, once it has `unqueued_min`
    /// answers, folding in the latest answer `x` if its request went out in a lull.
    fn unqueued(&self, i: usize, x: f64, in_lull: bool, p: &CongestionParams) -> Option<f64> {
        let n = if in_lull {
            let n = self.unqueued_answers[i].fetch_add(1, Relaxed) + 1;
            let alpha = p.unqueued_alpha.max(1.0 / n as f64);
            update(&self.unqueued[i], |o| ewma(o, x, alpha));
            n
        } else {
            self.unqueued_answers[i].load(Relaxed)
        };
        let memory = (2.0 - p.unqueued_alpha) / p.unqueued_alpha;
        let margin = 1.0 + p.unqueued_margin / (n as f64).min(memory).sqrt();
        match self.unqueued[i].load(Relaxed) {
            bits if n >= p.unqueued_min && bits != EMPTY => Some(f64::from_bits(bits) * margin),
            _ => None,
        }
    }

    /// The reference of `mode` (µs): what the candidate answers at when nothing queues, as of
    /// its latest answer; `None` before it has `warm_answers`.
    #[inline]
    pub(crate) fn reference(&self, mode: Mode) -> Option<f64> {
        match self.reference[mode.slot()].load(Relaxed) {
            EMPTY => None,
            bits => Some(f64::from_bits(bits)),
        }
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
    use crate::routing::latency_mean::{LatencyMean, LatencyParams};
    use crate::routing::rng::{RngSource, SplitMix64};

    const NS: Mode = Mode::NonStreaming;
    const P: CongestionParams = CongestionParams::DEFAULT;

    /// A candidate's congestion state fed as the tracker feeds it: each answer moves the
    /// latency estimate first, and the discount reads its level from it.
    #[derive(Default)]
    struct Fed {
        congestion: Congestion,
        latency: std::cell::RefCell<LatencyMean>,
    }

    impl std::ops::Deref for Fed {
        type Target = Congestion;
        fn deref(&self) -> &Congestion {
            &self.congestion
        }
    }

    impl Fed {
        fn feed(&self, x: f64, unqueued: bool, probe: bool, at_us: Option<u64>) {
            let sample = Sample {
                latency_us: x,
                level_us: 0.0,
                sent_us: 0,
                oldest_waiting_us: None,
                in_lull: unqueued,
                probe,
                slowest_us: None,
                exploit_k: 6.0,
            };
            self.feed_sample(sample, at_us, &P);
        }

        fn feed_sample(&self, mut sample: Sample, at_us: Option<u64>, p: &CongestionParams) {
            let x = sample.latency_us;
            sample.level_us = if x.is_finite() && x >= 0.0 {
                self.latency
                    .borrow_mut()
                    .add(x, at_us, &LatencyParams::DEFAULT)
            } else {
                x
            };
            self.congestion.answer(NS, &sample, at_us, p);
        }

        fn level(&self) -> f64 {
            self.latency.borrow().mean().unwrap_or(0.0)
        }
    }

    fn answer(c: &Fed, micros: f64) {
        c.feed(micros, false, false, None);
    }

    #[test]
    fn steady_latency_earns_no_discount() {
        let c = Fed::default();
        for i in 0..500 {
            // ±10% around 200 ms.
            answer(&c, 200_000.0 * (1.0 + 0.1 * ((i % 7) as f64 - 3.0) / 3.0));
        }
        assert_eq!(c.discount(NS), 0.0);
        assert_eq!(c.discount(Mode::Streaming), 0.0);
    }

    #[test]
    fn queueing_builds_a_discount_gradually_and_a_recovery_clears_it() {
        let c = Fed::default();
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
        // Back at the floor: P.relief x P.target = 0.32 off per answer clears it.
        for _ in 0..30 {
            answer(&c, 200_000.0);
        }
        assert!(c.discount(NS) < 0.5, "{}", c.discount(NS));
    }

    #[test]
    fn a_probe_answer_never_adds_to_the_discount_and_may_take_off() {
        let probe = |c: &Fed, micros: f64| c.feed(micros, false, true, None);
        let c = Fed::default();
        for _ in 0..50 {
            answer(&c, 200_000.0);
        }
        // Ten times slower, answering only probes: nothing our share could shorten.
        for _ in 0..50 {
            probe(&c, 2_000_000.0);
        }
        assert_eq!(c.discount(NS), 0.0);
        // The same answers to requests the score sent build it.
        for _ in 0..50 {
            answer(&c, 2_000_000.0);
        }
        let built = c.discount(NS);
        assert!(built > 3.0, "{built}");
        // A probe that finds the candidate fast again takes some off.
        for _ in 0..40 {
            probe(&c, 200_000.0);
        }
        assert!(c.discount(NS) < built, "{} {built}", c.discount(NS));
    }

    #[test]
    fn the_discount_grows_no_further_than_its_ceiling_and_keeps_what_it_has() {
        // Ten times slower after 50 answers at 200 ms, the slowest serving candidate 1.5 ×
        // slower than that: the ceiling is 2 × 6 × ln 1.5 ≈ 4.87 at the new level.
        let answer_beside = |c: &Fed, micros: f64, slowest: f64| {
            c.feed_sample(
                Sample {
                    latency_us: micros,
                    level_us: 0.0,
                    sent_us: 0,
                    oldest_waiting_us: None,
                    in_lull: false,
                    probe: false,
                    slowest_us: Some(slowest),
                    exploit_k: 6.0,
                },
                None,
                &P,
            )
        };
        let ceiling = 2.0 * 6.0 * 1.5f64.ln();
        let (bounded, free) = (Fed::default(), Fed::default());
        for _ in 0..50 {
            answer_beside(&bounded, 200_000.0, 300_000.0);
            answer(&free, 200_000.0);
        }
        for _ in 0..200 {
            answer_beside(&bounded, 2_000_000.0, 3_000_000.0);
            answer(&free, 2_000_000.0);
        }
        let (d, unbounded) = (bounded.discount(NS), free.discount(NS));
        assert!((d - ceiling).abs() < 0.05, "{d} against {ceiling}");
        assert_eq!(unbounded, P.max_discount);
        // A ceiling that falls below the discount stops its growth but does not cut it: the
        // excess still lasts, and the discount stays where it is.
        for _ in 0..50 {
            answer_beside(&free, 2_000_000.0, 2_000_000.0);
        }
        assert_eq!(free.discount(NS), unbounded);
    }

    /// An answer log-normal around `median` µs with jitter `sigma`.
    fn log_normal(rng: &mut SplitMix64, median: f64, sigma: f64) -> f64 {
        // Box-Muller: one standard normal draw from two uniforms.
        let u = rng.next_f64().max(f64::MIN_POSITIVE);
        let v = rng.next_f64();
        let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
        median * (sigma * z).exp()
    }

    /// An answer log-normal around `median` µs with σ = 0.25 (the simulator's jitter).
    fn jittered(rng: &mut SplitMix64, median: f64) -> f64 {
        log_normal(rng, median, 0.25)
    }

    /// The floor after a busy proxy's burst: `n` requests sent 1 µs apart, all in flight
    /// together, each answer folded in when it comes (fastest first) with the oldest request
    /// still waiting then.
    fn floor_after_burst(n: u64, p: &CongestionParams) -> (f64, f64) {
        let mut rng = SplitMix64::new(7);
        let latency: Vec<f64> = (0..n).map(|_| jittered(&mut rng, 200_000.0)).collect();
        let mut by_arrival: Vec<u64> = (0..n).collect();
        by_arrival.sort_by(|&a, &b| {
            (a as f64 + latency[a as usize]).total_cmp(&(b as f64 + latency[b as usize]))
        });
        let mut waiting: std::collections::BTreeSet<u64> = (0..n).collect();
        let c = Fed::default();
        for k in by_arrival {
            waiting.remove(&k);
            let sample = Sample {
                latency_us: latency[k as usize],
                level_us: 0.0,
                sent_us: k,
                oldest_waiting_us: waiting.first().copied(),
                in_lull: false,
                probe: false,
                slowest_us: None,
                exploit_k: 6.0,
            };
            c.feed_sample(sample, None, p);
        }
        let mean = latency.iter().sum::<f64>() / n as f64;
        (load(&c.floor[NS.slot()]).unwrap_or(0.0), mean)
    }

    #[test]
    fn a_burst_answering_fastest_first_does_not_set_the_floor() {
        // In send order the floor is the mean of a prefix of the burst, with its margin.
        let (floor, mean) = floor_after_burst(300, &P);
        assert!(floor > 0.85 * mean, "floor {floor:.0} mean {mean:.0}");
        // In the order answers come, the burst's fastest set it far below the mean.
        let arrival = CongestionParams { max_held: 0, ..P };
        let (floor, mean) = floor_after_burst(300, &arrival);
        assert!(floor < 0.75 * mean, "floor {floor:.0} mean {mean:.0}");
    }

    #[test]
    fn an_unqueued_candidate_keeps_a_small_discount() {
        let c = Fed::default();
        let mut rng = SplitMix64::new(7);
        let (mut d, mut count) = (0.0, 0.0);
        for i in 0..20_000 {
            answer(&c, jittered(&mut rng, 200_000.0));
            if i >= 2_000 {
                d += c.discount(NS);
                count += 1.0;
            }
        }
        // The floor sits about at the level, and only the jitter's excursions above the
        // target leave a discount (measured 0.004).
        let d = d / count;
        assert!(d < 0.02, "{d}");
        let (level, floor) = (c.level(), load(&c.floor[NS.slot()]).unwrap_or(0.0));
        assert!((level / floor - 1.0).abs() < P.target, "{level} {floor}");
    }

    #[test]
    fn a_more_erratic_candidate_does_not_read_as_queued() {
        // Jitter σ = 0.35 instead of 0.25: the measured jitter follows it, and no lasting
        // discount builds up (the larger excursions leave a mean of about 0.012).
        let c = Fed::default();
        let mut rng = SplitMix64::new(5);
        let mut d = 0.0;
        for i in 0..20_000 {
            let z = jittered(&mut rng, 1.0).ln() / 0.25;
            answer(&c, 200_000.0 * (0.35 * z).exp());
            if i >= 2_000 {
                d += c.discount(NS);
            }
        }
        let d = d / 18_000.0;
        assert!(d < 0.05, "{d}");
        let sigma = load(&c.log_var[NS.slot()]).unwrap_or(0.0).sqrt();
        assert!((sigma - 0.35).abs() < 0.05, "{sigma}");
    }

    fn lull_answer(c: &Fed, micros: f64) {
        c.feed(micros, true, false, None);
    }

    #[test]
    fn answers_sent_in_lulls_show_a_queue_that_never_drains_otherwise() {
        let c = Fed::default();
        let mut rng = SplitMix64::new(13);
        // Queued from the first answer on (a steady 100 ms wait before an idle 200 ms answer):
        // the floor never sees the idle latency.
        let queued = |rng: &mut SplitMix64| 100_000.0 + jittered(rng, 200_000.0);
        for _ in 0..500 {
            answer(&c, queued(&mut rng));
        }
        assert!(c.discount(NS) < 0.5, "{}", c.discount(NS));
        // One answer in twenty was sent in a lull, when the fleet's queue had drained.
        for i in 0..2_000 {
            if i % 20 == 0 {
                lull_answer(&c, jittered(&mut rng, 200_000.0));
            } else {
                answer(&c, queued(&mut rng));
            }
        }
        assert!(c.discount(NS) > 1.5, "{}", c.discount(NS));
    }

    #[test]
    fn an_unqueued_candidate_answers_lulls_as_fast_as_ever_and_keeps_no_discount() {
        let c = Fed::default();
        let mut rng = SplitMix64::new(17);
        let mut d = 0.0;
        for i in 0..20_000 {
            let x = jittered(&mut rng, 200_000.0);
            if i % 20 == 0 {
                lull_answer(&c, x);
            } else {
                answer(&c, x);
            }
            if i >= 2_000 {
                d += c.discount(NS);
            }
        }
        // The unqueued latency is an EWMA of a few jittered answers: with its margin, its
        // noise adds little to the small mean discount the jitter's excursions above the
        // target leave anyway (measured 0.006, against 0.004 without lulls).
        let d = d / 18_000.0;
        assert!(d < 0.03, "{d}");
    }

    #[test]
    fn lulls_that_drain_nothing_leave_the_discount_as_without_them() {
        // A queue the lulls do not empty (the fleet's clocks disagree, or most of the load is
        // not ours): lull answers wait like the rest, and the discount is the one the floor
        // gives alone, here learned before the queue built up.
        let (plain, lulled) = (Fed::default(), Fed::default());
        let mut rng = SplitMix64::new(19);
        let (mut d_plain, mut d_lulled, mut wait) = (0.0, 0.0, 0.0);
        for i in 0..4_000 {
            // The queue's wait holds for runs of twenty answers: 80 or 180 ms.
            if i % 20 == 0 {
                wait = if rng.next_f64() < 0.5 {
                    80_000.0
                } else {
                    180_000.0
                };
            }
            let idle = jittered(&mut rng, 200_000.0);
            let x = if i < 100 { idle } else { wait + idle };
            answer(&plain, x);
            if i % 20 == 5 {
                lull_answer(&lulled, x);
            } else {
                answer(&lulled, x);
            }
            if i >= 1_000 {
                d_plain += plain.discount(NS);
                d_lulled += lulled.discount(NS);
            }
        }
        let (d_plain, d_lulled) = (d_plain / 3_000.0, d_lulled / 3_000.0);
        assert!(d_plain > 1.0, "{d_plain}");
        assert!(
            (d_lulled - d_plain).abs() < 0.1 * d_plain,
            "{d_lulled} vs {d_plain}"
        );
    }

    #[test]
    fn the_discount_moves_per_second_whatever_the_answer_rate() {
        // The same queue (answers 30 % above their idle latency after a quiet start), seen by
        // a sidecar at 2 answers/s and by an edge proxy at 200 answers/s for 20 s each.
        let discount_after = |per_second: u64| {
            let c = Fed::default();
            let step = 1_000_000 / per_second;
            for i in 1..=(30 * per_second) {
                let queued = i > 10 * per_second;
                let x = if queued { 260_000.0 } else { 200_000.0 };
                c.feed(x, false, false, Some(i * step));
            }
            c.discount(NS)
        };
        let (sidecar, edge) = (discount_after(2), discount_after(200));
        assert!(sidecar > 0.5, "{sidecar}");
        // The step is per second; what is left between them comes from the level's and the
        // floor's own smoothing, which counts answers.
        assert!(
            (0.5..2.0).contains(&(edge / sidecar)),
            "edge {edge} vs sidecar {sidecar}"
        );
    }

    #[test]
    fn invalid_samples_are_ignored() {
        let c = Fed::default();
        c.feed(f64::NAN, false, false, None);
        c.feed(-1.0, false, false, None);
        assert_eq!(load(&c.floor[NS.slot()]), None);
        answer(&c, 200_000.0);
        answer(&c, 200_000.0);
        // Two answers: the floor is their mean raised by 0.25/√2.
        let floor = load(&c.floor[NS.slot()]).unwrap_or(0.0);
        assert!(
            (floor - 200_000.0 * (1.0 + 0.25 / 2f64.sqrt())).abs() < 1e-6,
            "{floor}"
        );
        assert_eq!(c.answers[NS.slot()].load(Relaxed), 2);
    }

    /// An excess `level` above a 200 ms floor, in runs of `run` answers: each run is queued
    /// or not with even odds, so the mean is the same whatever the run length.
    fn excess_in_runs(run: usize, seed: u64) -> f64 {
        let c = Fed::default();
        let mut rng = SplitMix64::new(seed);
        for _ in 0..100 {
            answer(&c, jittered(&mut rng, 200_000.0));
        }
        let mut queued = false;
        let mut d = 0.0;
        for i in 0..3_000 {
            if i % run == 0 {
                queued = rng.next_f64() < 0.5;
            }
            let wait = if queued { 160_000.0 } else { 0.0 };
            answer(&c, wait + jittered(&mut rng, 200_000.0));
            if i >= 1_000 {
                d += c.discount(NS);
            }
        }
        d / 2_000.0
    }

    #[test]
    fn only_an_excess_that_lasts_from_answer_to_answer_builds_a_discount() {
        // The same answers on average, 40 % above the floor: a queue that persists for runs
        // of twenty answers builds a discount; the same waits drawn afresh for every answer
        // (jitter, not a queue) build at most a tenth of it.
        for seed in 1..=4 {
            let lasting = excess_in_runs(20, seed);
            let fleeting = excess_in_runs(1, seed);
            assert!(lasting > 1.0, "seed {seed}: {lasting}");
            assert!(
                fleeting < 0.2 && fleeting * 10.0 < lasting,
                "seed {seed}: {fleeting} against {lasting}"
            );
        }
    }

    #[test]
    fn an_erratic_candidate_that_does_not_queue_keeps_a_small_discount() {
        // σ 0.8 (the 99th percentile 6 × the median), no queue, twelve random starts, the
        // floor often set low by the first answers' luck, which leaves an excess that never
        // ends. Its answers do not persist from one to the next: the discount grows only on
        // the answers that pass the lasting test by chance, and the others take it off (the
        // median run averages 0.34, the worst 1.1).
        let mut means: Vec<f64> = (1..=12)
            .map(|seed| {
                let c = Fed::default();
                let mut rng = SplitMix64::new(seed);
                let mut d = 0.0;
                for i in 0..5_000 {
                    answer(&c, log_normal(&mut rng, 200_000.0, 0.8));
                    if i >= 500 {
                        d += c.discount(NS);
                    }
                }
                d / 4_500.0
            })
            .collect();
        means.sort_by(f64::total_cmp);
        let (median, worst) = ((means[5] + means[6]) / 2.0, means[11]);
        assert!(median < 0.7 && worst < 1.5, "{means:?}");
    }
}
