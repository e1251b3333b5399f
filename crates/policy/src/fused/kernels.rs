//! The fused kernels on host slices: one pass where Burn's composed ops make several.
//!
//! Every function here is a plain loop over contiguous row-major `f32` slices, parallel over
//! rows with rayon, and written so that the compiler vectorises the inner loops (no branches
//! on values, no libm calls: [`exp`] is a polynomial). Their formulas are the backward passes
//! of the compositions in `model.rs`, written out by hand; `tests` checks each against finite
//! differences and the module tests in `fused` check the whole model against Burn's autodiff.

use rayon::prelude::*;

use super::cpu::multiversion;

/// Rows per rayon task: enough work per task that scheduling costs nothing next to it.
pub(super) fn rows_per_task(row_len: usize) -> usize {
    (16_384 / row_len.max(1)).max(1)
}

/// `e^x` to about 2 ulp for `x` in `[-87, 88]` (clamped outside, so it never overflows and
/// never takes libm's slow underflow path): `x = k·ln 2 + r`, `e^r` by its Taylor series to
/// r⁶ on `|r| ≤ ln 2 / 2`, `2^k` from the exponent bits.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5·2²³: adding and subtracting it rounds to the nearest integer in f32.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let k = (x * LOG2E + ROUND) - ROUND;
    let r = x - k * LN2_HI - k * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let bits = ((k as i32 + 127) as u32) << 23;
    p * f32::from_bits(bits)
}

/// `Σ a·b` in eight interleaved partial sums (a fixed order, so the same bits every time),
/// which the compiler can keep in vector registers: a plain `sum()` must add in sequence.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    lanes(acc, tail)
}

/// Eight partial sums and a tail added in the kernels' one fixed order (so the same bits at
/// every CPU level and every call).
#[inline(always)]
pub(super) fn lanes(acc: [f32; 8], tail: f32) -> f32 {
    (acc[0] + acc[4]) + (acc[1] + acc[5]) + (acc[2] + acc[6]) + (acc[3] + acc[7]) + tail
}

/// `Σ a` in eight interleaved partial sums, as [`dot`].
#[inline(always)]
fn sum(a: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = a.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().sum();
    for x in chunks {
        for i in 0..8 {
            acc[i] += x[i];
        }
    }
    lanes(acc, tail)
}

/// The logistic function through [`exp`].
#[inline(always)]
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

multiversion! {
    /// RMSNorm over rows of `n`: `y = x · w / sqrt(mean(x²) + eps)`. Returns `y` and each row's
    /// `1 / sqrt(mean(x²) + eps)` for the backward.
    pub(crate) fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> (Vec<f32>, Vec<f32>) {
        let n = w.len();
        let rows = x.len() / n;
        let mut y = vec![0.0; x.len()];
        let mut inv = vec![0.0; rows];
        let chunk = rows_per_task(n);
        y.par_chunks_mut(chunk * n)
            .zip(inv.par_chunks_mut(chunk))
            .zip(x.par_chunks(chunk * n))
            .for_each(|((y, inv), x)| {
                for ((y, inv), x) in y.chunks_mut(n).zip(inv.iter_mut()).zip(x.chunks(n)) {
                    let ss = dot(x, x);
                    let r = 1.0 / (ss / n as f32 + eps).sqrt();
                    *inv = r;
                    for ((y, x), w) in y.iter_mut().zip(x).zip(w) {
                        *y = x * r * w;
                    }
                }
            });
        (y, inv)
    }
}

multiversion! {
    /// The backward of [`rms_norm`]: with `g = dy · w`,
    /// `dx = r·g − x · r³ · Σ(g·x) / n` and `dw = Σ_rows dy · x · r`.
    pub(crate) fn rms_norm_backward(
        x: &[f32],
        w: &[f32],
        inv: &[f32],
        dy: &[f32],
    ) -> (Vec<f32>, Vec<f32>) {
        let n = w.len();
        let mut dx = vec![0.0; x.len()];
        let chunk = rows_per_task(n);
        let partial = dx
            .par_chunks_mut(chunk * n)
            .zip(x.par_chunks(chunk * n))
            .zip(dy.par_chunks(chunk * n))
            .zip(inv.par_chunks(chunk))
            .map(|(((dx, x), dy), inv)| {
                let mut dw = vec![0.0f32; n];
                let mut g = vec![0.0f32; n];
                for (((dx, x), dy), &r) in dx.chunks_mut(n).zip(x.chunks(n)).zip(dy.chunks(n)).zip(inv)
                {
                    for (((g, dw), (&x, &dy)), &w) in
                        g.iter_mut().zip(dw.iter_mut()).zip(x.iter().zip(dy)).zip(w)
                    {
                        *g = dy * w;
                        *dw += dy * x * r;
                    }
                    let c = r * r * r * dot(&g, x) / n as f32;
                    for ((dx, &g), &x) in dx.iter_mut().zip(&g).zip(x) {
                        *dx = r * g - x * c;
                    }
                }
                dw
            })
            .collect::<Vec<_>>();
        // Summed in chunk order, not in rayon's reduction tree (which follows work stealing): the
        // same bits on every run and with any number of threads.
        let dw = partial.into_iter().fold(vec![0.0; n], |mut a, b| {
            for (a, b) in a.iter_mut().zip(&b) {
                *a += b;
            }
            a
        });
        (dx, dw)
    }
}

