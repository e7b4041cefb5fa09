//! The latency this proxy's own requests add at a candidate, learned from its answers.
//!
//! A proxy that carries much of a provider's traffic (a standalone edge proxy, a few busy
//! replicas) makes that provider slower by sending it more, and its picks follow each other
//! faster than any answer can report it. Each successful answer is a sample of (requests of
//! ours in flight at the candidate when it was sent, its latency); a time-weighted linear
//! regression over the last [`LoadParams::window_s`] seconds gives the slope `b` (µs per request of ours)
//! and the mean in-flight count `n̄`. The pick then charges the candidate
//!
//! `latency + b⁺ × (n − n̄) + b⁺ × n`
//!
//! with `n` the requests in flight now: the latency the next request is predicted to see at
//! today's load, plus what it adds to the `n` already waiting (the marginal cost, which is
//! what the fleet-wide optimum equalises). A provider whose latency does not depend on our
//! load (a hosted API, or a sidecar whose share of the provider is tiny) has `b ≈ 0` and is
//! charged its latency alone. [`LoadParams::prior_variance`] keeps the slope at 0 until the
//! in-flight count has varied.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// The load charge's constants (`[routing.rule.load]`, `--param load.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoadParams {
    /// Memory of the regression, in seconds (each answer weighs `1 − e^(−Δt / window_s)`).
    pub window_s: f64,
    /// Variance of the in-flight count (requests²) assumed before any was seen: the slope is
    /// `cov(n, latency) / (var(n) + prior_variance)`.
    pub prior_variance: f64,
    /// Answers closer together than this (µs) count as this far apart, so simultaneous
    /// answers each still weigh in.
    pub min_gap_us: u64,
    /// Lowest charge as a fraction of the latency: a load that drained leaves the candidate
    /// faster than its average, not free.
    pub min_charge: f64,
}

impl LoadParams {
    /// The defaults, as a constant.
    pub const DEFAULT: LoadParams = LoadParams {
        window_s: 30.0,
        prior_variance: 0.1,
        min_gap_us: 1_000,
        min_charge: 0.01,
    };
}

impl Default for LoadParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Time-weighted means of n, latency, n² and n·latency.
#[derive(Debug, Default, Clone, Copy)]
struct Moments {
    n: f64,
    l: f64,
    nn: f64,
    nl: f64,
    /// When the last answer was folded in (µs on the routing clock); `None` before any.
    at_us: Option<u64>,
    /// Answers folded in (the first ones are averaged plainly until the window fills).
    count: u64,
}

impl Moments {
    /// Folds in one answer; returns (slope µs/request, mean n).
    fn fold(&mut self, n: f64, latency_us: f64, at_us: u64, p: &LoadParams) -> (f64, f64) {
        self.count += 1;
        let w = match self.at_us {
            None => 1.0,
            Some(last) => {
                let dt = at_us.saturating_sub(last).max(p.min_gap_us) as f64 / 1e6;
                (1.0 - (-dt / p.window_s).exp()).max(1.0 / self.count as f64)
            }
        };
        self.at_us = Some(at_us.max(self.at_us.unwrap_or(0)));
        let mix = |old: f64, x: f64| old + w * (x - old);
        self.n = mix(self.n, n);
        self.l = mix(self.l, latency_us);
        self.nn = mix(self.nn, n * n);
        self.nl = mix(self.nl, n * latency_us);
        let var = (self.nn - self.n * self.n).max(0.0);
        let cov = self.nl - self.n * self.l;
        (cov / (var + p.prior_variance), self.n)
    }
}

/// One candidate's load response in one mode: updated per answer under a lock, read per pick
/// from two atomics.
#[derive(Debug, Default)]
pub(crate) struct Load {
    moments: Mutex<Moments>,
    slope_bits: AtomicU64,
    mean_bits: AtomicU64,
}

