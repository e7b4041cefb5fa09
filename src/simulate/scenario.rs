//! The five scenarios and the contenders, with their parameters in one place.
//!
//! Every scenario runs `sidecars` independent sidecars, each sending one request every
//! `period` (with a random phase) for `duration`. In scenarios 1–4 providers have unlimited
//! capacity, so the sidecars do not affect each other and act as independent repetitions that
//! make the per-request figures smooth; in the herd they share capacity-limited providers.

use super::clock::{Micros, MS, SEC};
use super::provider::{Behaviour, Phase, ProviderSpec};
use super::queueing::optimal_split;
use super::strategy::{LowestAverage, Oracle, PowerOfTwo, RoundRobin, Strategy, Uniform};
use super::sturnus::{Sturnus, Variant};

/// Median latencies of the three providers in every scenario (fast, mid, slow), ms.
pub const MEDIANS_MS: [f64; 3] = [200.0, 350.0, 600.0];

/// Names of the three providers.
pub const NAMES: [&str; 3] = ["fast", "mid", "slow"];

/// The provider something happens to, and when.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Incident {
    /// Index of the affected provider.
    pub provider: usize,
    /// When it starts.
    pub start: Micros,
    /// When the provider is healthy again (`None`: never within the run).
    pub end: Option<Micros>,
}

/// One scenario: providers, load and what the figures look at.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Command-line name.
    pub name: &'static str,
    /// One-line description for tables and charts.
    pub title: &'static str,
    /// Modelled providers with their timelines.
    pub providers: Vec<ProviderSpec>,
    /// Number of sidecars.
    pub sidecars: usize,
    /// Interval between two requests of one sidecar.
    pub period: Micros,
    /// Requests arrive during `[0, duration)`.
    pub duration: Micros,
    /// What goes wrong (none in the herd).
    pub incident: Option<Incident>,
    /// Window whose requests the latency figures cover.
    pub focus: (Micros, Micros),
    /// True for the herd: settle/oscillate figures instead of incident figures.
    pub herd: bool,
}

/// How big a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// The published figures.
    Full,
    /// Fewer sidecars and a shorter herd: same shape, for tests.
    Quick,
}

/// Names accepted by `--scenario`.
pub const SCENARIOS: [&str; 5] = ["step", "outage", "flaky", "rate-limited", "herd"];

/// The scenario called `name`, if any.
pub fn scenario(name: &str, size: Size) -> Option<Scenario> {
    // Quick: fewer sidecars, and 30 s instead of 60 s of warm-up before the incident and
    // 60 s instead of 120 s after it (still more than the 500 requests recovery may take).
    let (reps, warmup, after) = match size {
        Size::Full => (100, 60 * SEC, 120 * SEC),
        Size::Quick => (10, 30 * SEC, 60 * SEC),
    };
    let (t1, t2) = (warmup, warmup + 60 * SEC);
    let incident = |behaviour: Behaviour, end: Option<Micros>| {
        let mut providers = three(None);
        providers[0].phases.push(Phase {
            from: if end.is_some() { t1 } else { 0 },
            behaviour,
        });
        if let Some(end) = end {
            providers[0].phases.push(Phase {
                from: end,
                behaviour: Behaviour::Normal,
            });
        }
        providers
    };
    let base = |name, title, providers, incident, focus| Scenario {
        name,
        title,
        providers,
        sidecars: reps,
        period: 100 * MS,
        duration: t2 + after,
        incident,
        focus,
        herd: false,
    };
    let during = Some(Incident {
        provider: 0,
        start: t1,
        end: Some(t2),
    });
    Some(match name {
        "step" => base(
            "step",
            "step: the fastest provider becomes 10x slower for 60 s, then recovers",
            incident(Behaviour::Slow(10.0), Some(t2)),
            during,
            (t1, t2),
        ),
        "outage" => base(
            "outage",
            "outage: the fastest provider fails every request (503) for 60 s, then recovers",
            incident(Behaviour::Down, Some(t2)),
            during,
            (t1, t2),
        ),
        "flaky" => Scenario {
            duration: t2 + after / 2,
            ..base(
                "flaky",
                "flaky: the fastest provider fails 20% of requests (500)",
                incident(Behaviour::Flaky(0.2), None),
                Some(Incident {
                    provider: 0,
                    start: 0,
                    end: None,
                }),
                (20 * SEC, t2 + after / 2),
            )
        },
        "rate-limited" => base(
            "rate-limited",
            "rate-limited: the fastest provider answers 429 with Retry-After for 60 s",
            incident(Behaviour::RateLimited { until: t2 }, Some(t2)),
            during,
            (t1, t2),
        ),
        "herd" => {
            let duration = match size {
                Size::Full => 600 * SEC,
                Size::Quick => 180 * SEC,
            };
            Scenario {
                name: "herd",
                title: "herd: 50 sidecars share providers whose latency grows with their load",
                providers: three(Some([25, 35, 60])),
                sidecars: 50,
                period: 200 * MS,
                duration,
                incident: None,
                focus: (duration / 2, duration),
                herd: true,
            }
        }
        _ => return None,
    })
}

