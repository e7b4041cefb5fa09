//! A candidate's latency estimate: the mean of its answers since their level last changed.
//!
//! An EWMA at a fixed α remembers about (2 − α) ÷ α answers whatever happens, so it is as noisy
//! after an hour of steady answers as right after a step. This one gives the n-th answer since
//! the last change a weight of 1 ÷ n (their plain mean) down to `min_weight`, and finds the
//! change with a two-sided CUSUM on ln(latency) in units of the answers' own spread:
//!
//! - `z` = (ln latency − the mean of ln latency) ÷ max(spread × √((1 + ρ) ÷ (1 − ρ)),
//!   `min_spread`), where the spread is the standard deviation of ln latency over the same
//!   answers and ρ the lag-1 correlation of their deviations over the last hundred answers
//!   (at least 0, at most `max_correlation`): answers that move in runs, as a queue's do, vary
//!   over a run by that factor more than independent answers would, so their wandering is not
//!   read as a change;
//! - `up` = max(0, `up` + z − `slack`), `down` = max(0, `down` − z − `slack`), each side
//!   measuring in the unit it had when its run (its answers since it last stood at 0) began;
//! - once either passes the threshold (below), the answers before that side's run are
//!   dropped: the estimate becomes the mean of the run alone, and ρ goes back to where it
//!   stood when the run began.
//!
//! A change's own answers deviate from the old level together, so they would widen the unit
//! that is to find them; each run is judged in the unit from before it, and a run found to be
//! a change leaves ρ as it found it.
//!
//! A lasting shift of `δ` spreads is found after about `h ÷ (δ − slack)` answers at threshold
//! `h` (a step to twice as slow at a spread of 0.25 and `h` 5: two answers), and answers that
//! vary as before pass it about once in e^(h + 1.17) answers (the two-sided CUSUM's average
//! run length at slack ½; a few hundred at 5, with the level and spread estimated). A false
//! change restarts the mean from the few answers that passed the test, and the mean then takes
//! about `1 ÷ min_weight` answers to settle: the cost of a false change is counted in answers,
//! the delay of a real one in answers that each take 1 ÷ rate. So the threshold is held to one
//! false change per `false_change_s` at the rate the candidate answers, ln(rate ×
//! `false_change_s`) − 1.17, and never below `threshold`: 5 below 0.8 answers a second, 9.8
//! at 100 a second, where a step to twice as slow still shows within five answers.
//! Between changes the last hundred answers count, so the shares of a steady candidate stop
//! moving with its last few. The test starts once two answers have measured a spread.

use serde::{Deserialize, Serialize};

/// The change test's constants (`[routing.rule.latency]`, `--param latency.<name>`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LatencyParams {
    /// Evidence, in spreads summed over a run of answers, that makes the run a new level at a
    /// candidate that answers seldom (the least threshold).
    pub threshold: f64,
    /// Part of a spread each answer may differ by without adding to the evidence: half the
    /// smallest shift (one spread) the test is sized for.
    pub slack: f64,
    /// Least spread of ln latency the test assumes, so that a candidate answering in almost
    /// constant time still shows a step.
    pub min_spread: f64,
    /// Largest lag-1 correlation of the answers the spread is widened for (√19 ≈ 4.4 × at 0.9),
    /// so that answers that move in long runs still show a step of a few spreads.
    pub max_correlation: f64,
    /// Least weight of a new answer: the mean is an EWMA at this weight once it has
    /// `1 ÷ min_weight` answers, so it remembers about a hundred and still follows a drift too
    /// slow for the test to find.
    pub min_weight: f64,
    /// Time between false changes the test allows a candidate that answers often (s): at `r`
    /// answers a second the threshold is ln(`r` × this) − 1.17, never below `threshold`
    /// (0: `threshold` at every rate).
    pub false_change_s: f64,
}

impl LatencyParams {
    /// The defaults, as a constant.
    pub const DEFAULT: LatencyParams = LatencyParams {
        threshold: 5.0,
        slack: 0.5,
        min_spread: 0.05,
        max_correlation: 0.9,
        min_weight: 0.02,
        false_change_s: 600.0,
    };
}

