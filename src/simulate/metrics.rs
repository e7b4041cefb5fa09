//! Figures computed from a run's log.
//!
//! Per-request figures ("requests until ...") line up each sidecar's j-th request after an
//! event and average across sidecars, so in scenarios 1–4 they are means over independent
//! repetitions. A share "holds" from request j when it is met on average over requests
//! j..j+[`HOLD`] and over the rest of the phase from j: one unlucky probe does not reset the
//! count, and a passing blip does not count.

use super::clock::{Micros, SEC};
use super::engine::{AttemptLog, RunLog};
use super::provider::Providers;
use super::scenario::Scenario;
use serde::Serialize;

/// Requests over which a share must hold.
pub const HOLD: usize = 10;

/// A provider counts as misbehaving in an answer that failed or took this many times its
/// median (the "has failed a few times" clock for the bad-share figure).
pub const SLOW_FACTOR: f64 = 3.0;

/// Bad answers a sidecar must have seen before its bad-share count starts.
pub const BAD_SEEN: usize = 3;

/// Bin width for a sidecar's share in the herd (5 requests at 5 per second; the binomial
/// noise of so few is taken out, see [`Herd`]).
pub const HERD_BIN: Micros = SEC;

/// Bin width for the fleet's share in the herd (about 60 requests).
pub const FLEET_BIN: Micros = SEC / 4;

/// Number of time bins in the share-over-time series.
pub const SERIES_BINS: usize = 100;

/// Length of the herd's zoomed series.
pub const ZOOM: Micros = 60 * SEC;

/// Bins of the zoomed series (half a second each).
pub const ZOOM_BINS: usize = 120;

/// Settle/oscillate figures for the herd. Standard deviations are over time bins in the focus
/// window (the second half of the run), largest over providers, with the binomial noise of counting a finite
/// number of requests per bin taken out (so a steady random split scores about 0).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Herd {
    /// Standard deviation of a sidecar's share of a provider over 1 s bins, median sidecar.
    pub sidecar_std_median: f64,
    /// The same for the worst sidecar.
    pub sidecar_std_max: f64,
    /// Standard deviation of the fleet's total share of a provider over 0.25 s bins: swings
    /// of the whole fleet in step, too fast for one sidecar's few requests to show.
    pub fleet_std: f64,
    /// Mean share of each provider over the focus window.
    pub mean_shares: Vec<f64>,
}

/// Share of attempts per provider over time, for the charts.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Series {
    /// Start of the first bin in seconds.
    pub start_s: f64,
    /// Bin width in seconds.
    pub bin_s: f64,
    /// `shares[bin][provider]`.
    pub shares: Vec<Vec<f64>>,
}

/// Everything measured for one contender in one scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// Mean request latency (retries included) in the focus window, ms.
    pub mean_ms: f64,
    /// 95th percentile of the same, ms.
    pub p95_ms: f64,
    /// Percentage of requests in the focus window that failed after all retries.
    pub failed_pct: f64,
    /// Attempts answered `429` in the focus window (each costs the client a retry wait).
    pub limited: usize,
    /// Conversations: the fraction of successful attempts in the focus window whose prefix
    /// the provider had cached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hit_rate: Option<f64>,
    /// Requests after the incident until ≥ 90% of traffic avoids the affected provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switch_requests: Option<Option<usize>>,
    /// Requests after the incident until the new best provider holds ≥ 90% of traffic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_best_requests: Option<Option<usize>>,
    /// Share of attempts still sent to the affected provider during the incident, once the
    /// sidecar has seen it misbehave [`BAD_SEEN`] times.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bad_share: Option<f64>,
    /// Requests after the incident ends until the recovered provider holds the majority
    /// (inner `None`: never within the run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery_requests: Option<Option<usize>>,
    /// Herd figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub herd: Option<Herd>,
    /// Traffic share over time.
    #[serde(skip)]
    pub series: Series,
    /// Herd only: a minute of the second half in half-second bins, where swings show.
    #[serde(skip)]
    pub zoom: Option<Series>,
}

