//! Live signals about a candidate that arrive before any response does.
//!
//! - Waiting age: a request sent upstream adds its send time to a running sum (per [`Mode`])
//!   until its first response chunk arrives, so the mean age of the requests still waiting is
//!   `now - sum / count`. With requests sent at a steady pace that each take `L`, waiting ages
//!   spread evenly over `[0, L]` and average `L / 2`, so twice the mean age estimates the
//!   latency those requests are getting *now*, before any of them has answered (the selector
//!   corrects it for the length bias of jittery latencies: the requests still waiting are the
//!   long ones). The selector
//!   uses it, less a slack of half the EWMA, when that exceeds the EWMA: a provider that
//!   suddenly slows down, or whose queue is filling because every sidecar rushed to it, loses
//!   traffic while the slow answers are still on their way.
//! - Back-off: a `429` with `Retry-After` sets a deadline before which the candidate gets no
//!   traffic at all (not even the probe floor); afterwards its depressed success rate ramps it
//!   back in.
//!
//! Times are µs on any consistent clock: the monotonic clock in the proxy ([`now_us`]), so a
//! wall-clock step (NTP, a resumed VM) can neither bench a candidate nor erase a back-off, and
//! virtual time in the simulator. Count and sum are two atomics read without a lock, so a reader can see them
//! out of step; with absolute timestamps that shows up as an implausible age and is ignored.

use super::attempt::Mode;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The waiting age's constants (`[routing.rule.wait_age]`, `--param wait_age.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WaitAgeParams {
    /// Requests sent at a steady pace that each take `L` are, while waiting, `L / 2` old on
    /// average: twice the mean waiting age estimates the latency they are getting now.
    /// 0 turns the waiting age off.
    pub factor: f64,
    /// Part of the latency EWMA taken off the waiting-age estimate: it counts once it exceeds
    /// 1.5 × the EWMA. One request waiting is anywhere from 0 to its latency old, so twice its
    /// age overshoots that latency half the time, by up to 2×; without the slack that noise
    /// charges every busy candidate a premium and hands its traffic to slower ones. A stall
    /// still shows within about one latency.
    pub slack: f64,
    /// Multiple of the jitter σ² in the length-bias correction `e^(−length_bias · σ²)` of the
    /// mean age: 1 is exact for log-normal latencies, 0 turns the correction off; the default
    /// takes half of it (docs/routing.md says what each costs).
    pub length_bias: f64,
}

impl WaitAgeParams {
    /// The defaults, as a constant.
    pub const DEFAULT: WaitAgeParams = WaitAgeParams {
        factor: 2.0,
        slack: 0.5,
        length_bias: 0.5,
    };
}

impl Default for WaitAgeParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Largest mean waiting age taken at face value (one day); beyond it the reading is torn.
const MAX_AGE_US: u64 = 86_400_000_000;

/// The proxy's routing clock: monotonic µs (`clock::monotonic_us`).
pub fn now_us() -> u64 {
    crate::clock::monotonic_us()
}

/// Requests of one mode waiting for their first chunk: how many, and the sum of send times.
#[derive(Debug, Default)]
struct Waiting {
    count: AtomicU64,
    /// Wrapping sum of send times (µs).
    sent_sum: AtomicU64,
}

/// Waiting requests per mode and the back-off deadline of one candidate.
#[derive(Debug, Default)]
pub(crate) struct Pressure {
    waiting: [Waiting; 2],
    /// No traffic before this time (µs); 0 = never backed off.
    until: AtomicU64,
}

impl Pressure {
    /// A request of `mode` was sent at `sent_us`.
    pub(crate) fn start(&self, mode: Mode, sent_us: u64) {
        let w = &self.waiting[mode.slot()];
        w.sent_sum.fetch_add(sent_us, Relaxed);
        w.count.fetch_add(1, Relaxed);
    }

    /// The request of `mode` sent at `sent_us` got its first chunk (or gave up).
    pub(crate) fn end(&self, mode: Mode, sent_us: u64) {
        let w = &self.waiting[mode.slot()];
        w.count.fetch_sub(1, Relaxed);
        w.sent_sum.fetch_sub(sent_us, Relaxed);
    }

