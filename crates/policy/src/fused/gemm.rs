//! One safe call into the `gemm` crate (the GEMM flex itself runs, with its AVX-512 kernels),
//! for products over parts of host buffers: the causal attention's blocks (`causal.rs`), which
//! flex's `float_matmul` could reach only through a copy of each block.
//!
//! [`View`] describes a strided matrix inside a slice; [`product`] checks that every element
//! the product reads or writes lies inside its slice (and that the destination's elements are
//! distinct) before it hands the pointers to `gemm`.

/// A `rows × cols` matrix inside a slice: element `(r, c)` is at `offset + r·rs + c·cs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

impl View {
    /// A row-major block: `rows × cols` at `offset`, rows `stride` apart.
    pub(crate) fn rows(offset: usize, rows: usize, cols: usize, stride: usize) -> View {
        View {
            offset,
            rows,
            cols,
            rs: stride,
            cs: 1,
        }
    }

    /// The transpose: the same elements, rows and columns swapped.
    pub(crate) fn t(self) -> View {
        View {
            offset: self.offset,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }

    /// One past the largest index it touches (its offset when it is empty).
    ///
    /// # Panics
    /// When that index does not fit a `usize` (a view no slice can hold).
    fn end(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            return self.offset;
        }
        (self.rows - 1)
            .checked_mul(self.rs)
            .zip((self.cols - 1).checked_mul(self.cs))
            .and_then(|(r, c)| r.checked_add(c))
            .and_then(|e| e.checked_add(self.offset))
            .and_then(|e| e.checked_add(1))
            .unwrap_or_else(|| panic!("a gemm view reaches past any buffer: {self:?}"))
    }
}

/// `dst = lhs · rhs`, or `dst += lhs · rhs` when `accumulate`, on one thread (the callers run
/// many of these in parallel, one per block).
///
/// # Panics
/// When the shapes do not chain (`lhs` is `m × k`, `rhs` `k × n`, `dst` `m × n`), when a view
/// reaches past its slice, or when `dst` is not row-major with rows at least `cols` apart (so
/// that its elements are distinct).
pub(crate) fn product(
    dst: &mut [f32],
    d: View,
    accumulate: bool,
    lhs: &[f32],
    l: View,
    rhs: &[f32],
    r: View,
) {
    checked(
        dst,
        d,
        accumulate,
        (lhs, l),
        (rhs, r),
        gemm::Parallelism::None,
    );
}

/// Products of at least this many multiply-adds (`m·n·k`) run on every rayon thread: flex's own
/// threshold (`burn_flex::ops::matmul`), so a product gets the parallelism, and the bits, that
/// flex's `float_matmul` gives it.
const PARALLEL_OPS: usize = 192 * 192 * 192;

