//! A per-window request quota, announced on every answer in rate-limit headers as providers
//! do, and enforced with a `429` carrying `Retry-After` once the window's quota is used up.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Which family of rate-limit headers announces the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuotaHeaders {
    /// OpenAI, Azure OpenAI, Groq: `x-ratelimit-{limit,remaining,reset}-requests`, the reset
    /// as a Go duration (`1.5s`).
    #[default]
    OpenAi,
    /// Anthropic: `anthropic-ratelimit-requests-{limit,remaining,reset}`, the reset as an
    /// RFC 3339 time.
    Anthropic,
}

/// The quota's setting and the current window's count.
#[derive(Debug, Clone, Copy)]
struct Window {
    limit: u64,
    length: Duration,
    headers: QuotaHeaders,
    /// When the first window started; windows follow each other from there.
    origin: Instant,
    /// Index of the window `used` counts in.
    index: u64,
    used: u64,
}

/// What the quota says about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No quota set, or within it: answer as usual.
    Admit,
    /// The window's quota is used up: answer `429`.
    Refuse,
}

/// A request quota per fixed window (off until set).
#[derive(Debug, Default)]
pub(crate) struct RequestQuota {
    /// Whether a quota is set, read before taking the lock so a provider without one pays a
    /// load per request.
    on: AtomicBool,
    window: Mutex<Option<Window>>,
}

impl RequestQuota {
    /// Sets a quota of `limit` requests per `length` (windows start now), announced in
    /// `headers`; a zero `limit` or `length` turns it off.
    pub(crate) fn set(&self, limit: u64, length: Duration, headers: QuotaHeaders) {
        let window = (limit > 0 && !length.is_zero()).then(|| Window {
            limit,
            length,
            headers,
            origin: Instant::now(),
            index: 0,
            used: 0,
        });
        *self.window.lock().unwrap_or_else(|e| e.into_inner()) = window;
        self.on.store(window.is_some(), Ordering::Relaxed);
    }

    /// The current setting: limit, window length and header family.
    pub(crate) fn get(&self) -> Option<(u64, Duration, QuotaHeaders)> {
        let window = *self.window.lock().unwrap_or_else(|e| e.into_inner());
        window.map(|w| (w.limit, w.length, w.headers))
    }

    /// Counts one request arriving at `now` against the quota and appends the headers
    /// announcing what is left (and, when refused, `Retry-After` until the reset) to `out`.
    pub(crate) fn take(&self, now: Instant, out: &mut Vec<u8>) -> Verdict {
        if !self.on.load(Ordering::Relaxed) {
            return Verdict::Admit;
        }
        let mut guard = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let Some(w) = guard.as_mut() else {
            return Verdict::Admit;
        };
        let length_ns = w.length.as_nanos().max(1);
        let index = (now.saturating_duration_since(w.origin).as_nanos() / length_ns) as u64;
        if index != w.index {
            w.index = index;
            w.used = 0;
        }
        let window_end = w.origin + w.length * (u32::try_from(index + 1).unwrap_or(u32::MAX));
        let reset = window_end.saturating_duration_since(now);
        let verdict = if w.used < w.limit {
            w.used += 1;
            Verdict::Admit
        } else {
            Verdict::Refuse
        };
        let remaining = w.limit - w.used;
        push_headers(out, w.headers, w.limit, remaining, reset);
        if verdict == Verdict::Refuse {
            let ms = reset.as_millis().max(1);
            let _ = write!(
                out,
                "retry-after: {}\r\nretry-after-ms: {ms}\r\n",
                ms.div_ceil(1000)
            );
        }
        verdict
    }
}

/// Appends the rate-limit headers of `family`.
fn push_headers(out: &mut Vec<u8>, family: QuotaHeaders, limit: u64, left: u64, reset: Duration) {
    let _ = match family {
        QuotaHeaders::OpenAi => write!(
            out,
            "x-ratelimit-limit-requests: {limit}\r\nx-ratelimit-remaining-requests: {left}\r\n\
             x-ratelimit-reset-requests: {}\r\n",
            go_duration(reset)
        ),
        QuotaHeaders::Anthropic => {
            let at = jiff::Timestamp::try_from(SystemTime::now() + reset)
                .map(|t| format!("{t:.3}"))
                .unwrap_or_default();
            write!(
                out,
                "anthropic-ratelimit-requests-limit: {limit}\r\n\
                 anthropic-ratelimit-requests-remaining: {left}\r\n\
                 anthropic-ratelimit-requests-reset: {at}\r\n"
            )
        }
    };
}

