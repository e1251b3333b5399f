//! Fused CPU kernels for the decoder on Burn's `flex` backend, with hand-written backward
//! passes registered in Burn's autodiff graph.
//!
//! Burn composes RMSNorm, SwiGLU, RoPE and the attention softmax from elementwise ops, each a
//! full pass over an activation-sized tensor forward and more backward, and its `exp` is
//! libm's scalar one, which on masked attention scores takes the slow underflow path. On two
//! cores that overhead cost more than the matmuls (`docs/benchmarks.md`, "policy"). Here each
//! is one op: [`rms_norm`], [`swiglu`], [`rope`] and [`causal_attention`] run the
//! loops of `kernels` (rayon over rows, a vectorisable polynomial `exp`, the causal half
//! only) and the attention's matmuls through the GEMM flex runs, over the causal blocks only
//! ([`causal`]). On an autodiff device they record one node each whose backward is written
//! out in `kernels`. [`cached_attention`] is
//! inference's attention over the KV cache (a prefill, a decoding step), one loop per token.
//! [`token_logprobs`] is the head's log-softmax over the vocabulary read at the targets, with
//! each position's entropy, and [`token_logprobs_grad`] its backward for the
//! vocabulary-bounded loss, which recomputes the logits (`crate::logprobs`).
//!
//! Every function returns `None` when its inputs are not `f32` tensors on `flex` (plain or
//! under `Autodiff<Flex>` without gradient checkpointing): the caller then runs Burn's
//! composed ops, which stay the reference. `model.rs` uses them unless
//! [`crate::Qwen::with_fused_kernels`] turned them off; the tests below compare every
//! parameter's gradient with them on and off.

mod causal;
pub mod cpu;
mod gemm;
mod kernels;
mod logits;

use self::gemm::View;

use std::fmt;
use std::sync::Arc;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::ops::FloatTensorOps;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Flex};
use burn::tensor::{DType, Int, Shape, Tensor, TensorData};

type Ad = Autodiff<Flex, NoCheckpointing>;
type AdTensor = FloatTensor<Ad>;

/// A float tensor as one of the two primitives the kernels run on.
enum Prim {
    /// Under autodiff: the tracked tensor (its node and its flex primitive).
    Tracked(AdTensor),
    /// A plain flex tensor.
    Plain(FlexTensor),
}

/// `t` as a primitive the kernels accept, or `None` (another backend, another dtype).
fn prim<const D: usize>(t: &Tensor<D>) -> Option<Prim> {
    if t.dtype() != DType::F32 {
        return None;
    }
    if let Ok(p) = t.clone().try_into_primitive::<Ad>() {
        return Some(Prim::Tracked(p));
    }
    t.clone().try_into_primitive::<Flex>().ok().map(Prim::Plain)
}

/// Whether the kernels run on `t` (an `f32` tensor on flex, plain or tracked): for a caller that
/// must choose its path before it has the kernels' input.
pub(crate) fn runs_on<const D: usize>(t: &Tensor<D>) -> bool {
    prim(t).is_some()
}

/// The contiguous `f32` data of a flex tensor (a copy only when it is a strided view).
fn host(t: &FlexTensor) -> std::borrow::Cow<'_, [f32]> {
    match t.as_slice::<f32>() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(
            t.to_contiguous()
                .as_slice::<f32>()
                .expect("contiguous")
                .to_vec(),
        ),
    }
}

fn flex(data: Vec<f32>, shape: &[usize]) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(data, shape.to_vec()))
}

fn shape_of(t: &FlexTensor) -> Vec<usize> {
    t.layout().shape().to_vec()
}

/// Registers `grad` for a parent node that wants one (`ops.parents[i]`).
macro_rules! register {
    ($grads:expr, $parent:expr, $grad:expr) => {
        if let Some(node) = $parent {
            $grads.register::<Flex>(node.id, $grad);
        }
    };
}

/// Records a compute-bound op with `backward` over `inputs`: `forward` gives its output and
/// the state the backward needs (dropped when nothing upstream is tracked).
fn record<const N: usize, O: Backward<Flex, N>>(
    op: O,
    inputs: [&AdTensor; N],
    forward: impl FnOnce() -> (FlexTensor, O::State),
) -> AdTensor {
    match op
        .prepare::<NoCheckpointing>(inputs.map(|t| t.node()))
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let (out, state) = forward();
            prep.finish(state, out)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward().0),
    }
}

/// Host tables shared by every layer of one pass (RoPE's cos and signed sin).
#[derive(Clone)]
pub(crate) struct Table(pub(crate) Arc<Vec<f32>>);

impl fmt::Debug for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Table({} values)", self.0.len())
    }
}

// ---------------------------------------------------------------------------------------------
// RMSNorm

