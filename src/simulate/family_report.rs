//! Running the scenario family and judging it: per strategy, the median and worst ratio of
//! mean latency to the oracle's, and the instances lost to the best simple peer.
//!
//! Every instance runs at the engine seed a lone `--scenario-file` run of its file gets, so
//! any instance reruns alone with the same figures. A strategy "loses" an instance when its
//! mean latency is more than [`LOSS_MARGIN`] above the best simple peer's (round-robin,
//! random, P2C peak-EWMA) among the peers that fail no more requests than it does: failing
//! fast is not being fast.

use super::engine;
use super::family::{Capacity, Draw, Instance};
use super::metrics;
use super::report::{self, ScenarioReport, SUBJECT};
use super::scenario::{self, Size};
use super::sturnus::Variant;
use serde::Serialize;
use std::fmt::Write;

/// How much slower than the best simple peer still counts as even (2 %).
pub const LOSS_MARGIN: f64 = 1.02;

/// The family's bar for sturnus's median ratio to the oracle.
pub const MEDIAN_TARGET: f64 = 1.05;

/// One strategy in one instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// Contender label.
    pub strategy: String,
    /// Mean request latency in the focus window, ms.
    pub mean_ms: f64,
    /// Requests that failed after all retries, %.
    pub failed_pct: f64,
    /// Mean latency over the oracle's.
    pub vs_oracle: f64,
    /// Mean latency over the best simple peer's (among those failing no more), if any.
    pub vs_best_peer: Option<f64>,
    /// That peer.
    pub best_peer: Option<String>,
}

/// One instance's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceResult {
    /// Scenario name (its file is `<name>.toml` under `--family-out`).
    pub name: String,
    /// What was drawn.
    pub draw: Draw,
    /// One entry per contender.
    pub entries: Vec<Entry>,
}

/// A strategy over the whole family.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategySummary {
    /// Contender label.
    pub strategy: String,
    /// Median over instances of mean latency over the oracle's.
    pub median_vs_oracle: f64,
    /// The largest such ratio.
    pub worst_vs_oracle: f64,
    /// The instance where it was largest.
    pub worst_instance: String,
    /// Instances where it is more than [`LOSS_MARGIN`] slower than the best simple peer.
    pub losses: usize,
    /// Its largest ratio to the best simple peer.
    pub worst_vs_best_peer: f64,
    /// The instance where that ratio was largest.
    pub worst_vs_best_peer_instance: String,
    /// The median again over the instances of each kind of provider: what the load signals
    /// do where providers queue, apart from what estimating costs where they do not.
    pub by_capacity: Vec<KindMedian>,
    /// The median again over the instances of each size of fleet ([`FLEET_SIZES`]): what a
    /// busy proxy learns from its own answers, apart from what a quiet sidecar can.
    pub by_fleet: Vec<FleetMedian>,
}

/// The sizes of fleet the family's medians are also given for, as (label, fewest proxies,
/// most proxies): a lone proxy or a pair, a handful of replicas, many sidecars.
pub const FLEET_SIZES: [(&str, usize, usize); 3] =
    [("1-2", 1, 2), ("3-20", 3, 20), ("21+", 21, usize::MAX)];

/// A strategy's median over the instances of one size of fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetMedian {
    /// The range of proxies, a label of [`FLEET_SIZES`].
    pub proxies: &'static str,
    /// How many instances drew it.
    pub instances: usize,
    /// Median over them of mean latency over the oracle's.
    pub median_vs_oracle: f64,
}

/// A strategy's median over the instances of one kind of provider.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindMedian {
    /// hosted, limited or mixed.
    pub capacity: &'static str,
    /// How many instances drew it.
    pub instances: usize,
    /// Median over them of mean latency over the oracle's.
    pub median_vs_oracle: f64,
}

/// The family's verdict on one target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FamilyTarget {
    /// What is required.
    pub what: String,
    /// What was measured.
    pub value: String,
    /// True when met.
    pub pass: bool,
}

/// The whole family run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FamilyReport {
    /// Seed of the draws and the runs.
    pub seed: u64,
    /// True for the test suite's size.
    pub quick: bool,
    /// How the "sturnus" contender was configured.
    pub sturnus: String,
    /// Per strategy, in contender order.
    pub strategies: Vec<StrategySummary>,
    /// The targets, checked on "sturnus".
    pub targets: Vec<FamilyTarget>,
    /// Per instance.
    pub instances: Vec<InstanceResult>,
}

