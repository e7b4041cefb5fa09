//! Live signals about a candidate that arrive before any response does.
//!
//! - Open age: each request sent upstream is held (per [`Mode`]) until its first response
//!   chunk arrives or it gives up. A waiting request that was sent before one that has already
//!   answered has been *overtaken*: the candidate is answering, and this one is merely long
//!   (log-normal latencies have long tails). The age of the oldest request that nothing sent
//!   after it has overtaken is a lower bound on the latency the candidate gives *now*: when
//!   it slows down, or its queue fills because every sidecar rushed to it, the requests sent
//!   since stay unanswered and that age grows, before any slow answer is back. The selector
//!   charges it, less a slack of half the latency estimate, when that exceeds the estimate.
//! - Back-off: a `429` with `Retry-After` sets a deadline before which the candidate gets no
//!   traffic at all (not even the probe floor). Once it passes, the candidate is on
//!   *probation* until its next successful answer: a limit is often renewed, and every request
//!   sent into a renewed one costs its client the whole `Retry-After` again, so the selector
//!   leaves it the probe floor (its success counting as none) until a probe gets through;
//!   then its depressed success rate ramps it back in.
//!
//! Times are µs on any consistent clock: the monotonic clock in the proxy ([`now_us`]), so a
//! wall-clock step (NTP, a resumed VM) can neither bench a candidate nor erase a back-off, and
//! virtual time in the simulator. The waiting send times sit behind a lock taken once when a
//! request is sent and once when it stops waiting; a pick reads one atomic.

use super::attempt::Mode;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// The waiting age's constant (`[routing.rule.wait_age]`, `--param wait_age.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WaitAgeParams {
    /// Part of the latency estimate taken off the open age before it counts: the open age
    /// raises the latency a pick charges once it exceeds 1.5 × the estimate. A lone request
    /// is as old as its own latency before it answers, so without the slack every request
    /// that runs a little long would charge its candidate more while it waits.
    pub slack: f64,
}

impl WaitAgeParams {
    /// The defaults, as a constant.
    pub const DEFAULT: WaitAgeParams = WaitAgeParams { slack: 0.5 };
}

impl Default for WaitAgeParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Largest open age taken at face value (one day); beyond it the clock reading is not plausible.
const MAX_AGE_US: u64 = 86_400_000_000;

/// The proxy's routing clock: monotonic µs (`clock::monotonic_us`).
pub fn now_us() -> u64 {
    crate::clock::monotonic_us()
}

/// The routing clock as of the kernel's last tick (`clock::coarse_monotonic_us`): what the
/// lulls read on every pick, where a few milliseconds do not matter.
pub fn coarse_now_us() -> u64 {
    crate::clock::coarse_monotonic_us()
}

/// Send time marking "no open request" in [`Waiting::oldest_open`].
const NONE: u64 = u64::MAX;

/// Requests of one mode waiting for their first chunk.
#[derive(Debug)]
struct Waiting {
    /// How many are waiting (read without the lock by [`Pressure::active`]).
    count: AtomicU64,
    /// Their send times, oldest first, and the latest send time among the answered ones.
    open: Mutex<Open>,
    /// Send time of the oldest waiting request that no later-sent request has overtaken by
    /// answering first; [`NONE`] when there is none. Written under `open`, read by picks.
    oldest_open: AtomicU64,
}

impl Default for Waiting {
    fn default() -> Self {
        Self {
            count: AtomicU64::new(0),
            open: Mutex::new(Open::default()),
            oldest_open: AtomicU64::new(NONE),
        }
    }
}

/// The waiting requests' send times in order, and the answered frontier.
#[derive(Debug, Default)]
struct Open {
    /// Send times of the requests still waiting, ascending.
    sent: VecDeque<u64>,
    /// The latest send time of a request that got its first chunk (`None` before any).
    frontier: Option<u64>,
}

impl Open {
    /// Send time of the oldest waiting request sent after the frontier.
    fn oldest_open(&self) -> u64 {
        let from = match self.frontier {
            Some(f) => self.sent.partition_point(|&t| t <= f),
            None => 0,
        };
        self.sent.get(from).copied().unwrap_or(NONE)
    }
}

impl Waiting {
    /// Runs `f` on the open set and republishes the oldest open send time.
    fn update(&self, f: impl FnOnce(&mut Open)) {
        let mut open = match self.open.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut open);
        self.oldest_open.store(open.oldest_open(), Relaxed);
    }
}

/// Waiting requests per mode and the back-off deadline of one candidate.
#[derive(Debug, Default)]
pub(crate) struct Pressure {
    waiting: [Waiting; 2],
    /// No traffic before this time (µs); 0 = never backed off.
    until: AtomicU64,
    /// Backed off since the last successful answer.
    probation: AtomicBool,
}

