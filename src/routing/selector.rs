//! Turning candidate statistics into traffic shares and picking one candidate.
//!
//! One scoring function turns a candidate's [`Snapshot`] into a `Score` (warm with a speed,
//! or cold with a success rate, and whether it is backed off); one path turns an alias's
//! scores into weights and shares. [`shares`] and [`weights`] (for /status) and the picks all
//! go through it. [`pick_index`] maps a uniform draw onto shares; [`choose`] is one alias's
//! hot-path entry point (pin rule + weighted pick) and allocates nothing for up to
//! [`INLINE_CANDIDATES`].
//! [`choose_keyed`] picks the same way with a conversation key: weighted rendezvous over the
//! same shares instead of a random draw.
//! [`choose_at`] / [`shares_for_at`] take the time explicitly (the simulator's virtual clock);
//! [`choose`] / [`shares_for`] read the monotonic routing clock ([`now_us`]) only when a
//! candidate's waiting requests or `Retry-After` back-off make the time matter, and an
//! unkeyed pick's lulls ([`super::lull`]) its coarse reading ([`coarse_now_us`]).

use super::attempt::Mode;
use super::keyed_shares::SmoothedShare;
use super::load::charged_latency;
use super::params::{RoutingParams, RuleParams};
use super::pressure::{coarse_now_us, now_us};
use super::rng::RngSource;
use super::tracker::{CandidateStats, Snapshot};

/// Candidate count up to which [`choose`] works entirely on the stack.
pub const INLINE_CANDIDATES: usize = 16;

/// Result of [`choose`]: which candidate (config order), whether a pin decided it, and how
/// the draw placed it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    /// Index into the alias's candidate list.
    pub index: usize,
    /// True when the session-affinity pin was honoured.
    pub pinned_honoured: bool,
    /// What the draw knew that the answer's congestion step needs.
    pub drawn: Drawn,
}

/// How a draw placed a request, carried to its answer: how far that answer may grow the
/// candidate's congestion discount ([`super::congestion`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Drawn {
    /// Drawn at the probe floor: its score alone would send it less, so its answer cannot
    /// show a queue that our share could still shrink, and it never adds to the discount.
    pub probe: bool,
    /// The highest latency estimate (µs) among the alias's serving candidates (not backed
    /// off, error rate within `error_threshold`) at the draw, which bounds how far the
    /// discount grows; `None` when no draw was made (a pin, a lone candidate).
    pub slowest_us: Option<f64>,
}

/// One candidate as [`score`] sees it: the only input of the weights, the shares, the weighted
/// random pick and the keyed rendezvous pick. Either kind may be backed off by a `Retry-After`;
/// [`weigh`] decides what that means.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Score {
    /// Has a latency in this mode.
    Warm {
        /// `success / effective latency` (1/µs, at least 0), with the congestion discount and
        /// quota pacing folded in (see [`discounted`]).
        speed: f64,
        /// Reference latency (µs): what it answers at once recovered, with nothing queued; its
        /// latency estimate while that is not measured yet. What its part of the probe floor is
        /// measured by ([`apply_floor`]).
        reference: f64,
        /// A `Retry-After` back-off is in force.
        backed_off: bool,
    },
    /// No usable latency in this mode yet.
    Cold {
        /// The success rate, clamped to `[min_success, 1]`, so a cold candidate that keeps
        /// failing before any response (refused connects, DNS) still loses its share.
        success: f64,
        /// A `Retry-After` back-off is in force.
        backed_off: bool,
    },
}

impl Score {
    /// The score of [`Snapshot::COLD`]; fills scratch buffers before they are written.
    const COLD: Score = Score::Cold {
        success: 1.0,
        backed_off: false,
    };

    /// True while a `Retry-After` back-off is in force.
    #[inline]
    fn backed_off(self) -> bool {
        match self {
            Score::Warm { backed_off, .. } | Score::Cold { backed_off, .. } => backed_off,
        }
    }
}

/// One candidate's part while scores become weights and weights become shares.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stake {
    /// Backed off: no weight and no share, not even the probe floor.
    Out,
    /// A raw weight and the candidate's reference latency (µs, 0 for a cold one), which
    /// [`apply_floor`] turns into its part of the probe floor; its share is the weight times
    /// the [`Split`]'s scale.
    In(f64, f64),
    /// Held at its part of the probe floor.
    Floored(f64),
}

/// How an alias's stakes become shares: an [`Stake::In`] weight times `scale`, a
/// [`Stake::Floored`] one its part of the probe floor. Keeping the raw weights and one scale saves a
/// normalising pass over the candidates on every pick.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Split {
    /// What every free weight is multiplied by.
    scale: f64,
    /// The share of a floored candidate whose part is 1.
    floor: f64,
}

impl Stake {
    /// The share this stake ends as under `split`.
    #[inline]
    fn share(self, split: Split) -> f64 {
        match self {
            Stake::Out => 0.0,
            Stake::In(weight, _) => weight * split.scale,
            Stake::Floored(part) => split.floor * part,
        }
    }
}

/// The latency a pick charges a warm candidate (µs): the EWMA, or the open age of its
/// requests still waiting ([`super::pressure`]) less `wait_age.slack` × the EWMA when that is
/// larger, plus the load charge of our requests in flight ([`super::load`]). `None` while the
/// candidate has no finite latency in this mode (cold). /status shows it as
/// `charged_latency_ms`.
#[inline]
pub fn charged_latency_us(s: &Snapshot, rule: &RuleParams) -> Option<f64> {
    let lat = s.latency_us.filter(|&l| finite_non_negative(l))?;
    let lat = match s.wait_age_us.map(|age| age - rule.wait_age.slack * lat) {
        Some(waiting) if waiting > lat => waiting,
        _ => lat,
    };
    Some(charged_latency(
        lat,
        s.load_slope_us,
        s.inflight,
        s.load_mean_inflight,
        &rule.load,
    ))
}

/// True for a finite number that is not negative (-0.0 included, NaN not): one integer
/// comparison on the bits, as the picks check every latency they read.
#[inline]
fn finite_non_negative(x: f64) -> bool {
    let bits = x.to_bits();
    bits < f64::INFINITY.to_bits() || bits == (-0.0f64).to_bits()
}

/// `x.max(floor)` for an `x` that is not NaN (the same for any `floor`, up to the sign of a
/// zero), without the NaN handling `f64::max` costs on every candidate of every pick.
#[inline]
fn at_least(x: f64, floor: f64) -> f64 {
    if x < floor {
        floor
    } else {
        x
    }
}

/// The single scoring function. A warm candidate's speed is `success / latency`, with success
/// clamped to `[min_success, 1]` and latency to at least `min_latency_us` ([`super::params::ScoreParams`]).
/// The latency is [`charged_latency_us`]. Ratios of speeds are inverse ratios of effective latencies, and this
/// form needs one division per candidate instead of two. `k` is the exponent from [`sane_k`].
#[inline(always)]
fn score(s: &Snapshot, k: f64, rule: &RuleParams) -> Score {
    let bounds = &rule.score;
    // A NaN success rate (never produced by the tracker) counts as the worst.
    let success = if s.success.is_nan() {
        bounds.min_success
    } else {
        // `clamp(min_success, 1.0)`, without its check that the bounds are ordered.
        let floored = at_least(s.success, bounds.min_success);
        if floored > 1.0 {
            1.0
        } else {
            floored
        }
    };
    let backed_off = s.backed_off;
    match charged_latency_us(s, rule) {
        Some(lat) => {
            let speed = success / at_least(lat, bounds.min_latency_us);
            Score::Warm {
                speed: discounted(speed, s.discount, s.pacing, k),
                // Until the reference is measured, the latency is the best guess of it.
                reference: s
                    .reference_us
                    .filter(|&r| finite_non_negative(r))
                    .or(s.latency_us)
                    .map_or(0.0, |r| at_least(r, bounds.min_latency_us)),
                backed_off,
            }
        }
        _ => Score::Cold {
            success,
            backed_off,
        },
    }
}

/// A warm candidate's speed with its congestion discount `d` and quota pacing factor `f`
/// folded in: `speed × (f·e^-d)^(1/k)`, so that after the power `k` its weight carries the
/// factor `f·e^-d` (shares are ratios, so scaling every weight by the same best changes
/// nothing).
#[inline]
fn discounted(speed: f64, d: f64, f: f64, k: f64) -> f64 {
    // Most candidates have neither, so that test comes first.
    if (d > 0.0 || f < 1.0) && speed > 0.0 && k > 0.0 {
        speed * ((f.max(f64::MIN_POSITIVE).ln() - d) / k).exp()
    } else {
        speed
    }
}

/// The exponent to use: `exploit_k` if finite and >= 0, else the default.
#[inline]
pub(crate) fn sane_k(k: f64) -> f64 {
    if (0.0..f64::INFINITY).contains(&k) {
        k
    } else {
        RoutingParams::default().exploit_k
    }
}

/// The exponent of one pick's weights, read once from `exploit_k` ([`sane_k`]).
#[derive(Debug, Clone, Copy)]
struct Exponent {
    /// The exponent.
    k: f64,
    /// The exponent when it is a whole number up to 64, which [`pow_u32`] raises to.
    whole: Option<u32>,
}

impl Exponent {
    /// `exploit_k` as the weights use it.
    #[inline]
    fn of(params: &RoutingParams) -> Self {
        let k = sane_k(params.exploit_k);
        Exponent {
            k,
            whole: (k <= 64.0 && f64::from(k as u32) == k).then_some(k as u32),
        }
    }

