//! How sharply an alias's keyed picks exploit the fastest candidate: sharper while its
//! conversations keep their caches.
//!
//! A keyed pick places a whole conversation, and every later turn pays the latency of the
//! candidate it was placed on. Where each sidecar carries its conversations' turns itself,
//! nearly every keyed answer comes from the provider's prompt cache, and the spread that
//! `exploit_k` keeps for a fleet picking at random costs every conversation placed on a slower
//! candidate on each of its turns: keyed picks then use `exploit_k` × [`KeyedParams::exploit`]. Where
//! the fleet has to spread its conversations (turns through any sidecar, providers without
//! room for all of them), the share of keyed answers that hit stays well below [`KeyedParams::hold_rate`]
//! and the exponent stays `exploit_k`: a sharper one there herds the fleet's conversations from
//! one provider to the next. docs/routing.md, "Prefix affinity", measures both.
//!
//! Lock-free: one cell per mode, read and written with relaxed atomics; two threads recording
//! at once may lose one of their steps, which only makes the rate a little slower.

use super::attempt::Mode;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Prefix affinity's constants (`[routing.rule.keyed]`, `--param keyed.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyedParams {
    /// Weight of each keyed answer in the alias's hit rate (an EWMA over about 50 answers).
    pub hit_rate_alpha: f64,
    /// Hit rate above which the alias's conversations are taken to keep their caches.
    pub hold_rate: f64,
    /// Factor on `exploit_k` for keyed picks while the hit rate is above `hold_rate`.
    pub exploit: f64,
    /// How far each keyed pick moves a smoothed share towards the current share
    /// ([`super::keyed_shares`]; an EWMA over about 1 / 0.3 ≈ 3 picks of memory).
    pub smoothing: f64,
}

impl KeyedParams {
    /// The defaults, as a constant.
    pub const DEFAULT: KeyedParams = KeyedParams {
        hit_rate_alpha: 0.02,
        hold_rate: 0.85,
        exploit: 4.0,
        smoothing: 0.3,
    };
}

impl Default for KeyedParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The share of one alias's keyed answers that reported a prompt-cache hit, per mode.
#[derive(Debug, Default)]
pub struct KeyedHits {
    /// The rate as `f64` bits, per mode (0 until the first answer).
    cells: [AtomicU64; 2],
}

impl KeyedHits {
    /// Folds in one keyed answer of `mode`: `hit` when its first chunk reported prompt tokens
    /// read from the provider's cache.
    pub fn record(&self, mode: Mode, hit: bool, p: &KeyedParams) {
        let cell = &self.cells[mode.slot()];
        let rate = f64::from_bits(cell.load(Relaxed));
        let sample = if hit { 1.0 } else { 0.0 };
        cell.store(
            (rate + p.hit_rate_alpha * (sample - rate)).to_bits(),
            Relaxed,
        );
    }

    /// The current hit rate of `mode`'s keyed answers.
    pub fn rate(&self, mode: Mode) -> f64 {
        f64::from_bits(self.cells[mode.slot()].load(Relaxed))
    }

    /// The factor on `exploit_k` for `mode`'s next keyed pick.
    pub fn exploit(&self, mode: Mode, p: &KeyedParams) -> f64 {
        if self.rate(mode) > p.hold_rate {
            p.exploit
        } else {
            1.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: Mode = Mode::NonStreaming;
    const ST: Mode = Mode::Streaming;
    const P: KeyedParams = KeyedParams::DEFAULT;

    #[test]
    fn the_exponent_sharpens_only_once_most_keyed_answers_hit() {
        let h = KeyedHits::default();
        assert_eq!(h.rate(NS), 0.0);
        assert_eq!(h.exploit(NS, &P), 1.0);
        // From 0, n hits in a row give 1 - (1 - alpha)^n: above 0.85 after 94 of them.
        let needed = ((1.0 - P.hold_rate).ln() / (1.0 - P.hit_rate_alpha).ln()).ceil() as usize;
        for _ in 0..needed - 1 {
            h.record(NS, true, &P);
        }
        assert_eq!(h.exploit(NS, &P), 1.0, "rate {}", h.rate(NS));
        h.record(NS, true, &P);
        assert!(h.rate(NS) > P.hold_rate);
        assert_eq!(h.exploit(NS, &P), P.exploit);
        // The modes are kept apart.
        assert_eq!(h.exploit(ST, &P), 1.0);
    }

    #[test]
    fn misses_bring_the_exponent_back() {
        let h = KeyedHits::default();
        for _ in 0..500 {
            h.record(NS, true, &P);
        }
        assert_eq!(h.exploit(NS, &P), P.exploit);
        // A rate that settles at 72% hits (7 misses in every 25 answers) stays below the mark.
        for i in 0..500 {
            h.record(NS, i % 25 >= 7, &P);
        }
        assert!((h.rate(NS) - 0.72).abs() < 0.1, "{}", h.rate(NS));
        assert_eq!(h.exploit(NS, &P), 1.0);
    }
}