/// SwiGLU at one element, `silu(g) · u` (shared by [`swiglu`] and [`swiglu_packed`]).
#[inline(always)]
fn swiglu_at(g: f32, u: f32) -> f32 {
    g * sigmoid(g) * u
}

/// SwiGLU's input gradients at one element: `(dg, du)` for gate `g`, up `u` and output
/// gradient `dz` (shared by [`swiglu_backward`] and [`swiglu_packed_backward`], whose bits must
/// agree).
#[inline(always)]
fn swiglu_grads(g: f32, u: f32, dz: f32) -> (f32, f32) {
    let s = sigmoid(g);
    (dz * u * s * (1.0 + g * (1.0 - s)), dz * g * s)
}

multiversion! {
    /// SwiGLU's product: `silu(g) · u`.
    pub(crate) fn swiglu(g: &[f32], u: &[f32]) -> Vec<f32> {
        let mut z = vec![0.0; g.len()];
        z.par_chunks_mut(16_384)
            .zip(g.par_chunks(16_384).zip(u.par_chunks(16_384)))
            .for_each(|(z, (g, u))| {
                for ((z, &g), &u) in z.iter_mut().zip(g).zip(u) {
                    *z = swiglu_at(g, u);
                }
            });
        z
    }
}

multiversion! {
    /// The backward of [`swiglu`]: `du = dz · silu(g)`, `dg = dz · u · σ(g)·(1 + g·(1 − σ(g)))`.
    pub(crate) fn swiglu_backward(g: &[f32], u: &[f32], dz: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let mut dg = vec![0.0; g.len()];
        let mut du = vec![0.0; g.len()];
        dg.par_chunks_mut(16_384)
            .zip(du.par_chunks_mut(16_384))
            .zip(g.par_chunks(16_384).zip(u.par_chunks(16_384)))
            .zip(dz.par_chunks(16_384))
            .for_each(|(((dg, du), (g, u)), dz)| {
                for ((((dg, du), &g), &u), &dz) in dg.iter_mut().zip(du).zip(g).zip(u).zip(dz) {
                    (*dg, *du) = swiglu_grads(g, u, dz);
                }
            });
        (dg, du)
    }
}

multiversion! {
    /// [`swiglu`] of the gate and up projections side by side: each row of `gu` is
    /// `[gate (width) | up (width)]`, each row of the result `silu(gate) · up` (`width` wide).
    pub(crate) fn swiglu_packed(gu: &[f32], width: usize) -> Vec<f32> {
        let rows = gu.len() / (2 * width);
        let mut z = vec![0.0; rows * width];
        let per_task = (16_384 / width).max(1);
        z.par_chunks_mut(per_task * width)
            .zip(gu.par_chunks(per_task * 2 * width))
            .for_each(|(z, gu)| {
                for (z, gu) in z.chunks_mut(width).zip(gu.chunks(2 * width)) {
                    let (g, u) = gu.split_at(width);
                    for ((z, &g), &u) in z.iter_mut().zip(g).zip(u) {
                        *z = swiglu_at(g, u);
                    }
                }
            });
        z
    }
}

multiversion! {
    /// The backward of [`swiglu_packed`]: rows `[dgate | dup]` as [`swiglu_backward`] gives them.
    pub(crate) fn swiglu_packed_backward(gu: &[f32], dz: &[f32], width: usize) -> Vec<f32> {
        let mut dgu = vec![0.0; gu.len()];
        let per_task = (16_384 / width).max(1);
        dgu.par_chunks_mut(per_task * 2 * width)
            .zip(gu.par_chunks(per_task * 2 * width))
            .zip(dz.par_chunks(per_task * width))
            .for_each(|((dgu, gu), dz)| {
                for ((dgu, gu), dz) in dgu
                    .chunks_mut(2 * width)
                    .zip(gu.chunks(2 * width))
                    .zip(dz.chunks(width))
                {
                    let (dg, du) = dgu.split_at_mut(width);
                    let (g, u) = gu.split_at(width);
                    for ((((dg, du), &g), &u), &dz) in dg.iter_mut().zip(du).zip(g).zip(u).zip(dz) {
                        (*dg, *du) = swiglu_grads(g, u, dz);
                    }
                }
            });
        dgu
    }
}

multiversion! {
    /// Rotary embedding in the rotate-half layout, moving heads before positions:
    /// `x [b, t, heads, hd]` → `y [b, heads, t, hd]` with
    /// `y[j] = x[j]·cos[j] + x[j ± hd/2]·sin[j]` (`sin` carries rotate-half's sign, as
    /// `model::rope_tables` builds it); `cos` and `sin` are `[b, t, hd]`.
    pub(crate) fn rope(x: &[f32], cos: &[f32], sin: &[f32], dims: [usize; 4]) -> Vec<f32> {
        let [_, t, heads, hd] = dims;
        let half = hd / 2;
        let mut y = vec![0.0; x.len()];
        // One task per (batch row, head): `t` output rows of `hd` (several per rayon task when
        // they are short, as in a decoding step).
        y.par_chunks_mut(t * hd)
            .with_min_len(rows_per_task(t * hd))
            .enumerate()
            .for_each(|(bh, y)| {
            let (r, h) = (bh / heads, bh % heads);
            for (i, y) in y.chunks_mut(hd).enumerate() {
                let x = &x[((r * t + i) * heads + h) * hd..][..hd];
                let c = &cos[(r * t + i) * hd..][..hd];
                let s = &sin[(r * t + i) * hd..][..hd];
                for j in 0..half {
                    y[j] = x[j] * c[j] + x[j + half] * s[j];
                    y[j + half] = x[j + half] * c[j + half] + x[j] * s[j + half];
                }
            }
        });
        y
    }
}

