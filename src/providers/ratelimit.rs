//! What providers announce about their quota on every response, and how long a refusal asks to
//! wait.
//!
//! OpenAI, Azure OpenAI, Groq and OpenAI-compatible servers send `x-ratelimit-{remaining,limit,
//! reset}-{requests,tokens}`, the reset as a Go-style duration (`1s`, `6m0s`, `59.56ms`).
//! Anthropic sends `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,
//! limit,reset}`, the reset as an RFC 3339 time. `Retry-After` comes as delta-seconds or an HTTP
//! date, and `retry-after-ms` (OpenAI, Azure OpenAI) in milliseconds. A header that is missing
//! or malformed yields nothing; nothing here panics on what a provider sends.

use http::HeaderMap;
use std::time::{Duration, SystemTime};

/// One quota as a provider announced it; each figure is `None` when its header was absent or
/// malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quota {
    /// How much is left in the current window.
    pub remaining: Option<u64>,
    /// The window's size.
    pub limit: Option<u64>,
    /// Time from the response until the window refills (zero when the reset is already past).
    pub reset: Option<Duration>,
}

/// The quotas one response announced, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateLimits {
    /// Requests per window.
    pub requests: Quota,
    /// Tokens per window (Anthropic: the most restrictive of its token limits).
    pub tokens: Quota,
    /// Input tokens per window (Anthropic).
    pub input_tokens: Quota,
    /// Output tokens per window (Anthropic).
    pub output_tokens: Quota,
}

impl Quota {
    /// Whether no figure was announced.
    pub fn is_empty(&self) -> bool {
        *self == Quota::default()
    }

    /// Sets the figure `field` (`remaining`, `limit` or `reset`) from a header's `value`,
    /// the reset read by `reset`; an unknown field or a malformed value sets nothing.
    fn set(&mut self, field: &str, value: Option<&str>, reset: impl Fn(&str) -> Option<Duration>) {
        let Some(value) = value else {
            return;
        };
        match field {
            "remaining" => self.remaining = count(value),
            "limit" => self.limit = count(value),
            "reset" => self.reset = reset(value),
            _ => {}
        }
    }

    /// The first announced figure of each field, `self`'s before `other`'s.
    fn or(self, other: Quota) -> Quota {
        Quota {
            remaining: self.remaining.or(other.remaining),
            limit: self.limit.or(other.limit),
            reset: self.reset.or(other.reset),
        }
    }
}

impl RateLimits {
    /// Reads the quota headers of a response received at `now` (OpenAI-style ones win where a
    /// provider sends both families). One pass over the header names, allocation-free: a
    /// response without quota headers costs a prefix comparison per header.
    pub fn from_headers(headers: &HeaderMap, now: SystemTime) -> RateLimits {
        // OpenAI-style requests and tokens; Anthropic requests, tokens, input and output tokens.
        let mut openai = [Quota::default(); 2];
        let mut anthropic = [Quota::default(); 4];
        for name in headers.keys() {
            let n = name.as_str();
            if let Some(rest) = n.strip_prefix("x-ratelimit-") {
                // `x-ratelimit-{field}-{kind}`
                let Some((field, kind)) = rest.split_once('-') else {
                    continue;
                };
                let slot = match kind {
                    "requests" => 0,
                    "tokens" => 1,
                    _ => continue,
                };
                let value = text(headers, name);
                openai[slot].set(field, value, go_duration);
            } else if let Some(rest) = n.strip_prefix("anthropic-ratelimit-") {
                // `anthropic-ratelimit-{kind}-{field}`
                let Some((kind, field)) = rest.rsplit_once('-') else {
                    continue;
                };
                let slot = match kind {
                    "requests" => 0,
                    "tokens" => 1,
                    "input-tokens" => 2,
                    "output-tokens" => 3,
                    _ => continue,
                };
                let value = text(headers, name);
                anthropic[slot].set(field, value, |v| until_rfc3339(v, now));
            }
        }
        RateLimits {
            requests: openai[0].or(anthropic[0]),
            tokens: openai[1].or(anthropic[1]),
            input_tokens: anthropic[2],
            output_tokens: anthropic[3],
        }
    }

