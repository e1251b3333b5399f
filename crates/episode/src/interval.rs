//! 95% intervals for held-out accuracies: Wilson's score interval for one accuracy and
//! Newcombe's hybrid score interval for the difference of two.
//!
//! An accuracy measured on `n` problems is a proportion: greedy decoding scores each problem 0
//! or 1. avg@k scores each problem with the mean of its k samples, a number in [0, 1]; a
//! variable in [0, 1] with mean p has variance at most p(1 − p), so the Wilson interval over
//! the `n` problems covers avg@k too (conservatively: it is exact when each problem's k
//! samples agree). The interval is over the problems drawn, which is what decides whether a
//! second policy on a second set of problems would rank the same way.
//!
//! ```
//! use rstar_episode::interval::Interval;
//!
//! // 95 of 100 correct: 95% [88.8, 97.8].
//! let i = Interval::wilson(0.95, 100);
//! assert_eq!(format!("{i}"), "[88.8, 97.8]");
//! // 500 problems narrow it to [92.7, 96.6].
//! assert_eq!(format!("{}", Interval::wilson(0.95, 500)), "[92.7, 96.6]");
//! // 92% after 95%, both on 500 problems: the drop's interval holds 0, so it may be noise.
//! assert!(!Interval::difference(0.95, 500, 0.92, 500).excludes_zero());
//! // 90% after 95% does not: a real drop.
//! assert!(Interval::difference(0.95, 500, 0.90, 500).excludes_zero());
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

/// The 97.5% quantile of the standard normal distribution.
pub const Z95: f64 = 1.959_963_984_540_054;

/// A 95% interval `[lo, hi]` of a proportion or of a difference of two.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The lower bound.
    pub lo: f64,
    /// The upper bound.
    pub hi: f64,
}

impl Interval {
    /// Wilson's score interval of the proportion `p` (clamped to [0, 1]) of `n` trials;
    /// `[0, 1]` for `n = 0`.
    pub fn wilson(p: f64, n: usize) -> Self {
        if n == 0 {
            return Interval { lo: 0.0, hi: 1.0 };
        }
        let p = p.clamp(0.0, 1.0);
        let n = n as f64;
        let z2 = Z95 * Z95;
        let denom = 1.0 + z2 / n;
        let center = (p + z2 / (2.0 * n)) / denom;
        let half = Z95 / denom * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
        Interval {
            lo: (center - half).max(0.0),
            hi: (center + half).min(1.0),
        }
    }

    /// Newcombe's hybrid score interval (his method 10) of `a − b`, the proportions `a` of
    /// `na` trials and `b` of `nb`, from their Wilson intervals: `a − b − √((a − l_a)² +
    /// (u_b − b)²)` to `a − b + √((u_a − a)² + (b − l_b)²)`. It treats the two as
    /// independent; two policies on the same problems correlate, and there it is conservative.
    pub fn difference(a: f64, na: usize, b: f64, nb: usize) -> Self {
        let (ia, ib) = (Self::wilson(a, na), Self::wilson(b, nb));
        let (a, b) = (a.clamp(0.0, 1.0), b.clamp(0.0, 1.0));
        let d = a - b;
        Interval {
            lo: d - ((a - ia.lo).powi(2) + (ib.hi - b).powi(2)).sqrt(),
            hi: d + ((ia.hi - a).powi(2) + (b - ib.lo).powi(2)).sqrt(),
        }
    }

    /// The mean of paired differences `d_i = b_i − a_i` (two checkpoints scored on the same
    /// problems) and its 95% interval, `d̄ ± z·s/√n` with `s² = Σ(d_i − d̄)²/(n − 1)`: the
    /// normal approximation, fine from a few dozen problems on. Pairing removes what the
    /// problems' difficulty shares between the two, so it is much narrower than
    /// [`Interval::difference`] of the two accuracies. `(0, [−1, 1])` for fewer than two.
    pub fn paired(diffs: &[f64]) -> (f64, Self) {
        let n = diffs.len();
        if n < 2 {
            let d = diffs.first().copied().unwrap_or(0.0);
            return (d, Interval { lo: -1.0, hi: 1.0 });
        }
        let mean = diffs.iter().sum::<f64>() / n as f64;
        let var = diffs.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let half = Z95 * (var / n as f64).sqrt();
        (
            mean,
            Interval {
                lo: mean - half,
                hi: mean + half,
            },
        )
    }

    /// Whether 0 lies outside the interval: a difference the sample size can tell from none.
    pub fn excludes_zero(&self) -> bool {
        self.lo > 0.0 || self.hi < 0.0
    }

    /// Half the width, the `±` of a roughly symmetric interval.
    pub fn half_width(&self) -> f64 {
        (self.hi - self.lo) / 2.0
    }
}