    /// `ratio^k`.
    #[inline]
    fn pow(self, ratio: f64) -> f64 {
        match self.whole {
            Some(e) => pow_u32(ratio, e),
            None => ratio.powf(self.k),
        }
    }
}

/// `base^e` by repeated squaring (inline; `powi` is an out-of-line call on baseline x86-64).
#[inline]
fn pow_u32(mut base: f64, mut e: u32) -> f64 {
    let mut acc = 1.0;
    loop {
        if e & 1 == 1 {
            acc *= base;
        }
        e >>= 1;
        if e == 0 {
            return acc;
        }
        base *= base;
    }
}

/// Runs `f` with scratch scores and stakes for `n` candidates: on the stack up to
/// [`INLINE_CANDIDATES`] (in arrays of half that for the usual aliases, as filling the
/// scratch is part of every pick's cost), on the heap beyond.
#[inline]
fn with_scratch<R>(n: usize, f: impl FnOnce(&mut [Score], &mut [Stake]) -> R) -> R {
    if n <= INLINE_CANDIDATES / 2 {
        on_stack::<{ INLINE_CANDIDATES / 2 }, R>(n, f)
    } else if n <= INLINE_CANDIDATES {
        on_stack::<INLINE_CANDIDATES, R>(n, f)
    } else {
        f(&mut vec![Score::COLD; n], &mut vec![Stake::Out; n])
    }
}

/// [`with_scratch`] in arrays of `N` (at least `n`).
#[inline(always)]
fn on_stack<const N: usize, R>(n: usize, f: impl FnOnce(&mut [Score], &mut [Stake]) -> R) -> R {
    let mut scores = [Score::COLD; N];
    let mut stakes = [Stake::Out; N];
    f(&mut scores[..n], &mut stakes[..n])
}

/// Shares (summing to 1) for one alias's candidates from their snapshots; the pure core used by
/// /status and the tests (the picks score the live statistics the same way). Writes
/// `min(snaps.len(), out.len())` shares and zeroes any extra `out` slots.
///
/// Raw weight = (best_effective / effective)^k for warm candidates, `cold_weight` ([`super::params::ScoreParams`]) for cold
/// ones (all equal when every candidate is cold); then normalised and floored at
/// [`probe_floor_each`] (an even split if that leaves nothing for the best). Backed-off candidates get 0 and are
/// left out of the floor, unless every candidate is backed off (then back-off is ignored).
pub fn shares(snaps: &[Snapshot], params: &RoutingParams, out: &mut [f64]) {
    let n = snaps.len().min(out.len());
    let (out, rest) = out.split_at_mut(n);
    rest.iter_mut().for_each(|x| *x = 0.0);
    let k = Exponent::of(params);
    with_scratch(n, |scores, stakes| {
        let leader = score_all(snaps, k, &params.rule, scores);
        let split = share_out(scores, leader, k, params, stakes);
        for (o, stake) in out.iter_mut().zip(stakes.iter()) {
            *o = stake.share(split);
        }
    });
}

/// Scores `snaps` into `scores` (same length), and what the weights are relative to.
fn score_all(snaps: &[Snapshot], k: Exponent, rule: &RuleParams, scores: &mut [Score]) -> Leader {
    let mut leader = Leader::default();
    for (score_of, snap) in scores.iter_mut().zip(snaps) {
        *score_of = score(snap, k.k, rule);
        leader.add(*score_of);
    }
    leader
}

/// Raw weights (before normalising and the probe floor) for one alias's candidates: the best
/// warm candidate has 1.0, a cold one `cold_weight` ([`super::params::ScoreParams`]) (1.0 when nothing is warm), scaled as in
/// [`shares`]; a backed-off one 0. Shown on /status next to the shares. Writes
/// `min(snaps.len(), out.len())` values.
pub fn weights(snaps: &[Snapshot], params: &RoutingParams, out: &mut [f64]) {
    let n = snaps.len().min(out.len());
    let k = Exponent::of(params);
    with_scratch(n, |scores, stakes| {
        let leader = score_all(snaps, k, &params.rule, scores);
        weigh(scores, leader, k, params, stakes);
        let raw = Split {
            scale: 1.0,
            floor: 0.0,
        };
        for (o, stake) in out.iter_mut().zip(stakes.iter()) {
            *o = stake.share(raw);
        }
    });
}

/// What [`weigh`] found besides the weights: their sum, how many candidates take part, the
/// smallest weight among them (what decides whether the probe floor applies: no part exceeds
/// 1) and the best's effective latency (what the parts are measured against).
#[derive(Debug, Clone, Copy)]
struct Weighed {
    /// The weights' sum.
    sum: f64,
    /// Candidates that are not [`Stake::Out`].
    count: usize,
    /// The smallest weight of those.
    min: f64,
    /// `1 / best speed`: the best warm candidate's effective latency (µs), 0 when none is warm.
    best_latency: f64,
}

/// What the weights are relative to, gathered while the candidates are scored (so the
/// weights take one pass): whether back-off is honoured (some candidate is not backed off)
/// and the best speed among the candidates taking part.
#[derive(Debug, Clone, Copy, Default)]
struct Leader {
    /// Some candidate is not backed off.
    honour_back_off: bool,
    /// The best warm speed among candidates not backed off.
    best_free: f64,
    /// The best warm speed among all candidates.
    best_any: f64,
}

impl Leader {
    /// Counts one more candidate's score.
    #[inline]
    fn add(&mut self, s: Score) {
        let free = !s.backed_off();
        self.honour_back_off |= free;
        // Speeds are never NaN (see [`score`]), so plain comparisons do.
        if let Score::Warm { speed, .. } = s {
            if speed > self.best_any {
                self.best_any = speed;
            }
            if free && speed > self.best_free {
                self.best_free = speed;
            }
        }
    }

    /// The best speed the weights are relative to.
    #[inline]
    fn best(self) -> f64 {
        if self.honour_back_off {
            self.best_free
        } else {
            self.best_any
        }
    }
}

/// Scores become raw weights in `out` (same length), each kept with its reference latency
/// for [`apply_floor`]; `leader` is what the scoring pass found about them.
///
/// What a back-off does to the shares is decided here and nowhere else: a backed-off
/// candidate is [`Stake::Out`], unless every candidate is backed off, when back-off is ignored
/// rather than routing nowhere. (A pin to a backed-off candidate is not honoured: the pin rule,
/// in [`choose_keyed_at`].)
fn weigh(
    scores: &[Score],
    leader: Leader,
    k: Exponent,
    params: &RoutingParams,
    out: &mut [Stake],
) -> Weighed {
    let honour_back_off = leader.honour_back_off;
    let best = leader.best();
    // With nothing warm, cold candidates split evenly (scaled by success^k, so one that keeps
    // failing before any response still yields); otherwise a cold one probes at a quarter of
    // the best's weight, scaled the same way. The best warm candidate has weight 1.
    let cold_weight = if best <= 0.0 {
        1.0
    } else {
        params.rule.score.cold_weight
    };
    let inv_best = if best <= 0.0 { 0.0 } else { 1.0 / best };
    let mut weighed = Weighed {
        sum: 0.0,
        count: 0,
        min: f64::INFINITY,
        best_latency: inv_best,
    };
    for (o, &s) in out.iter_mut().zip(scores) {
        if honour_back_off && s.backed_off() {
            *o = Stake::Out;
            continue;
        }
        let (weight, reference) = match s {
            Score::Cold { success, .. } => (cold_weight * k.pow(success), 0.0),
            // The best candidate is exactly 1.0 (speed * (1/best) can miss it by one ulp).
            Score::Warm { speed, .. } if speed == best => (1.0, 0.0),
            Score::Warm {
                speed, reference, ..
            } => (k.pow((speed * inv_best).min(1.0)), reference),
        };
        weighed.sum += weight;
        weighed.count += 1;
        if weight < weighed.min {
            weighed.min = weight;
        }
        *o = Stake::In(weight, reference);
    }
    weighed
}

/// Scores become stakes in `out` (same length) and the [`Split`] that turns them into shares
/// summing to 1: the one path behind [`shares`] and the picks.
fn share_out(
    scores: &[Score],
    leader: Leader,
    k: Exponent,
    params: &RoutingParams,
    out: &mut [Stake],
) -> Split {
    let weighed = weigh(scores, leader, k, params, out);
    let floor = probe_floor_each(params.probe_floor, weighed.count);
    if weighed.sum > 0.0 {
        let scale = 1.0 / weighed.sum;
        // The floor pass is only needed if some share falls below the floor.
        if weighed.min * scale < floor {
            apply_floor(out, floor, weighed)
        } else {
            Split { scale, floor }
        }
    } else {
        // Every weight underflowed to 0 (or there is no candidate): split evenly.
        even_split(out, floor)
    }
}

/// The probe floor of each of `count` candidates whose part of it is whole: the
/// probe budget `probe_floor` split over the candidates other than the best, so that probing
/// costs an alias at most `probe_floor` of its traffic however many candidates it lists.
#[inline]
pub fn probe_floor_each(probe_floor: f64, count: usize) -> f64 {
    probe_floor / count.saturating_sub(1).max(1) as f64
}

/// Equal shares for every candidate that is not [`Stake::Out`].
fn even_split(out: &mut [Stake], floor: f64) -> Split {
    let mut count = 0usize;
    for s in out.iter_mut().filter(|s| **s != Stake::Out) {
        *s = Stake::In(1.0, 0.0);
        count += 1;
    }
    Split {
        scale: 1.0 / count.max(1) as f64,
        floor,
    }
}

