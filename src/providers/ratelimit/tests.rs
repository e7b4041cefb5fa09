//! Unit tests for the rate-limit and `Retry-After` headers: every format providers send, and
//! garbage.

use super::*;
use std::time::UNIX_EPOCH;

/// 2024-04-17T18:29:00Z, the moment the test responses arrive.
fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_713_378_540)
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    map
}

fn secs(s: f64) -> Option<Duration> {
    Some(Duration::from_secs_f64(s))
}

#[test]
fn go_durations_in_every_unit() {
    let cases = [
        ("1s", secs(1.0)),
        ("6m0s", secs(360.0)),
        ("59.56ms", Some(Duration::from_micros(59_560))),
        ("2h3m4.5s", secs(7384.5)),
        ("7.66s", Some(Duration::from_millis(7660))),
        ("1m30.5s", secs(90.5)),
        ("100ns", Some(Duration::from_nanos(100))),
        ("1.5µs", Some(Duration::from_nanos(1500))),
        ("1.5μs", Some(Duration::from_nanos(1500))),
        ("2us", Some(Duration::from_micros(2))),
        ("0s", Some(Duration::ZERO)),
        ("0", Some(Duration::ZERO)),
        ("20", secs(20.0)),
        ("0.5", secs(0.5)),
        (".5s", secs(0.5)),
        ("5.s", secs(5.0)),
        ("1h", secs(3600.0)),
        ("1.0000000001s", Some(Duration::from_secs(1))),
    ];
    for (text, want) in cases {
        assert_eq!(go_duration(text), want, "{text:?}");
    }
}

#[test]
fn go_durations_reject_garbage_negative_and_overflow() {
    for text in [
        "",
        " ",
        "s",
        "1",
        "-1s",
        "-0s",
        "+1s",
        "1x",
        "1 s",
        "1.2.3s",
        ".s",
        "1e3s",
        "1S",
        "1sec",
        "abc",
        "1s-",
        "ms1",
        "1h-3m",
        "NaN",
        "inf",
        "99999999999999999999s",
        "6000000h",
        "18446744073709551616ns",
    ] {
        let got = go_duration(text);
        if text == "1" {
            assert_eq!(got, secs(1.0), "a bare number is seconds");
        } else {
            assert_eq!(got, None, "{text:?}");
        }
    }
    // The largest representable sum, and one step past it.
    assert_eq!(
        go_duration("18446744073709551615ns"),
        Some(Duration::from_nanos(u64::MAX))
    );
    assert_eq!(go_duration("18446744073709551615ns1ns"), None);
}

#[test]
fn openai_style_headers() {
    let h = headers(&[
        ("x-ratelimit-limit-requests", "10000"),
        ("x-ratelimit-limit-tokens", "1000000"),
        ("x-ratelimit-remaining-requests", "9999"),
        ("x-ratelimit-remaining-tokens", "999580"),
        ("x-ratelimit-reset-requests", "6ms"),
        ("x-ratelimit-reset-tokens", "2m59.56s"),
    ]);
    let got = RateLimits::from_headers(&h, now());
    assert_eq!(
        got.requests,
        Quota {
            remaining: Some(9999),
            limit: Some(10_000),
            reset: Some(Duration::from_millis(6)),
        }
    );
    assert_eq!(
        got.tokens,
        Quota {
            remaining: Some(999_580),
            limit: Some(1_000_000),
            reset: Some(Duration::from_millis(179_560)),
        }
    );
    assert!(got.input_tokens.is_empty() && got.output_tokens.is_empty());
    assert!(!got.is_empty());
}

