//! Modelled providers: how long an attempt takes and how it ends, over virtual time.
//!
//! Each provider has a median time to first chunk with log-normal jitter and a timeline of
//! [`Behaviour`]s (slow, down, flaky, rate-limited). Providers with `servers` set serve through a
//! [`Queue`], so their latency grows with load; the others have unlimited capacity. Each
//! provider draws from its own seeded generator, so runs are reproducible.

use super::clock::{Micros, MS, SEC};
use super::conversations::{ConversationSpec, PrefixCache, Turn};
use super::queueing::Queue;
use crate::routing::{RngSource, SplitMix64};
use std::collections::HashMap;

/// Default spread (sigma of the underlying normal) of the log-normal latency jitter.
pub const JITTER_SIGMA: f64 = 0.25;

/// Median time for an error response (503, 429, ...) to come back.
pub const ERROR_MS: f64 = 30.0;

/// Spread of error-response times.
const ERROR_SIGMA: f64 = 0.2;

/// Mean wait of a client before its first retry (0.5 s less 12.5% mean jitter), for the
/// oracle's arithmetic.
const RETRY_WAIT_US: f64 = 437_500.0;

/// What a provider does to the attempts it receives during one phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Behaviour {
    /// Answers with its normal latency.
    Normal,
    /// Answers, `factor` times slower than normal.
    Slow(f64),
    /// Answers every attempt with a fast error status (503 by default).
    Down {
        /// The status answered.
        status: u16,
        /// `Retry-After` seconds sent with it, if any.
        retry_after_s: Option<u64>,
    },
    /// Fails this fraction of attempts with a fast error status (500 by default), serves the
    /// rest normally.
    Flaky {
        /// Probability that an attempt fails.
        fail: f64,
        /// The status of a failed attempt.
        status: u16,
    },
    /// Answers every attempt with a fast 429 whose `Retry-After` points at `until`.
    RateLimited {
        /// When the limit lifts (virtual time).
        until: Micros,
    },
}

/// A behaviour starting at `from` and lasting until the next phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    /// Start of the phase (virtual time).
    pub from: Micros,
    /// What the provider does from then on.
    pub behaviour: Behaviour,
    /// Parallel servers during the phase (capacity-limited providers only); `None` keeps the
    /// provider's own number.
    pub servers: Option<u32>,
}

/// A modelled provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderSpec {
    /// Short name for tables and charts.
    pub name: String,
    /// Median time to first chunk when healthy and idle, in ms.
    pub median_ms: f64,
    /// Sigma of the log-normal latency jitter.
    pub jitter: f64,
    /// Parallel servers; `None` for unlimited capacity (latency independent of load).
    pub servers: Option<u32>,
    /// Behaviour timeline, sorted by `from`; before the first phase the provider is normal.
    pub phases: Vec<Phase>,
    /// A request quota per fixed window, announced on every answer; `None`: no quota.
    pub quota: Option<QuotaSpec>,
}

/// A request quota that refills at every multiple of `window` (virtual time), announced on
/// every answer as rate-limit headers would; once used up, attempts get `429` with a
/// `Retry-After` pointing at the refill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaSpec {
    /// Requests accepted per window.
    pub requests: u64,
    /// Window length.
    pub window: Micros,
}

/// What an answer announced about the quota: the remaining count, the window's size and the
/// time until it refills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Announced {
    /// Requests left in the window.
    pub remaining: u64,
    /// Requests per window.
    pub limit: u64,
    /// Time from the answer until the window refills.
    pub reset_in: Micros,
}

impl ProviderSpec {
    /// A healthy provider with unlimited capacity and the default jitter.
    pub fn new(name: &str, median_ms: f64) -> Self {
        Self {
            name: name.to_string(),
            median_ms,
            jitter: JITTER_SIGMA,
            servers: None,
            phases: Vec::new(),
            quota: None,
        }
    }

