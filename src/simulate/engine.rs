//! The discrete-event loop: sidecars send requests, strategies pick, providers answer.
//!
//! A request is one client call; it makes up to [`MAX_ATTEMPTS`] attempts because clients
//! retry failures the way the OpenAI SDKs do by default: two retries, waiting the response's
//! `Retry-After` when it is at most 60 s, otherwise 0.5 s x 2^retry less up to 25% jitter.
//! Retries go back through the same sidecar's strategy, so a request's latency is the time
//! until it succeeded, failed attempts and waits included.

use super::clock::{EventQueue, Micros, MS, SEC};
use super::conversations::{Talk, Turn};
use super::provider::{Providers, Reply, Response};
use super::scenario::{Contender, Scenario};
use super::strategy::Strategy;
use crate::routing::{RngSource, SplitMix64};

/// Attempts per request before the client gives up (one try plus two retries).
pub const MAX_ATTEMPTS: u8 = 3;

/// The client's first retry delay before jitter (doubles per retry).
pub const RETRY_DELAY: Micros = 500 * MS;

/// Longest `Retry-After` the client honours.
pub const MAX_RETRY_AFTER: Micros = 60 * SEC;

/// How long the client waits before retry number `retry` (1-based) after `response`, given a
/// uniform draw `u` for the jitter.
pub fn retry_delay(response: &Response, retry: u8, u: f64) -> Micros {
    if let Reply::Status {
        retry_after_s: Some(secs),
        ..
    } = response.reply
    {
        let wait = secs.saturating_mul(SEC);
        if wait > 0 && wait <= MAX_RETRY_AFTER {
            return wait;
        }
    }
    let base = RETRY_DELAY << (retry.saturating_sub(1)).min(4);
    (base as f64 * (1.0 - 0.25 * u)) as Micros
}

/// One client request, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestLog {
    /// Which sidecar it went through.
    pub sidecar: u32,
    /// When the client sent it.
    pub arrival: Micros,
    /// Provider of its first attempt (the routing decision for a fresh request).
    pub first: u8,
    /// Arrival to success (or to the last failure).
    pub latency: Micros,
    /// Attempts made.
    pub attempts: u8,
    /// True when an attempt succeeded.
    pub ok: bool,
    /// Its place in a conversation (scenarios with conversations).
    pub turn: Option<Turn>,
}

/// One attempt, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptLog {
    /// Which sidecar sent it.
    pub sidecar: u32,
    /// Provider it went to.
    pub provider: u8,
    /// When it was sent.
    pub start: Micros,
    /// When its response arrived.
    pub end: Micros,
    /// True for a success.
    pub ok: bool,
    /// True for a `429` answer.
    pub limited: bool,
    /// True when the provider's prompt cache held its prefix.
    pub cached: bool,
}

/// Everything a run produced, in creation order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunLog {
    /// Requests in arrival order.
    pub requests: Vec<RequestLog>,
    /// Attempts in completion order.
    pub attempts: Vec<AttemptLog>,
}

#[derive(Debug)]
enum Event {
    /// Sidecar `s` receives a new client request.
    Arrive(u32),
    /// Attempt `a` has its response.
    Done(usize),
    /// The client retries request `r`.
    Retry(usize),
}

/// An attempt in flight.
#[derive(Debug)]
struct Live {
    sidecar: u32,
    request: usize,
    provider: usize,
    start: Micros,
    response: Option<Response>,
}

struct Sidecar {
    strategy: Box<dyn Strategy>,
    /// The strategy's random source.
    rng: SplitMix64,
    /// The client's (retry jitter), kept apart so strategies do not shift each other's draws.
    client: SplitMix64,
}

/// Derives an independent seed for stream `k` from `seed`.
pub fn derive(seed: u64, k: u64) -> u64 {
    SplitMix64::new(seed ^ k.wrapping_mul(0xA076_1D64_78BD_642F)).next_u64()
}

struct Run<'a> {
    scenario: &'a Scenario,
    queue: EventQueue<Event>,
    providers: Providers,
    sidecars: Vec<Sidecar>,
    /// Each sidecar's interval between two requests.
    periods: Vec<Micros>,
    live: Vec<Live>,
    /// The clients' conversations: one pool per sidecar when they are sticky, else one for
    /// the fleet (empty without conversations).
    talks: Vec<Talk>,
    log: RunLog,
}

