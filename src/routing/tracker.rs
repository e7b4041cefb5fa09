//! Per-candidate statistics that a pick reads without locking.
//!
//! A candidate is a (provider, model) pair; one [`CandidateStats`] is shared (via `Arc`) by every
//! alias that lists it. What a pick reads lives in atomics: f64 values are stored as bits in
//! `AtomicU64` and EWMA updates use a compare-exchange loop, so picking never blocks a worker.
//! The latency estimate ([`super::latency_mean`]) is updated under a per-candidate lock held for
//! a few arithmetic operations and published to its atomic.

use super::attempt::{ErrorKind, Mode, Outcome};
use super::congestion::{self, Congestion};
use super::latency_mean::{LatencyMean, LatencyParams};
use super::load::Load;
use super::params::RoutingParams;
use super::pressure::Pressure;
use super::quota::{QuotaKind, QuotaParams, QuotaView, Quotas};
use super::selector::{sane_k, Drawn};
use super::success_rate::{SuccessParams, SuccessRate};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

/// Bit pattern marking "no latency sample yet" (a NaN that arithmetic never produces here).
const EMPTY: u64 = u64::MAX;

/// Smoothing used when a caller passes an out-of-range `alpha` (matches the config default).
const FALLBACK_ALPHA: f64 = 0.4;

/// Health label shown on /status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Health {
    /// No latency sample in either mode yet.
    Cold,
    /// Error rate (1 - success) above `error_threshold`.
    Degraded,
    /// Has latency data and an acceptable error rate.
    Warm,
}

impl Health {
    /// Status string: "cold", "degraded" or "warm".
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Cold => "cold",
            Health::Degraded => "degraded",
            Health::Warm => "warm",
        }
    }
}

/// Point-in-time view of one candidate in one mode: what the selector scores (for
/// [`super::shares`] and the picks alike).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    /// Latency estimate in microseconds; `None` while cold in this mode.
    pub latency_us: Option<f64>,
    /// Success rate in `[0, 1]`; 0 on probation after a back-off
    /// ([`CandidateStats::on_probation`]).
    pub success: f64,
    /// Age (µs) of this mode's oldest request still waiting for its first chunk that no request
    /// sent after it has overtaken, if any (see [`CandidateStats::begin_wait`]).
    pub wait_age_us: Option<f64>,
    /// True while the candidate is backed off after a `Retry-After`.
    pub backed_off: bool,
    /// Congestion discount `d` (weight × `e^-d`, see [`super::congestion`]).
    pub discount: f64,
    /// Quota pacing factor in (0, 1] (weight × it, see [`super::quota`]).
    pub pacing: f64,
    /// This proxy's requests in flight at the candidate now.
    pub inflight: u64,
    /// Latency (µs) one more request of ours adds ([`super::load`]); 0 when our load does
    /// not move it.
    pub load_slope_us: f64,
    /// Mean count of our requests in flight when its answers were sent ([`super::load`]).
    pub load_mean_inflight: f64,
    /// Latency (µs) it answers at when nothing queues: the congestion discount's reference
    /// ([`super::congestion`]), `None` until measured. What it would answer at once recovered,
    /// which sizes its part of the probe floor.
    pub reference_us: Option<f64>,
}

impl Snapshot {
    /// Cold, fully successful, idle: the state of a brand-new candidate.
    pub const COLD: Snapshot = Snapshot {
        latency_us: None,
        success: 1.0,
        wait_age_us: None,
        backed_off: false,
        discount: 0.0,
        pacing: 1.0,
        inflight: 0,
        load_slope_us: 0.0,
        load_mean_inflight: 0.0,
        reference_us: None,
    };
}

/// The latency and success estimates as plain numbers, for handing over across a process
/// upgrade.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StatsSnapshot {
    /// Non-streaming latency estimate ([`CandidateStats::latency_us`]) in microseconds, which
    /// the new process takes as its misses' EWMA (`None` = cold).
    pub latency_non_streaming_us: Option<f64>,
    /// Streaming latency estimate in microseconds, handed over the same way (`None` = cold).
    pub latency_streaming_us: Option<f64>,
    /// Success rate in `[0, 1]`, handed over as one outcome.
    pub success: f64,
}

/// Lock-free per-candidate statistics shared by every alias that lists the candidate.
///
/// Laid out in order, from a cache line of its own: first what every pick reads and every
/// answer writes (the latency estimates, the requests in flight, the success estimate), so a
/// pick on one core misses one line of a candidate another core has just answered for, not
/// one per statistic.
#[repr(C, align(64))]
pub struct CandidateStats {
    /// Latency estimate (µs, f64 bits) of the answers not from a prompt cache, per [`Mode`]
    /// slot, as `latency_means` last published it; [`EMPTY`] until the first sample.
    latency: [AtomicU64; 2],
    /// Latency EWMA of the answers from the provider's prompt cache, per [`Mode`] slot; it
    /// counts in the estimate only while it is above `latency` (or `latency` is empty).
    hit_latency: [AtomicU64; 2],
    /// Requests currently in flight.
    inflight: AtomicU64,
    /// Success rate, 1.0 before any outcome (see [`super::success_rate`]).
    success: SuccessRate,
    /// False for the latency-only tracker (the simulator's baseline), which keeps no such discount.
    congestion_on: bool,
    /// Requests waiting for their first chunk, and the `Retry-After` deadline.
    pressure: Pressure,
    /// How much of the latency is queueing our traffic causes (see [`super::congestion`]).
    congestion: Congestion,
    /// What the provider announces about its quotas, and the pacing it asks for.
    quotas: Quotas,
    /// How latency responds to our own load, per [`Mode`] slot.
    load: [Load; 2],
    /// What `latency` is computed from, per [`Mode`] slot.
    latency_means: [Mutex<LatencyMean>; 2],
    /// Last error: kind index + 1 in the top 8 bits, unix ms in the low 56; 0 = never.
    last_error: AtomicU64,
    /// Attempts with any recorded outcome.
    requests: AtomicU64,
    /// Attempts recorded as [`Outcome::Failure`].
    failures: AtomicU64,
    /// Attempts recorded as [`Outcome::ClientError`].
    client_errors: AtomicU64,
}

/// Bits available for the timestamp in the packed last-error word.
const TIME_BITS: u32 = 56;
const TIME_MASK: u64 = (1u64 << TIME_BITS) - 1;

/// `alpha` clamped into (0, 1]; non-finite or non-positive values fall back to the default.
fn sane_alpha(alpha: f64) -> f64 {
    if alpha.is_finite() && alpha > 0.0 {
        alpha.min(1.0)
    } else {
        FALLBACK_ALPHA
    }
}