multiversion! {
    /// The backward of [`rope`]: `dy [b, heads, t, hd]` → `dx [b, t, heads, hd]` with
    /// `dx[j] = dy[j]·cos[j] + dy[j ± hd/2]·sin[j ± hd/2]`.
    pub(crate) fn rope_backward(dy: &[f32], cos: &[f32], sin: &[f32], dims: [usize; 4]) -> Vec<f32> {
        let [_, t, heads, hd] = dims;
        let half = hd / 2;
        let mut dx = vec![0.0; dy.len()];
        // One task per (batch row, position): `heads` rows of `hd`.
        dx.par_chunks_mut(heads * hd)
            .enumerate()
            .for_each(|(ri, dx)| {
                let (r, i) = (ri / t, ri % t);
                let c = &cos[ri * hd..][..hd];
                let s = &sin[ri * hd..][..hd];
                for (h, dx) in dx.chunks_mut(hd).enumerate() {
                    let dy = &dy[((r * heads + h) * t + i) * hd..][..hd];
                    for j in 0..half {
                        dx[j] = dy[j] * c[j] + dy[j + half] * s[j + half];
                        dx[j + half] = dy[j + half] * c[j + half] + dy[j] * s[j];
                    }
                }
            });
        dx
    }
}

multiversion! {
    /// Causal softmax in place over score rows of length `t`, `scale` applied first: row `q` of
    /// each `[rows, t]` block is query position `q % t` and keeps keys `0..=q % t`; the masked
    /// keys become exactly 0 (their exponentials are never computed).
    pub(crate) fn causal_softmax(scores: &mut [f32], t: usize, scale: f32) {
        let per_task = rows_per_task(t).min(t);
        scores
            .par_chunks_mut(t * per_task)
            .enumerate()
            .for_each(|(task, rows)| {
                for (k, row) in rows.chunks_mut(t).enumerate() {
                    let q = (task * per_task + k) % t;
                    let (live, masked) = row.split_at_mut(q + 1);
                    let max = live.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) * scale;
                    for v in live.iter_mut() {
                        *v = exp(*v * scale - max);
                    }
                    let norm = 1.0 / sum(live);
                    for v in live.iter_mut() {
                        *v *= norm;
                    }
                    masked.fill(0.0);
                }
            });
    }
}

multiversion! {
    /// The backward of [`causal_softmax`] in place: `dp` becomes
    /// `ds = scale · p · (dp − Σ p·dp)` on the live keys, 0 on the masked ones.
    pub(crate) fn causal_softmax_backward(p: &[f32], dp: &mut [f32], t: usize, scale: f32) {
        let per_task = rows_per_task(t).min(t);
        dp.par_chunks_mut(t * per_task)
            .zip(p.par_chunks(t * per_task))
            .enumerate()
            .for_each(|(task, (dp, p))| {
                for (k, (dp, p)) in dp.chunks_mut(t).zip(p.chunks(t)).enumerate() {
                    let q = (task * per_task + k) % t;
                    let (live, masked) = dp.split_at_mut(q + 1);
                    let p = &p[..=q];
                    let dp_p = dot(live, p);
                    for (d, &p) in live.iter_mut().zip(p) {
                        *d = scale * p * (*d - dp_p);
                    }
                    masked.fill(0.0);
                }
            });
    }
}

