//! Routing among the candidates that may take traffic.
//!
//! A candidate is unavailable while its provider fails its active health check. An unavailable
//! candidate gets no share at all (not even the probe floor) and a pin naming it is not
//! honoured: the alias routes as if it were not listed. When no candidate of an alias is
//! available, the restriction is dropped and the alias routes as if all were. The rule is a
//! filter in front of [`choose_keyed`], [`shares_for`] and [`weights_for`]: they run unchanged on
//! the available candidates.

use super::attempt::Mode;
use super::params::RoutingParams;
use super::rng::RngSource;
use super::selector::{choose_keyed, shares_for, weights_for, Choice, Keyed};
use super::tracker::CandidateStats;

/// The positions of the available candidates, or `None` when the restriction does not apply
/// (all of them are available, or none is).
fn available_positions(n: usize, available: impl Fn(usize) -> bool) -> Option<Vec<usize>> {
    if (0..n).all(&available) {
        return None;
    }
    let up: Vec<usize> = (0..n).filter(|&i| available(i)).collect();
    (!up.is_empty()).then_some(up)
}

/// [`super::choose`] restricted to the candidates for which `available(index)` holds. Allocates only
/// while some candidate is unavailable.
pub fn choose_available<C: AsRef<CandidateStats>>(
    cands: &[C],
    available: impl Fn(usize) -> bool,
    mode: Mode,
    pinned: Option<usize>,
    params: &RoutingParams,
    rng: &mut impl RngSource,
) -> Option<Choice> {
    choose_available_keyed(cands, available, mode, pinned, None, params, rng)
}

/// [`choose_keyed`] restricted to the available candidates, as [`choose_available`]: an
/// unavailable candidate's conversations move as if it were not listed.
pub fn choose_available_keyed<C: AsRef<CandidateStats>>(
    cands: &[C],
    available: impl Fn(usize) -> bool,
    mode: Mode,
    pinned: Option<usize>,
    keyed: Option<Keyed<'_>>,
    params: &RoutingParams,
    rng: &mut impl RngSource,
) -> Option<Choice> {
    let Some(up) = available_positions(cands.len(), available) else {
        return choose_keyed(cands, mode, pinned, keyed, params, rng);
    };
    let subset: Vec<&CandidateStats> = up.iter().map(|&i| cands[i].as_ref()).collect();
    let pinned = pinned.and_then(|p| up.iter().position(|&i| i == p));
    let identities: Vec<u64> = keyed.map_or_else(Vec::new, |k| {
        up.iter()
            .filter_map(|&i| k.identities.get(i).copied())
            .collect()
    });
    // While a candidate is out, a key is picked over the current shares of the others: the
    // alias's smoothed shares are kept per candidate of the whole list.
    let keyed = keyed.map(|k| Keyed {
        key: k.key,
        identities: &identities,
        smoothed: &[],
        exploit: k.exploit,
    });
    let choice = choose_keyed(&subset, mode, pinned, keyed, params, rng)?;
    Some(Choice {
        index: up[choice.index],
        ..choice
    })
}

/// [`shares_for`] restricted to the available candidates; unavailable ones show 0.
pub fn shares_available<C: AsRef<CandidateStats>>(
    cands: &[C],
    available: impl Fn(usize) -> bool,
    mode: Mode,
    params: &RoutingParams,
) -> Vec<f64> {
    restricted(cands, available, |subset| shares_for(subset, mode, params))
}

/// [`weights_for`] restricted to the available candidates; unavailable ones show 0.
pub fn weights_available<C: AsRef<CandidateStats>>(
    cands: &[C],
    available: impl Fn(usize) -> bool,
    mode: Mode,
    params: &RoutingParams,
) -> Vec<f64> {
    restricted(cands, available, |subset| weights_for(subset, mode, params))
}

