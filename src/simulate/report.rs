//! The comparison table (markdown and JSON) and the target checks.

use super::metrics::{Figures, Herd};
use super::scenario::Scenario;
use serde::Serialize;
use std::fmt::Write;

/// Label of the contender the targets apply to.
pub const SUBJECT: &str = "sturnus";

/// One contender's figures in one scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Contender label.
    pub strategy: String,
    /// Mean latency divided by the oracle's.
    pub mean_vs_oracle: f64,
    /// p95 latency divided by the oracle's.
    pub p95_vs_oracle: f64,
    /// Everything measured.
    #[serde(flatten)]
    pub figures: Figures,
}

/// A target from the issue, checked against one contender's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    /// Contender it applies to.
    pub strategy: String,
    /// What is required.
    pub what: String,
    /// What was measured.
    pub value: String,
    /// True when met.
    pub pass: bool,
}

/// One scenario's rows and targets.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioReport {
    /// Command-line name.
    pub name: String,
    /// Description.
    pub title: String,
    /// True for a herd (herd figures instead of incident figures).
    pub herd: bool,
    /// Provider names with median latencies.
    pub providers: Vec<String>,
    /// Sidecars simulated.
    pub sidecars: usize,
    /// Requests per sidecar.
    pub requests_per_sidecar: u64,
    /// One row per contender.
    pub rows: Vec<Row>,
    /// Targets checked in this scenario.
    pub targets: Vec<Target>,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Seed everything derives from.
    pub seed: u64,
    /// True for the reduced `--quick` configuration.
    pub quick: bool,
    /// How the "sturnus" contender was configured.
    pub sturnus: String,
    /// Per scenario.
    pub scenarios: Vec<ScenarioReport>,
}

impl Report {
    /// True when every target holds.
    pub fn all_pass(&self) -> bool {
        self.scenarios
            .iter()
            .flat_map(|s| &s.targets)
            .all(|t| t.pass)
    }
}

/// Builds a scenario's report from each contender's figures (the oracle among them).
pub fn scenario_report(scenario: &Scenario, results: Vec<(String, Figures)>) -> ScenarioReport {
    let oracle = results
        .iter()
        .find(|(l, _)| l == "oracle")
        .map(|(_, f)| (f.mean_ms, f.p95_ms));
    let rows: Vec<Row> = results
        .into_iter()
        .map(|(strategy, figures)| {
            let (om, op) = oracle.unwrap_or((figures.mean_ms, figures.p95_ms));
            Row {
                strategy,
                mean_vs_oracle: figures.mean_ms / om.max(f64::MIN_POSITIVE),
                p95_vs_oracle: figures.p95_ms / op.max(f64::MIN_POSITIVE),
                figures,
            }
        })
        .collect();
    let targets = targets(scenario, &rows);
    ScenarioReport {
        name: scenario.name.clone(),
        title: scenario.title.clone(),
        providers: scenario
            .providers
            .iter()
            .map(|p| format!("{} ({} ms)", p.name, p.median_ms))
            .collect(),
        herd: scenario.herd,
        sidecars: scenario.sidecars,
        requests_per_sidecar: scenario.duration / scenario.period.max(1),
        rows,
        targets,
    }
}

/// Requests count as text: a number or "never".
fn count(c: Option<usize>) -> String {
    c.map_or_else(|| "never".to_string(), |c| c.to_string())
}

fn target(strategy: &str, what: &str, value: String, pass: bool) -> Target {
    Target {
        strategy: strategy.to_string(),
        what: what.to_string(),
        value,
        pass,
    }
}

/// The contender quota pacing is measured against.
pub const BACK_OFF_ONLY: &str = "sturnus (back-off only)";

/// The contender prefix affinity is measured against.
pub const CACHE_BLIND: &str = "sturnus (cache-blind)";

/// The strategies that probe every provider: sturnus must do at least as well as the best.
pub const PROBING: [&str; 3] = ["round-robin", "random", "p2c-peak-ewma"];