/// Computes every figure that applies to `scenario` from `log`.
pub fn figures(scenario: &Scenario, log: &RunLog) -> Figures {
    let (from, to) = scenario.focus;
    let mut lat: Vec<Micros> = Vec::new();
    let mut failed = 0usize;
    for r in log.requests.iter() {
        if (from..to).contains(&r.arrival) {
            lat.push(r.latency);
            failed += usize::from(!r.ok);
        }
    }
    lat.sort_unstable();
    let ms = |us: f64| us / 1000.0;
    let mean_ms = ms(lat.iter().sum::<Micros>() as f64 / lat.len().max(1) as f64);
    let p95_ms = ms(percentile(&lat, 0.95) as f64);
    let failed_pct = 100.0 * failed as f64 / lat.len().max(1) as f64;

    let mut f = Figures {
        mean_ms,
        p95_ms,
        failed_pct,
        limited: log
            .attempts
            .iter()
            .filter(|a| a.limited && (from..to).contains(&a.start))
            .count(),
        hit_rate: scenario.conversations.map(|_| hit_rate(log, from, to)),
        switch_requests: None,
        new_best_requests: None,
        bad_share: None,
        recovery_requests: None,
        herd: None,
        series: series(scenario, log, 0, scenario.duration, SERIES_BINS),
        zoom: None,
    };
    if let Some(inc) = scenario.incident {
        let bad = inc.provider as u8;
        let end = inc.end.unwrap_or(scenario.duration);
        let by_index = firsts_after(scenario, log, inc.start, end);
        if inc.end.is_some() {
            f.switch_requests = Some(holds(&by_index, |p| p != bad, 0.9));
            let world = Providers::new(&scenario.providers, 0);
            let n = scenario.providers.len();
            let best = (0..n)
                .min_by(|&a, &b| {
                    let mid = (inc.start + end) / 2;
                    world
                        .expected_cost(a, mid)
                        .total_cmp(&world.expected_cost(b, mid))
                })
                .unwrap_or(0) as u8;
            f.new_best_requests = Some(holds(&by_index, |p| p == best, 0.9));
            let after = firsts_after(scenario, log, end, scenario.duration);
            f.recovery_requests = Some(holds(&after, |p| p == bad, 0.5));
        }
        f.bad_share = Some(bad_share(scenario, log, inc.provider, inc.start, end));
    }
    if scenario.herd {
        f.herd = Some(herd(scenario, log));
        let from = scenario.focus.0;
        let to = (from + ZOOM).min(scenario.focus.1);
        f.zoom = Some(series(scenario, log, from, to, ZOOM_BINS));
    }
    f
}

/// Fraction of the successful attempts started in `[from, to)` that were cache hits.
fn hit_rate(log: &RunLog, from: Micros, to: Micros) -> f64 {
    let answered = log
        .attempts
        .iter()
        .filter(|a| a.ok && (from..to).contains(&a.start));
    let (hits, all) = answered.fold((0usize, 0usize), |(h, n), a| {
        (h + usize::from(a.cached), n + 1)
    });
    hits as f64 / all.max(1) as f64
}

/// Value at quantile `q` of sorted `v` (0 when empty).
fn percentile(v: &[Micros], q: f64) -> Micros {
    if v.is_empty() {
        return 0;
    }
    let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
    v[i]
}

/// `out[j][s]`: first-attempt provider of sidecar `s`'s j-th request arriving in `[from, to)`,
/// cut to the length every sidecar reaches.
fn firsts_after(scenario: &Scenario, log: &RunLog, from: Micros, to: Micros) -> Vec<Vec<u8>> {
    let mut per: Vec<Vec<u8>> = vec![Vec::new(); scenario.sidecars];
    for r in &log.requests {
        if (from..to).contains(&r.arrival) {
            per[r.sidecar as usize].push(r.first);
        }
    }
    let len = per.iter().map(Vec::len).min().unwrap_or(0);
    (0..len)
        .map(|j| per.iter().map(|v| v[j]).collect())
        .collect()
}

