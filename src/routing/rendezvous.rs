//! Weighted rendezvous hashing: a sticky, stateless pick of one candidate per key.
//!
//! Every candidate `i` draws `u_i`, uniform in (0, 1), from a hash of (key, identity), and scores
//! `-w_i / ln(u_i)`; the highest score wins. `-ln(u_i) / w_i` is an exponential variable of rate
//! `w_i`, and the smallest of independent exponentials is candidate `i`'s with probability
//! `w_i / Σw`: across many keys the split equals the shares. A key's scores depend on nothing but
//! the key and the candidates, so every sidecar picks the same candidate for it, and a change of
//! one share moves only the keys that change to or from that candidate: as few as any split
//! with the new shares can move.

/// Whether `[routing] prefix_affinity` is on when the config does not say: on, as the
/// simulator's conversations scenarios show it never losing, whether or not the fleet has to
/// spread its traffic (docs/routing.md).
pub const PREFIX_AFFINITY_DEFAULT: bool = true;

/// The candidate `key` lands on, identities being the candidates' indexes in `shares`.
///
/// Shares need not sum to one; a share that is zero, negative or not finite is never chosen.
/// `None` when no share is positive.
pub fn pick(key: u64, shares: &[f64]) -> Option<usize> {
    pick_by(key, shares.iter().enumerate().map(|(i, &w)| (i as u64, w)))
}

/// The position in `candidates` (`(identity, share)` pairs) that `key` lands on; identities
/// that stay with their candidates keep keys in place when others are added or removed.
pub fn pick_by(key: u64, candidates: impl IntoIterator<Item = (u64, f64)>) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (position, (identity, share)) in candidates.into_iter().enumerate() {
        if !(share > 0.0 && share.is_finite()) {
            continue;
        }
        // `-ln(u)` is positive and finite: `u` lies strictly inside (0, 1).
        let score = share / -unit(key, identity).ln();
        if best.is_none_or(|(_, top)| score > top) {
            best = Some((position, score));
        }
    }
    best.map(|(position, _)| position)
}

/// A candidate's identity from its name (`provider/model`): FNV-1a over the bytes, mixed. It
/// depends on the name alone, so every sidecar, whatever its config order, gives a candidate
/// the same identity and sends a key to the same candidate.
pub fn identity(name: &str) -> u64 {
    const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;
    let hash = name.bytes().fold(FNV_OFFSET, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    });
    mix(hash)
}

/// A uniform draw strictly inside (0, 1) determined by (`key`, `identity`).
fn unit(key: u64, identity: u64) -> f64 {
    let bits = mix(mix(key) ^ identity.wrapping_add(1).wrapping_mul(GOLDEN));
    // 52 bits and a half step: from 2^-53 to 1 - 2^-53, both exact in an f64 (53 bits would
    // round the top value up to 1.0, whose logarithm is zero).
    ((bits >> 12) as f64 + 0.5) * (1.0 / (1u64 << 52) as f64)
}