/// Holds weights whose share would fall below their part of `floor` at it
/// ([`Stake::Floored`]) and scales the rest to fill what is left, until stable; `weighed` is
/// what [`weigh`] found. [`Stake::Out`] candidates take no part.
///
/// A candidate's part is the best's effective latency over its reference latency (its latency
/// until the reference is measured), at most 1; a cold candidate's is whole. A candidate that would still answer `r`
/// times slower than the best once recovered gets `1/r` of the floor: probing it then costs
/// about the time probing a candidate as fast as the best would, and one that is slow only
/// for now (a step, an outage) keeps the whole floor to show its recovery.
fn apply_floor(out: &mut [Stake], floor: f64, weighed: Weighed) -> Split {
    if weighed.count as f64 * floor >= 1.0 {
        return even_split(out, floor);
    }
    // Each stake's reference becomes its part, once, here off the common path.
    for s in out.iter_mut() {
        if let Stake::In(weight, reference) = *s {
            let part = if reference > 0.0 {
                (weighed.best_latency / reference).clamp(f64::MIN_POSITIVE, 1.0)
            } else {
                1.0
            };
            *s = Stake::In(weight, part);
        }
    }
    // The floor's parts held so far, in units of `floor`.
    let mut fixed = 0.0f64;
    let mut free_sum = weighed.sum;
    // Each round fixes at least one more candidate or finishes, so count + 1 rounds suffice.
    for _ in 0..=weighed.count {
        // free_sum includes the largest weight (never fixed), so it stays well away from 0.
        let scale = (1.0 - fixed * floor) / free_sum;
        let mut changed = false;
        for s in out.iter_mut() {
            if let Stake::In(weight, part) = *s {
                if weight * scale < floor * part {
                    fixed += part;
                    free_sum -= weight;
                    *s = Stake::Floored(part);
                    changed = true;
                }
            }
        }
        if !changed {
            return Split { scale, floor };
        }
        if free_sum <= 0.0 {
            break; // unreachable in exact arithmetic; fall back to the even split
        }
    }
    even_split(out, floor)
}

/// Index whose cumulative share interval contains `r` (uniform in [0, 1)). Negative/NaN shares
/// count as 0; rounding leftovers go to the last candidate with a positive share; empty -> 0.
pub fn pick_index(shares: &[f64], r: f64) -> usize {
    draw(shares.iter().copied(), r)
}

/// [`pick_index`] over shares as they come.
#[inline]
fn draw(shares: impl Iterator<Item = f64>, r: f64) -> usize {
    let r = if r.is_nan() { 0.0 } else { r };
    let mut acc = 0.0;
    let mut last_positive = 0;
    for (i, s) in shares.enumerate() {
        // Negative and NaN shares fail this test: they count as 0.
        if s > 0.0 {
            acc += s;
            last_positive = i;
            if r < acc {
                return i;
            }
        }
    }
    last_positive
}

/// One alias's routing decision. `cands` are the alias's candidates in config order (anything
/// that derefs to stats: `&CandidateStats`, `Arc<CandidateStats>`, ...); `pinned` is the index
/// named by a session-affinity header, if any. Returns `None` only for an empty list. Reads
/// the routing clock ([`now_us`]) only if some candidate's score depends on time.
pub fn choose<C: AsRef<CandidateStats>>(
    cands: &[C],
    mode: Mode,
    pinned: Option<usize>,
    params: &RoutingParams,
    rng: &mut impl RngSource,
) -> Option<Choice> {
    choose_keyed(cands, mode, pinned, None, params, rng)
}

/// [`choose`] at an explicit time `now_us` (same clock as `begin_wait` / `back_off_until`).
/// A pin is honoured only for a candidate that is healthy and not backed off.
pub fn choose_at<C: AsRef<CandidateStats>>(
    cands: &[C],
    mode: Mode,
    pinned: Option<usize>,
    params: &RoutingParams,
    now_us: u64,
    rng: &mut impl RngSource,
) -> Option<Choice> {
    choose_keyed_at(cands, mode, pinned, None, params, now_us, rng)
}

/// A conversation's key, the candidates' stable identities and the alias's smoothed shares (in
/// the candidates' order): what turns the weighted pick into a weighted rendezvous pick over
/// the same shares.
#[derive(Debug, Clone, Copy)]
pub struct Keyed<'a> {
    /// The conversation key (`body::Inspected::conversation_key`).
    pub key: u64,
    /// One identity per candidate, the same on every sidecar ([`super::rendezvous::identity`]).
    pub identities: &'a [u64],
    /// One smoothed share per candidate ([`super::keyed_shares`]); any other length (empty)
    /// picks over the current shares as they are.
    pub smoothed: &'a [SmoothedShare],
    /// Factor on `exploit_k` for this pick ([`super::keyed_hits::KeyedHits::exploit`]; 1
    /// picks over the shares [`choose`] draws from).
    pub exploit: f64,
}

/// [`choose`] for a request that may carry a conversation key: with one, the candidate is the
/// key's weighted rendezvous pick ([`super::rendezvous`]) over the shares [`choose`] draws
/// from (with `exploit_k` times the key's `exploit` factor, [`super::keyed_hits`]), smoothed
/// across the alias's keyed picks ([`super::keyed_shares`]), so a conversation
/// stays on one candidate while the shares hold and every candidate still gets its share of
/// conversations. A pin still wins; without a key this is [`choose`].
pub fn choose_keyed<C: AsRef<CandidateStats>>(
    cands: &[C],
    mode: Mode,
    pinned: Option<usize>,
    keyed: Option<Keyed<'_>>,
    params: &RoutingParams,
    rng: &mut impl RngSource,
) -> Option<Choice> {
    // The clock is read once, and only when some candidate's score depends on the time; the
    // lulls, read on every unkeyed pick, need only the coarse clock.
    let mut now = None;
    let mut clock = || *now.get_or_insert_with(now_us);
    let clocks = Clocks {
        precise: &mut clock,
        lulls: coarse_now_us,
    };
    choose_with_clock(cands, mode, pinned, keyed, params, clocks, rng)
}

/// [`choose_keyed`] at an explicit time `now_us`. A key whose identities do not match the
/// candidates one for one is ignored (the random pick applies).
pub fn choose_keyed_at<C: AsRef<CandidateStats>>(
    cands: &[C],
    mode: Mode,
    pinned: Option<usize>,
    keyed: Option<Keyed<'_>>,
    params: &RoutingParams,
    now_us: u64,
    rng: &mut impl RngSource,
) -> Option<Choice> {
    let clocks = Clocks {
        precise: &mut || now_us,
        lulls: || now_us,
    };
    choose_with_clock(cands, mode, pinned, keyed, params, clocks, rng)
}

/// Where a pick reads the time: `precise` only for a candidate whose score depends on it,
/// `lulls` once per unkeyed pick (a reading a few milliseconds old serves).
struct Clocks<'a, P, L> {
    /// The routing clock, for waiting requests, back-off deadlines, quotas and fading failures.
    precise: &'a mut P,
    /// The routing clock to the millisecond, for the lulls.
    lulls: L,
}

/// [`choose_keyed_at`] with the time from `clocks`.
fn choose_with_clock<C: AsRef<CandidateStats>>(
    cands: &[C],
    mode: Mode,
    pinned: Option<usize>,
    keyed: Option<Keyed<'_>>,
    params: &RoutingParams,
    clocks: Clocks<'_, impl FnMut() -> u64, impl FnOnce() -> u64>,
    rng: &mut impl RngSource,
) -> Option<Choice> {
    let clock = clocks.precise;
    let keyed = keyed.filter(|k| k.identities.len() == cands.len());
    if let Some(i) = pinned {
        if let Some(c) = cands.get(i) {
            let c = c.as_ref();
            let now = c.needs_time().then(&mut *clock);
            let backed_off = now.is_some_and(|t| c.backed_off(t));
            let error_rate = now.map_or_else(
                || 1.0 - c.success(),
                |t| c.error_rate_at(t, &params.rule.success),
            );
            if error_rate <= params.error_threshold && !backed_off {
                return Some(Choice {
                    index: i,
                    pinned_honoured: true,
                    drawn: Drawn::default(),
                });
            }
        }
    }
    let (index, drawn) = match cands.len() {
        0 => return None,
        1 => (0, Drawn::default()),
        _ => weighted_pick(cands, mode, params, clock, clocks.lulls, keyed, rng),
    };
    Some(Choice {
        index,
        pinned_honoured: false,
        drawn,
    })
}