#[test]
fn anthropic_headers_with_rfc3339_resets() {
    let h = headers(&[
        ("anthropic-ratelimit-requests-limit", "50"),
        ("anthropic-ratelimit-requests-remaining", "49"),
        ("anthropic-ratelimit-requests-reset", "2024-04-17T18:29:46Z"),
        ("anthropic-ratelimit-tokens-limit", "90000"),
        ("anthropic-ratelimit-tokens-remaining", "80000"),
        (
            "anthropic-ratelimit-tokens-reset",
            "2024-04-17T18:30:00.5+00:00",
        ),
        ("anthropic-ratelimit-input-tokens-limit", "40000"),
        ("anthropic-ratelimit-input-tokens-remaining", "39000"),
        (
            "anthropic-ratelimit-input-tokens-reset",
            "2024-04-17T20:29:01+02:00",
        ),
        ("anthropic-ratelimit-output-tokens-limit", "8000"),
        ("anthropic-ratelimit-output-tokens-remaining", "0"),
        // Already past when the response arrives: the window has refilled.
        (
            "anthropic-ratelimit-output-tokens-reset",
            "2024-04-17T18:28:00Z",
        ),
    ]);
    let got = RateLimits::from_headers(&h, now());
    assert_eq!(
        got.requests,
        Quota {
            remaining: Some(49),
            limit: Some(50),
            reset: secs(46.0),
        }
    );
    assert_eq!(got.tokens.reset, secs(60.5));
    assert_eq!(
        got.input_tokens,
        Quota {
            remaining: Some(39_000),
            limit: Some(40_000),
            reset: secs(1.0),
        }
    );
    assert_eq!(got.output_tokens.remaining, Some(0));
    assert_eq!(got.output_tokens.reset, Some(Duration::ZERO));
}

#[test]
fn openai_style_figures_win_and_anthropic_fills_gaps() {
    let h = headers(&[
        ("x-ratelimit-remaining-requests", "5"),
        ("anthropic-ratelimit-requests-remaining", "7"),
        ("anthropic-ratelimit-requests-limit", "9"),
    ]);
    let got = RateLimits::from_headers(&h, now());
    assert_eq!(
        (got.requests.remaining, got.requests.limit),
        (Some(5), Some(9))
    );
}

#[test]
fn missing_and_malformed_quota_headers_yield_nothing() {
    assert!(RateLimits::from_headers(&HeaderMap::new(), now()).is_empty());
    let h = headers(&[
        ("x-ratelimit-remaining-requests", "-1"),
        ("x-ratelimit-limit-requests", "1.5"),
        ("x-ratelimit-reset-requests", "soon"),
        ("x-ratelimit-remaining-tokens", "+10"),
        ("x-ratelimit-limit-tokens", "18446744073709551616"),
        ("x-ratelimit-reset-tokens", "-6m0s"),
        ("anthropic-ratelimit-requests-remaining", ""),
        ("anthropic-ratelimit-requests-limit", "1e3"),
        ("anthropic-ratelimit-requests-reset", "2024-13-45T99:00:00Z"),
        ("anthropic-ratelimit-tokens-remaining", "0x10"),
        (
            "anthropic-ratelimit-tokens-reset",
            "Wed, 17 Apr 2024 18:29:46 GMT",
        ),
        ("anthropic-ratelimit-input-tokens-reset", "2024-04-17"),
        ("anthropic-ratelimit-output-tokens-reset", "1713378586"),
    ]);
    let got = RateLimits::from_headers(&h, now());
    assert!(got.is_empty(), "{got:?}");
    // Non-ASCII bytes in a value are not text.
    let mut h = HeaderMap::new();
    h.insert(
        "x-ratelimit-remaining-requests",
        http::HeaderValue::from_bytes(b"12\xff").unwrap(),
    );
    assert!(RateLimits::from_headers(&h, now()).is_empty());
    // The largest count is fine; surrounding whitespace is trimmed.
    let h = headers(&[("x-ratelimit-remaining-tokens", " 18446744073709551615 ")]);
    assert_eq!(
        RateLimits::from_headers(&h, now()).tokens.remaining,
        Some(u64::MAX)
    );
}

#[test]
fn the_tightest_token_quota_is_the_one_closest_to_running_out() {
    let h = headers(&[
        ("anthropic-ratelimit-tokens-limit", "90000"),
        ("anthropic-ratelimit-tokens-remaining", "45000"),
        ("anthropic-ratelimit-input-tokens-limit", "40000"),
        ("anthropic-ratelimit-input-tokens-remaining", "30000"),
        ("anthropic-ratelimit-output-tokens-limit", "8000"),
        ("anthropic-ratelimit-output-tokens-remaining", "800"),
        (
            "anthropic-ratelimit-output-tokens-reset",
            "2024-04-17T18:29:10Z",
        ),
    ]);
    let got = RateLimits::from_headers(&h, now());
    assert_eq!(
        got.tightest_tokens(),
        Quota {
            remaining: Some(800),
            limit: Some(8000),
            reset: secs(10.0),
        }
    );
    // An exhausted quota is the tightest even without a limit; one without a remaining count
    // is not a reading.
    let h = headers(&[
        ("anthropic-ratelimit-tokens-limit", "90000"),
        ("anthropic-ratelimit-tokens-remaining", "10"),
        ("anthropic-ratelimit-input-tokens-remaining", "0"),
        ("anthropic-ratelimit-output-tokens-limit", "8000"),
    ]);
    let got = RateLimits::from_headers(&h, now()).tightest_tokens();
    assert_eq!(got.remaining, Some(0));
    // OpenAI-style: the one token quota.
    let h = headers(&[
        ("x-ratelimit-remaining-tokens", "5"),
        ("x-ratelimit-limit-tokens", "10"),
    ]);
    let got = RateLimits::from_headers(&h, now()).tightest_tokens();
    assert_eq!((got.remaining, got.limit), (Some(5), Some(10)));
    assert!(RateLimits::from_headers(&HeaderMap::new(), now())
        .tightest_tokens()
        .is_empty());
}