    /// The token quota closest to running out: of `tokens`, `input_tokens` and
    /// `output_tokens` (Anthropic announces all three), the announced one with the lowest
    /// remaining ÷ limit (an exhausted one first; one without a limit counts as full), or
    /// an empty quota when none announced a remaining count.
    pub fn tightest_tokens(&self) -> Quota {
        let fill = |q: &Quota| match (q.remaining, q.limit) {
            (Some(0), _) => 0.0,
            (Some(r), Some(l)) if l > 0 => r as f64 / l as f64,
            _ => 1.0,
        };
        [self.tokens, self.input_tokens, self.output_tokens]
            .into_iter()
            .filter(|q| q.remaining.is_some())
            .fold(None, |best: Option<Quota>, q| match best {
                Some(b) if fill(&b) <= fill(&q) => Some(b),
                _ => Some(q),
            })
            .unwrap_or_default()
    }

    /// Whether the response announced no quota at all.
    pub fn is_empty(&self) -> bool {
        [
            self.requests,
            self.tokens,
            self.input_tokens,
            self.output_tokens,
        ]
        .iter()
        .all(Quota::is_empty)
    }
}

/// How long a response received at `now` asks the client to wait: `retry-after-ms` when
/// present and valid, else `Retry-After` as delta-seconds (a fraction accepted) or an HTTP date
/// (zero once past).
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(ns) = text(headers, "retry-after-ms").and_then(|v| scaled(v, 1_000_000)) {
        return Some(Duration::from_nanos(ns));
    }
    let value = text(headers, "retry-after")?;
    match decimal_nanos(value) {
        Some(ns) => Some(Duration::from_nanos(ns)),
        None => until_http_date(value, now),
    }
}

/// A header's (first) value as trimmed text, if present and visible ASCII.
fn text<K: http::header::AsHeaderName>(headers: &HeaderMap, name: K) -> Option<&str> {
    headers.get(name)?.to_str().ok().map(str::trim)
}

/// A header value as a non-negative integer count.
fn count(v: &str) -> Option<u64> {
    // `u64::from_str` accepts a leading '+'; a count is digits only.
    (!v.is_empty() && v.bytes().all(|c| c.is_ascii_digit()))
        .then(|| v.parse().ok())
        .flatten()
}

/// Parses a Go `time.Duration` string (`1s`, `6m0s`, `59.56ms`, `2h3m4.5s`, `1.5µs`, `0`), as
/// OpenAI-style reset headers carry; a bare number is seconds. Negative or over ~584 years:
/// `None`.
pub fn go_duration(s: &str) -> Option<Duration> {
    if let Some(ns) = decimal_nanos(s) {
        return Some(Duration::from_nanos(ns));
    }
    let mut rest = s;
    let mut total: u64 = 0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .bytes()
            .position(|c| !(c.is_ascii_digit() || c == b'.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(after.len(), |(i, _)| i);
        let (unit, after) = after.split_at(unit_len);
        let unit_ns: u64 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        total = total.checked_add(scaled(number, unit_ns)?)?;
        rest = after;
    }
    Some(Duration::from_nanos(total))
}

/// A non-negative decimal number of seconds (`30`, `1.5`) in nanoseconds.
fn decimal_nanos(s: &str) -> Option<u64> {
    scaled(s, 1_000_000_000)
}

/// `number` (digits with at most one '.', digits on at least one side) times `unit` nanoseconds;
/// fractions finer than a nanosecond are dropped.
fn scaled(number: &str, unit: u64) -> Option<u64> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |d: &str| d.bytes().all(|c| c.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let mut part: u128 = 0;
    let mut scale: u128 = 1;
    for c in fraction.bytes().take(18) {
        part = part * 10 + u128::from(c - b'0');
        scale *= 10;
    }
    let total = u128::from(whole).checked_mul(u128::from(unit))? + part * u128::from(unit) / scale;
    u64::try_from(total).ok()
}

/// Time from `now` until the RFC 3339 instant `s` (zero when it is past).
fn until_rfc3339(s: &str, now: SystemTime) -> Option<Duration> {
    let at: jiff::Timestamp = s.parse().ok()?;
    Some(until(at, now))
}

/// Time from `now` until the HTTP date `s` (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`).
fn until_http_date(s: &str, now: SystemTime) -> Option<Duration> {
    let at = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(s)
        .ok()?;
    Some(until(at, now))
}

/// Time from `now` until `at`, zero when `at` is not after `now`.
fn until(at: jiff::Timestamp, now: SystemTime) -> Duration {
    let Ok(now) = jiff::Timestamp::try_from(now) else {
        return Duration::ZERO;
    };
    let ahead = at.as_nanosecond() - now.as_nanosecond();
    if ahead <= 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(u64::try_from(ahead).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