/// Atomically fold `sample` into the EWMA in `cell` (seeding it if empty).
fn ewma_update(cell: &AtomicU64, sample: f64, alpha: f64) {
    // fetch_update is a compare_exchange_weak loop; the closure never returns None.
    let _ = cell.fetch_update(Relaxed, Relaxed, |cur| {
        let next = if cur == EMPTY {
            sample
        } else {
            alpha * sample + (1.0 - alpha) * f64::from_bits(cur)
        };
        Some(next.to_bits())
    });
}

/// Decode a latency cell.
#[inline]
fn load_latency(cell: &AtomicU64) -> Option<f64> {
    match cell.load(Relaxed) {
        EMPTY => None,
        bits => Some(f64::from_bits(bits)),
    }
}

/// Encode an imported latency value; invalid numbers become "cold".
fn latency_bits(v: Option<f64>) -> u64 {
    match v {
        Some(x) if x.is_finite() && x >= 0.0 => x.to_bits(),
        _ => EMPTY,
    }
}

impl CandidateStats {
    /// Fresh stats: cold in both modes, success 1.0, nothing in flight.
    pub fn new() -> Self {
        Self {
            latency: [AtomicU64::new(EMPTY), AtomicU64::new(EMPTY)],
            latency_means: Default::default(),
            hit_latency: [AtomicU64::new(EMPTY), AtomicU64::new(EMPTY)],
            success: SuccessRate::default(),
            inflight: AtomicU64::new(0),
            last_error: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            client_errors: AtomicU64::new(0),
            pressure: Pressure::default(),
            congestion: Congestion::default(),
            quotas: Quotas::default(),
            congestion_on: true,
            load: Default::default(),
        }
    }

    /// Fresh stats that never build a congestion discount: the tracker of the simulator's
    /// latency-only baseline.
    pub fn without_congestion() -> Self {
        Self {
            congestion_on: false,
            ..Self::new()
        }
    }

    /// Fold in a latency sample (µs from sending upstream to the first body chunk) and
    /// publish the new estimate ([`super::latency_mean`]). Non-finite or negative samples are
    /// ignored. Whether the request went out in its candidate's lull reaches the congestion
    /// discount with the request's outcome ([`CandidateStats::record_answer`]).
    pub fn record_latency(
        &self,
        mode: Mode,
        micros: f64,
        at_us: Option<u64>,
        params: &LatencyParams,
    ) {
        if !micros.is_finite() || micros < 0.0 {
            return;
        }
        let slot = mode.slot();
        // Published under the lock, so concurrent answers publish in the order they folded in.
        let mut mean = self.latency_mean(slot);
        let estimate = mean.add(micros, at_us, params);
        self.latency[slot].store(estimate.to_bits(), Relaxed);
        drop(mean);
    }

    /// The latency estimate's state for `slot`, locked (a panic elsewhere while it was held
    /// leaves numbers, not a broken invariant, so a poisoned lock is taken as it is).
    fn latency_mean(&self, slot: usize) -> MutexGuard<'_, LatencyMean> {
        self.latency_means[slot]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Fold in the latency of an answer the provider gave from its prompt cache. Hits keep
    /// their own EWMA, which counts in the estimate only while it is above the other
    /// answers' ([`CandidateStats::latency_us`]): a hit's quick answer shows where a
    /// conversation's cache is, not how fast the candidate is for a request that brings none
    /// (what its share must reflect), while slow hits show a slowdown for as long as they
    /// stay slow and no longer once they are quick again. They never feed the congestion
    /// discount: the hits that would count are the ones that queued longest, and that
    /// selection would read as a queue the candidate does not have.
    pub fn record_cached_latency(&self, mode: Mode, micros: f64, alpha: f64) {
        if micros.is_finite() && micros >= 0.0 {
            ewma_update(&self.hit_latency[mode.slot()], micros, sane_alpha(alpha));
        }
    }

    /// Folds in the time to first chunk (µs) of an answer that ended as `outcome`: only a
    /// successful answer says how fast the candidate answers requests, so an error's time
    /// leaves the latency alone (a 503 in 30 ms is not a fast answer; its cost is in the
    /// success rate). `cached` answers came from the provider's prompt cache
    /// ([`CandidateStats::record_cached_latency`]).
    pub fn record_first_chunk(
        &self,
        mode: Mode,
        micros: f64,
        outcome: Outcome,
        cached: bool,
        at_us: Option<u64>,
        params: &RoutingParams,
    ) {
        match (outcome, cached) {
            (Outcome::Success, false) => {
                self.record_latency(mode, micros, at_us, &params.rule.latency)
            }
            (Outcome::Success, true) => self.record_cached_latency(mode, micros, params.ewma_alpha),
            (Outcome::Failure | Outcome::ClientError, _) => {}
        }
    }

    /// Count an attempt and move the success rate (only for `Success`/`Failure`), at `now_us`
    /// on the routing clock.
    pub fn record_outcome(&self, outcome: Outcome, now_us: u64, params: &RoutingParams) {
        self.requests.fetch_add(1, Relaxed);
        let success = match outcome {
            Outcome::Success => {
                self.pressure.succeeded();
                true
            }
            Outcome::Failure => {
                self.failures.fetch_add(1, Relaxed);
                false
            }
            Outcome::ClientError => {
                self.client_errors.fetch_add(1, Relaxed);
                return;
            }
        };
        self.success.observe(
            success,
            now_us,
            &params.rule.success,
            sane_alpha(params.ewma_alpha),
        );
    }

    /// Folds a successful, not prompt-cached answer into what is learned of queueing: the
    /// congestion discount ([`super::congestion`]) and the load response ([`super::load`]).
    /// The answer comes from the request's own [`WaitGuard`], so its latency, its send-time
    /// load and its outcome always belong to the same request, however many run at once.
    /// `in_lull` when it was sent in the candidate's lull; `at_us` is now on the routing clock.
    pub fn record_answer(
        &self,
        answer: &Answer,
        in_lull: bool,
        params: &RoutingParams,
        at_us: u64,
    ) {
        let i = answer.mode.slot();
        if self.congestion_on {
            // The level is the misses' latency estimate, which this answer's first chunk fed.
            let level = load_latency(&self.latency[i]).unwrap_or(answer.latency_us);
            let sample = congestion::Sample {
                latency_us: answer.latency_us,
                level_us: level,
                sent_us: answer.sent_us,
                oldest_waiting_us: self.pressure.oldest_waiting(answer.mode),
                in_lull,
                probe: answer.drawn.probe,
                slowest_us: answer.drawn.slowest_us,
                exploit_k: sane_k(params.exploit_k),
            };
            self.congestion
                .answer(answer.mode, &sample, Some(at_us), &params.rule.congestion);
        }
        self.load[i].answer(
            answer.inflight_at_send,
            answer.latency_us,
            at_us,
            &params.rule.load,
        );
    }