multiversion! {
    /// Attention over a KV cache, for inference (a prefill, a decoding step, new tokens after
    /// cached ones): `q [b, heads, t, hd]` (the `t` new tokens of each row, RoPE applied), `k`,
    /// `v [b, kv_heads, cap, hd]` (the cache: its first `len` slots, the new tokens last, are
    /// live; `cap ≥ len` is read off the slices' length) → `[b, heads, t, hd]`. New
    /// token `i` sits at slot `len − t + i` and attends to slots `pads[r]..=len − t + i` (its
    /// row's left padding is masked, and so is the future); a padding slot's own output is 0.
    /// Query head `kv·g + j` uses KV head `kv`. Per row, head and token, the scores, their
    /// softmax and the weighted sum run over the live slots in slot order, so a row's result
    /// does not depend on the other rows, on how much padding it carries, or on how its tokens
    /// were split between passes (a prefill's last token gets the bits a decoding step would).
    pub(crate) fn cached_attention(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        pads: &[usize],
        dims: [usize; 6],
        scale: f32,
    ) -> Vec<f32> {
        let [b, heads, kv_heads, t, len, hd] = dims;
        let g = heads / kv_heads;
        let cap = k.len() / (b * kv_heads * hd).max(1);
        assert!(
            cap >= len && k.len() == b * kv_heads * cap * hd && v.len() == k.len(),
            "cached attention: a cache of {} and {} values for {len} slots",
            k.len(),
            v.len()
        );
        let mut out = vec![0.0; q.len()];
        // One task per row and KV head (its `g` query heads share the transposed keys), several
        // of them per rayon task when they are small (a decoding step over a short cache):
        // waking a thread costs more than their work.
        let per_task = (1 << 16) / (g * t * len * hd).max(1);
        out.par_chunks_mut(g * t * hd)
            .zip(q.par_chunks(g * t * hd))
            .with_min_len(per_task.max(1))
            .enumerate()
            .for_each(|(rkv, (out, q))| {
                let r = rkv / kv_heads;
                let base = rkv * cap * hd;
                let (k, v) = (&k[base..][..len * hd], &v[base..][..len * hd]);
                let pad = pads[r].min(len);
                // With several new tokens (a prefill), the keys are transposed, `[hd, len]`, so
                // that a query's scores run along the slots, sixteen at a time in registers; a
                // decoding step (or two or three new tokens) reads each key in place. Both give each slot
                // the bits of `dot(k[j], q)` ([`scores_along_slots`]).
                let kt = (t >= 4).then(|| {
                    let mut kt = vec![0.0f32; hd * len];
                    for (j, row) in k.chunks(hd).enumerate().skip(pad) {
                        for (d, &value) in row.iter().enumerate() {
                            kt[d * len + j] = value;
                        }
                    }
                    kt
                });
                let mut scores = vec![0.0f32; len];
                for (gi, (out, q)) in out.chunks_mut(hd).zip(q.chunks(hd)).enumerate() {
                    let slot = len - t + gi % t;
                    if slot < pad {
                        out.fill(0.0);
                        continue;
                    }
                    // Slot `j`'s score is `dot(k[j], q) · scale`, its probability
                    // `exp(s − max) / Σ exp`, and output lane `d` the sum of the probabilities
                    // times `v[j][d]` in slot order: the same operations for every slot whatever
                    // the row's padding or the number of new tokens.
                    let live = &mut scores[pad..=slot];
                    let done = match &kt {
                        Some(kt) => scores_along_slots(q, kt, len, pad, live, scale),
                        None => 0,
                    };
                    for (s, key) in live.iter_mut().zip(k.chunks(hd).skip(pad)).skip(done) {
                        *s = dot(key, q) * scale;
                    }
                    let max = max_of(live);
                    for s in live.iter_mut() {
                        *s = exp(*s - max);
                    }
                    let norm = 1.0 / sum(live);
                    for s in live.iter_mut() {
                        *s *= norm;
                    }
                    let values = &v[pad * hd..];
                    // Every block of sixteen lanes in one pass over the slots: independent sums
                    // the CPU overlaps, each still in slot order.
                    let lanes = match hd / SLOTS {
                        8 => weighted_sum::<8>(live, values, hd, out),
                        4 => weighted_sum::<4>(live, values, hd, out),
                        2 => weighted_sum::<2>(live, values, hd, out),
                        _ => weighted_sum::<1>(live, values, hd, out),
                    };
                    for (d, o) in out.iter_mut().enumerate().skip(lanes) {
                        let mut acc = 0.0f32;
                        for (&p, row) in live.iter().zip(values.chunks(hd)) {
                            acc += p * row[d];
                        }
                        *o = acc;
                    }
                }
            });
        out
    }
}

/// The scores `dot(k[j], q) · scale` of the first whole blocks of [`SLOTS`] live slots from the
/// transposed keys `kt [hd, len]` (the row's live slots start at `pad`), bit for bit as [`dot`]
/// computes them: eight partial sums over `d ≡ i (mod 8)` in `d` order, the tail of `hd` past
/// the last multiple of 8 summed on its own, combined in [`dot`]'s order. Returns how many
/// slots it scored (the rest are left to [`dot`]).
#[inline(always)]
fn scores_along_slots(
    q: &[f32],
    kt: &[f32],
    len: usize,
    pad: usize,
    live: &mut [f32],
    scale: f32,
) -> usize {
    let hd = q.len();
    let eights = hd / 8 * 8;
    let full = live.len() / SLOTS * SLOTS;
    for c in (0..full).step_by(SLOTS) {
        let j0 = pad + c;
        let mut acc = [[0.0f32; SLOTS]; 8];
        for d0 in (0..eights).step_by(8) {
            for (i, acc) in acc.iter_mut().enumerate() {
                let qd = q[d0 + i];
                let keys: &[f32; SLOTS] = kt[(d0 + i) * len + j0..][..SLOTS]
                    .try_into()
                    .expect("a full block");
                for l in 0..SLOTS {
                    acc[l] += keys[l] * qd;
                }
            }
        }
        // `dot`'s tail is an iterator's `sum()`, which starts from -0.0.
        let mut tail = [-0.0f32; SLOTS];
        for (d, &qd) in q.iter().enumerate().skip(eights) {
            let keys = &kt[d * len + j0..][..SLOTS];
            for l in 0..SLOTS {
                tail[l] += keys[l] * qd;
            }
        }
        let block = &mut live[c..c + SLOTS];
        for l in 0..SLOTS {
            block[l] = ((acc[0][l] + acc[4][l])
                + (acc[1][l] + acc[5][l])
                + (acc[2][l] + acc[6][l])
                + (acc[3][l] + acc[7][l])
                + tail[l])
                * scale;
        }
    }
    full
}