/// Scores the live statistics and draws: the same scoring path as [`shares`], on the stack up
/// to [`INLINE_CANDIDATES`]. The draw is random, or with a key its rendezvous pick over the
/// same shares. Returns the index and how the draw placed it.
fn weighted_pick<C: AsRef<CandidateStats>>(
    cands: &[C],
    mode: Mode,
    params: &RoutingParams,
    clock: &mut impl FnMut() -> u64,
    lull_clock: impl FnOnce() -> u64,
    keyed: Option<Keyed<'_>>,
    rng: &mut impl RngSource,
) -> (usize, Drawn) {
    // Conversations keep their candidate through lulls: moving one costs its cache.
    let lulled = match keyed {
        None => super::lull::lulled(lull_clock(), cands.len(), &params.rule.lull),
        Some(_) => None,
    };
    // A keyed pick weighs with the exponent its alias's keyed hit rate sets.
    let sharpened;
    let params = match keyed {
        Some(k) => {
            sharpened = params.with_exploit_factor(k.exploit);
            &sharpened
        }
        None => params,
    };
    let k = Exponent::of(params);
    // Below every latency: none found yet.
    let mut slowest_us = f64::NEG_INFINITY;
    with_scratch(cands.len(), |scores, stakes| {
        let mut leader = Leader::default();
        for (i, (score_of, c)) in scores.iter_mut().zip(cands).enumerate() {
            let c = c.as_ref();
            // The time-dependent signals are read only when the candidate has any.
            let mut snap = if c.needs_time() {
                c.snapshot_at(mode, clock(), &params.rule.success)
            } else {
                c.snapshot(mode)
            };
            if lulled == Some(i) && c.takes_lulls() {
                snap.discount += params.rule.lull.discount;
            }
            if let Some(l) = snap.latency_us {
                // Latencies are never NaN, so plain comparisons do.
                if l > slowest_us && serving(&snap, params.error_threshold) {
                    slowest_us = l;
                }
            }
            *score_of = score(&snap, k.k, &params.rule);
            leader.add(*score_of);
        }
        let split = share_out(scores, leader, k, params, stakes);
        let shares = stakes.iter().map(|s| s.share(split));
        let rendezvous = keyed.and_then(|k| {
            let smoothed = (k.smoothed.len() == cands.len()).then_some(k.smoothed);
            let candidates = k.identities.iter().zip(shares.clone()).enumerate().map(
                |(i, (&identity, share))| match smoothed {
                    Some(cells) => (
                        identity,
                        cells[i].follow(mode, share, params.rule.keyed.smoothing),
                    ),
                    None => (identity, share),
                },
            );
            super::rendezvous::pick_by(k.key, candidates)
        });
        let index = rendezvous.unwrap_or_else(|| draw(shares, rng.next_f64()));
        let probe = matches!(stakes.get(index), Some(Stake::Floored(_)));
        let slowest_us = (slowest_us > f64::NEG_INFINITY).then_some(slowest_us);
        (index, Drawn { probe, slowest_us })
    })
}

/// A candidate that serves: not backed off, its error rate within `error_threshold` (as a pin
/// needs).
#[inline]
fn serving(s: &Snapshot, error_threshold: f64) -> bool {
    !s.backed_off && 1.0 - s.success <= error_threshold
}

/// Current shares for all candidates of an alias (allocates; for /status and metrics), at the
/// wall-clock time.
pub fn shares_for<C: AsRef<CandidateStats>>(
    cands: &[C],
    mode: Mode,
    params: &RoutingParams,
) -> Vec<f64> {
    shares_for_at(cands, mode, params, now_us())
}

/// Current raw weights for all candidates of an alias (allocates; for /status).
pub fn weights_for<C: AsRef<CandidateStats>>(
    cands: &[C],
    mode: Mode,
    params: &RoutingParams,
) -> Vec<f64> {
    let now_us = now_us();
    let snaps: Vec<Snapshot> = cands
        .iter()
        .map(|c| c.as_ref().snapshot_at(mode, now_us, &params.rule.success))
        .collect();
    let mut out = vec![0.0; snaps.len()];
    weights(&snaps, params, &mut out);
    out
}