impl FamilyReport {
    /// True when every target holds.
    pub fn all_pass(&self) -> bool {
        self.targets.iter().all(|t| t.pass)
    }
}

/// Runs every contender through every instance (at the seed a lone run of its file gets)
/// and judges the family.
pub fn run(seed: u64, instances: &[Instance], size: Size, current: Variant) -> FamilyReport {
    let jobs: Vec<(usize, scenario::Contender)> = instances
        .iter()
        .enumerate()
        .flat_map(|(i, inst)| {
            scenario::contenders_for(current, &inst.scenario)
                .into_iter()
                .map(move |c| (i, c))
        })
        .collect();
    let figures = super::run_jobs(&jobs, |&(i, c)| {
        let sc = &instances[i].scenario;
        let log = engine::run(sc, c, engine::derive(seed, 0));
        metrics::figures(sc, &log)
    });
    let results: Vec<InstanceResult> = instances
        .iter()
        .enumerate()
        .map(|(i, inst)| {
            let figs: Vec<(String, metrics::Figures)> = jobs
                .iter()
                .zip(&figures)
                .filter(|((ji, _), _)| *ji == i)
                .map(|((_, c), f)| (c.label().to_string(), f.clone()))
                .collect();
            let rep = report::scenario_report(&inst.scenario, figs);
            judge(&inst.scenario.name, &inst.draw, &rep)
        })
        .collect();
    summarise(seed, size, current, results)
}

/// One instance's entries from its scenario report.
pub fn judge(name: &str, draw: &Draw, rep: &ScenarioReport) -> InstanceResult {
    let entries = rep
        .rows
        .iter()
        .map(|r| {
            let peer = rep
                .rows
                .iter()
                .filter(|p| p.strategy != r.strategy)
                .filter(|p| report::PROBING.contains(&p.strategy.as_str()))
                .filter(|p| p.figures.failed_pct <= r.figures.failed_pct)
                .min_by(|a, b| a.figures.mean_ms.total_cmp(&b.figures.mean_ms));
            Entry {
                strategy: r.strategy.clone(),
                mean_ms: r.figures.mean_ms,
                failed_pct: r.figures.failed_pct,
                vs_oracle: r.mean_vs_oracle,
                vs_best_peer: peer
                    .map(|p| r.figures.mean_ms / p.figures.mean_ms.max(f64::MIN_POSITIVE)),
                best_peer: peer.map(|p| p.strategy.clone()),
            }
        })
        .collect();
    InstanceResult {
        name: name.to_string(),
        draw: draw.clone(),
        entries,
    }
}

/// Median of `v` (0 when empty).
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// How many of `instances` drew what `keep` accepts, and the median of `label`'s mean latency
/// over the oracle's among them.
fn median_where(
    instances: &[InstanceResult],
    label: &str,
    keep: impl Fn(&Draw) -> bool,
) -> (usize, f64) {
    let ratios: Vec<f64> = instances
        .iter()
        .filter(|i| keep(&i.draw))
        .filter_map(|i| i.entries.iter().find(|e| e.strategy == label))
        .map(|e| e.vs_oracle)
        .collect();
    (ratios.len(), median(ratios))
}