/// `out[d] = Σ_j live[j] · values[j·hd + d]` in slot order for the first `N` blocks of
/// [`SLOTS`] lanes, all in one pass over the slots; returns how many lanes it wrote.
#[inline(always)]
fn weighted_sum<const N: usize>(live: &[f32], values: &[f32], hd: usize, out: &mut [f32]) -> usize {
    let lanes = (hd / SLOTS).min(N) * SLOTS;
    if lanes < N * SLOTS {
        return 0;
    }
    let mut acc = [[0.0f32; SLOTS]; N];
    for (&p, row) in live.iter().zip(values.chunks(hd)) {
        for (n, acc) in acc.iter_mut().enumerate() {
            let x: &[f32; SLOTS] = row[n * SLOTS..][..SLOTS].try_into().expect("a full block");
            for l in 0..SLOTS {
                acc[l] += p * x[l];
            }
        }
    }
    for (n, acc) in acc.iter().enumerate() {
        out[n * SLOTS..][..SLOTS].copy_from_slice(acc);
    }
    lanes
}

/// Slots a query's scores are computed for at once, in registers ([`cached_attention`]).
const SLOTS: usize = 16;

/// The largest of `a` in eight interleaved partial maxima (`-inf` when empty).
#[inline(always)]
pub(super) fn max_of(a: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 8];
    let chunks = a.chunks_exact(8);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    for x in chunks {
        for i in 0..8 {
            acc[i] = acc[i].max(x[i]);
        }
    }
    acc.iter().fold(tail, |m, &x| m.max(x))
}

/// `[b, heads, t, hd]` → `[b, t, heads·hd]`.
pub(crate) fn heads_last(x: &[f32], dims: [usize; 4]) -> Vec<f32> {
    let [_, heads, t, hd] = dims;
    let mut y = vec![0.0; x.len()];
    y.par_chunks_mut(heads * hd)
        .enumerate()
        .for_each(|(ri, y)| {
            let (r, i) = (ri / t, ri % t);
            for (h, y) in y.chunks_mut(hd).enumerate() {
                y.copy_from_slice(&x[((r * heads + h) * t + i) * hd..][..hd]);
            }
        });
    y
}

