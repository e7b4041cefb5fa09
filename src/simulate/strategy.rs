//! Routing strategies compared by the simulator, behind one small trait.
//!
//! sturnus's own strategy lives in [`super::sturnus`] and calls the real routing code; the
//! baselines here are the usual alternatives, each implemented the straightforward way:
//! round-robin, uniform random, "lowest average of the last 10 samples" (greedy, no probing),
//! power-of-two-choices with peak EWMA (Finagle's / Linkerd's balancer) and an oracle that
//! knows every provider's true expected cost at the moment it picks.

use super::clock::Micros;
use super::conversations::Turn;
use super::provider::{Providers, Response};
use crate::routing::{RngSource, SplitMix64};
use std::collections::VecDeque;

/// Latency sample (µs) the latency-only baselines record for a failed attempt, as if it had
/// timed out; without it a provider failing fast would look like the fastest one.
pub const FAILURE_SAMPLE_US: f64 = 10_000_000.0;

/// Samples averaged by [`LowestAverage`].
pub const LAST_SAMPLES: usize = 10;

/// Decay time of the peak EWMA, in µs (Finagle's and Linkerd's default of 10 s).
pub const PEAK_EWMA_DECAY_US: f64 = 10_000_000.0;

/// One sidecar's routing policy: picks a provider per attempt and learns from the results.
pub trait Strategy {
    /// Provider index for an attempt sent at `now` (`world` is only for the oracle's eyes).
    fn pick(&mut self, now: Micros, rng: &mut SplitMix64, world: &Providers) -> usize;

    /// Provider index for an attempt that is `turn` of a conversation; strategies that do not
    /// look at conversations pick as [`Strategy::pick`].
    fn pick_turn(
        &mut self,
        _turn: Option<&Turn>,
        now: Micros,
        rng: &mut SplitMix64,
        world: &Providers,
    ) -> usize {
        self.pick(now, rng, world)
    }

    /// An attempt to `p` was sent at `now`.
    fn started(&mut self, _p: usize, _now: Micros) {}

    /// The attempt to `p` finished at `now` with `response`.
    fn finished(&mut self, _p: usize, _now: Micros, _response: &Response) {}
}

/// Cycles through the providers in order, ignoring every result. Each sidecar starts at a
/// random place in the cycle (as processes started at different times would be), so a fleet
/// does not march in lock step.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: Option<usize>,
    n: usize,
}

impl RoundRobin {
    /// Round-robin over `n` providers.
    pub fn new(n: usize) -> Self {
        Self {
            next: None,
            n: n.max(1),
        }
    }
}

impl Strategy for RoundRobin {
    fn pick(&mut self, _now: Micros, rng: &mut SplitMix64, _world: &Providers) -> usize {
        let p = self
            .next
            .unwrap_or_else(|| (rng.next_u64() % self.n as u64) as usize);
        self.next = Some((p + 1) % self.n);
        p
    }
}

/// Picks a provider uniformly at random, ignoring every result.
#[derive(Debug)]
pub struct Uniform {
    n: usize,
}

impl Uniform {
    /// Uniform choice among `n` providers.
    pub fn new(n: usize) -> Self {
        Self { n: n.max(1) }
    }
}

impl Strategy for Uniform {
    fn pick(&mut self, _now: Micros, rng: &mut SplitMix64, _world: &Providers) -> usize {
        (rng.next_u64() % self.n as u64) as usize
    }
}

/// Greedy: the provider with the lowest mean of its last [`LAST_SAMPLES`] latency samples
/// (failures count as [`FAILURE_SAMPLE_US`]); providers without samples are tried first. It
/// never probes, so a provider that once looked bad never gets the chance to look good again.
#[derive(Debug)]
pub struct LowestAverage {
    samples: Vec<VecDeque<f64>>,
}

impl LowestAverage {
    /// Greedy choice among `n` providers.
    pub fn new(n: usize) -> Self {
        Self {
            samples: vec![VecDeque::with_capacity(LAST_SAMPLES); n.max(1)],
        }
    }

    fn average(samples: &VecDeque<f64>) -> f64 {
        if samples.is_empty() {
            0.0
        } else {
            samples.iter().sum::<f64>() / samples.len() as f64
        }
    }
}

impl Strategy for LowestAverage {
    fn pick(&mut self, _now: Micros, _rng: &mut SplitMix64, _world: &Providers) -> usize {
        argmin(self.samples.iter().map(Self::average))
    }

