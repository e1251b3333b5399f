//! Per-token log-probabilities and entropies for the GRPO loss and SFT.

use std::ops::Range;

use burn::tensor::activation::log_softmax;
use burn::tensor::{FloatDType, IndexingUpdateOp, Int, Tensor};

use crate::model::{Qwen, product};

/// Log-probability of each target under `logits`, and the entropy of each
/// position's distribution. Differentiable (autodiff) through `logits`.
///
/// On flex in f32 this is one fused op (`fused::token_logprobs`: one pass over the logits
/// forward, one backward); elsewhere Burn's composed log-softmax, gather and entropy. Both give
/// the same values within f32 rounding.
///
/// # Shapes
/// - logits: `[batch, seq, vocab]`
/// - targets: `[batch, seq]`
/// - returns: (`logp [batch, seq]`, `entropy [batch, seq]`)
///
/// # Panics
/// On the fused path, on a target outside `0..vocab` (naming it and its position).
pub fn token_logprobs(logits: Tensor<3>, targets: Tensor<2, Int>) -> (Tensor<2>, Tensor<2>) {
    logprobs_and_entropy(logits, targets, true)
}

/// [`token_logprobs`] with the fused op on or off ([`Qwen::with_fused_kernels`]).
fn logprobs_and_entropy(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    fused: bool,
) -> (Tensor<2>, Tensor<2>) {
    #[cfg(feature = "flex")]
    if fused && let Some(packed) = crate::fused::token_logprobs(&logits, &targets) {
        let [b, t, _] = packed.dims();
        let logp = packed.clone().slice([0..b, 0..t, 0..1]).squeeze_dim::<2>(2);
        let entropy = packed.slice([0..b, 0..t, 1..2]).squeeze_dim::<2>(2);
        return (logp, entropy);
    }
    let _ = fused;
    let logp_all = log_softmax(logits, 2);
    let logp = logp_all
        .clone()
        .gather(2, targets.unsqueeze_dim(2))
        .squeeze_dim::<2>(2);
    let entropy = (logp_all.clone().exp() * logp_all)
        .sum_dim(2)
        .squeeze_dim::<2>(2)
        .neg();
    (logp, entropy)
}

/// [`token_logprobs`] without the entropy: the log-probability of each target, with the same
/// values and gradients bit for bit (on flex in f32 the same fused op, its entropy unused;
/// elsewhere the same composed operations without the two passes over `[batch, seq, vocab]`
/// the entropy takes). For the SFT loss and every recomputation that discards the entropy.
pub fn target_logprobs(logits: Tensor<3>, targets: Tensor<2, Int>) -> Tensor<2> {
    target_logprobs_with(logits, targets, true)
}

/// [`target_logprobs`] with the fused op on or off ([`Qwen::with_fused_kernels`]).
fn target_logprobs_with(logits: Tensor<3>, targets: Tensor<2, Int>, fused: bool) -> Tensor<2> {
    #[cfg(feature = "flex")]
    if fused && crate::fused::runs_on(&logits) {
        return logprobs_and_entropy(logits, targets, true).0;
    }
    let _ = fused;
    log_softmax(logits, 2)
        .gather(2, targets.unsqueeze_dim(2))
        .squeeze_dim::<2>(2)
}

/// The most logit elements [`sequence_logprobs`] materialises in one tensor: 2^26 floats,
/// 256 MiB. A GPU buffer has a size limit (wgpu on an NVIDIA H200 refused the 2.5 GB logits of
/// 8 × 512 positions over Qwen3's 151 936-token vocabulary), so the log-softmax runs over
/// chunks of rows and positions; the results are the same.
pub const LOGIT_CHUNK_ELEMENTS: usize = 1 << 26;

/// Next-token log-probs of whole sequences: position `t` scores `tokens[t+1]`
/// given `tokens[..=t]`. Right padding is harmless (causal attention); mask it
/// out of the loss. The logits are computed in chunks of at most
/// [`LOGIT_CHUNK_ELEMENTS`] ([`sequence_logprobs_chunked`]).
///
/// # Shapes
/// - tokens: `[batch, seq]` with `seq ≥ 2`
/// - returns: (`logp [batch, seq-1]`, `entropy [batch, seq-1]`)
pub fn sequence_logprobs(model: &Qwen, tokens: Tensor<2, Int>) -> (Tensor<2>, Tensor<2>) {
    sequence_logprobs_chunked(model, tokens, LOGIT_CHUNK_ELEMENTS)
}

