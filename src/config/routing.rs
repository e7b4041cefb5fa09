//! Reading and range-checking the `[routing]` table.

use super::reader::{join, Reader};
use super::schema::RoutingConfig;
use crate::routing::{ParamRange, RoutingParams, RuleParams};
use serde::Deserialize;
use std::time::Duration;
use toml::{Table, Value};

/// Every key `[routing]` accepts.
const KEYS: &[&str] = &[
    "ewma_alpha",
    "exploit_k",
    "probe_floor",
    "error_threshold",
    "prefix_affinity",
    "connect_timeout_secs",
    "read_timeout_secs",
    "max_body_bytes",
    "max_buffered_bytes",
    "header_timeout_secs",
    "body_timeout_secs",
    "rule",
];

/// Shortest timeout accepted, in seconds.
const MIN_SECS: f64 = 0.001;
/// Longest timeout accepted, in seconds (one day).
const MAX_SECS: f64 = 86_400.0;

/// Reads `[routing]` (absent means all defaults); out-of-range values are recorded as problems.
pub(crate) fn read_routing(r: &mut Reader, value: Option<&Value>) -> RoutingConfig {
    let mut out = RoutingConfig::default();
    let Some(table) = value.and_then(|v| r.table("routing", v)) else {
        return out;
    };
    r.unknown_keys("routing", table, KEYS);
    float(r, table, RoutingParams::EWMA_ALPHA, &mut out.ewma_alpha);
    float(r, table, RoutingParams::EXPLOIT_K, &mut out.exploit_k);
    float(r, table, RoutingParams::PROBE_FLOOR, &mut out.probe_floor);
    float(
        r,
        table,
        RoutingParams::ERROR_THRESHOLD,
        &mut out.error_threshold,
    );
    if let Some(v) = table.get("prefix_affinity") {
        if let Some(on) = r.boolean(&join("routing", "prefix_affinity"), v) {
            out.prefix_affinity = on;
        }
    }
    seconds(r, table, "connect_timeout_secs", &mut out.connect_timeout);
    seconds(r, table, "read_timeout_secs", &mut out.read_timeout);
    seconds(r, table, "header_timeout_secs", &mut out.header_timeout);
    seconds(r, table, "body_timeout_secs", &mut out.body_timeout);
    if let Some(n) = bytes(r, table, "max_body_bytes", 1) {
        out.max_body_bytes = n;
    }
    out.max_buffered_bytes = bytes(r, table, "max_buffered_bytes", 0);
    if let Some(v) = table.get("rule") {
        match RuleParams::deserialize(v.clone()) {
            Ok(rule) => out.rule = rule,
            Err(e) => r.problem(&join("routing", "rule"), format_args!("{}", e.message())),
        }
    }
    out
}

/// Reads a float (or integer) key into `slot` when present and `ok`.
fn float(r: &mut Reader, t: &Table, range: ParamRange, slot: &mut f64) {
    let Some(v) = t.get(range.key) else { return };
    let path = join("routing", range.key);
    if let Some(x) = r.number(&path, v) {
        if (range.ok)(x) {
            *slot = x;
        } else {
            let rule = range.rule;
            r.problem(&path, format_args!("{x} is out of range (must be {rule})"));
        }
    }
}

/// Reads a timeout in seconds (integer or float) into `slot` when present and in range.
fn seconds(r: &mut Reader, t: &Table, key: &str, slot: &mut Duration) {
    let Some(v) = t.get(key) else { return };
    let path = join("routing", key);
    let Some(x) = r.number(&path, v) else { return };
    let in_range = (MIN_SECS..=MAX_SECS).contains(&x);
    match Duration::try_from_secs_f64(x) {
        Ok(d) if in_range => *slot = d,
        _ => r.problem(
            &path,
            format_args!("{x} is out of range (must be between {MIN_SECS} and {MAX_SECS} seconds)"),
        ),
    }
}