    /// Remember why and when (unix ms) the latest failure happened.
    pub fn record_error(&self, kind: ErrorKind, now_ms: u64) {
        let packed = ((kind.index() as u64 + 1) << TIME_BITS) | (now_ms & TIME_MASK);
        self.last_error.store(packed, Relaxed);
    }

    /// Convenience for a failed attempt: `record_outcome(Failure)` at `now_us` (routing
    /// clock) plus `record_error` at `unix_ms`.
    pub fn record_failure(
        &self,
        kind: ErrorKind,
        unix_ms: u64,
        now_us: u64,
        params: &RoutingParams,
    ) {
        self.record_outcome(Outcome::Failure, now_us, params);
        self.record_error(kind, unix_ms);
    }

    /// Latest error kind and its unix time in ms, if any failure was recorded.
    pub fn last_error(&self) -> Option<(ErrorKind, u64)> {
        let packed = self.last_error.load(Relaxed);
        let tag = (packed >> TIME_BITS) as usize;
        let kind = ErrorKind::from_index(tag.checked_sub(1)?)?;
        Some((kind, packed & TIME_MASK))
    }

    /// Everything the selector needs for one mode, without the time-dependent signals.
    #[inline(always)]
    pub fn snapshot(&self, mode: Mode) -> Snapshot {
        Snapshot {
            latency_us: self.latency_us(mode),
            success: if self.on_probation() {
                0.0
            } else {
                self.success()
            },
            wait_age_us: None,
            backed_off: false,
            discount: self.congestion_discount(mode),
            pacing: 1.0,
            inflight: self.inflight(),
            load_slope_us: self.load[mode.slot()].slope_us(),
            load_mean_inflight: self.load[mode.slot()].mean_inflight(),
            reference_us: if self.congestion_on {
                self.congestion.reference(mode)
            } else {
                None
            },
        }
    }

    /// Everything the selector needs for one mode at time `now_us` (waiting age, back-off,
    /// the success rate's fade by `success`).
    #[inline(always)]
    pub fn snapshot_at(&self, mode: Mode, now_us: u64, success: &SuccessParams) -> Snapshot {
        Snapshot {
            wait_age_us: self.wait_age_us(mode, now_us),
            backed_off: self.backed_off(now_us),
            pacing: self.pacing(now_us),
            success: if self.on_probation() {
                0.0
            } else {
                self.success_at(now_us, success)
            },
            ..self.snapshot(mode)
        }
    }

    /// Marks a request of `mode` sent upstream at `sent_us` as waiting for its first response
    /// chunk, until the returned guard drops: drop it when the first chunk arrives or the
    /// attempt ends without one. Its age then counts towards the candidate's latency (see
    /// [`super::pressure`]). The proxy should call this with [`super::pressure::now_us`] when
    /// it sends the request, the clock [`super::choose`] reads.
    ///
    /// Call it once the request counts as in flight ([`CandidateStats::begin_owned`]): the
    /// guard remembers how many *other* requests of ours were in flight then, and how the
    /// pick's draw placed it ([`Drawn`]).
    pub fn begin_wait(self: &Arc<Self>, mode: Mode, sent_us: u64, drawn: Drawn) -> WaitGuard {
        self.pressure.start(mode, sent_us);
        WaitGuard {
            stats: Arc::clone(self),
            mode,
            sent_us,
            inflight_at_send: self.inflight().saturating_sub(1),
            drawn,
            answered: false,
        }
    }

    /// Age (µs) at `now_us` of the oldest request of `mode` waiting for its first chunk that no
    /// request sent after it has overtaken ([`super::pressure`]).
    pub fn wait_age_us(&self, mode: Mode, now_us: u64) -> Option<f64> {
        self.pressure.open_age_us(mode, now_us)
    }

    /// Honours an upstream `Retry-After`: no traffic to this candidate before `deadline_us`
    /// (the proxy should call this on a 429 or 503 carrying `Retry-After`, with the deadline
    /// on the [`super::pressure::now_us`] clock), and probation until its next successful
    /// answer ([`CandidateStats::on_probation`]). A shorter deadline never cuts a longer one.
    pub fn back_off_until(&self, deadline_us: u64) {
        self.pressure.back_off_until(deadline_us);
    }

    /// True from a `Retry-After` back-off until the next successful answer: once the deadline
    /// has passed, picks count the candidate's success as none, which leaves it the probe
    /// floor (see [`super::pressure`]).
    #[inline]
    pub fn on_probation(&self) -> bool {
        self.pressure.on_probation()
    }

    /// The back-off deadline (µs) for /status: `None` if never set or found expired.
    pub fn back_off_deadline_us(&self) -> Option<u64> {
        self.pressure.deadline_us()
    }

    /// True while a `Retry-After` back-off is in force at `now_us`.
    #[inline]
    pub fn backed_off(&self, now_us: u64) -> bool {
        self.pressure.backed_off(now_us)
    }

    /// True when scoring this candidate needs the current time (requests waiting with a send
    /// time, a back-off deadline set, a quota, or failures that fade), so the selector reads
    /// the clock only when it matters.
    #[inline(always)]
    pub fn needs_time(&self) -> bool {
        self.pressure.active() || self.quotas.active() || self.success() < 1.0
    }

    /// A response read at `now_us` (routing clock) announced `remaining` of the `kind` quota,
    /// with the window's `limit` and its reset `reset_in_us` from now, each when announced
    /// (see [`super::quota`]). A quota announced as exhausted backs the candidate off until its
    /// reset, as a `429` would.
    pub fn observe_quota(
        &self,
        kind: QuotaKind,
        remaining: u64,
        limit: Option<u64>,
        reset_in_us: Option<u64>,
        now_us: u64,
        p: &QuotaParams,
    ) {
        self.quotas
            .observe(kind, remaining, limit, reset_in_us, now_us, p);
        if let Some(reset) = self.quotas.exhausted_until(now_us) {
            self.back_off_until(reset);
        }
    }

    /// The pacing factor at `now_us`: the selector multiplies the weight by it (1 unless a
    /// quota would run out before its reset).
    #[inline]
    pub fn pacing(&self, now_us: u64) -> f64 {
        self.quotas.factor(now_us)
    }

    /// The last reading of the `kind` quota, for /status and metrics.
    pub fn quota(&self, kind: QuotaKind) -> Option<QuotaView> {
        self.quotas.view(kind)
    }

