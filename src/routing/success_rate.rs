//! A candidate's success rate: the share of successes since the rate last changed.
//!
//! A provider's error rate holds for a while and then changes: an outage starts or ends, a
//! rate limit begins, a deployment goes bad. Between changes the best estimate is the plain
//! share of successes over every outcome since the last change; right after one, only the
//! outcomes since it count. Which outcome was the last change is not known, so the estimate
//! averages over it (Bayesian online change-point detection, Adams & MacKay 2007):
//!
//! - every possible run length `r` (outcomes since the last change) carries a probability;
//! - a change happens between two outcomes `Δt` apart with probability
//!   `h = 1 − e^(−Δt / change_every_s)`: a change is a matter of time, not of traffic;
//! - each outcome multiplies every run's probability by how well that run's outcomes predict
//!   it (a Beta-Bernoulli predictive with `prior` pseudo-outcomes of each kind, Jeffreys's ½),
//!   and the mass `h` of every run moves to a new run that this outcome starts (predicted by
//!   the prior alone, ½ either way);
//! - the estimate is the expected share of successes over the runs; before any outcome it is
//!   1, as for a cold candidate;
//! - a pick reads it at its own time: with probability `h` of a change since the last outcome,
//!   the candidate is in a new run that counts as fully successful until its first outcome,
//!   so the share of failures fades as `(1 − s)·e^(−Δt / change_every_s)` while the candidate
//!   is not heard from, and a proxy that rarely sends to a failed candidate tries it again.
//!
//! A steady rate is then the share over thousands of outcomes, so a lone proxy's shares hold
//! still even beside a candidate that fails a third of its requests; a candidate that never
//! failed stays at exactly 1. A healthy candidate's first failures are a surprise and move
//! the estimate within one or two outcomes; a candidate back from an outage needs a few
//! successes, as many as the evidence asks for. At most `max_runs` run lengths are kept (the
//! least probable is dropped), so an outcome costs a bounded amount of arithmetic.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// The success rate's constants (`[routing.rule.success]`, `--param success.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SuccessParams {
    /// Expected time (s) between changes of a candidate's success rate, and so how fast its
    /// failures fade at a pick while it is not heard from; 0 turns the estimate off: the
    /// success rate is then an EWMA at `ewma_alpha`, which does not fade.
    pub change_every_s: f64,
    /// Pseudo-outcomes of each kind a run's predictions start from (½: Jeffreys's prior).
    pub prior: f64,
    /// Run lengths kept; the least probable goes when there are more.
    pub max_runs: usize,
}

impl SuccessParams {
    /// The defaults, as a constant.
    pub const DEFAULT: SuccessParams = SuccessParams {
        change_every_s: 60.0,
        prior: 0.5,
        max_runs: 40,
    };

    /// True when the change-point estimate is in use (otherwise the EWMA is).
    pub fn enabled(&self) -> bool {
        self.change_every_s > 0.0 && self.max_runs > 0 && self.prior > 0.0 && self.prior.is_finite()
    }
}

impl Default for SuccessParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The outcomes since one possible change.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Run {
    /// Probability that the last change came right before these outcomes.
    probability: f64,
    successes: f64,
    failures: f64,
}

impl Run {
    const EMPTY: Run = Run {
        probability: 1.0,
        successes: 0.0,
        failures: 0.0,
    };

    /// Probability of the next outcome being `success`, from this run's outcomes and `prior`.
    fn predicts(&self, success: bool, prior: f64) -> f64 {
        let of_kind = if success {
            self.successes
        } else {
            self.failures
        };
        (of_kind + prior) / (self.successes + self.failures + 2.0 * prior)
    }

    /// Adds one outcome.
    fn count(&mut self, success: bool) {
        if success {
            self.successes += 1.0;
        } else {
            self.failures += 1.0;
        }
    }

    /// Share of successes (1 when empty).
    fn rate(&self) -> f64 {
        let n = self.successes + self.failures;
        if n > 0.0 {
            self.successes / n
        } else {
            1.0
        }
    }
}

/// The run lengths and when the last outcome came.
#[derive(Debug, Clone, PartialEq)]
struct Runs {
    runs: Vec<Run>,
    /// Routing-clock time (µs) of the last outcome; `None` before any.
    last_us: Option<u64>,
}

impl Default for Runs {
    fn default() -> Self {
        Runs {
            runs: vec![Run::EMPTY],
            last_us: None,
        }
    }
}