/// [`sequence_logprobs`] with at most `max_logit_elements` logits in one tensor (at least one
/// row of the vocabulary at a time): the decoder runs once, then the output projection and the
/// log-softmax run over groups of rows and positions, and the per-token results are joined.
/// Differentiable like the one-piece version, with the same values and gradients.
pub fn sequence_logprobs_chunked(
    model: &Qwen,
    tokens: Tensor<2, Int>,
    max_logit_elements: usize,
) -> (Tensor<2>, Tensor<2>) {
    let fused = model.fused_kernels;
    let [logp, entropy] = over_logit_chunks(model, tokens, max_logit_elements, |l, t| {
        let (logp, entropy) = logprobs_and_entropy(l, t, fused);
        [logp, entropy]
    });
    (logp, entropy)
}

/// [`sequence_logprobs`] without the entropy ([`target_logprobs`]): the same log-probs, bit
/// for bit, with less work over the logits (most of an SFT step over a large vocabulary).
///
/// # Shapes
/// - tokens: `[batch, seq]` with `seq ≥ 2`
/// - returns: `logp [batch, seq-1]`
pub fn sequence_target_logprobs(model: &Qwen, tokens: Tensor<2, Int>) -> Tensor<2> {
    sequence_target_logprobs_chunked(model, tokens, LOGIT_CHUNK_ELEMENTS)
}

/// [`sequence_target_logprobs`] with at most `max_logit_elements` logits in one tensor (see
/// [`sequence_logprobs_chunked`]).
pub fn sequence_target_logprobs_chunked(
    model: &Qwen,
    tokens: Tensor<2, Int>,
    max_logit_elements: usize,
) -> Tensor<2> {
    let fused = model.fused_kernels;
    let [logp] = over_logit_chunks(model, tokens, max_logit_elements, |l, t| {
        [target_logprobs_with(l, t, fused)]
    });
    logp
}

/// Runs the decoder once over `tokens[.., ..seq-1]`, then `per_chunk(logits, targets)` over
/// groups of rows and positions holding at most `max_logit_elements` logits, and joins each
/// of its `N` per-token results back to `[batch, seq-1]`.
fn over_logit_chunks<const N: usize>(
    model: &Qwen,
    tokens: Tensor<2, Int>,
    max_logit_elements: usize,
    per_chunk: impl Fn(Tensor<3>, Tensor<2, Int>) -> [Tensor<2>; N],
) -> [Tensor<2>; N] {
    let [b, t] = tokens.dims();
    assert!(t >= 2, "sequence_logprobs needs at least two tokens");
    let n = t - 1;
    let vocab = model.config.vocab_size;
    let inputs = tokens.clone().slice([0..b, 0..n]);
    let targets = tokens.slice([0..b, 1..t]);
    if b * n * vocab <= max_logit_elements {
        return per_chunk(model.forward(inputs), targets);
    }
    let hidden = model.forward_hidden(inputs, &vec![0; b], None);
    Chunks::new(b, n, vocab, max_logit_elements).join(|r, p| {
        let logits = model.logits(hidden.clone().slice([r.clone(), p.clone()]));
        per_chunk(logits, targets.clone().slice([r, p]))
    })
}

