//! Quota pacing: a candidate whose provider announces that its quota will run out before the
//! window resets gets a smaller share, so the fleet's traffic fits the quota instead of
//! meeting a `429` at the end of it.
//!
//! Every response may carry the quota's `remaining` count and the time to its reset (see
//! `providers::ratelimit`). Many sidecars share one provider key and all read the same
//! count, so the rate at which `remaining` falls between two of this sidecar's readings is the
//! **fleet's** rate `r` (an EWMA of the counts used over an EWMA of the time between readings).
//! The rate that just fits is `r* = (remaining − reserve) / time_to_reset`, with a reserve of
//! `reserve` of the limit (or of `remaining` when the limit is unknown) for the answers
//! already on their way. Each reading moves the pacing factor `f` (in
//! `min_factor..=1`) multiplicatively ([`QuotaParams`] holds the constants):
//!
//! ```text
//! f ← clamp(f × (r* / r)^gain, min_factor, 1)      (each step within ×step_limit)
//! ```
//!
//! and the selector multiplies the candidate's weight by `f`. All sidecars see the same count,
//! so they all scale together and the fleet converges on the rate that fits rather than each
//! taking the whole remainder. Integral action on the measured fleet rate needs no model of how
//! a weight becomes a share. When a new window starts (the count goes up or the reset has
//! passed; a rise of `refill` of the limit or less is answers read out of order), the rate is
//! measured afresh and `f` climbs back as the quota allows. An announced
//! `remaining` of 0 backs the candidate off until the reset, as a `429` would.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Quota pacing's constants (`[routing.rule.quota]`, `--param quota.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QuotaParams {
    /// Smallest pacing factor: a paced candidate still gets probe traffic.
    pub min_factor: f64,
    /// Exponent of the multiplicative step: below 1, so one noisy reading moves `f` only part
    /// way.
    pub gain: f64,
    /// Largest change of `f` per reading (up or down).
    pub step_limit: f64,
    /// Share of the quota kept in reserve for answers already in flight.
    pub reserve: f64,
    /// Smoothing of the counts used and of the time between readings.
    pub rate_alpha: f64,
    /// Rise of the count, as a share of the limit, above which a reading starts a new window
    /// (smaller rises are answers read out of order).
    pub refill: f64,
}

impl QuotaParams {
    /// The defaults, as a constant.
    pub const DEFAULT: QuotaParams = QuotaParams {
        min_factor: 0.01,
        gain: 0.5,
        step_limit: 1.5,
        reserve: 0.05,
        rate_alpha: 0.2,
        refill: 0.1,
    };
}

impl Default for QuotaParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Which quota a reading is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    /// Requests per window.
    Requests,
    /// Tokens per window.
    Tokens,
}

impl QuotaKind {
    /// Both kinds, in slot order.
    pub const ALL: [QuotaKind; 2] = [QuotaKind::Requests, QuotaKind::Tokens];

    /// Label for /status and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaKind::Requests => "requests",
            QuotaKind::Tokens => "tokens",
        }
    }

    fn slot(self) -> usize {
        match self {
            QuotaKind::Requests => 0,
            QuotaKind::Tokens => 1,
        }
    }
}

/// What the provider last announced about one quota, and the pacing it led to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QuotaView {
    /// Count left in the window at the last reading.
    pub remaining: u64,
    /// The window's size, when announced.
    pub limit: Option<u64>,
    /// When the window refills (routing clock, µs), when announced.
    pub reset_at_us: Option<u64>,
    /// The pacing factor this quota currently asks for, in `min_factor..=1`.
    pub factor: f64,
}

/// Bit pattern for "no value".
const NONE: u64 = u64::MAX;

/// One quota's readings and pacing state.
#[derive(Debug)]
struct Gauge {
    remaining: AtomicU64,
    limit: AtomicU64,
    reset_at: AtomicU64,
    read_at: AtomicU64,
    /// EWMA of the count used between readings (f64 bits).
    used: AtomicU64,
    /// EWMA of the time between readings, µs (f64 bits).
    gap: AtomicU64,
    /// Pacing factor (f64 bits).
    factor: AtomicU64,
}

impl Default for Gauge {
    fn default() -> Self {
        Self {
            remaining: AtomicU64::new(NONE),
            limit: AtomicU64::new(NONE),
            reset_at: AtomicU64::new(NONE),
            read_at: AtomicU64::new(NONE),
            used: AtomicU64::new(NONE),
            gap: AtomicU64::new(NONE),
            factor: AtomicU64::new(1.0f64.to_bits()),
        }
    }
}

fn opt(cell: &AtomicU64) -> Option<u64> {
    match cell.load(Relaxed) {
        NONE => None,
        v => Some(v),
    }
}

