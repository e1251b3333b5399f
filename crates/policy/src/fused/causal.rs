//! The training attention's five products over the causal blocks only.
//!
//! Causal attention keeps, for query `i`, the keys `0..=i`: half of each `t × t` score matrix.
//! flex's batched matmul computes the whole square, forward (`q·kᵀ`, `p·v`) and backward
//! (`dO·vᵀ`, `dsᵀ·q`, `ds·k`, `pᵀ·dO`). Here positions are cut into blocks of [`BLOCK`] and
//! each product runs, one GEMM per block ([`super::gemm::product`]), over the blocks on or
//! below the diagonal: about `t²/2 + t·BLOCK/2` of the `t²` products.
//!
//! Layout: `mats` query-side matrices of `t` rows (the grouped queries `[b, kv_heads, g·t, d]`
//! read as `b·heads` matrices `[t, d]`, and the probabilities `[b·heads, t, t]`); key-side
//! matrix `m / g` belongs to query-side matrix `m` (KV head `kv` serves query heads
//! `kv·g..kv·g + g`).

use rayon::prelude::*;

use super::gemm::{View, product};

/// Positions per block: large enough that each GEMM keeps its microkernel busy, small enough
/// that the square blocks on the diagonal (computed whole, half of them masked) cost little.
pub(crate) const BLOCK: usize = 64;

/// `S_m = A_m · B_{m/g}ᵀ` on the causal blocks: `a [mats, t, d]`, `b [mats/g, t, d]` →
/// `[mats, t, t]`. Row `i` of each matrix holds its products with keys `0..=i` (and up to
/// the end of `i`'s block, which a causal softmax masks); the rest of the row is 0.
pub(crate) fn scores(a: &[f32], b: &[f32], mats: usize, g: usize, t: usize, d: usize) -> Vec<f32> {
    check(
        mats,
        g,
        t,
        d,
        [(a.len(), mats * t * d), (b.len(), mats / g * t * d)],
    );
    let mut s = vec![0.0; mats * t * t];
    row_blocks(&mut s, t, t, |m, start, n, rows| {
        let end = start + n;
        product(
            rows,
            View::rows(0, n, end, t),
            false,
            a,
            View::rows((m * t + start) * d, n, d, d),
            b,
            View::rows(m / g * t * d, end, d, d).t(),
        );
    });
    s
}

/// `O_m = P_m · V_{m/g}` for a causal `P`, reading its causal blocks only: `p [mats, t, t]`
/// (zero above the diagonal), `v [mats/g, t, d]` → `[mats, t, d]`.
pub(crate) fn weighted(
    p: &[f32],
    v: &[f32],
    mats: usize,
    g: usize,
    t: usize,
    d: usize,
) -> Vec<f32> {
    check(
        mats,
        g,
        t,
        d,
        [(p.len(), mats * t * t), (v.len(), mats / g * t * d)],
    );
    let mut o = vec![0.0; mats * t * d];
    row_blocks(&mut o, t, d, |m, start, n, rows| {
        let end = start + n;
        product(
            rows,
            View::rows(0, n, d, d),
            false,
            p,
            View::rows((m * t + start) * t, n, end, t),
            v,
            View::rows(m / g * t * d, end, d, d),
        );
    });
    o
}

/// `Y_k = Σ_{j<g} P_{k·g+j}ᵀ · X_{k·g+j}` for a causal `P`, reading its causal blocks only:
/// `p [mats, t, t]` (zero above the diagonal), `x [mats, t, d]` → `[mats/g, t, d]` (the
/// gradients of the keys and values, summed over the query heads that share them).
pub(crate) fn transposed(
    p: &[f32],
    x: &[f32],
    mats: usize,
    g: usize,
    t: usize,
    d: usize,
) -> Vec<f32> {
    check(
        mats,
        g,
        t,
        d,
        [(p.len(), mats * t * t), (x.len(), mats * t * d)],
    );
    let mut y = vec![0.0; mats / g * t * d];
    row_blocks(&mut y, t, d, |kv, start, n, rows| {
        // Key block `start..start + n` is read by queries `start..t`.
        for j in 0..g {
            let m = kv * g + j;
            product(
                rows,
                View::rows(0, n, d, d),
                j > 0,
                p,
                View::rows(m * t * t + start * t + start, t - start, n, t).t(),
                x,
                View::rows((m * t + start) * d, t - start, d, d),
            );
        }
    });
    y
}