/// `x · w / sqrt(mean(x²) + eps)` over the last axis (`w` as wide as it).
pub(crate) fn rms_norm<const D: usize>(
    x: &Tensor<D>,
    w: &Tensor<1>,
    eps: f64,
) -> Option<Tensor<D>> {
    let eps = eps as f32;
    match (prim(x)?, prim(w)?) {
        (Prim::Plain(x), Prim::Plain(w)) => {
            let (y, _) = kernels::rms_norm(&host(&x), &host(&w), eps);
            Some(Tensor::from_primitive::<Flex>(flex(y, &shape_of(&x))))
        }
        (Prim::Tracked(x), Prim::Tracked(w)) => {
            let out = record(RmsNorm, [&x, &w], || {
                let (xp, wp) = (x.primitive().clone(), w.primitive().clone());
                let (y, inv) = kernels::rms_norm(&host(&xp), &host(&wp), eps);
                let y = flex(y, &shape_of(&xp));
                (
                    y,
                    RmsNormState {
                        x: xp,
                        w: wp,
                        inv: Table(Arc::new(inv)),
                    },
                )
            });
            Some(Tensor::from_primitive::<Ad>(out))
        }
        _ => None,
    }
}

#[derive(Debug)]
struct RmsNorm;

#[derive(Debug, Clone)]
struct RmsNormState {
    x: FlexTensor,
    w: FlexTensor,
    inv: Table,
}

impl Backward<Flex, 2> for RmsNorm {
    type State = RmsNormState;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<Flex>(&ops.node);
        let RmsNormState { x, w, inv } = ops.state;
        let (dx, dw) = kernels::rms_norm_backward(&host(&x), &host(&w), &inv.0, &host(&dy));
        let [px, pw] = ops.parents;
        register!(grads, px, flex(dx, &shape_of(&x)));
        register!(grads, pw, flex(dw, &shape_of(&w)));
    }
}

// ---------------------------------------------------------------------------------------------
// SwiGLU

/// `silu(g) · u`, elementwise (same shapes).
pub(crate) fn swiglu<const D: usize>(g: &Tensor<D>, u: &Tensor<D>) -> Option<Tensor<D>> {
    if g.dims() != u.dims() {
        return None;
    }
    match (prim(g)?, prim(u)?) {
        (Prim::Plain(g), Prim::Plain(u)) => {
            let z = kernels::swiglu(&host(&g), &host(&u));
            Some(Tensor::from_primitive::<Flex>(flex(z, &shape_of(&g))))
        }
        (Prim::Tracked(g), Prim::Tracked(u)) => {
            let out = record(Swiglu, [&g, &u], || {
                let (gp, up) = (g.primitive().clone(), u.primitive().clone());
                let z = flex(kernels::swiglu(&host(&gp), &host(&up)), &shape_of(&gp));
                (z, (gp, up))
            });
            Some(Tensor::from_primitive::<Ad>(out))
        }
        _ => None,
    }
}

#[derive(Debug)]
struct Swiglu;

impl Backward<Flex, 2> for Swiglu {
    type State = (FlexTensor, FlexTensor);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dz = grads.consume::<Flex>(&ops.node);
        let (g, u) = ops.state;
        let (dg, du) = kernels::swiglu_backward(&host(&g), &host(&u), &host(&dz));
        let shape = shape_of(&g);
        let [pg, pu] = ops.parents;
        register!(grads, pg, flex(dg, &shape));
        register!(grads, pu, flex(du, &shape));
    }
}

/// [`swiglu`] of the gate and up projections computed as one product: the last axis of `gu` is
/// `[gate | up]` (even), the result's is half as wide.
pub(crate) fn swiglu_packed<const D: usize>(gu: &Tensor<D>) -> Option<Tensor<D>> {
    let dims = gu.dims();
    let width = dims[D - 1] / 2;
    if width == 0 || !dims[D - 1].is_multiple_of(2) {
        return None;
    }
    let mut out_shape = dims.to_vec();
    out_shape[D - 1] = width;
    match prim(gu)? {
        Prim::Plain(gu) => {
            let z = kernels::swiglu_packed(&host(&gu), width);
            Some(Tensor::from_primitive::<Flex>(flex(z, &out_shape)))
        }
        Prim::Tracked(gu) => {
            let out = record(SwigluPacked, [&gu], || {
                let gp = gu.primitive().clone();
                let z = flex(kernels::swiglu_packed(&host(&gp), width), &out_shape);
                (z, (gp, width))
            });
            Some(Tensor::from_primitive::<Ad>(out))
        }
    }
}

#[derive(Debug)]
struct SwigluPacked;

impl Backward<Flex, 1> for SwigluPacked {
    type State = (FlexTensor, usize);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dz = grads.consume::<Flex>(&ops.node);
        let (gu, width) = ops.state;
        let dgu = kernels::swiglu_packed_backward(&host(&gu), &host(&dz), width);
        let [p] = ops.parents;
        register!(grads, p, flex(dgu, &shape_of(&gu)));
    }
}

// ---------------------------------------------------------------------------------------------
// RoPE

/// Rotary embedding that also moves heads before positions: `x [b, t, heads, hd]` →
/// `[b, heads, t, hd]`; `cos` and `sin` (rotate-half's sign folded in) are `[b, t, hd]`.
pub(crate) fn rope(x: &Tensor<4>, cos: &Table, sin: &Table) -> Option<Tensor<4>> {
    let [b, t, heads, hd] = x.dims();
    if cos.0.len() != b * t * hd || sin.0.len() != b * t * hd || hd % 2 != 0 {
        return None;
    }
    let dims = [b, t, heads, hd];
    let out_shape = [b, heads, t, hd];
    match prim(x)? {
        Prim::Plain(x) => {
            let y = kernels::rope(&host(&x), &cos.0, &sin.0, dims);
            Some(Tensor::from_primitive::<Flex>(flex(y, &out_shape)))
        }
        Prim::Tracked(x) => {
            let out = record(Rope, [&x], || {
                let y = kernels::rope(&host(x.primitive()), &cos.0, &sin.0, dims);
                (flex(y, &out_shape), (cos.clone(), sin.clone(), dims))
            });
            Some(Tensor::from_primitive::<Ad>(out))
        }
    }
}

