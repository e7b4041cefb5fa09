//! Scenarios, the targets they set, and the contenders.
//!
//! A scenario is data: providers with their timelines, the fleet of sidecars and its request
//! rate, the window the figures cover and the targets that apply, read from the TOML schema
//! in [`super::scenario_file`]. The built-in scenarios are files of that schema under
//! `docs/routing/scenarios/`, compiled in. Sidecars send one request every `period` (random
//! phase) for `duration`; with unlimited-capacity providers they do not affect each other and
//! act as independent repetitions, with capacity-limited ones (a herd) they share queues.

use super::clock::Micros;
use super::conversations::ConversationSpec;
use super::exact::ExactShares;
use super::peers::LoadAware;
use super::provider::ProviderSpec;
use super::queueing::{optimal_split, SplitProvider};
use super::scenario_file;
use super::strategy::{LowestAverage, Oracle, PowerOfTwo, RoundRobin, Strategy, Uniform};
use super::sturnus::{Sturnus, Variant};

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

/// What a scenario requires of the "sturnus" contender; `None` means "not checked".
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Targets {
    /// Mean latency in the focus window at most this multiple of the oracle's.
    pub mean_vs_oracle: Option<f64>,
    /// Mean latency no worse than the best strategy that probes (round-robin, random, P2C).
    #[serde(default = "yes")]
    pub beat_probing: bool,
    /// At least 90% of traffic off the affected provider within this many requests.
    pub switch_within: Option<usize>,
    /// At most this fraction of attempts to the affected provider once it misbehaved.
    pub bad_share: Option<f64>,
    /// The recovered provider holds the majority again within this many requests.
    pub recovery_within: Option<usize>,
    /// Herd: the median sidecar's share standard deviation at most this.
    pub sidecar_std: Option<f64>,
    /// Herd: the fleet's share standard deviation at most this.
    pub fleet_std: Option<f64>,
    /// Quota: at least this fraction fewer `429`s than sturnus without quota pacing, and a
    /// mean latency no worse.
    pub fewer_429s: Option<f64>,
    /// Conversations: a mean time to first chunk at least this fraction lower than sturnus
    /// picking every request at random (cache-blind).
    pub faster_than_cache_blind: Option<f64>,
}

fn yes() -> bool {
    true
}

impl Default for Targets {
    /// Only the comparison with the probing strategies.
    fn default() -> Self {
        Self {
            mean_vs_oracle: None,
            beat_probing: true,
            switch_within: None,
            bad_share: None,
            recovery_within: None,
            sidecar_std: None,
            fleet_std: None,
            fewer_429s: None,
            faster_than_cache_blind: None,
        }
    }
}

/// One scenario: providers, load, what the figures look at and the targets.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Command-line name.
    pub name: String,
    /// One-line description for tables and charts.
    pub title: String,
    /// Modelled providers with their timelines.
    pub providers: Vec<ProviderSpec>,
    /// Number of sidecars (all groups).
    pub sidecars: usize,
    /// Interval between two requests of a sidecar of the first group.
    pub period: Micros,
    /// The fleet in order: groups of sidecars sending at their own period (sidecar 0 is the
    /// first group's first).
    pub groups: Vec<Group>,
    /// Requests arrive during `[0, duration)`.
    pub duration: Micros,
    /// What goes wrong, if the figures follow one provider's incident.
    pub incident: Option<Incident>,
    /// Window whose requests the figures cover.
    pub focus: (Micros, Micros),
    /// True for a herd: settle/oscillate figures, and the oracle routes by the optimal split.
    pub herd: bool,
    /// Requests are turns of conversations and providers cache prompts (`None`: plain
    /// requests, no cache).
    pub conversations: Option<ConversationSpec>,
    /// What sturnus must achieve here.
    pub targets: Targets,
}

/// Sidecars that send one request every `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// How many.
    pub sidecars: usize,
    /// Interval between two requests of one of them.
    pub period: Micros,
}

impl Scenario {
    /// Each sidecar's interval between two requests, in sidecar order.
    pub fn periods(&self) -> Vec<Micros> {
        let mut out: Vec<Micros> = self
            .groups
            .iter()
            .flat_map(|g| std::iter::repeat_n(g.period.max(1), g.sidecars))
            .collect();
        out.resize(self.sidecars, self.period.max(1));
        out
    }

    /// Requests per µs the whole fleet sends.
    pub fn offered_rate(&self) -> f64 {
        self.periods().iter().map(|&p| 1.0 / p as f64).sum()
    }
}