    /// Congestion discount `d` of `mode`: the selector scales the weight by `e^-d` (see
    /// [`super::congestion`]).
    #[inline]
    pub fn congestion_discount(&self, mode: Mode) -> f64 {
        self.congestion.discount(mode)
    }

    /// Whether the fleet's lulls ([`super::lull`]) lighten this candidate: false for the
    /// latency-only baseline's tracker, which keeps no congestion discount to measure with them.
    pub fn takes_lulls(&self) -> bool {
        self.congestion_on
    }

    /// Latency estimate ([`CandidateStats::latency_us`]) in milliseconds for /status; `None`
    /// while cold in `mode`.
    pub fn latency_ms(&self, mode: Mode) -> Option<f64> {
        self.latency_us(mode).map(|us| us / 1000.0)
    }

    /// Latency estimate in microseconds: the EWMA of the answers not from a prompt cache, or
    /// the cache hits' EWMA while that is higher (a slowdown only hits show) or alone (no
    /// other answer yet); `None` while cold in `mode`.
    #[inline]
    pub fn latency_us(&self, mode: Mode) -> Option<f64> {
        let slot = mode.slot();
        match (
            load_latency(&self.latency[slot]),
            load_latency(&self.hit_latency[slot]),
        ) {
            (Some(misses), Some(hits)) => Some(misses.max(hits)),
            (misses, hits) => misses.or(hits),
        }
    }

    /// Success rate in `[0, 1]` ([`super::success_rate`]).
    #[inline]
    pub fn success(&self) -> f64 {
        self.success.get()
    }

    /// Success rate as a pick at `now_us` (routing clock) reads it: failures fade while the
    /// candidate is not heard from ([`super::success_rate`]).
    #[inline]
    pub fn success_at(&self, now_us: u64, p: &SuccessParams) -> f64 {
        self.success.at(now_us, p)
    }

    /// Error rate `1 - success` as a pick at `now_us` reads it, the quantity compared with
    /// `error_threshold`.
    pub fn error_rate_at(&self, now_us: u64, p: &SuccessParams) -> f64 {
        1.0 - self.success_at(now_us, p)
    }

    /// Requests currently in flight.
    pub fn inflight(&self) -> u64 {
        self.inflight.load(Relaxed)
    }

    /// Total attempts with a recorded outcome.
    pub fn requests(&self) -> u64 {
        self.requests.load(Relaxed)
    }

    /// Total attempts recorded as failures.
    pub fn failures(&self) -> u64 {
        self.failures.load(Relaxed)
    }

    /// Total attempts recorded as client errors (other 4xx).
    pub fn client_errors(&self) -> u64 {
        self.client_errors.load(Relaxed)
    }

    /// /status label. A failing candidate reads "degraded" even if it never produced a latency
    /// sample (e.g. every connect fails); otherwise no latency in either mode reads "cold".
    pub fn health(&self, params: &RoutingParams, now_us: u64) -> Health {
        if self.error_rate_at(now_us, &params.rule.success) > params.error_threshold {
            Health::Degraded
        } else if self.latency.iter().all(|c| c.load(Relaxed) == EMPTY) {
            Health::Cold
        } else {
            Health::Warm
        }
    }

    /// Mark a request in flight until the returned guard drops (borrowing form).
    pub fn begin(&self) -> InflightGuard<'_> {
        self.inflight.fetch_add(1, Relaxed);
        InflightGuard { stats: self }
    }

    /// Mark a request in flight until the returned guard drops (owning form, for `'static`
    /// per-request contexts).
    pub fn begin_owned(self: &Arc<Self>) -> OwnedInflightGuard {
        self.inflight.fetch_add(1, Relaxed);
        OwnedInflightGuard {
            stats: Arc::clone(self),
        }
    }

    /// The latency and success estimates as plain numbers (for a process-upgrade handover).
    pub fn export(&self) -> StatsSnapshot {
        StatsSnapshot {
            latency_non_streaming_us: self.latency_us(Mode::NonStreaming),
            latency_streaming_us: self.latency_us(Mode::Streaming),
            success: self.success(),
        }
    }

    /// Overwrite the latency and success estimates from an export. Invalid values are
    /// sanitised: bad latencies become cold, success is clamped to `[0, 1]` (NaN becomes 1.0).
    /// Counters are untouched. A handed-over latency counts as one answer of a fresh estimate,
    /// a handed-over success rate as one outcome.
    pub fn import(&self, s: &StatsSnapshot) {
        for (mode, latency) in [
            (Mode::NonStreaming, s.latency_non_streaming_us),
            (Mode::Streaming, s.latency_streaming_us),
        ] {
            let bits = latency_bits(latency);
            *self.latency_mean(mode.slot()) = match bits {
                EMPTY => LatencyMean::default(),
                bits => LatencyMean::seeded(f64::from_bits(bits)),
            };
            self.latency[mode.slot()].store(bits, Relaxed);
        }
        let success = if s.success.is_nan() {
            1.0
        } else {
            s.success.clamp(0.0, 1.0)
        };
        self.success.seed(success, 1.0);
    }
}

impl Default for CandidateStats {
    fn default() -> Self {
        Self::new()
    }
}

impl AsRef<CandidateStats> for CandidateStats {
    fn as_ref(&self) -> &CandidateStats {
        self
    }
}

impl fmt::Debug for CandidateStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CandidateStats")
            .field(
                "latency_non_streaming_us",
                &self.latency_us(Mode::NonStreaming),
            )
            .field("latency_streaming_us", &self.latency_us(Mode::Streaming))
            .field("success", &self.success())
            .field("inflight", &self.inflight())
            .field("requests", &self.requests())
            .field("failures", &self.failures())
            .field("last_error", &self.last_error())
            .field("back_off_until_us", &self.back_off_deadline_us())
            .finish()
    }
}

/// Keeps a request counted as in flight; decrements on drop.
#[must_use = "the request stops counting as in flight as soon as the guard drops"]
#[derive(Debug)]
pub struct InflightGuard<'a> {
    stats: &'a CandidateStats,
}

impl Drop for InflightGuard<'_> {
    fn drop(&mut self) {
        self.stats.inflight.fetch_sub(1, Relaxed);
    }
}

/// A request waiting for its first response chunk (see [`CandidateStats::begin_wait`]).
#[must_use = "the request stops counting as waiting as soon as the guard drops"]
#[derive(Debug)]
pub struct WaitGuard {
    stats: Arc<CandidateStats>,
    mode: Mode,
    sent_us: u64,
    inflight_at_send: u64,
    /// How the pick's draw placed it.
    drawn: Drawn,
    /// Set by [`WaitGuard::first_chunk`]: the request stops waiting with an answer.
    answered: bool,
}