/// `[88.8, 97.8]`: the bounds in percent, one decimal.
impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:.1}, {:.1}]", 100.0 * self.lo, 100.0 * self.hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 5e-5
    }

    #[test]
    fn wilson_matches_statsmodels() {
        // statsmodels 0.14 `proportion_confint(count, nobs, alpha=0.05, method="wilson")`:
        // 95/100, 52/100, 0/20, 20/20, 475/500.
        for (p, n, lo, hi) in [
            (0.95, 100, 0.88825, 0.97846),
            (0.52, 100, 0.42317, 0.61535),
            (0.0, 20, 0.0, 0.16113),
            (1.0, 20, 0.83887, 1.0),
            (0.95, 500, 0.92723, 0.96591),
        ] {
            let i = Interval::wilson(p, n);
            assert!(close(i.lo, lo) && close(i.hi, hi), "{p} of {n}: {i:?}");
        }
        assert_eq!(Interval::wilson(0.3, 0), Interval { lo: 0.0, hi: 1.0 });
        // Out-of-range input is clamped, not passed through.
        assert_eq!(Interval::wilson(1.2, 20), Interval::wilson(1.0, 20));
    }

    #[test]
    fn the_interval_narrows_with_problems_as_one_over_root_n() {
        let w100 = Interval::wilson(0.5, 100).half_width();
        let w400 = Interval::wilson(0.5, 400).half_width();
        // At p = 1/2 Wilson's half-width is z/(1 + z²/n)·√(1/(4n) + z²/(4n²)): 0.0962 at
        // n = 100 and 0.0488 at n = 400 (the normal approximation's z·√(p(1 − p)/n) would
        // say 0.098 and 0.049), so four times the problems halve it, nearly.
        assert!(
            (w100 - 0.0962).abs() < 5e-4 && (w400 - 0.0488).abs() < 5e-4,
            "{w100} {w400}"
        );
        assert!((w100 / w400 - 2.0).abs() < 0.05);
    }

    #[test]
    fn the_paired_interval_is_the_mean_difference_plus_minus_z_standard_errors() {
        // Ten problems: B gained four, lost one, five unchanged. Written out: d̄ = 0.3;
        // Σ(d − d̄)² = 4·0.7² + 5·0.3² + 1.3² = 4.1; s² = 4.1/9; se = √(s²/10) = 0.213437;
        // z·se = 0.418330.
        let d = [1.0, 0.0, 0.0, -1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        let (mean, i) = Interval::paired(&d);
        assert!(close(mean, 0.3));
        assert!(
            close(i.lo, 0.3 - 0.418330) && close(i.hi, 0.3 + 0.418330),
            "{i:?}"
        );
        // The same change on 500 problems (the pattern 50 times) excludes 0.
        let many: Vec<f64> = d.iter().cycle().take(500).copied().collect();
        let (_, i) = Interval::paired(&many);
        assert!(i.excludes_zero() && i.half_width() < 0.06, "{i:?}");
        // No change at all: a zero-width interval at 0; too few problems: everything.
        assert_eq!(
            Interval::paired(&[0.0; 20]).1,
            Interval { lo: 0.0, hi: 0.0 }
        );
        assert_eq!(Interval::paired(&[1.0]).1, Interval { lo: -1.0, hi: 1.0 });
    }

    #[test]
    fn newcombe_matches_his_worked_example() {
        // Newcombe (1998), "Interval estimation for the difference between independent
        // proportions", Statistics in Medicine 17, Table II, example (a): 56/70 − 48/80,
        // method 10 (score interval, hybrid): 0.0524 to 0.3339.
        let d = Interval::difference(56.0 / 70.0, 70, 48.0 / 80.0, 80);
        assert!(
            (d.lo - 0.0524).abs() < 5e-4 && (d.hi - 0.3339).abs() < 5e-4,
            "{d:?}"
        );
        // The difference of equal proportions is centred on 0 and holds it.
        let z = Interval::difference(0.7, 100, 0.7, 100);
        assert!(close(z.lo, -z.hi) && !z.excludes_zero());
        // 90% then 80%: a drop that 500 problems show and 50 do not.
        assert!(Interval::difference(0.9, 500, 0.8, 500).excludes_zero());
        assert!(!Interval::difference(0.9, 50, 0.8, 50).excludes_zero());
        // A gain excludes zero from below.
        let gain = Interval::difference(0.6, 200, 0.9, 200);
        assert!(gain.hi < 0.0 && gain.excludes_zero());
        assert_eq!(
            format!(
                "{}",
                Interval {
                    lo: -0.0123,
                    hi: 0.5
                }
            ),
            "[-1.2, 50.0]"
        );
    }
}