/// `d` to the millisecond as Go prints a `time.Duration`: `250ms`, `1.5s`, `6m0s`, `1h2m3s`.
fn go_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, m, s_ms) = (ms / 3_600_000, ms / 60_000 % 60, ms % 60_000);
    let mut seconds = format!("{}.{:03}", s_ms / 1000, s_ms % 1000);
    while seconds.ends_with('0') {
        seconds.pop();
    }
    if seconds.ends_with('.') {
        seconds.pop();
    }
    match (h, m) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ratelimit::RateLimits;

    fn parse(out: &[u8]) -> http::HeaderMap {
        let text = std::str::from_utf8(out).unwrap();
        text.split("\r\n")
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(": ").unwrap();
                (
                    http::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    http::HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn go_durations_read_back() {
        for (d, text) in [
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(2), "2s"),
            (Duration::from_secs(360), "6m0s"),
            (Duration::from_millis(3_723_040), "1h2m3.04s"),
        ] {
            assert_eq!(go_duration(d), text);
            assert_eq!(crate::providers::ratelimit::go_duration(text), Some(d));
        }
    }

    #[test]
    fn off_until_set_and_nothing_announced() {
        let q = RequestQuota::default();
        let mut out = Vec::new();
        assert_eq!(q.take(Instant::now(), &mut out), Verdict::Admit);
        assert!(out.is_empty() && q.get().is_none());
        q.set(0, Duration::from_secs(1), QuotaHeaders::OpenAi);
        assert_eq!(q.take(Instant::now(), &mut out), Verdict::Admit);
        assert!(out.is_empty());
    }

    #[test]
    fn a_window_counts_down_refuses_when_used_up_and_refills() {
        let q = RequestQuota::default();
        q.set(2, Duration::from_secs(10), QuotaHeaders::OpenAi);
        let t0 = Instant::now();
        let read = |at: Instant| {
            let mut out = Vec::new();
            let verdict = q.take(at, &mut out);
            (verdict, parse(&out))
        };
        let (v, h) = read(t0);
        assert_eq!(v, Verdict::Admit);
        assert_eq!(h["x-ratelimit-limit-requests"], "2");
        assert_eq!(h["x-ratelimit-remaining-requests"], "1");
        let reset = RateLimits::from_headers(&h, SystemTime::now())
            .requests
            .reset;
        assert!(reset.unwrap() > Duration::from_secs(9), "{reset:?}");
        assert!(h.get("retry-after").is_none());
        let (v, h) = read(t0 + Duration::from_secs(4));
        assert_eq!(
            (v, &h["x-ratelimit-remaining-requests"]),
            (Verdict::Admit, &"0".parse().unwrap())
        );
        let (v, h) = read(t0 + Duration::from_millis(8_500));
        assert_eq!(v, Verdict::Refuse);
        assert_eq!(h["x-ratelimit-remaining-requests"], "0");
        assert_eq!(h["retry-after"], "2");
        let wait = crate::providers::ratelimit::retry_after(&h, SystemTime::now()).unwrap();
        assert!(
            wait <= Duration::from_millis(1_500) && wait > Duration::from_secs(1),
            "{wait:?}"
        );
        // The next window starts full.
        let (v, h) = read(t0 + Duration::from_secs(10));
        assert_eq!(v, Verdict::Admit);
        assert_eq!(h["x-ratelimit-remaining-requests"], "1");
    }

    #[test]
    fn anthropic_headers_announce_the_reset_as_a_time() {
        let q = RequestQuota::default();
        q.set(5, Duration::from_secs(3), QuotaHeaders::Anthropic);
        assert_eq!(
            q.get(),
            Some((5, Duration::from_secs(3), QuotaHeaders::Anthropic))
        );
        let mut out = Vec::new();
        assert_eq!(q.take(Instant::now(), &mut out), Verdict::Admit);
        let limits = RateLimits::from_headers(&parse(&out), SystemTime::now());
        assert_eq!(limits.requests.remaining, Some(4));
        assert_eq!(limits.requests.limit, Some(5));
        let reset = limits.requests.reset.unwrap();
        assert!(
            reset > Duration::from_secs(2) && reset <= Duration::from_secs(3),
            "{reset:?}"
        );
    }
}