/// First j such that the fraction of first attempts matching `pred` across sidecars reaches
/// `threshold` averaged over requests j..j+HOLD and over j..end; `None` if it never does.
fn holds(by_index: &[Vec<u8>], pred: impl Fn(u8) -> bool, threshold: f64) -> Option<usize> {
    let frac: Vec<f64> = by_index
        .iter()
        .map(|row| row.iter().filter(|&&p| pred(p)).count() as f64 / row.len().max(1) as f64)
        .collect();
    // rest[j] = mean of frac[j..].
    let mut rest = vec![0.0; frac.len()];
    let mut sum = 0.0;
    for j in (0..frac.len()).rev() {
        sum += frac[j];
        rest[j] = sum / (frac.len() - j) as f64;
    }
    (0..frac.len().saturating_sub(HOLD - 1)).find(|&j| {
        frac[j..j + HOLD].iter().sum::<f64>() / HOLD as f64 >= threshold && rest[j] >= threshold
    })
}

/// Share of attempts sent to `p` during `[from, to)` counted per sidecar from the moment it
/// has seen `p` misbehave [`BAD_SEEN`] times.
fn bad_share(scenario: &Scenario, log: &RunLog, p: usize, from: Micros, to: Micros) -> f64 {
    let slow_us = scenario.providers[p].median_ms * 1000.0 * SLOW_FACTOR;
    let misbehaved = |a: &AttemptLog| !a.ok || (a.end - a.start) as f64 >= slow_us;
    let mut seen = vec![0usize; scenario.sidecars];
    let mut clock: Vec<Option<Micros>> = vec![None; scenario.sidecars];
    // Attempts are logged in completion order, so the clock starts at the right answer.
    for a in &log.attempts {
        let s = a.sidecar as usize;
        if a.provider as usize == p && a.end >= from && misbehaved(a) && clock[s].is_none() {
            seen[s] += 1;
            if seen[s] >= BAD_SEEN {
                clock[s] = Some(a.end);
            }
        }
    }
    let (mut to_p, mut total) = (0usize, 0usize);
    for a in &log.attempts {
        if let Some(since) = clock[a.sidecar as usize] {
            if a.start >= since && a.start < to {
                total += 1;
                to_p += usize::from(a.provider as usize == p);
            }
        }
    }
    to_p as f64 / total.max(1) as f64
}

/// Attempts per provider in `[from, to)` split into bins of `bin`, for the fleet:
/// `counts[bin][provider]`.
fn counted(
    scenario: &Scenario,
    log: &RunLog,
    from: Micros,
    to: Micros,
    bin: Micros,
) -> Vec<Vec<usize>> {
    let mut per = counted_per_sidecar(scenario, log, from, to, bin, false);
    per.pop().unwrap_or_default()
}

/// As [`counted`], one table per sidecar when `per_sidecar` (else one for the fleet), in a
/// single pass over the attempts.
fn counted_per_sidecar(
    scenario: &Scenario,
    log: &RunLog,
    from: Micros,
    to: Micros,
    bin: Micros,
    per_sidecar: bool,
) -> Vec<Vec<Vec<usize>>> {
    let n = scenario.providers.len();
    let bins = ((to - from) / bin.max(1)) as usize;
    let tables = if per_sidecar { scenario.sidecars } else { 1 };
    let mut counts = vec![vec![vec![0usize; n]; bins]; tables];
    for a in &log.attempts {
        if a.start < from {
            continue;
        }
        let b = ((a.start - from) / bin) as usize;
        if b < bins {
            let t = if per_sidecar { a.sidecar as usize } else { 0 };
            counts[t][b][a.provider as usize] += 1;
        }
    }
    counts
}

/// Counts per bin turned into shares per bin (an empty bin has all-zero shares).
fn to_shares(counts: &[Vec<usize>]) -> Vec<Vec<f64>> {
    counts
        .iter()
        .map(|c| {
            let total = c.iter().sum::<usize>().max(1) as f64;
            c.iter().map(|&x| x as f64 / total).collect()
        })
        .collect()
}