#[derive(Debug)]
struct Rope;

impl Backward<Flex, 1> for Rope {
    type State = (Table, Table, [usize; 4]);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<Flex>(&ops.node);
        let (cos, sin, dims) = ops.state;
        let dx = kernels::rope_backward(&host(&dy), &cos.0, &sin.0, dims);
        let [px] = ops.parents;
        register!(grads, px, flex(dx, &dims));
    }
}

// ---------------------------------------------------------------------------------------------
// Causal attention

/// `softmax(q·kᵀ · scale, causal) · v` with grouped KV heads, heads moved back after
/// positions: `q [b, heads, t, hd]`, `k`, `v [b, kv_heads, t, hd]` → `[b, t, heads·hd]`.
/// Query head `kv·g + j` (`g = heads / kv_heads`) uses KV head `kv`.
pub(crate) fn causal_attention(
    q: &Tensor<4>,
    k: &Tensor<4>,
    v: &Tensor<4>,
    scale: f32,
) -> Option<Tensor<3>> {
    let [b, h, t, hd] = q.dims();
    let [kb, kvh, kt, khd] = k.dims();
    if v.dims() != k.dims() || kb != b || kt != t || khd != hd || kvh == 0 || h % kvh != 0 {
        return None;
    }
    let geometry = Geometry {
        b,
        h,
        kvh,
        t,
        hd,
        scale,
    };
    match (prim(q)?, prim(k)?, prim(v)?) {
        (Prim::Plain(q), Prim::Plain(k), Prim::Plain(v)) => {
            let (out, _) = attention_forward(&geometry, q, &k, &v);
            Some(Tensor::from_primitive::<Flex>(out))
        }
        (Prim::Tracked(q), Prim::Tracked(k), Prim::Tracked(v)) => {
            let out = record(Attention, [&q, &k, &v], || {
                let (kp, vp) = (k.primitive().clone(), v.primitive().clone());
                let (out, (qg, p)) = attention_forward(&geometry, q.primitive().clone(), &kp, &vp);
                (
                    out,
                    AttentionState {
                        geometry,
                        qg,
                        k: kp,
                        v: vp,
                        p,
                    },
                )
            });
            Some(Tensor::from_primitive::<Ad>(out))
        }
        _ => None,
    }
}

/// Attention over the KV cache for inference (no autodiff node): a prefill, a decoding step, or
/// new tokens after cached ones. `q [b, heads, t, hd]` (RoPE applied), `k`, `v [b, kv_heads,
/// cap, hd]` whose first `len ≤ cap` slots are live, the `t` new tokens last (the rest is the
/// cache's room to grow, never read); row `r`'s first `pads[r]` slots are padding. Returns
/// `[b, t, heads·hd]`. A row's result does not depend on the other rows or on its padding
/// ([`kernels::cached_attention`]).
pub(crate) fn cached_attention(
    q: &Tensor<4>,
    k: &Tensor<4>,
    v: &Tensor<4>,
    len: usize,
    pads: &[usize],
    scale: f32,
) -> Option<Tensor<3>> {
    let [b, h, t, hd] = q.dims();
    let [kb, kvh, cap, khd] = k.dims();
    if v.dims() != k.dims() || kb != b || khd != hd || kvh == 0 || h % kvh != 0 {
        return None;
    }
    if t > len || len > cap {
        return None;
    }
    if pads.len() != b || pads.iter().any(|&p| p >= len) {
        return None;
    }
    let (Prim::Plain(q), Prim::Plain(k), Prim::Plain(v)) = (prim(q)?, prim(k)?, prim(v)?) else {
        return None;
    };
    let out = kernels::cached_attention(
        &host(&q),
        &host(&k),
        &host(&v),
        pads,
        [b, h, kvh, t, len, hd],
        scale,
    );
    // `[b, heads, t, hd]` → `[b, t, heads·hd]` (one token: the same layout).
    let out = if t == 1 {
        out
    } else {
        kernels::heads_last(&out, [b, h, t, hd])
    };
    Some(Tensor::from_primitive::<Flex>(flex(out, &[b, t, h * hd])))
}

// ---------------------------------------------------------------------------------------------
// Linear projections

/// A 2-D flex tensor's buffer and its view, read in place whatever its non-negative strides (a
/// transposed weight, a tied embedding read as the head); `None` for a negative stride.
fn as_matrix(t: &FlexTensor) -> Option<(&[f32], View)> {
    let (shape, strides) = (t.layout().shape(), t.layout().strides());
    if shape.num_dims() != 2 {
        return None;
    }
    let rs = usize::try_from(strides[0]).ok()?;
    let cs = usize::try_from(strides[1]).ok()?;
    let view = View {
        offset: t.layout().start_offset(),
        rows: shape[0],
        cols: shape[1],
        rs,
        cs,
    };
    Some((t.storage::<f32>(), view))
}