/// `[b, t, heads·hd]` → `[b, heads, t, hd]`, the inverse of [`heads_last`].
pub(crate) fn heads_first(x: &[f32], dims: [usize; 4]) -> Vec<f32> {
    let [_, heads, t, hd] = dims;
    let mut y = vec![0.0; x.len()];
    y.par_chunks_mut(t * hd).enumerate().for_each(|(rh, y)| {
        let (r, h) = (rh / heads, rh % heads);
        for (i, y) in y.chunks_mut(hd).enumerate() {
            y.copy_from_slice(&x[(r * t + i) * heads * hd + h * hd..][..hd]);
        }
    });
    y
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A deterministic pseudo-random vector in [-scale, scale].
    pub(in crate::fused) fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s as f32 / u32::MAX as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    #[test]
    fn exp_matches_libm() {
        for i in -8700..=8800 {
            let x = i as f32 / 100.0;
            let (ours, libm) = (exp(x), x.exp());
            assert!(
                ((ours - libm) / libm).abs() < 4e-7,
                "exp({x}) = {ours}, libm {libm}"
            );
        }
        // Clamped, never infinite or NaN.
        assert!(exp(-1e30) >= 0.0 && exp(-1e30) < 1e-37);
        assert!(exp(1e30).is_finite());
    }

    /// Σ dy·f(x + h·e_i) − Σ dy·f(x − h·e_i) over 2h, for each i: the directional derivative
    /// that `backward(dy)` must give.
    pub(in crate::fused) fn numeric(
        f: impl Fn(&[f32]) -> Vec<f32>,
        x: &[f32],
        dy: &[f32],
    ) -> Vec<f32> {
        let h = 1e-2f32;
        (0..x.len())
            .map(|i| {
                let (mut a, mut b) = (x.to_vec(), x.to_vec());
                a[i] += h;
                b[i] -= h;
                let (fa, fb) = (f(&a), f(&b));
                let dot = |f: &[f32]| -> f64 {
                    f.iter()
                        .zip(dy)
                        .map(|(f, d)| f64::from(*f) * f64::from(*d))
                        .sum()
                };
                ((dot(&fa) - dot(&fb)) / (2.0 * f64::from(h))) as f32
            })
            .collect()
    }

    pub(in crate::fused) fn assert_close(ours: &[f32], reference: &[f32], tol: f32, what: &str) {
        assert_eq!(ours.len(), reference.len(), "{what}: length");
        for (i, (a, b)) in ours.iter().zip(reference).enumerate() {
            assert!(
                (a - b).abs() <= tol * (1.0 + b.abs()),
                "{what}[{i}]: {a} vs {b}"
            );
        }
    }

    #[test]
    fn rms_norm_matches_its_formula_and_finite_differences() {
        let (rows, n) = (5, 8);
        let x = values(rows * n, 1, 2.0);
        let w = values(n, 2, 1.0);
        let dy = values(rows * n, 3, 1.0);
        let (y, inv) = rms_norm(&x, &w, 1e-6);
        for r in 0..rows {
            let row = &x[r * n..][..n];
            let ms: f32 = row.iter().map(|v| v * v).sum::<f32>() / n as f32;
            for j in 0..n {
                let want = row[j] / (ms + 1e-6).sqrt() * w[j];
                assert!((y[r * n + j] - want).abs() < 1e-5);
            }
        }
        let (dx, dw) = rms_norm_backward(&x, &w, &inv, &dy);
        assert_close(
            &dx,
            &numeric(|x| rms_norm(x, &w, 1e-6).0, &x, &dy),
            2e-2,
            "dx",
        );
        assert_close(
            &dw,
            &numeric(|w| rms_norm(&x, w, 1e-6).0, &w, &dy),
            2e-2,
            "dw",
        );
    }

    #[test]
    fn rms_norm_backward_has_the_same_bits_with_any_number_of_threads() {
        // Enough rows for many rayon tasks, whose partial gain gradients are summed.
        let (rows, n) = (3000, 32);
        let x = values(rows * n, 14, 2.0);
        let w = values(n, 15, 1.0);
        let dy = values(rows * n, 16, 1.0);
        let (_, inv) = rms_norm(&x, &w, 1e-6);
        let run = |threads| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            pool.install(|| rms_norm_backward(&x, &w, &inv, &dy))
        };
        let one = run(1);
        for threads in [2, 3, 8] {
            assert_eq!(run(threads), one, "{threads} threads");
        }
    }

    #[test]
    fn swiglu_matches_finite_differences() {
        let g = values(40, 4, 4.0);
        let u = values(40, 5, 2.0);
        let dz = values(40, 6, 1.0);
        let z = swiglu(&g, &u);
        for i in 0..40 {
            let want = g[i] / (1.0 + (-g[i]).exp()) * u[i];
            assert!((z[i] - want).abs() < 1e-5, "{} vs {want}", z[i]);
        }
        let (dg, du) = swiglu_backward(&g, &u, &dz);
        assert_close(&dg, &numeric(|g| swiglu(g, &u), &g, &dz), 2e-2, "dg");
        assert_close(&du, &numeric(|u| swiglu(&g, u), &u, &dz), 2e-2, "du");
    }

    /// The packed form (`[gate | up]` per row) gives the separate form's bits, both ways.
    #[test]
    fn packed_swiglu_is_swiglu_of_the_two_halves_bit_for_bit() {
        for (rows, width) in [(1, 1), (3, 7), (5, 384), (41, 500)] {
            let g = values(rows * width, 21, 4.0);
            let u = values(rows * width, 22, 2.0);
            let dz = values(rows * width, 23, 1.0);
            let gu: Vec<f32> = g
                .chunks(width)
                .zip(u.chunks(width))
                .flat_map(|(g, u)| g.iter().chain(u).copied())
                .collect();
            assert_eq!(swiglu_packed(&gu, width), swiglu(&g, &u), "{rows}x{width}");
            let (dg, du) = swiglu_backward(&g, &u, &dz);
            let want: Vec<f32> = dg
                .chunks(width)
                .zip(du.chunks(width))
                .flat_map(|(g, u)| g.iter().chain(u).copied())
                .collect();
            assert_eq!(
                swiglu_packed_backward(&gu, &dz, width),
                want,
                "{rows}x{width}"
            );
        }
    }

    #[test]
    fn rope_moves_heads_and_its_backward_is_the_transpose() {
        let dims = [2, 3, 2, 4];
        let n = dims.iter().product();
        let x = values(n, 7, 1.0);
        let cos = values(2 * 3 * 4, 8, 1.0);
        let sin = values(2 * 3 * 4, 9, 1.0);
        let y = rope(&x, &cos, &sin, dims);
        // Row 1, position 2, head 1, component 0 (first half: partner 0 + 2).
        let xi = |r: usize, i: usize, h: usize, j: usize| x[((r * 3 + i) * 2 + h) * 4 + j];
        let ci = |r: usize, i: usize, j: usize| (r * 3 + i) * 4 + j;
        let want = xi(1, 2, 1, 0) * cos[ci(1, 2, 0)] + xi(1, 2, 1, 2) * sin[ci(1, 2, 0)];
        assert!((y[((2 + 1) * 3 + 2) * 4] - want).abs() < 1e-6);
        let dy = values(n, 10, 1.0);
        let dx = rope_backward(&dy, &cos, &sin, dims);
        assert_close(
            &dx,
            &numeric(|x| rope(x, &cos, &sin, dims), &x, &dy),
            1e-3,
            "dx",
        );
    }

    #[test]
    fn causal_softmax_masks_the_future_and_its_backward_matches() {
        let t = 5;
        let s = values(2 * t * t, 11, 3.0);
        let softmax = |s: &[f32]| {
            let mut p = s.to_vec();
            causal_softmax(&mut p, t, 0.5);
            p
        };
        let p = softmax(&s);
        for (row, p) in p.chunks(t).enumerate() {
            let q = row % t;
            let live: Vec<f32> = s[row * t..][..=q].iter().map(|v| (v * 0.5).exp()).collect();
            let sum: f32 = live.iter().sum();
            for j in 0..t {
                let want = if j <= q { live[j] / sum } else { 0.0 };
                assert!((p[j] - want).abs() < 1e-6, "row {row} key {j}");
            }
        }
        let dp = values(2 * t * t, 12, 1.0);
        let mut ds = dp.clone();
        causal_softmax_backward(&p, &mut ds, t, 0.5);
        assert_close(&ds, &numeric(softmax, &s, &dp), 1e-3, "ds");
    }

    /// The attention of `t` new tokens written out in f64: token `i` of row `r` (at slot
    /// `len − t + i`) over slots `pads[r]..=len − t + i`, `[b, heads, t, hd]`.
    #[allow(clippy::too_many_arguments)] // the reference mirrors the kernel's arguments
    fn attention_by_hand(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        pads: &[usize],
        [b, heads, kvh, t, len, hd]: [usize; 6],
        scale: f32,
    ) -> Vec<f64> {
        let g = heads / kvh;
        let mut out = vec![0.0; b * heads * t * hd];
        for r in 0..b {
            for h in 0..heads {
                let at = |x: &[f32], j: usize, d: usize| x[((r * kvh + h / g) * len + j) * hd + d];
                for i in 0..t {
                    let slot = len - t + i;
                    if slot < pads[r] {
                        continue;
                    }
                    let qi = |d: usize| q[((r * heads + h) * t + i) * hd + d];
                    let w: Vec<f64> = (pads[r]..=slot)
                        .map(|j| {
                            let s: f64 = (0..hd).map(|d| f64::from(qi(d) * at(k, j, d))).sum();
                            (f64::from(scale) * s).exp()
                        })
                        .collect();
                    let total: f64 = w.iter().sum();
                    for d in 0..hd {
                        out[((r * heads + h) * t + i) * hd + d] = (pads[r]..=slot)
                            .zip(&w)
                            .map(|(j, w)| w / total * f64::from(at(v, j, d)))
                            .sum();
                    }
                }
            }
        }
        out
    }

    #[test]
    fn cached_attention_is_the_softmax_weighted_sum_over_the_live_slots() {
        // One decoding step (t = 1), a prefill (t = len) and new tokens after cached ones; a
        // short cache, and one long enough for whole blocks of sixteen slots and lanes.
        for (len, hd, t) in [
            (5, 3, 1),
            (5, 3, 5),
            (5, 3, 3),
            (37, 20, 1),
            (37, 20, 37),
            (37, 20, 9),
        ] {
            let (b, heads, kvh) = (2, 4, 2);
            let dims = [b, heads, kvh, t, len, hd];
            let q = values(b * heads * t * hd, 17, 1.0);
            let k = values(b * kvh * len * hd, 18, 1.0);
            let v = values(b * kvh * len * hd, 19, 1.0);
            let pads = [0, 2];
            let out = cached_attention(&q, &k, &v, &pads, dims, 0.7);
            let want = attention_by_hand(&q, &k, &v, &pads, dims, 0.7);
            for (i, (got, want)) in out.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*got) - want).abs() < 1e-5,
                    "t {t} at {i}: {got} vs {want}"
                );
            }
            // The padded row's result does not depend on what sits in its padding.
            let mut k2 = k.clone();
            k2[(kvh * len) * hd] = 1e6;
            assert_eq!(
                cached_attention(&q, &k2, &v, &pads, dims, 0.7),
                out,
                "t {t}"
            );
        }
    }

    /// A row's bits do not depend on its padding or on how its tokens were split between a
    /// prefill and decoding steps: the invariants generation in batches relies on.
    #[test]
    fn a_row_s_attention_bits_do_not_depend_on_padding_or_on_the_split() {
        // 37 slots: two whole blocks of sixteen scored from the transposed keys and five by
        // `dot`; hd 20: a tail past the last multiple of 8, and four lanes past the block of 16.
        let (heads, kvh, len, hd) = (4, 2, 37, 20);
        let q = values(heads * len * hd, 21, 1.0);
        let k = values(kvh * len * hd, 22, 1.0);
        let v = values(kvh * len * hd, 23, 1.0);
        let alone = cached_attention(&q, &k, &v, &[0], [1, heads, kvh, len, len, hd], 0.3);
        // The same row behind 3 slots of padding (garbage in them), beside another row.
        let pad = 3;
        let padded = |x: &[f32], per_slot: usize, lanes: usize| -> Vec<f32> {
            let mut out = Vec::new();
            for lane in x.chunks(len * per_slot).take(lanes) {
                out.extend(std::iter::repeat_n(7.5, pad * per_slot));
                out.extend_from_slice(lane);
            }
            out
        };
        let (qp, kp, vp) = (
            padded(&q, hd, heads),
            padded(&k, hd, kvh),
            padded(&v, hd, kvh),
        );
        let other = |x: &[f32]| x.iter().map(|v| v * 0.5 + 1.0).collect::<Vec<f32>>();
        let two = |x: &[f32]| [x.to_vec(), other(x)].concat();
        let both = cached_attention(
            &two(&qp),
            &two(&kp),
            &two(&vp),
            &[pad, 0],
            [2, heads, kvh, len + pad, len + pad, hd],
            0.3,
        );
        let mine = &both[..heads * (len + pad) * hd];
        for h in 0..heads {
            let got = &mine[(h * (len + pad) + pad) * hd..][..len * hd];
            assert_eq!(got, &alone[h * len * hd..][..len * hd], "head {h}");
        }
        // The last token as a decoding step over the cache of the first len − 1.
        let last: Vec<f32> = q
            .chunks(len * hd)
            .flat_map(|h| h[(len - 1) * hd..].to_vec())
            .collect();
        let step = cached_attention(&last, &k, &v, &[0], [1, heads, kvh, 1, len, hd], 0.3);
        for h in 0..heads {
            assert_eq!(
                &step[h * hd..][..hd],
                &alone[(h * len + len - 1) * hd..][..hd]
            );
        }
        // The same step over a cache with room for 11 more slots (garbage in them).
        let roomy = |x: &[f32]| -> Vec<f32> {
            x.chunks(len * hd)
                .flat_map(|lane| [lane, &[-3.25; 11 * 20][..]].concat())
                .collect()
        };
        let in_room = cached_attention(
            &last,
            &roomy(&k),
            &roomy(&v),
            &[0],
            [1, heads, kvh, 1, len, hd],
            0.3,
        );
        assert_eq!(in_room, step);
    }

    #[test]
    #[should_panic(expected = "cached attention: a cache of")]
    fn a_cache_shorter_than_its_slots_panics() {
        let q = values(2 * 4, 1, 1.0);
        let kv = values(5 * 4, 2, 1.0);
        cached_attention(&q, &kv, &kv, &[0], [1, 2, 1, 1, 6, 4], 0.3);
    }

    /// Every kernel at every level this CPU has gives the baseline's bits (issue #72): the
    /// wide copies change how many lanes run at once, not what each lane computes.
    #[test]
    fn every_level_gives_the_baseline_s_bits() {
        use crate::fused::cpu::{Level, cap, detected};
        use crate::fused::logits::{token_logprobs, token_logprobs_backward};
        let (rows, n) = (37, 72);
        let x = values(rows * n, 11, 3.0);
        let w = values(n, 12, 1.0);
        let dy = values(rows * n, 13, 1.0);
        let dims = [2, 5, 3, 24]; // [b, t, heads, hd]
        let m = 2 * 5 * 3 * 24;
        let (rx, cos, sin) = (
            values(m, 14, 1.0),
            values(2 * 5 * 24, 15, 1.0),
            values(2 * 5 * 24, 16, 1.0),
        );
        let t = 9;
        let scores = values(4 * t * t, 17, 4.0);
        let q = values(2 * 4 * 16, 18, 1.0);
        let kv = values(2 * 2 * 7 * 16, 19, 1.0);
        let vv = values(2 * 2 * 7 * 16, 20, 1.0);
        let run = || {
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
            let (y, inv) = rms_norm(&x, &w, 1e-6);
            let (dx, dw) = rms_norm_backward(&x, &w, &inv, &dy);
            let z = swiglu(&x, &dy);
            let (dg, du) = swiglu_backward(&x, &dy, &w.repeat(rows));
            let zp = swiglu_packed(&x, n / 2);
            let dgu = swiglu_packed_backward(&x, &dy[..rows * n / 2], n / 2);
            let r = rope(&rx, &cos, &sin, dims);
            let dr = rope_backward(&r, &cos, &sin, [2, 5, 3, 24]);
            let mut p = scores.clone();
            causal_softmax(&mut p, t, 0.25);
            let mut dp = scores.clone();
            causal_softmax_backward(&p, &mut dp, t, 0.25);
            let a = cached_attention(&q, &kv, &vv, &[0, 3], [2, 4, 2, 1, 7, 16], 0.25);
            let targets: Vec<usize> = (0..rows).map(|r| (r * 7) % n).collect();
            let (lp, stats) = token_logprobs(&x, n, &targets);
            let dl = token_logprobs_backward(&x, n, &targets, &lp, &stats, &dy[..2 * rows]);
            [
                y, inv, dx, dw, z, dg, du, zp, dgu, r, dr, p, dp, a, lp, stats, dl,
            ]
            .map(|v| bits(&v))
        };
        let best = detected();
        let mut levels = vec![Level::Base];
        if best >= Level::Avx2 {
            levels.push(Level::Avx2);
        }
        if best >= Level::Avx512 {
            levels.push(Level::Avx512);
        }
        assert_eq!(cap(Level::Base), Level::Base);
        let base = run();
        for level in levels {
            assert_eq!(cap(level), level);
            assert!(
                run() == base,
                "level {} differs from the baseline",
                level.name()
            );
        }
        cap(best);
    }

    #[test]
    fn heads_first_inverts_heads_last() {
        let dims = [2, 3, 4, 5];
        let x = values(2 * 3 * 4 * 5, 13, 1.0);
        let y = heads_last(&x, dims);
        // [r=1, h=2, i=3, j=4] lands at [r=1, i=3, h=2, j=4].
        assert_eq!(y[((4 + 3) * 3 + 2) * 5 + 4], x[((3 + 2) * 4 + 3) * 5 + 4]);
        assert_eq!(heads_first(&y, dims), x);
    }
}