fn fopt(cell: &AtomicU64) -> Option<f64> {
    opt(cell).map(f64::from_bits)
}

fn ewma(cell: &AtomicU64, x: f64, alpha: f64) -> f64 {
    let mut out = x;
    let _ = cell.fetch_update(Relaxed, Relaxed, |cur| {
        out = if cur == NONE {
            x
        } else {
            let o = f64::from_bits(cur);
            o + alpha * (x - o)
        };
        Some(out.to_bits())
    });
    out
}

impl Gauge {
    fn observe(
        &self,
        remaining: u64,
        limit: Option<u64>,
        reset_at: Option<u64>,
        now: u64,
        p: &QuotaParams,
    ) {
        let prev_remaining = opt(&self.remaining);
        let prev_read = opt(&self.read_at);
        let prev_reset = opt(&self.reset_at);
        self.remaining.store(remaining, Relaxed);
        self.read_at.store(now, Relaxed);
        self.limit.store(limit.unwrap_or(NONE), Relaxed);
        self.reset_at.store(reset_at.unwrap_or(NONE), Relaxed);
        // A count that rises by more than `refill` of the limit is a refill; smaller rises are
        // answers read out of order.
        let new_window = match (prev_remaining, prev_reset) {
            (None, _) => true,
            (Some(prev), _)
                if remaining > prev + ((limit.unwrap_or(prev) as f64 * p.refill) as u64).max(1) =>
            {
                true
            }
            (_, Some(r)) => now >= r,
            _ => false,
        };
        let (Some(prev_remaining), Some(prev_read), false) =
            (prev_remaining, prev_read, new_window)
        else {
            // The rate is measured afresh in each window; the factor keeps its value and
            // climbs back as the new window's readings allow.
            self.used.store(NONE, Relaxed);
            self.gap.store(NONE, Relaxed);
            return;
        };
        let used = ewma(
            &self.used,
            prev_remaining as f64 - remaining as f64,
            p.rate_alpha,
        );
        let gap = ewma(
            &self.gap,
            now.saturating_sub(prev_read) as f64,
            p.rate_alpha,
        );
        let Some(reset_at) = reset_at else { return };
        let left_us = reset_at.saturating_sub(now) as f64;
        if left_us <= 0.0 || gap <= 0.0 {
            return;
        }
        let rate = used / gap;
        let reserve = p.reserve * limit.unwrap_or(remaining) as f64;
        let fits = ((remaining as f64 - reserve).max(0.0)) / left_us;
        let ratio = if rate > 0.0 {
            (fits / rate).powf(p.gain)
        } else {
            p.step_limit
        };
        let step = ratio.clamp(1.0 / p.step_limit, p.step_limit);
        let _ = self.factor.fetch_update(Relaxed, Relaxed, |f| {
            Some(
                (f64::from_bits(f) * step)
                    .clamp(p.min_factor, 1.0)
                    .to_bits(),
            )
        });
    }

    fn view(&self) -> Option<QuotaView> {
        Some(QuotaView {
            remaining: opt(&self.remaining)?,
            limit: opt(&self.limit),
            reset_at_us: opt(&self.reset_at),
            factor: fopt(&self.factor).unwrap_or(1.0),
        })
    }

    /// The factor in force at `now`: 1 when nothing was announced or the window has reset
    /// without a reading since.
    fn factor(&self, now: u64) -> f64 {
        match opt(&self.reset_at) {
            Some(r) if now >= r => 1.0,
            _ => fopt(&self.factor).unwrap_or(1.0),
        }
    }
}

/// Quota readings and pacing of one candidate, per [`QuotaKind`].
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    gauges: [Gauge; 2],
    /// Set once any quota was announced, so the selector skips the pacing when none ever was.
    seen: AtomicU64,
}

impl Quotas {
    /// A response read at `now` announced `remaining` of `kind`, with the window's `limit` and
    /// its reset `reset_in_us` from now (each when announced).
    pub(crate) fn observe(
        &self,
        kind: QuotaKind,
        remaining: u64,
        limit: Option<u64>,
        reset_in_us: Option<u64>,
        now: u64,
        p: &QuotaParams,
    ) {
        self.seen.store(1, Relaxed);
        let reset_at = reset_in_us.map(|r| now.saturating_add(r));
        self.gauges[kind.slot()].observe(remaining, limit, reset_at, now, p);
    }

