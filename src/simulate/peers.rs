//! Two more well-known load-aware contenders, each the plain textbook form.
//!
//! - [`LoadAware::least_outstanding`]: the provider with the fewest attempts in flight from this sidecar,
//!   ties broken by the lowest latency EWMA (Envoy's and NGINX's least-request family, with
//!   latency as the tie-break).
//! - [`LoadAware::pending_penalty`]: every provider scored by its latency EWMA inflated by its in-flight
//!   count, the lowest score wins (the full-scan "pending penalty" of agentgateway-style
//!   gateways, where P2C compares only two random providers and uses a peak EWMA).
//!
//! Both count a failed attempt as [`FAILURE_SAMPLE_US`], like the other latency baselines.

use super::clock::Micros;
use super::provider::{Providers, Response};
use super::strategy::{Strategy, FAILURE_SAMPLE_US};
use crate::routing::SplitMix64;

/// Weight of a new sample in the latency EWMA of both contenders.
pub const EWMA_ALPHA: f64 = 0.3;

/// How much each attempt in flight inflates [`LoadAware::pending_penalty`]'s score: score = EWMA ×
/// (1 + this × in flight).
pub const PENDING_WEIGHT: f64 = 1.0;

/// Per provider: attempts in flight and the latency EWMA (`None` before the first sample).
#[derive(Debug, Clone, Default)]
struct Load {
    in_flight: u32,
    ewma: Option<f64>,
}

impl Load {
    fn started(&mut self) {
        self.in_flight += 1;
    }

    fn finished(&mut self, response: &Response) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let sample = if response.ok() {
            response.latency as f64
        } else {
            FAILURE_SAMPLE_US
        };
        self.ewma = Some(match self.ewma {
            None => sample,
            Some(e) => e + EWMA_ALPHA * (sample - e),
        });
    }

    /// Latency estimate; an unmeasured provider counts as 0 so it is tried.
    fn latency(&self) -> f64 {
        self.ewma.unwrap_or(0.0)
    }
}

/// A strategy that picks the provider with the smallest key of its per-provider load (attempts
/// in flight and latency EWMA).
#[derive(Debug)]
pub struct LoadAware {
    loads: Vec<Load>,
    key: fn(&Load) -> (f64, f64),
}

impl LoadAware {
    /// Least-outstanding over `n` providers: fewest attempts in flight, ties by lowest
    /// latency EWMA.
    pub fn least_outstanding(n: usize) -> Self {
        Self {
            loads: vec![Load::default(); n.max(1)],
            key: |l| (f64::from(l.in_flight), l.latency()),
        }
    }

    /// Pending penalty over `n` providers: lowest latency EWMA × (1 + [`PENDING_WEIGHT`] ×
    /// in flight).
    pub fn pending_penalty(n: usize) -> Self {
        Self {
            loads: vec![Load::default(); n.max(1)],
            key: |l| {
                let inflated = l.latency() * (1.0 + PENDING_WEIGHT * f64::from(l.in_flight));
                (inflated, 0.0)
            },
        }
    }
}

impl Strategy for LoadAware {
    /// The smallest key, the first provider on ties.
    fn pick(&mut self, _now: Micros, _rng: &mut SplitMix64, _world: &Providers) -> usize {
        let mut best = 0;
        for i in 1..self.loads.len() {
            if (self.key)(&self.loads[i]) < (self.key)(&self.loads[best]) {
                best = i;
            }
        }
        best
    }

    fn started(&mut self, p: usize, _now: Micros) {
        self.loads[p].started();
    }

    fn finished(&mut self, p: usize, _now: Micros, response: &Response) {
        self.loads[p].finished(response);
    }
}

#[cfg(test)]
mod tests {
    use super::super::provider::{ProviderSpec, Reply};
    use super::super::strategy::tests::ok;
    use super::*;

    fn world() -> Providers {
        Providers::new(
            &[ProviderSpec::new("a", 100.0), ProviderSpec::new("b", 50.0)],
            1,
        )
    }

    #[test]
    fn least_outstanding_counts_in_flight_then_latency() {
        let (w, mut rng) = (world(), SplitMix64::new(1));
        let mut s = LoadAware::least_outstanding(2);
        s.started(0, 0);
        s.finished(0, 0, &ok(100));
        s.started(1, 0);
        s.finished(1, 0, &ok(50));
        // Both idle: the faster.
        assert_eq!(s.pick(0, &mut rng, &w), 1);
        // One in flight on the faster: the idle slower one.
        s.started(1, 0);
        assert_eq!(s.pick(0, &mut rng, &w), 0);
        s.started(0, 0);
        assert_eq!(s.pick(0, &mut rng, &w), 1);
    }

    #[test]
    fn pending_penalty_inflates_latency_by_in_flight() {
        let (w, mut rng) = (world(), SplitMix64::new(1));
        let mut s = LoadAware::pending_penalty(2);
        // Unmeasured providers are tried first.
        assert_eq!(s.pick(0, &mut rng, &w), 0);
        s.started(0, 0);
        s.finished(0, 0, &ok(100));
        s.started(1, 0);
        s.finished(1, 0, &ok(40));
        assert_eq!(s.pick(0, &mut rng, &w), 1);
        // 40 × 2 = 80 < 100: still b; 40 × 3 = 120 > 100: a.
        s.started(1, 0);
        assert_eq!(s.pick(0, &mut rng, &w), 1);
        s.started(1, 0);
        assert_eq!(s.pick(0, &mut rng, &w), 0);
        // A failure counts as a 10 s sample.
        let fail = Response {
            reply: Reply::Status {
                code: 500,
                retry_after_s: None,
            },
            ..ok(1)
        };
        s.finished(1, 0, &fail);
        s.finished(1, 0, &ok(40));
        assert_eq!(s.pick(0, &mut rng, &w), 0);
    }
}
