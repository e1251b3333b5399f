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

/// Next-token log-probs of whole sequences: position `t` scores `tokens[t+1]`
/// given `tokens[..=t]`. Right padding is harmless (causal attention); mask it
/// out of the loss.
///
/// # Shapes
/// - tokens: `[batch, seq]` with `seq ≥ 2`
/// - returns: (`logp [batch, seq-1]`, `entropy [batch, seq-1]`)
pub fn sequence_logprobs(model: &Qwen, tokens: Tensor<2, Int>) -> (Tensor<2>, Tensor<2>) {
    let [b, t] = tokens.dims();
    assert!(t >= 2, "sequence_logprobs needs at least two tokens");
    let logits = model.forward(tokens.clone().slice([0..b, 0..t - 1]));
    token_logprobs(logits, tokens.slice([0..b, 1..t]))
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