/// [`shares_for`] at an explicit time `now_us`.
pub fn shares_for_at<C: AsRef<CandidateStats>>(
    cands: &[C],
    mode: Mode,
    params: &RoutingParams,
    now_us: u64,
) -> Vec<f64> {
    let snaps: Vec<Snapshot> = cands
        .iter()
        .map(|c| c.as_ref().snapshot_at(mode, now_us, &params.rule.success))
        .collect();
    let mut out = vec![0.0; snaps.len()];
    shares(&snaps, params, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::super::attempt::Outcome;
    use super::super::keyed_hits::KeyedParams;
    use super::super::lull::LullParams;
    use super::super::params::ScoreParams;
    use super::super::rng::SplitMix64;
    use super::*;
    use crate::routing::latency_mean::LatencyParams;
    use std::sync::Arc;

    #[test]
    fn the_picks_number_checks_agree_with_the_library_ones() {
        let odd = [
            0.0,
            -0.0,
            1.5,
            -1.5,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        for x in odd {
            assert_eq!(
                finite_non_negative(x),
                (0.0..f64::INFINITY).contains(&x),
                "{x}"
            );
            if x.is_nan() {
                continue;
            }
            for floor in odd {
                if x == 0.0 && floor == 0.0 {
                    continue; // either zero is the larger
                }
                assert_eq!(
                    at_least(x, floor).to_bits(),
                    x.max(floor).to_bits(),
                    "{x} {floor}"
                );
            }
        }
    }

    #[test]
    fn whole_powers_are_repeated_products() {
        for base in [0.0, 0.37, 1.0, 1.9, 1e-80] {
            let mut product = 1.0;
            for e in 0..=64u32 {
                let p = pow_u32(base, e);
                assert!(
                    (p - product).abs() <= 1e-12 * product.abs(),
                    "{base}^{e}: {p} vs {product}"
                );
                assert!((p - base.powi(e as i32)).abs() <= 1e-12 * p.abs().max(f64::MIN_POSITIVE));
                product *= base;
            }
        }
        let k = Exponent::of(&RoutingParams::default());
        assert_eq!(k.whole, Some(6));
        assert_eq!(k.pow(0.5), 0.5f64.powi(6));
        let fractional = Exponent::of(&RoutingParams {
            exploit_k: 2.5,
            ..RoutingParams::default()
        });
        assert_eq!(fractional.whole, None);
        assert_eq!(fractional.pow(0.25), 0.25f64.powf(2.5));
    }

    /// A warm candidate that is slow only for now: its reference is below any latency here,
    /// so it keeps its whole part of the probe floor (the tests of parts set their own).
    fn warm(lat: f64, success: f64) -> Snapshot {
        Snapshot {
            latency_us: Some(lat),
            success,
            wait_age_us: None,
            backed_off: false,
            discount: 0.0,
            pacing: 1.0,
            inflight: 0,
            load_slope_us: 0.0,
            load_mean_inflight: 0.0,
            reference_us: Some(1.0),
        }
    }

    /// k = 3 (the latency-only baseline's, which the arithmetic in these tests is written for), no floor.
    fn no_floor() -> RoutingParams {
        RoutingParams {
            probe_floor: 0.0,
            exploit_k: 3.0,
            ..RoutingParams::default()
        }
    }

    fn run(snaps: &[Snapshot], p: &RoutingParams) -> Vec<f64> {
        let mut out = vec![f64::NAN; snaps.len()];
        shares(snaps, p, &mut out);
        out
    }

    fn assert_close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} vs {b}");
    }

    #[test]
    fn faster_candidate_gets_ratio_to_the_k() {
        // 100 µs vs 200 µs with k=3: raw 1 and 1/8.
        let s = run(&[warm(100.0, 1.0), warm(200.0, 1.0)], &no_floor());
        assert_close(s[0], 1.0 / 1.125);
        assert_close(s[1], 0.125 / 1.125);
        assert_close(s[0] / s[1], 8.0);
        let k2 = RoutingParams {
            exploit_k: 2.0,
            ..no_floor()
        };
        let s = run(&[warm(100.0, 1.0), warm(200.0, 1.0)], &k2);
        assert_close(s[0] / s[1], 4.0);
        let frac = RoutingParams {
            exploit_k: 1.5,
            ..no_floor()
        };
        let s = run(&[warm(100.0, 1.0), warm(400.0, 1.0)], &frac);
        assert_close(s[0] / s[1], 8.0);
    }

    #[test]
    fn failing_candidate_latency_inflates() {
        // Same latency, half success: effective latency doubles -> weight 1/8.
        let s = run(&[warm(100.0, 1.0), warm(100.0, 0.5)], &no_floor());
        assert_close(s[0] / s[1], 8.0);
        // Success 0 is clamped to 0.001: effective 1000x -> weight 1e-9.
        let s = run(&[warm(100.0, 1.0), warm(100.0, 0.0)], &no_floor());
        assert_close(s[1] / s[0], 1e-9);
        // A slow-but-healthy candidate beats a fast-but-failing one.
        let s = run(&[warm(150.0, 1.0), warm(100.0, 0.5)], &no_floor());
        assert!(s[0] > s[1]);
    }

    #[test]
    fn cold_gets_quarter_of_best() {
        let s = run(&[warm(100.0, 1.0), Snapshot::COLD], &no_floor());
        assert_close(s[1] / s[0], 0.25);
        assert_close(s[0] + s[1], 1.0);
    }

    #[test]
    fn cold_candidate_that_keeps_failing_yields_its_share() {
        let failing_cold = Snapshot {
            latency_us: None,
            success: 0.1,
            ..Snapshot::COLD
        };
        // Next to a warm candidate: 0.25 * 0.1^3 of the best's weight.
        let s = run(&[warm(100.0, 1.0), failing_cold], &no_floor());
        assert_close(s[1] / s[0], 0.25 * 0.001);
        // Among cold candidates only: weighted by success^3 instead of even.
        let s = run(&[Snapshot::COLD, failing_cold], &no_floor());
        assert_close(s[1] / s[0], 0.001);
    }

    #[test]
    fn all_cold_even_and_single_is_one() {
        let s = run(&[Snapshot::COLD; 4], &RoutingParams::default());
        for x in &s {
            assert_close(*x, 0.25);
        }
        assert_eq!(run(&[warm(5.0, 0.2)], &RoutingParams::default()), vec![1.0]);
        assert_eq!(run(&[Snapshot::COLD], &RoutingParams::default()), vec![1.0]);
    }

    #[test]
    fn floor_raises_small_shares_and_keeps_sum() {
        let p = RoutingParams::default(); // floor 0.01
        let s = run(
            &[warm(100.0, 1.0), warm(1000.0, 1.0), warm(5000.0, 0.1)],
            &p,
        );
        assert_close(s[1], 0.01);
        assert_close(s[2], 0.01);
        assert_close(s[0], 0.98);
        assert_close(s.iter().sum::<f64>(), 1.0);
    }

    #[test]
    fn a_candidate_gets_the_floor_by_how_fast_it_answers_once_recovered() {
        // A budget of 0.02 over the three candidates other than the best.
        let p = RoutingParams::default();
        let part = 0.02 / 3.0;
        let at = |lat: f64, success: f64, reference: f64| Snapshot {
            reference_us: Some(reference),
            ..warm(lat, success)
        };
        let s = run(
            &[
                at(100.0, 1.0, 100.0),
                // 20 × slower now, as fast as the best once recovered (a step): all its part.
                at(2000.0, 1.0, 100.0),
                // Failing now, as fast as the best once recovered (an outage): all its part.
                at(100.0, 0.001, 100.0),
                // 20 × slower at its reference too: a twentieth of its part.
                at(2000.0, 1.0, 2000.0),
            ],
            &p,
        );
        assert_close(s[1], part);
        assert_close(s[2], part);
        assert_close(s[3], part / 20.0);
        assert_close(s.iter().sum::<f64>(), 1.0);
        // Without a reference its latency stands in for it: a twentieth of its part.
        let unmeasured = Snapshot {
            reference_us: None,
            ..warm(2000.0, 1.0)
        };
        let s = run(&[at(100.0, 1.0, 100.0), unmeasured], &p);
        assert_close(s[1], 0.02 / 20.0);
        // A reference above the best's latency by less than its share needs: no floor at all.
        let s = run(&[at(100.0, 1.0, 100.0), at(110.0, 1.0, 110.0)], &p);
        assert!(s[1] > 0.3, "{s:?}");
    }

    #[test]
    fn floor_cascade_is_iterated() {
        // Second candidate is just above the floor before scaling and falls below after the
        // tiny ones are raised: it must then be fixed at the floor too.
        // A budget of 0.3 over the three candidates other than the best: 0.1 each.
        let p = RoutingParams {
            probe_floor: 0.3,
            exploit_k: 1.0,
            ..RoutingParams::default()
        };
        // raw weights 1, 0.125, ~1e-5, ~1e-5: candidate 1 starts at 0.111 (above the floor)
        // and would drop to 0.089 once the tiny ones are raised.
        let s = run(
            &[
                warm(100.0, 1.0),
                warm(800.0, 1.0),
                warm(1e7, 1.0),
                warm(1e7, 1.0),
            ],
            &p,
        );
        for x in &s {
            assert!(*x >= 0.1 - 1e-12, "{s:?}");
        }
        assert_close(s[1], 0.1);
        assert_close(s[0], 0.7);
        assert_close(s.iter().sum::<f64>(), 1.0);
    }

    #[test]
    fn floor_too_large_splits_evenly() {
        // Two candidates with a budget of 0.5: the slower one's half leaves the best half too.
        let p = RoutingParams {
            probe_floor: 0.5,
            ..RoutingParams::default()
        };
        let s = run(&[warm(1.0, 1.0), warm(1e6, 1.0)], &p);
        for x in &s {
            assert_close(*x, 0.5);
        }
    }

    #[test]
    fn the_probe_budget_is_split_over_the_candidates_other_than_the_best() {
        assert_eq!(probe_floor_each(0.02, 0), 0.02);
        assert_eq!(probe_floor_each(0.02, 1), 0.02);
        assert_eq!(probe_floor_each(0.02, 2), 0.02);
        assert_eq!(probe_floor_each(0.02, 5), 0.005);
        // Eight candidates, one far faster than the rest: the seven slow ones get 0.02 / 7
        // each, 2 % of the traffic in all.
        let p = RoutingParams::default();
        let mut snaps = vec![warm(1e6, 1.0); 8];
        snaps[3] = warm(1.0, 1.0);
        let s = run(&snaps, &p);
        for (i, x) in s.iter().enumerate() {
            let want = if i == 3 { 0.98 } else { 0.02 / 7.0 };
            assert_close(*x, want);
        }
    }

    #[test]
    fn floor_and_sum_hold_over_many_random_inputs() {
        let mut rng = SplitMix64::new(2024);
        for case in 0..5_000 {
            let n = 1 + (rng.next_u64() % 20) as usize;
            let floor = [0.0, 0.001, 0.01, 0.05, 0.2][case % 5];
            let p = RoutingParams {
                probe_floor: floor,
                exploit_k: [0.0, 1.0, 2.5, 3.0, 40.0][(case / 5) % 5],
                ..RoutingParams::default()
            };
            let snaps: Vec<Snapshot> = (0..n)
                .map(|_| {
                    let cold = rng.next_u64() % 4 == 0;
                    Snapshot {
                        latency_us: if cold {
                            None
                        } else {
                            Some(rng.next_f64() * 1e7)
                        },
                        success: rng.next_f64(),
                        wait_age_us: if rng.next_u64() % 3 == 0 {
                            Some(rng.next_f64() * 1e7)
                        } else {
                            None
                        },
                        backed_off: rng.next_u64() % 5 == 0,
                        discount: [0.0, 0.5, 4.0][(rng.next_u64() % 3) as usize],
                        pacing: 1.0,
                        inflight: 0,
                        load_slope_us: 0.0,
                        load_mean_inflight: 0.0,
                        reference_us: [None, Some(rng.next_f64() * 1e7)]
                            [(rng.next_u64() % 2) as usize],
                    }
                })
                .collect();
            let s = run(&snaps, &p);
            let sum: f64 = s.iter().sum();
            assert!((sum - 1.0).abs() < 1e-12, "case {case}: sum {sum}");
            // Backed-off candidates get nothing, unless all are backed off.
            let all_off = snaps.iter().all(|s| s.backed_off);
            let active = snaps.iter().filter(|s| all_off || !s.backed_off).count();
            let eff_floor = probe_floor_each(floor, active).min(1.0 / active as f64);
            for (x, snap) in s.iter().zip(&snaps) {
                if snap.backed_off && !all_off {
                    assert_eq!(*x, 0.0, "case {case}: {s:?}");
                } else {
                    // A warm candidate may get only part of the floor (by its reference, or
                    // its latency until that is measured).
                    let least = if snap.latency_us.is_some() {
                        0.0
                    } else {
                        eff_floor - 1e-12
                    };
                    assert!(x.is_finite() && *x >= least, "case {case}: {s:?}");
                }
            }
        }
    }

    #[test]
    fn weird_inputs_do_not_produce_nan() {
        let p = RoutingParams {
            exploit_k: f64::NAN,
            probe_floor: f64::NAN,
            ..RoutingParams::default()
        };
        let snaps = [
            warm(0.0, 1.0),
            warm(f64::NAN, 1.0),
            warm(100.0, f64::NAN),
            warm(f64::INFINITY, 1.0),
            warm(-3.0, 2.0),
        ];
        let s = run(&snaps, &p);
        assert_close(s.iter().sum::<f64>(), 1.0);
        assert!(s.iter().all(|x| x.is_finite() && *x >= 0.0), "{s:?}");
        // Mismatched lengths: extra out slots zeroed, no panic.
        let mut out = [9.0; 3];
        shares(&[warm(1.0, 1.0)], &p, &mut out);
        assert_eq!(out, [1.0, 0.0, 0.0]);
        let mut empty: [f64; 0] = [];
        shares(&snaps, &p, &mut empty);
    }

    #[test]
    fn pick_index_distribution_matches_shares() {
        let sh = [0.5, 0.2, 0.01, 0.29];
        let n = 100_000;
        let mut counts = [0usize; 4];
        for i in 0..n {
            // Deterministic evenly spaced r in [0, 1).
            let r = (i as f64 + 0.5) / n as f64;
            counts[pick_index(&sh, r)] += 1;
        }
        for (c, s) in counts.iter().zip(sh) {
            let got = *c as f64 / n as f64;
            assert!((got - s).abs() < 1e-3, "{got} vs {s}");
        }
        let mut rng = SplitMix64::new(99);
        let mut counts = [0usize; 4];
        for _ in 0..n {
            counts[pick_index(&sh, rng.next_f64())] += 1;
        }
        for (c, s) in counts.iter().zip(sh) {
            let got = *c as f64 / n as f64;
            assert!((got - s).abs() < 0.01, "{got} vs {s}");
        }
    }

    #[test]
    fn pick_index_edges() {
        assert_eq!(pick_index(&[0.5, 0.5], 0.0), 0);
        assert_eq!(pick_index(&[0.5, 0.5], 0.5), 1);
        // Rounding leftovers go to the last positive share, never a zero one.
        assert_eq!(pick_index(&[0.3, 0.3, 0.0], 0.9999), 1);
        assert_eq!(pick_index(&[0.5, 0.5], f64::NAN), 0);
        assert_eq!(pick_index(&[0.0, 1.0], -1.0), 1);
        assert_eq!(pick_index(&[], 0.3), 0);
    }

    fn stats(lat: Option<f64>, failures: usize) -> Arc<CandidateStats> {
        let s = Arc::new(CandidateStats::new());
        if let Some(l) = lat {
            s.record_latency(Mode::NonStreaming, l, None, &LatencyParams::DEFAULT);
        }
        // The success rate as an EWMA at 0.3, so that the tests below state its values.
        let mut ewma = RoutingParams {
            ewma_alpha: 0.3,
            ..RoutingParams::default()
        };
        ewma.rule.success.change_every_s = 0.0;
        for _ in 0..failures {
            s.record_outcome(Outcome::Failure, 0, &ewma);
        }
        s
    }

    #[test]
    fn a_failed_candidate_not_heard_from_wins_its_share_and_its_pin_back_in_time() {
        // Two equally fast candidates; the second failed five times a second apart and has
        // not been heard from since. Its failures fade with the chance of a change since then
        // (`change_every_s` 60 s), at the pick's own time.
        let p = RoutingParams::default();
        let cands = vec![stats(Some(100.0), 0), stats(Some(100.0), 0)];
        for i in 0..5 {
            cands[1].record_outcome(Outcome::Failure, i * 1_000_000, &p);
        }
        let last = 4_000_000;
        let at = |now| shares_for_at(&cands, Mode::NonStreaming, &p, now)[1];
        assert!(at(last) <= p.probe_floor + 1e-9, "{}", at(last));
        assert!(at(last + 30_000_000) < at(last + 60_000_000));
        assert!(at(last + 600_000_000) > 0.49, "{}", at(last + 600_000_000));
        let mut rng = SplitMix64::new(4);
        let pin = |now, rng: &mut SplitMix64| {
            choose_at(&cands, Mode::NonStreaming, Some(1), &p, now, rng)
                .is_some_and(|c| c.pinned_honoured)
        };
        assert!(
            !pin(last, &mut rng),
            "an error rate above 0.5 breaks the pin"
        );
        assert!(pin(last + 600_000_000, &mut rng));
    }

    #[test]
    fn a_draw_at_the_probe_floor_is_marked_a_probe() {
        let p = RoutingParams::default();
        let mut rng = SplitMix64::new(3);
        // The slow candidate's score gives it far less than the floor: it gets only probes,
        // a tenth of the floor (ten times slower, its latency standing in for its reference).
        let cands = vec![stats(Some(100.0), 0), stats(Some(1_000.0), 0)];
        let (mut probes, mut picks) = (0, 0);
        for _ in 0..50_000 {
            let c = choose(&cands, Mode::NonStreaming, None, &p, &mut rng).unwrap();
            assert_eq!(c.drawn.probe, c.index == 1, "{c:?}");
            probes += usize::from(c.drawn.probe);
            picks += 1;
        }
        let share = probes as f64 / picks as f64;
        assert!((share - p.probe_floor / 10.0).abs() < 0.001, "{share}");
        // Two close candidates both keep more than the floor: no probes.
        let close = vec![stats(Some(100.0), 0), stats(Some(110.0), 0)];
        assert!((0..1_000).all(|_| {
            !choose(&close, Mode::NonStreaming, None, &p, &mut rng)
                .unwrap()
                .drawn
                .probe
        }));
    }

    #[test]
    fn a_draw_carries_the_slowest_serving_candidates_latency() {
        let p = RoutingParams::default();
        let mut rng = SplitMix64::new(5);
        // Serving: 100 and 300. Failing past the threshold: 900. Backed off: 2 000. Cold: none.
        let cands = vec![
            stats(Some(100.0), 0),
            stats(Some(300.0), 0),
            stats(Some(900.0), 2),
            stats(Some(2_000.0), 0),
            stats(None, 0),
        ];
        cands[3].back_off_until(u64::MAX);
        for _ in 0..200 {
            let c = choose_at(&cands, Mode::NonStreaming, None, &p, 0, &mut rng).unwrap();
            assert_eq!(c.drawn.slowest_us, Some(300.0), "{c:?}");
        }
        // A pin or a lone candidate draws nothing.
        let pinned = choose_at(&cands, Mode::NonStreaming, Some(1), &p, 0, &mut rng).unwrap();
        assert_eq!(pinned.drawn, Drawn::default());
        let lone = choose_at(&cands[..1], Mode::NonStreaming, None, &p, 0, &mut rng).unwrap();
        assert_eq!(lone.drawn, Drawn::default());
    }

    #[test]
    fn pin_honoured_when_healthy_ignored_when_failing() {
        let p = RoutingParams::default();
        let mut rng = SplitMix64::new(1);
        // Candidate 1 is much slower but pinned and healthy.
        let cands = vec![stats(Some(100.0), 0), stats(Some(10_000.0), 0)];
        let c = choose(&cands, Mode::NonStreaming, Some(1), &p, &mut rng);
        assert_eq!(
            c,
            Some(Choice {
                index: 1,
                pinned_honoured: true,
                drawn: Drawn::default(),
            })
        );
        // 2 failures at alpha 0.3: success 0.49 -> error 0.51 > 0.5: pin ignored.
        let cands = vec![stats(Some(100.0), 0), stats(Some(100.0), 2)];
        let mut honoured = 0;
        for _ in 0..1000 {
            let c = choose(&cands, Mode::NonStreaming, Some(1), &p, &mut rng);
            assert!(c.is_some_and(|c| !c.pinned_honoured));
            if c.is_some_and(|c| c.index == 1) {
                honoured += 1;
            }
        }
        // Effective latency ~204 µs vs 100: share ~0.105 -> nowhere near always.
        assert!(honoured < 200, "{honoured}");
        // One failure: error 0.3 <= 0.5 -> honoured.
        let cands = vec![stats(Some(100.0), 0), stats(Some(100.0), 1)];
        let c = choose(&cands, Mode::NonStreaming, Some(1), &p, &mut rng);
        assert_eq!(c.map(|c| (c.index, c.pinned_honoured)), Some((1, true)));
        // Out-of-range pin falls back to weighted routing.
        let c = choose(&cands, Mode::NonStreaming, Some(7), &p, &mut rng);
        assert!(c.is_some_and(|c| !c.pinned_honoured && c.index < 2));
    }

    #[test]
    fn choose_follows_shares_and_handles_sizes() {
        let p = RoutingParams::default();
        let mut rng = SplitMix64::new(5);
        let empty: Vec<Arc<CandidateStats>> = Vec::new();
        assert_eq!(choose(&empty, Mode::Streaming, None, &p, &mut rng), None);
        let one = [CandidateStats::new()];
        assert_eq!(
            choose(&one, Mode::Streaming, None, &p, &mut rng).map(|c| c.index),
            Some(0)
        );
        // 20 candidates (heap path): candidate 3 is fastest and should dominate.
        let many: Vec<Arc<CandidateStats>> = (0..20)
            .map(|i| stats(Some(if i == 3 { 100.0 } else { 1000.0 }), 0))
            .collect();
        let sh = shares_for(&many, Mode::NonStreaming, &p);
        let mut hits = 0;
        let n = 20_000;
        for _ in 0..n {
            if choose(&many, Mode::NonStreaming, None, &p, &mut rng).is_some_and(|c| c.index == 3) {
                hits += 1;
            }
        }
        let got = hits as f64 / n as f64;
        assert!((got - sh[3]).abs() < 0.02, "{got} vs {}", sh[3]);
        // Borrowed slice form works too (stack path).
        let a = CandidateStats::new();
        let b = CandidateStats::new();
        let refs = [&a, &b];
        let c = choose(&refs, Mode::NonStreaming, None, &p, &mut rng);
        assert!(c.is_some_and(|c| c.index < 2));
    }

    /// Well-spread conversation keys.
    fn conversation_keys(n: u64) -> impl Iterator<Item = u64> {
        (0..n).map(|k| SplitMix64::new(k).next_u64())
    }

    const IDS: [u64; 3] = [0xA1, 0xB2, 0xC3];

    fn keyed(key: u64) -> Option<Keyed<'static>> {
        Some(Keyed {
            key,
            identities: &IDS,
            smoothed: &[],
            exploit: 1.0,
        })
    }

    fn keyed_smoothed(key: u64, smoothed: &[SmoothedShare]) -> Option<Keyed<'_>> {
        Some(Keyed {
            key,
            identities: &IDS,
            smoothed,
            exploit: 1.0,
        })
    }

    #[test]
    fn a_sharpened_keyed_pick_follows_the_shares_of_the_sharper_exponent() {
        let p = RoutingParams::default();
        let cands = vec![
            stats(Some(100.0), 0),
            stats(Some(110.0), 0),
            stats(Some(150.0), 0),
        ];
        let sharper = RoutingParams {
            exploit_k: p.exploit_k * 4.0,
            ..p
        };
        let plain = shares_for_at(&cands, Mode::NonStreaming, &p, 0);
        let sharp = shares_for_at(&cands, Mode::NonStreaming, &sharper, 0);
        assert!(sharp[0] > plain[0] + 0.2, "{plain:?} {sharp:?}");
        // 1.5 × slower than the best: two thirds of its part.
        assert!(
            (sharp[2] - probe_floor_each(p.probe_floor, 3) * 100.0 / 150.0).abs() < 1e-12,
            "the floor still holds: {sharp:?}"
        );
        let mut rng = SplitMix64::new(3);
        let mut on_first = 0;
        for key in conversation_keys(2_000) {
            let keyed = Some(Keyed {
                exploit: 4.0,
                ..keyed(key).unwrap()
            });
            let c = choose_keyed_at(&cands, Mode::NonStreaming, None, keyed, &p, 0, &mut rng);
            let want = super::super::rendezvous::pick_by(key, IDS.into_iter().zip(sharp.clone()));
            assert_eq!(c.map(|c| c.index), want, "key {key}");
            on_first += usize::from(want == Some(0));
        }
        let split = on_first as f64 / 2_000.0;
        assert!((split - sharp[0]).abs() < 0.05, "{split} vs {sharp:?}");
    }

    #[test]
    fn a_keyed_pick_follows_the_shares_smoothed_across_picks() {
        let p = RoutingParams::default();
        let mut rng = SplitMix64::new(5);
        let cands = vec![
            stats(Some(100.0), 0),
            stats(Some(100.0), 0),
            stats(Some(120.0), 0),
        ];
        let keys: Vec<u64> = conversation_keys(3000).collect();
        // One alias's cells per key, so that each key's pick sees exactly the smoothing below.
        let cells: Vec<[SmoothedShare; 3]> = keys.iter().map(|_| Default::default()).collect();
        let pick = |key, cells: &[SmoothedShare], rng: &mut SplitMix64| {
            let c = choose_keyed_at(
                &cands,
                Mode::NonStreaming,
                None,
                keyed_smoothed(key, cells),
                &p,
                0,
                rng,
            );
            c.map_or(9, |c| c.index)
        };
        let rendezvous = |key, shares: &[f64]| {
            super::super::rendezvous::pick_by(key, IDS.into_iter().zip(shares.iter().copied()))
        };
        // The first pick takes the shares as they are.
        let before_shares = shares_for_at(&cands, Mode::NonStreaming, &p, 0);
        for (k, c) in keys.iter().zip(&cells) {
            assert_eq!(Some(pick(*k, c, &mut rng)), rendezvous(*k, &before_shares));
        }
        // Candidate 0 fails twice: the next pick moves each smoothed share a third of the way.
        for _ in 0..2 {
            cands[0].record_outcome(Outcome::Failure, 0, &p);
        }
        let after_shares = shares_for_at(&cands, Mode::NonStreaming, &p, 0);
        let partway: Vec<f64> = before_shares
            .iter()
            .zip(&after_shares)
            .map(|(b, a)| b + KeyedParams::default().smoothing * (a - b))
            .collect();
        let mut moved_smoothed = 0;
        let mut moved_at_once = 0;
        for (k, c) in keys.iter().zip(&cells) {
            let got = pick(*k, c, &mut rng);
            assert_eq!(Some(got), rendezvous(*k, &partway), "key {k}");
            let was = rendezvous(*k, &before_shares);
            moved_smoothed += usize::from(Some(got) != was);
            moved_at_once += usize::from(rendezvous(*k, &after_shares) != was);
        }
        assert!(
            moved_smoothed > 0 && moved_smoothed < moved_at_once,
            "{moved_smoothed} vs {moved_at_once}"
        );
        // A few picks later the conversations have left the failing candidate.
        let mut last = Vec::new();
        for _ in 0..12 {
            last = keys
                .iter()
                .zip(&cells)
                .map(|(k, c)| pick(*k, c, &mut rng))
                .collect();
        }
        let still = last.iter().filter(|&&i| i == 0).count();
        let at_once = keys
            .iter()
            .filter(|&&k| rendezvous(k, &after_shares) == Some(0))
            .count();
        assert!(
            still <= at_once + 30,
            "{still} stayed, {at_once} with the shares"
        );
    }

    #[test]
    fn a_key_always_lands_on_its_rendezvous_pick_over_the_shares() {
        let p = RoutingParams::default();
        let cands = vec![stats(Some(100.0), 0), stats(Some(110.0), 0), stats(None, 0)];
        let shares = shares_for_at(&cands, Mode::NonStreaming, &p, 0);
        let mut rng = SplitMix64::new(9);
        let mut counts = [0usize; 3];
        let n = 20_000;
        for key in conversation_keys(n) {
            let want = super::super::rendezvous::pick_by(key, IDS.into_iter().zip(shares.clone()));
            for _ in 0..3 {
                let c = choose_keyed_at(
                    &cands,
                    Mode::NonStreaming,
                    None,
                    keyed(key),
                    &p,
                    0,
                    &mut rng,
                );
                assert_eq!(c.map(|c| c.index), want, "key {key}");
            }
            counts[want.unwrap_or(9)] += 1;
        }
        // Across conversations the split is the shares, the cold candidate's probe included.
        for (i, (&c, s)) in counts.iter().zip(&shares).enumerate() {
            let got = c as f64 / n as f64;
            assert!((got - s).abs() < 0.015, "candidate {i}: {got} vs {s}");
        }
        assert!(counts[2] > 0, "the cold candidate gets conversations");
    }

    #[test]
    fn conversations_leave_a_failing_candidate_and_a_backed_off_one() {
        let p = RoutingParams::default();
        let mut rng = SplitMix64::new(2);
        let cands = vec![
            stats(Some(100.0), 0),
            stats(Some(100.0), 0),
            stats(Some(100.0), 0),
        ];
        let on = |cands: &[Arc<CandidateStats>], key, now, rng: &mut SplitMix64| {
            choose_keyed_at(cands, Mode::NonStreaming, None, keyed(key), &p, now, rng)
                .map_or(9, |c| c.index)
        };
        let keys: Vec<u64> = conversation_keys(3000).collect();
        let before: Vec<usize> = keys.iter().map(|&k| on(&cands, k, 0, &mut rng)).collect();
        let on_first = before.iter().filter(|&&i| i == 0).count();
        assert!(on_first > 800, "{on_first}");
        // Candidate 0 starts failing: its share falls to the floor and its conversations move;
        // the others' conversations stay where they were.
        for _ in 0..4 {
            cands[0].record_outcome(Outcome::Failure, 0, &p);
        }
        let after: Vec<usize> = keys.iter().map(|&k| on(&cands, k, 0, &mut rng)).collect();
        let still = after.iter().filter(|&&i| i == 0).count();
        assert!(
            still < 3000 / 50,
            "{still} conversations stayed on the failing candidate"
        );
        for (b, a) in before.iter().zip(&after) {
            assert!(*b == 0 || a == b, "a conversation left a healthy candidate");
        }
        // A backed-off candidate gets no conversation at all.
        cands[1].back_off_until(1_000);
        assert!(keys.iter().all(|&k| on(&cands, k, 500, &mut rng) != 1));
    }

    #[test]
    fn a_pin_wins_over_the_key_and_a_mismatched_key_is_ignored() {
        let p = RoutingParams::default();
        let mut rng = SplitMix64::new(4);
        let cands = vec![
            stats(Some(100.0), 0),
            stats(Some(100.0), 0),
            stats(Some(100.0), 0),
        ];
        for key in conversation_keys(200) {
            let c = choose_keyed_at(
                &cands,
                Mode::NonStreaming,
                Some(2),
                keyed(key),
                &p,
                0,
                &mut rng,
            );
            assert_eq!(c.map(|c| (c.index, c.pinned_honoured)), Some((2, true)));
        }
        // Identities that do not match the candidates: the random pick (it varies per call).
        let short = Some(Keyed {
            key: 7,
            identities: &IDS[..2],
            smoothed: &[],
            exploit: 1.0,
        });
        let picks: std::collections::HashSet<usize> = (0..200)
            .filter_map(|_| {
                choose_keyed_at(&cands, Mode::NonStreaming, None, short, &p, 0, &mut rng)
            })
            .map(|c| c.index)
            .collect();
        assert_eq!(picks.len(), 3);
    }

    #[test]
    fn seeded_choices_are_reproducible() {
        let p = RoutingParams::default();
        let cands = vec![stats(Some(100.0), 0), stats(Some(130.0), 0), stats(None, 0)];
        let seq = |seed| {
            let mut rng = SplitMix64::new(seed);
            (0..200)
                .map(|_| {
                    choose(&cands, Mode::NonStreaming, None, &p, &mut rng).map_or(99, |c| c.index)
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(seq(11), seq(11));
        assert!(seq(11).contains(&2), "cold candidate gets probed");
    }

    #[test]
    fn waiting_age_raises_effective_latency_only_when_above_the_ewma() {
        let waiting = |lat: f64, age: f64| Snapshot {
            wait_age_us: Some(age),
            ..warm(lat, 1.0)
        };
        // An open request 350 µs old, less half the 100 µs EWMA = 300 µs now: weight (100/300)^3.
        let s = run(&[warm(100.0, 1.0), waiting(100.0, 350.0)], &no_floor());
        assert_close(s[1] / s[0], 1.0 / 27.0);
        // 140 µs old, less the slack 50 µs: below the EWMA, no effect (a request a little
        // longer than the average is not a stall).
        let s = run(&[warm(100.0, 1.0), waiting(100.0, 140.0)], &no_floor());
        assert_close(s[1] / s[0], 1.0);
        // Cold candidates are not scored by age (a fresh request would look instant).
        let cold_waiting = Snapshot {
            wait_age_us: Some(1.0),
            ..Snapshot::COLD
        };
        let s = run(&[warm(100.0, 1.0), cold_waiting], &no_floor());
        assert_close(s[1] / s[0], ScoreParams::default().cold_weight);
    }

    #[test]
    fn a_lull_lightens_its_candidate_in_unkeyed_picks_only() {
        let LullParams {
            discount,
            settle_us,
            window_us,
            ..
        } = LullParams::default();
        let p = RoutingParams::default();
        let mut rng = SplitMix64::new(21);
        let n = 20_000;
        let share_of_first = |cands: &[Arc<CandidateStats>], at: u64, rng: &mut SplitMix64| {
            let first = (0..n)
                .filter(|_| {
                    choose_at(cands, Mode::NonStreaming, None, &p, at, rng)
                        .is_some_and(|c| c.index == 0)
                })
                .count();
            first as f64 / n as f64
        };
        // Two equal candidates; the first one's lull runs from 0 to window_us (offset 0 here).
        let cands = vec![stats(Some(100.0), 0), stats(Some(100.0), 0)];
        let lightened = (-discount).exp();
        let expected = lightened / (1.0 + lightened);
        let during = share_of_first(&cands, settle_us, &mut rng);
        assert!((during - expected).abs() < 0.015, "{during} vs {expected}");
        let after = share_of_first(&cands, window_us, &mut rng);
        assert!((after - 0.5).abs() < 0.015, "{after}");
        // The latency-only tracker keeps no discount, and no lull either.
        let seed: Vec<_> = (0..2)
            .map(|_| {
                let s = Arc::new(CandidateStats::without_congestion());
                s.record_latency(Mode::NonStreaming, 100.0, None, &LatencyParams::DEFAULT);
                s
            })
            .collect();
        let during = share_of_first(&seed, settle_us, &mut rng);
        assert!((during - 0.5).abs() < 0.015, "{during}");
        // A conversation keeps its candidate through the lull.
        let identities = [1u64, 2];
        let keys_on_first = |at: u64| {
            conversation_keys(2_000)
                .filter(|&key| {
                    let keyed = Keyed {
                        key,
                        identities: &identities,
                        smoothed: &[],
                        exploit: 1.0,
                    };
                    let mut rng = SplitMix64::new(1);
                    choose_keyed_at(
                        &cands,
                        Mode::NonStreaming,
                        None,
                        Some(keyed),
                        &p,
                        at,
                        &mut rng,
                    )
                    .is_some_and(|c| c.index == 0)
                })
                .count()
        };
        assert_eq!(keys_on_first(settle_us), keys_on_first(window_us));
    }

    #[test]
    fn congestion_discount_scales_the_weight_by_e_to_the_minus_d() {
        let queued = Snapshot {
            discount: 1.5,
            pacing: 1.0,
            inflight: 0,
            load_slope_us: 0.0,
            load_mean_inflight: 0.0,
            ..warm(100.0, 1.0)
        };
        // Equal latency, discount 1.5: weight ratio e^-1.5 whatever k is.
        for k in [1.0, 3.0, 6.0] {
            let p = RoutingParams {
                exploit_k: k,
                ..no_floor()
            };
            let s = run(&[warm(100.0, 1.0), queued], &p);
            assert_close(s[1] / s[0], (-1.5f64).exp());
        }
        // With k = 0 (uniform by choice) the discount does not apply.
        let p = RoutingParams {
            exploit_k: 0.0,
            ..no_floor()
        };
        assert_eq!(run(&[warm(100.0, 1.0), queued], &p), vec![0.5, 0.5]);
    }

    #[test]
    fn backed_off_candidates_get_nothing_not_even_the_floor() {
        let off = |lat: f64| Snapshot {
            backed_off: true,
            ..warm(lat, 1.0)
        };
        let p = RoutingParams::default();
        let s = run(&[off(10.0), warm(100.0, 1.0), warm(1e6, 1.0)], &p);
        assert_eq!(s[0], 0.0);
        assert_close(s[2], p.probe_floor);
        assert_close(s[1], 1.0 - p.probe_floor);
        // Everyone backed off: back-off is ignored rather than routing nowhere.
        let s = run(&[off(100.0), off(100.0)], &p);
        assert_eq!(s, vec![0.5, 0.5]);
        // A large floor splits evenly among the others only.
        let big = RoutingParams {
            probe_floor: 0.5,
            ..p
        };
        let s = run(&[off(1.0), warm(100.0, 1.0), warm(1e6, 1.0)], &big);
        assert_eq!(s, vec![0.0, 0.5, 0.5]);
    }

    #[test]
    fn choose_at_honours_back_off_and_waiting_age() {
        let p = RoutingParams::default();
        let mut rng = SplitMix64::new(3);
        let cands = vec![stats(Some(100.0), 0), stats(Some(150.0), 0)];
        for _ in 0..20 {
            cands[0].record_outcome(Outcome::Success, 0, &p);
        }
        cands[0].back_off_until(1_000);
        for _ in 0..200 {
            let c = choose_at(&cands, Mode::NonStreaming, None, &p, 999, &mut rng);
            assert_eq!(c.map(|c| c.index), Some(1));
        }
        // A pin on a backed-off candidate is not honoured.
        let c = choose_at(&cands, Mode::NonStreaming, Some(0), &p, 999, &mut rng);
        assert_eq!(c.map(|c| (c.index, c.pinned_honoured)), Some((1, false)));
        // Once the deadline passes it is on probation: the probe floor until an answer gets
        // through, and then the faster candidate is back in front.
        let after = shares_for_at(&cands, Mode::NonStreaming, &p, 1_000);
        assert!((after[0] - p.probe_floor).abs() < 1e-12, "{after:?}");
        cands[0].record_outcome(Outcome::Failure, 1_000, &p);
        let failed = shares_for_at(&cands, Mode::NonStreaming, &p, 1_000);
        assert!((failed[0] - p.probe_floor).abs() < 1e-12, "{failed:?}");
        cands[0].record_outcome(Outcome::Success, 1_000, &p);
        let back = shares_for_at(&cands, Mode::NonStreaming, &p, 1_000);
        assert!(back[0] > back[1], "{back:?}");
        // A request to it that has waited 1 000 µs (estimate 2 000) sends traffic away: it
        // keeps the probe floor.
        let _wait = cands[0].begin_wait(Mode::NonStreaming, 1_000, Drawn::default());
        let waiting = shares_for_at(&cands, Mode::NonStreaming, &p, 2_000);
        assert!(waiting[0] <= p.probe_floor + 1e-12, "{waiting:?}");
        let hits = (0..1000)
            .filter(|_| {
                choose_at(&cands, Mode::NonStreaming, None, &p, 2_000, &mut rng)
                    .is_some_and(|c| c.index == 0)
            })
            .count();
        assert!(hits < 40, "{hits} of 1000 with a floor of 20");
        // The wall-clock entry points agree: nothing is in the future of the real clock here.
        assert!(choose(&cands, Mode::NonStreaming, None, &p, &mut rng).is_some());
        assert_eq!(shares_for(&cands, Mode::Streaming, &p).len(), 2);
    }

    #[test]
    fn with_every_candidate_backed_off_the_pick_follows_the_shares_as_if_none_were() {
        let p = RoutingParams::default();
        let mut rng = SplitMix64::new(8);
        let cands = vec![stats(Some(100.0), 0), stats(Some(110.0), 0)];
        // After the first lull, so that no candidate is lightened (see `lull`).
        let t = LullParams::default().window_us;
        cands[0].back_off_until(t + 1_000);
        cands[1].back_off_until(t + 1_000);
        let during = shares_for_at(&cands, Mode::NonStreaming, &p, t + 500);
        let n = 20_000;
        let first = (0..n)
            .filter(|_| {
                choose_at(&cands, Mode::NonStreaming, None, &p, t + 500, &mut rng)
                    .is_some_and(|c| c.index == 0)
            })
            .count();
        let got = first as f64 / n as f64;
        assert!((got - during[0]).abs() < 0.015, "{got} vs {during:?}");
        // The same shares as once the back-off is over.
        assert_eq!(
            during,
            shares_for_at(&cands, Mode::NonStreaming, &p, t + 1_000)
        );
        assert!(during[1] > 0.1, "{during:?}");
    }

    #[test]
    fn params_check() {
        assert!(RoutingParams::default().check().is_ok());
        let bad = |f: fn(&mut RoutingParams)| {
            let mut p = RoutingParams::default();
            f(&mut p);
            p.check().is_err()
        };
        assert!(bad(|p| p.ewma_alpha = 0.0));
        assert!(bad(|p| p.ewma_alpha = 1.5));
        assert!(bad(|p| p.ewma_alpha = f64::NAN));
        assert!(bad(|p| p.exploit_k = -1.0));
        assert!(bad(|p| p.exploit_k = f64::INFINITY));
        assert!(bad(|p| p.probe_floor = 1.0));
        assert!(bad(|p| p.error_threshold = 1.1));
        assert!(bad(|p| p.exploit_k = 21.0));
        assert!(bad(|p| p.probe_floor = 0.6));
        assert!(!bad(|p| p.ewma_alpha = 1.0));
        let too_sharp = RoutingParams {
            exploit_k: 0.0,
            ..RoutingParams::default()
        };
        assert_eq!(
            too_sharp.check().map_err(|e| e.to_string()),
            Err("exploit_k must be > 0 and <= 20".to_string())
        );
    }

    #[test]
    fn weights_are_the_raw_scores_behind_the_shares() {
        let params = RoutingParams {
            exploit_k: 3.0,
            ..RoutingParams::default()
        };
        let mut w = [0.0; 3];
        weights(
            &[warm(100.0, 1.0), warm(200.0, 1.0), Snapshot::COLD],
            &params,
            &mut w,
        );
        assert_eq!(w[0], 1.0);
        assert!((w[1] - 0.125).abs() < 1e-12, "{w:?}");
        assert_eq!(w[2], ScoreParams::default().cold_weight);
        let mut w = [0.0; 2];
        weights(&[Snapshot::COLD, Snapshot::COLD], &params, &mut w);
        assert_eq!(w, [1.0, 1.0]);
    }
}