/// A loss over per-token log-probs and entropies with memory bounded in the vocabulary.
///
/// `loss_fn` receives the next-token log-probs and entropies of `tokens` (shapes as for
/// [`sequence_logprobs`]) and returns a scalar loss built from them (plus anything else it wants
/// to hand back, e.g. metrics). The returned loss has `loss_fn`'s value, and calling `backward`
/// on it gives the model's parameters the same gradients as the one-piece
/// `loss_fn(token_logprobs(model.forward(..)))`, but no tensor of more than
/// `max_logit_elements` logits is ever held, and none is kept for the backward pass:
///
/// 1. the decoder runs once (tracked), giving the final hidden states `h`;
/// 2. logits `h·W` are computed chunk by chunk **outside** the autodiff graph (in f32, whatever
///    the compute precision), reduced to log-probs and entropies, and dropped;
/// 3. `loss_fn` runs on those as fresh leaves, and a backward pass over this small
///    `[batch, seq]` graph gives `g_logp = ∂L/∂logp` and `g_ent = ∂L/∂entropy`;
/// 4. the logits are recomputed chunk by chunk and the gradient with respect to them is written
///    in closed form, `G = g_logp·(onehot(y) − p) − g_ent·p·(log p + H)`, then projected at
///    once: `∂L/∂h = G·Wᵀ` (`[batch, seq, d_model]`) and `∂L/∂W = Σ hᵀ·G` (`[d_model, vocab]`,
///    only when the head requires a gradient: with LoRA it is frozen and this is skipped);
/// 5. the result is `S − sg(S) + sg(L)` with the surrogate `S = Σ h ⊙ sg(∂L/∂h) + Σ W ⊙
///    sg(∂L/∂W)`: its value is `L`, and its backward pushes exactly those gradients through
///    the decoder and the output projection (or the tied embedding).
///
/// So the graph keeps `[batch, seq, d_model] + [d_model, vocab]` floats for the head instead of
/// `[batch, seq, vocab]`, at the price of computing the logits twice. (Burn's gradient
/// checkpointing cannot do this: it recomputes only memory-bound operations and caches the
/// outputs of compute-bound ones, the logits matmul among them.)
///
/// On a device without autodiff, `loss_fn` simply runs on the chunked values.
///
/// # Errors
/// `loss_fn`'s.
///
/// # Panics
/// If `tokens` has fewer than two positions, or (on an autodiff device) `loss_fn`'s loss does
/// not depend on the log-probs or entropies it was given (Burn's backward then has no graph).
/// Constants `loss_fn` derives from them (old log-probs, metrics) should be `detach`ed.
pub fn sequence_loss_chunked<T, E>(
    model: &Qwen,
    tokens: Tensor<2, Int>,
    max_logit_elements: usize,
    loss_fn: impl FnOnce(Tensor<2>, Tensor<2>) -> Result<(Tensor<1>, T), E>,
) -> Result<(Tensor<1>, T), E> {
    let [b, t] = tokens.dims();
    assert!(t >= 2, "sequence_loss needs at least two tokens");
    let n = t - 1;
    let inputs = tokens.clone().slice([0..b, 0..n]);
    let targets = tokens.slice([0..b, 1..t]).without_autodiff();
    if model.checkpointing && model.embed_tokens.val().is_autodiff() {
        return checkpointed_loss(model, inputs, targets, max_logit_elements, loss_fn);
    }
    // The head always runs in f32: the master weights are f32, and a bf16 log-softmax over
    // 150k classes would lose the small probabilities.
    let hidden = model
        .forward_hidden(inputs, &vec![0; b], None)
        .cast(FloatDType::F32);
    head_loss(model, hidden, targets, max_logit_elements, loss_fn)
}

