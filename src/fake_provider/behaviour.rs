//! Live-tunable behaviour of one fake provider.
//!
//! Every knob is an atomic (the request quota's window count sits behind a lock taken only
//! while a quota is set) so the demo or a test can change it while requests are in flight; the
//! server reads the current values once per request.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::quota::{QuotaHeaders, RequestQuota, Verdict};

/// Content chunks a streaming answer has unless told otherwise.
pub const DEFAULT_CHUNKS: u32 = 5;

/// A way for the fake provider to misbehave, from the TCP level up to the HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fault {
    /// Behave normally.
    #[default]
    None,
    /// Close each connection right after accepting it (and before answering any request on an
    /// already open one).
    RefuseConnections,
    /// Read the request, then hold the socket open and say nothing.
    NeverAnswer,
    /// Write half a status line (`HTTP/1.1 20`), then close.
    CloseDuringHeaders,
    /// Send the response headers and a couple of SSE chunks (or half a JSON body), then reset
    /// the connection (RST via `SO_LINGER` 0).
    ResetMidStream,
    /// Write bytes that are not HTTP, then close.
    Garbage,
    /// Answer normally but send the head first, then each SSE chunk (or piece of a JSON body)
    /// after a pause this long.
    SlowDrip(Duration),
    /// Always answer this status with an OpenAI error body.
    Status(u16),
    /// Answer 200 with a JSON body of exactly this many bytes (`{`, spaces, `}`), written as
    /// fast as the peer reads: a provider sending a huge answer.
    HugeBody(u64),
    /// Answer with an SSE stream of chat chunks that never ends (until the peer goes away).
    EndlessStream,
    /// Answer the first request on each connection, then close the kept-alive connection when
    /// its next request arrives, without a word: a provider whose keep-alive timeout raced the
    /// client's next request.
    DropReused,
}

const KIND_SHIFT: u32 = 56;
const ARG_MASK: u64 = (1 << KIND_SHIFT) - 1;

impl Fault {
    /// Packs the fault into one word so it can live in a single atomic.
    fn encode(self) -> u64 {
        let (kind, arg): (u64, u64) = match self {
            Fault::None => (0, 0),
            Fault::RefuseConnections => (1, 0),
            Fault::NeverAnswer => (2, 0),
            Fault::CloseDuringHeaders => (3, 0),
            Fault::ResetMidStream => (4, 0),
            Fault::Garbage => (5, 0),
            Fault::SlowDrip(d) => (6, micros(d).min(ARG_MASK)),
            Fault::Status(s) => (7, u64::from(s)),
            Fault::HugeBody(n) => (8, n.min(ARG_MASK)),
            Fault::EndlessStream => (9, 0),
            Fault::DropReused => (10, 0),
        };
        (kind << KIND_SHIFT) | arg
    }

    /// Inverse of [`Fault::encode`].
    fn decode(word: u64) -> Fault {
        let arg = word & ARG_MASK;
        match word >> KIND_SHIFT {
            1 => Fault::RefuseConnections,
            2 => Fault::NeverAnswer,
            3 => Fault::CloseDuringHeaders,
            4 => Fault::ResetMidStream,
            5 => Fault::Garbage,
            6 => Fault::SlowDrip(Duration::from_micros(arg)),
            7 => Fault::Status(u16::try_from(arg).unwrap_or(500)),
            8 => Fault::HugeBody(arg),
            9 => Fault::EndlessStream,
            10 => Fault::DropReused,
            _ => Fault::None,
        }
    }
}

/// Whole microseconds of `d`, saturating.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A request the provider is working on (see [`Behaviour::admit`]).
pub(crate) struct InProgress<'a> {
    behaviour: &'a Behaviour,
}

impl Drop for InProgress<'_> {
    fn drop(&mut self) {
        self.behaviour.in_progress.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Live-tunable behaviour of one fake provider (all atomics so a test or the demo can
/// change it mid-run).
pub struct Behaviour {
    latency_us: AtomicU64,
    /// Extra delay per other request in progress: a provider whose latency grows with load.
    per_concurrent_us: AtomicU64,
    /// Requests in progress (admitted, not yet finished).
    in_progress: AtomicU64,
    chunk_interval_us: AtomicU64,
    chunks: AtomicU32,
    /// `every << 16 | status`, one word so the pair is always read consistently.
    failure: AtomicU64,
    /// Requests seen since the failure setting last changed.
    failure_counter: AtomicU64,
    fault: AtomicU64,
    /// The status `.../health` answers (when no fault applies).
    health_status: AtomicU32,
    /// Requests allowed per window, announced in rate-limit headers (off by default).
    quota: RequestQuota,
    /// Prompt tokens each answer reports read from the prompt cache (0: a miss, not reported).
    cached_tokens: AtomicU64,
}

impl fmt::Debug for Behaviour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Behaviour")
            .field("latency", &self.latency())
            .field("chunk_interval", &self.chunk_interval())
            .field("chunks", &self.chunks())
            .field("failure_every", &self.failure_every())
            .field("fault", &self.fault())
            .field("health_status", &self.health_status())
            .field("request_quota", &self.request_quota())
            .finish()
    }
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour::new()
    }
}

