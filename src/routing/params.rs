//! Every constant of the routing rule, in one struct with documented defaults.
//!
//! [`RoutingParams`] holds the four `[routing]` keys a user tunes and [`RuleParams`], the
//! constants of each factor of a pick, each defined next to the factor it belongs to. The
//! defaults are the values docs/routing.md and its results were measured with; the config's
//! optional `[routing.rule.<factor>]` tables and the simulator's `--param <factor>.<name>=<value>`
//! override any of them.

use super::congestion::CongestionParams;
use super::keyed_hits::KeyedParams;
use super::latency_mean::LatencyParams;
use super::load::LoadParams;
use super::lull::LullParams;
use super::pressure::WaitAgeParams;
use super::quota::QuotaParams;
use super::selector::sane_k;
use super::success_rate::SuccessParams;
use serde::{Deserialize, Serialize};

/// The constants of a candidate's score ([`super::selector`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScoreParams {
    /// Raw weight of a cold candidate, relative to the best warm candidate's 1.0.
    pub cold_weight: f64,
    /// Lower bound on the success rate when inflating latency, so a dead candidate stays
    /// finite.
    pub min_success: f64,
    /// Lower bound on latency (µs) used in scoring, so a 0 µs sample cannot divide by zero.
    pub min_latency_us: f64,
}

impl ScoreParams {
    /// The defaults, as a constant.
    pub const DEFAULT: ScoreParams = ScoreParams {
        cold_weight: 0.25,
        min_success: 0.001,
        min_latency_us: 1.0,
    };
}

impl Default for ScoreParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The constants of every factor of a pick, by factor.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuleParams {
    /// Cold weight and the bounds of the score.
    pub score: ScoreParams,
    /// The latency estimate's test for a change of level ([`super::latency_mean`]).
    pub latency: LatencyParams,
    /// The success rate's changes ([`super::success_rate`]).
    pub success: SuccessParams,
    /// The waiting age of requests still without a first chunk ([`super::pressure`]).
    pub wait_age: WaitAgeParams,
    /// The load charge of our own requests in flight ([`super::load`]).
    pub load: LoadParams,
    /// The congestion discount ([`super::congestion`]).
    pub congestion: CongestionParams,
    /// The fleet's lulls ([`super::lull`]).
    pub lull: LullParams,
    /// Quota pacing ([`super::quota`]).
    pub quota: QuotaParams,
    /// Prefix affinity's exponent and smoothing ([`super::keyed_hits`], [`super::keyed_shares`]).
    pub keyed: KeyedParams,
}

/// A `<factor>.<name>=<value>` override that names no constant or holds no valid value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuleOverrideError(pub String);

impl RuleParams {
    /// These constants with `overrides` (`<factor>.<name>=<value>`, e.g. `congestion.gain=0.5`)
    /// applied in order; the error names the first one that does not fit.
    pub fn with_overrides<S: AsRef<str>>(
        &self,
        overrides: &[S],
    ) -> Result<Self, RuleOverrideError> {
        let mut tree = toml::Value::try_from(self)
            .map_err(|e| RuleOverrideError(format!("cannot list the rule's constants: {e}")))?;
        for o in overrides {
            let o = o.as_ref();
            let bad = |why: &str| RuleOverrideError(format!("--param {o}: {why}"));
            let (path, value) = o
                .split_once('=')
                .ok_or_else(|| bad("expected <factor>.<name>=<value>"))?;
            let (factor, name) = path
                .trim()
                .split_once('.')
                .ok_or_else(|| bad("expected <factor>.<name>=<value>"))?;
            let slot = tree
                .get_mut(factor)
                .and_then(|t| t.get_mut(name))
                .ok_or_else(|| bad("no such constant"))?;
            let parsed: f64 = value.trim().parse().map_err(|_| bad("not a number"))?;
            *slot = match slot {
                toml::Value::Integer(_) if parsed >= 0.0 && parsed.fract() == 0.0 => {
                    toml::Value::Integer(parsed as i64)
                }
                toml::Value::Integer(_) => return Err(bad("expected a whole number >= 0")),
                _ => toml::Value::Float(parsed),
            };
        }
        tree.try_into()
            .map_err(|e| RuleOverrideError(format!("--param: {e}")))
    }

    /// The constants that differ from `base`, as `<factor>.<name> <value>` in declaration
    /// order: what a report prints so that a run names every change it was made with.
    pub fn changed_from(&self, base: &RuleParams) -> Vec<String> {
        let (Ok(toml::Value::Table(ours)), Ok(toml::Value::Table(theirs))) =
            (toml::Value::try_from(self), toml::Value::try_from(base))
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (factor, table) in &ours {
            let Some(table) = table.as_table() else {
                continue;
            };
            for (name, value) in table {
                if theirs.get(factor).and_then(|t| t.get(name)) != Some(value) {
                    out.push(format!("{factor}.{name} {value}"));
                }
            }
        }
        out
    }
}

/// Tunables of the routing algorithm: the config's `[routing]` keys and the rule's constants.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoutingParams {
    /// EWMA smoothing in (0, 1] (new = alpha*sample + (1-alpha)*old) of the prompt-cache hits'
    /// latency, and of success while the success rate's change points are off.
    pub ewma_alpha: f64,
    /// Exploitation exponent k: raw weight = (best_effective / effective)^k.
    pub exploit_k: f64,
    /// Share of an alias's traffic set aside for probing: split evenly over the candidates
    /// other than the best, each keeps at least its part, so slow ones are still probed and
    /// probing costs at most this share however many candidates an alias lists.
    pub probe_floor: f64,
    /// Error rate (1 - success) above which a candidate is "degraded" and pins are ignored.
    pub error_threshold: f64,
    /// The constants of every factor of a pick.
    pub rule: RuleParams,
}