/// The three providers, optionally with server counts (capacity-limited).
fn three(servers: Option<[u32; 3]>) -> Vec<ProviderSpec> {
    (0..3)
        .map(|i| ProviderSpec {
            servers: servers.map(|s| s[i]),
            ..ProviderSpec::new(NAMES[i], MEDIANS_MS[i])
        })
        .collect()
}

/// A routing strategy taking part in the comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Contender {
    /// sturnus's routing (the real code), as the variant says.
    Sturnus(Variant),
    /// Knows the true expected cost of every provider.
    Oracle,
    /// Cycles through providers.
    RoundRobin,
    /// Uniform random choice.
    Random,
    /// Lowest mean of the last 10 samples, no probing.
    LowestAverage,
    /// Power of two choices with peak EWMA.
    PowerOfTwo,
}

impl Contender {
    /// Label in tables and charts.
    pub fn label(&self) -> &'static str {
        match self {
            Contender::Sturnus(v) => v.label,
            Contender::Oracle => "oracle",
            Contender::RoundRobin => "round-robin",
            Contender::Random => "random",
            Contender::LowestAverage => "lowest-avg-10",
            Contender::PowerOfTwo => "p2c-peak-ewma",
        }
    }

    /// A maker of fresh strategy instances, one per sidecar of `scenario` (anything costly,
    /// like the herd oracle's split, is computed once here).
    pub fn factory(&self, scenario: &Scenario) -> impl Fn() -> Box<dyn Strategy> {
        let n = scenario.providers.len();
        let split = (*self == Contender::Oracle && scenario.herd).then(|| herd_split(scenario));
        let me = *self;
        move || -> Box<dyn Strategy> {
            match me {
                Contender::Sturnus(variant) => Box::new(Sturnus::new(n, variant)),
                Contender::Oracle => Box::new(match &split {
                    Some(shares) => Oracle::split(shares.clone()),
                    None => Oracle::greedy(),
                }),
                Contender::RoundRobin => Box::new(RoundRobin::new(n)),
                Contender::Random => Box::new(Uniform::new(n)),
                Contender::LowestAverage => Box::new(LowestAverage::new(n)),
                Contender::PowerOfTwo => Box::new(PowerOfTwo::new(n)),
            }
        }
    }
}

/// The split minimising the herd's mean latency, from the M/M/c model of its providers.
pub fn herd_split(scenario: &Scenario) -> Vec<f64> {
    let providers: Vec<(u32, f64)> = scenario
        .providers
        .iter()
        .map(|p| (p.servers.unwrap_or(u32::MAX), p.mean_us()))
        .collect();
    let rate = scenario.sidecars as f64 / scenario.period.max(1) as f64;
    optimal_split(&providers, rate)
}

/// Every contender: sturnus (as `current` says), sturnus as seeded, the oracle, then the
/// baselines.
pub fn contenders(current: Variant) -> Vec<Contender> {
    vec![
        Contender::Sturnus(current),
        Contender::Sturnus(Variant::SEED),
        Contender::Oracle,
        Contender::RoundRobin,
        Contender::Random,
        Contender::LowestAverage,
        Contender::PowerOfTwo,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_scenario_exists_and_is_sane() {
        for name in SCENARIOS {
            for size in [Size::Full, Size::Quick] {
                let s = scenario(name, size).unwrap_or_else(|| panic!("{name}"));
                assert_eq!(s.name, name);
                assert_eq!(s.providers.len(), 3);
                assert!(s.focus.0 < s.focus.1 && s.focus.1 <= s.duration);
                assert_eq!(s.herd, name == "herd");
                assert_eq!(s.herd, s.providers.iter().all(|p| p.servers.is_some()));
            }
        }
        assert!(scenario("nope", Size::Full).is_none());
        assert_eq!(scenario("herd", Size::Quick).map(|s| s.sidecars), Some(50));
    }

    #[test]
    fn contenders_have_distinct_labels() {
        let labels: Vec<_> = contenders(Variant::current())
            .iter()
            .map(Contender::label)
            .collect();
        let mut dedup = labels.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert_eq!(labels.len(), dedup.len());
    }
}