/// Runs `per_candidate` on the available candidates and spreads its values back over all of
/// them (0 for the unavailable).
fn restricted<C: AsRef<CandidateStats>>(
    cands: &[C],
    available: impl Fn(usize) -> bool,
    per_candidate: impl Fn(&[&CandidateStats]) -> Vec<f64>,
) -> Vec<f64> {
    let all: Vec<&CandidateStats> = cands.iter().map(AsRef::as_ref).collect();
    let Some(up) = available_positions(cands.len(), available) else {
        return per_candidate(&all);
    };
    let subset: Vec<&CandidateStats> = up.iter().map(|&i| all[i]).collect();
    let mut out = vec![0.0; cands.len()];
    for (&i, value) in up.iter().zip(per_candidate(&subset)) {
        out[i] = value;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::rng::SplitMix64;
    use super::super::selector::choose;
    use super::*;
    use crate::routing::latency_mean::LatencyParams;
    use std::sync::Arc;

    fn warm(latency_us: f64) -> Arc<CandidateStats> {
        let s = Arc::new(CandidateStats::new());
        s.record_latency(
            Mode::NonStreaming,
            latency_us,
            None,
            &LatencyParams::DEFAULT,
        );
        s
    }

    /// Three warm candidates; the fastest (index 0) would take nearly everything.
    fn three() -> Vec<Arc<CandidateStats>> {
        vec![warm(100.0), warm(1_000.0), warm(10_000.0)]
    }

    fn picks(
        cands: &[Arc<CandidateStats>],
        up: &[bool],
        pinned: Option<usize>,
        n: usize,
    ) -> Vec<Choice> {
        let mut rng = SplitMix64::new(7);
        let p = RoutingParams::default();
        (0..n)
            .map(|_| {
                choose_available(cands, |i| up[i], Mode::NonStreaming, pinned, &p, &mut rng)
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn an_unavailable_candidate_gets_nothing_not_even_the_probe_floor() {
        let cands = three();
        let p = RoutingParams {
            probe_floor: 0.2,
            ..RoutingParams::default()
        };
        let up = [false, true, true];
        let shares = shares_available(&cands, |i| up[i], Mode::NonStreaming, &p);
        assert_eq!(shares[0], 0.0);
        assert!((shares[1] + shares[2] - 1.0).abs() < 1e-12, "{shares:?}");
        // Ten times slower than the best of the others: a tenth of the floor.
        assert!(
            shares[2] >= 0.02 - 1e-12,
            "the floor still holds among the others: {shares:?}"
        );
        let weights = weights_available(&cands, |i| up[i], Mode::NonStreaming, &p);
        assert_eq!(weights[0], 0.0);
        assert_eq!(weights[1], 1.0, "the best available candidate has weight 1");
        let chosen = picks(&cands, &up, None, 5_000);
        assert!(chosen.iter().all(|c| c.index != 0));
        assert!(
            chosen.iter().any(|c| c.index == 2),
            "the floor reaches index 2"
        );
    }

    #[test]
    fn a_pin_to_an_unavailable_candidate_breaks_and_others_still_pin() {
        let cands = three();
        let chosen = picks(&cands, &[true, false, true], Some(1), 500);
        assert!(chosen.iter().all(|c| c.index != 1 && !c.pinned_honoured));
        let chosen = picks(&cands, &[true, false, true], Some(2), 50);
        assert!(
            chosen.iter().all(|c| c.index == 2 && c.pinned_honoured),
            "{chosen:?}"
        );
    }

    #[test]
    fn with_every_candidate_unavailable_the_alias_routes_as_if_none_were() {
        let cands = three();
        let none = [false, false, false];
        let p = RoutingParams::default();
        let shares = shares_available(&cands, |i| none[i], Mode::NonStreaming, &p);
        assert_eq!(shares, shares_for(&cands, Mode::NonStreaming, &p));
        assert!(shares.iter().all(|s| *s > 0.0));
        let chosen = picks(&cands, &none, Some(2), 20);
        assert!(chosen.iter().all(|c| c.index == 2 && c.pinned_honoured));
    }

    #[test]
    fn with_every_candidate_available_nothing_changes() {
        let cands = three();
        let all = [true, true, true];
        let p = RoutingParams::default();
        let mut a = SplitMix64::new(3);
        let mut b = SplitMix64::new(3);
        for _ in 0..200 {
            let plain = choose(&cands, Mode::NonStreaming, None, &p, &mut a);
            let filtered =
                choose_available(&cands, |i| all[i], Mode::NonStreaming, None, &p, &mut b);
            assert_eq!(plain, filtered);
        }
        assert_eq!(
            shares_available(&cands, |i| all[i], Mode::Streaming, &p),
            shares_for(&cands, Mode::Streaming, &p)
        );
    }

    #[test]
    fn an_unavailable_candidates_conversations_move_and_no_other_does() {
        let cands = vec![warm(100.0), warm(100.0), warm(100.0)];
        let ids = [11, 22, 33];
        let p = RoutingParams::default();
        let mut rng = SplitMix64::new(1);
        let mut pick = |up: [bool; 3], key: u64| {
            let keyed = Some(Keyed {
                key,
                identities: &ids,
                smoothed: &[],
                exploit: 1.0,
            });
            choose_available_keyed(
                &cands,
                |i| up[i],
                Mode::NonStreaming,
                None,
                keyed,
                &p,
                &mut rng,
            )
            .map(|c| c.index)
        };
        let mut moved = 0;
        for key in (0..3000u64).map(|k| SplitMix64::new(k).next_u64()) {
            let before = pick([true; 3], key);
            let after = pick([true, false, true], key);
            assert_ne!(after, Some(1));
            if before != Some(1) {
                assert_eq!(before, after, "key {key} left an available candidate");
            } else {
                moved += 1;
            }
        }
        assert!((800..1200).contains(&moved), "{moved}");
    }

    #[test]
    fn one_available_candidate_takes_everything() {
        let cands = three();
        let only_slowest = [false, false, true];
        let chosen = picks(&cands, &only_slowest, Some(0), 200);
        assert!(chosen.iter().all(|c| c.index == 2 && !c.pinned_honoured));
        let shares = shares_available(
            &cands,
            |i| only_slowest[i],
            Mode::NonStreaming,
            &RoutingParams::default(),
        );
        assert_eq!(shares, vec![0.0, 0.0, 1.0]);
    }
}