impl Runs {
    /// Folds in one outcome at `now_us`; returns the new estimate.
    fn observe(&mut self, success: bool, now_us: u64, p: &SuccessParams) -> f64 {
        let dt_s = match self.last_us {
            Some(last) => now_us.saturating_sub(last) as f64 / 1e6,
            None => 0.0,
        };
        self.last_us = Some(self.last_us.map_or(now_us, |last| last.max(now_us)));
        let hazard = 1.0 - (-dt_s / p.change_every_s).exp();
        // A change since the last outcome makes this one the first of a new run, predicted
        // by the prior alone (½ either way).
        let mut first = Run {
            probability: 0.0,
            ..Run::EMPTY
        };
        let mut total = 0.0;
        for run in &mut self.runs {
            first.probability += run.probability * hazard * 0.5;
            run.probability *= (1.0 - hazard) * run.predicts(success, p.prior);
            total += run.probability;
            run.count(success);
        }
        if first.probability > 0.0 {
            first.count(success);
            total += first.probability;
            self.runs.push(first);
        }
        if self.runs.len() > p.max_runs.max(1) {
            let least = (0..self.runs.len())
                .min_by(|&a, &b| {
                    self.runs[a]
                        .probability
                        .total_cmp(&self.runs[b].probability)
                })
                .unwrap_or(0);
            total -= self.runs.swap_remove(least).probability;
        }
        if !(total.is_finite() && total > 0.0) {
            // Every run ruled the outcome impossible (not reachable with a positive prior):
            // start over from this outcome.
            *self = Runs::default();
            return self.observe(success, now_us, p);
        }
        self.runs.iter_mut().for_each(|r| r.probability /= total);
        self.estimate()
    }

    /// The expected share of successes over the run lengths (exactly 1 while every run is
    /// all successes).
    fn estimate(&self) -> f64 {
        let failing: f64 = self
            .runs
            .iter()
            .map(|r| r.probability * (1.0 - r.rate()))
            .sum();
        (1.0 - failing).clamp(0.0, 1.0)
    }
}

/// One candidate's success rate: the estimate the picks read (an atomic), and the run
/// lengths it comes from, updated per outcome under a lock. The estimate comes first: the
/// candidate's statistics keep it on the line the picks read ([`super::CandidateStats`]).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct SuccessRate {
    /// The estimate (f64 bits), 1.0 before any outcome.
    estimate: AtomicU64,
    /// Routing-clock time (µs) of the last outcome while the estimate is below 1; [`NEVER`]
    /// before any, and after a hand-over.
    last_us: AtomicU64,
    runs: Mutex<Runs>,
}

/// [`SuccessRate::last_us`] before any outcome.
const NEVER: u64 = u64::MAX;

impl Default for SuccessRate {
    fn default() -> Self {
        SuccessRate {
            estimate: AtomicU64::new(1.0f64.to_bits()),
            last_us: AtomicU64::new(NEVER),
            runs: Mutex::default(),
        }
    }
}

impl SuccessRate {
    /// The current estimate, in [0, 1].
    #[inline]
    pub(crate) fn get(&self) -> f64 {
        f64::from_bits(self.estimate.load(Relaxed))
    }

    /// The estimate as a pick at `now_us` (routing clock) reads it: the share of failures
    /// fades with the chance of a change since the last outcome (see the module's doc). An
    /// EWMA ([`SuccessParams::enabled`] false) does not fade.
    #[inline]
    pub(crate) fn at(&self, now_us: u64, p: &SuccessParams) -> f64 {
        let s = self.get();
        let last = self.last_us.load(Relaxed);
        if s >= 1.0 || last == NEVER || !p.enabled() {
            return s;
        }
        let quiet_s = now_us.saturating_sub(last) as f64 / 1e6;
        1.0 - (1.0 - s) * (-quiet_s / p.change_every_s).exp()
    }

    /// Folds in one outcome at `now_us` (routing clock). With the estimate off
    /// ([`SuccessParams::enabled`]) the rate is an EWMA at `alpha` instead.
    pub(crate) fn observe(&self, success: bool, now_us: u64, p: &SuccessParams, alpha: f64) {
        let sample = if success { 1.0 } else { 0.0 };
        if !p.enabled() {
            let _ = self.estimate.fetch_update(Relaxed, Relaxed, |cur| {
                let cur = f64::from_bits(cur);
                Some((cur + alpha * (sample - cur)).to_bits())
            });
            return;
        }
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        let estimate = runs.observe(success, now_us, p);
        // Published under the lock, so a slower outcome cannot overwrite a newer estimate. A
        // rate of exactly 1 has nothing to fade, and a healthy candidate's outcomes write
        // nothing the picks read.
        if estimate < 1.0 {
            self.last_us.store(runs.last_us.unwrap_or(now_us), Relaxed);
        }
        if self.estimate.load(Relaxed) != estimate.to_bits() {
            self.estimate.store(estimate.to_bits(), Relaxed);
        }
    }