impl Default for LatencyParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The most answers the mean counts: a new answer weighs at least `min_weight`.
fn memory(p: &LatencyParams) -> f64 {
    if p.min_weight > 0.0 && p.min_weight <= 1.0 {
        1.0 / p.min_weight
    } else {
        f64::INFINITY
    }
}

/// ln of the answers a two-sided CUSUM at slack ½ passes, on average, before a false change
/// is found at threshold `h`, minus `h`: e^(h + 1.17) answers (Siegmund's approximation, within
/// 6 % of a simulated CUSUM on normal deviations at thresholds 5 to 10, 10 % at 3).
const FALSE_CHANGE_LOG_OFFSET: f64 = 1.17;

/// How often a candidate answers: the mean time between its answers, each gap weighing 1 ÷ n
/// down to `min_weight`, as the mean does.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct AnswerRate {
    /// Gaps folded in.
    gaps: f64,
    /// Their mean (µs).
    mean_gap_us: f64,
    /// When the latest answer came (routing clock, µs); `None` before the first.
    last_at_us: Option<u64>,
}

impl AnswerRate {
    /// Notes an answer that came at `at_us`.
    fn answer(&mut self, at_us: u64, p: &LatencyParams) {
        if let Some(last) = self.last_at_us {
            self.gaps = (self.gaps + 1.0).min(memory(p));
            let gap = at_us.saturating_sub(last) as f64;
            self.mean_gap_us += (gap - self.mean_gap_us) / self.gaps;
        }
        self.last_at_us = Some(at_us);
    }

    /// Answers per second; `None` before two answers have come.
    fn per_second(&self) -> Option<f64> {
        (self.gaps > 0.0).then(|| 1e6 / self.mean_gap_us.max(1.0))
    }
}

/// Answers counted since one side of the test last stood at 0.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Run {
    /// The side's evidence.
    evidence: f64,
    /// Answers in the run.
    count: f64,
    /// Their latencies' sum (µs).
    sum: f64,
    /// Their ln latencies' sum.
    log_sum: f64,
    /// The unit the run is measured in: the answers' spread and correlation when it began.
    /// If the run turns out to be a change they go back to it, since its answers deviate from
    /// the old level and correlate with each other, which is no measure of either.
    unit: Unit,
}

impl Run {
    /// The unit the run began with, or `now` when no run is open.
    fn unit_or(&self, now: Unit) -> Unit {
        if self.count > 0.0 {
            self.unit
        } else {
            now
        }
    }

    /// Adds `step` to the evidence and, while it stays above 0, the answer to the run; `unit`
    /// is the answers' spread and correlation before this answer.
    fn push(&mut self, step: f64, latency: f64, log: f64, unit: Unit) {
        self.evidence = (self.evidence + step).max(0.0);
        if self.evidence == 0.0 {
            *self = Run::default();
        } else {
            if self.count == 0.0 {
                self.unit = unit;
            }
            self.count += 1.0;
            self.sum += latency;
            self.log_sum += log;
        }
    }
}

/// The lag-1 correlation of a candidate's answers about their level: EWMAs of the product of
/// consecutive deviations and of the squared deviation, each pair weighing 1 ÷ (pairs so far)
/// down to `min_weight`, across changes of level, so that it measures how the candidate's
/// answers move rather than the last few.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Lag {
    /// Pairs folded in.
    pairs: f64,
    /// Mean product of consecutive deviations.
    cov: f64,
    /// Mean squared deviation.
    var: f64,
}

impl Lag {
    /// Folds in a deviation `d` that followed `previous`.
    fn add(&mut self, d: f64, previous: f64, p: &LatencyParams) {
        self.pairs = (self.pairs + 1.0).min(memory(p));
        self.cov += (d * previous - self.cov) / self.pairs;
        self.var += (d * d - self.var) / self.pairs;
    }

    /// cov ÷ var, 0 before any spread.
    fn correlation(&self) -> f64 {
        if self.var > 0.0 {
            self.cov / self.var
        } else {
            0.0
        }
    }
}

/// What the change test measures deviations in.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Unit {
    /// The variance of ln latency about the level.
    log_var: f64,
    /// How consecutive deviations go together.
    lag: Lag,
}