/// Runs `contender` through `scenario`; everything random derives from `seed`.
pub fn run(scenario: &Scenario, contender: Contender, seed: u64) -> RunLog {
    let mut phase_rng = SplitMix64::new(derive(seed, 1));
    let make = contender.factory(scenario);
    let mut run = Run {
        scenario,
        queue: EventQueue::new(),
        providers: Providers::new(&scenario.providers, derive(seed, 2))
            .with_conversations(scenario.conversations),
        sidecars: (0..scenario.sidecars)
            .map(|s| Sidecar {
                strategy: make(),
                rng: SplitMix64::new(derive(seed, 1000 + s as u64)),
                client: SplitMix64::new(derive(seed, 1_000_000 + s as u64)),
            })
            .collect(),
        periods: scenario.periods(),
        live: Vec::new(),
        talks: talks(scenario, seed),
        log: RunLog::default(),
    };
    for s in 0..scenario.sidecars {
        let offset = phase_rng.next_u64() % run.periods[s];
        run.queue.schedule(offset, Event::Arrive(s as u32));
    }
    while let Some((now, event)) = run.queue.pop() {
        match event {
            Event::Arrive(s) => run.arrive(s, now),
            Event::Done(a) => run.done(a, now),
            Event::Retry(r) => run.attempt(r, now),
        }
    }
    run.log
}

/// The conversations of `scenario`'s clients: with sticky sessions each sidecar's own, else
/// one pool for the fleet whose turns arrive at any sidecar.
fn talks(scenario: &Scenario, seed: u64) -> Vec<Talk> {
    let Some(c) = scenario.conversations else {
        return Vec::new();
    };
    if c.sticky {
        (0..scenario.sidecars)
            .map(|s| Talk::new(c, c.open, s as u32, derive(seed, 2_000_000 + s as u64)))
            .collect()
    } else {
        let open = c.open.saturating_mul(scenario.sidecars as u32);
        vec![Talk::new(c, open, 0, derive(seed, 2_000_000))]
    }
}