    /// Whether any quota was ever announced.
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.seen.load(Relaxed) != 0
    }

    /// The pacing factor at `now`: the smaller of the kinds' factors.
    #[inline]
    pub(crate) fn factor(&self, now: u64) -> f64 {
        if !self.active() {
            return 1.0;
        }
        self.gauges
            .iter()
            .map(|g| g.factor(now))
            .fold(1.0, f64::min)
    }

    /// The last reading of `kind`, if any.
    pub(crate) fn view(&self, kind: QuotaKind) -> Option<QuotaView> {
        self.gauges[kind.slot()].view()
    }

    /// The reset time of a quota announced as exhausted at the last reading, if still ahead.
    pub(crate) fn exhausted_until(&self, now: u64) -> Option<u64> {
        self.gauges.iter().find_map(|g| {
            let reset = opt(&g.reset_at)?;
            (opt(&g.remaining)? == 0 && reset > now).then_some(reset)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;
    const P: QuotaParams = QuotaParams::DEFAULT;

    /// A fleet using `rate` per second of a 60-second window of `limit`, read every `every_us`
    /// by one sidecar, from `start` (µs into the window) for `secs` seconds. Returns the final
    /// remaining count.
    fn drive(q: &Quotas, limit: u64, rate: f64, start: u64, secs: u64, every_us: u64) -> u64 {
        let mut remaining = 0;
        let mut t = start;
        while t < start + secs * S {
            let used = (rate * t as f64 / S as f64) as u64;
            remaining = limit.saturating_sub(used);
            let reset_in = (60 * S).saturating_sub(t);
            q.observe(
                QuotaKind::Requests,
                remaining,
                Some(limit),
                Some(reset_in),
                t,
                &P,
            );
            t += every_us;
        }
        remaining
    }

    #[test]
    fn nothing_announced_paces_nothing() {
        let q = Quotas::default();
        assert!(!q.active());
        assert_eq!(q.factor(0), 1.0);
        assert!(q.view(QuotaKind::Requests).is_none());
    }

    #[test]
    fn a_rate_that_fits_keeps_full_share() {
        let q = Quotas::default();
        // 50/s of 6000 per minute: 3000 used, plenty left.
        drive(&q, 6000, 50.0, 0, 30, 200_000);
        assert_eq!(q.factor(30 * S), 1.0);
        let v = q.view(QuotaKind::Requests).unwrap();
        assert_eq!(v.limit, Some(6000));
        assert!(v.remaining > 4000, "{v:?}");
    }

    #[test]
    fn a_rate_that_would_run_out_lowers_the_factor_towards_the_fitting_share() {
        let q = Quotas::default();
        // 200/s against 6000 per minute would run out after 30 s: the fitting rate is about
        // (6000 - 200·t - 300) / (60 - t), well below 200/s.
        drive(&q, 6000, 200.0, 0, 10, 200_000);
        let f = q.factor(10 * S);
        assert!((P.min_factor..0.6).contains(&f), "{f}");
    }

    #[test]
    fn the_factor_recovers_once_the_window_resets() {
        let q = Quotas::default();
        drive(&q, 6000, 200.0, 0, 10, 200_000);
        assert!(q.factor(10 * S) < 1.0);
        // Past the reset with no reading since: full share.
        assert_eq!(q.factor(61 * S), 1.0);
        // A new window's readings at a rate that fits push the factor back up.
        for i in 0..40u64 {
            let t = 61 * S + i * 200_000;
            let remaining = 6000 - i * 2;
            q.observe(
                QuotaKind::Requests,
                remaining,
                Some(6000),
                Some(120 * S - t),
                t,
                &P,
            );
        }
        assert!(q.factor(70 * S) > 0.99, "{}", q.factor(70 * S));
    }

    #[test]
    fn an_exhausted_quota_is_reported_until_its_reset() {
        let q = Quotas::default();
        q.observe(QuotaKind::Tokens, 0, Some(1000), Some(5 * S), 10 * S, &P);
        assert_eq!(q.exhausted_until(11 * S), Some(15 * S));
        assert_eq!(q.exhausted_until(15 * S), None);
        assert_eq!(QuotaKind::Tokens.as_str(), "tokens");
    }

    #[test]
    fn out_of_order_counts_do_not_break_the_estimate() {
        let q = Quotas::default();
        let mut t = 0;
        for i in 0..200u64 {
            // Counts falling at 100/s with ±30 of reordering noise.
            let noise = if i % 2 == 0 { 30 } else { 0 };
            let remaining = 20_000u64.saturating_sub(i * 20) + noise;
            q.observe(
                QuotaKind::Requests,
                remaining,
                None,
                Some(60 * S - t),
                t,
                &P,
            );
            t += 200_000;
        }
        let f = q.factor(t);
        assert!(f.is_finite() && (P.min_factor..=1.0).contains(&f), "{f}");
    }
}