impl Default for RoutingParams {
    /// The defaults chosen with `sturnus simulate` (see docs/routing.md): with the waiting age,
    /// a sharp exponent and estimates that follow a change within a few answers win the
    /// incident scenarios, and the congestion discount keeps them from herding.
    fn default() -> Self {
        Self {
            ewma_alpha: 0.4,
            exploit_k: 6.0,
            probe_floor: 0.02,
            error_threshold: 0.5,
            rule: RuleParams::default(),
        }
    }
}

/// The accepted range of one routing parameter: the single definition that config validation
/// and [`RoutingParams::check`] both use.
#[derive(Debug, Clone, Copy)]
pub struct ParamRange {
    /// The `[routing]` key.
    pub key: &'static str,
    /// Whether a value is in range.
    pub ok: fn(f64) -> bool,
    /// The range in words, for error messages ("> 0 and <= 1").
    pub rule: &'static str,
}

impl RoutingParams {
    /// `ewma_alpha`: (0, 1].
    pub const EWMA_ALPHA: ParamRange = ParamRange {
        key: "ewma_alpha",
        ok: |x| x > 0.0 && x <= 1.0,
        rule: "> 0 and <= 1",
    };
    /// `exploit_k`: (0, 20].
    pub const EXPLOIT_K: ParamRange = ParamRange {
        key: "exploit_k",
        ok: |x| x > 0.0 && x <= 20.0,
        rule: "> 0 and <= 20",
    };
    /// `probe_floor`: [0, 0.5].
    pub const PROBE_FLOOR: ParamRange = ParamRange {
        key: "probe_floor",
        ok: |x| (0.0..=0.5).contains(&x),
        rule: ">= 0 and <= 0.5",
    };
    /// `error_threshold`: (0, 1].
    pub const ERROR_THRESHOLD: ParamRange = ParamRange {
        key: "error_threshold",
        ok: |x| x > 0.0 && x <= 1.0,
        rule: "> 0 and <= 1",
    };

    /// These parameters with `exploit_k` scaled by `factor`, the exponent of a keyed pick
    /// ([`super::keyed_hits`]); a factor that is not finite and positive changes nothing.
    pub fn with_exploit_factor(&self, factor: f64) -> RoutingParams {
        if factor.is_finite() && factor > 0.0 {
            RoutingParams {
                exploit_k: sane_k(self.exploit_k) * factor,
                ..*self
            }
        } else {
            *self
        }
    }

    /// Range check against the same ranges config validation uses; `Err` names the offending
    /// key and its range.
    pub fn check(&self) -> Result<(), ParamOutOfRange> {
        for (range, value) in [
            (Self::EWMA_ALPHA, self.ewma_alpha),
            (Self::EXPLOIT_K, self.exploit_k),
            (Self::PROBE_FLOOR, self.probe_floor),
            (Self::ERROR_THRESHOLD, self.error_threshold),
        ] {
            if !(range.ok)(value) {
                return Err(ParamOutOfRange(range));
            }
        }
        Ok(())
    }
}

/// A routing parameter outside its [`ParamRange`] ("exploit_k must be > 0 and <= 20").
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("{} must be {}", .0.key, .0.rule)]
pub struct ParamOutOfRange(pub ParamRange);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_sets_one_constant_and_keeps_the_others() {
        let base = RuleParams::default();
        let p = base
            .with_overrides(&[
                "congestion.gain=0.5",
                "lull.period_us=1000",
                "score.cold_weight = 1",
            ])
            .unwrap();
        assert_eq!(p.congestion.gain, 0.5);
        assert_eq!(p.lull.period_us, 1_000);
        assert_eq!(p.score.cold_weight, 1.0);
        assert_eq!(p.congestion.relief, base.congestion.relief);
        assert_eq!(p.load, base.load);
        assert_eq!(base.with_overrides::<&str>(&[]).unwrap(), base);
        assert_eq!(
            p.changed_from(&base),
            [
                "score.cold_weight 1.0",
                "congestion.gain 0.5",
                "lull.period_us 1000"
            ]
        );
        assert!(base.changed_from(&base).is_empty());
    }

    #[test]
    fn an_override_that_fits_no_constant_is_named() {
        let base = RuleParams::default();
        for (o, why) in [
            ("congestion.gian=0.5", "no such constant"),
            ("gain=0.5", "expected <factor>.<name>=<value>"),
            ("congestion.gain", "expected <factor>.<name>=<value>"),
            ("congestion.gain=fast", "not a number"),
            ("lull.period_us=1.5", "expected a whole number >= 0"),
            ("lull.period_us=-1", "expected a whole number >= 0"),
        ] {
            let e = base.with_overrides(&[o]).unwrap_err().to_string();
            assert!(e.contains(o) && e.contains(why), "{o}: {e}");
        }
    }

    #[test]
    fn the_rule_reads_from_partial_toml_with_defaults_for_the_rest() {
        let p: RuleParams = toml::from_str("[load]\nwindow_s = 10.0\n").unwrap();
        assert_eq!(p.load.window_s, 10.0);
        assert_eq!(p.load.prior_variance, LoadParams::default().prior_variance);
        assert_eq!(p.congestion, CongestionParams::default());
        assert!(toml::from_str::<RuleParams>("[load]\nwindow = 10.0\n").is_err());
    }
}
