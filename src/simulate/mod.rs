//! `sturnus simulate`: a deterministic discrete-event simulator that measures routing quality.
//!
//! Simulated sidecars send requests through routing strategies to modelled providers, in
//! virtual time with seeded randomness, so a seed always gives the same figures. sturnus's own
//! strategy runs the real [`crate::routing`] code (tracker, selector, seeded
//! [`crate::routing::SplitMix64`], virtual timestamps), side by side with the usual
//! alternatives. See `docs/routing.md` for the model and the results.
//!
//! - [`clock`]: virtual time and the event queue.
//! - [`provider`] / [`queueing`]: provider models (latency jitter, incidents, capacity).
//! - [`conversations`]: multi-turn conversations and the providers' prompt caches.
//! - [`strategy`] / [`peers`] / [`sturnus`]: the contenders.
//! - [`scenario`]: scenarios, targets and contenders; [`scenario_file`]: their TOML schema.
//! - [`engine`]: the event loop with client retries.
//! - [`family`]: the scenario family and the fleet-size sweep; [`family_report`]: their
//!   judge.
//! - [`metrics`], [`report`], [`chart`]: figures, tables and SVG charts.

pub mod chart;
pub mod clock;
pub mod conversations;
pub mod engine;
pub mod exact;
pub mod family;
pub mod family_report;
pub mod metrics;
pub mod peers;
pub mod provider;
pub mod queueing;
pub mod report;
pub mod scenario;
pub mod scenario_file;
pub mod strategy;
pub mod sturnus;

use crate::routing::{ParamOutOfRange, RuleOverrideError};
use report::Report;
use scenario::{Scenario, Size};
use std::path::PathBuf;
use sturnus::Variant;

