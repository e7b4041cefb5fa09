//! The scenario family: seeded instances drawn from ranges of deployment shapes.
//!
//! Each instance is drawn as a scenario file's text (the schema of [`super::scenario_file`]),
//! then parsed: what runs is exactly what `--family-out` writes, so `--scenario-file` reruns an
//! instance with the same figures. The ranges: 1 to 500 proxies (log-uniform) at a fixed total
//! offered load, some ten times busier than the rest; 2 to 8 providers of unequal speed (100 to
//! 1 000 ms median, log-uniform) and capacity; jitter σ 0.1 to 1.0; all capacity-limited
//! (utilisation 40 to 97 %), all hosted (unlimited) or mixed; and one incident from
//! [`IncidentKind`] on one provider (the fastest half the time).

use super::engine::derive;
use super::scenario::{Scenario, Size};
use super::scenario_file::{self, ScenarioError};
use crate::routing::{RngSource, SplitMix64};
use serde::Serialize;
use std::fmt::Write;

/// What goes wrong in an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IncidentKind {
    /// Nothing: steady conditions.
    None,
    /// Other tenants take part of a capacity-limited provider's servers and give them back,
    /// again and again.
    Tenants,
    /// Latency ramps up step by step, then recovers at once.
    Drift,
    /// Slow and normal in turn, with a period of 5 to 60 s.
    Flapping,
    /// A step slowdown of 2 to 10 ×.
    Step,
    /// 5 to 50 % of attempts fail.
    Flaky,
    /// Every attempt fails (503).
    Outage,
    /// 429s with a short `Retry-After`, renewed until the limit lifts.
    RateLimitRetryAfter,
    /// 429s without `Retry-After`.
    RateLimitBare,
}

/// Every incident kind, in draw order.
pub const INCIDENTS: [IncidentKind; 9] = [
    IncidentKind::None,
    IncidentKind::Tenants,
    IncidentKind::Drift,
    IncidentKind::Flapping,
    IncidentKind::Step,
    IncidentKind::Flaky,
    IncidentKind::Outage,
    IncidentKind::RateLimitRetryAfter,
    IncidentKind::RateLimitBare,
];

/// Which providers have limited capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Capacity {
    /// Every provider serves a fixed number of requests at once and queues the rest.
    Limited,
    /// Every provider is a hosted API with unlimited capacity.
    Hosted,
    /// Some of each.
    Mixed,
}

impl Capacity {
    /// Every kind, in report order.
    pub const ALL: [Capacity; 3] = [Capacity::Hosted, Capacity::Limited, Capacity::Mixed];

    /// Its name in reports (as serialised).
    pub fn name(self) -> &'static str {
        match self {
            Capacity::Hosted => "hosted",
            Capacity::Limited => "limited",
            Capacity::Mixed => "mixed",
        }
    }
}

/// The run length and load of every instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FamilySize {
    /// Requests per second the whole fleet sends.
    pub total_rate: f64,
    /// Length of a run, seconds.
    pub duration_s: f64,
    /// Start of the window the figures cover (the warm-up before it is not counted).
    pub focus_from_s: f64,
    /// When the incident starts and ends.
    pub incident_s: (f64, f64),
}

impl FamilySize {
    /// The published family: 250 requests/s for 120 s, incident from 40 s to 100 s.
    pub const FULL: FamilySize = FamilySize {
        total_rate: 250.0,
        duration_s: 120.0,
        focus_from_s: 20.0,
        incident_s: (40.0, 100.0),
    };

    /// The test suite's: 100 requests/s for 60 s, incident from 20 s to 50 s.
    pub const QUICK: FamilySize = FamilySize {
        total_rate: 100.0,
        duration_s: 60.0,
        focus_from_s: 10.0,
        incident_s: (20.0, 50.0),
    };