impl Pressure {
    /// A request of `mode` was sent at `sent_us`.
    pub(crate) fn start(&self, mode: Mode, sent_us: u64) {
        let w = &self.waiting[mode.slot()];
        w.count.fetch_add(1, Relaxed);
        w.update(|open| {
            let at = open.sent.partition_point(|&t| t <= sent_us);
            open.sent.insert(at, sent_us);
        });
    }

    /// The request of `mode` sent at `sent_us` stopped waiting: `answered` when its first chunk
    /// came (every request sent before it that still waits has then been overtaken), not when
    /// it gave up.
    pub(crate) fn end(&self, mode: Mode, sent_us: u64, answered: bool) {
        let w = &self.waiting[mode.slot()];
        w.count.fetch_sub(1, Relaxed);
        w.update(|open| {
            let at = open.sent.partition_point(|&t| t < sent_us);
            if open.sent.get(at) == Some(&sent_us) {
                open.sent.remove(at);
            }
            if answered {
                open.frontier = Some(open.frontier.map_or(sent_us, |f| f.max(sent_us)));
            }
        });
    }

    /// Send time of the oldest request of `mode` still waiting for its first chunk, if any.
    pub(crate) fn oldest_waiting(&self, mode: Mode) -> Option<u64> {
        let open = match self.waiting[mode.slot()].open.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        open.sent.front().copied()
    }

    /// True when scoring this candidate needs the current time.
    #[inline]
    pub(crate) fn active(&self) -> bool {
        self.until.load(Relaxed) != 0 || self.waiting.iter().any(|w| w.count.load(Relaxed) != 0)
    }

    /// Age (µs) at `now_us` of the oldest request of `mode` still waiting that no request sent
    /// after it has overtaken (by getting its first chunk first); `None` when there is none.
    pub(crate) fn open_age_us(&self, mode: Mode, now_us: u64) -> Option<f64> {
        match self.waiting[mode.slot()].oldest_open.load(Relaxed) {
            NONE => None,
            sent => {
                let age = now_us.saturating_sub(sent);
                (age <= MAX_AGE_US).then_some(age as f64)
            }
        }
    }

    /// No traffic before `deadline_us` (a later deadline never gets shortened).
    pub(crate) fn back_off_until(&self, deadline_us: u64) {
        self.until.fetch_max(deadline_us, Relaxed);
        self.probation.store(true, Relaxed);
    }

    /// A successful answer ends the probation a back-off began.
    #[inline]
    pub(crate) fn succeeded(&self) {
        if self.probation.load(Relaxed) {
            self.probation.store(false, Relaxed);
        }
    }

    /// True from a back-off until the next successful answer (the back-off itself included).
    #[inline]
    pub(crate) fn on_probation(&self) -> bool {
        self.probation.load(Relaxed)
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
    fn the_open_age_is_the_oldest_waiting_request_not_overtaken() {
        let p = Pressure::default();
        assert_eq!(p.open_age_us(NS, 100), None);
        assert!(!p.active());
        p.start(NS, 1_000);
        p.start(NS, 3_000);
        assert!(p.active());
        assert_eq!(p.open_age_us(NS, 5_000), Some(4_000.0));
        assert_eq!(p.open_age_us(Mode::Streaming, 5_000), None);
        // The younger one answers: the older one is overtaken, a straggler, and counts no more.
        p.end(NS, 3_000, true);
        assert_eq!(p.open_age_us(NS, 5_000), None);
        assert!(p.active(), "the straggler still waits");
        // A request sent after the answered one is open again.
        p.start(NS, 6_000);
        assert_eq!(p.open_age_us(NS, 9_000), Some(3_000.0));
        // One that gives up without an answer overtakes nothing.
        p.end(NS, 6_000, false);
        assert_eq!(p.open_age_us(NS, 9_000), None);
        // Overtaken or not, the straggler is still the oldest request waiting.
        assert_eq!(p.oldest_waiting(NS), Some(1_000));
        p.end(NS, 1_000, false);
        assert!(!p.active());
        assert_eq!(p.oldest_waiting(NS), None);
    }

    #[test]
    fn requests_sent_out_of_order_are_kept_in_order() {
        let p = Pressure::default();
        for sent in [5_000, 2_000, 9_000, 2_000] {
            p.start(NS, sent);
        }
        assert_eq!(p.open_age_us(NS, 10_000), Some(8_000.0));
        p.end(NS, 2_000, true);
        assert_eq!(p.open_age_us(NS, 10_000), Some(5_000.0));
        // A clock read before the oldest send gives no age rather than a negative one.
        assert_eq!(p.open_age_us(NS, 4_000), Some(0.0));
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
    fn probation_lasts_from_a_back_off_to_the_next_success() {
        let p = Pressure::default();
        assert!(!p.on_probation());
        p.succeeded();
        assert!(!p.on_probation());
        p.back_off_until(500);
        assert!(p.on_probation());
        // The deadline passing does not end it; only an answer that gets through does.
        assert!(!p.backed_off(600));
        assert!(p.on_probation());
        p.succeeded();
        assert!(!p.on_probation());
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
