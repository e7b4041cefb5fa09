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

/// Mean latency of a provider `(servers, mean service µs)` receiving `rate` requests per µs:
/// M/M/c for a capacity-limited one, the service time for an unlimited one (`None`).
fn provider_latency(servers: Option<u32>, service: f64, rate: f64) -> f64 {
    match servers {
        Some(c) => mmc_latency(c, rate, service),
        None => service,
    }
}

/// The static traffic split (in steps of 1%) minimising mean latency over providers
/// `(servers or unlimited, mean service µs)` at a total `rate` per µs: the herd's oracle. The
/// optimum routes by these shares at random, which is as good as any fixed policy can be. A
/// provider with an infinite service time (failing everything) gets nothing.
pub fn optimal_split(providers: &[(Option<u32>, f64)], rate: f64) -> Vec<f64> {
    const STEPS: usize = 100;
    fn search(
        providers: &[(Option<u32>, f64)],
        rate: f64,
        left: usize,
        prefix: &mut Vec<usize>,
        best: &mut (f64, Vec<usize>),
    ) {
        let i = prefix.len();
        if i + 1 == providers.len() {
            prefix.push(left);
            let cost: f64 = prefix
                .iter()
                .zip(providers)
                .map(|(&x, &(c, s))| {
                    let share = x as f64 / STEPS as f64;
                    if x == 0 {
                        0.0
                    } else {
                        share * provider_latency(c, s, share * rate)
                    }
                })
                .sum();
            if cost < best.0 {
                *best = (cost, prefix.clone());
            }
            prefix.pop();
            return;
        }
        for x in 0..=left {
            prefix.push(x);
            search(providers, rate, left - x, prefix, best);
            prefix.pop();
        }
    }
    if providers.is_empty() {
        return Vec::new();
    }
    let mut best = (f64::INFINITY, vec![0; providers.len()]);
    search(providers, rate, STEPS, &mut Vec::new(), &mut best);
    if !best.0.is_finite() {
        // Nothing can carry the load: the split that keeps the most providers stable.
        let n = providers.len() as f64;
        return vec![1.0 / n; providers.len()];
    }
    best.1.iter().map(|&x| x as f64 / STEPS as f64).collect()
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
        // Equal providers: an even split.
        let even = optimal_split(&[(Some(10), 100.0), (Some(10), 100.0)], 0.1);
        assert_eq!(even, vec![0.5, 0.5]);
        // A fast and a slow provider: most to the fast one, but not all.
        // 0.12 per µs x 100 µs = 12 busy servers' worth: more than the fast one has.
        let s = optimal_split(&[(Some(10), 100.0), (Some(10), 300.0)], 0.12);
        assert!(s[0] > 0.6 && s[0] < 1.0, "{s:?}");
        assert!((s.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        // An unlimited provider takes the overflow of a limited faster one; a dead one nothing.
        let s = optimal_split(
            &[(Some(10), 100.0), (None, 300.0), (None, f64::INFINITY)],
            0.12,
        );
        assert!(s[0] > 0.5 && s[0] < 0.84 && s[2] == 0.0, "{s:?}");
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
