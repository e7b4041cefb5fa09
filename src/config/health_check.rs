//! Reading a provider's `health_check = { path, interval_secs, unhealthy_after, healthy_after }`.

use super::reader::{join, quoted, Reader};
use super::schema::HealthCheckConfig;
use std::time::Duration;
use toml::{Table, Value};

/// Every key a `health_check` table accepts.
const KEYS: &[&str] = &["path", "interval_secs", "unhealthy_after", "healthy_after"];

/// Longest interval accepted, in seconds (one day).
const MAX_INTERVAL_SECS: f64 = 86_400.0;

/// Largest threshold accepted (a million checks in a row is already never).
const MAX_THRESHOLD: i64 = 1_000_000;

/// Reads `provider.NAME.health_check` at `path`; `None` (with problems recorded) when invalid.
pub(crate) fn read_health_check(
    r: &mut Reader,
    path: &str,
    value: &Value,
) -> Option<HealthCheckConfig> {
    let t = r.table(path, value)?;
    r.unknown_keys(path, t, KEYS);
    let defaults = HealthCheckConfig::default();
    let check_path = read_path(r, path, t);
    let interval = read_interval(r, path, t, defaults.interval);
    let unhealthy_after = read_threshold(r, path, t, "unhealthy_after", defaults.unhealthy_after);
    let healthy_after = read_threshold(r, path, t, "healthy_after", defaults.healthy_after);
    Some(HealthCheckConfig {
        path: check_path?,
        interval: interval?,
        unhealthy_after: unhealthy_after?,
        healthy_after: healthy_after?,
    })
}

/// `path`: required, an absolute path (and optional query) on the provider's host.
fn read_path(r: &mut Reader, parent: &str, t: &Table) -> Option<String> {
    let path = join(parent, "path");
    let Some(v) = t.get("path") else {
        r.problem(
            &path,
            "required key is missing (the health endpoint, e.g. \"/health\")",
        );
        return None;
    };
    let s = r.string(&path, v)?;
    let shown = quoted(Some(v), &s);
    if !s.starts_with('/') {
        r.problem(
            &path,
            format_args!("{shown} must start with '/' (a path on the provider's host)"),
        );
        return None;
    }
    let problem = if s.starts_with("//") {
        "must not start with '//' (that would name another host)"
    } else if s.contains('#') {
        "must not have a fragment (#...)"
    } else if http::uri::PathAndQuery::try_from(&*s).is_err() {
        "is not a valid URL path (percent-encode spaces and control characters)"
    } else {
        return Some(s);
    };
    r.problem(&path, format_args!("{shown} {problem}"));
    None
}

/// `interval_secs`: a number of seconds > 0 (fractions allowed), at most a day.
fn read_interval(r: &mut Reader, parent: &str, t: &Table, default: Duration) -> Option<Duration> {
    let Some(v) = t.get("interval_secs") else {
        return Some(default);
    };
    let path = join(parent, "interval_secs");
    let x = r.number(&path, v)?;
    match Duration::try_from_secs_f64(x) {
        Ok(d) if x > 0.0 && x <= MAX_INTERVAL_SECS && !d.is_zero() => Some(d),
        _ => {
            r.problem(
                &path,
                format_args!(
                    "{x} is out of range (must be > 0 and <= {MAX_INTERVAL_SECS} seconds)"
                ),
            );
            None
        }
    }
}

/// A consecutive-checks threshold: an integer >= 1.
fn read_threshold(r: &mut Reader, parent: &str, t: &Table, key: &str, default: u32) -> Option<u32> {
    let Some(v) = t.get(key) else {
        return Some(default);
    };
    let path = join(parent, key);
    let n = r.integer(&path, v)?;
    if (1..=MAX_THRESHOLD).contains(&n) {
        u32::try_from(n).ok()
    } else {
        r.problem(
            &path,
            format_args!("{n} is out of range (must be an integer >= 1 and <= {MAX_THRESHOLD})"),
        );
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (Option<HealthCheckConfig>, Vec<String>) {
        let doc: Table = text.parse().unwrap();
        let env = |k: &str| (k == "HC_PATH").then(|| "/ready".to_string());
        let mut r = Reader::new(&env);
        let hc = read_health_check(&mut r, "provider.p.health_check", &doc["health_check"]);
        (hc, r.problems)
    }

    #[test]
    fn full_table_is_read() {
        let (hc, problems) = read(
            "health_check = { path = \"/health\", interval_secs = 5, unhealthy_after = 2, healthy_after = 1 }",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            hc.unwrap(),
            HealthCheckConfig {
                path: "/health".into(),
                interval: Duration::from_secs(5),
                unhealthy_after: 2,
                healthy_after: 1,
            }
        );
    }

    #[test]
    fn only_the_path_is_required() {
        let (hc, problems) = read("health_check = { path = \"${HC_PATH}\" }");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            hc.unwrap(),
            HealthCheckConfig {
                path: "/ready".into(),
                ..HealthCheckConfig::default()
            }
        );
        let (hc, problems) =
            read("health_check = { path = \"/api/version?x=1\", interval_secs = 0.25 }");
        assert!(problems.is_empty(), "{problems:?}");
        let hc = hc.unwrap();
        assert_eq!(hc.path, "/api/version?x=1");
        assert_eq!(hc.interval, Duration::from_millis(250));
    }

    #[test]
    fn every_bad_value_is_reported_with_its_key() {
        let (hc, problems) = read(
            "health_check = { path = \"health\", interval_secs = 0, unhealthy_after = 0, healthy_after = -3, every = 1 }",
        );
        assert!(hc.is_none());
        assert_eq!(
            problems,
            vec![
                "provider.p.health_check.every: unknown key",
                "provider.p.health_check.path: \"health\" must start with '/' (a path on the provider's host)",
                "provider.p.health_check.interval_secs: 0 is out of range (must be > 0 and <= 86400 seconds)",
                "provider.p.health_check.unhealthy_after: 0 is out of range (must be an integer >= 1 and <= 1000000)",
                "provider.p.health_check.healthy_after: -3 is out of range (must be an integer >= 1 and <= 1000000)",
            ]
        );
    }

    #[test]
    fn types_missing_path_and_malformed_paths() {
        let (_, problems) = read("health_check = { interval_secs = \"5\", healthy_after = 1.5 }");
        assert_eq!(
            problems,
            vec![
                "provider.p.health_check.path: required key is missing (the health endpoint, e.g. \"/health\")",
                "provider.p.health_check.interval_secs: expected a number, found string",
                "provider.p.health_check.healthy_after: expected an integer, found float",
            ]
        );
        for (bad, why) in [
            (
                "/he alth",
                "is not a valid URL path (percent-encode spaces and control characters)",
            ),
            ("/health#x", "must not have a fragment (#...)"),
            (
                "//other/health",
                "must not start with '//' (that would name another host)",
            ),
        ] {
            let (hc, problems) = read(&format!("health_check = {{ path = \"{bad}\" }}"));
            assert!(hc.is_none(), "{bad}");
            let expected = format!("provider.p.health_check.path: \"{bad}\" {why}");
            assert_eq!(problems, vec![expected]);
        }
        let (_, problems) = read("health_check = { path = \"/h\", interval_secs = -1 }");
        assert_eq!(
            problems,
            vec!["provider.p.health_check.interval_secs: -1 is out of range (must be > 0 and <= 86400 seconds)"]
        );
        let (_, problems) = read("health_check = \"/health\"");
        assert_eq!(
            problems,
            vec!["provider.p.health_check: expected a table, found string"]
        );
    }
}
