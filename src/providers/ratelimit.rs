//! How long a provider's refusal asks to wait.
//!
//! `Retry-After` comes as delta-seconds or an HTTP date, and `retry-after-ms` (OpenAI, Azure
//! OpenAI) in milliseconds. A header that is missing or malformed yields nothing; nothing here
//! panics on what a provider sends.

use http::HeaderMap;
use std::time::{Duration, SystemTime};

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
fn text<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name)?.to_str().ok().map(str::trim)
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