/// Why `sturnus simulate` cannot run or write its results.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// A what-if flag is outside its parameter's range.
    #[error(transparent)]
    Param(#[from] ParamOutOfRange),
    /// A `--param` names no constant of the rule or holds no valid value.
    #[error(transparent)]
    RuleParam(#[from] RuleOverrideError),
    /// `--scenario` names no built-in scenario.
    #[error("unknown scenario {name:?} (expected one of {known})")]
    UnknownScenario {
        /// The name given.
        name: String,
        /// The built-in scenarios' names, comma-separated.
        known: String,
    },
    /// A `--scenario-file` cannot be read or is not a valid scenario.
    #[error(transparent)]
    ScenarioFile(#[from] scenario_file::LoadError),
    /// A results file cannot be written under `--out`.
    #[error("{}: {source}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Why it cannot be written.
        source: std::io::Error,
    },
    /// A drawn family instance or sweep scenario is not a valid scenario (a bug in the draw).
    #[error("drawn scenario: {0}")]
    Drawn(#[from] scenario_file::ScenarioError),
    /// A chart cannot be drawn under `--out`.
    #[error(transparent)]
    Chart(#[from] chart::ChartError),
}

/// Flags of `sturnus simulate`.
#[derive(clap::Args, Debug, Clone)]
pub struct SimulateArgs {
    /// Seed every random draw derives from (same seed, same figures).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Directory for the SVG charts and results.md/results.json (e.g. docs/routing).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Run only this built-in scenario (repeatable): step, outage, flaky, rate-limited, herd,
    /// herd-200, herd-60, herd-90, herd-four, herd-step, herd-hosted, steady-lone, quota, conversations,
    /// conversations-spread.
    #[arg(long = "scenario", value_name = "NAME")]
    pub scenarios: Vec<String>,
    /// Run the scenario described in this TOML file (repeatable; schema in docs/routing.md).
    #[arg(long = "scenario-file", value_name = "FILE")]
    pub scenario_files: Vec<PathBuf>,
    /// Each scenario's quick variant (fewer sidecars, shorter runs) for tests.
    #[arg(long)]
    pub quick: bool,
    /// Print the report as JSON instead of markdown.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 2 when a target is missed.
    #[arg(long)]
    pub check: bool,
    /// Run N seeded instances of the scenario family (drawn from --seed) instead of the
    /// built-in scenarios, and report each strategy over the family.
    #[arg(long, value_name = "N", conflicts_with_all = ["scenarios", "scenario_files"])]
    pub family: Option<usize>,
    /// Write each family instance as a scenario file (`<name>.toml`) into this directory.
    #[arg(long, value_name = "DIR", requires = "family")]
    pub family_out: Option<PathBuf>,
    /// Run the fleet-size sweep (the herd's providers at 250 requests/s over 1 to 200
    /// proxies) instead of the built-in scenarios.
    #[arg(long, conflicts_with_all = ["family", "scenarios", "scenario_files"])]
    pub sweep: bool,
    /// Run the "sturnus" contender with this exploit_k instead of the default (what-ifs).
    #[arg(long, value_name = "K")]
    pub exploit_k: Option<f64>,
    /// Run the "sturnus" contender with this ewma_alpha instead of the default.
    #[arg(long, value_name = "ALPHA")]
    pub ewma_alpha: Option<f64>,
    /// Run the "sturnus" contender with this probe_floor instead of the default.
    #[arg(long, value_name = "SHARE")]
    pub probe_floor: Option<f64>,
    /// Run the "sturnus" contender without the waiting-age signal.
    #[arg(long)]
    pub no_wait_age: bool,
    /// Run the "sturnus" contender ignoring Retry-After.
    #[arg(long)]
    pub no_retry_after: bool,
    /// Run the "sturnus" contender without the congestion discount.
    #[arg(long)]
    pub no_congestion: bool,
    /// Run the "sturnus" contender with one constant of the rule changed (repeatable):
    /// `<factor>.<name>=<value>`, e.g. `congestion.gain=0.5` (docs/routing.md lists them).
    #[arg(long = "param", value_name = "FACTOR.NAME=VALUE")]
    pub params: Vec<String>,
}

impl SimulateArgs {
    /// The "sturnus" contender these flags describe; `Err` names a parameter out of range.
    pub fn variant(&self) -> Result<Variant, SimulateError> {
        let mut v = Variant::current();
        if let Some(k) = self.exploit_k {
            v.params.exploit_k = k;
        }
        if let Some(a) = self.ewma_alpha {
            v.params.ewma_alpha = a;
        }
        if let Some(f) = self.probe_floor {
            v.params.probe_floor = f;
        }
        v.params.check()?;
        v.params.rule = v.params.rule.with_overrides(&self.params)?;
        v.wait_age &= !self.no_wait_age;
        v.retry_after &= !self.no_retry_after;
        v.congestion &= !self.no_congestion;
        Ok(v)
    }
}

/// The built-in scenarios called `names` (all of them when empty and no file is given),
/// followed by the scenarios read from `files`.
pub fn select(
    names: &[String],
    files: &[PathBuf],
    size: Size,
) -> Result<Vec<Scenario>, SimulateError> {
    let all = scenario::names();
    let names: Vec<&str> = if names.is_empty() && files.is_empty() {
        all.clone()
    } else {
        names.iter().map(String::as_str).collect()
    };
    let mut scenarios: Vec<Scenario> = names
        .iter()
        .map(|n| {
            scenario::scenario(n, size).ok_or_else(|| SimulateError::UnknownScenario {
                name: n.to_string(),
                known: all.join(", "),
            })
        })
        .collect::<Result<_, _>>()?;
    for f in files {
        scenarios.push(scenario_file::load(f, size)?);
    }
    Ok(scenarios)
}

/// Runs `scenarios` for every contender and builds the report.
pub fn simulate(
    seed: u64,
    scenarios: &[Scenario],
    size: Size,
    current: Variant,
) -> (Report, Vec<ScenarioRun>) {
    let jobs: Vec<(usize, scenario::Contender)> = scenarios
        .iter()
        .enumerate()
        .flat_map(|(s, sc)| {
            scenario::contenders_for(current, sc)
                .into_iter()
                .map(move |c| (s, c))
        })
        .collect();
    let results = run_jobs(&jobs, |&(s, c)| {
        let sc = &scenarios[s];
        // Same seed per scenario for every contender: common random numbers.
        let log = engine::run(sc, c, engine::derive(seed, s as u64));
        metrics::figures(sc, &log)
    });
    let mut runs = Vec::new();
    let mut reports = Vec::new();
    for (s, sc) in scenarios.iter().enumerate() {
        let figs: Vec<(String, metrics::Figures)> = jobs
            .iter()
            .zip(&results)
            .filter(|((js, _), _)| *js == s)
            .map(|((_, c), f)| (c.label().to_string(), f.clone()))
            .collect();
        runs.push(ScenarioRun {
            scenario: sc.clone(),
            series: figs
                .iter()
                .map(|(l, f)| (l.clone(), f.series.clone()))
                .collect(),
            zoom: figs
                .iter()
                .filter_map(|(l, f)| Some((l.clone(), f.zoom.clone()?)))
                .collect(),
        });
        reports.push(report::scenario_report(sc, figs));
    }
    (
        Report {
            seed,
            quick: size == Size::Quick,
            sturnus: current.describe(),
            scenarios: reports,
        },
        runs,
    )
}

/// A scenario with each contender's share series (what the charts draw).
#[derive(Debug, Clone)]
pub struct ScenarioRun {
    /// The scenario.
    pub scenario: Scenario,
    /// `(contender label, share series)`.
    pub series: Vec<(String, metrics::Series)>,
    /// The herd's zoomed series (empty for other scenarios).
    pub zoom: Vec<(String, metrics::Series)>,
}

/// Runs `f` over `jobs` on all cores; results come back in job order (so threads never change
/// the figures).
pub(crate) fn run_jobs<J: Sync, R: Send>(jobs: &[J], f: impl Fn(&J) -> R + Sync) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(jobs.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut out: Vec<(usize, R)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(job) = jobs.get(i) else { break };
                        mine.push((i, f(job)));
                    }
                    mine
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}

/// `sturnus simulate`: runs, prints the table (or JSON), writes charts; returns the exit code.
pub fn main(args: &SimulateArgs) -> i32 {
    let size = if args.quick { Size::Quick } else { Size::Full };
    if let Some(n) = args.family {
        return family_main(args, n, size);
    }
    let run = args.variant().and_then(|v| {
        let scenarios = if args.sweep {
            family::sweep(size)?
        } else {
            select(&args.scenarios, &args.scenario_files, size)?
        };
        Ok(simulate(args.seed, &scenarios, size, v))
    });
    let (report, runs) = match run {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let markdown = if args.sweep {
        family_report::sweep_markdown(&report) + "\n" + &report::markdown(&report)
    } else {
        report::markdown(&report)
    };
    let write = |dir: &std::path::Path, markdown: &str, json: &str| {
        if args.sweep {
            write_files(dir, &[("sweep.md", markdown), ("sweep.json", json)])
        } else {
            write_out(dir, markdown, json, &runs)
        }
    };
    finish(args, &markdown, &report, write, report.all_pass())
}

/// Reports why `sturnus simulate` cannot go on; exit code 1.
fn fail(e: impl std::fmt::Display) -> i32 {
    eprintln!("sturnus simulate: {e}");
    1
}

/// Prints `report` (JSON with `--json`, else `markdown`), has `write` put both under `--out`;
/// returns the exit code (2 with `--check` when `pass` is false).
fn finish(
    args: &SimulateArgs,
    markdown: &str,
    report: &impl serde::Serialize,
    write: impl FnOnce(&std::path::Path, &str, &str) -> Result<(), SimulateError>,
    pass: bool,
) -> i32 {
    let json = match serde_json::to_string_pretty(report) {
        Ok(j) => j,
        Err(e) => return fail(e),
    };
    if let Some(dir) = &args.out {
        if let Err(e) = write(dir, markdown, &json) {
            return fail(e);
        }
    }
    if args.json {
        println!("{json}");
    } else {
        print!("{markdown}");
    }
    if args.check && !pass {
        return 2;
    }
    0
}

/// `sturnus simulate --family N`: draws, runs and judges the family; returns the exit code.
fn family_main(args: &SimulateArgs, n: usize, size: Size) -> i32 {
    let run = args.variant().and_then(|v| {
        let instances = family::instances(args.seed, n, family::FamilySize::of(size))?;
        if let Some(dir) = &args.family_out {
            let files: Vec<(String, &str)> = instances
                .iter()
                .map(|i| (format!("{}.toml", i.scenario.name), i.text.as_str()))
                .collect();
            let named: Vec<(&str, &str)> = files.iter().map(|(f, t)| (f.as_str(), *t)).collect();
            write_files(dir, &named)?;
        }
        Ok(family_report::run(args.seed, &instances, size, v))
    });
    let report = match run {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if args.check {
        for t in report.targets.iter().filter(|t| !t.pass) {
            eprintln!(
                "sturnus simulate: family target missed: {} ({})",
                t.what, t.value
            );
        }
    }
    let write = |dir: &std::path::Path, markdown: &str, json: &str| {
        write_files(dir, &[("family.md", markdown), ("family.json", json)])
    };
    let markdown = family_report::markdown(&report);
    finish(args, &markdown, &report, write, report.all_pass())
}

/// Writes each `(file name, text)` into `dir`, creating it.
fn write_files(dir: &std::path::Path, files: &[(&str, &str)]) -> Result<(), SimulateError> {
    let failed = |path: &std::path::Path| {
        let path = path.to_path_buf();
        |source| SimulateError::Write { path, source }
    };
    std::fs::create_dir_all(dir).map_err(failed(dir))?;
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(failed(&path))?;
    }
    Ok(())
}

/// Writes results.md, results.json, one `<scenario>.svg` per scenario and `herd-zoom.svg`
/// into `dir`.
fn write_out(
    dir: &std::path::Path,
    markdown: &str,
    json: &str,
    runs: &[ScenarioRun],
) -> Result<(), SimulateError> {
    write_files(dir, &[("results.md", markdown), ("results.json", json)])?;
    for run in runs {
        let path = dir.join(format!("{}.svg", run.scenario.name));
        chart::share_chart(&path, &run.scenario, "traffic share over time", &run.series)?;
        if !run.zoom.is_empty() {
            let path = dir.join(format!("{}-zoom.svg", run.scenario.name));
            let what = "one minute of the focus window, half-second bins";
            chart::share_chart(&path, &run.scenario, what, &run.zoom)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_figures() {
        let sc = select(&["outage".to_string()], &[], Size::Quick).unwrap_or_default();
        assert!(!sc.is_empty());
        let a = simulate(5, &sc, Size::Quick, Variant::current()).0;
        let b = simulate(5, &sc, Size::Quick, Variant::current()).0;
        assert_eq!(a, b);
        let c = simulate(6, &sc, Size::Quick, Variant::current()).0;
        assert_ne!(a, c);
    }

    #[test]
    fn unknown_scenario_or_file_is_an_error() {
        let r = select(&["nope".to_string()], &[], Size::Quick);
        assert!(r.is_err_and(|e| e.to_string().contains("unknown scenario \"nope\"")));
        let r = select(&[], &[PathBuf::from("/nonexistent/x.toml")], Size::Quick);
        assert!(r.is_err_and(|e| e.to_string().contains("/nonexistent/x.toml")));
        assert_eq!(
            select(&[], &[], Size::Quick).map(|s| s.len()).ok(),
            Some(scenario::BUILT_IN.len())
        );
    }

    #[test]
    fn what_if_flags_shape_the_variant() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: SimulateArgs,
        }
        let cli = Cli::parse_from([
            "x",
            "--exploit-k",
            "3",
            "--ewma-alpha",
            "0.3",
            "--no-wait-age",
        ]);
        let v = cli.args.variant();
        assert!(v.is_ok_and(|v| v.params.exploit_k == 3.0
            && v.params.ewma_alpha == 0.3
            && !v.wait_age
            && v.retry_after));
        for clash in [
            &["x", "--family", "3", "--scenario", "herd"][..],
            &["x", "--sweep", "--family", "3"],
            &["x", "--sweep", "--scenario-file", "f.toml"],
            &["x", "--family-out", "d"],
        ] {
            assert!(Cli::try_parse_from(clash).is_err(), "{clash:?}");
        }
        let bad = Cli::parse_from(["x", "--ewma-alpha", "0"]);
        assert!(bad
            .args
            .variant()
            .is_err_and(|e| e.to_string().contains("ewma_alpha")));
    }

    #[test]
    fn jobs_keep_order() {
        let jobs: Vec<u64> = (0..50).collect();
        assert_eq!(
            run_jobs(&jobs, |j| j * 2),
            (0..50).map(|j| j * 2).collect::<Vec<_>>()
        );
    }
}