/// Largest, over providers, standard deviation over bins of a provider's share, less the
/// binomial sampling noise expected from the bins' request counts. Empty bins are skipped.
fn max_std(counts: &[Vec<usize>]) -> f64 {
    let bins: Vec<(&Vec<usize>, f64)> = counts
        .iter()
        .map(|c| (c, c.iter().sum::<usize>() as f64))
        .filter(|(_, total)| *total > 0.0)
        .collect();
    let n = counts.first().map_or(0, Vec::len);
    let m = bins.len().max(1) as f64;
    (0..n)
        .map(|p| {
            let xs: Vec<f64> = bins.iter().map(|(c, t)| c[p] as f64 / t).collect();
            let mean = xs.iter().sum::<f64>() / m;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / m;
            let noise = bins
                .iter()
                .map(|(_, t)| mean * (1.0 - mean) / t)
                .sum::<f64>()
                / m;
            (var - noise).max(0.0).sqrt()
        })
        .fold(0.0, f64::max)
}

fn herd(scenario: &Scenario, log: &RunLog) -> Herd {
    let (from, to) = scenario.focus;
    let mut per: Vec<f64> = counted_per_sidecar(scenario, log, from, to, HERD_BIN, true)
        .iter()
        .map(|c| max_std(c))
        .collect();
    per.sort_unstable_by(f64::total_cmp);
    let fleet = counted(scenario, log, from, to, FLEET_BIN);
    let n = scenario.providers.len();
    let whole = to_shares(&counted(scenario, log, from, to, to - from));
    Herd {
        sidecar_std_median: per.get(per.len() / 2).copied().unwrap_or(0.0),
        sidecar_std_max: per.last().copied().unwrap_or(0.0),
        fleet_std: max_std(&fleet),
        mean_shares: whole.into_iter().next().unwrap_or_else(|| vec![0.0; n]),
    }
}

/// Shares over `[from, to)` in `bins` equal bins.
fn series(scenario: &Scenario, log: &RunLog, from: Micros, to: Micros, bins: usize) -> Series {
    let bin = ((to - from) / bins.max(1) as u64).max(1);
    Series {
        start_s: from as f64 / SEC as f64,
        bin_s: bin as f64 / SEC as f64,
        shares: to_shares(&counted(scenario, log, from, to, bin)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_and_holds() {
        let v: Vec<Micros> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.95), 95);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[], 0.5), 0);
        // Two sidecars; provider 1 takes over from request 3 on.
        let rows: Vec<Vec<u8>> = (0..30)
            .map(|j| if j < 3 { vec![0, 0] } else { vec![1, 1] })
            .collect();
        // 90% of the next 10 requests: from request 2 on (one old-style request left).
        assert_eq!(holds(&rows, |p| p == 1, 0.9), Some(2));
        assert_eq!(holds(&rows, |p| p == 1, 0.95), Some(3));
        assert_eq!(holds(&rows, |p| p == 2, 0.9), None);
        // One stray half-request inside the window does not reset the count.
        let mut rows2 = rows.clone();
        rows2[5] = vec![0, 1];
        assert_eq!(holds(&rows2, |p| p == 1, 0.9), Some(3));
        // A blip that does not last is not a switch.
        let blip: Vec<Vec<u8>> = (0..40)
            .map(|j| {
                if (10..20).contains(&j) {
                    vec![1, 1]
                } else {
                    vec![0, 0]
                }
            })
            .collect();
        assert_eq!(holds(&blip, |p| p == 1, 0.5), None);
    }

    #[test]
    fn std_discounts_sampling_noise_and_sees_swings() {
        let steady = vec![vec![50, 50]; 4];
        assert_eq!(max_std(&steady), 0.0);
        // Full swings between bins of 100: raw std 0.5, noise 0.25/100.
        let swing = vec![vec![100, 0], vec![0, 100]];
        let s = max_std(&swing);
        assert!((s - (0.25f64 - 0.0025).sqrt()).abs() < 1e-12, "{s}");
        // Pure binomial noise around 0.5 with 25 per bin scores (close to) zero.
        let noisy = vec![vec![15, 10], vec![10, 15], vec![12, 13], vec![13, 12]];
        assert!(max_std(&noisy) < 0.05, "{}", max_std(&noisy));
        assert_eq!(max_std(&[vec![0, 0]]), 0.0);
        assert_eq!(to_shares(&[vec![1, 3]]), vec![vec![0.25, 0.75]]);
    }
}