/// `x [.., k] · w [k, n]` flattened to rows, into a fresh buffer.
fn linear_product(x: &FlexTensor, w: &FlexTensor) -> Vec<f32> {
    let (ws, wv) = as_matrix(w).expect("checked by the caller");
    let (k, n) = (wv.rows, wv.cols);
    let x = host(x);
    let rows = x.len() / k;
    let mut y = vec![0.0; rows * n];
    gemm::whole_product(
        &mut y,
        View::rows(0, rows, n, n),
        &x,
        View::rows(0, rows, k, k),
        ws,
        wv,
    );
    y
}

/// `x [.., k] · w [k, n]` → `[.., n]` on flex in f32, plain or under autodiff: the product flex's
/// `float_matmul` runs (the same GEMM, the same parallelism), written into a buffer of our own,
/// where flex allocates a zeroed one and copies it once more to align it (about 9% of a
/// training step of the embedded default went to that zeroing and copying). The backward's
/// `dy · wᵀ` and `xᵀ · dy` run the same way, the latter over all rows at once; it keeps `x`
/// only when `w` wants a gradient and `w` only when `x` does. `None` off flex, in another
/// dtype, when the shapes do not chain or are empty, or for a weight with a negative stride.
pub(crate) fn linear<const D: usize>(x: &Tensor<D>, w: &Tensor<2>) -> Option<Tensor<D>> {
    let dims = x.dims();
    let [k, n] = w.dims();
    if D < 2 || dims[D - 1] != k || k == 0 || n == 0 {
        return None;
    }
    let mut out_shape = dims.to_vec();
    out_shape[D - 1] = n;
    let (keep_x, keep_w) = (w.is_tracked(), x.is_tracked());
    match (prim(x)?, prim(w)?) {
        (Prim::Plain(xp), Prim::Plain(wp)) => {
            as_matrix(&wp)?;
            let y = linear_product(&xp, &wp);
            Some(Tensor::from_primitive::<Flex>(flex(y, &out_shape)))
        }
        (Prim::Tracked(xt), Prim::Tracked(wt)) => {
            as_matrix(wt.primitive())?;
            let out = record(Linear, [&xt, &wt], || {
                let (xp, wp) = (xt.primitive().clone(), wt.primitive().clone());
                let y = flex(linear_product(&xp, &wp), &out_shape);
                let state = LinearState {
                    x_shape: dims.to_vec(),
                    x: keep_x.then_some(xp),
                    w: keep_w.then_some(wp),
                };
                (y, state)
            });
            Some(Tensor::from_primitive::<Ad>(out))
        }
        _ => None,
    }
}

#[derive(Debug)]
struct Linear;

#[derive(Debug, Clone)]
struct LinearState {
    x_shape: Vec<usize>,
    /// The input, when the weight wants a gradient.
    x: Option<FlexTensor>,
    /// The weight, when the input wants a gradient.
    w: Option<FlexTensor>,
}

