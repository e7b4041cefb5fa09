//! A provider with limited capacity: `servers` requests are served at once, the rest wait in
//! FIFO order. This is what makes the herd scenario bite: traffic that piles onto one provider
//! waits in its queue, so its latency grows with its load.

use super::clock::Micros;
use std::collections::VecDeque;

/// A multi-server FIFO queue (the textbook M/G/c shape without its assumptions on arrivals).
#[derive(Debug, Clone)]
pub struct Queue {
    servers: u32,
    busy: u32,
    waiting: VecDeque<(usize, Micros)>,
}

impl Queue {
    /// Idle queue with `servers` parallel servers (at least one).
    pub fn new(servers: u32) -> Self {
        Self {
            servers: servers.max(1),
            busy: 0,
            waiting: VecDeque::new(),
        }
    }

    /// Number of parallel servers.
    pub fn servers(&self) -> u32 {
        self.servers
    }

    /// Requests in service or waiting: what an arriving request finds ahead of it.
    pub fn load(&self) -> usize {
        self.busy as usize + self.waiting.len()
    }

    /// Changes the number of servers (at least one). Requests in service keep their server;
    /// with fewer servers, new ones start only once the busy count is below the new number.
    pub fn set_servers(&mut self, servers: u32) {
        self.servers = servers.max(1);
    }

    /// A request arrives; true when a server was free and it starts now, false when it waits.
    pub fn arrive(&mut self, attempt: usize, now: Micros) -> bool {
        if self.busy < self.servers && self.waiting.is_empty() {
            self.busy += 1;
            true
        } else {
            self.waiting.push_back((attempt, now));
            false
        }
    }

    /// A request left service: its server is free.
    pub fn depart(&mut self) {
        self.busy = self.busy.saturating_sub(1);
    }

    /// The next waiting request (attempt, enqueue time) if a server is free; it takes it.
    pub fn start_waiting(&mut self) -> Option<(usize, Micros)> {
        if self.busy >= self.servers {
            return None;
        }
        let next = self.waiting.pop_front()?;
        self.busy += 1;
        Some(next)
    }

    /// Expected wait before service for a request arriving now, given the mean service time:
    /// zero with a free server, else one service slot per `servers` requests ahead of it.
    pub fn expected_wait(&self, mean_service: f64) -> f64 {
        let ahead = self.load() as f64;
        let c = f64::from(self.servers);
        if ahead < c {
            0.0
        } else {
            (ahead - c + 1.0) * mean_service / c
        }
    }
}

/// Erlang C: probability that an arrival waits in an M/M/c queue with `c` servers and offered
/// load `a` = arrival rate x mean service time (requires `a < c`).
pub fn erlang_c(c: u32, a: f64) -> f64 {
    // Erlang B by its stable recursion, then converted to C.
    let mut b = 1.0;
    for k in 1..=c {
        b = a * b / (f64::from(k) + a * b);
    }
    let rho = a / f64::from(c);
    b / (1.0 - rho * (1.0 - b))
}

/// Mean time in system (wait + service) of an M/M/c queue: `c` servers, `rate` arrivals per
/// µs, `service` µs mean service time; infinite when the queue is unstable.
pub fn mmc_latency(c: u32, rate: f64, service: f64) -> f64 {
    let a = rate * service;
    if a >= f64::from(c) {
        return f64::INFINITY;
    }
    if a <= 0.0 {
        return service;
    }
    erlang_c(c, a) * service / (f64::from(c) - a) + service
}

/// One provider as the herd oracle's split sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitProvider {
    /// Parallel servers; `None` for unlimited capacity.
    pub servers: Option<u32>,
    /// Mean service time of an answer in µs (infinite while it fails everything).
    pub service: f64,
    /// Expected extra time per request routed here from failed attempts (the error and the
    /// client's wait before retrying), in µs.
    pub penalty: f64,
}

impl SplitProvider {
    /// A provider without failures.
    pub fn new(servers: Option<u32>, service: f64) -> Self {
        Self {
            servers,
            service,
            penalty: 0.0,
        }
    }

    /// Mean latency (plus failure penalty) at `rate` requests per µs.
    fn latency(&self, rate: f64) -> f64 {
        let l = match self.servers {
            Some(c) => mmc_latency(c, rate, self.service),
            None => self.service,
        };
        l + self.penalty
    }

    /// Largest share of `rate` it can take and stay stable (1 or more: no limit).
    fn stable_share(&self, rate: f64) -> f64 {
        match self.servers {
            Some(c) if self.service.is_finite() => f64::from(c) / (rate * self.service),
            Some(_) => 0.0,
            None => f64::INFINITY,
        }
    }

