//! The quota a provider announces on each of its responses, fed into its candidate's pacing
//! (see [`crate::routing::quota`]).

use super::ctx::RequestCtx;
use crate::providers::ratelimit::{Quota, RateLimits};
use crate::routing::quota::QuotaParams;
use crate::routing::{now_us, CandidateStats, QuotaKind};
use pingora::http::ResponseHeader;
use std::time::{Duration, SystemTime};

/// Longest reset honoured, so one odd header cannot bench a candidate for hours (as for
/// `Retry-After`).
pub const MAX_RESET: Duration = Duration::from_secs(super::outcome::MAX_RETRY_AFTER_SECS);

/// Reads the rate-limit headers of a provider response (any status) into the routed
/// candidate's quota state: the request quota, and the token quota closest to running out.
/// A response without them, or with malformed ones, changes nothing.
pub fn observe(resp: &ResponseHeader, ctx: &RequestCtx, pacing: &QuotaParams) {
    let Some(route) = &ctx.route else {
        return;
    };
    record(
        &route.candidate.stats,
        &resp.headers,
        SystemTime::now(),
        pacing,
    );
}

/// Records what `headers`, received at `now`, announce about `stats`'s quotas.
fn record(
    stats: &CandidateStats,
    headers: &http::HeaderMap,
    now: SystemTime,
    pacing: &QuotaParams,
) {
    let limits = RateLimits::from_headers(headers, now);
    if limits.is_empty() {
        return;
    }
    let at = now_us();
    for (kind, quota) in [
        (QuotaKind::Requests, limits.requests),
        (QuotaKind::Tokens, limits.tightest_tokens()),
    ] {
        observe_one(stats, kind, quota, at, pacing);
    }
}

/// One quota reading, when it carries a remaining count.
fn observe_one(
    stats: &CandidateStats,
    kind: QuotaKind,
    quota: Quota,
    at: u64,
    pacing: &QuotaParams,
) {
    let Some(remaining) = quota.remaining else {
        return;
    };
    let reset_in_us = quota.reset.map(|r| r.min(MAX_RESET).as_micros() as u64);
    stats.observe_quota(kind, remaining, quota.limit, reset_in_us, at, pacing);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| {
                (
                    http::HeaderName::from_static(n),
                    http::HeaderValue::from_static(v),
                )
            })
            .collect()
    }

    #[test]
    fn requests_and_tokens_are_read_from_any_response() {
        let stats = CandidateStats::new();
        let h = headers(&[
            ("x-ratelimit-limit-requests", "100"),
            ("x-ratelimit-remaining-requests", "42"),
            ("x-ratelimit-reset-requests", "1.5s"),
            ("x-ratelimit-remaining-tokens", "900"),
        ]);
        record(&stats, &h, SystemTime::now(), &QuotaParams::default());
        let r = stats.quota(QuotaKind::Requests).unwrap();
        assert_eq!((r.remaining, r.limit), (42, Some(100)));
        let reset_in = r.reset_at_us.unwrap().saturating_sub(now_us());
        assert!((1_000_000..=1_500_000).contains(&reset_in), "{reset_in}");
        let t = stats.quota(QuotaKind::Tokens).unwrap();
        assert_eq!((t.remaining, t.limit, t.reset_at_us), (900, None, None));
        assert_eq!(stats.pacing(now_us()), 1.0);
    }

    #[test]
    fn anthropic_token_quotas_report_the_tightest() {
        let stats = CandidateStats::new();
        let h = headers(&[
            ("anthropic-ratelimit-tokens-limit", "1000"),
            ("anthropic-ratelimit-tokens-remaining", "900"),
            ("anthropic-ratelimit-output-tokens-limit", "100"),
            ("anthropic-ratelimit-output-tokens-remaining", "20"),
        ]);
        record(&stats, &h, SystemTime::now(), &QuotaParams::default());
        let t = stats.quota(QuotaKind::Tokens).unwrap();
        assert_eq!((t.remaining, t.limit), (20, Some(100)));
        assert!(stats.quota(QuotaKind::Requests).is_none());
    }

    #[test]
    fn an_exhausted_quota_backs_off_at_most_for_the_longest_reset_honoured() {
        let stats = CandidateStats::new();
        let h = headers(&[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "100h"),
        ]);
        record(&stats, &h, SystemTime::now(), &QuotaParams::default());
        let now = now_us();
        assert!(stats.backed_off(now));
        let deadline = stats.back_off_deadline_us().unwrap();
        assert!(deadline <= now + MAX_RESET.as_micros() as u64, "{deadline}");
    }

    #[test]
    fn missing_or_malformed_headers_change_nothing() {
        let stats = CandidateStats::new();
        record(
            &stats,
            &headers(&[("x-request-id", "r")]),
            SystemTime::now(),
            &QuotaParams::default(),
        );
        let garbage = headers(&[
            ("x-ratelimit-remaining-requests", "lots"),
            ("x-ratelimit-limit-requests", "100"),
            ("anthropic-ratelimit-tokens-remaining", "-3"),
        ]);
        record(&stats, &garbage, SystemTime::now(), &QuotaParams::default());
        assert!(stats.quota(QuotaKind::Requests).is_none());
        assert!(stats.quota(QuotaKind::Tokens).is_none());
        assert!(!stats.needs_time());
        assert_eq!(stats.pacing(now_us()), 1.0);
    }
}
