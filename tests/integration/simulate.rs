//! `sturnus simulate`: the real binary runs the quick variant of every built-in scenario of the
//! deterministic routing simulation with `--check`, and sturnus's strategy must meet each
//! scenario's targets; a scenario file runs the same way. These are behaviour
//! assertions on a seeded simulation (virtual time), not timing measurements.

use crate::common::run_sturnus;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Output;

/// A fresh scratch directory for this test process.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sturnus-simulate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn simulate(args: &[&str]) -> Output {
    run_sturnus("simulate", args)
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

/// The `key` strings of the objects in `v[list]`.
fn strings<'a>(v: &'a Value, list: &str, key: &str) -> Vec<&'a str> {
    v[list]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s[key].as_str())
        .collect()
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is a number in {v}"))
}

/// Every built-in scenario, in the order the report lists them.
const SCENARIOS: [&str; 15] = [
    "step",
    "outage",
    "flaky",
    "rate-limited",
    "herd",
    "herd-200",
    "herd-60",
    "herd-90",
    "herd-four",
    "herd-step",
    "herd-hosted",
    "steady-lone",
    "quota",
    "conversations",
    "conversations-spread",
];

#[test]
fn quick_run_of_every_scenario_meets_the_targets_and_writes_charts() {
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
    assert_eq!(strings(&report, "scenarios", "name"), SCENARIOS);

    // step: the fastest provider becomes 10x slower, then recovers.
    let step = scenario(&report, "step");
    let me = row(step, "sturnus");
    assert!(num(me, "switch_requests") <= 50.0, "{me}");
    assert!(num(me, "recovery_requests") <= 500.0, "{me}");
    // A strategy without probing never wins the recovered provider back.
    assert!(row(step, "lowest-avg-10")["recovery_requests"].is_null());

    // outage: the dead provider gets at most 2% once it has failed a few times.
    let outage = scenario(&report, "outage");
    let me = row(outage, "sturnus");
    assert!(num(me, "bad_share") <= 0.02, "{me}");
    let rr = num(row(outage, "round-robin"), "bad_share");
    assert!((0.3..0.37).contains(&rr), "round-robin sends a third: {rr}");

    // rate-limited: Retry-After keeps traffic off the limited provider.
    let limited = row(scenario(&report, "rate-limited"), "sturnus");
    assert!(num(limited, "bad_share") <= 0.02, "{limited}");

    // Herds: the fleet settles (the bars are each file's quick.targets).
    for name in SCENARIOS.iter().filter(|n| n.starts_with("herd")) {
        let me = row(scenario(&report, name), "sturnus");
        assert!(num(&me["herd"], "fleet_std") <= 0.1, "{name}: {me}");
    }

    // The incident scenarios check sturnus against the best probing strategy (the shared-
    // capacity ones hold their quick bar instead), and every target listed in the report
    // holds (--check agreed by exiting 0).
    for sc in report["scenarios"].as_array().into_iter().flatten() {
        let targets = sc["targets"].as_array().expect("targets");
        let name = sc["name"].as_str().unwrap_or("");
        assert!(
            name.starts_with("herd")
                || name == "conversations-spread"
                || targets.iter().any(|t| t["what"]
                    .as_str()
                    .is_some_and(|w| w.contains("best probing strategy"))),
            "{name}"
        );
        for t in targets {
            assert_eq!(t["pass"], true, "{}: {t}", sc["name"]);
        }
    }

    // quota: pacing fits the announced quota where back-off alone meets its 429s.
    let quota = scenario(&report, "quota");
    let paced = num(row(quota, "sturnus"), "limited");
    let backed_off = num(row(quota, "sturnus (back-off only)"), "limited");
    assert!(
        backed_off > 0.0 && paced <= 0.1 * backed_off,
        "{paced} vs {backed_off}"
    );

    // conversations: every strategy's cache hit rate is reported; with prefix affinity on,
    // the slowed provider still loses its traffic within 50 requests.
    let talk = scenario(&report, "conversations");
    for r in talk["rows"].as_array().into_iter().flatten() {
        let hits = num(r, "hit_rate");
        assert!((0.0..=1.0).contains(&hits), "{r}");
    }
    let me = row(talk, "sturnus");
    assert!(num(me, "switch_requests") <= 50.0, "{me}");
    assert!(
        num(me, "hit_rate") > num(row(talk, "random"), "hit_rate"),
        "{me}"
    );
    assert!(row(talk, "sturnus (cache-blind)")["hit_rate"].is_number());

    for name in SCENARIOS {
        let svg = std::fs::read_to_string(out_dir.join(format!("{name}.svg"))).expect("chart");
        assert!(svg.starts_with("<svg"), "{name}.svg");
        assert!(svg.contains("traffic share over time"), "{name}.svg");
        assert!(
            svg.contains("latency only, k 3") && svg.contains("oracle"),
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
fn scenario_file_runs_and_check_fails_on_a_missed_target() {
    let dir = scratch_dir("file");
    // Two providers, the faster one down for 20 s; an impossible latency target.
    let file = dir.join("tiny.toml");
    std::fs::write(
        &file,
        r#"
name = "tiny"
title = "tiny: a provider goes down"
sidecars = 3
rate = 5
duration_s = 60
focus_s = [20, 40]
figures = "incident"
incident = { provider = "a", start_s = 20, end_s = 40 }

[targets]
mean_vs_oracle = 0.5
beat_probing = false
bad_share = 0.5

[[provider]]
name = "a"
median_ms = 100
phase = [
  { from_s = 20, behaviour = "down", status = 502 },
  { from_s = 40, behaviour = "normal" },
]

[[provider]]
name = "b"
median_ms = 300
jitter = 0.1
"#,
    )
    .expect("write scenario");
    let path = file.to_str().expect("utf-8 path");
    let out = simulate(&["--scenario-file", path, "--json", "--check"]);
    assert_eq!(out.status.code(), Some(2), "a missed target fails --check");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let sc = scenario(&report, "tiny");
    assert_eq!(sc["providers"][1], "b (300 ms)");
    let targets = sc["targets"].as_array().expect("targets");
    let missed: Vec<&Value> = targets.iter().filter(|t| t["pass"] == false).collect();
    assert_eq!(missed.len(), 1, "{targets:?}");
    assert!(missed[0]["what"]
        .as_str()
        .unwrap_or("")
        .contains("0.5 x oracle"));
    // Without --check the same run succeeds.
    assert!(simulate(&["--scenario-file", path, "--json"])
        .status
        .success());

    // A broken file names the field.
    std::fs::write(&file, "name = \"x\"\nrate = -1\n").expect("write");
    let bad = simulate(&["--scenario-file", path]);
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("tiny.toml") && err.contains("missing field"),
        "{err}"
    );
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

/// Instances of the quick family the test suite runs.
const QUICK_FAMILY: &str = "30";

/// The contenders every family instance runs, in report order.
const FAMILY_STRATEGIES: [&str; 10] = [
    "sturnus",
    "latency only, k 3",
    "oracle",
    "exact latency, k 6",
    "round-robin",
    "random",
    "lowest-avg-10",
    "p2c-peak-ewma",
    "least-outstanding",
    "pending-penalty",
];

#[test]
fn quick_family_report_is_well_formed_deterministic_and_reruns_from_its_files() {
    let dir = scratch_dir("family");
    let (out_dir, files) = (dir.join("out"), dir.join("instances"));
    let args = [
        "--family",
        QUICK_FAMILY,
        "--quick",
        "--json",
        "--seed",
        "3",
        "--out",
        out_dir.to_str().expect("utf-8 path"),
        "--family-out",
        files.to_str().expect("utf-8 path"),
    ];
    let first = simulate(&args);
    let report = json(&first);
    assert_eq!(report["quick"], true);
    assert_eq!(report["seed"], 3);
    let instances = report["instances"].as_array().expect("instances");
    assert_eq!(instances.len(), 30);
    assert_eq!(
        strings(&report, "strategies", "strategy"),
        FAMILY_STRATEGIES
    );
    for s in report["strategies"].as_array().into_iter().flatten() {
        let (median, worst) = (num(s, "median_vs_oracle"), num(s, "worst_vs_oracle"));
        assert!(median > 0.0 && median <= worst && worst.is_finite(), "{s}");
        assert!(s["losses"].as_u64().is_some_and(|l| l <= 30), "{s}");
        assert!(s["worst_instance"]
            .as_str()
            .is_some_and(|w| w.starts_with("family-")));
    }
    let oracle = &report["strategies"][2];
    assert_eq!(num(oracle, "median_vs_oracle"), 1.0);
    // Both family targets are listed with what was measured.
    let targets = report["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 2, "{targets:?}");
    assert!(targets.iter().all(|t| t["pass"].is_boolean()));
    // The ranges show in the draws: fleet shapes, provider counts, incident kinds.
    let draws: Vec<&Value> = instances.iter().map(|i| &i["draw"]).collect();
    let kinds: std::collections::HashSet<&str> = draws
        .iter()
        .filter_map(|d| d["incident"].as_str())
        .collect();
    assert!(kinds.len() >= 6, "{kinds:?}");
    assert!(
        draws.iter().any(|d| d["proxies"].as_u64() == Some(1))
            || draws.iter().any(|d| d["proxies"].as_u64() < Some(5))
    );
    assert!(draws.iter().any(|d| d["busy"].as_u64() > Some(0)));
    assert!(draws
        .iter()
        .any(|d| d["providers"].as_array().map(Vec::len) > Some(4)));

    // Same seed, same report, byte for byte.
    let again = simulate(&args);
    assert_eq!(first.stdout, again.stdout);
    let md = std::fs::read_to_string(out_dir.join("family.md")).expect("family.md");
    assert!(md.contains("| strategy | median x oracle |"), "{md}");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("family.json")).expect("json"))
            .expect("family.json parses");
    assert_eq!(written, report);

    // Any instance's file reruns alone with the same figures for every contender.
    for k in [0, 7, 29] {
        let inst = &instances[k];
        let name = inst["name"].as_str().expect("name");
        let file = files.join(format!("{name}.toml"));
        let rerun = json(&simulate(&[
            "--scenario-file",
            file.to_str().expect("utf-8 path"),
            "--json",
            "--seed",
            "3",
        ]));
        let sc = scenario(&rerun, name);
        for e in inst["entries"].as_array().into_iter().flatten() {
            let strategy = e["strategy"].as_str().expect("strategy");
            let r = row(sc, strategy);
            assert_eq!(r["mean_ms"], e["mean_ms"], "{name} {strategy}");
            assert_eq!(r["failed_pct"], e["failed_pct"], "{name} {strategy}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
#[ignore = "the rule misses the family targets (issue 33; docs/routing.md, \"Where the rule stands\")"]
fn quick_family_meets_the_targets() {
    let out = simulate(&["--family", QUICK_FAMILY, "--quick", "--check"]);
    assert!(
        out.status.success(),
        "exit {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn family_check_names_the_missed_target() {
    // With exploit_k 0.05 sturnus spreads traffic almost evenly: far above 1.05 x oracle.
    let out = simulate(&["--family", "3", "--quick", "--check", "--exploit-k", "0.05"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missed family target fails --check"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("family target missed: median mean latency <= 1.05 x oracle"),
        "{err}"
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("- MISSED: median mean latency"), "{md}");
    // Without --check the same run succeeds.
    assert!(
        simulate(&["--family", "3", "--quick", "--exploit-k", "0.05"])
            .status
            .success()
    );
}

#[test]
fn sweep_reports_sturnus_against_the_oracle_at_every_fleet_size() {
    let dir = scratch_dir("sweep");
    let out = simulate(&[
        "--sweep",
        "--quick",
        "--json",
        "--out",
        dir.to_str().expect("utf-8 path"),
    ]);
    let report = json(&out);
    let names: Vec<&str> = report["scenarios"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "fleet-1",
            "fleet-2",
            "fleet-5",
            "fleet-10",
            "fleet-20",
            "fleet-50",
            "fleet-200"
        ]
    );
    for sc in report["scenarios"].as_array().into_iter().flatten() {
        let me = row(sc, "sturnus");
        assert!(num(me, "mean_vs_oracle") > 0.5, "{me}");
        assert!(sc["targets"][0]["what"]
            .as_str()
            .is_some_and(|w| w.contains("1.1 x oracle")));
    }
    let text = std::fs::read_to_string(dir.join("sweep.md")).expect("sweep.md");
    assert!(text.starts_with("# Fleet-size sweep"), "{text}");
    assert!(text.contains("| 200 |"), "{text}");
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).expect("json"))
            .expect("sweep.json parses");
    assert_eq!(written, report);
    let _ = std::fs::remove_dir_all(dir);
}