    /// The size for `size`.
    pub fn of(size: Size) -> FamilySize {
        match size {
            Size::Full => Self::FULL,
            Size::Quick => Self::QUICK,
        }
    }
}

/// One provider as drawn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DrawnProvider {
    /// Name in the file.
    pub name: String,
    /// Median time to first chunk, ms.
    pub median_ms: f64,
    /// Parallel servers (`None`: hosted, unlimited).
    pub servers: Option<u32>,
}

/// The parameters one instance was drawn with (what the report shows of it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Draw {
    /// Proxies (sidecars) in all.
    pub proxies: usize,
    /// Of them, how many send ten times the others' rate (0: all equal).
    pub busy: usize,
    /// Requests per second of a quiet and of a busy proxy.
    pub rates: (f64, f64),
    /// Which providers are capacity-limited.
    pub capacity: Capacity,
    /// Offered load over the capacity-limited providers' capacity (`None`: all hosted).
    pub utilisation: Option<f64>,
    /// Jitter σ of every provider.
    pub jitter: f64,
    /// The providers.
    pub providers: Vec<DrawnProvider>,
    /// The incident.
    pub incident: IncidentKind,
    /// The provider it hits (`None` for no incident).
    pub affected: Option<String>,
    /// Its strength: slow factor, failure fraction, flap or tenant period in s, Retry-After s
    /// (whichever applies).
    pub strength: Option<f64>,
}

impl Draw {
    /// One line that says what the instance is.
    pub fn summary(&self) -> String {
        let mut s = format!("{} proxies", self.proxies);
        if self.busy > 0 {
            let _ = write!(s, " ({} at 10x)", self.busy);
        }
        let providers: Vec<String> = self
            .providers
            .iter()
            .map(|p| match p.servers {
                Some(c) => format!("{:.0} ms x{c}", p.median_ms),
                None => format!("{:.0} ms hosted", p.median_ms),
            })
            .collect();
        let _ = write!(s, ", providers {}", providers.join(", "));
        if let Some(u) = self.utilisation {
            let _ = write!(s, ", load {:.0}% of capacity", u * 100.0);
        }
        let _ = write!(s, ", jitter {:.2}", self.jitter);
        match (&self.affected, self.strength) {
            (Some(p), Some(x)) => {
                let _ = write!(s, "; {} ({x:.2}) on {p}", kind_name(self.incident));
            }
            (Some(p), None) => {
                let _ = write!(s, "; {} on {p}", kind_name(self.incident));
            }
            _ => s.push_str("; no incident"),
        }
        s
    }
}

/// The incident's name as serialized.
pub fn kind_name(kind: IncidentKind) -> &'static str {
    match kind {
        IncidentKind::None => "none",
        IncidentKind::Tenants => "tenants",
        IncidentKind::Drift => "drift",
        IncidentKind::Flapping => "flapping",
        IncidentKind::Step => "step",
        IncidentKind::Flaky => "flaky",
        IncidentKind::Outage => "outage",
        IncidentKind::RateLimitRetryAfter => "rate-limit-retry-after",
        IncidentKind::RateLimitBare => "rate-limit-bare",
    }
}

/// One drawn instance: the scenario file's text, the scenario it parses to and its draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// The scenario file (what `--family-out` writes).
    pub text: String,
    /// The parsed scenario (what runs).
    pub scenario: Scenario,
    /// The parameters.
    pub draw: Draw,
}

/// Uniform draw in `[lo, hi)`.
fn uniform(rng: &mut SplitMix64, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.next_f64()
}

/// Log-uniform draw in `[lo, hi)`.
fn log_uniform(rng: &mut SplitMix64, lo: f64, hi: f64) -> f64 {
    uniform(rng, lo.ln(), hi.ln()).exp()
}

/// Uniform integer in `lo..=hi`.
fn between(rng: &mut SplitMix64, lo: usize, hi: usize) -> usize {
    lo + (rng.next_u64() % (hi - lo + 1) as u64) as usize
}