/// Steps 2–5 of [`sequence_loss_chunked`] on the final hidden states `hidden` (f32, after the
/// final norm; tracked or not) and the targets.
fn head_loss<T, E>(
    model: &Qwen,
    hidden: Tensor<3>,
    targets: Tensor<2, Int>,
    max_logit_elements: usize,
    loss_fn: impl FnOnce(Tensor<2>, Tensor<2>) -> Result<(Tensor<1>, T), E>,
) -> Result<(Tensor<1>, T), E> {
    let [b, n, _] = hidden.dims();
    let head = model.head();
    let tracked = hidden.is_tracked();
    // A frozen head (LoRA trains the projections only) gets no `[d_model, vocab]` gradient.
    let head_tracked = head.is_tracked();
    let plain_hidden = hidden.clone().without_autodiff();
    let plain_head = head.clone().without_autodiff();
    let chunks = Chunks::new(b, n, model.config.vocab_size, max_logit_elements);
    let fused = model.fused_kernels;

    // Pass 1: values only.
    let [logp, entropy] = chunks.join(|r, p| {
        let h = plain_hidden.clone().slice([r.clone(), p.clone()]);
        let logits = product(h, plain_head.clone(), None, fused);
        let (l, e) = logprobs_and_entropy(logits, targets.clone().slice([r, p]), fused);
        [l, e]
    });
    if !tracked {
        return loss_fn(logp, entropy);
    }

    // The loss on fresh leaves, and its gradient with respect to them.
    let logp_leaf = logp.clone().autodiff().require_grad();
    let entropy_leaf = entropy.clone().autodiff().require_grad();
    let (loss, extra) = loss_fn(logp_leaf.clone(), entropy_leaf.clone())?;
    let value = loss.clone().detach();
    let grads = loss.backward();
    let g_logp = logp_leaf.grad(&grads).map(Tensor::without_autodiff);
    let g_entropy = entropy_leaf.grad(&grads).map(Tensor::without_autodiff);
    drop(grads);

    // Pass 2: recompute the logits, form ∂L/∂logits, project it onto h and W.
    let d = plain_hidden.dims()[2];
    let vocab = model.config.vocab_size;
    let device = plain_hidden.device();
    let mut grad_head = head_tracked.then(|| Tensor::<2>::zeros([d, vocab], &device));
    let mut grad_rows = Vec::new();
    for r in chunks.rows() {
        let mut grad_cols = Vec::new();
        for p in chunks.positions() {
            let h = plain_hidden.clone().slice([r.clone(), p.clone()]);
            let [rb, pn, _] = h.dims();
            let logits = product(h.clone(), plain_head.clone(), None, fused);
            let y = targets.clone().slice([r.clone(), p.clone()]);
            let slice = |g: &Tensor<2>| g.clone().slice([r.clone(), p.clone()]);
            let (gl, ge) = (g_logp.as_ref().map(slice), g_entropy.as_ref().map(slice));
            #[cfg(feature = "flex")]
            let grad_logits = fused
                .then(|| crate::fused::token_logprobs_grad(&logits, &y, gl.as_ref(), ge.as_ref()))
                .flatten();
            #[cfg(not(feature = "flex"))]
            let grad_logits: Option<Tensor<3>> = None;
            let grad_logits = grad_logits
                .unwrap_or_else(|| composed_logits_grad(logits, y, slice(&entropy), gl, ge));
            grad_cols.push(product(
                grad_logits.clone(),
                plain_head.clone().transpose(),
                None,
                fused,
            ));
            if let Some(acc) = grad_head.take() {
                let flat_h = h.reshape([rb * pn, d]);
                let flat_g = grad_logits.reshape([rb * pn, vocab]);
                grad_head = Some(acc + product(flat_h.transpose(), flat_g, None, fused));
            }
        }
        grad_rows.push(Tensor::cat(grad_cols, 1));
    }
    let grad_hidden = Tensor::cat(grad_rows, 0);
    let mut surrogate = (hidden * grad_hidden.autodiff()).sum();
    if let Some(grad_head) = grad_head {
        surrogate = surrogate + (head * grad_head.autodiff()).sum();
    }
    Ok((surrogate.clone() - surrogate.detach() + value, extra))
}

/// `∂L/∂logits = −p·(g_logp + g_ent·(log p + H)) + g_logp·onehot(y)` by Burn's composed ops,
/// from the entropies `H` of the first pass (absent gradients are zero): the reference
/// `fused::token_logprobs_grad` is tested against, and the path off flex.
fn composed_logits_grad(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    entropy: Tensor<2>,
    g_logp: Option<Tensor<2>>,
    g_entropy: Option<Tensor<2>>,
) -> Tensor<3> {
    let [rb, pn, _] = logits.dims();
    let device = logits.device();
    let logp_all = log_softmax(logits, 2);
    let probs = logp_all.clone().exp();
    let col = |g: &Tensor<2>| -> Tensor<3> { g.clone().unsqueeze_dim(2) };
    // −p·(g_logp + g_ent·(log p + H)) over the vocabulary …
    let coeff: Tensor<3> = match (&g_logp, &g_entropy) {
        (Some(gl), Some(ge)) => (logp_all + col(&entropy)) * col(ge) + col(gl),
        (None, Some(ge)) => (logp_all + col(&entropy)) * col(ge),
        (Some(gl), None) => col(gl),
        (None, None) => Tensor::zeros([rb, pn, 1], &device),
    };
    let grad_logits = (probs * coeff).neg();
    // … plus g_logp at the target.
    match &g_logp {
        Some(gl) => {
            grad_logits.scatter(2, targets.unsqueeze_dim(2), col(gl), IndexingUpdateOp::Add)
        }
        None => grad_logits,
    }
}