/// The scenario's targets, checked on the "sturnus" row.
fn targets(scenario: &Scenario, rows: &[Row]) -> Vec<Target> {
    let mut out = Vec::new();
    let Some(me) = rows.iter().find(|r| r.strategy == SUBJECT) else {
        return out;
    };
    let f = &me.figures;
    let t = &scenario.targets;
    let mut push = |what: String, value: String, pass: bool| {
        out.push(target(SUBJECT, &what, value, pass));
    };
    if let Some(max) = t.mean_vs_oracle {
        push(
            format!("mean latency <= {max} x oracle"),
            format!("{:.3} x", me.mean_vs_oracle),
            me.mean_vs_oracle <= max,
        );
    }
    if let Some(cut) = t.fewer_429s {
        if let Some(base) = rows.iter().find(|r| r.strategy == BACK_OFF_ONLY) {
            let (mine, theirs) = (f.limited, base.figures.limited);
            let fewer = 1.0 - mine as f64 / theirs.max(1) as f64;
            push(
                format!(
                    "at least {:.0}% fewer 429s than {BACK_OFF_ONLY}",
                    cut * 100.0
                ),
                format!("{mine} vs {theirs} ({:.1}% fewer)", fewer * 100.0),
                fewer >= cut,
            );
            push(
                format!("mean latency no worse than {BACK_OFF_ONLY}"),
                format!("{:.0} ms vs {:.0} ms", f.mean_ms, base.figures.mean_ms),
                f.mean_ms <= base.figures.mean_ms,
            );
        }
    }
    if let Some(cut) = t.faster_than_cache_blind {
        if let Some(base) = rows.iter().find(|r| r.strategy == CACHE_BLIND) {
            let (mine, theirs) = (f.mean_ms, base.figures.mean_ms);
            let lower = 1.0 - mine / theirs.max(f64::MIN_POSITIVE);
            push(
                format!(
                    "mean time to first chunk at least {:.0}% lower than {CACHE_BLIND}",
                    cut * 100.0
                ),
                format!(
                    "{mine:.0} ms vs {theirs:.0} ms ({:.1}% lower)",
                    lower * 100.0
                ),
                lower >= cut,
            );
        }
    }
    if t.beat_probing {
        let best = rows
            .iter()
            .filter(|r| PROBING.contains(&r.strategy.as_str()))
            .map(|r| (r.strategy.as_str(), r.figures.mean_ms))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((name, ms)) = best {
            push(
                "mean latency no worse than the best probing strategy (round-robin, random, p2c)"
                    .to_string(),
                format!("{:.0} ms vs {name} {ms:.0} ms", f.mean_ms),
                f.mean_ms <= ms,
            );
        }
    }
    if let (Some(max), Some(sw)) = (t.switch_within, f.switch_requests) {
        push(
            format!(">= 90% of traffic off the affected provider within {max} requests"),
            count(sw),
            sw.is_some_and(|s| s <= max),
        );
    }
    if let (Some(max), Some(share)) = (t.bad_share, f.bad_share) {
        push(
            format!(
                "<= {}% of attempts reach the affected provider once it has misbehaved a few times",
                max * 100.0
            ),
            format!("{:.2}%", share * 100.0),
            share <= max,
        );
    }
    if let (Some(max), Some(rec)) = (t.recovery_within, f.recovery_requests) {
        push(
            format!("the recovered provider holds the majority again within {max} requests"),
            count(rec),
            rec.is_some_and(|r| r <= max),
        );
    }
    if let Some(h) = &f.herd {
        if let Some(max) = t.sidecar_std {
            push(
                format!("a (median) sidecar's share std <= {max}"),
                format!(
                    "median sidecar {:.3} (worst of {} {:.3})",
                    h.sidecar_std_median, scenario.sidecars, h.sidecar_std_max
                ),
                h.sidecar_std_median <= max,
            );
        }
        if let Some(max) = t.fleet_std {
            push(
                format!("the fleet's share std <= {max}"),
                format!("{:.3}", h.fleet_std),
                h.fleet_std <= max,
            );
        }
    }
    out
}

/// Largest standard deviation of a sidecar's share that still counts as settled.
pub const SETTLED_STD: f64 = 0.1;

