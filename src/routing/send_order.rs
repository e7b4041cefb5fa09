//! Answers in the order their requests were sent.
//!
//! A proxy with many requests in flight at a candidate hears the fast ones first: of a burst
//! sent together, the first answers back are the burst's fastest. A mean over the first answers
//! in the order they come is biased low, and the congestion floor, the lowest such mean, keeps
//! that bias for good. [`SendOrder`] holds each answer until no request sent before it still
//! waits for its first chunk, then hands it on in send order: the answers it has handed on are
//! always a prefix of the requests by send time, whose mean is free of that bias. At a sidecar
//! with one request in flight at a time every answer goes straight through.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Answers held until every request sent before them has stopped waiting (one per mode).
#[derive(Debug, Default)]
pub struct SendOrder {
    /// (send time µs, latency µs) of the answers held, ascending by send time.
    held: Mutex<VecDeque<(u64, f64)>>,
}

impl SendOrder {
    /// Takes the answer to a request sent at `sent_us` that took `latency_us`, and hands
    /// `release` every answer held, this one included, that no waiting request was sent before,
    /// in send order. `oldest_waiting_us` is the send time of the oldest request still waiting
    /// for its first chunk (`None`: none waits). Past `max_held` answers held, the oldest are
    /// handed on anyway, which bounds the memory a request that never answers can pin.
    pub(crate) fn answer(
        &self,
        sent_us: u64,
        latency_us: f64,
        oldest_waiting_us: Option<u64>,
        max_held: usize,
        mut release: impl FnMut(f64),
    ) {
        let mut held = match self.held.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let at = held.partition_point(|&(t, _)| t <= sent_us);
        held.insert(at, (sent_us, latency_us));
        while let Some(&(sent, latency)) = held.front() {
            let nothing_earlier_waits = oldest_waiting_us.is_none_or(|oldest| sent < oldest);
            if !(nothing_earlier_waits || held.len() > max_held) {
                break;
            }
            held.pop_front();
            release(latency);
        }
    }

    /// How many answers are held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.lock().map_or(0, |g| g.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(order: &SendOrder, sent: u64, latency: f64, oldest: Option<u64>) -> Vec<f64> {
        let mut out = Vec::new();
        order.answer(sent, latency, oldest, 64, |x| out.push(x));
        out
    }

    #[test]
    fn an_answer_that_nothing_earlier_waits_for_goes_straight_through() {
        let order = SendOrder::default();
        assert_eq!(feed(&order, 10, 5.0, None), vec![5.0]);
        // A request sent later is still waiting: it does not hold an earlier answer back.
        assert_eq!(feed(&order, 20, 7.0, Some(30)), vec![7.0]);
        assert_eq!(order.held(), 0);
    }

    #[test]
    fn answers_that_overtook_an_earlier_request_wait_for_it_then_follow_send_order() {
        let order = SendOrder::default();
        // Sent at 1, 2, 3, 4; the one sent at 1 is slow, 3 answers before 2.
        assert!(feed(&order, 3, 30.0, Some(1)).is_empty());
        assert!(feed(&order, 2, 20.0, Some(1)).is_empty());
        assert_eq!(order.held(), 2);
        // Request 1 answers: nothing waits before 4 any more.
        assert_eq!(feed(&order, 1, 100.0, Some(4)), vec![100.0, 20.0, 30.0]);
        assert_eq!(order.held(), 0);
    }

    #[test]
    fn a_burst_hands_on_its_slow_answers_with_its_fast_ones() {
        // A burst of 50 sent together answers fastest first: the first 25 answers back average
        // far below the burst's mean, while the answers handed on are a prefix by send time.
        let order = SendOrder::default();
        let latency = |k: u64| 100.0 + 10.0 * ((k * 37) % 50) as f64;
        let mut by_latency: Vec<u64> = (0..50).collect();
        by_latency.sort_by(|a, b| latency(*a).total_cmp(&latency(*b)));
        let mut waiting: Vec<u64> = (0..50).collect();
        let (mut arrived, mut released) = (Vec::new(), Vec::new());
        for &k in &by_latency[..25] {
            waiting.retain(|&w| w != k);
            arrived.push(latency(k));
            order.answer(k, latency(k), waiting.first().copied(), 64, |x| {
                released.push(x)
            });
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let burst_mean = mean(&(0..50).map(latency).collect::<Vec<_>>());
        assert!(mean(&arrived) < 0.7 * burst_mean, "{}", mean(&arrived));
        assert!(!released.is_empty());
        let prefix: Vec<f64> = (0..released.len() as u64).map(latency).collect();
        assert_eq!(released, prefix);
    }

    #[test]
    fn a_request_that_never_answers_pins_at_most_max_held() {
        let order = SendOrder::default();
        let mut released = 0;
        for k in 1..=100 {
            order.answer(k, 1.0, Some(0), 8, |_| released += 1);
        }
        assert_eq!(order.held(), 8);
        assert_eq!(released, 92);
        // With nothing held back, the order is the arrival order.
        let plain = SendOrder::default();
        let mut out = Vec::new();
        for (k, x) in [(3, 3.0), (1, 1.0), (2, 2.0)] {
            plain.answer(k, x, Some(0), 0, |v| out.push(v));
        }
        assert_eq!(out, vec![3.0, 1.0, 2.0]);
    }
}