impl Behaviour {
    /// A well-behaved provider: no latency, no interval, [`DEFAULT_CHUNKS`] chunks, no failures.
    pub fn new() -> Behaviour {
        Behaviour {
            latency_us: AtomicU64::new(0),
            per_concurrent_us: AtomicU64::new(0),
            in_progress: AtomicU64::new(0),
            chunk_interval_us: AtomicU64::new(0),
            chunks: AtomicU32::new(DEFAULT_CHUNKS),
            failure: AtomicU64::new(0),
            failure_counter: AtomicU64::new(0),
            fault: AtomicU64::new(0),
            health_status: AtomicU32::new(200),
            quota: RequestQuota::default(),
            cached_tokens: AtomicU64::new(0),
        }
    }

    /// Makes every answer report `tokens` prompt tokens read from the prompt cache (OpenAI's
    /// `usage.prompt_tokens_details.cached_tokens`), as a provider does on a cache hit; 0
    /// answers as a miss.
    pub fn set_cached_tokens(&self, tokens: u64) {
        self.cached_tokens.store(tokens, Ordering::Relaxed);
    }

    /// The cached prompt tokens answers report (see [`Behaviour::set_cached_tokens`]).
    pub fn cached_tokens(&self) -> u64 {
        self.cached_tokens.load(Ordering::Relaxed)
    }

    /// Sets the delay before the response headers (and first chunk) are written.
    pub fn set_latency(&self, d: Duration) {
        self.latency_us.store(micros(d), Ordering::Relaxed);
    }

    /// The delay before the response headers.
    pub fn latency(&self) -> Duration {
        Duration::from_micros(self.latency_us.load(Ordering::Relaxed))
    }

    /// Makes the delay before the response headers grow by `d` for every other request the
    /// provider is working on when a request arrives (a model server whose latency grows with
    /// its load); zero turns it off.
    pub fn set_latency_per_concurrent(&self, d: Duration) {
        self.per_concurrent_us.store(micros(d), Ordering::Relaxed);
    }

    /// Counts a request in progress until the returned guard drops, and says how long it waits
    /// before its headers: the latency plus the per-concurrent delay for each other request.
    pub(crate) fn admit(&self) -> (Duration, InProgress<'_>) {
        let others = self.in_progress.fetch_add(1, Ordering::Relaxed);
        let per = self.per_concurrent_us.load(Ordering::Relaxed);
        let extra = Duration::from_micros(per.saturating_mul(others));
        (
            self.latency().saturating_add(extra),
            InProgress { behaviour: self },
        )
    }

    /// Sets the pause between consecutive SSE events of a streaming answer.
    pub fn set_chunk_interval(&self, d: Duration) {
        self.chunk_interval_us.store(micros(d), Ordering::Relaxed);
    }

    /// The pause between consecutive SSE events.
    pub fn chunk_interval(&self) -> Duration {
        Duration::from_micros(self.chunk_interval_us.load(Ordering::Relaxed))
    }

    /// Sets how many content chunks a streaming answer carries.
    pub fn set_chunks(&self, n: u32) {
        self.chunks.store(n, Ordering::Relaxed);
    }

    /// How many content chunks a streaming answer carries.
    pub fn chunks(&self) -> u32 {
        self.chunks.load(Ordering::Relaxed)
    }

    /// Makes every `n`-th request from now on (deterministic counter, restarted by this call)
    /// fail with `status` and an OpenAI error body; `n == 0` turns failures off.
    pub fn set_failure_every(&self, n: u32, status: u16) {
        let word = (u64::from(n) << 16) | u64::from(status);
        self.failure.store(word, Ordering::Relaxed);
        self.failure_counter.store(0, Ordering::Relaxed);
    }

    /// The current `(every, status)` failure setting.
    pub fn failure_every(&self) -> (u32, u16) {
        let word = self.failure.load(Ordering::Relaxed);
        let every = u32::try_from(word >> 16).unwrap_or(0);
        (every, (word & 0xffff) as u16)
    }

    /// Counts one request and says whether it must fail, and with which status.
    pub(crate) fn next_failure(&self) -> Option<u16> {
        let (every, status) = self.failure_every();
        if every == 0 {
            return None;
        }
        let seen = self.failure_counter.fetch_add(1, Ordering::Relaxed) + 1;
        (seen % u64::from(every) == 0).then_some(status)
    }

    /// Switches the provider to misbehave in this way (or back to [`Fault::None`]).
    pub fn set_fault(&self, fault: Fault) {
        self.fault.store(fault.encode(), Ordering::Relaxed);
    }