/// [`sequence_loss_chunked`] with per-layer gradient checkpointing
/// ([`Qwen::with_gradient_checkpointing`]), on an autodiff device:
///
/// 1. the decoder runs once on an untracked copy of the model (`no_grad`: the same tensors,
///    nothing recorded), keeping only each layer's input `x_l`;
/// 2. the final norm, the head and `loss_fn` run on the last hidden state as a fresh leaf
///    ([`sequence_loss_chunked`]'s steps 2–5), and one backward pass gives `g = ∂L/∂x_L` and the
///    gradients of the norm and the head;
/// 3. from the top, layer `l` is recomputed under autodiff on the leaf `x_l`, and the backward
///    pass of `Σ layer_l(x_l) ⊙ g` gives that layer's parameter gradients and the next
///    `g = ∂L/∂x_l`; only this layer's activations are alive;
/// 4. the embedding's gradient, when it trains, the same way from `g = ∂L/∂x_0`;
/// 5. the result is `S − sg(S) + sg(L)` with `S = Σ_θ θ ⊙ sg(∂L/∂θ)` over the parameters that
///    require a gradient: its value is `L` and its backward gives each parameter exactly the
///    gradient collected above, so callers' `GradientsParams::from_grads(loss.backward(), ..)`
///    is unchanged.
///
/// The recomputation runs the same kernels on the same inputs as step 1, so the gradients equal
/// the un-checkpointed ones within f32 rounding.
fn checkpointed_loss<T, E>(
    model: &Qwen,
    inputs: Tensor<2, Int>,
    targets: Tensor<2, Int>,
    max_logit_elements: usize,
    loss_fn: impl FnOnce(Tensor<2>, Tensor<2>) -> Result<(Tensor<1>, T), E>,
) -> Result<(Tensor<1>, T), E> {
    let [b, n] = inputs.dims();
    let device = inputs.device();
    let pads = vec![0; b];
    let layers = model.layers.len();
    let context = model.pass_context(&device, b, n, &pads, 0);
    // 1. Nothing recorded: the model's tensors with gradients off.
    let untracked = burn::module::Module::no_grad(model.clone());
    let mut layer_inputs = Vec::with_capacity(layers);
    let mut x = untracked.embed(inputs.clone());
    for l in 0..layers {
        layer_inputs.push(x.clone());
        x = untracked.layer_forward(l, x, &context, None);
    }
    drop(untracked);
    // 2. The head and the loss on the last hidden state as a leaf.
    let mut collected = Collected::default();
    let top = x.detach().require_grad();
    let hidden = model.final_norm(top.clone()).cast(FloatDType::F32);
    let (loss, extra) = head_loss(model, hidden, targets, max_logit_elements, loss_fn)?;
    let value = loss.clone().detach();
    let grads = loss.backward();
    collected.add(model, &grads);
    let mut g = top
        .grad(&grads)
        .expect("the loss depends on the last hidden state")
        .without_autodiff();
    drop(grads);
    // 3. Each layer from the top, recomputed on its input as a leaf.
    for l in (0..layers).rev() {
        let x = layer_inputs
            .pop()
            .expect("one input per layer")
            .detach()
            .require_grad();
        let y = model.layer_forward(l, x.clone(), &context, None);
        let grads = (y * g.autodiff()).sum().backward();
        collected.add(model, &grads);
        g = x
            .grad(&grads)
            .expect("a layer's output depends on its input")
            .without_autodiff();
    }
    // 4. The embedding, when it trains.
    if model.embed_tokens.is_require_grad() && model.embed_tokens.val().is_tracked() {
        let grads = (model.embed(inputs) * g.autodiff()).sum().backward();
        collected.add(model, &grads);
    }
    // 5. The surrogate that hands each parameter its gradient.
    let surrogate = collected.surrogate(model);
    Ok((
        match surrogate {
            Some(s) => s.clone() - s.detach() + value,
            None => value,
        },
        extra,
    ))
}

/// The parameter gradients [`checkpointed_loss`] collects from its backward passes, by
/// parameter id, flattened and summed (a tied embedding gets one from the head and one from
/// the lookup).
#[derive(Default)]
struct Collected(std::collections::HashMap<burn::module::ParamId, Tensor<1>>);