/// `dst = lhs · rhs` as one product, on every rayon thread when it is large enough
/// ([`PARALLEL_OPS`]): a whole matrix product, as flex's `float_matmul` runs it.
///
/// # Panics
/// As [`product`].
pub(crate) fn whole_product(dst: &mut [f32], d: View, lhs: &[f32], l: View, rhs: &[f32], r: View) {
    let ops = d.rows.saturating_mul(d.cols).saturating_mul(l.cols);
    let parallelism = if ops >= PARALLEL_OPS {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    checked(dst, d, false, (lhs, l), (rhs, r), parallelism);
}

/// [`product`]'s checks, then the call.
fn checked(
    dst: &mut [f32],
    d: View,
    accumulate: bool,
    (lhs, l): (&[f32], View),
    (rhs, r): (&[f32], View),
    parallelism: gemm::Parallelism,
) {
    assert!(
        d.rows == l.rows && d.cols == r.cols && l.cols == r.rows,
        "gemm shapes do not chain: {l:?} · {r:?} into {d:?}"
    );
    assert!(
        d.end() <= dst.len() && l.end() <= lhs.len() && r.end() <= rhs.len(),
        "a gemm view reaches past its buffer ({} {} {})",
        dst.len(),
        lhs.len(),
        rhs.len()
    );
    assert!(
        d.cs == 1 && (d.rows <= 1 || d.rs >= d.cols),
        "a gemm destination must be row-major without overlapping rows: {d:?}"
    );
    if d.rows == 0 || d.cols == 0 {
        return;
    }
    if l.cols == 0 {
        if !accumulate {
            for row in dst[d.offset..d.end()].chunks_mut(d.rs) {
                row[..d.cols].fill(0.0);
            }
        }
        return;
    }
    call(dst, d, accumulate, (lhs, l), (rhs, r), parallelism);
}

#[allow(
    unsafe_code,
    reason = "gemm takes raw pointers and strides; `checked` checked them against the slices"
)]
fn call(
    dst: &mut [f32],
    d: View,
    accumulate: bool,
    (lhs, l): (&[f32], View),
    (rhs, r): (&[f32], View),
    parallelism: gemm::Parallelism,
) {
    let stride = |s: usize| isize::try_from(s).expect("a stride fits isize");
    // SAFETY: `checked` checked that every element of each view lies inside its slice (the
    // offsets below are in bounds, and `gemm` reads and writes only elements of the views),
    // that the destination's elements are distinct, and that the shapes chain. `dst` is a
    // unique borrow, so it aliases neither input. `gemm` returns only when every thread it
    // started (`Parallelism::Rayon`) is done, within the borrows' lifetimes.
    unsafe {
        gemm::gemm(
            d.rows,
            d.cols,
            l.cols,
            dst.as_mut_ptr().add(d.offset),
            stride(d.cs),
            stride(d.rs),
            accumulate,
            lhs.as_ptr().add(l.offset),
            stride(l.cs),
            stride(l.rs),
            rhs.as_ptr().add(r.offset),
            stride(r.cs),
            stride(r.rs),
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(l: &[f32], lv: View, r: &[f32], rv: View) -> Vec<f32> {
        let mut out = vec![0.0; lv.rows * rv.cols];
        for i in 0..lv.rows {
            for j in 0..rv.cols {
                let mut s = 0.0f64;
                for k in 0..lv.cols {
                    s += f64::from(l[lv.offset + i * lv.rs + k * lv.cs])
                        * f64::from(r[rv.offset + k * rv.rs + j * rv.cs]);
                }
                out[i * rv.cols + j] = s as f32;
            }
        }
        out
    }

    #[test]
    fn strided_and_transposed_views_multiply_as_the_formula_says() {
        let a: Vec<f32> = (0..200)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let b: Vec<f32> = (0..300)
            .map(|i| ((i * 53 % 19) as f32 - 9.0) / 5.0)
            .collect();
        // A 5×7 block of a 10-wide matrix at (2, 1), times the transpose of a 4×7 block of a
        // 12-wide matrix at (3, 2): 5×4 into the middle of a 6×9 destination.
        let l = View::rows(2 * 10 + 1, 5, 7, 10);
        let r = View::rows(3 * 12 + 2, 4, 7, 12).t();
        let want = naive(&a, l, &b, r);
        let mut dst = vec![-1.0; 54];
        let d = View::rows(9 + 3, 5, 4, 9);
        product(&mut dst, d, false, &a, l, &b, r);
        for i in 0..5 {
            for j in 0..4 {
                let got = dst[12 + i * 9 + j];
                assert!((got - want[i * 4 + j]).abs() < 1e-4, "({i},{j}) {got}");
            }
        }
        // Outside the block nothing moved.
        assert_eq!(dst[..12], [-1.0; 12]);
        assert_eq!(dst[12 + 4], -1.0);
        // Accumulating adds the same product again.
        product(&mut dst, d, true, &a, l, &b, r);
        assert!((dst[12] - 2.0 * want[0]).abs() < 1e-4);
    }

    /// A product above the parallel threshold (on every rayon thread) and one below, each with
    /// a transposed operand, against the formula; the parallel one gives the same bits on one
    /// thread and on three.
    #[test]
    fn whole_products_multiply_as_the_formula_says_on_any_number_of_threads() {
        let (m, k, n) = (200, 192, 208);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let b: Vec<f32> = (0..n * k)
            .map(|i| ((i * 53 % 19) as f32 - 9.0) / 5.0)
            .collect();
        let (l, r) = (View::rows(0, m, k, k), View::rows(0, n, k, k).t());
        assert!(m * n * k >= PARALLEL_OPS);
        let want = naive(&a, l, &b, r);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            let mut dst = vec![f32::NAN; m * n];
            pool.install(|| whole_product(&mut dst, View::rows(0, m, n, n), &a, l, &b, r));
            dst
        };
        let one = run(1);
        for (i, (got, want)) in one.iter().zip(&want).enumerate() {
            assert!(
                (got - want).abs() < 1e-3 * (1.0 + want.abs()),
                "[{i}] {got} vs {want}"
            );
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&run(3)), bits(&one));
        // Below the threshold: a 3×5 times the transpose of a 4×5.
        let (l, r) = (View::rows(0, 3, 5, 5), View::rows(0, 4, 5, 5).t());
        let mut dst = vec![f32::NAN; 12];
        whole_product(&mut dst, View::rows(0, 3, 4, 4), &a, l, &b, r);
        for (got, want) in dst.iter().zip(naive(&a, l, &b, r)) {
            assert!((got - want).abs() < 1e-4);
        }
    }

    #[test]
    #[should_panic(expected = "reaches past any buffer")]
    fn a_view_whose_extent_overflows_panics() {
        // 4·2⁶² wraps to 0 in unchecked arithmetic, which would pass the bounds check.
        let mut dst = vec![0.0; 5];
        let huge = View::rows(0, 5, 1, 1 << 62);
        product(
            &mut dst,
            View::rows(0, 5, 1, 1),
            false,
            &[1.0; 8],
            huge,
            &[1.0],
            View::rows(0, 1, 1, 1),
        );
    }

    #[test]
    fn an_empty_inner_dimension_writes_zeros() {
        let mut dst = vec![5.0; 6];
        let l = View::rows(0, 2, 0, 0);
        let r = View::rows(0, 0, 3, 3);
        product(&mut dst, View::rows(0, 2, 3, 3), false, &[], l, &[], r);
        assert_eq!(dst, [0.0; 6]);
    }

    #[test]
    #[should_panic(expected = "past its buffer")]
    fn a_view_past_its_slice_panics() {
        let mut dst = vec![0.0; 4];
        let a = vec![1.0; 4];
        product(
            &mut dst,
            View::rows(0, 2, 2, 2),
            false,
            &a,
            View::rows(1, 2, 2, 2),
            &a,
            View::rows(0, 2, 2, 2),
        );
    }

    #[test]
    #[should_panic(expected = "overlapping rows")]
    fn an_overlapping_destination_panics() {
        let mut dst = vec![0.0; 8];
        let a = vec![1.0; 8];
        product(
            &mut dst,
            View::rows(0, 2, 3, 2),
            false,
            &a,
            View::rows(0, 2, 2, 2),
            &a,
            View::rows(0, 2, 3, 3),
        );
    }

    #[test]
    #[should_panic(expected = "do not chain")]
    fn shapes_that_do_not_chain_panic() {
        let mut dst = vec![0.0; 8];
        let a = vec![1.0; 8];
        product(
            &mut dst,
            View::rows(0, 2, 2, 2),
            false,
            &a,
            View::rows(0, 2, 3, 3),
            &a,
            View::rows(0, 2, 2, 2),
        );
    }
}
