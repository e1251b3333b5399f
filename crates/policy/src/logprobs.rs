//! Per-token log-probabilities and entropies for the GRPO loss and SFT.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor};

use crate::model::Qwen;

/// Log-probability of each target under `logits`, and the entropy of each
/// position's distribution. Differentiable (autodiff) through `logits`.
///
/// # Shapes
/// - logits: `[batch, seq, vocab]`
/// - targets: `[batch, seq]`
/// - returns: (`logp [batch, seq]`, `entropy [batch, seq]`)
pub fn token_logprobs(logits: Tensor<3>, targets: Tensor<2, Int>) -> (Tensor<2>, Tensor<2>) {
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

/// [`token_logprobs`] without the entropy: the log-probability of each target, by the same
/// operations (so the same values and gradients, bit for bit), without the two passes over
/// `[batch, seq, vocab]` the entropy takes. For the SFT loss and every recomputation that
/// discards the entropy.
pub fn target_logprobs(logits: Tensor<3>, targets: Tensor<2, Int>) -> Tensor<2> {
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
    let [logp, entropy] = over_logit_chunks(model, tokens, max_logit_elements, |l, t| {
        let (logp, entropy) = token_logprobs(l, t);
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
    let [logp] = over_logit_chunks(model, tokens, max_logit_elements, |l, t| {
        [target_logprobs(l, t)]
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
    let rows = (max_logit_elements / vocab).clamp(1, b);
    let positions = (max_logit_elements / (rows * vocab)).clamp(1, n);
    let mut joined_rows: [Vec<Tensor<2>>; N] = std::array::from_fn(|_| Vec::new());
    for r in (0..b).step_by(rows) {
        let r_end = (r + rows).min(b);
        let mut parts: [Vec<Tensor<2>>; N] = std::array::from_fn(|_| Vec::new());
        for p in (0..n).step_by(positions) {
            let p_end = (p + positions).min(n);
            let logits = model.logits(hidden.clone().slice([r..r_end, p..p_end]));
            let results = per_chunk(logits, targets.clone().slice([r..r_end, p..p_end]));
            for (part, result) in parts.iter_mut().zip(results) {
                part.push(result);
            }
        }
        for (row, part) in joined_rows.iter_mut().zip(parts) {
            row.push(Tensor::cat(part, 1));
        }
    }
    joined_rows.map(|rows| Tensor::cat(rows, 0))
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
