//! A Qwen2/Qwen3-compatible causal language model on Burn 0.22: the policy
//! that rStar2-Agent trains.
//!
//! One implementation serves HF checkpoints (Qwen2.5, Qwen3: `config.json` +
//! `*.safetensors` + `tokenizer.json`) and the small model the embedded default
//! trains from scratch ([`QwenConfig::tiny_char`] with the built-in
//! [`CharTokenizer`]). It provides:
//!
//! - [`Qwen`]: the decoder (token embedding, RMSNorm, rotary embeddings with θ
//!   from the config, grouped-query attention, q/k/v biases for Qwen2, q/k
//!   RMSNorm for Qwen3, SwiGLU, optional tied embeddings), with
//!   [`Qwen::forward`] (`[batch, seq]` → `[batch, seq, vocab]`) and a KV-cached
//!   [`Qwen::forward_cached`];
//! - [`token_logprobs`] / [`sequence_logprobs`] / [`masked_nll`]: differentiable
//!   per-token log-probs and entropies for the GRPO loss and SFT;
//! - [`sequence_loss`] / [`sequence_nll`]: a loss over those log-probs and entropies whose
//!   memory is bounded in the vocabulary, what training uses: above [`LOGIT_CHUNK_ELEMENTS`]
//!   logits, [`sequence_loss_chunked`] (chunked logits, recomputed in a closed-form backward;
//!   no `[batch, seq, vocab]` tensor is ever held, the entropy term included);
//! - [`generate`] / [`generate_requests`]: batched generation of prompts of
//!   different lengths with a KV cache, per-sequence stop strings, EOS, token
//!   budgets and seeded greedy/temperature/top-k/top-p sampling;
//! - [`Precision`]: f32, or bf16 compute over f32 master weights ([`Qwen::with_precision`]);
//! - [`Tokenizer`]: HF `tokenizer.json` (ChatML specials kept whole) or the
//!   built-in [`CharTokenizer`];
//! - [`load_dir`] / [`save_dir`]: HF directories and our own checkpoints (the
//!   same format), with errors naming the missing or misshapen tensor.
//!
//! It is **not** RL logic (advantages, losses, rollouts live in other crates)
//! and it picks no Burn backend: callers pass a [`burn::tensor::Device`]; the
//! `flex`, `wgpu` and `cuda` features only forward to Burn's.
//!
//! ```
//! use burn::tensor::Device;
//! use rstar_policy::{GenerationConfig, Qwen, QwenConfig, Tokenizer, generate};
//!
//! let device = Device::flex();
//! let tokenizer = Tokenizer::char();
//! let model = Qwen::random(QwenConfig::test_tiny(tokenizer.vocab_size()), 0, &device).unwrap();
//! let prompt = tokenizer.encode("<|im_start|>user\n2+2=").unwrap();
//! let config = GenerationConfig { max_new_tokens: 5, ..GenerationConfig::new() };
//! let out = generate(&model, &tokenizer, &[prompt], &config).unwrap();
//! assert_eq!(out[0].tokens.len(), 5);
//! ```
//!
//! # Crate features
//! - `flex`: Burn's pure-Rust CPU backend (with rayon and SIMD).
//! - `wgpu`: Burn's wgpu backend (Vulkan, Metal, DX12).
//! - `cuda`: Burn's CUDA backend.
//! - `tch`: LibTorch through burn-tch (for the GPU comparison; needs a libtorch, not built in CI).
//! - `fusion`, `autotune`: CubeCL kernel fusion and autotuning for `wgpu`/`cuda`, with the
//!   autotune results persisted on disk so a second run does not re-tune.
#![warn(missing_docs)]

pub mod alloc;
#[cfg(feature = "flex")]
pub mod bench;
pub mod checkpoint;
pub mod config;
pub mod digest;
pub mod error;
#[cfg(feature = "flex")]
mod fused;
pub mod generate;
pub mod logprobs;
pub mod lora;
pub mod model;
pub mod precision;
pub mod tokenizer;

pub use alloc::keep_freed_memory;
pub use checkpoint::{
    WeightDtype, load_dir, load_dir_with, load_model, load_model_from_bytes, load_model_with,
    safetensors_bytes, save_dir, save_dir_untied,
};
pub use config::{Architecture, QwenConfig};
pub use digest::{DIGEST_FILE, DigestCheck, Verify, verify_digests, write_digests};
pub use error::{Error, Result};
/// The instruction sets the fused CPU kernels run with (`flex`): [`cpu::level`], [`cpu::detected`].
#[cfg(feature = "flex")]
pub use fused::cpu;
pub use generate::{
    FinishReason, Generation, GenerationConfig, Request, Sampling, SamplingError, generate,
    generate_requests,
};
pub use logprobs::{
    LOGIT_CHUNK_ELEMENTS, masked_nll, sequence_logprobs, sequence_logprobs_chunked, sequence_loss,
    sequence_loss_chunked, sequence_nll, sequence_nll_chunked, sequence_target_logprobs,
    sequence_target_logprobs_chunked, sequence_target_loss, target_logprobs, token_logprobs,
};
pub use lora::LoraConfig;
pub use model::{KvCache, Qwen, TensorSpec, tensor_specs};
pub use precision::Precision;
pub use tokenizer::{CharTokenizer, Tokenizer};