/// Rounds to `digits` decimals (files stay readable; what runs is what is written).
fn round(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

/// Draws instance `index` of the family of `seed` at `size`.
pub fn instance(seed: u64, index: usize, size: FamilySize) -> Result<Instance, ScenarioError> {
    let mut rng = SplitMix64::new(derive(derive(seed, 0xFA31), index as u64));
    let draw = draw(&mut rng, size);
    let name = format!("family-{index:04}");
    let text = file_text(&name, &draw, &mut rng, size);
    let scenario = scenario_file::parse(&text, Size::Full)?;
    Ok(Instance {
        text,
        scenario,
        draw,
    })
}

/// The first `n` instances of the family of `seed`.
pub fn instances(seed: u64, n: usize, size: FamilySize) -> Result<Vec<Instance>, ScenarioError> {
    (0..n).map(|i| instance(seed, i, size)).collect()
}

/// Draws an instance's parameters (the timeline's details come later, in [`file_text`]).
fn draw(rng: &mut SplitMix64, size: FamilySize) -> Draw {
    let proxies = log_uniform(rng, 1.0, 501.0).floor().clamp(1.0, 500.0) as usize;
    let busy = if proxies > 1 && rng.next_f64() < 0.5 {
        ((proxies as f64 * uniform(rng, 0.1, 0.3)).round() as usize).clamp(1, proxies - 1)
    } else {
        0
    };
    let quiet = size.total_rate / (proxies - busy + 10 * busy) as f64;
    let rates = (round(quiet, 4), round(10.0 * quiet, 4));
    let n = between(rng, 2, 8);
    let capacity = match rng.next_u64() % 3 {
        0 => Capacity::Limited,
        1 => Capacity::Hosted,
        _ => Capacity::Mixed,
    };
    let jitter = round(uniform(rng, 0.1, 1.0), 2);
    let limited: Vec<bool> = match capacity {
        Capacity::Limited => vec![true; n],
        Capacity::Hosted => vec![false; n],
        Capacity::Mixed => {
            // At least one of each kind.
            let k = between(rng, 1, n - 1);
            let mut v: Vec<bool> = (0..n).map(|i| i < k).collect();
            for i in (1..n).rev() {
                v.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            v
        }
    };
    let medians: Vec<f64> = (0..n)
        .map(|_| round(log_uniform(rng, 100.0, 1000.0), 0))
        .collect();
    let weights: Vec<f64> = (0..n).map(|_| uniform(rng, 0.5, 2.0)).collect();
    let utilisation = limited
        .iter()
        .any(|&l| l)
        .then(|| round(uniform(rng, 0.40, 0.97), 3));
    // Servers so that the offered load is `utilisation` of the limited providers' capacity
    // (requests per second a provider can serve: servers / mean service time).
    let mean_factor = (jitter * jitter / 2.0).exp();
    let servers: Vec<Option<u32>> = match utilisation {
        None => vec![None; n],
        Some(u) => {
            let need = size.total_rate / u;
            let per_weight: f64 = limited
                .iter()
                .zip(&weights)
                .filter(|(l, _)| **l)
                .map(|(_, w)| w)
                .sum();
            (0..n)
                .map(|i| {
                    limited[i].then(|| {
                        let rps = need * weights[i] / per_weight;
                        let mean_s = medians[i] * mean_factor / 1000.0;
                        ((rps * mean_s).round() as u32).max(1)
                    })
                })
                .collect()
        }
    };
    // Utilisation as the rounded server counts give it.
    let utilisation = utilisation.map(|_| {
        let cap: f64 = (0..n)
            .filter_map(|i| servers[i].map(|c| f64::from(c) / (medians[i] * mean_factor / 1000.0)))
            .sum();
        round(size.total_rate / cap, 3)
    });
    let providers: Vec<DrawnProvider> = (0..n)
        .map(|i| DrawnProvider {
            name: format!("p{i}"),
            median_ms: medians[i],
            servers: servers[i],
        })
        .collect();
    let mut incident = INCIDENTS[(rng.next_u64() % INCIDENTS.len() as u64) as usize];
    if incident == IncidentKind::Tenants && utilisation.is_none() {
        // Nothing to take capacity from: a step slowdown instead.
        incident = IncidentKind::Step;
    }
    let fastest = (0..n)
        .min_by(|&a, &b| medians[a].total_cmp(&medians[b]))
        .unwrap_or(0);
    let affected = match incident {
        IncidentKind::None => None,
        IncidentKind::Tenants => {
            let limited: Vec<usize> = (0..n).filter(|&i| servers[i].is_some()).collect();
            let pick = if servers[fastest].is_some() && rng.next_f64() < 0.5 {
                fastest
            } else {
                limited[(rng.next_u64() % limited.len() as u64) as usize]
            };
            Some(pick)
        }
        _ if rng.next_f64() < 0.5 => Some(fastest),
        _ => Some((rng.next_u64() % n as u64) as usize),
    };
    let strength = match incident {
        IncidentKind::None | IncidentKind::Outage | IncidentKind::RateLimitBare => None,
        IncidentKind::Tenants => Some(round(uniform(rng, 10.0, 30.0), 1)),
        IncidentKind::Drift | IncidentKind::Step => Some(round(uniform(rng, 2.0, 10.0), 2)),
        IncidentKind::Flapping => Some(round(uniform(rng, 5.0, 60.0), 1)),
        IncidentKind::Flaky => Some(round(uniform(rng, 0.05, 0.5), 3)),
        IncidentKind::RateLimitRetryAfter => Some(between(rng, 2, 15) as f64),
    };
    Draw {
        proxies,
        busy,
        rates,
        capacity,
        utilisation,
        jitter,
        providers,
        incident,
        affected: affected.map(|i| format!("p{i}")),
        strength,
    }
}

/// The scenario file of an instance: the fleet, the providers and the affected provider's
/// timeline.
fn file_text(name: &str, d: &Draw, rng: &mut SplitMix64, size: FamilySize) -> String {
    let (t0, t1) = size.incident_s;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# An instance of the scenario family (`sturnus simulate --family`)."
    );
    let _ = writeln!(s, "name = {name:?}");
    let _ = writeln!(s, "title = {:?}", format!("{name}: {}", d.summary()));
    if d.busy == 0 {
        let _ = writeln!(s, "sidecars = {}\nrate = {}", d.proxies, d.rates.0);
    } else {
        let _ = writeln!(
            s,
            "group = [\n  {{ sidecars = {}, rate = {} }},\n  {{ sidecars = {}, rate = {} }},\n]",
            d.busy,
            d.rates.1,
            d.proxies - d.busy,
            d.rates.0
        );
    }
    let _ = writeln!(s, "duration_s = {}", size.duration_s);
    let _ = writeln!(s, "focus_s = [{}, {}]", size.focus_from_s, size.duration_s);
    let herd = d.providers.iter().any(|p| p.servers.is_some());
    let _ = writeln!(s, "figures = {:?}", if herd { "herd" } else { "incident" });
    if let Some(p) = &d.affected {
        let _ = writeln!(
            s,
            "incident = {{ provider = {p:?}, start_s = {t0}, end_s = {t1} }}"
        );
    }
    // The family's judge is `--family`'s report; a rerun lists the figures only.
    let _ = writeln!(s, "\n[targets]\nbeat_probing = false");
    for p in &d.providers {
        let _ = writeln!(s, "\n[[provider]]\nname = {:?}", p.name);
        let _ = writeln!(s, "median_ms = {}\njitter = {}", p.median_ms, d.jitter);
        if let Some(c) = p.servers {
            let _ = writeln!(s, "servers = {c}");
        }
        if d.affected.as_deref() == Some(p.name.as_str()) {
            let phases = timeline(d, p, rng, size);
            let _ = writeln!(s, "phase = [");
            for ph in phases {
                let _ = writeln!(s, "  {ph},");
            }
            let _ = writeln!(s, "]");
        }
    }
    s
}

/// The affected provider's phases (TOML inline tables) over the incident window.
fn timeline(d: &Draw, p: &DrawnProvider, rng: &mut SplitMix64, size: FamilySize) -> Vec<String> {
    let (t0, t1) = size.incident_s;
    let x = d.strength.unwrap_or(1.0);
    let normal = |t: f64| format!("{{ from_s = {t}, behaviour = \"normal\" }}");
    let slow = |t: f64, f: f64| format!("{{ from_s = {t}, behaviour = \"slow\", factor = {f} }}");
    let mut out = Vec::new();
    match d.incident {
        IncidentKind::None => {}
        IncidentKind::Tenants => {
            // Every half period the other tenants take 30–80 % of the servers or give them
            // back.
            let full = p.servers.unwrap_or(1);
            let mut t = t0;
            let mut taken = true;
            // No stretch shorter than a second before the end.
            while t + 1.0 < t1 {
                if taken {
                    let keep = round(uniform(rng, 0.2, 0.7), 2);
                    let left = ((f64::from(full) * keep).round() as u32).max(1);
                    out.push(format!(
                        "{{ from_s = {t}, behaviour = \"normal\", servers = {left} }}"
                    ));
                } else {
                    out.push(format!(
                        "{{ from_s = {t}, behaviour = \"normal\", servers = {full} }}"
                    ));
                }
                taken = !taken;
                t = round(t + x / 2.0, 1);
            }
            out.push(format!(
                "{{ from_s = {t1}, behaviour = \"normal\", servers = {full} }}"
            ));
        }
        IncidentKind::Drift => {
            // Up to the factor in 5 s steps, then back at once.
            let steps = ((t1 - t0) / 5.0).floor().max(1.0);
            for k in 0..steps as u32 {
                let f = round(1.0 + (x - 1.0) * f64::from(k + 1) / steps, 3);
                out.push(slow(t0 + 5.0 * f64::from(k), f));
            }
            out.push(normal(t1));
        }
        IncidentKind::Flapping => {
            let factor = round(uniform(rng, 2.0, 10.0), 2);
            let mut t = t0;
            let mut slowed = true;
            while t + 1.0 < t1 {
                out.push(if slowed { slow(t, factor) } else { normal(t) });
                slowed = !slowed;
                t = round(t + x / 2.0, 1);
            }
            out.push(normal(t1));
        }
        IncidentKind::Step => {
            out.push(slow(t0, x));
            out.push(normal(t1));
        }
        IncidentKind::Flaky => {
            out.push(format!(
                "{{ from_s = {t0}, behaviour = \"flaky\", fail = {x} }}"
            ));
            out.push(normal(t1));
        }
        IncidentKind::Outage => {
            out.push(format!("{{ from_s = {t0}, behaviour = \"down\" }}"));
            out.push(normal(t1));
        }
        IncidentKind::RateLimitRetryAfter => {
            // A fresh short Retry-After each window, until the limit lifts.
            let mut t = t0;
            while t < t1 {
                out.push(format!(
                    "{{ from_s = {t}, behaviour = \"rate-limited\", retry_after_s = {x} }}"
                ));
                t += x;
            }
            out.push(normal(t1.max(t)));
        }
        IncidentKind::RateLimitBare => {
            out.push(format!(
                "{{ from_s = {t0}, behaviour = \"down\", status = 429 }}"
            ));
            out.push(normal(t1));
        }
    }
    out
}

/// The fleet sizes of the sweep.
pub const SWEEP_PROXIES: [usize; 7] = [1, 2, 5, 10, 20, 50, 200];

/// The fleet-size sweep's scenario for `proxies`: the herd's three providers (25, 35 and 60
/// servers; 200, 350 and 600 ms) at 250 requests/s in all, carried by `proxies` proxies.
pub fn sweep_text(proxies: usize, size: Size) -> String {
    let (duration, focus) = match size {
        Size::Full => (600, 300),
        Size::Quick => (180, 90),
    };
    let rate = 250.0 / proxies as f64;
    format!(
        r#"# The fleet-size sweep (`sturnus simulate --sweep`): the herd's providers and load.
name = "fleet-{proxies}"
title = "fleet-{proxies}: {proxies} proxies at {rate} requests/s each share the herd's providers"
sidecars = {proxies}
rate = {rate}
duration_s = {duration}
focus_s = [{focus}, {duration}]
figures = "herd"

[targets]
beat_probing = false
mean_vs_oracle = {SWEEP_TARGET}

[[provider]]
name = "fast"
median_ms = 200
servers = 25

[[provider]]
name = "mid"
median_ms = 350
servers = 35

[[provider]]
name = "slow"
median_ms = 600
servers = 60
"#
    )
}

/// The sweep's bar: sturnus within this multiple of the oracle at every fleet size.
pub const SWEEP_TARGET: f64 = 1.10;

/// The sweep's scenarios, smallest fleet first.
pub fn sweep(size: Size) -> Result<Vec<Scenario>, ScenarioError> {
    SWEEP_PROXIES
        .iter()
        .map(|&n| scenario_file::parse(&sweep_text(n, size), Size::Full))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::clock::SEC;
    use super::*;

    #[test]
    fn instances_are_seeded_and_in_range() {
        let a = instances(3, 60, FamilySize::FULL).unwrap_or_else(|e| panic!("{e}"));
        let b = instances(3, 60, FamilySize::FULL).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a, b);
        let c = instances(4, 60, FamilySize::FULL).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(a, c);
        let mut kinds = std::collections::HashSet::new();
        for i in &a {
            let d = &i.draw;
            assert!((1..=500).contains(&d.proxies), "{d:?}");
            assert!((2..=8).contains(&d.providers.len()), "{d:?}");
            assert!((0.1..=1.0).contains(&d.jitter), "{d:?}");
            assert!(d
                .providers
                .iter()
                .all(|p| (100.0..=1000.0).contains(&p.median_ms)));
            // The total offered load is the family's, whatever the fleet's shape.
            let rate = i.scenario.offered_rate() * SEC as f64;
            assert!((rate - 250.0).abs() < 1.0, "{rate} {d:?}");
            assert_eq!(i.scenario.sidecars, d.proxies);
            if let Some(u) = d.utilisation {
                // Rounding to whole servers moves it a little outside the drawn range.
                assert!((0.3..=1.1).contains(&u), "{d:?}");
            }
            kinds.insert(kind_name(d.incident));
            assert!(i.scenario.title.contains(&d.summary()));
        }
        assert!(kinds.len() >= 8, "{kinds:?}");
    }

    #[test]
    fn the_written_file_parses_to_what_runs() {
        for i in instances(1, 30, FamilySize::QUICK).unwrap_or_default() {
            let again = scenario_file::parse(&i.text, Size::Full).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(again, i.scenario);
            assert_eq!(
                i.scenario.duration as f64,
                FamilySize::QUICK.duration_s * SEC as f64
            );
        }
    }

    #[test]
    fn sweep_scenarios_carry_the_herd_load() {
        let all = sweep(Size::Quick).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(all.len(), SWEEP_PROXIES.len());
        for (s, n) in all.iter().zip(SWEEP_PROXIES) {
            assert_eq!(s.sidecars, n);
            assert!((s.offered_rate() * SEC as f64 - 250.0).abs() < 0.5, "{n}");
            assert_eq!(s.targets.mean_vs_oracle, Some(SWEEP_TARGET));
        }
    }
}