/// The family's summary and targets from its instances' results.
pub fn summarise(
    seed: u64,
    size: Size,
    current: Variant,
    instances: Vec<InstanceResult>,
) -> FamilyReport {
    let labels: Vec<String> = instances
        .first()
        .map(|i| i.entries.iter().map(|e| e.strategy.clone()).collect())
        .unwrap_or_default();
    let strategies: Vec<StrategySummary> = labels
        .iter()
        .map(|label| {
            let mine: Vec<(&str, &Entry)> = instances
                .iter()
                .filter_map(|i| {
                    let e = i.entries.iter().find(|e| &e.strategy == label)?;
                    Some((i.name.as_str(), e))
                })
                .collect();
            let by_capacity = Capacity::ALL
                .iter()
                .map(|&kind| {
                    let (n, m) = median_where(&instances, label, |d| d.capacity == kind);
                    KindMedian {
                        capacity: kind.name(),
                        instances: n,
                        median_vs_oracle: m,
                    }
                })
                .collect();
            let by_fleet = FLEET_SIZES
                .iter()
                .map(|&(proxies, fewest, most)| {
                    let (n, m) =
                        median_where(&instances, label, |d| (fewest..=most).contains(&d.proxies));
                    FleetMedian {
                        proxies,
                        instances: n,
                        median_vs_oracle: m,
                    }
                })
                .collect();
            let worst = mine
                .iter()
                .max_by(|a, b| a.1.vs_oracle.total_cmp(&b.1.vs_oracle));
            let vs_peer = |e: &Entry| e.vs_best_peer.unwrap_or(0.0);
            let worst_peer = mine
                .iter()
                .max_by(|a, b| vs_peer(a.1).total_cmp(&vs_peer(b.1)));
            StrategySummary {
                strategy: label.clone(),
                median_vs_oracle: median(mine.iter().map(|(_, e)| e.vs_oracle).collect()),
                worst_vs_oracle: worst.map_or(0.0, |w| w.1.vs_oracle),
                worst_instance: worst.map_or_else(String::new, |w| w.0.to_string()),
                losses: mine
                    .iter()
                    .filter(|(_, e)| vs_peer(e) > LOSS_MARGIN)
                    .count(),
                worst_vs_best_peer: worst_peer.map_or(0.0, |w| vs_peer(w.1)),
                worst_vs_best_peer_instance: worst_peer
                    .map_or_else(String::new, |w| w.0.to_string()),
                by_capacity,
                by_fleet,
            }
        })
        .collect();
    let targets = strategies
        .iter()
        .find(|s| s.strategy == SUBJECT)
        .map(|s| {
            vec![
                FamilyTarget {
                    what: format!(
                        "mean latency <= {LOSS_MARGIN} x the best simple peer in every instance"
                    ),
                    value: format!(
                        "{} of {} instances lost (worst {:.3} x in {})",
                        s.losses,
                        instances.len(),
                        s.worst_vs_best_peer,
                        s.worst_vs_best_peer_instance
                    ),
                    pass: s.losses == 0,
                },
                FamilyTarget {
                    what: format!("median mean latency <= {MEDIAN_TARGET} x oracle"),
                    value: format!("{:.3} x", s.median_vs_oracle),
                    pass: s.median_vs_oracle <= MEDIAN_TARGET,
                },
            ]
        })
        .unwrap_or_default();
    FamilyReport {
        seed,
        quick: size == Size::Quick,
        sturnus: current.describe(),
        strategies,
        targets,
        instances,
    }
}