impl Collected {
    /// Adds every gradient `grads` holds for a parameter of `model` that requires one.
    fn add(&mut self, model: &Qwen, grads: &burn::tensor::Gradients) {
        struct Visit<'a> {
            grads: &'a burn::tensor::Gradients,
            into: &'a mut Collected,
        }
        impl burn::module::ModuleVisitor for Visit<'_> {
            fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
                if !param.is_require_grad() {
                    return;
                }
                let Some(g) = param.val().grad(self.grads) else {
                    return;
                };
                let n = g.shape().num_elements();
                let g = g.without_autodiff().reshape([n]);
                let sum = match self.into.0.remove(&param.id) {
                    Some(acc) => acc + g,
                    None => g,
                };
                self.into.0.insert(param.id, sum);
            }
        }
        burn::module::Module::visit(model, &mut Visit { grads, into: self });
    }

    /// `Σ_θ θ ⊙ sg(∂L/∂θ)` over the collected parameters, tracked through `model`'s
    /// parameters; `None` when nothing was collected.
    fn surrogate(self, model: &Qwen) -> Option<Tensor<1>> {
        struct Visit {
            grads: std::collections::HashMap<burn::module::ParamId, Tensor<1>>,
            sum: Option<Tensor<1>>,
        }
        impl burn::module::ModuleVisitor for Visit {
            fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
                let Some(g) = self.grads.remove(&param.id) else {
                    return;
                };
                let v = param.val();
                let n = v.shape().num_elements();
                let dtype: FloatDType = v.dtype().into();
                let term = (v.reshape([n]) * g.cast(dtype).autodiff())
                    .sum()
                    .cast(FloatDType::F32);
                self.sum = Some(match self.sum.take() {
                    Some(s) => s + term,
                    None => term,
                });
            }
        }
        let mut visit = Visit {
            grads: self.0,
            sum: None,
        };
        burn::module::Module::visit(model, &mut visit);
        visit.sum
    }
}

/// A loss over per-token log-probs and entropies (as for [`sequence_loss_chunked`]) whose
/// memory is bounded in the vocabulary, the way training calls it: when all of the sequences'
/// logits fit in [`LOGIT_CHUNK_ELEMENTS`] (every batch of the embedded default), the one-piece
/// graph `loss_fn(`[`sequence_logprobs`]`(..))`, cheapest there; above it, the fused loss with
/// chunks of at most that many logits, so no `[batch, seq, vocab]` tensor is held, forward or
/// backward. Both give the same values and gradients within f32 rounding.
///
/// # Errors
/// `loss_fn`'s.
pub fn sequence_loss<T, E>(
    model: &Qwen,
    tokens: Tensor<2, Int>,
    loss_fn: impl FnOnce(Tensor<2>, Tensor<2>) -> Result<(Tensor<1>, T), E>,
) -> Result<(Tensor<1>, T), E> {
    if fits_in_one_chunk(model, &tokens) && !model.checkpointing {
        let (logp, entropy) = sequence_logprobs(model, tokens);
        loss_fn(logp, entropy)
    } else {
        sequence_loss_chunked(model, tokens, LOGIT_CHUNK_ELEMENTS, loss_fn)
    }
}

/// A loss over the next-token log-probs only (no entropies), with memory bounded in the
/// vocabulary: `loss_fn(`[`sequence_target_logprobs`]`(..))` when the logits fit in
/// [`LOGIT_CHUNK_ELEMENTS`] (the same graph as before, bit for bit), else through the fused
/// [`sequence_loss_chunked`] with that limit.
///
/// # Shapes
/// - tokens: `[batch, seq]`; `loss_fn` gets `logp [batch, seq-1]` and returns a `[1]` loss
pub fn sequence_target_loss(
    model: &Qwen,
    tokens: Tensor<2, Int>,
    loss_fn: impl FnOnce(Tensor<2>) -> Tensor<1>,
) -> Tensor<1> {
    if fits_in_one_chunk(model, &tokens) && !model.checkpointing {
        return loss_fn(sequence_target_logprobs(model, tokens));
    }
    target_loss_chunked(model, tokens, LOGIT_CHUNK_ELEMENTS, loss_fn)
}

/// [`sequence_loss_chunked`] of a loss over the log-probs only, which cannot fail.
fn target_loss_chunked(
    model: &Qwen,
    tokens: Tensor<2, Int>,
    max_logit_elements: usize,
    loss_fn: impl FnOnce(Tensor<2>) -> Tensor<1>,
) -> Tensor<1> {
    let out: Result<_, std::convert::Infallible> =
        sequence_loss_chunked(model, tokens, max_logit_elements, |logp, _| {
            Ok((loss_fn(logp), ()))
        });
    match out {
        Ok((loss, ())) => loss,
        Err(e) => match e {},
    }
}

/// The SFT loss ([`masked_nll`] of the next-token log-probs under `mask`) with memory bounded
/// in the vocabulary ([`sequence_target_loss`]).
///
/// # Shapes
/// - tokens: `[batch, seq]`, mask: `[batch, seq-1]`
pub fn sequence_nll(model: &Qwen, tokens: Tensor<2, Int>, mask: Tensor<2>) -> Tensor<1> {
    sequence_target_loss(model, tokens, |logp| masked_nll(logp, mask))
}