/// Runs `block(m, start, n, rows)` in parallel for every block of [`BLOCK`] rows (the last one
/// shorter) of every matrix of `out` (matrices of `t` rows of `width`): matrix `m`'s rows
/// `start..start + n`, as the slice `rows`.
fn row_blocks(
    out: &mut [f32],
    t: usize,
    width: usize,
    block: impl Fn(usize, usize, usize, &mut [f32]) + Sync,
) {
    out.par_chunks_mut(t * width)
        .enumerate()
        .for_each(|(m, matrix)| {
            matrix
                .par_chunks_mut(BLOCK * width)
                .enumerate()
                .for_each(|(b, rows)| block(m, b * BLOCK, rows.len() / width, rows));
        });
}

/// Panics unless the geometry is one these products take and the buffers have its sizes.
fn check(mats: usize, g: usize, t: usize, d: usize, sizes: [(usize, usize); 2]) {
    assert!(
        g > 0 && mats.is_multiple_of(g) && t > 0 && d > 0,
        "causal products: {mats} matrices in groups of {g}, t = {t}, d = {d}"
    );
    for (got, want) in sizes {
        assert_eq!(got, want, "causal products: a buffer of the wrong size");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    /// A causal `[mats, t, t]`: random on and below the diagonal, 0 above.
    fn lower(mats: usize, t: usize, seed: u64) -> Vec<f32> {
        let mut p = values(mats * t * t, seed);
        for (r, row) in p.chunks_mut(t).enumerate() {
            row[r % t + 1..].fill(0.0);
        }
        p
    }

    fn close(got: f32, want: f64, what: &str) {
        assert!(
            (f64::from(got) - want).abs() <= 1e-5 * (1.0 + want.abs()),
            "{what}: {got} against {want}"
        );
    }

    // Sizes around the block: one partial block, exactly one, and several with a partial last.
    const CASES: [(usize, usize, usize, usize); 4] =
        [(2, 1, 5, 3), (4, 2, 64, 8), (6, 3, 130, 5), (2, 2, 200, 16)];

    #[test]
    fn scores_are_the_dot_products_on_and_below_the_diagonal() {
        for (mats, g, t, d) in CASES {
            let (a, b) = (values(mats * t * d, 1), values(mats / g * t * d, 2));
            let s = scores(&a, &b, mats, g, t, d);
            for m in 0..mats {
                for i in 0..t {
                    let end = (i / BLOCK + 1) * BLOCK;
                    for j in 0..t {
                        let want: f64 = if j < end {
                            (0..d)
                                .map(|e| {
                                    f64::from(a[(m * t + i) * d + e])
                                        * f64::from(b[(m / g * t + j) * d + e])
                                })
                                .sum()
                        } else {
                            0.0
                        };
                        close(s[(m * t + i) * t + j], want, "scores");
                    }
                }
            }
        }
    }

    #[test]
    fn weighted_is_p_times_v() {
        for (mats, g, t, d) in CASES {
            let (p, v) = (lower(mats, t, 3), values(mats / g * t * d, 4));
            let o = weighted(&p, &v, mats, g, t, d);
            for m in 0..mats {
                for i in 0..t {
                    for e in 0..d {
                        let want: f64 = (0..t)
                            .map(|j| {
                                f64::from(p[(m * t + i) * t + j])
                                    * f64::from(v[(m / g * t + j) * d + e])
                            })
                            .sum();
                        close(o[(m * t + i) * d + e], want, "weighted");
                    }
                }
            }
        }
    }

    #[test]
    fn transposed_is_p_transpose_times_x_summed_over_the_group() {
        for (mats, g, t, d) in CASES {
            let (p, x) = (lower(mats, t, 5), values(mats * t * d, 6));
            let y = transposed(&p, &x, mats, g, t, d);
            for kv in 0..mats / g {
                for j in 0..t {
                    for e in 0..d {
                        let want: f64 = (0..g)
                            .map(|h| {
                                let m = kv * g + h;
                                (0..t)
                                    .map(|i| {
                                        f64::from(p[(m * t + i) * t + j])
                                            * f64::from(x[(m * t + i) * d + e])
                                    })
                                    .sum::<f64>()
                            })
                            .sum();
                        close(y[(kv * t + j) * d + e], want, "transposed");
                    }
                }
            }
        }
    }

    #[test]
    fn the_same_inputs_give_the_same_bits() {
        let (mats, g, t, d) = (6, 3, 130, 5);
        let (a, b) = (values(mats * t * d, 7), values(mats / g * t * d, 8));
        let p = lower(mats, t, 9);
        assert_eq!(scores(&a, &b, mats, g, t, d), scores(&a, &b, mats, g, t, d));
        assert_eq!(
            transposed(&p, &a, mats, g, t, d),
            transposed(&p, &a, mats, g, t, d)
        );
    }

    #[test]
    #[should_panic(expected = "wrong size")]
    fn a_buffer_of_the_wrong_size_panics() {
        scores(&[0.0; 10], &[0.0; 9], 2, 1, 5, 1);
    }
}
