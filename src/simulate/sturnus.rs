//! sturnus's own strategy, driven through the real routing code.
//!
//! Nothing here re-implements routing: each simulated sidecar owns one real
//! [`CandidateStats`] per provider, picks with [`routing::choose_at`] at the virtual time and a
//! seeded [`SplitMix64`], holds real in-flight (and waiting) guards while an attempt is
//! outstanding, and records results through the same tracker calls the proxy's `outcome` module makes,
//! stamped with virtual time. A [`Variant`] says which of those calls it makes, so the plain latency-only rule
//! and the full one run side by side.

use super::clock::{Micros, MS, SEC};
use super::conversations::Turn;
use super::provider::{Providers, Reply, Response};
use super::strategy::Strategy;
use crate::routing::latency_mean::LatencyParams;
use crate::routing::lull::{self, Slot};
use crate::routing::success_rate::SuccessParams;
use crate::routing::{
    self, CandidateStats, ErrorKind, Mode, Outcome, OwnedInflightGuard, QuotaKind, RoutingParams,
    RuleParams, SplitMix64, WaitGuard,
};
use std::sync::Arc;

/// The mode every simulated request uses (a single latency series is enough for routing).
const MODE: Mode = Mode::NonStreaming;

/// Which tracker calls a sturnus sidecar makes, and with which parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Variant {
    /// Label in tables and charts.
    pub label: &'static str,
    /// Routing parameters.
    pub params: RoutingParams,
    /// The age of requests still waiting for their first chunk counts towards latency
    /// ([`CandidateStats::begin_wait`]). Off, a variant with the congestion discount still
    /// tracks them (each is the handle its answer is measured with) and charges no age.
    pub wait_age: bool,
    /// A `Retry-After` backs the candidate off ([`CandidateStats::back_off_until`]).
    pub retry_after: bool,
    /// Answers build the congestion discount ([`crate::routing::congestion`]).
    pub congestion: bool,
    /// Announced quotas pace the candidate ([`crate::routing::quota`]).
    pub pacing: bool,
    /// A conversation's turns pick by its key ([`routing::choose_keyed_at`]).
    pub prefix_affinity: bool,
}

impl Variant {
    /// The plain rule as a baseline: `exploit_k` 3, latency and success EWMAs at 0.3 (the
    /// estimates' change tests off), no waiting-age tracking, `Retry-After` ignored, no congestion
    /// discount (latency and outcome are all it records).
    pub fn latency_only() -> Variant {
        let plain_ewma = LatencyParams {
            threshold: f64::INFINITY,
            min_weight: 0.3,
            ..LatencyParams::DEFAULT
        };
        Variant {
            label: "latency only, k 3",
            params: RoutingParams {
                ewma_alpha: 0.3,
                exploit_k: 3.0,
                probe_floor: 0.02,
                error_threshold: 0.5,
                rule: RuleParams {
                    latency: plain_ewma,
                    success: SuccessParams {
                        change_every_s: 0.0,
                        ..SuccessParams::DEFAULT
                    },
                    ..RuleParams::default()
                },
            },
            wait_age: false,
            retry_after: false,
            congestion: false,
            pacing: false,
            prefix_affinity: false,
        }
    }

    /// One line saying how this variant routes.
    pub fn describe(&self) -> String {
        let on = |b: bool| if b { "on" } else { "off" };
        format!(
            "exploit_k {}, ewma_alpha {}, probe_floor {}, waiting age {}, Retry-After {}, congestion discount {}, quota pacing {}, prefix affinity {}",
            self.params.exploit_k,
            self.params.ewma_alpha,
            self.params.probe_floor,
            on(self.wait_age),
            on(self.retry_after),
            on(self.congestion),
            on(self.pacing),
            on(self.prefix_affinity)
        ) + &self
            .params
            .rule
            .changed_from(&RuleParams::default())
            .iter()
            .map(|c| format!(", {c}"))
            .collect::<String>()
    }

    /// The current defaults with every tracker signal in use.
    pub fn current() -> Variant {
        Variant {
            label: "sturnus",
            params: RoutingParams::default(),
            wait_age: true,
            retry_after: true,
            congestion: true,
            pacing: true,
            prefix_affinity: routing::rendezvous::PREFIX_AFFINITY_DEFAULT,
        }
    }

    /// `current` with prefix affinity off (every request picked at random, every cache hit
    /// counted like any answer): the yardstick of the conversations scenarios.
    pub fn cache_blind_of(current: Variant) -> Variant {
        Variant {
            label: "sturnus (cache-blind)",
            prefix_affinity: false,
            ..current
        }
    }

    /// `current` without quota pacing: what a `429` and its `Retry-After` alone achieve, the
    /// yardstick of the quota scenario.
    pub fn back_off_only_of(current: Variant) -> Variant {
        Variant {
            label: "sturnus (back-off only)",
            pacing: false,
            ..current
        }
    }
}