    /// Starts over from a handed-over `rate`, as if it were the share of successes over
    /// `outcomes` outcomes since the last change.
    pub(crate) fn seed(&self, rate: f64, outcomes: f64) {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        *runs = Runs {
            runs: vec![Run {
                probability: 1.0,
                successes: rate * outcomes,
                failures: (1.0 - rate) * outcomes,
            }],
            last_us: None,
        };
        self.last_us.store(NEVER, Relaxed);
        self.estimate.store(rate.to_bits(), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::rng::{RngSource, SplitMix64};

    const P: SuccessParams = SuccessParams::DEFAULT;
    const MS: u64 = 1_000;

    /// Feeds `n` outcomes `gap_ms` apart from `t`, success with probability `rate`; returns
    /// the estimates and the time after the last.
    fn feed(
        s: &mut Runs,
        rng: &mut SplitMix64,
        rate: f64,
        n: usize,
        gap_ms: u64,
        t: &mut u64,
    ) -> Vec<f64> {
        (0..n)
            .map(|_| {
                *t += gap_ms * MS;
                s.observe(rng.next_f64() < rate, *t, &P)
            })
            .collect()
    }

    /// A fresh estimate, its draws from `seed`, and the clock at 0.
    fn start(seed: u64) -> (Runs, SplitMix64, u64) {
        (Runs::default(), SplitMix64::new(seed), 0)
    }

    /// `start(seed)` after 200 successes 40 ms apart.
    fn healthy(seed: u64) -> (Runs, SplitMix64, u64) {
        let (mut s, mut rng, mut t) = start(seed);
        feed(&mut s, &mut rng, 1.0, 200, 40, &mut t);
        (s, rng, t)
    }

    #[test]
    fn a_candidate_that_never_failed_stays_at_one() {
        let (mut s, mut rng, mut t) = start(1);
        let est = feed(&mut s, &mut rng, 1.0, 500, 40, &mut t);
        assert!(est.iter().all(|&e| e == 1.0), "{:?}", &est[..5]);
    }

    /// The `q`-quantile of `v`.
    fn quantile(v: &mut [f64], q: f64) -> f64 {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * q).round() as usize]
    }

    #[test]
    fn a_steady_rate_is_known_to_a_few_per_cent() {
        // A lone proxy's flaky candidate: a third of 25 outcomes a second fail, for 4 minutes.
        // After the first minute, 98 % of the estimates lie within ±0.07 of 2/3; an EWMA at
        // 0.4 fed the same outcomes spreads over 0.1..1. Rare runs of failures (eight in a
        // row, as an outage would start) still move it for a moment.
        let (mut s, mut rng, mut t) = start(7);
        let (mut ours, mut ewma, mut e) = (Vec::new(), Vec::new(), 1.0);
        for i in 0..6_000 {
            t += 40 * MS;
            let success = rng.next_f64() < 2.0 / 3.0;
            let est = s.observe(success, t, &P);
            e += 0.4 * (f64::from(u8::from(success)) - e);
            if i >= 1_500 {
                ours.push(est);
                ewma.push(e);
            }
        }
        let (lo, hi) = (quantile(&mut ours, 0.01), quantile(&mut ours, 0.99));
        assert!(lo > 0.6 && hi < 0.74, "{lo:.3}..{hi:.3}");
        let (lo, hi) = (quantile(&mut ewma, 0.01), quantile(&mut ewma, 0.99));
        assert!(lo < 0.2 && hi > 0.95, "the EWMA: {lo:.3}..{hi:.3}");
    }

    #[test]
    fn a_healthy_candidate_that_starts_failing_drops_within_two_outcomes() {
        let (mut s, mut rng, mut t) = healthy(3);
        let est = feed(&mut s, &mut rng, 0.0, 3, 40, &mut t);
        assert!(est[1] < 0.4, "{est:?}");
        assert!(est[2] < 0.2, "{est:?}");
    }

