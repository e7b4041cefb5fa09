//! The time sturnus itself adds to a routed request (`sturnus_overhead_seconds`): from the end
//! of the client's request body to the request leaving for the provider, plus from the
//! provider's response header to the first write to the client.
//!
//! Four marks, one `Instant` each (no allocation): the body fully received
//! (`admission::admit`), the provider's request about to be written (`forward::send`, after the
//! connection is in hand: opening a new connection is time on the network to the provider, as
//! a client calling it directly pays, and is left out), the provider's response header read,
//! and the first write to the client handed off ([`handed_off`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A request's overhead marks, filled in as it goes.
#[derive(Default)]
pub struct OverheadMarks {
    /// When the client's request body was fully received.
    pub body_received: Option<Instant>,
    /// From the body to the first upstream write, without opening a connection; set once (a
    /// resend on a stale pooled connection is the provider's time, not sturnus's).
    pub before_upstream: Option<Duration>,
    /// When the provider's response header was read.
    pub header_received: Option<Instant>,
    /// Whether the overhead was already observed (only the first write to the client counts).
    pub observed: bool,
}

impl OverheadMarks {
    /// Marks the provider's request about to be written, `connecting` after the body was
    /// received having gone into opening a new connection (zero for a pooled one).
    pub fn leaving(&mut self, now: Instant, connecting: Duration) {
        if self.before_upstream.is_none() {
            if let Some(body) = self.body_received {
                self.before_upstream = Some(
                    now.saturating_duration_since(body)
                        .saturating_sub(connecting),
                );
            }
        }
    }

    /// The whole overhead once the first write to the client was handed off at `now`; `None`
    /// when a mark is missing or it was already taken.
    pub fn first_write(&mut self, now: Instant) -> Option<Duration> {
        if self.observed {
            return None;
        }
        let out = now.saturating_duration_since(self.header_received?);
        self.observed = true;
        Some(self.before_upstream? + out)
    }
}

/// A write to the client, timed at its first poll: when the write is done at once, the moment
/// it returns; when the client's socket buffer is full, the moment it first has to wait (what
/// follows is the client's reading speed, not sturnus's work).
pub struct HandedOff<'a, F> {
    write: Pin<&'a mut F>,
    at: &'a mut Option<Instant>,
}

/// Times `write` as [`HandedOff`] describes, into `at` (left alone if already set).
pub fn handed_off<'a, F: Future>(
    write: Pin<&'a mut F>,
    at: &'a mut Option<Instant>,
) -> HandedOff<'a, F> {
    HandedOff { write, at }
}

impl<F: Future> Future for HandedOff<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let polled = this.write.as_mut().poll(cx);
        if this.at.is_none() {
            *this.at = Some(Instant::now());
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn overhead_is_both_gaps_without_connecting_or_the_providers_time() {
        let t0 = Instant::now();
        let mut marks = OverheadMarks {
            body_received: Some(t0),
            ..OverheadMarks::default()
        };
        // 5 ms after the body, 3 of them opening a connection: 2 ms before upstream.
        marks.leaving(t0 + 5 * MS, 3 * MS);
        // A resend later changes nothing.
        marks.leaving(t0 + 50 * MS, Duration::ZERO);
        assert_eq!(marks.before_upstream, Some(2 * MS));
        // The provider takes 100 ms; its header to the first write takes 1 ms.
        marks.header_received = Some(t0 + 105 * MS);
        assert_eq!(marks.first_write(t0 + 106 * MS), Some(3 * MS));
        // Only the first write counts.
        assert_eq!(marks.first_write(t0 + 900 * MS), None);
    }

    #[test]
    fn missing_marks_observe_nothing_and_time_never_goes_negative() {
        let t0 = Instant::now();
        let mut marks = OverheadMarks::default();
        marks.leaving(t0, Duration::ZERO);
        assert_eq!(marks.before_upstream, None);
        assert_eq!(marks.first_write(t0), None);

        let mut marks = OverheadMarks {
            body_received: Some(t0 + 10 * MS),
            ..OverheadMarks::default()
        };
        // Connecting longer than the gap (clock granularity) saturates at zero.
        marks.leaving(t0 + 11 * MS, 5 * MS);
        marks.header_received = Some(t0 + 20 * MS);
        assert_eq!(marks.first_write(t0 + 19 * MS), Some(Duration::ZERO));
    }

    #[test]
    fn a_write_is_timed_at_its_first_poll_even_when_it_must_wait() {
        let mut at = None;
        let mut pending = std::pin::pin!(std::future::pending::<()>());
        let mut cx = Context::from_waker(std::task::Waker::noop());
        {
            let mut timed = std::pin::pin!(handed_off(pending.as_mut(), &mut at));
            assert!(timed.as_mut().poll(&mut cx).is_pending());
        }
        let first = at.expect("timed at the first poll");
        {
            let mut timed = std::pin::pin!(handed_off(pending.as_mut(), &mut at));
            assert!(timed.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(at, Some(first));
    }
}