/// One sidecar running sturnus's routing over `n` candidates.
#[derive(Debug)]
pub struct Sturnus {
    stats: Vec<Arc<CandidateStats>>,
    inflight: Vec<Vec<OwnedInflightGuard>>,
    waiting: Vec<Vec<WaitGuard>>,
    /// The candidates' rendezvous identities.
    identities: Vec<u64>,
    /// The shares keyed picks are made over, smoothed across them (as the proxy's alias).
    smoothed: Vec<routing::SmoothedShare>,
    /// The share of keyed answers that hit a prompt cache (as the proxy's alias).
    keyed_hits: routing::KeyedHits,
    /// Whether the last pick was keyed, until the attempt it chose is started.
    picked_keyed: bool,
    /// How the latest pick's draw placed its request ([`routing::Drawn`]).
    picked_drawn: routing::Drawn,
    /// Per candidate, the send times of its keyed attempts still outstanding.
    keyed_sent: Vec<Vec<Micros>>,
    variant: Variant,
}

impl Sturnus {
    /// Fresh (all cold) candidates routed as `variant` says.
    pub fn new(n: usize, variant: Variant) -> Self {
        let n = n.max(1);
        let mut variant = variant;
        if !variant.wait_age {
            // No waiting age exceeds the latency by an infinite slack.
            variant.params.rule.wait_age.slack = f64::INFINITY;
        }
        Self {
            stats: (0..n)
                .map(|_| {
                    Arc::new(if variant.congestion {
                        CandidateStats::new()
                    } else {
                        CandidateStats::without_congestion()
                    })
                })
                .collect(),
            inflight: (0..n).map(|_| Vec::new()).collect(),
            waiting: (0..n).map(|_| Vec::new()).collect(),
            identities: (0..n)
                .map(|i| routing::rendezvous::identity(&format!("provider-{i}/model")))
                .collect(),
            smoothed: (0..n).map(|_| Default::default()).collect(),
            keyed_hits: routing::KeyedHits::default(),
            picked_keyed: false,
            picked_drawn: routing::Drawn::default(),
            keyed_sent: (0..n).map(|_| Vec::new()).collect(),
            variant,
        }
    }

    /// The live statistics (for tests and share snapshots).
    pub fn stats(&self) -> &[Arc<CandidateStats>] {
        &self.stats
    }
}

impl Strategy for Sturnus {
    fn pick(&mut self, now: Micros, rng: &mut SplitMix64, world: &Providers) -> usize {
        self.pick_turn(None, now, rng, world)
    }

    /// As the proxy: with prefix affinity, every turn picks by its conversation's key (every
    /// application here has a system prompt, so an opening turn has a key too).
    fn pick_turn(
        &mut self,
        turn: Option<&Turn>,
        now: Micros,
        rng: &mut SplitMix64,
        _world: &Providers,
    ) -> usize {
        let keyed = turn
            .filter(|_| self.variant.prefix_affinity)
            .map(|t| routing::Keyed {
                key: t.key(),
                identities: &self.identities,
                smoothed: &self.smoothed,
                exploit: self
                    .keyed_hits
                    .exploit(MODE, &self.variant.params.rule.keyed),
            });
        self.picked_keyed = keyed.is_some();
        let params = &self.variant.params;
        let choice = routing::choose_keyed_at(&self.stats, MODE, None, keyed, params, now, rng);
        self.picked_drawn = choice.map(|c| c.drawn).unwrap_or_default();
        choice.map_or(0, |c| c.index)
    }

    fn started(&mut self, p: usize, now: Micros) {
        let stats = &self.stats[p];
        self.inflight[p].push(stats.begin_owned());
        if std::mem::take(&mut self.picked_keyed) {
            self.keyed_sent[p].push(now);
        }
        if self.variant.wait_age || self.variant.congestion {
            let drawn = std::mem::take(&mut self.picked_drawn);
            self.waiting[p].push(stats.begin_wait(MODE, now, drawn));
        }
    }

