//! The rule's share function fed exact latencies: what sturnus's shares would cost if every
//! proxy knew each provider's true expected cost at every pick.
//!
//! It separates the two costs of the rule. The oracle sends every request to the best
//! provider; the rule keeps a share of `(best ÷ E)^exploit_k` on the others and their parts of
//! the probe floor, so even with perfect estimates it pays for the traffic those
//! shares send to slower providers. This contender pays exactly that and nothing for
//! estimating: the gap between it and the oracle is the share function's own cost (set by
//! `exploit_k` and `probe_floor`), the gap between sturnus and it the cost of measuring.

use super::clock::Micros;
use super::provider::Providers;
use super::strategy::Strategy;
use crate::routing::{pick_index, shares, RngSource, RoutingParams, Snapshot, SplitMix64};

/// A latency standing in for an infinite expected cost (a provider that fails everything):
/// finite, so the share function floors it rather than dividing by infinity.
const UNUSABLE_US: f64 = 1e15;

/// Draws from the rule's shares (default `exploit_k` and probe floor) over the providers'
/// exact expected costs at the moment of the pick; learns nothing.
#[derive(Debug)]
pub struct ExactShares {
    params: RoutingParams,
    snaps: Vec<Snapshot>,
    shares: Vec<f64>,
}

impl ExactShares {
    /// The rule's default shares over `n` providers.
    pub fn new(n: usize) -> Self {
        Self {
            params: RoutingParams::default(),
            snaps: vec![Snapshot::COLD; n],
            shares: vec![0.0; n],
        }
    }
}

impl Strategy for ExactShares {
    fn pick(&mut self, now: Micros, rng: &mut SplitMix64, world: &Providers) -> usize {
        for (p, snap) in self.snaps.iter_mut().enumerate() {
            snap.latency_us = Some(world.expected_cost(p, now).min(UNUSABLE_US));
            // What it answers at when nothing queues and nothing is wrong: its reference.
            snap.reference_us = Some(world.specs()[p].mean_us());
        }
        shares(&self.snaps, &self.params, &mut self.shares);
        pick_index(&self.shares, rng.next_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::super::provider::ProviderSpec;
    use super::*;

    fn world(medians: &[f64]) -> Providers {
        let specs: Vec<ProviderSpec> = medians
            .iter()
            .enumerate()
            .map(|(i, &m)| ProviderSpec::new(&format!("p{i}"), m))
            .collect();
        Providers::new(&specs, 1)
    }

    fn counts(medians: &[f64], picks: usize) -> Vec<usize> {
        let w = world(medians);
        let mut s = ExactShares::new(medians.len());
        let mut rng = SplitMix64::new(7);
        let mut counts = vec![0; medians.len()];
        for _ in 0..picks {
            counts[s.pick(0, &mut rng, &w)] += 1;
        }
        counts
    }

    #[test]
    fn a_far_slower_provider_gets_its_part_of_the_probe_floor() {
        // (100 / 500)^6 is far below the floor, and it answers 5 × slower even when nothing is
        // wrong: it is held at a fifth of the 2 % floor.
        let c = counts(&[100.0, 500.0], 100_000);
        let share = c[1] as f64 / 100_000.0;
        assert!((share - 0.004).abs() < 0.001, "{share}");
    }

    #[test]
    fn near_equal_providers_split_by_the_power_of_their_ratio() {
        // (100 / 110)^6 = 0.564: shares 1 / 1.564 and 0.564 / 1.564.
        let c = counts(&[100.0, 110.0], 100_000);
        let share = c[1] as f64 / 100_000.0;
        let want = 0.564 / 1.564;
        assert!((share - want).abs() < 0.01, "{share} vs {want}");
    }
}