    fn finished(&mut self, p: usize, _now: Micros, response: &Response) {
        let sample = if response.ok() {
            response.latency as f64
        } else {
            FAILURE_SAMPLE_US
        };
        let s = &mut self.samples[p];
        if s.len() == LAST_SAMPLES {
            s.pop_front();
        }
        s.push_back(sample);
    }
}

/// Finagle's peak-EWMA load estimate for one provider.
#[derive(Debug, Clone, Default)]
struct PeakEwma {
    /// Latency estimate in µs: jumps up to any higher sample, decays towards lower ones.
    cost: f64,
    stamp: Micros,
    pending: u32,
}

impl PeakEwma {
    /// Folds in a sample; time since the last observation weighs how far the cost moves down.
    fn observe(&mut self, rtt: f64, now: Micros) {
        let elapsed = now.saturating_sub(self.stamp) as f64;
        let w = (-elapsed / PEAK_EWMA_DECAY_US).exp();
        self.cost = if rtt > self.cost {
            rtt
        } else {
            self.cost * w + rtt * (1.0 - w)
        };
        self.stamp = now;
    }

    /// Load = decayed cost × (pending + 1); an unmeasured provider with requests outstanding
    /// gets Finagle's large penalty.
    fn load(&mut self, now: Micros) -> f64 {
        self.observe(0.0, now);
        if self.cost == 0.0 && self.pending > 0 {
            1e12 + f64::from(self.pending)
        } else {
            self.cost * f64::from(self.pending + 1)
        }
    }
}

/// Power of two choices: two distinct random providers, the one with the lower peak-EWMA load
/// wins (failures count as [`FAILURE_SAMPLE_US`]).
#[derive(Debug)]
pub struct PowerOfTwo {
    ewma: Vec<PeakEwma>,
}

impl PowerOfTwo {
    /// P2C over `n` providers.
    pub fn new(n: usize) -> Self {
        Self {
            ewma: vec![PeakEwma::default(); n.max(1)],
        }
    }
}

impl Strategy for PowerOfTwo {
    fn pick(&mut self, now: Micros, rng: &mut SplitMix64, _world: &Providers) -> usize {
        let n = self.ewma.len() as u64;
        if n == 1 {
            return 0;
        }
        let a = (rng.next_u64() % n) as usize;
        let b = ((a as u64 + 1 + rng.next_u64() % (n - 1)) % n) as usize;
        let (la, lb) = (self.ewma[a].load(now), self.ewma[b].load(now));
        if lb < la {
            b
        } else {
            a
        }
    }

    fn started(&mut self, p: usize, _now: Micros) {
        self.ewma[p].pending += 1;
    }

    fn finished(&mut self, p: usize, now: Micros, response: &Response) {
        let e = &mut self.ewma[p];
        e.pending = e.pending.saturating_sub(1);
        let rtt = if response.ok() {
            response.latency as f64
        } else {
            FAILURE_SAMPLE_US
        };
        e.observe(rtt, now);
    }
}

/// The yardstick: with independent providers, always the one with the lowest true expected
/// cost right now (it reads the models); with shared, capacity-limited providers, the split
/// that minimises the fleet's mean latency (everyone taking the momentarily best provider is
/// exactly the herd behaviour the scenario is about).
#[derive(Debug, Default)]
pub struct Oracle {
    /// `(from, shares)`, sorted by time.
    split: Option<Vec<(Micros, Vec<f64>)>>,
}

impl Oracle {
    /// Oracle that reads the models at every pick.
    pub fn greedy() -> Self {
        Self { split: None }
    }

    /// Oracle routing at random by precomputed optimal splits, each in force from its time.
    pub fn split(splits: Vec<(Micros, Vec<f64>)>) -> Self {
        Self {
            split: Some(splits),
        }
    }
}

impl Strategy for Oracle {
    fn pick(&mut self, now: Micros, rng: &mut SplitMix64, world: &Providers) -> usize {
        self.pick_turn(None, now, rng, world)
    }

    /// With conversations, the greedy oracle also knows which provider caches the turn's
    /// prefix.
    fn pick_turn(
        &mut self,
        turn: Option<&Turn>,
        now: Micros,
        rng: &mut SplitMix64,
        world: &Providers,
    ) -> usize {
        match &self.split {
            Some(splits) => {
                let shares = splits
                    .iter()
                    .take_while(|(from, _)| *from <= now)
                    .last()
                    .map_or(&[][..], |(_, s)| s.as_slice());
                crate::routing::pick_index(shares, rng.next_f64())
            }
            None => argmin((0..world.specs().len()).map(|p| world.expected_cost_of(p, now, turn))),
        }
    }
}

