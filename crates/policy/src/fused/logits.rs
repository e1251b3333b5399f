//! The head's kernels: the log-softmax over the vocabulary read at each position's target,
//! with each position's entropy, and its backward (`super::token_logprobs`). Rows of logits,
//! parallel over rows with rayon, in one sweep each way, with [`super::kernels`]' polynomial
//! `exp` and fixed summation order (so every CPU level gives the same bits).

use rayon::prelude::*;

use super::cpu::multiversion;
use super::kernels::{exp, lanes, max_of, rows_per_task};

/// Where [`exp`] stops: below it, `e^x` is taken as `e^FLOOR` (about 1.6e-38), and the
/// entropy's `p·log p` terms read `log p` as `FLOOR` too. Those terms are below 1.4e-36, so a
/// finite row's results do not move, and a `-inf` logit (a masked token) gives finite
/// entropies and gradients instead of `0·∞`.
const EXP_FLOOR: f32 = -87.0;

/// One row's log-softmax statistics for [`token_logprobs`]: its largest logit `m`,
/// `ln s` with `s = Σ e^{x−m}`, and the entropy `H = ln s − Σ e^{x−m}(x−m) / s` (that is,
/// `−Σ p log p` with `log p = x − m − ln s`).
#[inline(always)]
fn row_stats(x: &[f32]) -> (f32, f32, f32) {
    let m = max_of(x);
    let mut s = [0.0f32; 8];
    let mut sx = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let (mut s_tail, mut sx_tail) = (0.0f32, 0.0f32);
    for &v in chunks.remainder() {
        let d = v - m;
        let e = exp(d);
        s_tail += e;
        sx_tail += e * d.max(EXP_FLOOR);
    }
    for c in chunks {
        for i in 0..8 {
            let d = c[i] - m;
            let e = exp(d);
            s[i] += e;
            sx[i] += e * d.max(EXP_FLOOR);
        }
    }
    let (s, sx) = (lanes(s, s_tail), lanes(sx, sx_tail));
    let ln_s = s.ln();
    (m, ln_s, ln_s - sx / s)
}

/// Panics unless `target` indexes a row of `v` logits.
#[inline(always)]
fn check_target(target: usize, v: usize, row: usize) {
    assert!(
        target < v,
        "target {target} at position {row} is outside the vocabulary of {v} logits"
    );
}

multiversion! {
    /// Log-softmax over rows of `v` logits, read at one target per row, and each row's
    /// entropy: `logp = x[y] − m − ln s` and `H = ln s − Σ e^{x−m}(x−m) / s` ([`row_stats`]).
    /// Returns `[rows, 2]` interleaved (`logp`, `H`) and, for the backward, each row's `m` and
    /// `ln s` interleaved the same way. Panics on a target outside `0..v`.
    pub(crate) fn token_logprobs(x: &[f32], v: usize, targets: &[usize]) -> (Vec<f32>, Vec<f32>) {
        let rows = targets.len();
        assert_eq!(x.len(), rows * v, "logits are [rows, vocab]");
        let mut out = vec![0.0; 2 * rows];
        let mut stats = vec![0.0; 2 * rows];
        let chunk = rows_per_task(v);
        out.par_chunks_mut(2 * chunk)
            .zip(stats.par_chunks_mut(2 * chunk))
            .zip(x.par_chunks(chunk * v))
            .zip(targets.par_chunks(chunk))
            .enumerate()
            .for_each(|(task, (((out, stats), x), targets))| {
                for (k, ((out, stats), (x, &y))) in out
                    .chunks_mut(2)
                    .zip(stats.chunks_mut(2))
                    .zip(x.chunks(v).zip(targets))
                    .enumerate()
                {
                    check_target(y, v, task * chunk + k);
                    let (m, ln_s, h) = row_stats(x);
                    out[0] = (x[y] - m) - ln_s;
                    out[1] = h;
                    stats[0] = m;
                    stats[1] = ln_s;
                }
            });
        (out, stats)
    }
}

