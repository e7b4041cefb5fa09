//! `sturnus simulate`: the real binary runs the deterministic routing simulation in its quick
//! configuration, and sturnus's strategy must meet the targets. These are behaviour
//! assertions on a seeded simulation (virtual time), not timing measurements.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

/// A fresh scratch directory for this test process.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sturnus-simulate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn simulate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sturnus"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("run sturnus simulate")
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report on stdout")
}

fn scenario<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["scenarios"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("scenario {name} in report"))
}

fn row<'a>(scenario: &'a Value, strategy: &str) -> &'a Value {
    scenario["rows"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["strategy"] == strategy))
        .unwrap_or_else(|| panic!("row {strategy} in {}", scenario["name"]))
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is a number in {v}"))
}

#[test]
fn quick_run_meets_the_targets_and_writes_charts() {
    let dir = scratch_dir("charts");
    let out_dir = dir.join("routing");
    let out = simulate(&[
        "--quick",
        "--json",
        "--check",
        "--out",
        out_dir.to_str().expect("utf-8 path"),
    ]);
    let report = json(&out);
    assert_eq!(report["quick"], true);

    // step: the fastest provider becomes 10x slower, then recovers.
    let step = scenario(&report, "step");
    let me = row(step, "sturnus");
    assert!(num(me, "mean_vs_oracle") <= 1.2, "{me}");
    for other in ["round-robin", "random", "p2c-peak-ewma"] {
        assert!(
            num(me, "mean_ms") < num(row(step, other), "mean_ms"),
            "sturnus vs {other}"
        );
    }
    assert!(num(me, "switch_requests") <= 50.0, "{me}");
    assert!(num(me, "recovery_requests") <= 500.0, "{me}");
    // A strategy without probing never wins the recovered provider back.
    assert!(row(step, "lowest-avg-10")["recovery_requests"].is_null());

    // outage: the dead provider gets at most 2% once it has failed a few times.
    let outage = scenario(&report, "outage");
    let me = row(outage, "sturnus");
    assert!(num(me, "bad_share") <= 0.02, "{me}");
    assert!(num(me, "recovery_requests") <= 500.0, "{me}");
    let rr = num(row(outage, "round-robin"), "bad_share");
    assert!((0.3..0.37).contains(&rr), "round-robin sends a third: {rr}");

    // rate-limited: Retry-After keeps traffic off the limited provider.
    let limited = row(scenario(&report, "rate-limited"), "sturnus");
    assert!(num(limited, "bad_share") <= 0.02, "{limited}");

    // herd: 50 sidecars on load-dependent providers settle instead of oscillating.
    let herd = row(scenario(&report, "herd"), "sturnus");
    assert!(num(&herd["herd"], "sidecar_std_median") <= 0.1, "{herd}");

    // Every target listed in the report holds (and --check agreed by exiting 0).
    for sc in report["scenarios"].as_array().into_iter().flatten() {
        for t in sc["targets"].as_array().into_iter().flatten() {
            assert_eq!(t["pass"], true, "{t}");
        }
    }

    for name in ["step", "outage", "flaky", "rate-limited", "herd"] {
        let svg = std::fs::read_to_string(out_dir.join(format!("{name}.svg"))).expect("chart");
        assert!(svg.starts_with("<svg"), "{name}.svg");
        assert!(svg.contains("traffic share over time"), "{name}.svg");
        assert!(
            svg.contains("sturnus (seed)") && svg.contains("oracle"),
            "{name}.svg"
        );
    }
    let md = std::fs::read_to_string(out_dir.join("results.md")).expect("results.md");
    assert!(md.contains("| strategy | mean ms |"), "{md}");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).expect("json"))
            .expect("results.json parses");
    assert_eq!(written, report);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn same_seed_same_figures() {
    let run = |seed: &str| simulate(&["--quick", "--json", "--scenario", "outage", "--seed", seed]);
    let a = run("7");
    let b = run("7");
    assert_eq!(json(&a), json(&b));
    assert_eq!(a.stdout, b.stdout);
    // (That another seed gives other figures is a unit test in src/simulate.)
}

#[test]
fn markdown_by_default_and_bad_scenario_is_an_error() {
    let out = simulate(&["--quick", "--scenario", "outage"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("# sturnus routing simulation (seed 1, quick run)"),
        "{text}"
    );
    assert!(text.contains("| round-robin |"), "{text}");

    let bad = simulate(&["--scenario", "stampede"]);
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("unknown scenario \"stampede\""), "{err}");
    assert!(bad.stdout.is_empty());
}
