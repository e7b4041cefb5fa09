//! Unit tests for the `Retry-After` headers: every format providers send, and
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
