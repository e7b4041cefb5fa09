//! The scenario schema: a TOML file describing providers, the fleet and the targets.
//!
//! `sturnus simulate --scenario-file FILE` reads one; the built-in scenarios are files of the
//! same schema (`docs/routing/scenarios/`). Times are seconds, latencies milliseconds; the
//! schema is documented in `docs/routing.md`. Errors name the offending field.

use super::clock::{Micros, SEC};
use super::conversations::ConversationSpec;
use super::provider::{Behaviour, Phase, ProviderSpec, QuotaSpec};
use super::scenario::{Group, Incident, Scenario, Size, Targets};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Most providers a scenario may have (the charts' colours).
pub const MAX_PROVIDERS: usize = 8;

/// Most sidecars a scenario may have.
pub const MAX_SIDECARS: usize = 10_000;

/// Longest run, in seconds (one day).
pub const MAX_DURATION_S: f64 = 86_400.0;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: String,
    title: String,
    /// Sidecars all sending at `rate` (absent when `group` lists the fleet).
    sidecars: Option<usize>,
    /// Requests per second of one sidecar.
    rate: Option<f64>,
    /// The fleet as groups of sidecars with their own rates (instead of `sidecars`/`rate`).
    #[serde(default)]
    group: Vec<GroupFile>,
    duration_s: f64,
    focus_s: [f64; 2],
    figures: FigureKind,
    incident: Option<IncidentFile>,
    conversations: Option<ConversationsFile>,
    quick: Option<Quick>,
    #[serde(default)]
    targets: Targets,
    provider: Vec<ProviderFile>,
}

/// Which figures a scenario reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum FigureKind {
    /// Incident figures: switching, share to the affected provider, recovery.
    Incident,
    /// Herd figures: share standard deviations; the oracle uses the optimal split.
    Herd,
}

/// Sidecars sending at one rate.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupFile {
    sidecars: usize,
    /// Requests per second of each sidecar of the group.
    rate: f64,
}

/// Requests are turns of conversations; providers cache prompt prefixes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConversationsFile {
    applications: u32,
    turns: [u32; 2],
    open: u32,
    #[serde(default)]
    sticky: bool,
    hit_ttfc: f64,
    cache_ttl_s: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IncidentFile {
    provider: String,
    start_s: f64,
    end_s: Option<f64>,
}

/// Overrides for `--quick`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Quick {
    sidecars: Option<usize>,
    duration_s: Option<f64>,
    /// Added to every time after 0 (phases, incident, focus), to shorten a warm-up.
    shift_s: Option<f64>,
    focus_s: Option<[f64; 2]>,
    /// Replaces `[targets]` at quick size: the bar the test suite holds.
    targets: Option<Targets>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderFile {
    name: String,
    median_ms: f64,
    jitter: Option<f64>,
    servers: Option<u32>,
    quota: Option<QuotaFile>,
    #[serde(default)]
    phase: Vec<PhaseFile>,
}

/// A request quota per fixed window.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaFile {
    requests: u64,
    window_s: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PhaseFile {
    from_s: f64,
    behaviour: BehaviourName,
    factor: Option<f64>,
    fail: Option<f64>,
    status: Option<u16>,
    retry_after_s: Option<u64>,
    servers: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum BehaviourName {
    Normal,
    Slow,
    Down,
    Flaky,
    RateLimited,
}

/// What is wrong with a scenario's text.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Not TOML of the scenario's shape (syntax, an unknown or missing field, a wrong type).
    #[error("{}", .0.message())]
    Shape(toml::de::Error),
    /// A value out of range or at odds with another field.
    #[error("{field}: {problem}")]
    Invalid {
        /// The field's path (`provider[0].phase[1].factor`).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// A scenario file that cannot be used; the message starts with the file's path.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// The file's text is not a valid scenario.
    #[error("{}: {source}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: ScenarioError,
    },
}

/// Parses a scenario file at the given size; `Err` says what is wrong and where.
pub fn parse(text: &str, size: Size) -> Result<Scenario, ScenarioError> {
    let file: File = toml::from_str(text).map_err(ScenarioError::Shape)?;
    build(file, size)
}