    /// True when scoring this candidate needs the current time.
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.until.load(Relaxed) != 0 || self.waiting.iter().any(|w| w.count.load(Relaxed) != 0)
    }

    /// Mean age (µs) at `now_us` of the requests of `mode` still waiting; `None` when there are
    /// none or the reading is implausible (torn by a concurrent start or end).
    pub(crate) fn mean_age_us(&self, mode: Mode, now_us: u64) -> Option<f64> {
        let w = &self.waiting[mode.slot()];
        let n = w.count.load(Relaxed);
        if n == 0 {
            return None;
        }
        let sum = w.sent_sum.load(Relaxed);
        let total = now_us.wrapping_mul(n).wrapping_sub(sum);
        let age = total / n;
        // Wrapped (negative) or absurd totals come from a torn read.
        (total <= MAX_AGE_US.saturating_mul(n) && age <= MAX_AGE_US).then_some(age as f64)
    }

    /// No traffic before `deadline_us` (a later deadline never gets shortened).
    pub(crate) fn back_off_until(&self, deadline_us: u64) {
        self.until.fetch_max(deadline_us, Relaxed);
    }

    /// The back-off deadline, unless none was set or an expired one was cleared.
    pub(crate) fn deadline_us(&self) -> Option<u64> {
        match self.until.load(Relaxed) {
            0 => None,
            t => Some(t),
        }
    }

    /// True while backed off at `now_us`. A deadline found expired is cleared, so a candidate
    /// that was backed off once does not keep the selector reading the clock forever.
    #[inline]
    pub(crate) fn backed_off(&self, now_us: u64) -> bool {
        let until = self.until.load(Relaxed);
        if until > now_us {
            return true;
        }
        if until != 0 {
            // Lost races are fine: a newer deadline stays, an expired one goes next time.
            let _ = self.until.compare_exchange(until, 0, Relaxed, Relaxed);
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: Mode = Mode::NonStreaming;

    #[test]
    fn mean_age_of_waiting_requests_per_mode() {
        let p = Pressure::default();
        assert_eq!(p.mean_age_us(NS, 100), None);
        assert!(!p.active());
        p.start(NS, 1_000);
        p.start(NS, 3_000);
        assert!(p.active());
        assert_eq!(p.mean_age_us(NS, 5_000), Some(3_000.0));
        assert_eq!(p.mean_age_us(Mode::Streaming, 5_000), None);
        p.end(NS, 1_000);
        assert_eq!(p.mean_age_us(NS, 5_000), Some(2_000.0));
        p.end(NS, 3_000);
        assert_eq!(p.mean_age_us(NS, 5_000), None);
        assert!(!p.active());
    }

    #[test]
    fn torn_or_future_readings_are_ignored() {
        let p = Pressure::default();
        let now = 1_700_000_000_000_000u64;
        p.start(NS, now);
        // A clock that went backwards gives a negative age: ignored.
        assert_eq!(p.mean_age_us(NS, now - 5), None);
        // Sum updated, count not yet (as mid-`start`): implausible, ignored.
        let w = &p.waiting[NS.slot()];
        w.sent_sum.fetch_add(now, Relaxed);
        assert_eq!(p.mean_age_us(NS, now + 10), None);
        w.count.fetch_add(1, Relaxed);
        assert_eq!(p.mean_age_us(NS, now + 10), Some(10.0));
    }

    #[test]
    fn back_off_deadline_only_grows() {
        let p = Pressure::default();
        assert_eq!(p.deadline_us(), None);
        assert!(!p.backed_off(0));
        p.back_off_until(500);
        assert!(p.active());
        assert!(p.backed_off(499));
        p.back_off_until(300);
        assert_eq!(p.deadline_us(), Some(500));
        p.back_off_until(900);
        assert_eq!(p.deadline_us(), Some(900));
        // Expired: reads as not backed off and is cleared.
        assert!(!p.backed_off(900));
        assert_eq!(p.deadline_us(), None);
        assert!(!p.active());
    }

    #[test]
    fn the_routing_clock_follows_the_monotonic_clock_not_the_wall_clock() {
        let (mono, wall) = (std::time::Instant::now(), std::time::SystemTime::now());
        let before = now_us();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let elapsed = now_us() - before;
        let mono_us = mono.elapsed().as_micros() as u64;
        assert!(elapsed <= mono_us + 1_000, "{elapsed} µs vs {mono_us} µs");
        assert!(elapsed >= 20_000, "{elapsed}");
        // Not unix time: the reading is far below the wall clock's µs since 1970.
        let wall_us = wall
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        assert!(now_us() < wall_us / 2);
    }
}
