//! The fused loss's memory does not grow with `batch × length × vocabulary`: the heap's peak
//! during a forward and backward pass, measured by a counting global allocator (the CPU
//! backend allocates its tensors on the Rust heap, `rstar_testdata::alloc`). Its own test binary,
//! with one test, so no other test allocates while it measures.
use burn::tensor::{Device, Int, Tensor, TensorData};
use rstar_policy::{
    Qwen, QwenConfig, masked_nll, sequence_logprobs_chunked, sequence_loss_chunked,
    sequence_nll_chunked,
};
use rstar_testdata::alloc::{Counting, peak, reset_peak};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const BATCH: usize = 4;
const LEN: usize = 257;
/// The fused loss's chunk limit, in logits: fixed while the vocabulary grows.
const CHUNK: usize = 1 << 15;

/// What a pass computes: the SFT loss, or a policy-gradient-like loss with an entropy bonus
/// (what the RL update computes with `rl.grpo.entropy_coeff ≠ 0`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Loss {
    Nll,
    WithEntropy,
}

/// Peak heap growth (bytes) of one forward + backward at `vocab`, through the fused loss or
/// through the graph that keeps every chunk's logits.
fn peak_bytes(vocab: usize, fused: bool, kind: Loss) -> usize {
    let device = Device::flex().autodiff();
    let mut config = QwenConfig::test_tiny(vocab);
    config.hidden_size = 8;
    config.intermediate_size = 16;
    config.num_hidden_layers = 1;
    config.num_attention_heads = 2;
    config.num_key_value_heads = 1;
    config.head_dim = 4;
    let model = Qwen::random(config, 1, &device).unwrap();
    let ids: Vec<i64> = (0..BATCH * LEN)
        .map(|i| ((i * 7919) % vocab) as i64)
        .collect();
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [BATCH, LEN]), &device);
    let mask = Tensor::<2>::ones([BATCH, LEN - 1], &device);
    let loss_of = |logp: Tensor<2>, entropy: Tensor<2>| match kind {
        Loss::Nll => masked_nll(logp, mask.clone()),
        Loss::WithEntropy => (logp.mul_scalar(0.5) - entropy.mul_scalar(0.01))
            .sum()
            .reshape([1]),
    };
    let base = reset_peak();
    let loss = match (fused, kind) {
        (true, Loss::Nll) => sequence_nll_chunked(&model, tokens, mask.clone(), CHUNK),
        (true, Loss::WithEntropy) => {
            sequence_loss_chunked(&model, tokens, CHUNK, |l, e| {
                Ok::<_, std::convert::Infallible>((loss_of(l, e), ()))
            })
            .unwrap()
            .0
        }
        (false, _) => {
            let (logp, entropy) = sequence_logprobs_chunked(&model, tokens, CHUNK);
            loss_of(logp, entropy)
        }
    };
    let grads = loss.backward();
    assert!(model.embed_tokens.val().grad(&grads).is_some());
    drop(grads);
    peak() - base
}

#[test]
fn fused_loss_memory_does_not_grow_with_positions_times_vocabulary() {
    let (small, large) = (256, 4096);
    // One `[batch, len, vocab]` f32 tensor's growth between the two vocabularies.
    let one_logits_tensor = BATCH * (LEN - 1) * (large - small) * 4;
    for kind in [Loss::Nll, Loss::WithEntropy] {
        let fused = peak_bytes(large, true, kind).saturating_sub(peak_bytes(small, true, kind));
        let kept = peak_bytes(large, false, kind).saturating_sub(peak_bytes(small, false, kind));
        eprintln!(
            "{kind:?}: peak growth from vocabulary {small} to {large}: fused {fused} B, chunked-but-kept {kept} B, one logits tensor {one_logits_tensor} B"
        );
        // The measurement sees the graph that keeps the logits of every chunk …
        assert!(
            kept >= one_logits_tensor,
            "{kind:?}: the kept-logits graph grew by only {kept} B"
        );
        // … and the fused loss grows only by vocabulary-sized (not positions × vocabulary)
        // tensors: the embedding's gradient and the head's, a handful of `[d_model, vocab]`
        // buffers, and the matrix product's packing buffers, whose size depends on the CPU's
        // kernel (2.2 MB on an AVX-512 Xeon, under 2 MB on the AMD EPYC before it): a quarter
        // of one logits tensor bounds both, and the kept graph grows by 20 times that.
        assert!(
            fused < one_logits_tensor / 4,
            "{kind:?}: the fused loss grew by {fused} B, against {one_logits_tensor} B for one logits tensor"
        );
    }
}