    #[test]
    fn a_candidate_back_from_an_outage_recovers_within_a_few_successes() {
        let (mut s, mut rng, mut t) = healthy(4);
        let down = feed(&mut s, &mut rng, 0.0, 30, 1_000, &mut t);
        assert!(*down.last().unwrap() < 0.01, "{down:?}");
        // Probes a second apart, all successful again.
        let up = feed(&mut s, &mut rng, 1.0, 6, 1_000, &mut t);
        assert!(up[5] > 0.9, "{up:?}");
    }

    #[test]
    fn failures_fade_with_the_chance_of_a_change_since_the_last_outcome() {
        let s = SuccessRate::default();
        for i in 0..30 {
            s.observe(false, i * 1_000 * MS, &P, 0.4);
        }
        let (last, down) = (29_000 * MS, s.get());
        assert!(down < 0.01, "{down}");
        assert_eq!(s.at(last, &P), down);
        assert_eq!(
            s.at(last - 5_000 * MS, &P),
            down,
            "a clock behind the outcome reads it as is"
        );
        for quiet_s in [10u64, 60, 240] {
            let h = 1.0 - (-(quiet_s as f64) / P.change_every_s).exp();
            let want = down + h * (1.0 - down);
            let got = s.at(last + quiet_s * 1_000 * MS, &P);
            assert!((got - want).abs() < 1e-12, "{quiet_s} s: {got} vs {want}");
        }
        // The next outcome starts from the estimate, not from the faded reading.
        s.observe(false, last + 60_000 * MS, &P, 0.4);
        assert!(s.at(last + 60_000 * MS, &P) < 0.6);
    }

    #[test]
    fn a_rate_without_failures_or_without_change_points_does_not_fade() {
        let healthy = SuccessRate::default();
        healthy.observe(true, 0, &P, 0.4);
        assert_eq!(healthy.at(3_600_000 * MS, &P), 1.0);
        let off = SuccessParams {
            change_every_s: 0.0,
            ..P
        };
        let ewma = SuccessRate::default();
        ewma.observe(false, 0, &off, 0.4);
        assert!((ewma.at(3_600_000 * MS, &off) - 0.6).abs() < 1e-12);
        let handed_over = SuccessRate::default();
        handed_over.seed(0.5, 1.0);
        assert_eq!(handed_over.at(3_600_000 * MS, &P), 0.5);
    }

    #[test]
    fn changes_are_a_matter_of_time_not_of_traffic() {
        // The same outcomes: a long healthy run, then two failures. Close together, a change
        // between them is unlikely and the run's history still weighs; a minute apart, the
        // failures are more likely a new state.
        let run = |gap_ms: u64| {
            let mut s = Runs::default();
            let mut t = 0;
            for _ in 0..100 {
                t += gap_ms * MS;
                s.observe(true, t, &P);
            }
            t += gap_ms * MS;
            s.observe(false, t, &P)
        };
        assert!(run(1) > run(60_000), "{} vs {}", run(1), run(60_000));
    }

    #[test]
    fn outcomes_at_the_same_instant_cannot_straddle_a_change() {
        let mut s = Runs::default();
        for _ in 0..10 {
            s.observe(true, 5 * MS, &P);
        }
        assert_eq!(s.runs.len(), 1);
    }

    #[test]
    fn run_lengths_stay_bounded() {
        let (mut s, mut rng, mut t) = start(9);
        feed(&mut s, &mut rng, 0.5, 2_000, 100, &mut t);
        assert!(s.runs.len() <= P.max_runs);
        let sum: f64 = s.runs.iter().map(|r| r.probability).sum();
        assert!((sum - 1.0).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn a_seeded_rate_is_the_estimate_until_outcomes_move_it() {
        let s = SuccessRate::default();
        assert_eq!(s.get(), 1.0);
        s.seed(0.8, 20.0);
        assert_eq!(s.get(), 0.8);
        s.observe(true, 1_000, &P, 0.4);
        assert!((s.get() - 17.0 / 21.0).abs() < 1e-9, "{}", s.get());
    }

    #[test]
    fn off_it_is_an_ewma() {
        let off = SuccessParams {
            change_every_s: 0.0,
            ..P
        };
        let s = SuccessRate::default();
        s.observe(false, 1_000, &off, 0.4);
        assert!((s.get() - 0.6).abs() < 1e-12);
        s.observe(true, 2_000, &off, 0.4);
        assert!((s.get() - 0.76).abs() < 1e-12);
    }

    #[test]
    fn the_estimate_comes_first() {
        assert_eq!(std::mem::offset_of!(SuccessRate, estimate), 0);
    }
}