impl Backward<Flex, 2> for Linear {
    type State = LinearState;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<Flex>(&ops.node);
        let LinearState { x_shape, x, w } = ops.state;
        let k = x_shape[x_shape.len() - 1];
        let n = *shape_of(&dy).last().expect("a linear's output has axes");
        let ds = host(&dy);
        let rows = ds.len() / n;
        let dv = View::rows(0, rows, n, n);
        let [px, pw] = ops.parents;
        if let (Some(_), Some(w)) = (&px, &w) {
            let (ws, wv) = as_matrix(w).expect("checked in the forward");
            let mut dx = vec![0.0; rows * k];
            gemm::whole_product(&mut dx, View::rows(0, rows, k, k), &ds, dv, ws, wv.t());
            register!(grads, px, flex(dx, &x_shape));
        }
        if let (Some(_), Some(x)) = (&pw, &x) {
            let xs = host(x);
            let xv = View::rows(0, rows, k, k);
            let mut dw = vec![0.0; k * n];
            gemm::whole_product(&mut dw, View::rows(0, k, n, n), &xs, xv.t(), &ds, dv);
            register!(grads, pw, flex(dw, &[k, n]));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Target log-probabilities and entropies over the vocabulary

/// `targets [b, t]` on the host, each checked against a vocabulary of `v`.
///
/// # Panics
/// On a target outside `0..v`, naming it and its position.
fn host_targets(targets: &Tensor<2, Int>, v: usize) -> Vec<usize> {
    targets
        .to_data()
        .iter::<i64>()
        .enumerate()
        .map(|(i, y)| match usize::try_from(y) {
            Ok(y) if y < v => y,
            _ => panic!("target {y} at position {i} is outside the vocabulary of {v} logits"),
        })
        .collect()
}

/// The log-softmax of `logits [b, t, v]` over the vocabulary read at `targets [b, t]`, and each
/// position's entropy, packed as `[b, t, 2]` (`[.., .., 0]` the log-prob, `[.., .., 1]` the
/// entropy): one pass over the logits ([`logits::token_logprobs`]) where Burn's composed
/// log-softmax, gather and entropy take about ten, and on an autodiff device one node whose
/// backward writes `∂L/∂logits` in one pass and keeps nothing `[b, t, v]`-sized but the logits.
/// `None` off flex, in another dtype, or when the shapes do not match.
///
/// # Panics
/// On a target outside `0..v`.
pub(crate) fn token_logprobs(logits: &Tensor<3>, targets: &Tensor<2, Int>) -> Option<Tensor<3>> {
    let [b, t, v] = logits.dims();
    if targets.dims() != [b, t] || v == 0 {
        return None;
    }
    let x = prim(logits)?;
    let targets = host_targets(targets, v);
    match x {
        Prim::Plain(x) => {
            let (out, _) = logits::token_logprobs(&host(&x), v, &targets);
            Some(Tensor::from_primitive::<Flex>(flex(out, &[b, t, 2])))
        }
        Prim::Tracked(x) => {
            let out = record(TokenLogprobs, [&x], || {
                let xp = x.primitive().clone();
                let (out, stats) = logits::token_logprobs(&host(&xp), v, &targets);
                let packed = flex(out.clone(), &[b, t, 2]);
                let state = TokenLogprobsState {
                    x: xp,
                    targets: Arc::new(targets),
                    out,
                    stats,
                };
                (packed, state)
            });
            Some(Tensor::from_primitive::<Ad>(out))
        }
    }
}

/// `∂L/∂logits` of [`token_logprobs`] with no graph: `logits [b, t, v]` and `targets [b, t]`,
/// and the gradients of the log-probs and of the entropies `[b, t]` (absent: zero). For a pass
/// that recomputes the logits to form their gradient in closed form (the vocabulary-bounded
/// loss's head). `None` off flex, in another dtype, or when the shapes do not match.
///
/// # Panics
/// On a target outside `0..v`.
pub(crate) fn token_logprobs_grad(
    logits: &Tensor<3>,
    targets: &Tensor<2, Int>,
    g_logp: Option<&Tensor<2>>,
    g_entropy: Option<&Tensor<2>>,
) -> Option<Tensor<3>> {
    let [b, t, v] = logits.dims();
    if targets.dims() != [b, t] || v == 0 {
        return None;
    }
    if [g_logp, g_entropy]
        .iter()
        .flatten()
        .any(|g| g.dims() != [b, t])
    {
        return None;
    }
    let Prim::Plain(x) = prim(logits)? else {
        return None;
    };
    let mut g = vec![0.0f32; 2 * b * t];
    for (k, grad) in [g_logp, g_entropy].into_iter().enumerate() {
        let Some(grad) = grad else { continue };
        let Prim::Plain(grad) = prim(grad)? else {
            return None;
        };
        for (slot, &value) in g.chunks_mut(2).zip(host(&grad).iter()) {
            slot[k] = value;
        }
    }
    let targets = host_targets(targets, v);
    let x = host(&x);
    let (out, stats) = logits::token_logprobs(&x, v, &targets);
    let dx = logits::token_logprobs_backward(&x, v, &targets, &out, &stats, &g);
    Some(Tensor::from_primitive::<Flex>(flex(dx, &[b, t, v])))
}

#[derive(Debug)]
struct TokenLogprobs;

#[derive(Debug, Clone)]
struct TokenLogprobsState {
    x: FlexTensor,
    targets: Arc<Vec<usize>>,
    /// The forward's `[rows, 2]` (log-prob, entropy) and `[rows, 2]` (max, `ln Σ e^{x−max}`).
    out: Vec<f32>,
    stats: Vec<f32>,
}

impl Backward<Flex, 1> for TokenLogprobs {
    type State = TokenLogprobsState;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let g = grads.consume::<Flex>(&ops.node);
        let TokenLogprobsState {
            x,
            targets,
            out,
            stats,
        } = ops.state;
        let shape = shape_of(&x);
        let v = shape[2];
        let dx = logits::token_logprobs_backward(&host(&x), v, &targets, &out, &stats, &host(&g));
        let [px] = ops.parents;
        register!(grads, px, flex(dx, &shape));
    }
}

#[derive(Debug, Clone, Copy)]
struct Geometry {
    b: usize,
    h: usize,
    kvh: usize,
    t: usize,
    hd: usize,
    scale: f32,
}

impl Geometry {
    /// Query heads stacked per KV head: `[b, kv_heads, g·t, hd]`.
    fn grouped(&self) -> Shape {
        Shape::from(vec![self.b, self.kvh, self.h / self.kvh * self.t, self.hd])
    }
}

type F = Flex;

/// The forward: the output `[b, t, heads·hd]`, and the grouped queries and probabilities the
/// backward needs. The products run over the causal blocks only ([`causal`]).
fn attention_forward(
    geometry: &Geometry,
    q: FlexTensor,
    k: &FlexTensor,
    v: &FlexTensor,
) -> (FlexTensor, (FlexTensor, Vec<f32>)) {
    let Geometry {
        b,
        h,
        kvh,
        t,
        hd,
        scale,
    } = *geometry;
    let (mats, g) = (b * h, h / kvh);
    let qg = F::float_reshape(q, geometry.grouped());
    let mut p = causal::scores(&host(&qg), &host(k), mats, g, t, hd);
    kernels::causal_softmax(&mut p, t, scale);
    let o = causal::weighted(&p, &host(v), mats, g, t, hd);
    let out = kernels::heads_last(&o, [b, h, t, hd]);
    (flex(out, &[b, t, h * hd]), (qg, p))
}

#[derive(Debug)]
struct Attention;

#[derive(Debug, Clone)]
struct AttentionState {
    geometry: Geometry,
    qg: FlexTensor,
    k: FlexTensor,
    v: FlexTensor,
    /// The probabilities `[b·heads, t, t]`, zero above the diagonal.
    p: Vec<f32>,
}

impl Backward<Flex, 3> for Attention {
    type State = AttentionState;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dout = grads.consume::<Flex>(&ops.node);
        let AttentionState {
            geometry,
            qg,
            k,
            v,
            p,
        } = ops.state;
        let Geometry {
            b,
            h,
            kvh,
            t,
            hd,
            scale,
        } = geometry;
        let (mats, g) = (b * h, h / kvh);
        // `[b, heads, t, hd]`: the grouped layout, query head `kv·g + j` after `kv·g + j − 1`.
        let d_o = kernels::heads_first(&host(&dout), [b, h, t, hd]);
        let [pq, pk, pv] = ops.parents;
        if pv.is_some() {
            let dv = causal::transposed(&p, &d_o, mats, g, t, hd);
            register!(grads, pv, flex(dv, &[b, kvh, t, hd]));
        }
        let mut ds = causal::scores(&d_o, &host(&v), mats, g, t, hd);
        kernels::causal_softmax_backward(&p, &mut ds, t, scale);
        if pk.is_some() {
            let dk = causal::transposed(&ds, &host(&qg), mats, g, t, hd);
            register!(grads, pk, flex(dk, &[b, kvh, t, hd]));
        }
        if pq.is_some() {
            let dq = causal::weighted(&ds, &host(&k), mats, g, t, hd);
            register!(grads, pq, flex(dq, &[b, h, t, hd]));
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::module::Param;
    use burn::tensor::{Device, Int, Tensor, TensorData};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use crate::{Architecture, KvCache, Qwen, QwenConfig, sequence_nll};

    /// A model whose every parameter is random (gains around 1, biases and matrices of a
    /// size that gives peaked attention), so that no gradient is trivially zero or uniform.
    fn model(config: QwenConfig, device: &Device) -> Qwen {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        Qwen::from_tensors(config, device, |spec| {
            let n: usize = spec.shape.iter().product();
            let norm = spec.name.ends_with("norm.weight");
            Ok((0..n)
                .map(|_| {
                    let u: f32 = rng.random_range(-1.0..1.0);
                    if norm { 1.0 + 0.3 * u } else { 0.4 * u }
                })
                .collect())
        })
        .expect("model builds")
    }

    fn tokens(b: usize, t: usize, vocab: usize, device: &Device) -> Tensor<2, Int> {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let ids: Vec<i64> = (0..b * t)
            .map(|_| rng.random_range(0..vocab as i64))
            .collect();
        Tensor::from_data(TensorData::new(ids, [b, t]), device)
    }

    /// A named group of parameters: its matrices and its vectors.
    type Group = (String, Vec<Param<Tensor<2>>>, Vec<Param<Tensor<1>>>);

    /// Every parameter of `m`, in a fixed order.
    fn params(m: &Qwen) -> Vec<Group> {
        let mut out = vec![(
            "embed".to_string(),
            vec![m.embed_tokens.clone()],
            vec![m.norm.clone()],
        )];
        for (l, layer) in m.layers.iter().enumerate() {
            let a = &layer.self_attn;
            let mut ones = vec![
                layer.input_layernorm.clone(),
                layer.post_attention_layernorm.clone(),
            ];
            for p in [&a.q_bias, &a.k_bias, &a.v_bias, &a.q_norm, &a.k_norm]
                .into_iter()
                .flatten()
            {
                ones.push(p.clone());
            }
            out.push((
                format!("layer {l}"),
                vec![
                    a.q_proj.clone(),
                    a.k_proj.clone(),
                    a.v_proj.clone(),
                    a.o_proj.clone(),
                    layer.mlp.gate_proj.clone(),
                    layer.mlp.up_proj.clone(),
                    layer.mlp.down_proj.clone(),
                ],
                ones,
            ));
        }
        out
    }

    fn close(ours: &[f32], reference: &[f32], what: &str) {
        let scale = reference
            .iter()
            .fold(0.0f32, |m, v| m.max(v.abs()))
            .max(1e-3);
        let worst = ours
            .iter()
            .zip(reference)
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert_eq!(ours.len(), reference.len(), "{what}: length");
        assert!(
            worst <= 2e-4 * scale,
            "{what}: max |fused − composed| {worst:e} against max |grad| {scale:e}"
        );
    }

    /// The SFT loss and every parameter's gradient, with the fused kernels on and off, on a
    /// `b × t` batch.
    fn same_gradients(config: QwenConfig, b: usize, t: usize) {
        let device = Device::flex().autodiff();
        let vocab = config.vocab_size;
        let composed = model(config.clone(), &device).with_fused_kernels(false);
        let fused = model(config, &device);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let mask: Vec<f32> = (0..b * (t - 1))
            .map(|_| f32::from(rng.random_bool(0.8)))
            .collect();
        let mask = Tensor::<2>::from_data(TensorData::new(mask, [b, t - 1]), &device);
        let run = |m: &Qwen| {
            let loss = sequence_nll(m, tokens(b, t, vocab, &device), mask.clone());
            let value = loss.clone().try_into_vec_as::<f32>().expect("readback")[0];
            (value, loss.backward())
        };
        let (l0, g0) = run(&composed);
        let (l1, g1) = run(&fused);
        assert!((l0 - l1).abs() <= 1e-5 * l0.abs(), "loss {l1} vs {l0}");
        let grad2 = |p: &Param<Tensor<2>>, g| -> Vec<f32> {
            p.val()
                .grad(g)
                .expect("a gradient")
                .try_into_vec_as::<f32>()
                .expect("readback")
        };
        let grad1 = |p: &Param<Tensor<1>>, g| -> Vec<f32> {
            p.val()
                .grad(g)
                .expect("a gradient")
                .try_into_vec_as::<f32>()
                .expect("readback")
        };
        let mut nonzero = 0;
        for ((name, m2, v1), (_, f2, f1)) in params(&composed).iter().zip(params(&fused).iter()) {
            for (i, (a, b)) in m2.iter().zip(f2).enumerate() {
                let reference = grad2(a, &g0);
                nonzero += usize::from(reference.iter().any(|v| *v != 0.0));
                close(&grad2(b, &g1), &reference, &format!("{name} matrix {i}"));
            }
            for (i, (a, b)) in v1.iter().zip(f1).enumerate() {
                close(
                    &grad1(b, &g1),
                    &grad1(a, &g0),
                    &format!("{name} vector {i}"),
                );
            }
        }
        assert!(nonzero > 8, "the gradients are not all zero");
    }

    #[test]
    fn fused_qwen3_gradients_match_the_composed_ops() {
        same_gradients(QwenConfig::test_tiny(40), 3, 19);
    }

    #[test]
    fn fused_gradients_match_on_long_rows() {
        // Longer than one rayon task of score rows (16 384 / t), as the RL update's rows are.
        same_gradients(QwenConfig::test_tiny(40), 2, 300);
    }

    #[test]
    fn fused_qwen2_gradients_match_the_composed_ops() {
        // Biases, no q/k norm, untied head, three query heads per KV head.
        let mut config = QwenConfig::test_tiny(40).with_architecture(Architecture::Qwen2);
        config.num_attention_heads = 6;
        config.tie_word_embeddings = false;
        same_gradients(config, 3, 19);
    }

    #[test]
    fn fused_inference_matches_with_padding_and_a_kv_cache() {
        let device = Device::flex();
        let config = QwenConfig::test_tiny(40);
        let composed = model(config.clone(), &device).with_fused_kernels(false);
        let fused = model(config, &device);
        let x = tokens(2, 9, 40, &device);
        let logits = |m: &Qwen| {
            m.forward(x.clone())
                .try_into_vec_as::<f32>()
                .expect("readback")
        };
        close(&logits(&fused), &logits(&composed), "logits");
        // Left padding and a cache: RoPE and the attention over the cache fuse too. A padding
        // slot's own hidden state is undefined (the composed attention averages masked scores,
        // the fused one writes 0; no later token reads it), so only the real slots compare.
        let run = |m: &Qwen| {
            let mut cache = KvCache::new(m.layers.len());
            let h1 = m.forward_hidden(x.clone(), &[0, 3], Some(&mut cache));
            let h2 = m.forward_hidden(tokens(2, 1, 40, &device), &[0, 3], Some(&mut cache));
            let d = h1.dims()[2];
            let h1 = h1.try_into_vec_as::<f32>().expect("readback");
            let mut v: Vec<f32> = h1[..9 * d].to_vec();
            v.extend_from_slice(&h1[(9 + 3) * d..]);
            v.extend(h2.try_into_vec_as::<f32>().expect("readback"));
            v
        };
        close(&run(&fused), &run(&composed), "padded cached hidden states");
    }

    /// A cache that runs out of room grows (copying its slots once) and the steps after it read
    /// the right slots: decoding past the first [`crate::model::KV_GROW`] slots gives a full
    /// forward's hidden states, fused and composed.
    #[test]
    fn a_kv_cache_growing_past_its_room_gives_the_full_forward() {
        let device = Device::flex();
        let config = QwenConfig::test_tiny(40);
        let grow = crate::model::KV_GROW;
        let (prefill, steps) = (grow - 3, 6);
        let all = tokens(2, prefill + steps, 40, &device);
        for m in [
            model(config.clone(), &device),
            model(config.clone(), &device).with_fused_kernels(false),
        ] {
            let full = m
                .forward_hidden(all.clone(), &[0, 0], None)
                .try_into_vec_as::<f32>()
                .expect("readback");
            let d = config.hidden_size;
            let mut cache = KvCache::new(m.layers.len());
            let mut got = vec![Vec::new(); 2];
            let mut take = |h: Tensor<3>, t: usize| {
                let h = h.try_into_vec_as::<f32>().expect("readback");
                for (r, row) in h.chunks(t * d).enumerate() {
                    got[r].extend_from_slice(row);
                }
            };
            take(
                m.forward_hidden(
                    all.clone().slice([0..2, 0..prefill]),
                    &[0, 0],
                    Some(&mut cache),
                ),
                prefill,
            );
            assert_eq!(cache.capacity(), grow);
            for i in prefill..prefill + steps {
                let step = all.clone().slice([0..2, i..i + 1]);
                take(m.forward_hidden(step, &[0, 0], Some(&mut cache)), 1);
            }
            assert_eq!(cache.len(), prefill + steps);
            assert_eq!(cache.capacity(), 2 * grow);
            let got = got.concat();
            close(&got, &full, "hidden states through a growing cache");
        }
    }

    /// The additive mask is built only for a composed attention: a padded prefill on the fused
    /// path (and an unpadded training pass) never builds it, the composed path does.
    #[test]
    fn only_the_composed_attention_builds_a_mask() {
        let device = Device::flex();
        let config = QwenConfig::test_tiny(40);
        for (device, pads) in [(device.clone(), [0, 3]), (device.autodiff(), [0, 0])] {
            for fused in [true, false] {
                let m = model(config.clone(), &device).with_fused_kernels(fused);
                let context = m.pass_context(&device, 2, 9, &pads, 0);
                let mut x = m.embed(tokens(2, 9, 40, &device));
                for l in 0..m.layers.len() {
                    x = m.layer_forward(l, x, &context, None);
                }
                assert_eq!(x.dims(), [2, 9, config.hidden_size]);
                assert_eq!(
                    context.bias.built(),
                    !fused,
                    "fused {fused}, autodiff {}",
                    device.is_autodiff()
                );
            }
        }
    }

    /// The fused linear against Burn's `linear`: the output and both gradients, for an input
    /// `[2, 7, 24]` and a weight `[24, 40]` stored as is, as a transposed view (a tied head), and
    /// under an input that is a strided slice; a frozen weight gets no gradient, and a plain product matches too. Sizes above flex's parallel threshold run the
    /// product on every thread.
    #[test]
    fn fused_linear_matches_burn_s_linear_with_its_gradients() {
        use burn::tensor::module::linear as burn_linear;
        let device = Device::flex().autodiff();
        let floats = |n: usize, seed: u64| -> Vec<f32> {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
        };
        let close = |a: Tensor<3>, b: Tensor<3>, what: &str| {
            let (a, b) = (
                a.try_into_vec_as::<f32>().expect("f32"),
                b.try_into_vec_as::<f32>().expect("f32"),
            );
            assert_eq!(a.len(), b.len(), "{what}");
            for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                    "{what}[{i}]: {x} vs {y}"
                );
            }
        };
        for (b, t, k, n) in [(2, 7, 24, 40), (4, 128, 192, 96)] {
            let x = Tensor::<3>::from_data(
                TensorData::new(floats(b * (t + 1) * k, 1), [b, t + 1, k]),
                &device,
            );
            let w = Tensor::<2>::from_data(TensorData::new(floats(k * n, 2), [k, n]), &device);
            let wt = Tensor::<2>::from_data(TensorData::new(floats(k * n, 3), [n, k]), &device);
            let dy =
                Tensor::<3>::from_data(TensorData::new(floats(b * t * n, 4), [b, t, n]), &device);
            for transposed in [false, true] {
                // The input: the last `t` positions of `[b, t + 1, k]`, a strided view.
                let run = |fused: bool, w_grad: bool| {
                    let x = x.clone().detach().require_grad();
                    let w = if transposed { wt.clone() } else { w.clone() }.detach();
                    let w = if w_grad { w.require_grad() } else { w };
                    let wv = if transposed {
                        w.clone().transpose()
                    } else {
                        w.clone()
                    };
                    let xs = x.clone().slice([0..b, 1..t + 1]);
                    let y = if fused {
                        super::linear(&xs, &wv).expect("flex f32")
                    } else {
                        burn_linear(xs, wv, None)
                    };
                    let grads = (y.clone() * dy.clone()).sum().backward();
                    let dx = x.grad(&grads).expect("x's gradient");
                    let dw = w.grad(&grads).map(|g| g.unsqueeze::<3>());
                    (y, dx, dw)
                };
                for w_grad in [true, false] {
                    let what = format!("{b}x{t}x{k}x{n}, transposed {transposed}, w grad {w_grad}");
                    let (ours, theirs) = (run(true, w_grad), run(false, w_grad));
                    close(ours.0, theirs.0, &format!("y {what}"));
                    close(ours.1, theirs.1, &format!("dx {what}"));
                    assert_eq!(ours.2.is_some(), w_grad, "{what}");
                    if let (Some(a), Some(b)) = (ours.2, theirs.2) {
                        close(a, b, &format!("dw {what}"));
                    }
                }
            }
            // Without autodiff.
            let plain = Device::flex();
            let x =
                Tensor::<3>::from_data(TensorData::new(floats(b * t * k, 5), [b, t, k]), &plain);
            let w = Tensor::<2>::from_data(TensorData::new(floats(k * n, 6), [k, n]), &plain);
            close(
                super::linear(&x, &w).expect("flex f32"),
                burn_linear(x, w, None),
                "plain",
            );
        }
        // Shapes that do not chain, and empty ones, are left to Burn.
        let x = Tensor::<3>::zeros([1, 2, 3], &device);
        assert!(super::linear(&x, &Tensor::<2>::zeros([4, 5], &device)).is_none());
        assert!(super::linear(&x, &Tensor::<2>::zeros([3, 0], &device)).is_none());
        let empty = Tensor::<3>::zeros([1, 2, 0], &device);
        assert!(super::linear(&empty, &Tensor::<2>::zeros([0, 5], &device)).is_none());
    }
}