impl Unit {
    /// The spread of ln latency, widened for answers that correlate with the one before (the
    /// long-run spread of an AR(1) series), at least `min_spread`.
    fn long_run_spread(&self, p: &LatencyParams) -> f64 {
        let rho = self.lag.correlation().min(p.max_correlation).max(0.0);
        (self.log_var.sqrt() * ((1.0 + rho) / (1.0 - rho)).sqrt()).max(p.min_spread)
    }
}

/// The mean of a candidate's answers (one mode) since their level last changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencyMean {
    /// Answers in the mean.
    count: f64,
    /// Their mean latency (µs).
    mean: f64,
    /// Their mean ln latency.
    log_mean: f64,
    /// The answers' spread about `log_mean`, and how their consecutive deviations go together.
    unit: Unit,
    /// The latest answer's deviation from `log_mean`; `None` right after a change.
    last_deviation: Option<f64>,
    /// Evidence that the answers became slower.
    up: Run,
    /// Evidence that they became faster.
    down: Run,
    /// How often the answers come, which sets how strict the test is.
    rate: AnswerRate,
}

impl LatencyMean {
    /// An estimate that starts from `latency_us` as if from one answer (a handed-over value).
    pub fn seeded(latency_us: f64) -> Self {
        let mut m = Self::default();
        m.restart(1.0, latency_us, latency_us.max(1.0).ln());
        m
    }