impl WaitGuard {
    /// When the request was sent.
    pub fn sent_us(&self) -> u64 {
        self.sent_us
    }

    /// The first chunk came `latency_us` after sending: the request stops waiting, and what
    /// it measured is kept for its outcome ([`CandidateStats::record_answer`]).
    pub fn first_chunk(mut self, latency_us: f64) -> Answer {
        self.answered = true;
        Answer {
            mode: self.mode,
            sent_us: self.sent_us,
            latency_us,
            inflight_at_send: self.inflight_at_send,
            drawn: self.drawn,
        }
    }
}

/// What one request measured at its first chunk, held until its outcome is known: the
/// measurement handle that keeps concurrent requests' samples apart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Answer {
    /// The request's mode.
    pub mode: Mode,
    /// When it was sent (routing clock, µs).
    pub sent_us: u64,
    /// Time to its first chunk, µs.
    pub latency_us: f64,
    /// Other requests of ours in flight at the candidate when it was sent.
    pub inflight_at_send: u64,
    /// How the pick's draw placed it ([`Drawn`]).
    pub drawn: Drawn,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        self.stats
            .pressure
            .end(self.mode, self.sent_us, self.answered);
    }
}

/// `'static` variant of [`InflightGuard`] holding an `Arc` to the stats.
#[must_use = "the request stops counting as in flight as soon as the guard drops"]
#[derive(Debug)]
pub struct OwnedInflightGuard {
    stats: Arc<CandidateStats>,
}

impl OwnedInflightGuard {
    /// The stats this guard counts against (to record the outcome through the same handle).
    pub fn stats(&self) -> &Arc<CandidateStats> {
        &self.stats
    }
}