/// The herd criterion: the median sidecar's share varies by at most [`SETTLED_STD`].
pub fn settles(h: &Herd) -> bool {
    h.sidecar_std_median <= SETTLED_STD
}

/// Largest standard deviation of the fleet's share that still counts as settled.
pub const FLEET_SETTLED_STD: f64 = 0.05;

/// Table verdict: also says when sidecars settle but the fleet as a whole still swings faster
/// than one sidecar's requests can show.
pub fn verdict(h: &Herd) -> &'static str {
    match (settles(h), h.fleet_std <= FLEET_SETTLED_STD) {
        (true, true) => "settles",
        (true, false) => "sidecars settle, fleet swings",
        (false, _) => "oscillates",
    }
}

/// Percentage text.
fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Optional figure text ("-" when it does not apply).
fn opt<T>(x: Option<T>, f: impl Fn(T) -> String) -> String {
    x.map_or_else(|| "-".to_string(), f)
}

/// The report as markdown: one table per scenario, then its targets.
pub fn markdown(report: &Report) -> String {
    let mut s = String::new();
    let size = if report.quick { "quick" } else { "full" };
    let _ = writeln!(
        s,
        "# sturnus routing simulation (seed {}, {size} run)\n",
        report.seed
    );
    let _ = writeln!(
        s,
        "\"sturnus\": {}. \"latency only, k 3\": exploit_k 3, latency and success EWMAs at 0.3, no waiting age, Retry-After ignored, no congestion discount.\n",
        report.sturnus
    );
    for sc in &report.scenarios {
        let _ = writeln!(s, "## {}\n", sc.title);
        let _ = writeln!(
            s,
            "Providers: {}. {} sidecars x {} requests.\n",
            sc.providers.join(", "),
            sc.sidecars,
            sc.requests_per_sidecar
        );
        if sc.herd {
            s.push_str("| strategy | mean ms | x oracle | p95 ms | x oracle | sidecar share std, 1 s (median / worst) | fleet share std, 0.25 s | mean shares | verdict |\n");
            s.push_str("|---|---:|---:|---:|---:|---:|---:|---|---|\n");
            for r in &sc.rows {
                let f = &r.figures;
                let Some(h) = &f.herd else { continue };
                let shares: Vec<String> = h.mean_shares.iter().map(|x| pct(*x)).collect();
                let _ = writeln!(
                    s,
                    "| {} | {:.0} | {:.2} | {:.0} | {:.2} | {:.3} / {:.3} | {:.3} | {} | {} |",
                    r.strategy,
                    f.mean_ms,
                    r.mean_vs_oracle,
                    f.p95_ms,
                    r.p95_vs_oracle,
                    h.sidecar_std_median,
                    h.sidecar_std_max,
                    h.fleet_std,
                    shares.join(" / "),
                    verdict(h)
                );
            }
        } else {
            s.push_str("| strategy | mean ms | x oracle | p95 ms | x oracle | failed | 429s | cache hits | off affected (req) | new best 90% (req) | share to affected | majority back (req) |\n");
            s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
            for r in &sc.rows {
                let f = &r.figures;
                let _ = writeln!(
                    s,
                    "| {} | {:.0} | {:.2} | {:.0} | {:.2} | {:.2}% | {} | {} | {} | {} | {} | {} |",
                    r.strategy,
                    f.mean_ms,
                    r.mean_vs_oracle,
                    f.p95_ms,
                    r.p95_vs_oracle,
                    f.failed_pct,
                    f.limited,
                    opt(f.hit_rate, pct),
                    opt(f.switch_requests, count),
                    opt(f.new_best_requests, count),
                    opt(f.bad_share, |x| format!("{:.2}%", x * 100.0)),
                    opt(f.recovery_requests, count),
                );
            }
        }
        if !sc.targets.is_empty() {
            s.push('\n');
            for t in &sc.targets {
                let mark = if t.pass { "met" } else { "MISSED" };
                let _ = writeln!(s, "- **{mark}** ({}) {}: {}", t.strategy, t.what, t.value);
            }
        }
        s.push('\n');
    }
    s
}