    /// The estimate (µs), `None` before the first answer.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then_some(self.mean)
    }

    /// The evidence that makes a run a new level: held to one false change per
    /// `false_change_s` at the rate the answers come, never below `threshold`.
    fn threshold(&self, p: &LatencyParams) -> f64 {
        match self.rate.per_second() {
            Some(per_s) if p.false_change_s > 0.0 => p
                .threshold
                .max((per_s * p.false_change_s).ln() - FALSE_CHANGE_LOG_OFFSET),
            _ => p.threshold,
        }
    }

    /// Folds in one answer's latency (µs, finite and not negative) that came at `at_us` on the
    /// routing clock (`None`: unknown, the test at `threshold`), and returns the estimate.
    pub fn add(&mut self, latency_us: f64, at_us: Option<u64>, p: &LatencyParams) -> f64 {
        if let Some(at) = at_us {
            self.rate.answer(at, p);
        }
        let log = latency_us.max(1.0).ln();
        if self.count == 0.0 {
            self.restart(1.0, latency_us, log);
            return self.mean;
        }
        if self.count >= 2.0 {
            // Each side measures in the unit it had when its run began, so that a change's own
            // answers do not widen the unit that is to find it.
            let now = self.unit;
            let deviation = log - self.log_mean;
            let up = deviation / self.up.unit_or(now).long_run_spread(p);
            let down = -deviation / self.down.unit_or(now).long_run_spread(p);
            self.up.push(up - p.slack, latency_us, log, now);
            self.down.push(down - p.slack, latency_us, log, now);
            let threshold = self.threshold(p);
            let changed = [self.up, self.down]
                .into_iter()
                .find(|run| run.evidence > threshold);
            if let Some(run) = changed {
                self.unit.lag = run.unit.lag;
                self.restart(run.count, run.sum / run.count, run.log_sum / run.count);
                self.count = self.count.min(memory(p));
                return self.mean;
            }
        }
        self.count = (self.count + 1.0).min(memory(p));
        let d = log - self.log_mean;
        if let Some(previous) = self.last_deviation {
            self.unit.lag.add(d, previous, p);
        }
        self.last_deviation = Some(d);
        self.log_mean += d / self.count;
        self.unit.log_var += (d * (log - self.log_mean) - self.unit.log_var) / self.count;
        self.mean += (latency_us - self.mean) / self.count;
        self.mean
    }

    /// Starts a new level from `count` answers of mean `mean` and mean ln latency `log_mean`;
    /// the spread measured so far stays.
    fn restart(&mut self, count: f64, mean: f64, log_mean: f64) {
        self.count = count;
        self.mean = mean;
        self.log_mean = log_mean;
        self.up = Run::default();
        self.down = Run::default();
        self.last_deviation = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: LatencyParams = LatencyParams::DEFAULT;

    /// Latencies spread around `centre` by a fixed pattern of ln offsets (spread about 0.2).
    fn jittered(centre: f64, n: usize) -> impl Iterator<Item = f64> {
        const OFFSETS: [f64; 5] = [-0.25, 0.1, 0.3, -0.1, -0.05];
        (0..n).map(move |i| centre * OFFSETS[i % OFFSETS.len()].exp())
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn steady_answers_average_then_weigh_at_least_min_weight() {
        let mut m = LatencyMean::default();
        assert_eq!(m.mean(), None);
        assert_eq!(m.add(200_000.0, None, &P), 200_000.0);
        let samples: Vec<f64> = jittered(200_000.0, 400).collect();
        for &s in &samples[1..] {
            m.add(s, None, &P);
        }
        // No change is found: the first 50 answers' plain mean, then an EWMA at min_weight.
        let mut expected = (200_000.0 + samples[1..50].iter().sum::<f64>()) / 50.0;
        for &s in &samples[50..] {
            expected += (s - expected) * P.min_weight;
        }
        let got = m.mean().unwrap();
        assert!(close(got, expected, 1e-9), "{got} vs {expected}");
        assert_eq!(m.count, 50.0);
    }

    #[test]
    fn a_step_restarts_the_mean_from_the_answers_after_it() {
        let mut m = LatencyMean::default();
        for s in jittered(200_000.0, 100) {
            m.add(s, None, &P);
        }
        let slow: Vec<f64> = jittered(600_000.0, 4).collect();
        let mut after = Vec::new();
        for &s in &slow {
            after.push(m.add(s, None, &P));
        }
        assert!(
            after[0] < 250_000.0,
            "one slow answer is not yet a change: {after:?}"
        );
        assert!(m.count <= 4.0, "the old level is dropped: {}", m.count);
        assert!(close(m.mean().unwrap(), 600_000.0, 0.15), "{:?}", m.mean());
    }

    #[test]
    fn a_recovery_is_found_as_fast_as_a_slowdown() {
        let mut m = LatencyMean::default();
        for s in jittered(900_000.0, 200) {
            m.add(s, None, &P);
        }
        let mut steps = 0;
        for s in jittered(300_000.0, 10) {
            steps += 1;
            if m.add(s, None, &P) < 450_000.0 {
                break;
            }
        }
        assert!(steps <= 2, "found after {steps} answers");
    }

    #[test]
    fn a_constant_latency_still_shows_a_step() {
        let mut m = LatencyMean::default();
        for _ in 0..50 {
            m.add(100_000.0, None, &P);
        }
        m.add(150_000.0, None, &P);
        assert_eq!(m.mean(), Some(150_000.0));
    }

    #[test]
    fn a_lone_outlier_moves_the_mean_by_its_weight() {
        let mut m = LatencyMean::default();
        for s in jittered(200_000.0, 100) {
            m.add(s, None, &P);
        }
        let before = m.mean().unwrap();
        let outlier = 200_000.0 * 0.6f64.exp();
        m.add(outlier, None, &P);
        assert_eq!(m.count, 50.0, "3 spreads in one answer is not a change");
        let expected = before + (outlier - before) * P.min_weight;
        assert!(close(m.mean().unwrap(), expected, 1e-9));
    }

    /// Latencies around `centre` whose ln moves as an AR(1) series: lag-1 correlation `rho`,
    /// spread `spread` (normal draws by Box–Muller from a fixed seed).
    fn in_runs(centre: f64, spread: f64, rho: f64, n: usize) -> Vec<f64> {
        use crate::routing::rng::{RngSource, SplitMix64};
        let mut rng = SplitMix64::new(7);
        let innovation = spread * (1.0 - rho * rho).sqrt();
        let mut x = 0.0;
        (0..n)
            .map(|_| {
                let (u, v) = (rng.next_f64().max(1e-12), rng.next_f64());
                let normal = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
                x = rho * x + innovation * normal;
                centre * x.exp()
            })
            .collect()
    }

    /// How many times the estimate starts over on `samples`.
    fn restarts(samples: &[f64], p: &LatencyParams) -> usize {
        restarts_at(samples, None, p)
    }

    /// How many times the estimate starts over on `samples` answered `gap_us` apart (`None`:
    /// no time known).
    fn restarts_at(samples: &[f64], gap_us: Option<u64>, p: &LatencyParams) -> usize {
        let mut m = LatencyMean::default();
        let mut restarts = 0;
        for (i, &s) in samples.iter().enumerate() {
            let before = m.count;
            m.add(s, gap_us.map(|gap| gap * i as u64), p);
            if m.count < before {
                restarts += 1;
            }
        }
        restarts
    }

    #[test]
    fn a_busy_candidate_starts_over_by_chance_about_once_per_false_change_s() {
        // Forty minutes of steady answers at 100 a second: the threshold is
        // ln(100 × 600) − 1.17 ≈ 9.8, a false change about once in 60,000 answers.
        let steady = in_runs(300_000.0, 0.25, 0.0, 240_000);
        let busy = restarts_at(&steady, Some(10_000), &P);
        assert!(
            (1..=16).contains(&busy),
            "{busy} false changes in 40 minutes"
        );
        // At `threshold` alone the same answers start over a thousand times.
        let untimed = restarts(&steady, &P);
        assert!(untimed > 50 * busy, "{untimed} against {busy}");
    }

    #[test]
    fn a_quiet_candidate_keeps_the_threshold() {
        // One answer every 10 s: ln(0.1 × 600) − 1.17 ≈ 2.9 is below `threshold`.
        let steady = in_runs(300_000.0, 0.25, 0.0, 20_000);
        let quiet = restarts_at(&steady, Some(10_000_000), &P);
        assert_eq!(quiet, restarts(&steady, &P));
    }

    #[test]
    fn a_step_at_a_busy_candidate_still_shows_within_a_few_answers() {
        let mut m = LatencyMean::default();
        let mut at = 0;
        let mut add = |m: &mut LatencyMean, s: f64| {
            at += 10_000;
            m.add(s, Some(at), &P)
        };
        for s in jittered(200_000.0, 500) {
            add(&mut m, s);
        }
        // Twice as slow, at 100 answers a second (threshold ≈ 9.8, spread about 0.2).
        let mut steps = 0;
        for s in jittered(400_000.0, 20) {
            steps += 1;
            if add(&mut m, s) > 300_000.0 {
                break;
            }
        }
        assert!(steps <= 5, "twice as slow found after {steps} answers");
    }

    #[test]
    fn answers_that_move_in_runs_are_not_read_as_changes() {
        // A queue's latency wanders: each answer stays near the one before.
        let wandering = in_runs(300_000.0, 0.25, 0.8, 5_000);
        let uncorrected = LatencyParams {
            max_correlation: 0.0,
            ..P
        };
        let (with, without) = (restarts(&wandering, &P), restarts(&wandering, &uncorrected));
        assert!(
            with * 5 < without,
            "{with} restarts against {without} without the correction"
        );
        // Independent answers of the same spread restart about once in 230 (the two-sided
        // CUSUM's average run length at threshold 5 and slack 0.5): about 22 in 5,000.
        let independent = restarts(&in_runs(300_000.0, 0.25, 0.0, 5_000), &P);
        assert!((10..=40).contains(&independent), "{independent}");
    }

    #[test]
    fn a_step_after_answers_that_moved_in_runs_is_still_found() {
        let mut m = LatencyMean::default();
        for s in in_runs(200_000.0, 0.25, 0.8, 500) {
            m.add(s, None, &P);
        }
        let mut steps = 0;
        for s in jittered(1_000_000.0, 20) {
            steps += 1;
            if m.add(s, None, &P) > 600_000.0 {
                break;
            }
        }
        assert!(
            steps <= 4,
            "a step to five times as slow found after {steps} answers"
        );
    }

    #[test]
    fn seeded_counts_as_one_answer() {
        let mut m = LatencyMean::seeded(500_000.0);
        assert_eq!(m.mean(), Some(500_000.0));
        m.add(300_000.0, None, &P);
        assert_eq!(m.mean(), Some(400_000.0));
    }
}