/// Reads a byte count that must be at least `min`; `None` when absent or invalid.
fn bytes(r: &mut Reader, t: &Table, key: &str, min: u64) -> Option<u64> {
    let v = t.get(key)?;
    let path = join("routing", key);
    let n = r.integer(&path, v)?;
    match u64::try_from(n) {
        Ok(n) if n >= min => Some(n),
        _ => {
            r.problem(
                &path,
                format_args!("{n} is out of range (must be an integer >= {min})"),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (RoutingConfig, Vec<String>) {
        let doc: Table = text.parse().unwrap();
        let env = |_: &str| None;
        let mut r = Reader::new(&env);
        let cfg = read_routing(&mut r, doc.get("routing"));
        (cfg, r.problems)
    }

    #[test]
    fn absent_and_empty_give_defaults() {
        assert_eq!(read("").0, RoutingConfig::default());
        let (cfg, problems) = read("[routing]");
        assert_eq!(cfg, RoutingConfig::default());
        assert!(problems.is_empty());
    }

    #[test]
    fn all_keys_parse() {
        let (cfg, problems) = read(
            "[routing]\newma_alpha = 1\nexploit_k = 20\nprobe_floor = 0\nerror_threshold = 0.25\n\
             prefix_affinity = false\n\
             connect_timeout_secs = 0.5\nread_timeout_secs = 30\nmax_body_bytes = 1_024\n\
             max_buffered_bytes = 0\nheader_timeout_secs = 2.25\nbody_timeout_secs = 86400",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(cfg.ewma_alpha, 1.0);
        assert_eq!(cfg.exploit_k, 20.0);
        assert_eq!(cfg.probe_floor, 0.0);
        assert_eq!(cfg.error_threshold, 0.25);
        assert!(!cfg.prefix_affinity);
        assert_eq!(cfg.connect_timeout, Duration::from_millis(500));
        assert_eq!(cfg.read_timeout, Duration::from_secs(30));
        assert_eq!(cfg.max_body_bytes, 1024);
        assert_eq!(cfg.max_buffered_bytes, Some(0));
        assert_eq!(cfg.header_timeout, Duration::from_millis(2250));
        assert_eq!(cfg.body_timeout, Duration::from_secs(86400));
    }

    #[test]
    fn a_rule_table_overrides_the_latency_estimates_change_test() {
        let (cfg, problems) = read(
            "[routing.rule.latency]\nthreshold = 8\nmin_weight = 0.05\nmax_correlation = 0.5\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(cfg.rule.latency.threshold, 8.0);
        assert_eq!(cfg.rule.latency.min_weight, 0.05);
        assert_eq!(cfg.rule.latency.max_correlation, 0.5);
        assert_eq!(
            cfg.rule.latency.slack, 0.5,
            "the others keep their defaults"
        );
        let (_, problems) = read("[routing.rule.latency]\nthreshhold = 8\n");
        assert!(!problems.is_empty(), "a misspelt constant is reported");
    }

    #[test]
    fn a_rule_table_sets_how_often_the_success_rate_changes() {
        let (cfg, problems) = read("[routing.rule.success]\nchange_every_s = 300\nmax_runs = 8\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(cfg.rule.success.change_every_s, 300.0);
        assert_eq!(cfg.rule.success.max_runs, 8);
        assert_eq!(
            cfg.rule.success.prior, 0.5,
            "the others keep their defaults"
        );
    }

    #[test]
    fn out_of_range_values_are_all_reported() {
        let (_, problems) = read(
            "[routing]\newma_alpha = 0\nexploit_k = 21\nprobe_floor = 0.6\nerror_threshold = nan\n\
             connect_timeout_secs = 0\nread_timeout_secs = -1\nmax_body_bytes = 0\n\
             max_buffered_bytes = -5\nheader_timeout_secs = inf\nbody_timeout_secs = 1e5",
        );
        assert_eq!(
            problems,
            vec![
                "routing.ewma_alpha: 0 is out of range (must be > 0 and <= 1)",
                "routing.exploit_k: 21 is out of range (must be > 0 and <= 20)",
                "routing.probe_floor: 0.6 is out of range (must be >= 0 and <= 0.5)",
                "routing.error_threshold: NaN is out of range (must be > 0 and <= 1)",
                "routing.connect_timeout_secs: 0 is out of range (must be between 0.001 and 86400 seconds)",
                "routing.read_timeout_secs: -1 is out of range (must be between 0.001 and 86400 seconds)",
                "routing.header_timeout_secs: inf is out of range (must be between 0.001 and 86400 seconds)",
                "routing.body_timeout_secs: 100000 is out of range (must be between 0.001 and 86400 seconds)",
                "routing.max_body_bytes: 0 is out of range (must be an integer >= 1)",
                "routing.max_buffered_bytes: -5 is out of range (must be an integer >= 0)",
            ]
        );
    }

    #[test]
    fn wrong_types_and_unknown_keys() {
        let (_, problems) = read(
            "[routing]\newma_alpah = 0.3\newma_alpha = \"0.3\"\nmax_body_bytes = 1.5\nread_timeout_secs = true\n\
             prefix_afinity = true\nprefix_affinity = 1",
        );
        assert_eq!(
            problems,
            vec![
                "routing.ewma_alpah: unknown key (did you mean ewma_alpha?)",
                "routing.prefix_afinity: unknown key (did you mean prefix_affinity?)",
                "routing.ewma_alpha: expected a number, found string",
                "routing.prefix_affinity: expected a boolean, found integer",
                "routing.read_timeout_secs: expected a number, found boolean",
                "routing.max_body_bytes: expected an integer, found float",
            ]
        );
    }

    #[test]
    fn routing_must_be_a_table() {
        let (cfg, problems) = read("routing = 3");
        assert_eq!(cfg, RoutingConfig::default());
        assert_eq!(problems, vec!["routing: expected a table, found integer"]);
    }
}