/// The SFT loss through the fused [`sequence_loss_chunked`] with at most `max_logit_elements`
/// logits at a time, whatever the size.
///
/// # Shapes
/// - tokens: `[batch, seq]`, mask: `[batch, seq-1]`
pub fn sequence_nll_chunked(
    model: &Qwen,
    tokens: Tensor<2, Int>,
    mask: Tensor<2>,
    max_logit_elements: usize,
) -> Tensor<1> {
    target_loss_chunked(model, tokens, max_logit_elements, |logp| {
        masked_nll(logp, mask)
    })
}

/// Whether the next-token logits of `tokens` fit in [`LOGIT_CHUNK_ELEMENTS`].
fn fits_in_one_chunk(model: &Qwen, tokens: &Tensor<2, Int>) -> bool {
    let [b, t] = tokens.dims();
    b.saturating_mul(t.saturating_sub(1))
        .saturating_mul(model.config.vocab_size)
        <= LOGIT_CHUNK_ELEMENTS
}

/// How the chunked paths ([`sequence_logprobs_chunked`], [`sequence_loss_chunked`]) split
/// `[batch, positions]` so that one chunk has at most `max_elements` logits (at least one
/// position).
#[derive(Debug, Clone, Copy)]
struct Chunks {
    batch: usize,
    positions: usize,
    rows_per_chunk: usize,
    positions_per_chunk: usize,
}

impl Chunks {
    fn new(batch: usize, positions: usize, vocab: usize, max_elements: usize) -> Self {
        let rows_per_chunk = (max_elements / vocab).clamp(1, batch);
        let positions_per_chunk = (max_elements / (rows_per_chunk * vocab)).clamp(1, positions);
        Self {
            batch,
            positions,
            rows_per_chunk,
            positions_per_chunk,
        }
    }

    fn rows(&self) -> impl Iterator<Item = Range<usize>> + use<> {
        let (n, step) = (self.batch, self.rows_per_chunk);
        (0..n).step_by(step).map(move |r| r..(r + step).min(n))
    }

    fn positions(&self) -> impl Iterator<Item = Range<usize>> + use<> {
        let (n, step) = (self.positions, self.positions_per_chunk);
        (0..n).step_by(step).map(move |p| p..(p + step).min(n))
    }

    /// Runs `per_chunk(rows, positions)` over every chunk and joins each of its `N`
    /// `[rows, positions]` results back to `[batch, positions]`.
    fn join<const N: usize>(
        &self,
        mut per_chunk: impl FnMut(Range<usize>, Range<usize>) -> [Tensor<2>; N],
    ) -> [Tensor<2>; N] {
        let mut joined_rows: [Vec<Tensor<2>>; N] = std::array::from_fn(|_| Vec::new());
        for r in self.rows() {
            let mut parts: [Vec<Tensor<2>>; N] = std::array::from_fn(|_| Vec::new());
            for p in self.positions() {
                for (part, result) in parts.iter_mut().zip(per_chunk(r.clone(), p)) {
                    part.push(result);
                }
            }
            for (row, part) in joined_rows.iter_mut().zip(parts) {
                row.push(Tensor::cat(part, 1));
            }
        }
        joined_rows.map(|rows| Tensor::cat(rows, 0))
    }
}