impl Load {
    /// Folds in a successful answer: `inflight_at_send` other requests of ours were in flight
    /// at the candidate when it was sent, and it took `latency_us`; `at_us` is now.
    pub(crate) fn answer(
        &self,
        inflight_at_send: u64,
        latency_us: f64,
        at_us: u64,
        p: &LoadParams,
    ) {
        if !(latency_us.is_finite() && latency_us >= 0.0) {
            return;
        }
        let (slope, mean) = match self.moments.lock() {
            Ok(mut m) => m.fold(inflight_at_send as f64, latency_us, at_us, p),
            Err(poisoned) => {
                poisoned
                    .into_inner()
                    .fold(inflight_at_send as f64, latency_us, at_us, p)
            }
        };
        self.slope_bits.store(slope.to_bits(), Relaxed);
        self.mean_bits.store(mean.to_bits(), Relaxed);
    }

    /// Latency (µs) one more request of ours adds, at least 0.
    pub(crate) fn slope_us(&self) -> f64 {
        f64::from_bits(self.slope_bits.load(Relaxed)).max(0.0)
    }

    /// Mean count of our requests in flight at the candidate when its answers were sent.
    pub(crate) fn mean_inflight(&self) -> f64 {
        f64::from_bits(self.mean_bits.load(Relaxed))
    }
}

/// The latency the pick charges: `latency + slope × (2·inflight − mean_inflight)`, never below
/// [`LoadParams::min_charge`] of the latency.
#[inline]
pub fn charged_latency(
    latency_us: f64,
    slope_us: f64,
    inflight: u64,
    mean_inflight: f64,
    p: &LoadParams,
) -> f64 {
    if slope_us <= 0.0 {
        return latency_us;
    }
    let n = inflight as f64;
    (latency_us + slope_us * (2.0 * n - mean_inflight)).max(latency_us * p.min_charge)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000;
    const P: LoadParams = LoadParams::DEFAULT;

    #[test]
    fn latency_that_grows_with_our_load_gives_its_slope() {
        let load = Load::default();
        // 200 ms plus 10 ms per request of ours in flight, answers every 10 ms.
        for i in 0..3_000u64 {
            let n = i % 40;
            load.answer(n, 200_000.0 + 10_000.0 * n as f64, i * SEC / 100, &P);
        }
        assert!(
            (load.slope_us() - 10_000.0).abs() < 200.0,
            "{}",
            load.slope_us()
        );
        assert!((load.mean_inflight() - 19.5).abs() < 2.0);
    }

    #[test]
    fn latency_that_ignores_our_load_gives_no_slope() {
        let load = Load::default();
        for i in 0..3_000u64 {
            // Jitter that has nothing to do with the in-flight count.
            let jitter = [0.8, 1.3, 0.9, 1.1, 1.0, 0.7, 1.2][(i % 7) as usize];
            load.answer(i % 5, 200_000.0 * jitter, i * SEC / 100, &P);
        }
        assert!(load.slope_us() < 2_000.0, "{}", load.slope_us());
    }

    #[test]
    fn a_proxy_that_never_has_two_requests_in_flight_learns_nothing() {
        let load = Load::default();
        for i in 0..500u64 {
            load.answer(
                0,
                200_000.0 + f64::from((i % 3) as u32) * 50_000.0,
                i * SEC,
                &P,
            );
        }
        assert_eq!(load.slope_us(), 0.0);
        assert_eq!(charged_latency(200_000.0, 0.0, 3, 0.0, &P), 200_000.0);
    }

    #[test]
    fn the_charge_rises_with_every_request_sent_before_any_answers() {
        let (lat, slope, mean) = (200_000.0, 5_000.0, 10.0);
        let at = |n| charged_latency(lat, slope, n, mean, &P);
        assert_eq!(at(5), lat);
        assert!(at(6) > at(5) && at(20) > at(6));
        assert_eq!(at(20) - at(19), 10_000.0, "twice the slope per request");
        assert_eq!(
            at(0),
            lat - slope * mean,
            "a drained candidate is charged less"
        );
    }

    #[test]
    fn old_answers_fade_within_the_window() {
        let load = Load::default();
        for i in 0..1_000u64 {
            let n = i % 20;
            load.answer(n, 100_000.0 + 20_000.0 * n as f64, i * SEC / 10, &P);
        }
        // The provider gains capacity: latency no longer depends on our load.
        for i in 1_000..(1_000 + 3_000u64) {
            load.answer(i % 20, 100_000.0, i * SEC / 10, &P);
        }
        assert!(load.slope_us() < 2_000.0, "{}", load.slope_us());
    }
}