/// Index of the smallest value (the first on ties); 0 for an empty iterator.
fn argmin(values: impl Iterator<Item = f64>) -> usize {
    let mut best = (0, f64::INFINITY);
    for (i, v) in values.enumerate() {
        if v < best.1 {
            best = (i, v);
        }
    }
    best.0
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::provider::{ProviderSpec, Reply};
    use super::*;

    fn world() -> Providers {
        Providers::new(
            &[
                ProviderSpec::new("a", 100.0),
                ProviderSpec::new("b", 50.0),
                ProviderSpec::new("c", 200.0),
            ],
            1,
        )
    }

    /// A success after `ms` milliseconds.
    pub(in crate::simulate) fn ok(ms: u64) -> Response {
        Response {
            latency: ms * 1000,
            reply: Reply::Ok,
            quota: None,
            cached: false,
        }
    }

    #[test]
    fn round_robin_cycles_and_uniform_covers() {
        let w = world();
        let mut rng = SplitMix64::new(1);
        let mut rr = RoundRobin::new(3);
        let picks: Vec<usize> = (0..6).map(|_| rr.pick(0, &mut rng, &w)).collect();
        let expected: Vec<usize> = (0..6).map(|i| (picks[0] + i) % 3).collect();
        assert_eq!(picks, expected);
        let mut u = Uniform::new(3);
        let mut counts = [0; 3];
        for _ in 0..3000 {
            counts[u.pick(0, &mut rng, &w)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (900..1100).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn lowest_average_explores_once_then_sticks() {
        let w = world();
        let mut rng = SplitMix64::new(1);
        let mut s = LowestAverage::new(3);
        for (p, ms) in [(0, 100), (1, 50), (2, 200)] {
            assert_eq!(s.pick(0, &mut rng, &w), p);
            s.finished(p, 0, &ok(ms));
        }
        assert_eq!(s.pick(0, &mut rng, &w), 1);
        let fail = Response {
            latency: 1000,
            reply: Reply::Status {
                code: 503,
                retry_after_s: None,
            },
            quota: None,
            cached: false,
        };
        s.finished(1, 0, &fail);
        // One failure among two samples: mean 5 s, worse than 100 ms.
        assert_eq!(s.pick(0, &mut rng, &w), 0);
    }

    #[test]
    fn peak_ewma_jumps_up_and_decays() {
        let mut e = PeakEwma::default();
        e.observe(1000.0, 0);
        assert_eq!(e.cost, 1000.0);
        e.observe(5000.0, 1);
        assert_eq!(e.cost, 5000.0);
        // One decay time later with no samples: cost falls by e.
        let l = e.load(1 + PEAK_EWMA_DECAY_US as u64);
        assert!((l - 5000.0 / std::f64::consts::E).abs() < 1.0, "{l}");
        e.pending = 2;
        assert!(e.load(1 + PEAK_EWMA_DECAY_US as u64) > 3.0 * 1800.0);
    }

    #[test]
    fn p2c_prefers_lower_load_and_picks_distinct() {
        let w = world();
        let mut rng = SplitMix64::new(4);
        let mut s = PowerOfTwo::new(3);
        s.finished(0, 0, &ok(100));
        s.finished(1, 0, &ok(50));
        s.finished(2, 0, &ok(200));
        let mut counts = [0; 3];
        for _ in 0..3000 {
            counts[s.pick(0, &mut rng, &w)] += 1;
        }
        // b wins both its pairs, a wins one, c none.
        assert_eq!(counts[2], 0);
        assert!(counts[1] > counts[0] && counts[0] > 0, "{counts:?}");
    }

    #[test]
    fn oracle_reads_the_models() {
        let w = world();
        let mut rng = SplitMix64::new(1);
        assert_eq!(Oracle::greedy().pick(0, &mut rng, &w), 1);
        let splits = vec![(0, vec![0.0, 0.0, 1.0]), (10, vec![1.0, 0.0, 0.0])];
        assert_eq!(Oracle::split(splits.clone()).pick(0, &mut rng, &w), 2);
        assert_eq!(Oracle::split(splits).pick(10, &mut rng, &w), 0);
        assert_eq!(argmin([f64::INFINITY, f64::INFINITY].into_iter()), 0);
    }
}