    /// The current fault.
    pub fn fault(&self) -> Fault {
        Fault::decode(self.fault.load(Ordering::Relaxed))
    }

    /// Sets the status the health endpoint (`.../health`) answers: 200 (the default) is
    /// healthy; anything else is a failing health check while the API itself keeps answering.
    /// A [`Fault`] takes the health endpoint down with the rest.
    pub fn set_health_status(&self, status: u16) {
        self.health_status
            .store(u32::from(status), Ordering::Relaxed);
    }

    /// The status the health endpoint answers.
    pub fn health_status(&self) -> u16 {
        u16::try_from(self.health_status.load(Ordering::Relaxed)).unwrap_or(500)
    }

    /// Gives the provider a quota of `limit` API requests per `window` (windows back to back,
    /// the first starting now), announced on every answer in `headers`' rate-limit headers
    /// (limit, remaining, time to reset); once a window's quota is used up, requests are
    /// answered `429` with `Retry-After` until it resets. A zero `limit` turns it off.
    pub fn set_request_quota(&self, limit: u64, window: Duration, headers: QuotaHeaders) {
        self.quota.set(limit, window, headers);
    }

    /// The request quota: limit, window and header family, if set.
    pub fn request_quota(&self) -> Option<(u64, Duration, QuotaHeaders)> {
        self.quota.get()
    }

    /// Counts one API request against the quota, appending its rate-limit headers to `out`.
    pub(crate) fn take_quota(&self, out: &mut Vec<u8>) -> Verdict {
        self.quota.take(Instant::now(), out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_well_behaved() {
        let b = Behaviour::new();
        assert_eq!(b.latency(), Duration::ZERO);
        assert_eq!(b.chunk_interval(), Duration::ZERO);
        assert_eq!(b.chunks(), DEFAULT_CHUNKS);
        assert_eq!(b.failure_every(), (0, 0));
        assert_eq!(b.fault(), Fault::None);
        assert_eq!(b.next_failure(), None);
        assert_eq!(b.health_status(), 200);
        b.set_health_status(503);
        assert_eq!(b.health_status(), 503);
    }

    #[test]
    fn every_fault_survives_the_atomic_round_trip() {
        let b = Behaviour::new();
        let faults = [
            Fault::None,
            Fault::RefuseConnections,
            Fault::NeverAnswer,
            Fault::CloseDuringHeaders,
            Fault::ResetMidStream,
            Fault::Garbage,
            Fault::SlowDrip(Duration::from_millis(250)),
            Fault::Status(503),
            Fault::Status(u16::MAX),
            Fault::HugeBody(1 << 30),
            Fault::EndlessStream,
            Fault::DropReused,
        ];
        for f in faults {
            b.set_fault(f);
            assert_eq!(b.fault(), f);
        }
    }

    #[test]
    fn failures_follow_a_deterministic_counter() {
        let b = Behaviour::new();
        b.set_failure_every(3, 503);
        let got: Vec<Option<u16>> = (0..7).map(|_| b.next_failure()).collect();
        assert_eq!(
            got,
            vec![None, None, Some(503), None, None, Some(503), None]
        );
        // Changing the setting restarts the count.
        b.set_failure_every(2, 429);
        assert_eq!(b.next_failure(), None);
        assert_eq!(b.next_failure(), Some(429));
        b.set_failure_every(0, 500);
        assert!((0..5).all(|_| b.next_failure().is_none()));
    }

    #[test]
    fn debug_shows_decoded_settings() {
        let b = Behaviour::new();
        b.set_fault(Fault::Status(418));
        b.set_failure_every(4, 503);
        let text = format!("{b:?}");
        assert!(text.contains("Status(418)"), "{text}");
        assert!(text.contains("(4, 503)"), "{text}");
    }

    #[test]
    fn durations_saturate_instead_of_wrapping() {
        let b = Behaviour::new();
        b.set_latency(Duration::MAX);
        assert!(b.latency() > Duration::from_secs(1_000_000));
        b.set_fault(Fault::SlowDrip(Duration::MAX));
        match b.fault() {
            Fault::SlowDrip(d) => assert!(d > Duration::from_secs(1_000_000)),
            other => panic!("unexpected fault {other:?}"),
        }
    }

    #[test]
    fn latency_grows_with_requests_in_progress() {
        let b = Behaviour::new();
        b.set_latency(Duration::from_millis(10));
        let (first, g1) = b.admit();
        assert_eq!(first, Duration::from_millis(10));
        b.set_latency_per_concurrent(Duration::from_millis(5));
        let (second, g2) = b.admit();
        assert_eq!(second, Duration::from_millis(15));
        let (third, _g3) = b.admit();
        assert_eq!(third, Duration::from_millis(20));
        drop((g1, g2));
        assert_eq!(b.admit().0, Duration::from_millis(15));
    }
}