    /// The phase in force at `t`, if any.
    fn phase_at(&self, t: Micros) -> Option<&Phase> {
        self.phases.iter().take_while(|p| p.from <= t).last()
    }

    /// The behaviour in force at `t`.
    pub fn behaviour_at(&self, t: Micros) -> Behaviour {
        self.phase_at(t).map_or(Behaviour::Normal, |p| p.behaviour)
    }

    /// Parallel servers at `t` (`None`: unlimited capacity).
    pub fn servers_at(&self, t: Micros) -> Option<u32> {
        let base = self.servers?;
        Some(self.phase_at(t).and_then(|p| p.servers).unwrap_or(base))
    }

    /// Mean healthy latency in µs (the log-normal mean, slightly above the median).
    pub fn mean_us(&self) -> f64 {
        self.median_ms * MS as f64 * (self.jitter * self.jitter / 2.0).exp()
    }

    /// Mean service time of a successful attempt at `t` in µs: infinite while the provider
    /// fails everything.
    pub fn service_us_at(&self, t: Micros) -> f64 {
        match self.behaviour_at(t) {
            Behaviour::Normal | Behaviour::Flaky { .. } => self.mean_us(),
            Behaviour::Slow(f) => self.mean_us() * f,
            Behaviour::Down { .. } | Behaviour::RateLimited { .. } => f64::INFINITY,
        }
    }
}

impl ProviderSpec {
    /// Expected extra time per request sent at `t` from its failed attempts (the error and the
    /// client's wait before retrying), in µs: what a flaky phase adds to a request's cost.
    pub fn failure_penalty_us_at(&self, t: Micros) -> f64 {
        match self.behaviour_at(t) {
            Behaviour::Flaky { fail, .. } if fail < 1.0 => {
                fail / (1.0 - fail) * (ERROR_MS * MS as f64 + RETRY_WAIT_US)
            }
            Behaviour::Flaky { .. } => f64::INFINITY,
            _ => 0.0,
        }
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// 200 with a body.
    Ok,
    /// An error status, with the `Retry-After` seconds if the provider sent one.
    Status {
        /// HTTP status code.
        code: u16,
        /// `Retry-After` in whole seconds, if present.
        retry_after_s: Option<u64>,
    },
}

/// One attempt's result as the sidecar sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Time from sending the attempt to its first response chunk (includes queueing).
    pub latency: Micros,
    /// Outcome.
    pub reply: Reply,
    /// The quota announced with the answer, for providers that have one.
    pub quota: Option<Announced>,
    /// The provider reports that its prompt cache held the request's prefix (as real ones do
    /// in the answer's usage: `cached_tokens`, `cache_read_input_tokens`).
    pub cached: bool,
}

impl Response {
    /// True for a successful attempt.
    pub fn ok(&self) -> bool {
        self.reply == Reply::Ok
    }
}

/// An attempt that got (or just got) a server: when it completes and with what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    /// The attempt's id in the engine.
    pub attempt: usize,
    /// Virtual time the response arrives.
    pub done_at: Micros,
    /// The response.
    pub response: Response,
}