#[test]
fn unknown_quota_kinds_and_fields_are_ignored() {
    let h = headers(&[
        ("x-ratelimit-remaining-images", "3"),
        ("x-ratelimit-remaining", "3"),
        ("x-ratelimit-used-requests", "3"),
        ("x-ratelimit-remaining-requests-extra", "3"),
        ("anthropic-ratelimit-images-remaining", "3"),
        ("anthropic-ratelimit-requests-used", "3"),
        ("anthropic-ratelimit-", "3"),
        ("anthropic-ratelimit-remaining", "3"),
        ("x-other", "1"),
    ]);
    let got = RateLimits::from_headers(&h, now());
    assert!(got.is_empty(), "{got:?}");
    // The first of repeated values counts.
    let h = headers(&[
        ("x-ratelimit-remaining-requests", "7"),
        ("x-ratelimit-remaining-requests", "8"),
    ]);
    assert_eq!(
        RateLimits::from_headers(&h, now()).requests.remaining,
        Some(7)
    );
}

#[test]
fn retry_after_in_every_form() {
    let wait = |pairs: &[(&str, &str)]| retry_after(&headers(pairs), now());
    assert_eq!(wait(&[("retry-after", "30")]), secs(30.0));
    assert_eq!(wait(&[("retry-after", " 0 ")]), Some(Duration::ZERO));
    assert_eq!(wait(&[("retry-after", "1.5")]), secs(1.5));
    assert_eq!(
        wait(&[("retry-after", "Wed, 17 Apr 2024 18:29:46 GMT")]),
        secs(46.0)
    );
    assert_eq!(
        wait(&[("retry-after", "Wed, 17 Apr 2024 18:00:00 GMT")]),
        Some(Duration::ZERO),
        "a date in the past: no wait"
    );
    assert_eq!(wait(&[("retry-after-ms", "1500")]), secs(1.5));
    assert_eq!(
        wait(&[("retry-after-ms", "20.5")]),
        Some(Duration::from_micros(20_500))
    );
    // The finer header wins over the coarser one; a broken one falls back.
    assert_eq!(
        wait(&[("retry-after", "2"), ("retry-after-ms", "1250")]),
        secs(1.25)
    );
    assert_eq!(
        wait(&[("retry-after", "2"), ("retry-after-ms", "soon")]),
        secs(2.0)
    );
    // Header names are case-insensitive on the wire.
    assert_eq!(wait(&[("Retry-After", "4")]), secs(4.0));
}

#[test]
fn retry_after_garbage_yields_nothing() {
    for value in [
        "",
        "-1",
        "+5",
        "soon",
        "1e3",
        "0x10",
        "5 s",
        "2024-04-17T18:29:46Z",
        "Wed, 17 Apr 2024 25:29:46 GMT",
        "99999999999999999999",
    ] {
        assert_eq!(
            retry_after(&headers(&[("retry-after", value)]), now()),
            None,
            "{value:?}"
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after-ms", value)]), now()),
            None,
            "ms {value:?}"
        );
    }
    assert_eq!(retry_after(&HeaderMap::new(), now()), None);
    // A clock before 1970 or a date far ahead do not panic.
    let h = headers(&[("retry-after", "Tue, 01 Jan 2650 00:00:00 GMT")]);
    assert_eq!(retry_after(&h, now()), Some(Duration::from_nanos(u64::MAX)));
    assert!(retry_after(&h, UNIX_EPOCH - Duration::from_secs(10)).is_some());
}