/// The family report as markdown: the per-strategy table, the targets, the worst instances
/// with their parameters, then sturnus in every instance.
pub fn markdown(r: &FamilyReport) -> String {
    let mut s = String::new();
    let size = if r.quick { "quick" } else { "full" };
    let _ = writeln!(
        s,
        "# sturnus scenario family ({} instances, seed {}, {size} size)\n",
        r.instances.len(),
        r.seed
    );
    let _ = writeln!(s, "\"sturnus\": {}.\n", r.sturnus);
    let _ = writeln!(
        s,
        "| strategy | median x oracle | worst x oracle | worst instance | lost to best simple peer (> {:.0}%) | worst x best peer |",
        (LOSS_MARGIN - 1.0) * 100.0
    );
    let _ = writeln!(s, "|---|---:|---:|---|---:|---:|");
    for st in &r.strategies {
        let _ = writeln!(
            s,
            "| {} | {:.3} | {:.3} | {} | {} | {:.3} ({}) |",
            st.strategy,
            st.median_vs_oracle,
            st.worst_vs_oracle,
            st.worst_instance,
            st.losses,
            st.worst_vs_best_peer,
            st.worst_vs_best_peer_instance
        );
    }
    breakdown(&mut s, r, "kind of provider", |st| {
        st.by_capacity
            .iter()
            .map(|k| (k.capacity.to_string(), k.instances, k.median_vs_oracle))
            .collect()
    });
    breakdown(&mut s, r, "size of fleet", |st| {
        st.by_fleet
            .iter()
            .map(|f| {
                (
                    format!("{} proxies", f.proxies),
                    f.instances,
                    f.median_vs_oracle,
                )
            })
            .collect()
    });
    let _ = writeln!(s, "\nTargets (sturnus):\n");
    for t in &r.targets {
        let mark = if t.pass { "pass" } else { "MISSED" };
        let _ = writeln!(s, "- {mark}: {} — {}", t.what, t.value);
    }
    if let Some(st) = r.strategies.iter().find(|s| s.strategy == SUBJECT) {
        let _ = writeln!(s, "\nsturnus's worst instances:\n");
        for (what, name) in [
            ("against the oracle", &st.worst_instance),
            (
                "against the best simple peer",
                &st.worst_vs_best_peer_instance,
            ),
        ] {
            if let Some(i) = r.instances.iter().find(|i| &i.name == name) {
                let _ = writeln!(s, "- {what}: {} — {}", i.name, i.draw.summary());
            }
        }
    }
    let _ = writeln!(
        s,
        "\n| instance | sturnus x oracle | sturnus failed % | best simple peer | sturnus x best peer | parameters |"
    );
    let _ = writeln!(s, "|---|---:|---:|---|---:|---|");
    for i in &r.instances {
        let Some(e) = i.entries.iter().find(|e| e.strategy == SUBJECT) else {
            continue;
        };
        let _ = writeln!(
            s,
            "| {} | {:.3} | {:.2} | {} | {} | {} |",
            i.name,
            e.vs_oracle,
            e.failed_pct,
            e.best_peer.as_deref().unwrap_or("-"),
            e.vs_best_peer
                .map_or_else(|| "-".to_string(), |v| format!("{v:.3}")),
            i.draw.summary()
        );
    }
    s
}

/// One table of the strategies' medians over groups of instances: `groups` gives a
/// strategy's (group, instances, median) in order, the same groups for every strategy.
fn breakdown(
    s: &mut String,
    r: &FamilyReport,
    by: &str,
    groups: impl Fn(&StrategySummary) -> Vec<(String, usize, f64)>,
) {
    let Some(first) = r.strategies.first() else {
        return;
    };
    let header = groups(first);
    let _ = write!(s, "\nMedian x oracle by {by}:\n\n| strategy |");
    for (group, instances, _) in &header {
        let _ = write!(s, " {group} ({instances}) |");
    }
    let _ = writeln!(s, "\n|---|{}", "---:|".repeat(header.len()));
    for st in &r.strategies {
        let _ = write!(s, "| {} |", st.strategy);
        for (_, _, m) in groups(st) {
            let _ = write!(s, " {m:.3} |");
        }
        let _ = writeln!(s);
    }
}

