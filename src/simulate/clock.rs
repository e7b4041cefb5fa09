//! Virtual time and the event queue of the discrete-event simulator.
//!
//! Time is a plain `u64` of microseconds that only moves when an event is popped, so a run never
//! reads the wall clock. Events due at the same instant pop in the order they were scheduled
//! (a sequence number breaks ties), which is what makes a run reproducible bit for bit.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Virtual time or duration in microseconds.
pub type Micros = u64;

/// One millisecond of virtual time.
pub const MS: Micros = 1_000;

/// One second of virtual time.
pub const SEC: Micros = 1_000_000;

/// A scheduled event: due time, tie-breaking sequence number, payload.
#[derive(Debug)]
struct Entry<E> {
    at: Micros,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}

impl<E> Eq for Entry<E> {}

impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<E> Ord for Entry<E> {
    /// Reversed so the std max-heap pops the earliest (then first-scheduled) entry.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// Priority queue of future events plus the current virtual time.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
    now: Micros,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// Empty queue at time 0.
    pub fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            seq: 0,
            now: 0,
        }
    }

    /// Current virtual time: the due time of the last popped event.
    pub fn now(&self) -> Micros {
        self.now
    }

    /// Schedules `event` at `at`; a time in the past is clamped to now (time never goes back).
    pub fn schedule(&mut self, at: Micros, event: E) {
        let at = at.max(self.now);
        self.heap.push(Entry {
            at,
            seq: self.seq,
            event,
        });
        self.seq += 1;
    }

    /// Removes the next event and advances the clock to its due time.
    pub fn pop(&mut self) -> Option<(Micros, E)> {
        let Entry { at, event, .. } = self.heap.pop()?;
        self.now = at;
        Some((at, event))
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_order_and_advances_clock() {
        let mut q = EventQueue::new();
        q.schedule(30, "c");
        q.schedule(10, "a");
        q.schedule(20, "b");
        assert_eq!(q.len(), 3);
        assert_eq!(q.pop(), Some((10, "a")));
        assert_eq!(q.now(), 10);
        assert_eq!(q.pop(), Some((20, "b")));
        assert_eq!(q.pop(), Some((30, "c")));
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
        assert_eq!(q.now(), 30);
    }

    #[test]
    fn same_instant_is_fifo() {
        let mut q = EventQueue::new();
        for i in 0..100 {
            q.schedule(5, i);
        }
        let order: Vec<i32> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn past_times_clamp_to_now() {
        let mut q = EventQueue::new();
        q.schedule(100, 1);
        assert_eq!(q.pop(), Some((100, 1)));
        q.schedule(50, 2);
        assert_eq!(q.pop(), Some((100, 2)));
    }

    #[test]
    fn interleaved_scheduling_stays_ordered() {
        let mut q = EventQueue::new();
        q.schedule(0, 0u64);
        let mut scheduled = 1;
        let mut seen = Vec::new();
        while let Some((t, e)) = q.pop() {
            seen.push(t);
            // Each event schedules two more at pseudo-random offsets, up to 1000 in all.
            for step in [7919, 104_729] {
                if scheduled < 1000 {
                    q.schedule(t + (e * step) % 13, e + 1);
                    scheduled += 1;
                }
            }
        }
        assert_eq!(seen.len(), 1000);
        assert!(seen.windows(2).all(|w| w[0] <= w[1]));
    }
}