/// Masked mean negative log-likelihood, the SFT cross-entropy:
/// `-Σ mask·logp / Σ mask` (token-level mean). Returns a 1-element tensor.
///
/// # Shapes
/// - logp, mask: `[batch, seq]` (mask 1.0 for tokens in the loss, 0.0 elsewhere)
pub fn masked_nll(logp: Tensor<2>, mask: Tensor<2>) -> Tensor<1> {
    let count = mask.clone().sum().clamp_min(1.0);
    (logp * mask).sum().neg() / count
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::tensor::{Device, Int, Tensor, TensorData};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::{composed_logits_grad, logprobs_and_entropy, target_logprobs_with};

    fn floats(n: usize, scale: f32, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n).map(|_| rng.random_range(-scale..scale)).collect()
    }

    fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
        t.try_into_vec_as::<f32>().expect("f32")
    }

    /// Logits `[3, 5, 37]` (37: a tail after the kernel's chunks of 8) with one position far
    /// more peaked than the rest, and targets.
    fn case(device: &Device) -> (Tensor<3>, Tensor<2, Int>) {
        let (b, t, v) = (3, 5, 37);
        let mut x = floats(b * t * v, 6.0, 1);
        x[2 * v + 11] = 80.0;
        let ids: Vec<i64> = (0..b * t).map(|i| ((i * 13 + 4) % v) as i64).collect();
        (
            Tensor::from_data(TensorData::new(x, [b, t, v]), device),
            Tensor::from_data(TensorData::new(ids, [b, t]), device),
        )
    }

    fn close(a: &[f32], b: &[f32], tol: f32, what: &str) {
        assert_eq!(a.len(), b.len(), "{what}: length");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= tol * (1.0 + y.abs()),
                "{what}[{i}]: {x} vs {y}"
            );
        }
    }

    /// The fused op against Burn's composed log-softmax, gather and entropy: the values, and
    /// the logits' gradient under a loss through log-probs and entropies both.
    #[test]
    fn fused_log_probs_and_entropies_match_the_composed_ones_and_their_gradients() {
        let device = Device::flex().autodiff();
        let (logits, targets) = case(&device);
        let a = Tensor::<2>::from_data(TensorData::new(floats(15, 1.0, 2), [3, 5]), &device);
        let c = Tensor::<2>::from_data(TensorData::new(floats(15, 1.0, 3), [3, 5]), &device);
        let run = |fused: bool| {
            let x = logits.clone().detach().require_grad();
            let (logp, entropy) = logprobs_and_entropy(x.clone(), targets.clone(), fused);
            let loss = (logp.clone() * a.clone()).sum() + (entropy.clone() * c.clone()).sum();
            let grads = loss.backward();
            let g = x.grad(&grads).expect("a gradient");
            (values(logp), values(entropy), values(g))
        };
        let (fused, composed) = (run(true), run(false));
        close(&fused.0, &composed.0, 1e-5, "logp");
        close(&fused.1, &composed.1, 1e-5, "entropy");
        close(&fused.2, &composed.2, 1e-5, "dlogits");
    }

    /// The target-only path is the fused op's log-probs, bit for bit, with the same gradient as
    /// [`logprobs_and_entropy`] when the entropy is not used.
    #[test]
    fn target_log_probs_are_the_fused_log_probs_bit_for_bit() {
        let device = Device::flex().autodiff();
        let (logits, targets) = case(&device);
        let a = Tensor::<2>::from_data(TensorData::new(floats(15, 1.0, 4), [3, 5]), &device);
        let grad = |logp: Tensor<2>, x: Tensor<3>| {
            let grads = (logp * a.clone()).sum().backward();
            values(x.grad(&grads).expect("a gradient"))
        };
        let x = logits.clone().detach().require_grad();
        let target = target_logprobs_with(x.clone(), targets.clone(), true);
        let (tv, tg) = (values(target.clone()), grad(target, x));
        let x = logits.detach().require_grad();
        let both = logprobs_and_entropy(x.clone(), targets, true).0;
        assert_eq!((tv, tg), (values(both.clone()), grad(both, x)));
    }

    /// The closed-form `∂L/∂logits` the vocabulary-bounded loss forms in its second pass,
    /// fused against composed, for each combination of gradients present.
    #[test]
    fn fused_logits_gradient_matches_the_composed_one() {
        let device = Device::flex();
        let (logits, targets) = case(&device);
        let (_, entropy) = logprobs_and_entropy(logits.clone(), targets.clone(), false);
        let gl = Tensor::<2>::from_data(TensorData::new(floats(15, 1.0, 5), [3, 5]), &device);
        let ge = Tensor::<2>::from_data(TensorData::new(floats(15, 1.0, 6), [3, 5]), &device);
        for (l, e) in [(true, true), (true, false), (false, true), (false, false)] {
            let (gl, ge) = (l.then(|| gl.clone()), e.then(|| ge.clone()));
            let fused =
                crate::fused::token_logprobs_grad(&logits, &targets, gl.as_ref(), ge.as_ref())
                    .expect("flex f32");
            let composed =
                composed_logits_grad(logits.clone(), targets.clone(), entropy.clone(), gl, ge);
            close(
                &values(fused),
                &values(composed),
                1e-5,
                &format!("logp {l}, entropy {e}"),
            );
        }
    }

    #[test]
    #[should_panic(expected = "target -1 at position 7 is outside the vocabulary of 37 logits")]
    fn a_negative_target_is_refused_by_name_and_position() {
        let device = Device::flex();
        let (logits, _) = case(&device);
        let mut ids = vec![0i64; 15];
        ids[7] = -1;
        let targets = Tensor::<2, Int>::from_data(TensorData::new(ids, [3, 5]), &device);
        let _ = logprobs_and_entropy(logits, targets, true);
    }
}