/// Golden-ratio constant that spreads consecutive identities over the 64-bit space.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser: every input bit affects every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `n` well-spread keys (as conversation hashes would be).
    fn keys(n: u64) -> impl Iterator<Item = u64> {
        (0..n).map(|k| mix(k.wrapping_mul(GOLDEN)))
    }

    /// Fraction of `n` keys that land on each candidate.
    fn split(shares: &[f64], n: u64) -> Vec<f64> {
        let mut counts = vec![0u64; shares.len()];
        for key in keys(n) {
            counts[pick(key, shares).expect("a positive share")] += 1;
        }
        counts.iter().map(|&c| c as f64 / n as f64).collect()
    }

    #[test]
    fn nothing_positive_means_no_pick() {
        assert_eq!(pick(7, &[]), None);
        assert_eq!(pick(7, &[0.0, 0.0]), None);
        assert_eq!(pick(7, &[-1.0, f64::NAN, f64::INFINITY, -0.0]), None);
    }

    #[test]
    fn the_only_positive_share_takes_every_key() {
        for key in keys(1000) {
            assert_eq!(pick(key, &[0.0, f64::NAN, 0.3, -2.0]), Some(2));
        }
    }

    #[test]
    fn unit_draws_stay_strictly_inside_zero_and_one() {
        for (key, id) in [(0, 0), (u64::MAX, u64::MAX), (1, u64::MAX), (u64::MAX, 0)] {
            let u = unit(key, id);
            assert!(u > 0.0 && u < 1.0, "{u}");
        }
        let lowest = 0.5 / (1u64 << 52) as f64;
        let highest = ((1u64 << 52) as f64 - 0.5) / (1u64 << 52) as f64;
        assert!(lowest > 0.0 && highest < 1.0);
        for u in [lowest, highest] {
            let e = -u.ln();
            assert!(e > 0.0 && e.is_finite(), "{u} gives {e}");
        }
    }

    #[test]
    fn identities_not_positions_decide() {
        let a = [(10, 0.5), (20, 0.3), (30, 0.2)];
        let b = [(30, 0.2), (10, 0.5), (20, 0.3)];
        for key in keys(2000) {
            let ia = pick_by(key, a).unwrap();
            let ib = pick_by(key, b).unwrap();
            assert_eq!(a[ia].0, b[ib].0);
        }
        // Removing a candidate moves only the keys it had.
        let without = [(10, 0.5), (30, 0.2)];
        for key in keys(2000) {
            let before = a[pick_by(key, a).unwrap()].0;
            let after = without[pick_by(key, without).unwrap()].0;
            assert!(
                before == 20 || before == after,
                "key {key}: {before} -> {after}"
            );
        }
    }

    #[test]
    fn identities_are_fixed_values_of_the_name() {
        // Fixed values: a change would move every conversation of every fleet at upgrade.
        assert_eq!(identity("openai/gpt-4o"), 0xD7F8_A866_5F4A_9451);
        assert_ne!(identity("openai/gpt-4o"), identity("azure/gpt-4o"));
        assert_ne!(identity(""), identity("a"));
        let names: Vec<String> = (0..1000).map(|i| format!("p{i}/m")).collect();
        let mut ids: Vec<u64> = names.iter().map(|n| identity(n)).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), names.len());
    }

    #[test]
    fn equal_shares_split_evenly() {
        for (i, got) in split(&[1.0; 5], 50_000).into_iter().enumerate() {
            assert!((got - 0.2).abs() < 0.01, "candidate {i}: {got}");
        }
    }

    /// Shares with some zeros, each positive one at least 1 %, normalised to sum to one.
    fn shares() -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(prop_oneof![1 => Just(0.0), 4 => 0.01f64..1.0], 1..8)
            .prop_filter("a positive share", |v| v.iter().any(|&w| w > 0.0))
            .prop_map(|v| {
                let sum: f64 = v.iter().sum();
                v.into_iter().map(|w| w / sum).collect()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn the_split_over_many_keys_matches_the_shares(shares in shares()) {
            const N: u64 = 20_000;
            for (i, (&want, got)) in shares.iter().zip(split(&shares, N)).enumerate() {
                if want == 0.0 {
                    prop_assert_eq!(got, 0.0, "zero share {} was chosen", i);
                }
                // Five standard deviations of a binomial proportion, plus rounding.
                let tolerance = 5.0 * (want * (1.0 - want) / N as f64).sqrt() + 1e-3;
                prop_assert!((got - want).abs() <= tolerance, "candidate {}: {} vs {}", i, got, want);
            }
        }

        #[test]
        fn a_small_change_of_one_share_moves_few_keys(
            shares in shares(),
            which in any::<prop::sample::Index>(),
            factor in 0.8f64..1.25,
        ) {
            const N: u64 = 20_000;
            let j = which.index(shares.len());
            let mut moved_shares = shares.clone();
            moved_shares[j] *= factor;
            let old_sum: f64 = shares.iter().sum();
            let new_sum: f64 = moved_shares.iter().sum();
            // The fewest keys any split can move: half the total change of the normalised shares.
            let least: f64 = shares
                .iter()
                .zip(&moved_shares)
                .map(|(a, b)| (a / old_sum - b / new_sum).abs())
                .sum::<f64>()
                / 2.0;
            let mut moved = 0;
            for key in keys(N) {
                let (before, after) = (pick(key, &shares), pick(key, &moved_shares));
                if before != after {
                    moved += 1;
                    // Only the changed candidate gains (it grew) or loses (it shrank) keys.
                    let toward = if factor > 1.0 { after } else { before };
                    prop_assert_eq!(toward, Some(j), "a key moved between unchanged candidates");
                }
            }
            let moved = moved as f64 / N as f64;
            let tolerance = 5.0 * (least / N as f64).sqrt() + 1e-3;
            prop_assert!(moved <= least + tolerance, "moved {} keys, least {}", moved, least);
        }

        #[test]
        fn scaling_every_share_changes_no_pick(shares in shares(), key in any::<u64>(), exp in -20i32..20) {
            let scaled: Vec<f64> = shares.iter().map(|w| w * 2f64.powi(exp)).collect();
            prop_assert_eq!(pick(key, &shares), pick(key, &scaled));
        }
    }
}