/// How big a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// The published figures.
    Full,
    /// The file's `quick` overrides (fewer sidecars, shorter runs): same shape, for tests.
    Quick,
}

/// The built-in scenarios: name and TOML text (the files under `docs/routing/scenarios/`).
pub const BUILT_IN: [(&str, &str); 15] = [
    (
        "step",
        include_str!("../../docs/routing/scenarios/step.toml"),
    ),
    (
        "outage",
        include_str!("../../docs/routing/scenarios/outage.toml"),
    ),
    (
        "flaky",
        include_str!("../../docs/routing/scenarios/flaky.toml"),
    ),
    (
        "rate-limited",
        include_str!("../../docs/routing/scenarios/rate-limited.toml"),
    ),
    (
        "herd",
        include_str!("../../docs/routing/scenarios/herd.toml"),
    ),
    (
        "herd-200",
        include_str!("../../docs/routing/scenarios/herd-200.toml"),
    ),
    (
        "herd-60",
        include_str!("../../docs/routing/scenarios/herd-60.toml"),
    ),
    (
        "herd-90",
        include_str!("../../docs/routing/scenarios/herd-90.toml"),
    ),
    (
        "herd-four",
        include_str!("../../docs/routing/scenarios/herd-four.toml"),
    ),
    (
        "herd-step",
        include_str!("../../docs/routing/scenarios/herd-step.toml"),
    ),
    (
        "herd-hosted",
        include_str!("../../docs/routing/scenarios/herd-hosted.toml"),
    ),
    (
        "steady-lone",
        include_str!("../../docs/routing/scenarios/steady-lone.toml"),
    ),
    (
        "quota",
        include_str!("../../docs/routing/scenarios/quota.toml"),
    ),
    (
        "conversations",
        include_str!("../../docs/routing/scenarios/conversations.toml"),
    ),
    (
        "conversations-spread",
        include_str!("../../docs/routing/scenarios/conversations-spread.toml"),
    ),
];

/// Names accepted by `--scenario`.
pub fn names() -> Vec<&'static str> {
    BUILT_IN.iter().map(|(n, _)| *n).collect()
}

/// The built-in scenario called `name`, if any.
pub fn scenario(name: &str, size: Size) -> Option<Scenario> {
    let (_, text) = BUILT_IN.iter().find(|(n, _)| *n == name)?;
    // The built-in files are checked by a unit test; a broken one reads as unknown.
    scenario_file::parse(text, size).ok()
}

/// A routing strategy taking part in the comparison.
// One per simulated run: the size of sturnus's variant (its rule's constants) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Contender {
    /// sturnus's routing (the real code), as the variant says.
    Sturnus(Variant),
    /// Knows the true expected cost of every provider.
    Oracle,
    /// The rule's shares over the true expected costs ([`super::exact`]).
    ExactShares,
    /// Cycles through providers.
    RoundRobin,
    /// Uniform random choice.
    Random,
    /// Lowest mean of the last 10 samples, no probing.
    LowestAverage,
    /// Power of two choices with peak EWMA.
    PowerOfTwo,
    /// Fewest attempts in flight, ties by latency.
    LeastOutstanding,
    /// Latency EWMA inflated by the attempts in flight, lowest wins.
    PendingPenalty,
}

impl Contender {
    /// Label in tables and charts.
    pub fn label(&self) -> &'static str {
        match self {
            Contender::Sturnus(v) => v.label,
            Contender::Oracle => "oracle",
            Contender::ExactShares => "exact latency, k 6",
            Contender::RoundRobin => "round-robin",
            Contender::Random => "random",
            Contender::LowestAverage => "lowest-avg-10",
            Contender::PowerOfTwo => "p2c-peak-ewma",
            Contender::LeastOutstanding => "least-outstanding",
            Contender::PendingPenalty => "pending-penalty",
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
                    Some(splits) => Oracle::split(splits.clone()),
                    None => Oracle::greedy(),
                }),
                Contender::ExactShares => Box::new(ExactShares::new(n)),
                Contender::RoundRobin => Box::new(RoundRobin::new(n)),
                Contender::Random => Box::new(Uniform::new(n)),
                Contender::LowestAverage => Box::new(LowestAverage::new(n)),
                Contender::PowerOfTwo => Box::new(PowerOfTwo::new(n)),
                Contender::LeastOutstanding => Box::new(LoadAware::least_outstanding(n)),
                Contender::PendingPenalty => Box::new(LoadAware::pending_penalty(n)),
            }
        }
    }
}