impl Run<'_> {
    /// The conversations whose turns sidecar `s` carries: its own with sticky sessions, else
    /// the fleet's one pool.
    fn talk_of(&mut self, s: u32) -> Option<&mut Talk> {
        let pool = if self.talks.len() > 1 { s as usize } else { 0 };
        self.talks.get_mut(pool)
    }

    fn arrive(&mut self, s: u32, now: Micros) {
        if now >= self.scenario.duration {
            return;
        }
        self.queue
            .schedule(now + self.periods[s as usize], Event::Arrive(s));
        let request = self.log.requests.len();
        let turn = self.talk_of(s).map(Talk::next_turn);
        self.log.requests.push(RequestLog {
            sidecar: s,
            arrival: now,
            first: 0,
            latency: 0,
            attempts: 0,
            ok: false,
            turn,
        });
        self.attempt(request, now);
    }

    /// Sends the next attempt of `request`.
    fn attempt(&mut self, request: usize, now: Micros) {
        let (s, turn) = {
            let r = &self.log.requests[request];
            (r.sidecar, r.turn)
        };
        let car = &mut self.sidecars[s as usize];
        let p = car
            .strategy
            .pick_turn(turn.as_ref(), now, &mut car.rng, &self.providers);
        car.strategy.started(p, now);
        let r = &mut self.log.requests[request];
        if r.attempts == 0 {
            r.first = p as u8;
        }
        r.attempts += 1;
        let id = self.live.len();
        self.live.push(Live {
            sidecar: s,
            request,
            provider: p,
            start: now,
            response: None,
        });
        if let Some(started) = self.providers.submit_turn(p, id, now, turn) {
            self.begin_service(started);
        }
    }

    fn begin_service(&mut self, started: super::provider::Started) {
        self.live[started.attempt].response = Some(started.response);
        self.queue
            .schedule(started.done_at, Event::Done(started.attempt));
    }

    fn done(&mut self, a: usize, now: Micros) {
        let (s, request, p, start) = {
            let l = &self.live[a];
            (l.sidecar, l.request, l.provider, l.start)
        };
        let Some(response) = self.live[a].response else {
            return;
        };
        for next in self.providers.release(p, now) {
            self.begin_service(next);
        }
        self.sidecars[s as usize]
            .strategy
            .finished(p, now, &response);
        self.log.attempts.push(AttemptLog {
            sidecar: s,
            provider: p as u8,
            start,
            end: now,
            ok: response.ok(),
            limited: matches!(response.reply, Reply::Status { code: 429, .. }),
            cached: response.cached,
        });
        let r = &mut self.log.requests[request];
        if response.ok() || r.attempts >= MAX_ATTEMPTS {
            r.ok = response.ok();
            r.latency = now - r.arrival;
            if let (Some(turn), Some(talk)) = (r.turn, self.talk_of(s)) {
                talk.answered(&turn);
            }
        } else {
            let u = self.sidecars[s as usize].client.next_f64();
            let wait = retry_delay(&response, r.attempts, u);
            self.queue.schedule(now + wait, Event::Retry(request));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::clock::SEC;
    use super::super::scenario::{contenders, scenario, Group, Size};
    use super::super::sturnus::Variant;
    use super::*;

    #[test]
    fn same_seed_same_log_different_seed_differs() {
        let mut sc = scenario("outage", Size::Quick).unwrap_or_else(|| unreachable!());
        sc.sidecars = 3;
        let c = Contender::Sturnus(Variant::current());
        let a = run(&sc, c, 7);
        assert_eq!(a, run(&sc, c, 7));
        assert_ne!(a, run(&sc, c, 8));
        // One request per period per sidecar.
        assert_eq!(a.requests.len(), 3 * (sc.duration / sc.period) as usize);
        assert!(a.requests.iter().all(|r| r.attempts >= 1 && r.latency > 0));
        let attempts: usize = a.requests.iter().map(|r| r.attempts as usize).sum();
        assert_eq!(attempts, a.attempts.len());
    }

    #[test]
    fn each_group_sends_at_its_own_rate() {
        let mut sc = scenario("step", Size::Quick).unwrap_or_else(|| unreachable!());
        sc.groups = vec![
            Group {
                sidecars: 1,
                period: 10 * MS,
            },
            Group {
                sidecars: 2,
                period: 100 * MS,
            },
        ];
        sc.sidecars = 3;
        sc.duration = 10 * SEC;
        let log = run(&sc, Contender::RoundRobin, 1);
        let sent = |s: u32| log.requests.iter().filter(|r| r.sidecar == s).count();
        assert_eq!((sent(0), sent(1), sent(2)), (1000, 100, 100));
    }

    #[test]
    fn retries_until_success_or_limit() {
        let sc = scenario("outage", Size::Quick).unwrap_or_else(|| unreachable!());
        let log = run(
            &Scenario {
                sidecars: 2,
                ..sc.clone()
            },
            Contender::RoundRobin,
            1,
        );
        // Round-robin hits the dead provider every third attempt; the client retries.
        let during: Vec<_> = log
            .requests
            .iter()
            .filter(|r| r.arrival >= 70 * SEC)
            .filter(|r| r.arrival < 110 * SEC)
            .collect();
        assert!(during.iter().any(|r| r.attempts >= 2));
        assert!(during.iter().all(|r| r.attempts <= MAX_ATTEMPTS));
        // A retried request waited at least the client's back-off.
        assert!(during
            .iter()
            .filter(|r| r.ok && r.attempts == 2)
            .all(|r| r.latency >= RETRY_DELAY * 3 / 4));
        let ok = during.iter().filter(|r| r.ok).count();
        assert!(
            ok as f64 > 0.95 * during.len() as f64,
            "{ok}/{}",
            during.len()
        );
    }

    #[test]
    fn client_backs_off_like_the_sdk() {
        let fail = |retry_after_s| Response {
            latency: 1,
            reply: Reply::Status {
                code: 429,
                retry_after_s,
            },
            quota: None,
            cached: false,
        };
        assert_eq!(retry_delay(&fail(Some(7)), 1, 0.5), 7 * SEC);
        assert_eq!(retry_delay(&fail(Some(61)), 1, 0.0), 500 * MS);
        assert_eq!(retry_delay(&fail(None), 2, 0.0), 1000 * MS);
        assert_eq!(retry_delay(&fail(None), 1, 1.0), 375 * MS);
    }

    #[test]
    fn herd_queues_hold_everything_and_drain() {
        let mut sc = scenario("herd", Size::Quick).unwrap_or_else(|| unreachable!());
        sc.duration = 20 * SEC;
        for c in contenders(Variant::current()) {
            let log = run(&sc, c, 3);
            let attempts: usize = log.requests.iter().map(|r| r.attempts as usize).sum();
            assert_eq!(attempts, log.attempts.len(), "{}", c.label());
            assert!(log.requests.iter().all(|r| r.ok), "{}", c.label());
        }
    }
}
