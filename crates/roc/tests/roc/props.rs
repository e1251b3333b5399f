//! Invariants of both rules, checked with proptest.

use proptest::prelude::*;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rstar_roc::{Error, GroupRule};

/// A group of `2n` traces: rewards 0/1 and penalties in [0, 2] on a grid of
/// quarters, so that ties happen.
fn group(n: usize) -> impl Strategy<Value = (Vec<f64>, Vec<f64>)> {
    (
        prop::collection::vec(prop::bool::ANY, 2 * n),
        prop::collection::vec(0u8..=8, 2 * n),
    )
        .prop_map(|(r, p)| {
            (
                r.into_iter().map(|b| f64::from(u8::from(b))).collect(),
                p.into_iter().map(|q| f64::from(q) / 4.0).collect(),
            )
        })
}

fn sized_group() -> impl Strategy<Value = (usize, Vec<f64>, Vec<f64>)> {
    (1usize..=16).prop_flat_map(|n| group(n).prop_map(move |(r, p)| (n, r, p)))
}

fn distinct_in_range(kept: &[usize], len: usize) -> bool {
    kept.windows(2).all(|w| w[0] < w[1]) && kept.iter().all(|&i| i < len)
}

proptest! {
    #[test]
    fn paper_keeps_exactly_n_of_2n_with_half_the_failures((n, rewards, p) in sized_group(), seed in any::<u64>()) {
        // No floors (the paper has none): exactly ⌊n_neg / 2⌋ failures, the rest successes.
        let rule = GroupRule { keep: n, min_failures: 0, min_successes: 0 };
        let kept = rule.paper(&rewards, &p, &mut ChaCha8Rng::seed_from_u64(seed));
        prop_assert_eq!(kept.len(), n);
        prop_assert!(distinct_in_range(&kept, 2 * n));
        let failures = rewards.iter().filter(|&&r| r <= 0.0).count();
        let kept_failures = kept.iter().filter(|&&i| rewards[i] <= 0.0).count();
        prop_assert_eq!(kept_failures, failures / 2);
    }

    #[test]
    fn paper_keeps_exactly_n_with_floors((n, rewards, p) in sized_group(), seed in any::<u64>(), floor in 0usize..=2) {
        let floor = floor.min(n / 2);
        let rule = GroupRule { keep: n, min_failures: floor, min_successes: floor };
        let kept = rule.paper(&rewards, &p, &mut ChaCha8Rng::seed_from_u64(seed));
        prop_assert_eq!(kept.len(), n);
        prop_assert!(distinct_in_range(&kept, 2 * n));
        // ⌊n_neg / 2⌋ raised to the floor (capped at the failures there are), lowered so the
        // successes keep theirs.
        let failures = rewards.iter().filter(|&&r| r <= 0.0).count();
        let successes = 2 * n - failures;
        let mut want = (failures / 2).max(floor.min(failures));
        want = want.min(n - floor.min(successes));
        let kept_failures = kept.iter().filter(|&&i| rewards[i] <= 0.0).count();
        prop_assert_eq!(kept_failures, want);
    }

    #[test]
    fn paper_keeps_proportional_counts_of_other_sizes(
        (n, extra, rewards, p) in (1usize..=16, 1usize..=32).prop_flat_map(|(n, extra)| {
            group(n + extra).prop_map(move |(r, p)| (n, extra, r[..n + extra].to_vec(), p[..n + extra].to_vec()))
        }),
        seed in any::<u64>(),
    ) {
        // A group of m = n + extra traces (n < m, not necessarily 2n): ⌊n_neg · n / m⌋ failures.
        let m = n + extra;
        let rule = GroupRule { keep: n, min_failures: 0, min_successes: 0 };
        let kept = rule.paper(&rewards, &p, &mut ChaCha8Rng::seed_from_u64(seed));
        prop_assert_eq!(kept.len(), n);
        prop_assert!(distinct_in_range(&kept, m));
        let failures = rewards.iter().filter(|&&r| r <= 0.0).count();
        let kept_failures = kept.iter().filter(|&&i| rewards[i] <= 0.0).count();
        prop_assert_eq!(kept_failures, failures * n / m);
    }

    #[test]
    fn reference_keeps_exactly_n_distinct((n, rewards, p) in sized_group()) {
        let rule = GroupRule { keep: n.max(4), min_failures: 2, min_successes: 2 };
        prop_assume!(n >= 4);
        match rule.reference(&rewards, &p) {
            Ok(kept) => {
                prop_assert_eq!(kept.len(), n);
                prop_assert!(distinct_in_range(&kept, 2 * n));
            }
            // With n odd, both counts odd and neither at a floor, the two rounded halves
            // are off by one together (2.5 + 4.5 → 2 + 4, 1.5 + 5.5 → 2 + 6); the reference
            // then fails its own assertion.
            Err(Error::ReferenceCount { picked, keep, .. }) => {
                prop_assert!(n % 2 == 1, "even n never miscounts");
                prop_assert!(picked == n - 1 || picked == n + 1, "picked {}", picked);
                prop_assert_eq!(keep, n);
            }
            Err(other) => prop_assert!(false, "{other}"),
        }
    }

    #[test]
    fn failures_are_never_chosen_by_penalty((n, rewards, p) in sized_group(), seed in any::<u64>(), shift in prop::collection::vec(0u8..=8, 32)) {
        // Changing the failures' penalties changes nothing, in either rule.
        let mut q = p.clone();
        for (i, r) in rewards.iter().enumerate() {
            if *r <= 0.0 {
                q[i] = f64::from(shift[i]) / 4.0;
            }
        }
        let rule = GroupRule { keep: n, min_failures: (n / 2).min(2), min_successes: (n / 2).min(2) };
        let a = rule.paper(&rewards, &p, &mut ChaCha8Rng::seed_from_u64(seed));
        let b = rule.paper(&rewards, &q, &mut ChaCha8Rng::seed_from_u64(seed));
        prop_assert_eq!(a, b);
        let a = rule.reference(&rewards, &p).ok();
        let b = rule.reference(&rewards, &q).ok();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn reference_keeps_the_lowest_penalty_successes((n, rewards, p) in sized_group()) {
        let rule = GroupRule { keep: n, min_failures: (n / 2).min(2), min_successes: (n / 2).min(2) };
        if let Ok(kept) = rule.reference(&rewards, &p) {
            let success = |i: &usize| rewards[*i] > 0.0;
            let worst_kept = kept.iter().filter(|i| success(i)).map(|&i| p[i]).fold(f64::NEG_INFINITY, f64::max);
            let best_dropped = (0..2 * n).filter(|i| success(i) && !kept.contains(i)).map(|i| p[i]).fold(f64::INFINITY, f64::min);
            prop_assert!(worst_kept <= best_dropped);
            // Failures come in rollout order: the kept ones are a prefix of the failures.
            let failures: Vec<usize> = (0..2 * n).filter(|&i| rewards[i] <= 0.0).collect();
            let kept_failures: Vec<usize> = kept.iter().copied().filter(|&i| rewards[i] <= 0.0).collect();
            prop_assert_eq!(&failures[..kept_failures.len()], &kept_failures[..]);
        }
    }

    #[test]
    fn paper_is_deterministic_per_seed((n, rewards, p) in sized_group(), seed in any::<u64>()) {
        let rule = GroupRule { keep: n, min_failures: 0, min_successes: 0 };
        let a = rule.paper(&rewards, &p, &mut ChaCha8Rng::seed_from_u64(seed));
        let b = rule.paper(&rewards, &p, &mut ChaCha8Rng::seed_from_u64(seed));
        prop_assert_eq!(a, b);
    }
}