/// The splits minimising a herd's mean latency, from the M/M/c model of its providers: one
/// per stretch of time between phase changes, as `(from, shares)`.
pub fn herd_split(scenario: &Scenario) -> Vec<(Micros, Vec<f64>)> {
    let mut changes: Vec<Micros> = scenario
        .providers
        .iter()
        .flat_map(|p| p.phases.iter().map(|ph| ph.from))
        .filter(|&t| t > 0 && t < scenario.duration)
        .collect();
    changes.push(0);
    changes.sort_unstable();
    changes.dedup();
    let rate = scenario.offered_rate();
    // Timelines that come back to an earlier state (flapping, tenants) reuse its split.
    let mut known: Vec<(Vec<SplitProvider>, Vec<f64>)> = Vec::new();
    changes
        .into_iter()
        .map(|t| {
            let providers: Vec<SplitProvider> = scenario
                .providers
                .iter()
                .map(|p| SplitProvider {
                    servers: p.servers_at(t),
                    service: p.service_us_at(t),
                    penalty: p.failure_penalty_us_at(t),
                })
                .collect();
            if let Some((_, split)) = known.iter().find(|(p, _)| *p == providers) {
                return (t, split.clone());
            }
            let split = optimal_split(&providers, rate);
            known.push((providers, split.clone()));
            (t, split)
        })
        .collect()
}

/// The contenders of `scenario`: [`contenders`]; where a provider has a quota, sturnus
/// without quota pacing (`current` otherwise), the yardstick pacing is measured against; with
/// conversations, "sturnus" with prefix affinity on (what the scenario measures, whatever the
/// default) and sturnus picking every request at random (cache-blind), its yardstick.
pub fn contenders_for(current: Variant, scenario: &Scenario) -> Vec<Contender> {
    if scenario.conversations.is_some() {
        let keyed = Variant {
            prefix_affinity: true,
            ..current
        };
        let mut all = contenders(keyed);
        all.insert(1, Contender::Sturnus(Variant::cache_blind_of(current)));
        return all;
    }
    let mut all = contenders(current);
    if scenario.providers.iter().any(|p| p.quota.is_some()) {
        all.insert(
            1,
            Contender::Sturnus(Variant {
                pacing: false,
                ..Variant::back_off_only_of(current)
            }),
        );
    }
    all
}

/// The contenders every scenario runs: sturnus (as `current` says), the latency-only rule,
/// the oracle, the rule's shares at exact latencies, then the baselines.
pub fn contenders(current: Variant) -> Vec<Contender> {
    vec![
        Contender::Sturnus(current),
        Contender::Sturnus(Variant::latency_only()),
        Contender::Oracle,
        Contender::ExactShares,
        Contender::RoundRobin,
        Contender::Random,
        Contender::LowestAverage,
        Contender::PowerOfTwo,
        Contender::LeastOutstanding,
        Contender::PendingPenalty,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_scenario_parses_and_is_sane() {
        for name in names() {
            for size in [Size::Full, Size::Quick] {
                let s = scenario(name, size).unwrap_or_else(|| panic!("{name}"));
                assert_eq!(s.name, name);
                assert!(s.focus.0 < s.focus.1 && s.focus.1 <= s.duration, "{name}");
                // Servers: the herds, the conversations the fleet must spread, and the lone
                // proxy's steady shares (servers it never fills, for the share figures).
                let shared = name.starts_with("herd")
                    || name == "conversations-spread"
                    || name == "steady-lone";
                assert_eq!(s.herd, shared, "{name}");
                assert_eq!(
                    s.herd,
                    s.providers.iter().any(|p| p.servers.is_some()),
                    "{name}"
                );
                assert!(s.targets.mean_vs_oracle.is_some(), "{name}");
            }
        }
        assert!(scenario("nope", Size::Full).is_none());
        assert_eq!(scenario("herd", Size::Quick).map(|s| s.sidecars), Some(50));
        assert_eq!(scenario("step", Size::Quick).map(|s| s.sidecars), Some(10));
    }

    #[test]
    fn herd_oracle_splits_follow_phases() {
        let s = scenario("herd-step", Size::Full).unwrap_or_else(|| unreachable!());
        let splits = herd_split(&s);
        assert_eq!(splits.len(), 2);
        assert_eq!(splits[1].0, 300 * super::super::clock::SEC);
        // With half its servers, the fast provider gets a smaller share.
        assert!(splits[1].1[0] < splits[0].1[0], "{splits:?}");
        let hosted = scenario("herd-hosted", Size::Full).unwrap_or_else(|| unreachable!());
        let split = &herd_split(&hosted)[0].1;
        assert!(split[0] > 0.3 && split[2] < split[1], "{split:?}");
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