/// Standard normal draw (Box–Muller; one of the pair is discarded for simplicity).
pub fn gaussian(rng: &mut impl RngSource) -> f64 {
    let u1 = 1.0 - rng.next_f64(); // (0, 1]
    let u2 = rng.next_f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Log-normal draw with the given median (µs) and sigma.
fn lognormal(rng: &mut impl RngSource, median_us: f64, sigma: f64) -> Micros {
    (median_us * (sigma * gaussian(rng)).exp()).round().max(1.0) as Micros
}

/// All providers of a run, with their random streams and queues.
#[derive(Debug)]
pub struct Providers {
    specs: Vec<ProviderSpec>,
    rngs: Vec<SplitMix64>,
    queues: Vec<Option<Queue>>,
    /// Per provider with a quota: the current window's index and the requests it accepted.
    used: Vec<(Micros, u64)>,
    /// The scenario's conversations, when providers cache prompts.
    conversations: Option<ConversationSpec>,
    /// Per provider: its prompt cache.
    caches: Vec<PrefixCache>,
    /// The turns of attempts submitted and not yet served.
    turns: HashMap<usize, Turn>,
}

impl Providers {
    /// Providers for one run; `seed` fixes every draw they make.
    pub fn new(specs: &[ProviderSpec], seed: u64) -> Self {
        let mut root = SplitMix64::new(seed);
        Self {
            specs: specs.to_vec(),
            rngs: specs
                .iter()
                .map(|_| SplitMix64::new(root.next_u64()))
                .collect(),
            queues: specs.iter().map(|s| s.servers.map(Queue::new)).collect(),
            used: vec![(0, 0); specs.len()],
            conversations: None,
            caches: specs.iter().map(|_| PrefixCache::default()).collect(),
            turns: HashMap::new(),
        }
    }

    /// The same providers caching prompt prefixes as `conversations` says (`None`: no cache).
    pub fn with_conversations(self, conversations: Option<ConversationSpec>) -> Self {
        Self {
            conversations,
            ..self
        }
    }

    /// The models.
    pub fn specs(&self) -> &[ProviderSpec] {
        &self.specs
    }

    /// Sends an attempt to provider `p` at `now`: `Some` when it is served at once, `None` when
    /// it waits in the provider's queue (it comes out of [`Providers::release`] later).
    pub fn submit(&mut self, p: usize, attempt: usize, now: Micros) -> Option<Started> {
        self.submit_turn(p, attempt, now, None)
    }

    /// [`Providers::submit`] for an attempt that is `turn` of a conversation.
    pub fn submit_turn(
        &mut self,
        p: usize,
        attempt: usize,
        now: Micros,
        turn: Option<Turn>,
    ) -> Option<Started> {
        if let (Some(turn), Some(_)) = (turn, self.conversations) {
            self.turns.insert(attempt, turn);
        }
        let servers = self.specs[p].servers_at(now);
        if let (Some(q), Some(c)) = (&mut self.queues[p], servers) {
            q.set_servers(c);
            if !q.arrive(attempt, now) {
                return None;
            }
        }
        Some(self.serve(p, attempt, now, now))
    }

    /// An attempt on `p` completed at `now`: frees its server and starts the waiting attempts
    /// that now have one (several when the provider gained servers).
    pub fn release(&mut self, p: usize, now: Micros) -> Vec<Started> {
        let servers = self.specs[p].servers_at(now);
        let Some(q) = self.queues[p].as_mut() else {
            return Vec::new();
        };
        if let Some(c) = servers {
            q.set_servers(c);
        }
        let mut next = Vec::new();
        q.depart();
        while let Some(w) = q.start_waiting() {
            next.push(w);
        }
        next.into_iter()
            .map(|(attempt, queued_at)| self.serve(p, attempt, queued_at, now))
            .collect()
    }

    /// Draws the response of an attempt queued at `queued_at` whose service starts at `now`.
    fn serve(&mut self, p: usize, attempt: usize, queued_at: Micros, now: Micros) -> Started {
        let turn = self.turns.remove(&attempt);
        let spec = &self.specs[p];
        let rng = &mut self.rngs[p];
        let median_us = spec.median_ms * MS as f64;
        let sigma = spec.jitter;
        let error = |rng: &mut SplitMix64, code, retry_after_s| {
            let latency = lognormal(rng, ERROR_MS * MS as f64, ERROR_SIGMA);
            (
                latency,
                Reply::Status {
                    code,
                    retry_after_s,
                },
            )
        };
        let announced = |used: u64, q: &QuotaSpec| Announced {
            remaining: q.requests.saturating_sub(used),
            limit: q.requests,
            reset_in: q.window - now % q.window,
        };
        let mut quota = None;
        if let Some(q) = &spec.quota {
            let window = now / q.window.max(1);
            let (w, used) = &mut self.used[p];
            if *w != window {
                (*w, *used) = (window, 0);
            }
            if *used >= q.requests {
                let (latency, _) = error(rng, 429, None);
                let secs = (q.window - now % q.window).div_ceil(SEC).max(1);
                return Started {
                    attempt,
                    done_at: now + latency,
                    response: Response {
                        latency: now + latency - queued_at,
                        reply: Reply::Status {
                            code: 429,
                            retry_after_s: Some(secs),
                        },
                        quota: Some(announced(*used, q)),
                        cached: false,
                    },
                };
            }
            *used += 1;
            quota = Some(announced(*used, q));
        }
        let (service, reply) = match spec.behaviour_at(now) {
            Behaviour::Normal => (lognormal(rng, median_us, sigma), Reply::Ok),
            Behaviour::Slow(f) => (lognormal(rng, median_us * f, sigma), Reply::Ok),
            Behaviour::Down {
                status,
                retry_after_s,
            } => error(rng, status, retry_after_s),
            Behaviour::Flaky { fail, status } => {
                if rng.next_f64() < fail {
                    error(rng, status, None)
                } else {
                    (lognormal(rng, median_us, sigma), Reply::Ok)
                }
            }
            Behaviour::RateLimited { until } => {
                let secs = until.saturating_sub(now).div_ceil(SEC).max(1);
                error(rng, 429, Some(secs))
            }
        };
        let (service, cached) = match (turn, self.conversations) {
            (Some(turn), Some(c)) if reply == Reply::Ok => {
                let cache = &mut self.caches[p];
                let hit = cache.hit(&turn, now);
                let service = if hit {
                    ((service as f64 * c.hit_ttfc).round() as Micros).max(1)
                } else {
                    service
                };
                cache.store(&turn, now + service, c.ttl);
                (service, hit)
            }
            _ => (service, false),
        };
        let done_at = now + service;
        Started {
            attempt,
            done_at,
            response: Response {
                latency: done_at - queued_at,
                reply,
                quota,
                cached,
            },
        }
    }

    /// [`Providers::expected_cost`] for `turn`: a cached prefix answers sooner.
    pub fn expected_cost_of(&self, p: usize, now: Micros, turn: Option<&Turn>) -> f64 {
        let cost = self.expected_cost(p, now);
        match (turn, self.conversations) {
            (Some(turn), Some(c)) if self.caches[p].hit(turn, now) => cost * c.hit_ttfc,
            _ => cost,
        }
    }

    /// What an all-knowing router expects an attempt sent to `p` now to cost until success, in
    /// µs: mean latency (plus expected queueing) divided by the success probability, with the
    /// time of failed attempts and the client's wait before retrying counted; infinite while
    /// the provider fails everything.
    pub fn expected_cost(&self, p: usize, now: Micros) -> f64 {
        let spec = &self.specs[p];
        let mean = spec.mean_us();
        let wait = self.queues[p]
            .as_ref()
            .map_or(0.0, |q| q.expected_wait(mean));
        let error_us = ERROR_MS * MS as f64;
        if let Some(q) = &spec.quota {
            let (w, used) = self.used[p];
            if w == now / q.window.max(1) && used >= q.requests {
                return f64::INFINITY;
            }
        }
        match spec.behaviour_at(now) {
            Behaviour::Normal => wait + mean,
            Behaviour::Slow(f) => wait + mean * f,
            Behaviour::Down { .. } | Behaviour::RateLimited { .. } => f64::INFINITY,
            Behaviour::Flaky { fail: p_fail, .. } => {
                let ok = 1.0 - p_fail;
                if ok <= 0.0 {
                    f64::INFINITY
                } else {
                    wait + (ok * mean + p_fail * (error_us + RETRY_WAIT_US)) / ok
                }
            }
        }
    }

    /// Requests in service or waiting at `p` (0 for unlimited-capacity providers).
    pub fn load(&self, p: usize) -> usize {
        self.queues[p].as_ref().map_or(0, Queue::load)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOWN: Behaviour = Behaviour::Down {
        status: 503,
        retry_after_s: None,
    };

    fn spec(phases: Vec<Phase>) -> ProviderSpec {
        ProviderSpec {
            phases,
            ..ProviderSpec::new("p", 100.0)
        }
    }

    #[test]
    fn behaviour_follows_timeline() {
        let s = spec(vec![
            Phase {
                from: 10,
                behaviour: DOWN,
                servers: None,
            },
            Phase {
                from: 20,
                behaviour: Behaviour::Normal,
                servers: Some(2),
            },
        ]);
        assert_eq!(s.behaviour_at(0), Behaviour::Normal);
        assert_eq!(s.behaviour_at(10), DOWN);
        assert_eq!(s.behaviour_at(19), DOWN);
        assert_eq!(s.behaviour_at(25), Behaviour::Normal);
        // Server counts apply to capacity-limited providers only.
        assert_eq!(s.servers_at(25), None);
        let limited = ProviderSpec {
            servers: Some(4),
            ..s.clone()
        };
        assert_eq!(limited.servers_at(0), Some(4));
        assert_eq!(limited.servers_at(19), Some(4));
        assert_eq!(limited.servers_at(20), Some(2));
    }

    #[test]
    fn latency_jitters_around_median_and_is_reproducible() {
        let specs = [ProviderSpec::new("a", 200.0)];
        let mut a = Providers::new(&specs, 1);
        let mut b = Providers::new(&specs, 1);
        let mut lat = Vec::new();
        for i in 0..2001 {
            let x = a.submit(0, i, 0).map(|s| s.response);
            assert_eq!(x, b.submit(0, i, 0).map(|s| s.response));
            lat.push(x.map_or(0, |r| r.latency));
        }
        lat.sort_unstable();
        let median = lat[1000] as f64 / 1000.0;
        assert!((median - 200.0).abs() < 10.0, "{median}");
    }

    #[test]
    fn failures_and_retry_after() {
        let until = 10 * SEC;
        let specs = [spec(vec![Phase {
            from: 0,
            behaviour: Behaviour::RateLimited { until },
            servers: None,
        }])];
        let mut p = Providers::new(&specs, 3);
        let r = p.submit(0, 0, 2 * SEC + 1).map(|s| s.response.reply);
        assert_eq!(
            r,
            Some(Reply::Status {
                code: 429,
                retry_after_s: Some(8)
            })
        );
        assert!(p.expected_cost(0, 0).is_infinite());
        let flaky = [spec(vec![Phase {
            from: 0,
            behaviour: Behaviour::Flaky {
                fail: 0.2,
                status: 500,
            },
            servers: None,
        }])];
        let mut p = Providers::new(&flaky, 3);
        let fails = (0..10_000)
            .filter(|&i| p.submit(0, i, 0).is_some_and(|s| !s.response.ok()))
            .count();
        assert!((1800..2200).contains(&fails), "{fails}");
    }

    #[test]
    fn queued_provider_waits_and_latency_includes_queueing() {
        let specs = [ProviderSpec {
            servers: Some(1),
            ..ProviderSpec::new("q", 100.0)
        }];
        let mut p = Providers::new(&specs, 9);
        let first = p.submit(0, 0, 0);
        assert!(first.is_some());
        assert!(p.submit(0, 1, 0).is_none());
        assert_eq!(p.load(0), 2);
        let idle_cost = Providers::new(&specs, 9).expected_cost(0, 0);
        assert!(p.expected_cost(0, 0) > idle_cost);
        let done = first.map_or(0, |s| s.done_at);
        let second = p.release(0, done);
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].attempt, 1);
        // Waited `done` µs before its own service began.
        assert!(second[0].response.latency > done);
        assert!(p.release(0, done + 1).is_empty());
        assert_eq!(p.load(0), 0);
    }
}
