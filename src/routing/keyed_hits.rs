//! How sharply an alias's keyed picks exploit the fastest candidate: sharper while its
//! conversations keep their caches.
//!
//! A keyed pick places a whole conversation, and every later turn pays the latency of the
//! candidate it was placed on. Where each sidecar carries its conversations' turns itself,
//! nearly every keyed answer comes from the provider's prompt cache, and the spread that
//! `exploit_k` keeps for a fleet picking at random costs every conversation placed on a slower
//! candidate on each of its turns: keyed picks then use `exploit_k` × [`KEYED_EXPLOIT`]. Where
//! the fleet has to spread its conversations (turns through any sidecar, providers without
//! room for all of them), the share of keyed answers that hit stays well below [`HOLD_RATE`]
//! and the exponent stays `exploit_k`: a sharper one there herds the fleet's conversations from
//! one provider to the next. docs/routing.md, "Prefix affinity", measures both.
//!
//! Lock-free: one cell per mode, read and written with relaxed atomics; two threads recording
//! at once may lose one of their steps, which only makes the rate a little slower.

use super::attempt::Mode;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Weight of each keyed answer in the alias's hit rate (an EWMA over about 50 answers).
pub const HIT_RATE_ALPHA: f64 = 0.02;

/// Hit rate above which the alias's conversations are taken to keep their caches.
pub const HOLD_RATE: f64 = 0.85;

/// Factor on `exploit_k` for keyed picks while the hit rate is above [`HOLD_RATE`].
pub const KEYED_EXPLOIT: f64 = 4.0;

/// The share of one alias's keyed answers that reported a prompt-cache hit, per mode.
#[derive(Debug, Default)]
pub struct KeyedHits {
    /// The rate as `f64` bits, per mode (0 until the first answer).
    cells: [AtomicU64; 2],
}

impl KeyedHits {
    /// Folds in one keyed answer of `mode`: `hit` when its first chunk reported prompt tokens
    /// read from the provider's cache.
    pub fn record(&self, mode: Mode, hit: bool) {
        let cell = &self.cells[mode.slot()];
        let rate = f64::from_bits(cell.load(Relaxed));
        let sample = if hit { 1.0 } else { 0.0 };
        cell.store((rate + HIT_RATE_ALPHA * (sample - rate)).to_bits(), Relaxed);
    }

    /// The current hit rate of `mode`'s keyed answers.
    pub fn rate(&self, mode: Mode) -> f64 {
        f64::from_bits(self.cells[mode.slot()].load(Relaxed))
    }

    /// The factor on `exploit_k` for `mode`'s next keyed pick.
    pub fn exploit(&self, mode: Mode) -> f64 {
        if self.rate(mode) > HOLD_RATE {
            KEYED_EXPLOIT
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

    #[test]
    fn the_exponent_sharpens_only_once_most_keyed_answers_hit() {
        let h = KeyedHits::default();
        assert_eq!(h.rate(NS), 0.0);
        assert_eq!(h.exploit(NS), 1.0);
        // From 0, n hits in a row give 1 - (1 - alpha)^n: above 0.85 after 94 of them.
        let needed = ((1.0 - HOLD_RATE).ln() / (1.0 - HIT_RATE_ALPHA).ln()).ceil() as usize;
        for _ in 0..needed - 1 {
            h.record(NS, true);
        }
        assert_eq!(h.exploit(NS), 1.0, "rate {}", h.rate(NS));
        h.record(NS, true);
        assert!(h.rate(NS) > HOLD_RATE);
        assert_eq!(h.exploit(NS), KEYED_EXPLOIT);
        // The modes are kept apart.
        assert_eq!(h.exploit(ST), 1.0);
    }

    #[test]
    fn misses_bring_the_exponent_back() {
        let h = KeyedHits::default();
        for _ in 0..500 {
            h.record(NS, true);
        }
        assert_eq!(h.exploit(NS), KEYED_EXPLOIT);
        // A rate that settles at 72% hits (7 misses in every 25 answers) stays below the mark.
        for i in 0..500 {
            h.record(NS, i % 25 >= 7);
        }
        assert!((h.rate(NS) - 0.72).abs() < 0.1, "{}", h.rate(NS));
        assert_eq!(h.exploit(NS), 1.0);
    }
}