    fn finished(&mut self, p: usize, now: Micros, response: &Response) {
        // The first chunk is here: this attempt stops waiting (it started `latency` ago) and,
        // as every attempt's answer is its only chunk here, stops being in flight.
        let sent = now.saturating_sub(response.latency);
        let waiting = &mut self.waiting[p];
        let answer = waiting
            .iter()
            .position(|g| g.sent_us() == sent)
            .map(|i| waiting.swap_remove(i).first_chunk(response.latency as f64));
        drop(self.inflight[p].pop());
        let keyed = &mut self.keyed_sent[p];
        if let Some(i) = keyed.iter().position(|&at| at == sent) {
            keyed.swap_remove(i);
            self.keyed_hits
                .record(MODE, response.cached, &self.variant.params.rule.keyed);
        }
        let stats = &self.stats[p];
        let (status, retry_after_s) = match response.reply {
            Reply::Ok => (200, None),
            Reply::Status {
                code,
                retry_after_s,
            } => (code, retry_after_s),
        };
        // As outcome::response_filter: the quota the answer announces and its `Retry-After`,
        // before its outcome (a success ends the probation a back-off it announces began).
        if let (true, Some(q)) = (self.variant.pacing, response.quota) {
            stats.observe_quota(
                QuotaKind::Requests,
                q.remaining,
                Some(q.limit),
                Some(q.reset_in),
                now,
                &self.variant.params.rule.quota,
            );
        }
        if let (true, Some(secs)) = (self.variant.retry_after, retry_after_s) {
            stats.back_off_until(now + secs * SEC);
        }
        // As outcome::response_body_filter: the first chunk of a successful answer; with
        // prefix affinity, an answer from the prompt cache as a cache hit.
        let slot = Slot {
            index: p,
            of: self.stats.len(),
        };
        let cached = response.cached && self.variant.prefix_affinity;
        let in_lull = lull::unqueued_sample(sent, slot, &self.variant.params.rule.lull);
        let outcome = Outcome::from_status(status);
        let params = &self.variant.params;
        stats.record_first_chunk(
            MODE,
            response.latency as f64,
            outcome,
            cached,
            Some(now),
            params,
        );
        // As outcome::finish.
        match outcome {
            Outcome::Failure => stats.record_failure(ErrorKind::Status, now / MS, now, params),
            outcome => {
                stats.record_outcome(outcome, now, params);
                if let (Outcome::Success, Some(answer), false) = (outcome, answer, cached) {
                    stats.record_answer(&answer, in_lull, &self.variant.params, now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::provider::ProviderSpec;
    use super::*;

    fn limited(latency: Micros) -> Response {
        Response {
            latency,
            reply: Reply::Status {
                code: 429,
                retry_after_s: Some(3),
            },
            quota: None,
            cached: false,
        }
    }

    #[test]
    fn latency_only_variant_records_latency_and_outcome_only() {
        let w = Providers::new(&[ProviderSpec::new("a", 1.0)], 1);
        let mut s = Sturnus::new(2, Variant::latency_only());
        let mut rng = SplitMix64::new(1);
        assert!(s.pick(0, &mut rng, &w) < 2);
        s.started(1, 0);
        s.started(1, 0);
        assert_eq!(s.stats()[1].inflight(), 2);
        assert!(!s.stats()[1].needs_time());
        s.finished(1, 5_000_000, &limited(30_000));
        assert_eq!(s.stats()[1].inflight(), 1);
        // A 429 in 30 ms is not a fast answer: only a success gives a latency.
        assert_eq!(s.stats()[1].latency_us(MODE), None);
        s.finished(1, 5_500_000, &answered(400_000));
        assert_eq!(s.stats()[1].latency_us(MODE), Some(400_000.0));
        assert_eq!(s.stats()[1].failures(), 1);
        assert_eq!(s.stats()[1].last_error(), Some((ErrorKind::Status, 5_000)));
        assert_eq!(s.stats()[1].back_off_deadline_us(), None);
        assert_eq!(s.stats()[1].inflight(), 0);
    }

    fn answered(latency: Micros) -> Response {
        Response {
            latency,
            reply: Reply::Ok,
            quota: None,
            cached: false,
        }
    }

    #[test]
    fn concurrent_attempts_answered_out_of_order_each_close_their_own_handle() {
        // Six attempts sent 1 ms apart answer in a shuffled order; each answer must close the
        // handle of the attempt it answers (found by its send time), so that its latency is
        // folded in with that attempt's own send-time load, and the others keep waiting.
        let mut s = Sturnus::new(1, Variant::current());
        let sent: Vec<Micros> = (0..6).map(|i| i * MS).collect();
        for &at in &sent {
            s.started(0, at);
        }
        let mut open: Vec<Micros> = sent.clone();
        for (k, &i) in [3usize, 0, 5, 1, 4, 2].iter().enumerate() {
            let latency = 200 * MS + 7 * MS * k as Micros;
            s.finished(0, sent[i] + latency, &answered(latency));
            open.retain(|&at| at != sent[i]);
            let mut waiting: Vec<Micros> = s.waiting[0].iter().map(|g| g.sent_us()).collect();
            waiting.sort_unstable();
            assert_eq!(
                waiting, open,
                "after answering the attempt sent at {}",
                sent[i]
            );
        }
        assert_eq!(s.stats()[0].inflight(), 0);
    }

    #[test]
    fn current_variant_uses_every_signal() {
        let mut s = Sturnus::new(2, Variant::current());
        s.started(1, 1_000);
        s.started(1, 2_000);
        assert_eq!(s.stats()[1].wait_age_us(MODE, 4_000), Some(3_000.0));
        // The attempt sent at 1 000 answers at 4 000: the one from 2 000 still waits.
        s.finished(1, 4_000, &limited(3_000));
        assert_eq!(s.stats()[1].wait_age_us(MODE, 4_000), Some(2_000.0));
        assert_eq!(s.stats()[1].inflight(), 1);
        assert_eq!(s.stats()[1].back_off_deadline_us(), Some(3_004_000));
        assert!(s.stats()[1].backed_off(3_000_000));
    }
}