multiversion! {
    /// The backward of [`token_logprobs`]: with `g` the `[rows, 2]` gradients of (`logp`, `H`),
    /// `p = e^{x−m−ln s}` and `log p = x − m − ln s`,
    /// `∂/∂x = −p·(g_logp + g_H·(log p + H))`, plus `g_logp` at the target.
    pub(crate) fn token_logprobs_backward(
        x: &[f32],
        v: usize,
        targets: &[usize],
        out: &[f32],
        stats: &[f32],
        g: &[f32],
    ) -> Vec<f32> {
        let rows = targets.len();
        assert_eq!(x.len(), rows * v, "logits are [rows, vocab]");
        let mut dx = vec![0.0; x.len()];
        let chunk = rows_per_task(v);
        dx.par_chunks_mut(chunk * v)
            .zip(x.par_chunks(chunk * v))
            .zip(targets.par_chunks(chunk))
            .zip(out.par_chunks(2 * chunk).zip(stats.par_chunks(2 * chunk)))
            .zip(g.par_chunks(2 * chunk))
            .for_each(|((((dx, x), targets), (out, stats)), g)| {
                for ((((dx, x), &y), (out, stats)), g) in dx
                    .chunks_mut(v)
                    .zip(x.chunks(v))
                    .zip(targets)
                    .zip(out.chunks(2).zip(stats.chunks(2)))
                    .zip(g.chunks(2))
                {
                    let (h, m, ln_s) = (out[1], stats[0], stats[1]);
                    let (g_logp, g_h) = (g[0], g[1]);
                    for (dx, &x) in dx.iter_mut().zip(x) {
                        let log_p = (x - m) - ln_s;
                        let log_p_floor = log_p.max(EXP_FLOOR);
                        *dx = -(exp(log_p) * (g_logp + g_h * (log_p_floor + h)));
                    }
                    dx[y] += g_logp;
                }
            });
        dx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fused::kernels::tests::{assert_close, numeric, values};

    /// `(logp, H)` of each row in f64: `log p = x − logsumexp(x)`, `H = −Σ p log p`.
    fn logprobs_f64(x: &[f32], v: usize, targets: &[usize]) -> Vec<(f64, f64)> {
        x.chunks(v)
            .zip(targets)
            .map(|(row, &y)| {
                let m = row
                    .iter()
                    .fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)));
                let lse = m + row
                    .iter()
                    .map(|&x| (f64::from(x) - m).exp())
                    .sum::<f64>()
                    .ln();
                let h = -row
                    .iter()
                    .map(|&x| {
                        let lp = f64::from(x) - lse;
                        lp.exp() * lp
                    })
                    .sum::<f64>();
                (f64::from(row[y]) - lse, h)
            })
            .collect()
    }

    #[test]
    fn token_logprobs_match_their_formula_in_f64() {
        // Rows of 37 (a tail after four chunks of 8) and of 300, logits up to ±12, and one
        // row with a logit far above the rest (p ≈ one-hot, H ≈ 0: no NaN, no negative H).
        for (v, rows, seed) in [(37, 9, 21), (300, 40, 22)] {
            let mut x = values(rows * v, seed, 12.0);
            x[3 * v + 5] = 1.0e4;
            let targets: Vec<usize> = (0..rows).map(|r| (r * 11 + 5) % v).collect();
            let (out, stats) = token_logprobs(&x, v, &targets);
            for (r, (lp, h)) in logprobs_f64(&x, v, &targets).into_iter().enumerate() {
                let (ours_lp, ours_h) = (f64::from(out[2 * r]), f64::from(out[2 * r + 1]));
                assert!(
                    (ours_lp - lp).abs() <= 2e-5 * (1.0 + lp.abs()),
                    "logp[{r}]: {ours_lp} vs {lp}"
                );
                assert!(
                    (ours_h - h).abs() <= 2e-5 * (1.0 + h.abs()),
                    "H[{r}]: {ours_h} vs {h}"
                );
                assert!(ours_h >= -1e-6, "H[{r}] = {ours_h}");
                assert_eq!(
                    stats[2 * r],
                    x[r * v..][..v].iter().fold(f32::MIN, |m, &x| m.max(x))
                );
            }
        }
    }

    #[test]
    fn token_logprobs_backward_matches_finite_differences() {
        let (v, rows) = (29, 6);
        let x = values(rows * v, 23, 3.0);
        let targets: Vec<usize> = (0..rows).map(|r| (r * 5 + 2) % v).collect();
        let g = values(2 * rows, 24, 1.0);
        let (out, stats) = token_logprobs(&x, v, &targets);
        let dx = token_logprobs_backward(&x, v, &targets, &out, &stats, &g);
        assert_close(
            &dx,
            &numeric(|x| token_logprobs(x, v, &targets).0, &x, &g),
            2e-2,
            "dlogits",
        );
        // Through the log-probs alone (no entropy gradient): the familiar `g·(onehot − p)`,
        // which sums to 0 over each row.
        let g: Vec<f32> = g.chunks(2).flat_map(|g| [g[0], 0.0]).collect();
        let dx = token_logprobs_backward(&x, v, &targets, &out, &stats, &g);
        for (r, (row, &y)) in dx.chunks(v).zip(&targets).enumerate() {
            // log p of token 0 is x[0] − logsumexp(x).
            let lse = f64::from(x[r * v]) - logprobs_f64(&x[r * v..][..v], v, &[0])[0].0;
            for (j, &d) in row.iter().enumerate() {
                let p = (f64::from(x[r * v + j]) - lse).exp();
                let want = f64::from(g[2 * r]) * (f64::from(u8::from(j == y)) - p);
                assert!(
                    (f64::from(d) - want).abs() < 1e-6,
                    "[{r}, {j}]: {d} vs {want}"
                );
            }
            assert!(row.iter().sum::<f32>().abs() < 1e-5);
        }
    }

    /// A masked token (a `-inf` logit): the log-probs, the entropy and every gradient stay
    /// finite and match the row without it (its probability is 0), with and without an
    /// entropy gradient.
    #[test]
    fn a_minus_infinity_logit_is_a_token_of_probability_zero() {
        let v = 13;
        let mut x = values(2 * v, 26, 3.0);
        let targets = [2, 7];
        let (plain, plain_stats) = token_logprobs(&x, v, &targets);
        x[v + 4] = f32::NEG_INFINITY;
        let (masked, stats) = token_logprobs(&x, v, &targets);
        assert!(
            masked.iter().chain(&stats).all(|f| f.is_finite()),
            "{masked:?}"
        );
        assert_eq!(masked[..2], plain[..2], "the other row");
        let without: Vec<f32> = x[v..].iter().copied().filter(|f| f.is_finite()).collect();
        let want = logprobs_f64(&without, v - 1, &[6])[0];
        assert!(
            (f64::from(masked[2]) - want.0).abs() < 1e-5,
            "{} vs {}",
            masked[2],
            want.0
        );
        assert!(
            (f64::from(masked[3]) - want.1).abs() < 1e-5,
            "{} vs {}",
            masked[3],
            want.1
        );
        for g in [[1.0, 0.0, 0.5, 0.0], [1.0, 0.3, 0.5, -0.7]] {
            let dx = token_logprobs_backward(&x, v, &targets, &masked, &stats, &g);
            assert!(dx.iter().all(|f| f.is_finite()), "{g:?}: {dx:?}");
            assert!(
                dx[v + 4].abs() < 1e-30,
                "the masked token's gradient {}",
                dx[v + 4]
            );
            let dplain = token_logprobs_backward(
                &x[..v],
                v,
                &targets[..1],
                &plain[..2],
                &plain_stats[..2],
                &g[..2],
            );
            assert_eq!(dx[..v], dplain[..], "the other row");
        }
    }

    #[test]
    #[should_panic(expected = "target 29 at position 4 is outside the vocabulary of 29 logits")]
    fn a_target_outside_the_vocabulary_panics() {
        let x = values(6 * 29, 25, 1.0);
        token_logprobs(&x, 29, &[0, 1, 2, 3, 29, 5]);
    }
}