/// The fleet-size sweep's summary: per fleet size, each contender's mean latency over the
/// oracle's.
pub fn sweep_markdown(r: &report::Report) -> String {
    let mut s = String::new();
    let labels: Vec<&str> = r
        .scenarios
        .first()
        .map(|sc| sc.rows.iter().map(|row| row.strategy.as_str()).collect())
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "# Fleet-size sweep (seed {}): mean latency x oracle\n",
        r.seed
    );
    let _ = writeln!(s, "| proxies | {} |", labels.join(" | "));
    let _ = writeln!(s, "|---|{}", "---:|".repeat(labels.len()));
    for sc in &r.scenarios {
        let cells: Vec<String> = sc
            .rows
            .iter()
            .map(|row| format!("{:.3}", row.mean_vs_oracle))
            .collect();
        let _ = writeln!(s, "| {} | {} |", sc.sidecars, cells.join(" | "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::family::{instances, FamilySize};
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(Vec::new()), 0.0);
    }

    #[test]
    fn a_peer_failing_more_does_not_count_as_better() {
        let inst = instances(1, 1, FamilySize::QUICK).unwrap_or_default();
        let sc = &inst[0].scenario;
        let fig = |mean_ms: f64, failed_pct: f64| {
            let mut f = metrics::figures(sc, &engine::RunLog::default());
            f.mean_ms = mean_ms;
            f.failed_pct = failed_pct;
            f
        };
        let rows = vec![
            ("sturnus".to_string(), fig(110.0, 1.0)),
            ("oracle".to_string(), fig(100.0, 0.0)),
            ("round-robin".to_string(), fig(90.0, 5.0)),
            ("random".to_string(), fig(120.0, 0.5)),
            ("p2c-peak-ewma".to_string(), fig(105.0, 1.0)),
        ];
        let rep = report::scenario_report(sc, rows);
        let got = judge("x", &inst[0].draw, &rep);
        let me = &got.entries[0];
        // Round-robin is faster but fails more: P2C is the bar.
        assert_eq!(me.best_peer.as_deref(), Some("p2c-peak-ewma"));
        assert!((me.vs_best_peer.unwrap_or(0.0) - 110.0 / 105.0).abs() < 1e-12);
        let fam = summarise(1, Size::Quick, Variant::current(), vec![got]);
        let st = &fam.strategies[0];
        assert_eq!((st.strategy.as_str(), st.losses), ("sturnus", 1));
        assert!(!fam.all_pass());
        assert!(markdown(&fam).contains("MISSED"));
    }

    /// One instance's result with sturnus alone at `vs_oracle`, drawn as `draw`.
    fn sturnus_at(draw: Draw, vs_oracle: f64) -> InstanceResult {
        InstanceResult {
            name: "x".to_string(),
            draw,
            entries: vec![Entry {
                strategy: "sturnus".to_string(),
                mean_ms: 100.0 * vs_oracle,
                failed_pct: 0.0,
                vs_oracle,
                vs_best_peer: None,
                best_peer: None,
            }],
        }
    }

    #[test]
    fn medians_are_also_given_per_kind_of_provider() {
        let inst = instances(1, 1, FamilySize::QUICK).unwrap_or_default();
        let result = |capacity: Capacity, vs_oracle: f64| {
            let draw = Draw {
                capacity,
                ..inst[0].draw.clone()
            };
            sturnus_at(draw, vs_oracle)
        };
        let all = vec![
            result(Capacity::Hosted, 1.1),
            result(Capacity::Limited, 1.0),
            result(Capacity::Hosted, 1.3),
        ];
        let fam = summarise(1, Size::Quick, Variant::current(), all);
        let kinds: Vec<(&str, usize, f64)> = fam.strategies[0]
            .by_capacity
            .iter()
            .map(|k| (k.capacity, k.instances, k.median_vs_oracle))
            .collect();
        assert_eq!(kinds[0].0, "hosted");
        assert_eq!(kinds[0].1, 2);
        assert!((kinds[0].2 - 1.2).abs() < 1e-12, "{kinds:?}");
        assert_eq!(&kinds[1..], &[("limited", 1, 1.0), ("mixed", 0, 0.0)]);
        assert!(markdown(&fam).contains("| sturnus | 1.200 | 1.000 | 0.000 |"));
    }

    #[test]
    fn medians_are_also_given_per_size_of_fleet() {
        let inst = instances(1, 1, FamilySize::QUICK).unwrap_or_default();
        let result = |proxies: usize, vs_oracle: f64| {
            let draw = Draw {
                proxies,
                ..inst[0].draw.clone()
            };
            sturnus_at(draw, vs_oracle)
        };
        let all = vec![
            result(1, 1.0),
            result(2, 1.1),
            result(20, 1.2),
            result(21, 1.4),
            result(500, 1.3),
        ];
        let fam = summarise(1, Size::Quick, Variant::current(), all);
        let sizes: Vec<(&str, usize, f64)> = fam.strategies[0]
            .by_fleet
            .iter()
            .map(|f| (f.proxies, f.instances, f.median_vs_oracle))
            .collect();
        assert_eq!(sizes[1], ("3-20", 1, 1.2));
        assert_eq!((sizes[0].0, sizes[0].1), ("1-2", 2));
        assert_eq!((sizes[2].0, sizes[2].1), ("21+", 2));
        assert!((sizes[0].2 - 1.05).abs() < 1e-12, "{sizes:?}");
        assert!((sizes[2].2 - 1.35).abs() < 1e-12, "{sizes:?}");
        let md = markdown(&fam);
        assert!(md.contains("by size of fleet"), "{md}");
        assert!(
            md.contains("| 1-2 proxies (2) | 3-20 proxies (1) | 21+ proxies (2) |"),
            "{md}"
        );
        assert!(md.contains("| sturnus | 1.050 | 1.200 | 1.350 |"), "{md}");
    }
}