/// Reads and parses `path`.
pub fn load(path: &Path, size: Size) -> Result<Scenario, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text, size).map_err(|source| LoadError::Invalid {
        path: path.to_path_buf(),
        source,
    })
}

/// `field` is wrong: `problem`.
fn invalid(field: impl Into<String>, problem: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        field: field.into(),
        problem: problem.into(),
    }
}

/// `Ok` when `ok`, else the error `what` makes.
fn check(ok: bool, what: impl FnOnce() -> ScenarioError) -> Result<(), ScenarioError> {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

/// Seconds to virtual time, checked to be finite, >= 0 and at most a day.
fn secs(field: &str, s: f64) -> Result<Micros, ScenarioError> {
    check((0.0..=MAX_DURATION_S).contains(&s), || {
        invalid(
            field,
            format!("{s} is out of range (0 to {MAX_DURATION_S} seconds)"),
        )
    })?;
    Ok((s * SEC as f64).round() as Micros)
}

fn build(f: File, size: Size) -> Result<Scenario, ScenarioError> {
    let mut quick = match size {
        Size::Full => Quick::default(),
        Size::Quick => f.quick.unwrap_or_default(),
    };
    let groups = fleet(&f.group, f.sidecars, f.rate, quick.sidecars)?;
    let targets = quick.targets.take().unwrap_or(f.targets);
    let shift = quick.shift_s.unwrap_or(0.0);
    // A time of the timeline, moved by the quick shift (0 stays 0).
    let at = |field: &str, s: f64| -> Result<Micros, ScenarioError> {
        let moved = if s > 0.0 { s + shift } else { s };
        check(moved >= 0.0, || {
            invalid(
                field,
                format!("{s} is before 0 once shifted by quick.shift_s"),
            )
        })?;
        secs(field, moved)
    };
    check(!f.name.is_empty(), || invalid("name", "must not be empty"))?;
    let sidecars = groups.iter().map(|g| g.sidecars).sum::<usize>();
    check(sidecars <= MAX_SIDECARS, || {
        invalid(
            "group",
            format!("{sidecars} sidecars in all is over {MAX_SIDECARS}"),
        )
    })?;
    let period = groups[0].period;
    let duration = secs("duration_s", quick.duration_s.unwrap_or(f.duration_s))?;
    check(duration > 0, || invalid("duration_s", "must be > 0"))?;
    let focus = match quick.focus_s {
        Some([a, b]) => (secs("quick.focus_s", a)?, secs("quick.focus_s", b)?),
        None => (at("focus_s", f.focus_s[0])?, at("focus_s", f.focus_s[1])?),
    };
    check(focus.0 < focus.1 && focus.1 <= duration, || {
        invalid(
            "focus_s",
            "must be [start, end] with start < end <= duration_s",
        )
    })?;
    check(
        !f.provider.is_empty() && f.provider.len() <= MAX_PROVIDERS,
        || {
            invalid(
                "provider",
                format!("between 1 and {MAX_PROVIDERS} providers"),
            )
        },
    )?;
    let mut providers = Vec::new();
    for (i, p) in f.provider.iter().enumerate() {
        providers.push(provider(i, p, &at, duration)?);
    }
    for (i, p) in providers.iter().enumerate() {
        check(!providers[..i].iter().any(|q| q.name == p.name), || {
            invalid(
                format!("provider[{i}].name"),
                format!("{:?} is used twice", p.name),
            )
        })?;
    }
    let incident = match &f.incident {
        None => None,
        Some(inc) => {
            let provider = providers
                .iter()
                .position(|p| p.name == inc.provider)
                .ok_or_else(|| {
                    invalid(
                        "incident.provider",
                        format!("no provider named {:?}", inc.provider),
                    )
                })?;
            let start = at("incident.start_s", inc.start_s)?;
            let end = inc.end_s.map(|e| at("incident.end_s", e)).transpose()?;
            check(end.is_none_or(|e| e > start && e <= duration), || {
                invalid(
                    "incident.end_s",
                    "must be after start_s and at most duration_s",
                )
            })?;
            Some(Incident {
                provider,
                start,
                end,
            })
        }
    };
    let conversations = f.conversations.as_ref().map(conversations).transpose()?;
    let herd = f.figures == FigureKind::Herd;
    check(
        herd == providers.iter().any(|p| p.servers.is_some()),
        || {
            invalid(
                "figures",
                "\"herd\" exactly when some provider has servers (shared capacity)",
            )
        },
    )?;
    Ok(Scenario {
        name: f.name,
        title: f.title,
        providers,
        sidecars,
        period,
        groups,
        duration,
        incident,
        focus,
        herd,
        conversations,
        targets,
    })
}

/// A sidecar count in range, or the error naming `field`.
fn sidecar_count(field: &str, n: usize) -> Result<usize, ScenarioError> {
    check((1..=MAX_SIDECARS).contains(&n), || {
        invalid(field, format!("{n} is out of range (1 to {MAX_SIDECARS})"))
    })?;
    Ok(n)
}

/// Interval between two requests at `rate` per second, the rate checked to be in range.
fn rate_period(field: &str, rate: f64) -> Result<Micros, ScenarioError> {
    check(rate.is_finite() && rate > 0.0 && rate <= 1000.0, || {
        invalid(
            field,
            format!("{rate} is out of range (> 0 and <= 1000 per second)"),
        )
    })?;
    Ok(((SEC as f64 / rate).round() as Micros).max(1))
}

/// The fleet: one group from `sidecars` and `rate` (`quick_sidecars` replacing the count), or
/// the file's `group` list; exactly one of the two forms.
fn fleet(
    group: &[GroupFile],
    sidecars: Option<usize>,
    rate: Option<f64>,
    quick_sidecars: Option<usize>,
) -> Result<Vec<Group>, ScenarioError> {
    if group.is_empty() {
        let sidecars = quick_sidecars
            .or(sidecars)
            .ok_or_else(|| invalid("sidecars", "required (or a group list)"))?;
        let rate = rate.ok_or_else(|| invalid("rate", "required (or a group list)"))?;
        return Ok(vec![Group {
            sidecars: sidecar_count("sidecars", sidecars)?,
            period: rate_period("rate", rate)?,
        }]);
    }
    check(sidecars.is_none() && rate.is_none(), || {
        invalid("group", "replaces sidecars and rate: give one or the other")
    })?;
    check(quick_sidecars.is_none(), || {
        invalid("quick.sidecars", "does not apply to a group list")
    })?;
    group
        .iter()
        .enumerate()
        .map(|(i, g)| {
            Ok(Group {
                sidecars: sidecar_count(&format!("group[{i}].sidecars"), g.sidecars)?,
                period: rate_period(&format!("group[{i}].rate"), g.rate)?,
            })
        })
        .collect()
}

fn conversations(c: &ConversationsFile) -> Result<ConversationSpec, ScenarioError> {
    check((1..=1_000_000).contains(&c.applications), || {
        invalid(
            "conversations.applications",
            format!("{} is out of range (1 to 1000000)", c.applications),
        )
    })?;
    let [lo, hi] = c.turns;
    check(lo >= 1 && lo <= hi && hi <= 1000, || {
        invalid(
            "conversations.turns",
            format!("[{lo}, {hi}] must be [fewest, most] with 1 <= fewest <= most <= 1000"),
        )
    })?;
    check((1..=1000).contains(&c.open), || {
        invalid(
            "conversations.open",
            format!("{} is out of range (1 to 1000)", c.open),
        )
    })?;
    check(c.hit_ttfc > 0.0 && c.hit_ttfc <= 1.0, || {
        invalid(
            "conversations.hit_ttfc",
            format!("{} is out of range (> 0 and <= 1)", c.hit_ttfc),
        )
    })?;
    Ok(ConversationSpec {
        applications: c.applications,
        turns: (lo, hi),
        open: c.open,
        sticky: c.sticky,
        hit_ttfc: c.hit_ttfc,
        ttl: secs("conversations.cache_ttl_s", c.cache_ttl_s)?,
    })
}

fn provider(
    i: usize,
    p: &ProviderFile,
    at: &impl Fn(&str, f64) -> Result<Micros, ScenarioError>,
    duration: Micros,
) -> Result<ProviderSpec, ScenarioError> {
    let field = |k: &str| format!("provider[{i}].{k}");
    check(!p.name.is_empty(), || {
        invalid(field("name"), "must not be empty")
    })?;
    check(
        p.median_ms.is_finite() && p.median_ms > 0.0 && p.median_ms <= 600_000.0,
        || {
            invalid(
                field("median_ms"),
                format!("{} is out of range (> 0, <= 600000)", p.median_ms),
            )
        },
    )?;
    let jitter = p.jitter.unwrap_or(super::provider::JITTER_SIGMA);
    check((0.0..=2.0).contains(&jitter), || {
        invalid(
            field("jitter"),
            format!("{jitter} is out of range (0 to 2)"),
        )
    })?;
    check(p.servers.is_none_or(|c| c >= 1), || {
        invalid(field("servers"), "must be at least 1")
    })?;
    let quota = match &p.quota {
        Some(q) => {
            check(q.requests >= 1, || {
                invalid(field("quota.requests"), "must be at least 1")
            })?;
            check(q.window_s.is_finite() && q.window_s >= 1.0, || {
                invalid(
                    field("quota.window_s"),
                    format!("{} is under 1 second", q.window_s),
                )
            })?;
            Some(QuotaSpec {
                requests: q.requests,
                window: (q.window_s * SEC as f64) as Micros,
            })
        }
        None => None,
    };
    let mut phases: Vec<Phase> = Vec::new();
    for (j, ph) in p.phase.iter().enumerate() {
        let pf = |k: &str| format!("provider[{i}].phase[{j}].{k}");
        let from = at(&pf("from_s"), ph.from_s)?;
        check(phases.last().is_none_or(|prev| prev.from < from), || {
            invalid(pf("from_s"), "phases must be in increasing time order")
        })?;
        let until = p
            .phase
            .get(j + 1)
            .map(|next| at(&pf("from_s"), next.from_s))
            .transpose()?
            .unwrap_or(duration);
        let unused = |k: &str, present: bool| {
            check(!present, || {
                invalid(
                    pf(k),
                    format!("does not apply to behaviour {:?}", ph.behaviour),
                )
            })
        };
        let status = |default: u16| -> Result<u16, ScenarioError> {
            let s = ph.status.unwrap_or(default);
            check((400..=599).contains(&s), || {
                invalid(
                    pf("status"),
                    format!("{s} is not an error status (400 to 599)"),
                )
            })?;
            Ok(s)
        };
        let behaviour = match ph.behaviour {
            BehaviourName::Normal => {
                unused("factor", ph.factor.is_some())?;
                unused("fail", ph.fail.is_some())?;
                unused("status", ph.status.is_some())?;
                unused("retry_after_s", ph.retry_after_s.is_some())?;
                Behaviour::Normal
            }
            BehaviourName::Slow => {
                unused("fail", ph.fail.is_some())?;
                unused("status", ph.status.is_some())?;
                unused("retry_after_s", ph.retry_after_s.is_some())?;
                let f = ph
                    .factor
                    .ok_or_else(|| invalid(pf("factor"), "required for \"slow\""))?;
                check(f.is_finite() && f > 0.0 && f <= 1000.0, || {
                    invalid(pf("factor"), format!("{f} is out of range (> 0, <= 1000)"))
                })?;
                Behaviour::Slow(f)
            }
            BehaviourName::Down => {
                unused("factor", ph.factor.is_some())?;
                unused("fail", ph.fail.is_some())?;
                Behaviour::Down {
                    status: status(503)?,
                    retry_after_s: ph.retry_after_s,
                }
            }
            BehaviourName::Flaky => {
                unused("factor", ph.factor.is_some())?;
                unused("retry_after_s", ph.retry_after_s.is_some())?;
                let fail = ph
                    .fail
                    .ok_or_else(|| invalid(pf("fail"), "required for \"flaky\""))?;
                check((0.0..=1.0).contains(&fail), || {
                    invalid(pf("fail"), format!("{fail} is out of range (0 to 1)"))
                })?;
                Behaviour::Flaky {
                    fail,
                    status: status(500)?,
                }
            }
            BehaviourName::RateLimited => {
                unused("factor", ph.factor.is_some())?;
                unused("fail", ph.fail.is_some())?;
                unused("status", ph.status.is_some())?;
                // Retry-After points at the end of the phase unless given.
                let until = match ph.retry_after_s {
                    Some(s) => from.saturating_add(s.saturating_mul(SEC)),
                    None => until,
                };
                Behaviour::RateLimited { until }
            }
        };
        check(
            ph.servers.is_none() || (p.servers.is_some() && ph.servers >= Some(1)),
            || {
                invalid(
                    pf("servers"),
                    "only a provider with servers can change them (at least 1)",
                )
            },
        )?;
        phases.push(Phase {
            from,
            behaviour,
            servers: ph.servers,
        });
    }
    Ok(ProviderSpec {
        name: p.name.clone(),
        median_ms: p.median_ms,
        jitter,
        servers: p.servers,
        phases,
        quota,
    })
}

#[cfg(test)]
mod tests {
    use super::super::clock::MS;
    use super::*;

    const MINIMAL: &str = r#"
name = "mini"
title = "mini: one provider goes down"
sidecars = 2
rate = 4
duration_s = 30
focus_s = [10, 20]
figures = "incident"
incident = { provider = "a", start_s = 10, end_s = 20 }
quick = { sidecars = 1, shift_s = -5, duration_s = 20 }

[[provider]]
name = "a"
median_ms = 100
phase = [
  { from_s = 10, behaviour = "down", retry_after_s = 3 },
  { from_s = 20, behaviour = "normal" },
]

[[provider]]
name = "b"
median_ms = 150
jitter = 0.1
"#;

    #[test]
    fn minimal_file_full_and_quick() {
        let s = parse(MINIMAL, Size::Full).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.name, "mini");
        assert_eq!(s.period, 250 * MS);
        assert_eq!(s.focus, (10 * SEC, 20 * SEC));
        assert_eq!(
            s.providers[0].behaviour_at(15 * SEC),
            Behaviour::Down {
                status: 503,
                retry_after_s: Some(3)
            }
        );
        assert_eq!(s.providers[1].jitter, 0.1);
        assert!(s.targets.beat_probing && s.targets.mean_vs_oracle.is_none());
        let q = parse(MINIMAL, Size::Quick).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(q.sidecars, 1);
        assert_eq!(q.duration, 20 * SEC);
        assert_eq!(q.focus, (5 * SEC, 15 * SEC));
        assert_eq!(q.incident.map(|i| i.start), Some(5 * SEC));
        assert_eq!(q.providers[0].phases[1].from, 15 * SEC);
        // Quick targets replace the full ones when given.
        let text = MINIMAL.replace(
            "duration_s = 20 }",
            "duration_s = 20, targets = { mean_vs_oracle = 2.0 } }",
        );
        let q = parse(&text, Size::Quick).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(q.targets.mean_vs_oracle, Some(2.0));
        let f = parse(&text, Size::Full).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(f.targets.mean_vs_oracle, None);
    }

    /// MINIMAL with conversations, one field of them replaced by `field`.
    fn with_conversations(field: &str) -> String {
        let mut fields = [
            "applications = 3",
            "turns = [3, 8]",
            "open = 4",
            "hit_ttfc = 0.25",
            "cache_ttl_s = 300",
        ];
        let key = field.split(' ').next().unwrap_or_default();
        for f in fields.iter_mut() {
            if f.starts_with(key) {
                *f = field;
            }
        }
        MINIMAL.replace(
            "quick = {",
            &format!("conversations = {{ {} }}\nquick = {{", fields.join(", ")),
        )
    }

    #[test]
    fn conversations_are_read() {
        let s =
            parse(&with_conversations("open = 4"), Size::Full).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.conversations,
            Some(ConversationSpec {
                applications: 3,
                turns: (3, 8),
                open: 4,
                sticky: false,
                hit_ttfc: 0.25,
                ttl: 300 * SEC,
            })
        );
        assert_eq!(
            parse(MINIMAL, Size::Full).map(|s| s.conversations).ok(),
            Some(None)
        );
    }

    #[test]
    fn rate_limit_points_at_the_end_of_its_phase() {
        let text = MINIMAL.replace(
            r#"behaviour = "down", retry_after_s = 3"#,
            r#"behaviour = "rate-limited""#,
        );
        let s = parse(&text, Size::Full).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.providers[0].behaviour_at(12 * SEC),
            Behaviour::RateLimited { until: 20 * SEC }
        );
    }

    #[test]
    fn a_group_list_gives_sidecars_their_own_rates() {
        let text = MINIMAL.replace(
            "sidecars = 2\nrate = 4\n",
            "group = [{ sidecars = 1, rate = 40 }, { sidecars = 3, rate = 4 }]\n",
        );
        let s = parse(&text, Size::Full).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.sidecars, 4);
        assert_eq!(s.period, 25 * MS);
        assert_eq!(s.periods(), vec![25 * MS, 250 * MS, 250 * MS, 250 * MS]);
        assert!((s.offered_rate() * SEC as f64 - 52.0).abs() < 1e-9);
        // The one-rate form is one group.
        let one = parse(MINIMAL, Size::Full).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(one.periods(), vec![250 * MS; 2]);
        for (text, want) in [
            (
                text.replace("rate = 40", "rate = 0"),
                "group[0].rate: 0 is out of range",
            ),
            (
                MINIMAL.replace("sidecars = 2\n", "group = [{ sidecars = 1, rate = 4 }]\n"),
                "group: replaces sidecars and rate",
            ),
            (MINIMAL.replace("sidecars = 2\n", ""), "sidecars: required"),
            (text.clone(), "quick.sidecars: does not apply"),
        ] {
            let size = if want.starts_with("quick") {
                Size::Quick
            } else {
                Size::Full
            };
            let e = parse(&text, size)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }

    #[test]
    fn up_to_eight_providers_and_no_incident_needed() {
        let mut text = MINIMAL
            .replace(
                r#"incident = { provider = "a", start_s = 10, end_s = 20 }"#,
                "",
            )
            .to_string();
        for i in 2..MAX_PROVIDERS {
            text.push_str(&format!(
                "\n[[provider]]\nname = \"x{i}\"\nmedian_ms = 100\n"
            ));
        }
        let s = parse(&text, Size::Full).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.providers.len(), s.incident), (MAX_PROVIDERS, None));
        text.push_str("\n[[provider]]\nname = \"one-too-many\"\nmedian_ms = 100\n");
        let e = parse(&text, Size::Full).err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("between 1 and 8 providers")));
    }

    #[test]
    fn mistakes_are_named() {
        let cases = [
            (
                MINIMAL.replace("rate = 4", "rate = 0"),
                "rate: 0 is out of range",
            ),
            (
                MINIMAL.replace("rate = 4", "rat = 4"),
                "unknown field `rat`",
            ),
            (
                MINIMAL.replace(r#"provider = "a", start_s"#, r#"provider = "z", start_s"#),
                "incident.provider: no provider named \"z\"",
            ),
            (
                MINIMAL.replace(
                    r#"behaviour = "normal""#,
                    r#"behaviour = "normal", factor = 2"#,
                ),
                "provider[0].phase[1].factor: does not apply",
            ),
            (
                MINIMAL.replace(r#"retry_after_s = 3"#, r#"status = 200"#),
                "provider[0].phase[0].status: 200 is not an error status",
            ),
            (
                MINIMAL.replace(r#"behaviour = "down""#, r#"behaviour = "melting""#),
                "unknown variant `melting`",
            ),
            (
                MINIMAL.replace("focus_s = [10, 20]", "focus_s = [20, 10]"),
                "focus_s: must be",
            ),
            (
                MINIMAL.replace("name = \"b\"", "name = \"a\""),
                "provider[1].name: \"a\" is used twice",
            ),
            (
                MINIMAL.replace("jitter = 0.1", "servers = 3"),
                "figures: \"herd\" exactly when",
            ),
            (
                MINIMAL.replace("from_s = 20,", "from_s = 5,"),
                "increasing time order",
            ),
            (
                with_conversations("turns = [5, 3]"),
                "conversations.turns: [5, 3] must be",
            ),
            (
                with_conversations("hit_ttfc = 0"),
                "conversations.hit_ttfc: 0 is out of range",
            ),
            (
                with_conversations("open = 0"),
                "conversations.open: 0 is out of range",
            ),
        ];
        for (text, want) in cases {
            let e = parse(&text, Size::Full)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }
}