    /// Marginal cost of share `x` of `rate`: d/dx of x × latency(x × rate).
    fn marginal(&self, x: f64, rate: f64) -> f64 {
        let h = 1e-7;
        let cost = |x: f64| x * self.latency(x * rate);
        (cost(x + h) - cost(x)) / h
    }

    /// The share at which the marginal cost reaches `level` (0 when it starts above it),
    /// capped just under the stability limit and at 1.
    fn share_at(&self, level: f64, rate: f64) -> f64 {
        let top = self.stable_share(rate).min(1.0) * (1.0 - 1e-9);
        if !self.service.is_finite() || top <= 0.0 || self.marginal(0.0, rate) >= level {
            return 0.0;
        }
        if self.marginal(top, rate) <= level {
            return top;
        }
        let (mut lo, mut hi) = (0.0, top);
        for _ in 0..50 {
            let mid = (lo + hi) / 2.0;
            if self.marginal(mid, rate) <= level {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// The static traffic split minimising mean latency over `providers` at a total `rate` per
/// µs: the herd's oracle. Mean latency of independent queues is convex in the split, so the
/// optimum equalises marginal costs (water-filling): a bisection on the common marginal cost,
/// each provider's share found by its own bisection. Unlimited providers have a constant
/// marginal cost (their service time), so the fastest of them takes whatever the
/// capacity-limited ones cheaper than it leave. The optimum routes by these shares at random,
/// as good as any fixed policy can be. A provider failing everything gets nothing; when
/// nothing can carry the load, shares follow capacity.
pub fn optimal_split(providers: &[SplitProvider], rate: f64) -> Vec<f64> {
    let n = providers.len();
    if n == 0 {
        return Vec::new();
    }
    let shares_at = |level: f64| -> Vec<f64> {
        providers
            .iter()
            .map(|p| match p.servers {
                None => 0.0,
                Some(_) => p.share_at(level, rate),
            })
            .collect()
    };
    // The cheapest unlimited provider caps the level.
    let unlimited = providers
        .iter()
        .enumerate()
        .filter(|(_, p)| p.servers.is_none() && p.service.is_finite())
        .map(|(i, p)| (i, p.service + p.penalty))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((i, cap)) = unlimited {
        let mut shares = shares_at(cap);
        let taken: f64 = shares.iter().sum();
        if taken <= 1.0 {
            shares[i] = 1.0 - taken;
            return shares;
        }
    } else {
        let room: f64 = providers.iter().map(|p| p.stable_share(rate)).sum();
        if room <= 0.0 {
            return vec![1.0 / n as f64; n];
        }
        if room <= 1.0 {
            return providers
                .iter()
                .map(|p| p.stable_share(rate) / room)
                .collect();
        }
    }
    // Limited providers alone carry it: find the level where shares sum to 1.
    let (mut lo, mut hi) = (0.0, 1.0);
    while shares_at(hi).iter().sum::<f64>() < 1.0 && hi < 1e15 {
        hi *= 2.0;
    }
    for _ in 0..64 {
        let mid = (lo + hi) / 2.0;
        if shares_at(mid).iter().sum::<f64>() < 1.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let shares = shares_at(hi);
    let sum: f64 = shares.iter().sum();
    shares
        .iter()
        .map(|x| x / sum.max(f64::MIN_POSITIVE))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erlang_c_known_values() {
        // One server: P(wait) = utilisation.
        assert!((erlang_c(1, 0.5) - 0.5).abs() < 1e-12);
        // Two servers at a = 1: C = 1/3.
        assert!((erlang_c(2, 1.0) - 1.0 / 3.0).abs() < 1e-12);
        // M/M/1 time in system = s / (1 - rho).
        assert!((mmc_latency(1, 0.5, 1.0) - 2.0).abs() < 1e-12);
        assert!(mmc_latency(2, 3.0, 1.0).is_infinite());
    }

    #[test]
    fn optimal_split_prefers_fast_until_it_queues() {
        let p = SplitProvider::new;
        // Equal providers: an even split.
        let even = optimal_split(&[p(Some(10), 100.0), p(Some(10), 100.0)], 0.1);
        assert!(
            (even[0] - 0.5).abs() < 1e-6 && (even[1] - 0.5).abs() < 1e-6,
            "{even:?}"
        );
        // A fast and a slow provider: most to the fast one, but not all.
        // 0.12 per µs x 100 µs = 12 busy servers' worth: more than the fast one has.
        let s = optimal_split(&[p(Some(10), 100.0), p(Some(10), 300.0)], 0.12);
        assert!(s[0] > 0.6 && s[0] < 1.0, "{s:?}");
        assert!((s.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        // An unlimited provider takes the overflow of a limited faster one; a dead one nothing.
        let s = optimal_split(
            &[p(Some(10), 100.0), p(None, 300.0), p(None, f64::INFINITY)],
            0.12,
        );
        assert!(s[0] > 0.5 && s[0] < 0.84 && s[2] == 0.0, "{s:?}");
        // A failure penalty moves traffic away.
        let flaky = SplitProvider {
            penalty: 200.0,
            ..p(Some(10), 100.0)
        };
        let t = optimal_split(&[flaky, p(None, 300.0)], 0.12);
        assert!(t[0] < s[0], "{t:?} vs {s:?}");
    }

    /// Mean latency of routing by `shares` at `rate`.
    fn cost(providers: &[SplitProvider], shares: &[f64], rate: f64) -> f64 {
        shares
            .iter()
            .zip(providers)
            .map(|(&x, p)| {
                if x == 0.0 {
                    0.0
                } else {
                    x * p.latency(x * rate)
                }
            })
            .sum()
    }

    /// The brute-force optimum over 1% steps, for comparison.
    fn grid_split(providers: &[SplitProvider], rate: f64) -> f64 {
        let cost = |x: &[f64]| cost(providers, x, rate);
        let mut best = f64::INFINITY;
        for a in 0..=100 {
            for b in 0..=(100 - a) {
                let x = [
                    a as f64 / 100.0,
                    b as f64 / 100.0,
                    (100 - a - b) as f64 / 100.0,
                ];
                best = best.min(cost(&x));
            }
        }
        best
    }

    #[test]
    fn water_filling_matches_the_grid_and_scales_to_eight() {
        let p = SplitProvider::new;
        // The herd: 25, 35, 60 servers; 200, 350, 600 ms; 250 requests/s.
        let herd = [
            p(Some(25), 207_000.0),
            p(Some(35), 362_000.0),
            p(Some(60), 620_000.0),
        ];
        let rate = 250.0 / 1e6;
        let x = optimal_split(&herd, rate);
        let water = cost(&herd, &x, rate);
        assert!(water <= grid_split(&herd, rate) * 1.0001, "{x:?}");
        let mixed = [
            p(Some(25), 207_000.0),
            p(None, 500_000.0),
            p(Some(60), 620_000.0),
        ];
        let x = optimal_split(&mixed, rate);
        assert!(
            cost(&mixed, &x, rate) <= grid_split(&mixed, rate) * 1.0001,
            "{x:?}"
        );
        let eight: Vec<SplitProvider> = (0..8)
            .map(|i| p(Some(10 + 5 * i), 100_000.0 * f64::from(i + 1)))
            .collect();
        let x = optimal_split(&eight, 400.0 / 1e6);
        assert!((x.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{x:?}");
        assert!(x[0] > x[7], "{x:?}");
        // Overloaded: shares follow capacity.
        let x = optimal_split(&[p(Some(1), 1000.0), p(Some(3), 1000.0)], 1.0);
        assert!((x[1] - 0.75).abs() < 1e-9, "{x:?}");
    }

    #[test]
    fn serves_up_to_servers_then_queues_fifo() {
        let mut q = Queue::new(2);
        assert!(q.arrive(1, 0));
        assert!(q.arrive(2, 0));
        assert!(!q.arrive(3, 5));
        assert!(!q.arrive(4, 6));
        assert_eq!(q.load(), 4);
        assert_eq!(q.start_waiting(), None);
        q.depart();
        assert_eq!(q.start_waiting(), Some((3, 5)));
        q.depart();
        assert_eq!(q.start_waiting(), Some((4, 6)));
        assert_eq!(q.load(), 2);
        q.depart();
        q.depart();
        assert_eq!(q.start_waiting(), None);
        assert_eq!(q.load(), 0);
        q.depart();
        assert_eq!(q.load(), 0);
        // Fewer servers: the busy ones finish, nobody new starts until below the new count.
        for i in 0..3 {
            q.arrive(i, 0);
        }
        q.set_servers(1);
        q.depart();
        assert_eq!(q.start_waiting(), None);
        q.depart();
        assert_eq!(q.start_waiting(), Some((2, 0)));
        // More servers: several waiting requests start at once.
        q.arrive(3, 1);
        q.arrive(4, 1);
        q.set_servers(3);
        assert_eq!(q.start_waiting(), Some((3, 1)));
        assert_eq!(q.start_waiting(), Some((4, 1)));
    }

    #[test]
    fn expected_wait_grows_with_queue() {
        let mut q = Queue::new(4);
        assert_eq!(q.expected_wait(100.0), 0.0);
        for i in 0..4 {
            q.arrive(i, 0);
        }
        assert_eq!(q.expected_wait(100.0), 25.0);
        for i in 4..8 {
            q.arrive(i, 0);
        }
        assert_eq!(q.expected_wait(100.0), 125.0);
        assert_eq!(Queue::new(0).servers(), 1);
    }
}