impl Drop for OwnedInflightGuard {
    fn drop(&mut self) {
        self.stats.inflight.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_every_pick_reads_and_every_answer_writes_is_on_the_first_cache_line() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<CandidateStats>(), 64);
        for end in [
            offset_of!(CandidateStats, latency) + size_of::<[AtomicU64; 2]>(),
            offset_of!(CandidateStats, hit_latency) + size_of::<[AtomicU64; 2]>(),
            offset_of!(CandidateStats, inflight) + size_of::<AtomicU64>(),
            // The success estimate is the first field of its struct.
            offset_of!(CandidateStats, success) + size_of::<AtomicU64>(),
        ] {
            assert!(end <= 64, "ends at byte {end}");
        }
    }

    const LP: LatencyParams = LatencyParams::DEFAULT;

    /// The defaults with the success rate as an EWMA at `alpha`, for tests of the tracker's
    /// bookkeeping rather than of the estimate ([`super::super::success_rate`] tests that).
    fn ewma(alpha: f64) -> RoutingParams {
        let mut p = RoutingParams {
            ewma_alpha: alpha,
            ..RoutingParams::default()
        };
        p.rule.success.change_every_s = 0.0;
        p
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn first_latency_sample_seeds_then_averages() {
        let s = CandidateStats::new();
        assert_eq!(s.latency_us(Mode::NonStreaming), None);
        s.record_latency(Mode::NonStreaming, 1000.5, None, &LP);
        assert_eq!(s.latency_us(Mode::NonStreaming), Some(1000.5));
        s.record_latency(Mode::NonStreaming, 2000.0, None, &LP);
        let v = s.latency_us(Mode::NonStreaming).unwrap_or(f64::NAN);
        assert!(close(v, 1500.25), "{v}");
        assert!(close(
            s.latency_ms(Mode::NonStreaming).unwrap_or(0.0),
            1.50025
        ));
    }

    #[test]
    fn only_a_successful_answer_moves_the_latency() {
        let (s, params) = (CandidateStats::new(), RoutingParams::default());
        let mode = Mode::NonStreaming;
        // A candidate answering 503 in 30 ms, then 400 in 5 ms, has learned no latency.
        s.record_first_chunk(mode, 30_000.0, Outcome::Failure, false, None, &params);
        s.record_first_chunk(mode, 5_000.0, Outcome::ClientError, false, None, &params);
        assert_eq!(s.latency_us(mode), None);
        s.record_first_chunk(mode, 400_000.0, Outcome::Success, false, None, &params);
        s.record_first_chunk(mode, 30_000.0, Outcome::Failure, false, None, &params);
        assert_eq!(s.latency_us(mode), Some(400_000.0));
        // A successful answer from the prompt cache goes to the cache-hit estimate.
        s.record_first_chunk(mode, 900_000.0, Outcome::Success, true, None, &params);
        assert_eq!(s.latency_us(mode), Some(900_000.0));
    }

    #[test]
    fn cache_hits_raise_the_estimate_only_while_they_are_slow() {
        let s = CandidateStats::new();
        let mode = Mode::NonStreaming;
        // (a cache hit?, sample, the estimate after it, why)
        let steps = [
            (true, 300.0, 300.0, "a cold candidate takes a hit's latency"),
            (
                false,
                1000.0,
                1000.0,
                "the first miss sets the misses' estimate",
            ),
            (true, 200.0, 1000.0, "a quick hit says nothing of speed"),
            (true, 2550.0, 1400.0, "slow hits show a slowdown"),
            (true, 3000.0, 2200.0, "... for as long as they are slow"),
            (false, 600.0, 2200.0, "a quick miss does not hide slow hits"),
            (
                true,
                200.0,
                1200.0,
                "hits quick again hand back to the misses",
            ),
            (
                true,
                200.0,
                800.0,
                "... whose estimate the slow hits never moved",
            ),
        ];
        for (cached, sample, estimate, why) in steps {
            if cached {
                s.record_cached_latency(mode, sample, 0.5);
            } else {
                s.record_latency(mode, sample, None, &LP);
            }
            assert_eq!(s.latency_us(mode), Some(estimate), "{why}");
        }
        assert_eq!(s.snapshot(mode).latency_us, Some(800.0));
        assert_eq!(s.export().latency_non_streaming_us, Some(800.0));
        assert_eq!(s.latency_us(Mode::Streaming), None, "modes stay apart");
    }

    #[test]
    fn a_cached_answer_never_feeds_the_congestion_discount() {
        let mode = Mode::NonStreaming;
        let (misses_only, with_slow_hits) = (CandidateStats::new(), CandidateStats::new());
        // Misses a little above their idle latency, and, on one of the two, hits that queued
        // past the miss estimate: only the misses may say how long the queue is.
        for i in 0..400 {
            let miss = 300_000.0 + f64::from(i % 7) * 10_000.0;
            misses_only.record_latency(mode, miss, None, &LP);
            with_slow_hits.record_latency(mode, miss, None, &LP);
            with_slow_hits.record_cached_latency(mode, 900_000.0, 0.4);
            misses_only.record_outcome(Outcome::Success, 0, &RoutingParams::default());
            with_slow_hits.record_outcome(Outcome::Success, 0, &RoutingParams::default());
            with_slow_hits.record_outcome(Outcome::Success, 0, &RoutingParams::default());
        }
        assert!(
            with_slow_hits.latency_us(mode) > misses_only.latency_us(mode),
            "the slow hits still raise the estimate"
        );
        assert_eq!(
            with_slow_hits.congestion_discount(mode),
            misses_only.congestion_discount(mode)
        );
    }

    #[test]
    fn modes_are_independent() {
        let s = CandidateStats::new();
        s.record_latency(Mode::Streaming, 500.0, None, &LP);
        assert_eq!(s.latency_us(Mode::Streaming), Some(500.0));
        assert_eq!(s.latency_us(Mode::NonStreaming), None);
        assert_eq!(s.snapshot(Mode::NonStreaming).latency_us, None);
        assert_eq!(s.snapshot(Mode::Streaming).latency_us, Some(500.0));
    }

    #[test]
    fn a_step_replaces_the_published_estimate() {
        let s = CandidateStats::new();
        for i in 0..40 {
            s.record_latency(
                Mode::NonStreaming,
                100_000.0 + f64::from(i % 5) * 5_000.0,
                None,
                &LP,
            );
        }
        assert!(close(
            s.latency_us(Mode::NonStreaming).unwrap_or(0.0),
            110_000.0
        ));
        for _ in 0..2 {
            s.record_latency(Mode::NonStreaming, 300_000.0, None, &LP);
        }
        assert_eq!(s.latency_us(Mode::NonStreaming), Some(300_000.0));
    }

    /// The `i`-th answer of a step, sent as `drawn` placed it and recorded: 50 at 200 ms, then
    /// ten times slower, one second apart.
    fn step_answer(
        stats: &Arc<CandidateStats>,
        drawn: Drawn,
        i: u64,
        params: &RoutingParams,
    ) -> Answer {
        let latency = if i < 50 { 200_000.0 } else { 2_000_000.0 };
        let at = (i + 1) * 1_000_000;
        let answer = stats
            .begin_wait(Mode::NonStreaming, at, drawn)
            .first_chunk(latency);
        stats.record_answer(&answer, false, params, at + latency as u64);
        answer
    }

    #[test]
    fn a_probe_carries_its_mark_from_send_to_answer_and_builds_no_discount() {
        let params = RoutingParams::default();
        let mode = Mode::NonStreaming;
        let (probed, picked) = (
            Arc::new(CandidateStats::new()),
            Arc::new(CandidateStats::new()),
        );
        // The same 100 answers of a step: sent as probes to one candidate, as the score's
        // picks to the other.
        for i in 0..100u64 {
            for (stats, probe) in [(&probed, true), (&picked, false)] {
                let drawn = Drawn {
                    probe,
                    slowest_us: None,
                };
                assert_eq!(step_answer(stats, drawn, i, &params).drawn, drawn);
            }
        }
        assert_eq!(probed.congestion_discount(mode), 0.0);
        assert!(picked.congestion_discount(mode) > 3.0);
    }

    #[test]
    fn the_slowest_serving_latency_carries_from_the_draw_and_bounds_the_discount() {
        let params = RoutingParams::default();
        let mode = Mode::NonStreaming;
        let (bounded, free) = (
            Arc::new(CandidateStats::new()),
            Arc::new(CandidateStats::new()),
        );
        // 150 answers of a step; beside one candidate the slowest serving one answers in 2.4 s
        // all along.
        for i in 0..150u64 {
            for (stats, slowest_us) in [(&bounded, Some(2_400_000.0)), (&free, None)] {
                let drawn = Drawn {
                    probe: false,
                    slowest_us,
                };
                step_answer(stats, drawn, i, &params);
            }
        }
        // The ceiling at the slow level: 2 × 6 × ln(2.4 ÷ 2) ≈ 2.19.
        let ceiling = params.rule.congestion.ceiling * params.exploit_k * 1.2f64.ln();
        let d = bounded.congestion_discount(mode);
        assert!(
            d <= ceiling + 1e-9 && d > ceiling - 0.3,
            "{d} against {ceiling}"
        );
        assert!(free.congestion_discount(mode) > 3.0);
    }

    #[test]
    fn invalid_latency_samples_ignored() {
        let s = CandidateStats::new();
        s.record_latency(Mode::NonStreaming, f64::NAN, None, &LP);
        s.record_latency(Mode::NonStreaming, f64::INFINITY, None, &LP);
        s.record_latency(Mode::NonStreaming, -5.0, None, &LP);
        assert_eq!(s.latency_us(Mode::NonStreaming), None);
    }

    #[test]
    fn success_moves_only_on_success_and_failure() {
        let s = CandidateStats::new();
        assert_eq!(s.success(), 1.0);
        s.record_outcome(Outcome::Failure, 0, &ewma(0.3));
        assert!(close(s.success(), 0.7));
        s.record_outcome(Outcome::ClientError, 0, &ewma(0.3));
        assert!(close(s.success(), 0.7));
        s.record_outcome(Outcome::Success, 0, &ewma(0.3));
        assert!(close(s.success(), 0.79));
        // An EWMA does not fade: the rate at any later time is the same.
        assert!(close(
            s.error_rate_at(3_600_000_000, &ewma(0.3).rule.success),
            0.21
        ));
        assert_eq!(s.requests(), 3);
        assert_eq!(s.failures(), 1);
        assert_eq!(s.client_errors(), 1);
    }

    #[test]
    fn a_pick_reads_failures_faded_by_the_time_since_the_last_outcome() {
        let s = CandidateStats::new();
        s.record_latency(Mode::NonStreaming, 1_000.0, None, &LP);
        assert!(!s.needs_time(), "nothing to fade");
        let p = RoutingParams::default();
        for i in 0..20 {
            s.record_outcome(Outcome::Failure, i * 1_000_000, &p);
        }
        assert!(s.needs_time(), "failures fade in time");
        let last = 19_000_000;
        let at = |now| {
            s.snapshot_at(Mode::NonStreaming, now, &p.rule.success)
                .success
        };
        assert!(at(last) < 0.01, "{}", at(last));
        // One `change_every_s` (60 s) later a change is 63 % likely, and a new run counts as
        // fully successful until its first outcome.
        let faded = 1.0 - (1.0 - s.success()) * (-1.0f64).exp();
        assert!(
            close(at(last + 60_000_000), faded),
            "{}",
            at(last + 60_000_000)
        );
        assert!(at(last + 300_000_000) > 0.99);
        // The estimate itself is untouched until the next outcome.
        assert!(s.success() < 0.01);
        s.back_off_until(last + 1);
        assert_eq!(
            at(last + 300_000_000),
            0.0,
            "probation still counts as none"
        );
    }

    #[test]
    fn last_error_round_trip() {
        let s = CandidateStats::new();
        assert_eq!(s.last_error(), None);
        s.record_error(ErrorKind::Tls, 1_700_000_000_123);
        assert_eq!(s.last_error(), Some((ErrorKind::Tls, 1_700_000_000_123)));
        s.record_failure(ErrorKind::Status, 5, 0, &ewma(0.5));
        assert_eq!(s.last_error(), Some((ErrorKind::Status, 5)));
        assert_eq!(s.failures(), 1);
        assert!(close(s.success(), 0.5));
        for k in ErrorKind::ALL {
            s.record_error(k, 9);
            assert_eq!(s.last_error(), Some((k, 9)));
        }
    }

    #[test]
    fn health_states() {
        let threshold = |error_threshold| RoutingParams {
            error_threshold,
            ..RoutingParams::default()
        };
        let s = CandidateStats::new();
        assert_eq!(s.health(&threshold(0.5), 0), Health::Cold);
        s.record_latency(Mode::Streaming, 10.0, None, &LP);
        assert_eq!(s.health(&threshold(0.5), 0), Health::Warm);
        s.record_outcome(Outcome::Failure, 0, &ewma(0.6)); // success 0.4, error 0.6
        assert_eq!(s.health(&threshold(0.5), 0), Health::Degraded);
        assert_eq!(s.health(&threshold(0.7), 0), Health::Warm);
        let never_connected = CandidateStats::new();
        never_connected.record_failure(ErrorKind::Connect, 1, 0, &RoutingParams::default());
        assert_eq!(never_connected.health(&threshold(0.5), 0), Health::Degraded);
        // Not heard from for two minutes, its failures have faded: a pick may try it again.
        assert_eq!(
            never_connected.health(&threshold(0.5), 120_000_000),
            Health::Cold
        );
        assert_eq!(Health::Cold.as_str(), "cold");
        assert_eq!(Health::Degraded.as_str(), "degraded");
        assert_eq!(Health::Warm.as_str(), "warm");
    }

    #[test]
    fn inflight_guards_count_and_release() {
        let s = Arc::new(CandidateStats::new());
        {
            let _a = s.begin();
            let _b = s.begin();
            assert_eq!(s.inflight(), 2);
            let c = s.begin_owned();
            assert_eq!(s.inflight(), 3);
            assert_eq!(c.stats().inflight(), 3);
        }
        assert_eq!(s.inflight(), 0);
    }

    #[test]
    fn export_import_round_trip_and_sanitise() {
        let a = CandidateStats::new();
        a.record_latency(Mode::NonStreaming, 1234.5, None, &LP);
        a.record_outcome(Outcome::Failure, 0, &ewma(0.25));
        let snap = a.export();
        assert_eq!(snap.latency_non_streaming_us, Some(1234.5));
        assert_eq!(snap.latency_streaming_us, None);
        assert!(close(snap.success, 0.75));
        let b = CandidateStats::new();
        b.record_latency(Mode::Streaming, 9.0, None, &LP);
        b.import(&snap);
        assert_eq!(b.export(), snap);

        b.import(&StatsSnapshot {
            latency_non_streaming_us: Some(f64::NAN),
            latency_streaming_us: Some(-1.0),
            success: 3.0,
        });
        assert_eq!(b.latency_us(Mode::NonStreaming), None);
        assert_eq!(b.latency_us(Mode::Streaming), None);
        assert_eq!(b.success(), 1.0);
        b.import(&StatsSnapshot {
            latency_non_streaming_us: None,
            latency_streaming_us: None,
            success: f64::NAN,
        });
        assert_eq!(b.success(), 1.0);
    }

    #[test]
    fn concurrent_cas_updates_stay_finite_and_in_range() {
        let s = Arc::new(CandidateStats::new());
        let handles: Vec<_> = (0..2u64)
            .map(|t| {
                let s = Arc::clone(&s);
                std::thread::spawn(move || {
                    for i in 0..100_000u64 {
                        let _g = s.begin();
                        let lat = 100.0 + ((i * 7 + t * 13) % 900) as f64;
                        s.record_latency(Mode::NonStreaming, lat, None, &LP);
                        let o = if (i + t) % 3 == 0 {
                            Outcome::Failure
                        } else {
                            Outcome::Success
                        };
                        s.record_outcome(o, i, &RoutingParams::default());
                    }
                })
            })
            .collect();
        for h in handles {
            assert!(h.join().is_ok());
        }
        let lat = s.latency_us(Mode::NonStreaming).unwrap_or(f64::NAN);
        assert!(lat.is_finite() && (100.0..=999.0).contains(&lat), "{lat}");
        let succ = s.success();
        assert!(succ.is_finite() && (0.0..=1.0).contains(&succ), "{succ}");
        assert_eq!(s.requests(), 200_000);
        assert_eq!(s.inflight(), 0);
    }

    #[test]
    fn wait_guards_track_age_per_mode() {
        let s = Arc::new(CandidateStats::new());
        assert!(!s.needs_time());
        let _inflight = s.begin_owned();
        assert!(!s.needs_time());
        {
            let a = s.begin_wait(Mode::NonStreaming, 100, Drawn::default());
            let b = s.begin_wait(Mode::NonStreaming, 300, Drawn::default());
            assert_eq!(a.sent_us(), 100);
            assert!(s.needs_time());
            assert_eq!(s.wait_age_us(Mode::NonStreaming, 500), Some(400.0));
            assert_eq!(s.wait_age_us(Mode::Streaming, 500), None);
            let snap = s.snapshot_at(Mode::NonStreaming, 500, &SuccessParams::DEFAULT);
            assert_eq!(snap.wait_age_us, Some(400.0));
            assert_eq!(s.snapshot(Mode::NonStreaming).wait_age_us, None);
            // The younger one's first chunk overtakes the older one, which no longer counts.
            let _ = b.first_chunk(200.0);
            assert_eq!(s.wait_age_us(Mode::NonStreaming, 500), None);
            assert!(s.needs_time(), "the overtaken one still waits");
            drop(a);
        }
        assert_eq!(s.wait_age_us(Mode::NonStreaming, 500), None);
        assert!(!s.needs_time());
        assert_eq!(s.inflight(), 1);
    }

    /// Over a steady stream (a request every 10 ms, log-normal latencies around 100 ms with
    /// `sigma`): the share of steady picks at which the open age charges more than the EWMA;
    /// then, once every request takes ten times longer, the mean charged latency and the mean
    /// EWMA over the next half second, each over its steady mean.
    fn the_open_age_over_a_stream(sigma: f64) -> (f64, f64, f64) {
        use crate::routing::rng::{RngSource, SplitMix64};
        let s = Arc::new(CandidateStats::new());
        let params = RoutingParams::default();
        let mut rng = SplitMix64::new(7);
        let mut waiting: Vec<(u64, WaitGuard)> = Vec::new();
        let (mut above, mut picks) = (0u32, 0u32);
        let (mut steady, mut stalled) = (Vec::new(), Vec::new());
        let step_at = 30_000u64;
        for i in 1..=step_at + 50 {
            let now = i * 10_000;
            // Answers due by now come in (their first chunk), then the next request goes out.
            waiting.sort_by_key(|(due, _)| std::cmp::Reverse(*due));
            while waiting.last().is_some_and(|(due, _)| *due <= now) {
                let (due, guard) = waiting.pop().unwrap();
                let took = (due - guard.sent_us()) as f64;
                s.record_first_chunk(
                    Mode::NonStreaming,
                    took,
                    Outcome::Success,
                    false,
                    None,
                    &params,
                );
                let answer = guard.first_chunk(took);
                s.record_answer(&answer, false, &params, due);
            }
            if i > 10_000 {
                let snap = s.snapshot_at(Mode::NonStreaming, now, &SuccessParams::DEFAULT);
                let lat = snap.latency_us.unwrap_or(f64::NAN);
                let charged = super::super::selector::charged_latency_us(&snap, &params.rule);
                let charged = charged.unwrap_or(f64::NAN);
                if i > step_at {
                    stalled.push((charged, lat));
                } else {
                    above += u32::from(charged > lat);
                    picks += 1;
                    steady.push((charged, lat));
                }
            }
            // Box-Muller: one standard normal from two uniforms.
            let (u, v) = (rng.next_f64().max(1e-12), rng.next_f64());
            let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            let slow = if i >= step_at { 10.0 } else { 1.0 };
            let latency = (slow * 100_000.0 * (sigma * z).exp()).round() as u64;
            waiting.push((
                now + latency.max(1),
                s.begin_wait(Mode::NonStreaming, now, Drawn::default()),
            ));
        }
        let mean = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| {
            v.iter().map(f).sum::<f64>() / v.len() as f64
        };
        let charged = mean(&stalled, |x| x.0) / mean(&steady, |x| x.0);
        let ewma = mean(&stalled, |x| x.1) / mean(&steady, |x| x.1);
        (f64::from(above) / f64::from(picks), charged, ewma)
    }

    #[test]
    fn stragglers_charge_nothing_and_a_stall_shows_before_its_answers() {
        // With long tails (σ 0.8) some request always runs long, but younger ones overtake it:
        // the open age (almost) never raises the charge in steady conditions.
        for sigma in [0.1, 0.4, 0.8] {
            let (steady_above, _, _) = the_open_age_over_a_stream(sigma);
            assert!(steady_above < 0.01, "σ {sigma}: steady {steady_above}");
        }
        // Once every request is ten times slower, none sent since answers for a while, and the
        // age of the first of them raises the charge before the EWMA of the answers catches up.
        // (At σ 0.8 a quarter of the slowed requests still answer within 600 ms, and those
        // answers move the EWMA as fast.)
        for sigma in [0.1, 0.4] {
            let (_, charged, ewma) = the_open_age_over_a_stream(sigma);
            assert!(
                charged > 1.5 * ewma,
                "σ {sigma}: {charged} vs the EWMA's {ewma}"
            );
        }
    }

    #[test]
    fn back_off_until_deadline() {
        let s = CandidateStats::new();
        assert_eq!(s.back_off_deadline_us(), None);
        s.back_off_until(1_000);
        assert!(s.needs_time());
        assert!(s.backed_off(999));
        assert!(
            s.snapshot_at(Mode::Streaming, 999, &SuccessParams::DEFAULT)
                .backed_off
        );
        assert_eq!(s.back_off_deadline_us(), Some(1_000));
        assert!(!s.backed_off(1_000));
        assert_eq!(s.back_off_deadline_us(), None);
        assert!(!s.needs_time());
    }

    #[test]
    fn debug_shows_values() {
        let s = CandidateStats::new();
        s.record_latency(Mode::Streaming, 42.0, None, &LP);
        let d = format!("{s:?}");
        assert!(d.contains("latency_streaming_us: Some(42.0)"), "{d}");
        assert!(d.contains("success: 1.0"), "{d}");
    }

    #[test]
    fn concurrent_requests_keep_their_own_latency_load_and_outcome() {
        // Streams whose first chunks come early and whose outcomes come much later, in another
        // order: each answer still carries its own send-time load and latency. Requests sent
        // with more of ours in flight are slower, so the slope is only right when no request's
        // latency is paired with another's load.
        let stats = Arc::new(CandidateStats::new());
        let mode = Mode::Streaming;
        let mut round_start = 0u64;
        for round in 0..300u64 {
            let mut open = Vec::new();
            for n in 0..8u64 {
                let guard = stats.begin_owned();
                let wait = stats.begin_wait(mode, round_start + n, Drawn::default());
                open.push((guard, wait, n));
            }
            // First chunks in send order: latency 100 ms + 20 ms per other request in flight.
            let answers: Vec<_> = open
                .into_iter()
                .map(|(guard, wait, n)| {
                    let answer = wait.first_chunk(100_000.0 + 20_000.0 * n as f64);
                    assert_eq!(answer.inflight_at_send, n);
                    (guard, answer)
                })
                .collect();
            // Outcomes in reverse order, a second later, 10 ms apart.
            for (k, (guard, answer)) in answers.into_iter().rev().enumerate() {
                let at = round_start + 1_000_000 + 10_000 * k as u64;
                stats.record_outcome(Outcome::Success, at, &RoutingParams::default());
                stats.record_answer(&answer, false, &RoutingParams::default(), at);
                drop(guard);
            }
            round_start = 2_000_000 * (round + 1);
        }
        let slope = stats.snapshot(mode).load_slope_us;
        // Answers paired with another request's load would give no slope or a negative one
        // (the outcomes come in reverse order); time weighting leaves it within 15 %.
        assert!((slope / 20_000.0 - 1.0).abs() < 0.15, "{slope}");
        assert_eq!(stats.inflight(), 0);
        assert_eq!(stats.wait_age_us(mode, round_start), None);
    }
}
