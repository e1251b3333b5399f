//! The Qwen2/Qwen3 decoder: embedding, RMSNorm, RoPE, grouped-query
//! attention, SwiGLU, and a KV cache.

use std::cell::OnceCell;

use burn::module::{Module, Param};
use burn::tensor::activation::{silu, softmax};
use burn::tensor::module::{attention, linear};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Device, FloatDType, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::QwenConfig;
use crate::error::{Error, Result};
use crate::lora::{LayerLora, LoraPair, QwenLora, Target};
use crate::precision::Precision;

/// The value masked attention scores are set to. Finite, so that a query row
/// whose keys are all masked (a left-padding position) stays finite instead of
/// turning into NaN; `exp` of it underflows to exactly zero next to any real score.
const MASKED: f32 = -1.0e30;

/// One HF tensor a config needs: its name and its HF shape
/// (`[out_features, in_features]` for linear weights).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    /// HF name, e.g. `model.layers.0.self_attn.q_proj.weight`.
    pub name: String,
    /// HF shape.
    pub shape: Vec<usize>,
    /// Whether this is a linear weight stored transposed (`[in, out]`) here.
    pub transposed: bool,
}

/// Grouped-query self-attention with optional q/k/v biases (Qwen2) and
/// per-head q/k RMSNorm (Qwen3).
#[derive(Module, Debug)]
pub struct Attention {
    /// `[d_model, heads·head_dim]`.
    pub q_proj: Param<Tensor<2>>,
    /// `[d_model, kv_heads·head_dim]`.
    pub k_proj: Param<Tensor<2>>,
    /// `[d_model, kv_heads·head_dim]`.
    pub v_proj: Param<Tensor<2>>,
    /// `[heads·head_dim, d_model]`.
    pub o_proj: Param<Tensor<2>>,
    /// `[heads·head_dim]` (Qwen2).
    pub q_bias: Option<Param<Tensor<1>>>,
    /// `[kv_heads·head_dim]` (Qwen2).
    pub k_bias: Option<Param<Tensor<1>>>,
    /// `[kv_heads·head_dim]` (Qwen2).
    pub v_bias: Option<Param<Tensor<1>>>,
    /// `[head_dim]` (Qwen3).
    pub q_norm: Option<Param<Tensor<1>>>,
    /// `[head_dim]` (Qwen3).
    pub k_norm: Option<Param<Tensor<1>>>,
}

/// The SwiGLU MLP: `down(silu(gate(x)) · up(x))`.
#[derive(Module, Debug)]
pub struct Mlp {
    /// `[d_model, intermediate]`.
    pub gate_proj: Param<Tensor<2>>,
    /// `[d_model, intermediate]`.
    pub up_proj: Param<Tensor<2>>,
    /// `[intermediate, d_model]`.
    pub down_proj: Param<Tensor<2>>,
}

/// A pre-norm decoder layer.
#[derive(Module, Debug)]
pub struct DecoderLayer {
    /// RMSNorm before attention, `[d_model]`.
    pub input_layernorm: Param<Tensor<1>>,
    /// Self-attention.
    pub self_attn: Attention,
    /// RMSNorm before the MLP, `[d_model]`.
    pub post_attention_layernorm: Param<Tensor<1>>,
    /// The MLP.
    pub mlp: Mlp,
}

/// A Qwen2/Qwen3 causal language model.
///
/// # Shapes
/// - tokens: `[batch, seq]` (Int)
/// - logits: `[batch, seq, vocab]`
///
/// Linear weights are stored `[in, out]` (HF stores `[out, in]`; loading and
/// saving transpose).
#[derive(Module, Debug)]
pub struct Qwen {
    /// Token embedding `[vocab, d_model]`.
    pub embed_tokens: Param<Tensor<2>>,
    /// The decoder layers.
    pub layers: Vec<DecoderLayer>,
    /// Final RMSNorm `[d_model]`.
    pub norm: Param<Tensor<1>>,
    /// Output projection `[d_model, vocab]`; `None` when tied to the embedding.
    pub lm_head: Option<Param<Tensor<2>>>,
    /// The hyperparameters.
    #[module(skip)]
    pub config: QwenConfig,
    /// The compute precision (the parameters stay f32); see [`Qwen::with_precision`].
    #[module(skip)]
    pub precision: Precision,
    /// Whether the fused CPU kernels run where they apply; see [`Qwen::with_fused_kernels`].
    #[module(skip)]
    pub fused_kernels: bool,
    /// Whether training losses recompute each decoder layer in the backward pass instead of
    /// keeping its activations; see [`Qwen::with_gradient_checkpointing`].
    #[module(skip)]
    pub checkpointing: bool,
    /// LoRA adapters over the (then frozen) projections; see [`Qwen::with_lora`]. The last
    /// field, so the adapters come after the base in the parameter visiting order.
    pub lora: Option<QwenLora>,
}

/// Per-layer cached keys and values for incremental decoding.
///
/// Keys and values are `[batch, kv_heads, capacity, head_dim]`, keys already rotated: the
/// first `len` slots are cached, the rest is room that the next tokens are written into in
/// place (a decoding step copies one slot per row, not the whole cache; the cache grows by
/// [`KV_GROW`] slots at a time). All rows share `len` slots; shorter sequences are left-padded.
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<Option<LayerKv>>,
}

/// Slots a layer's cache grows by when a pass needs more room: a prefill allocates its length
/// rounded up to a multiple of this, and the cache is copied once per this many decoded tokens.
pub(crate) const KV_GROW: usize = 256;

/// One layer's cache: `k`, `v` `[batch, kv_heads, capacity, head_dim]`, slots `0..len` written.
#[derive(Debug, Clone)]
pub(crate) struct LayerKv {
    k: Tensor<4>,
    v: Tensor<4>,
    len: usize,
}

impl LayerKv {
    /// Writes `k`, `v` (`[batch, kv_heads, t, head_dim]`) after the cached slots of `slot`
    /// (growing it when it has no room) and returns the whole buffers with their live length:
    /// the cached slots, then the `t` new ones.
    fn append(
        slot: &mut Option<LayerKv>,
        k: Tensor<4>,
        v: Tensor<4>,
    ) -> (Tensor<4>, Tensor<4>, usize) {
        let [b, kvh, t, hd] = k.dims();
        let cached = slot.take();
        let len = cached.as_ref().map_or(0, |c| c.len);
        let end = len + t;
        let (k, v) = match cached {
            Some(c) if end <= c.k.dims()[2] => {
                // In place when this cache holds the only reference (Burn copies otherwise).
                let at = [0..b, 0..kvh, len..end, 0..hd];
                (c.k.slice_assign(at.clone(), k), c.v.slice_assign(at, v))
            }
            cached => {
                // The cached slots, the new ones, then room up to a multiple of `KV_GROW`.
                let room = end.next_multiple_of(KV_GROW) - end;
                let grow = |cached: Option<Tensor<4>>, new: Tensor<4>| {
                    let zeros =
                        Tensor::<4>::zeros([b, kvh, room, hd], (&new.device(), new.dtype()));
                    let live = cached.map(|c| c.slice([0..b, 0..kvh, 0..len, 0..hd]));
                    Tensor::cat(live.into_iter().chain([new, zeros]).collect(), 2)
                };
                let (ck, cv) = cached.map(|c| (c.k, c.v)).unzip();
                (grow(ck, k), grow(cv, v))
            }
        };
        *slot = Some(LayerKv {
            k: k.clone(),
            v: v.clone(),
            len: end,
        });
        (k, v, end)
    }
}

impl KvCache {
    /// An empty cache for `num_layers` layers.
    pub fn new(num_layers: usize) -> Self {
        KvCache {
            layers: vec![None; num_layers],
        }
    }

    /// Number of cached positions (slots): every layer's, kept by the layers themselves.
    pub fn len(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .next()
            .map_or(0, |layer| layer.len)
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Slots the cache holds room for before it must grow (at least [`KvCache::len`]; 0 before
    /// the first pass).
    pub fn capacity(&self) -> usize {
        self.layers
            .iter()
            .flatten()
            .map(|layer| layer.k.dims()[2])
            .min()
            .unwrap_or(0)
    }

    /// Keeps only the given batch rows, in that order.
    pub fn select_rows(&mut self, rows: &[usize], device: &Device) {
        let idx = Tensor::<1, Int>::from_data(
            TensorData::new(
                rows.iter().map(|&r| r as i64).collect::<Vec<_>>(),
                [rows.len()],
            ),
            device,
        );
        for layer in self.layers.iter_mut().flatten() {
            layer.k = layer.k.clone().select(0, idx.clone());
            layer.v = layer.v.clone().select(0, idx.clone());
        }
    }
}

/// The tensors a config needs, in HF names, order and layout.
pub fn tensor_specs(config: &QwenConfig) -> Vec<TensorSpec> {
    let d = config.hidden_size;
    let q = config.num_attention_heads * config.head_dim;
    let kv = config.num_key_value_heads * config.head_dim;
    let i = config.intermediate_size;
    let spec = |name: String, shape: Vec<usize>, transposed: bool| TensorSpec {
        name,
        shape,
        transposed,
    };
    let mut out = vec![spec(
        "model.embed_tokens.weight".into(),
        vec![config.vocab_size, d],
        false,
    )];
    for l in 0..config.num_hidden_layers {
        let p = format!("model.layers.{l}");
        out.push(spec(format!("{p}.input_layernorm.weight"), vec![d], false));
        out.push(spec(
            format!("{p}.self_attn.q_proj.weight"),
            vec![q, d],
            true,
        ));
        out.push(spec(
            format!("{p}.self_attn.k_proj.weight"),
            vec![kv, d],
            true,
        ));
        out.push(spec(
            format!("{p}.self_attn.v_proj.weight"),
            vec![kv, d],
            true,
        ));
        out.push(spec(
            format!("{p}.self_attn.o_proj.weight"),
            vec![d, q],
            true,
        ));
        if config.qkv_bias {
            out.push(spec(format!("{p}.self_attn.q_proj.bias"), vec![q], false));
            out.push(spec(format!("{p}.self_attn.k_proj.bias"), vec![kv], false));
            out.push(spec(format!("{p}.self_attn.v_proj.bias"), vec![kv], false));
        }
        if config.qk_norm {
            let hd = config.head_dim;
            out.push(spec(
                format!("{p}.self_attn.q_norm.weight"),
                vec![hd],
                false,
            ));
            out.push(spec(
                format!("{p}.self_attn.k_norm.weight"),
                vec![hd],
                false,
            ));
        }
        out.push(spec(
            format!("{p}.post_attention_layernorm.weight"),
            vec![d],
            false,
        ));
        out.push(spec(format!("{p}.mlp.gate_proj.weight"), vec![i, d], true));
        out.push(spec(format!("{p}.mlp.up_proj.weight"), vec![i, d], true));
        out.push(spec(format!("{p}.mlp.down_proj.weight"), vec![d, i], true));
    }
    out.push(spec("model.norm.weight".into(), vec![d], false));
    if !config.tie_word_embeddings {
        out.push(spec(
            "lm_head.weight".into(),
            vec![config.vocab_size, d],
            true,
        ));
    }
    out
}

pub(crate) fn transpose_host(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = data[r * cols + c];
        }
    }
    out
}

/// Reads a float tensor back to the host as `f32`.
pub(crate) fn to_vec_f32<const D: usize>(t: Tensor<D>) -> Result<Vec<f32>> {
    t.try_into_vec_as::<f32>()
        .map_err(|e| Error::Readback(format!("{e:?}")))
}

impl Qwen {
    /// The RMSNorm gains (each layer's input and post-attention norms, Qwen3's per-head q/k
    /// norms, the final norm), in visiting order. They sit near 1 where the matrices' entries
    /// are about 0.02–0.1, so an optimizer that steps every parameter by about its learning
    /// rate (Adam) moves them far more slowly relative to their size; trainers give them a
    /// learning-rate group of their own (`rstar_train::optim::rl_learning_rate`).
    pub fn norm_gains(&self) -> Vec<Param<Tensor<1>>> {
        let mut gains = Vec::with_capacity(4 * self.layers.len() + 1);
        for layer in &self.layers {
            gains.push(layer.input_layernorm.clone());
            gains.extend(layer.self_attn.q_norm.clone());
            gains.extend(layer.self_attn.k_norm.clone());
            gains.push(layer.post_attention_layernorm.clone());
        }
        gains.push(self.norm.clone());
        gains
    }

    /// Builds a model from HF-layout tensors supplied by `get(spec)`, which
    /// returns the data (row-major, HF shape) of each tensor in [`tensor_specs`].
    pub fn from_tensors(
        config: QwenConfig,
        device: &Device,
        mut get: impl FnMut(&TensorSpec) -> Result<Vec<f32>>,
    ) -> Result<Self> {
        config.validate()?;
        let specs = tensor_specs(&config);
        let load2 = |s: &TensorSpec,
                     get: &mut dyn FnMut(&TensorSpec) -> Result<Vec<f32>>|
         -> Result<Param<Tensor<2>>> {
            let data = get(s)?;
            let (rows, cols) = (s.shape[0], s.shape[1]);
            let (data, shape) = if s.transposed {
                (transpose_host(&data, rows, cols), [cols, rows])
            } else {
                (data, [rows, cols])
            };
            Ok(Param::from_data(TensorData::new(data, shape), device))
        };
        let mut specs_iter = specs.iter();
        let mut take = || specs_iter.next().expect("spec order matches construction");
        let p1 = |s: &TensorSpec,
                  get: &mut dyn FnMut(&TensorSpec) -> Result<Vec<f32>>|
         -> Result<Param<Tensor<1>>> {
            let data = get(s)?;
            Ok(Param::from_data(
                TensorData::new(data, [s.shape[0]]),
                device,
            ))
        };

        let embed_tokens = load2(take(), &mut get)?;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for _ in 0..config.num_hidden_layers {
            let input_layernorm = p1(take(), &mut get)?;
            let q_proj = load2(take(), &mut get)?;
            let k_proj = load2(take(), &mut get)?;
            let v_proj = load2(take(), &mut get)?;
            let o_proj = load2(take(), &mut get)?;
            let (q_bias, k_bias, v_bias) = if config.qkv_bias {
                (
                    Some(p1(take(), &mut get)?),
                    Some(p1(take(), &mut get)?),
                    Some(p1(take(), &mut get)?),
                )
            } else {
                (None, None, None)
            };
            let (q_norm, k_norm) = if config.qk_norm {
                (Some(p1(take(), &mut get)?), Some(p1(take(), &mut get)?))
            } else {
                (None, None)
            };
            let post_attention_layernorm = p1(take(), &mut get)?;
            let gate_proj = load2(take(), &mut get)?;
            let up_proj = load2(take(), &mut get)?;
            let down_proj = load2(take(), &mut get)?;
            layers.push(DecoderLayer {
                input_layernorm,
                self_attn: Attention {
                    q_proj,
                    k_proj,
                    v_proj,
                    o_proj,
                    q_bias,
                    k_bias,
                    v_bias,
                    q_norm,
                    k_norm,
                },
                post_attention_layernorm,
                mlp: Mlp {
                    gate_proj,
                    up_proj,
                    down_proj,
                },
            });
        }
        let norm = p1(take(), &mut get)?;
        let lm_head = if config.tie_word_embeddings {
            None
        } else {
            Some(load2(take(), &mut get)?)
        };
        Ok(Qwen {
            embed_tokens,
            layers,
            norm,
            lm_head,
            config,
            precision: Precision::F32,
            fused_kernels: true,
            checkpointing: false,
            lora: None,
        })
    }

    /// A randomly initialised model, reproducible from `seed`: matrices and
    /// the embedding ~ N(0, 0.02²) (HF's `initializer_range`), norms 1, biases 0.
    pub fn random(config: QwenConfig, seed: u64, device: &Device) -> Result<Self> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        Self::from_tensors(config, device, |spec| {
            let n: usize = spec.shape.iter().product();
            let name = &spec.name;
            Ok(if name.ends_with("norm.weight") {
                vec![1.0; n]
            } else if name.ends_with(".bias") {
                vec![0.0; n]
            } else {
                (0..n).map(|_| 0.02 * standard_normal(&mut rng)).collect()
            })
        })
    }

    /// The tensors in HF names and layout (for saving), in [`tensor_specs`] order. With LoRA
    /// adapters, each adapted projection is the merged weight `W + s·A·B`, so what is saved or
    /// published is the model that computes; [`Qwen::adapter_tensors`] gives the adapters alone.
    pub fn hf_tensors(&self) -> Result<Vec<(TensorSpec, Vec<f32>)>> {
        let specs = tensor_specs(&self.config);
        let mut params: Vec<Tensor<2>> = Vec::new();
        let mut vecs: Vec<Tensor<1>> = Vec::new();
        params.push(self.embed_tokens.val());
        for (i, l) in self.layers.iter().enumerate() {
            // A bf16 base (`Qwen::with_base_precision`) is read as f32.
            let merged = |w: &Param<Tensor<2>>, t: Target| {
                let w = w.val().cast(FloatDType::F32);
                match self.adapter(i, t) {
                    Some((p, scale)) => w + p.merged_delta(scale),
                    None => w,
                }
            };
            vecs.push(l.input_layernorm.val());
            let a = &l.self_attn;
            params.extend([
                merged(&a.q_proj, Target::QProj),
                merged(&a.k_proj, Target::KProj),
                merged(&a.v_proj, Target::VProj),
                merged(&a.o_proj, Target::OProj),
            ]);
            for b in [&a.q_bias, &a.k_bias, &a.v_bias, &a.q_norm, &a.k_norm]
                .into_iter()
                .flatten()
            {
                vecs.push(b.val());
            }
            vecs.push(l.post_attention_layernorm.val());
            params.extend([
                merged(&l.mlp.gate_proj, Target::GateProj),
                merged(&l.mlp.up_proj, Target::UpProj),
                merged(&l.mlp.down_proj, Target::DownProj),
            ]);
        }
        vecs.push(self.norm.val());
        if let Some(h) = &self.lm_head {
            params.push(h.val());
        }
        let mut params = params.into_iter();
        let mut vecs = vecs.into_iter();
        let mut out = Vec::with_capacity(specs.len());
        for spec in specs {
            let data = if spec.shape.len() == 2 {
                let t = params.next().expect("one 2-D param per 2-D spec");
                let [r, c] = t.dims();
                let data = to_vec_f32(t)?;
                if spec.transposed {
                    transpose_host(&data, r, c)
                } else {
                    data
                }
            } else {
                to_vec_f32(vecs.next().expect("one 1-D param per 1-D spec"))?
            };
            out.push((spec, data));
        }
        Ok(out)
    }

    /// Layer `layer`'s adapter on `target` with its scale, if any.
    fn adapter(&self, layer: usize, target: Target) -> Option<(&LoraPair, f64)> {
        let lora = self.lora.as_ref()?;
        Some((lora.layers[layer].get(target)?, lora.scale))
    }

    /// The same model computing in `precision`. With [`Precision::Bf16`] the weights are cast to
    /// bf16 where they are used (inside the autodiff graph, so gradients reach the f32
    /// parameters as f32 and the optimizer's state stays f32); RMSNorm, the output projection
    /// and the logits stay f32.
    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// The same model with the fused CPU kernels on (the default) or off.
    ///
    /// On Burn's `flex` backend in f32 (with the crate's `flex` feature), RMSNorm, SwiGLU, a
    /// decoding step's attention over the KV cache, and under autodiff for sequences without
    /// padding or a KV cache RoPE and the causal attention, each run as one op with a
    /// hand-written backward pass instead of Burn's composition of elementwise ops: the same
    /// values and gradients within f32 rounding, the training step about 2.5 times as fast
    /// on two cores (`docs/benchmarks.md`, "policy: fused kernels on flex"). Elsewhere (other backends, bf16) the composed
    /// ops run either way; off, they run everywhere, the reference the fused path is tested
    /// against.
    pub fn with_fused_kernels(mut self, on: bool) -> Self {
        self.fused_kernels = on;
        self
    }

    /// The same model with per-layer gradient checkpointing on or off (off by default).
    ///
    /// On, the training losses ([`crate::sequence_loss`], [`crate::sequence_nll`] and the other
    /// `sequence_*_loss` functions, through [`crate::sequence_loss_chunked`]) run the decoder
    /// once with nothing recorded, keeping only each layer's input, and then, from the top,
    /// recompute one layer at a time under autodiff and push the loss's gradient through it:
    /// the step holds `layers + 1` hidden-state tensors and one layer's activations instead of
    /// every layer's, for one more forward pass. The loss they return has the same value and,
    /// through `backward()`, the same parameter gradients (within f32 rounding), so a trainer
    /// changes nothing else. Works on every backend: it is built from Burn's tensor API alone.
    pub fn with_gradient_checkpointing(mut self, on: bool) -> Self {
        self.checkpointing = on;
        self
    }

    /// The device the weights live on.
    pub fn device(&self) -> Device {
        self.embed_tokens.val().device()
    }

    /// Logits for every position of unpadded sequences (positions `0..seq`,
    /// causal mask). Differentiable when the model is on an autodiff device.
    ///
    /// # Shapes
    /// - tokens: `[batch, seq]`
    /// - returns: `[batch, seq, vocab]`
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let [batch, _] = tokens.dims();
        let hidden = self.forward_hidden(tokens, &vec![0; batch], None);
        self.logits(hidden)
    }

    /// Incremental forward with a KV cache, for unpadded sequences: the new
    /// tokens sit at positions `cache.len()..cache.len() + seq`.
    ///
    /// # Shapes
    /// - tokens: `[batch, seq]` (the new tokens only)
    /// - returns: `[batch, seq, vocab]`
    pub fn forward_cached(&self, tokens: Tensor<2, Int>, cache: &mut KvCache) -> Tensor<3> {
        let [batch, _] = tokens.dims();
        let hidden = self.forward_hidden(tokens, &vec![0; batch], Some(cache));
        self.logits(hidden)
    }

    /// Projects final hidden states to logits.
    ///
    /// # Shapes
    /// - hidden: `[batch, seq, d_model]` (after the final norm)
    /// - returns: `[batch, seq, vocab]`
    pub fn logits(&self, hidden: Tensor<3>) -> Tensor<3> {
        product(
            hidden.cast(FloatDType::F32),
            self.head(),
            None,
            self.fused_kernels,
        )
    }

    /// The output projection `[d_model, vocab]`: `lm_head`, or the transposed embedding when
    /// they are tied. Tracked like the parameters.
    pub fn head(&self) -> Tensor<2> {
        match &self.lm_head {
            Some(h) => h.val(),
            None => self.embed_tokens.val().transpose(),
        }
    }

    /// The decoder up to and including the final norm, for left-padded rows.
    ///
    /// Row `r` starts with `pads[r]` padding slots: its real tokens sit at
    /// slots `pads[r]..` and get positions counted from its first real token;
    /// padding keys are masked out. With a cache, the new tokens occupy slots
    /// `cache.len()..`.
    ///
    /// # Shapes
    /// - tokens: `[batch, seq]`
    /// - returns: `[batch, seq, d_model]`
    pub fn forward_hidden(
        &self,
        tokens: Tensor<2, Int>,
        pads: &[usize],
        mut cache: Option<&mut KvCache>,
    ) -> Tensor<3> {
        let [batch, seq] = tokens.dims();
        let offset = cache.as_ref().map_or(0, |k| k.len());
        let context = self.pass_context(&tokens.device(), batch, seq, pads, offset);
        let mut x = self.embed(tokens);
        for l in 0..self.layers.len() {
            let kv = cache.as_mut().map(|k| &mut k.layers[l]);
            x = self.layer_forward(l, x, &context, kv);
        }
        self.final_norm(x)
    }

    /// What every layer of a pass over `[batch, seq]` new tokens after `offset` cached ones
    /// shares (rotary tables, the additive mask, whether the fused kernels apply), built once.
    pub(crate) fn pass_context(
        &self,
        device: &Device,
        batch: usize,
        seq: usize,
        pads: &[usize],
        offset: usize,
    ) -> PassContext {
        assert_eq!(pads.len(), batch, "one pad count per row");
        let c = &self.config;

        // Positions per row and slot, as floats for the RoPE angles.
        let mut pos = Vec::with_capacity(batch * seq);
        for &p in pads {
            for i in 0..seq {
                pos.push((offset + i).saturating_sub(p) as f32);
            }
        }
        let dtype = self.precision.dtype();
        let fused_norms = self.fused_kernels && dtype == FloatDType::F32;
        // Fused RoPE and attention: under autodiff, the causal mask alone (no padding, no cache).
        let fused_attention = fused_norms
            && offset == 0
            && !pads.iter().any(|&p| p > 0)
            && cfg!(feature = "flex")
            && self.embed_tokens.val().is_autodiff();
        // Host RoPE tables for the fused RoPE: training's fused attention, and inference on
        // flex (any padding, any cache).
        let inference = !self.embed_tokens.val().is_autodiff();
        let host_tables = (fused_attention || (fused_norms && inference && cfg!(feature = "flex")))
            .then(|| host_rope_tables(c, &pos));
        let (cos, sin) = rope_tables(c, pos, batch, seq, device);
        let (cos, sin) = (cos.cast(dtype), sin.cast(dtype));

        // The additive mask, built when a composed attention first asks for it: the fused
        // kernels (training's causal attention, inference's attention over the cache) take the
        // causal structure and each row's padding without one, and at 8 padded rows of 2 048
        // tokens it would be 134 MB built one float at a time.
        let bias = Mask {
            cell: OnceCell::new(),
            offset,
            seq,
            device: device.clone(),
            dtype,
        };
        PassContext {
            cos,
            sin,
            bias,
            dtype,
            fused_norms,
            host_tables,
            pads: pads.to_vec(),
        }
    }

    /// The token embeddings of `tokens` in the compute dtype, `[batch, seq, d_model]`.
    pub(crate) fn embed(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let [batch, seq] = tokens.dims();
        let ids = tokens.reshape([batch * seq]);
        self.embed_tokens
            .val()
            .select(0, ids)
            .reshape([batch, seq, self.config.hidden_size])
            .cast(self.precision.dtype())
    }

    /// Decoder layer `l` on `x`, `[batch, seq, d_model]` in and out.
    pub(crate) fn layer_forward(
        &self,
        l: usize,
        x: Tensor<3>,
        context: &PassContext,
        kv: Option<&mut Option<LayerKv>>,
    ) -> Tensor<3> {
        let pass = Pass {
            cos: &context.cos,
            sin: &context.sin,
            bias: &context.bias,
            c: &self.config,
            dtype: context.dtype,
            fused_norms: context.fused_norms,
            host_tables: context.host_tables.as_ref(),
            pads: &context.pads,
            lora: self.lora.as_ref().map(|lora| (&lora.layers[l], lora.scale)),
        };
        self.layers[l].forward(x, &pass, kv)
    }

    /// The final RMSNorm.
    pub(crate) fn final_norm(&self, x: Tensor<3>) -> Tensor<3> {
        let fused = self.fused_kernels && self.precision.dtype() == FloatDType::F32;
        norm(x, &self.norm, self.config.rms_norm_eps, fused)
    }
}

/// The additive attention mask of one pass, `[batch or 1, 1, seq, total]` (0 where a query may
/// look, [`MASKED`] at the future and at each row's padding; none for one unpadded new token),
/// built on first use from the pass's padding.
pub(crate) struct Mask {
    cell: OnceCell<Option<Tensor<4>>>,
    offset: usize,
    seq: usize,
    device: Device,
    dtype: FloatDType,
}

impl Mask {
    /// The mask for rows with `pads` (the pass's), built now if no layer asked for it before.
    fn get(&self, pads: &[usize]) -> Option<&Tensor<4>> {
        self.cell
            .get_or_init(|| {
                let (offset, seq) = (self.offset, self.seq);
                let total = offset + seq;
                let any_pad = pads.iter().any(|&p| p > 0);
                if !any_pad && seq == 1 {
                    return None;
                }
                let rows = if any_pad { pads.len() } else { 1 };
                let mut m = Vec::with_capacity(rows * seq * total);
                for &p in &pads[..rows] {
                    for i in 0..seq {
                        for j in 0..total {
                            let masked = j > offset + i || j < p;
                            m.push(if masked { MASKED } else { 0.0 });
                        }
                    }
                }
                Some(
                    Tensor::<4>::from_data(TensorData::new(m, [rows, 1, seq, total]), &self.device)
                        .cast(self.dtype),
                )
            })
            .as_ref()
    }

    /// Whether a layer asked for it.
    #[cfg(all(test, feature = "flex"))]
    pub(crate) fn built(&self) -> bool {
        self.cell.get().is_some()
    }
}

/// What the layers of one pass share: [`Qwen::pass_context`].
pub(crate) struct PassContext {
    cos: Tensor<4>,
    sin: Tensor<4>,
    pub(crate) bias: Mask,
    dtype: FloatDType,
    fused_norms: bool,
    host_tables: Option<HostTables>,
    pads: Vec<usize>,
}

impl DecoderLayer {
    fn forward(
        &self,
        x: Tensor<3>,
        pass: &Pass<'_>,
        kv: Option<&mut Option<LayerKv>>,
    ) -> Tensor<3> {
        let (c, fused) = (pass.c, pass.fused_norms);
        let h = norm(x.clone(), &self.input_layernorm, c.rms_norm_eps, fused);
        let x = x + self.self_attn.forward(h, pass, kv);
        let h = norm(
            x.clone(),
            &self.post_attention_layernorm,
            c.rms_norm_eps,
            fused,
        );
        x + self.mlp.forward(h, pass)
    }
}

impl Mlp {
    fn forward(&self, x: Tensor<3>, pass: &Pass<'_>) -> Tensor<3> {
        let fused = pass.fused_norms;
        // Training on flex without adapters on the gate and up projections: the two as one
        // product over `[W_gate | W_up]`, and SwiGLU reading it side by side (one product, one
        // input gradient, one weight gradient, where two of each and a sum were).
        #[cfg(feature = "flex")]
        if fused
            && x.is_autodiff()
            && crate::fused::runs_on(&x)
            && pass.lora.is_none_or(|(layer, _)| {
                layer.get(Target::GateProj).is_none() && layer.get(Target::UpProj).is_none()
            })
        {
            let w = Tensor::cat(
                vec![
                    weight(&self.gate_proj, pass.dtype),
                    weight(&self.up_proj, pass.dtype),
                ],
                1,
            );
            if let Some(product) = crate::fused::swiglu_packed(&product(x.clone(), w, None, true)) {
                return project(product, &self.down_proj, None, pass, Target::DownProj);
            }
        }
        let gate = project(x.clone(), &self.gate_proj, None, pass, Target::GateProj);
        let up = project(x, &self.up_proj, None, pass, Target::UpProj);
        #[cfg(feature = "flex")]
        let product = fused.then(|| crate::fused::swiglu(&gate, &up)).flatten();
        #[cfg(not(feature = "flex"))]
        let product: Option<Tensor<3>> = {
            let _ = fused;
            None
        };
        let product = product.unwrap_or_else(|| silu(gate) * up);
        project(product, &self.down_proj, None, pass, Target::DownProj)
    }
}

impl Attention {
    fn forward(
        &self,
        x: Tensor<3>,
        pass: &Pass<'_>,
        kv: Option<&mut Option<LayerKv>>,
    ) -> Tensor<3> {
        let heads = self.attend(x, pass, kv);
        project(heads, &self.o_proj, None, pass, Target::OProj)
    }

    /// Everything before `o_proj`: q/k/v, their norms and RoPE, and attention, returning the
    /// heads side by side, `[batch, seq, heads·head_dim]`.
    fn attend(&self, x: Tensor<3>, pass: &Pass<'_>, kv: Option<&mut Option<LayerKv>>) -> Tensor<3> {
        let Pass {
            cos,
            sin,
            bias,
            c,
            fused_norms,
            host_tables,
            ..
        } = *pass;
        let [b, t, _] = x.dims();
        let x_tracked = x.is_autodiff();
        let (h, kvh, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let g = h / kvh;
        let proj = |w: &Param<Tensor<2>>,
                    bias: &Option<Param<Tensor<1>>>,
                    target: Target,
                    heads: usize| {
            project(x.clone(), w, bias.as_ref(), pass, target).reshape([b, t, heads, hd])
        };
        let mut q = proj(&self.q_proj, &self.q_bias, Target::QProj, h); // [b, t, h, hd]
        let mut k = proj(&self.k_proj, &self.k_bias, Target::KProj, kvh); // [b, t, kvh, hd]
        let v = proj(&self.v_proj, &self.v_bias, Target::VProj, kvh).swap_dims(1, 2); // [b, kvh, t, hd]
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = norm(q, qn, c.rms_norm_eps, fused_norms);
            k = norm(k, kn, c.rms_norm_eps, fused_norms);
        }
        #[cfg(feature = "flex")]
        if let (true, Some((cos, sin))) = (x_tracked, host_tables) {
            // Training and scoring under autodiff (no padding, no cache): one op each for RoPE
            // (which also moves heads first) and the causal attention; `None` (not f32 on flex)
            // falls through to the composed ops below. Inference takes `cached_attention`
            // below instead.
            let fused = crate::fused::rope(&q, cos, sin).and_then(|q| {
                let k = crate::fused::rope(&k, cos, sin)?;
                crate::fused::causal_attention(&q, &k, &v, 1.0 / (hd as f32).sqrt())
            });
            if let Some(out) = fused {
                return out;
            }
        }
        // Inference on flex: RoPE as one op each (heads moved first), then the cache, then the
        // attention over it as one op below.
        #[cfg(feature = "flex")]
        let roped = match host_tables {
            Some((cos, sin)) if !x_tracked => crate::fused::rope(&q, cos, sin)
                .and_then(|q| Some((q, crate::fused::rope(&k, cos, sin)?))),
            _ => None,
        };
        #[cfg(not(feature = "flex"))]
        let roped: Option<(Tensor<4>, Tensor<4>)> = {
            let _ = host_tables;
            None
        };
        let (q, k) = match roped {
            Some(qk) => qk,
            None => (
                rope(q.swap_dims(1, 2), cos, sin), // [b, h, t, hd]
                rope(k.swap_dims(1, 2), cos, sin), // [b, kvh, t, hd]
            ),
        };
        // With a cache, `k`, `v` become its whole buffers, `tk` slots of them live.
        let (k, v, tk) = match kv {
            Some(slot) => LayerKv::append(slot, k, v),
            None => {
                let tk = k.dims()[2];
                (k, v, tk)
            }
        };
        #[cfg(feature = "flex")]
        if !x_tracked && fused_norms {
            // A prefill or a decoding step over the cache: one op, reading the grouped K/V in
            // place, each row over its own live slots (so its result does not depend on the
            // other rows' padding, and a prefill's last token gets a decoding step's bits).
            let scale = 1.0 / (hd as f32).sqrt();
            if let Some(out) = crate::fused::cached_attention(&q, &k, &v, tk, pass.pads, scale) {
                return out;
            }
        }
        let (k, v) = if k.dims()[2] == tk {
            (k, v)
        } else {
            let live = [0..b, 0..kvh, 0..tk, 0..hd];
            (k.slice(live.clone()), v.slice(live))
        };
        if !x_tracked {
            // Inference: the backend's fused attention (flex has naive and flash
            // kernels that never materialise the bias-added scores twice). It wants
            // one KV head per query head, so groups are expanded here.
            let expand = |t: Tensor<4>| {
                if g == 1 {
                    t
                } else {
                    t.unsqueeze_dim::<5>(2)
                        .expand([b, kvh, g, tk, hd])
                        .reshape([b, h, tk, hd])
                }
            };
            let bias = bias.get(pass.pads).map(|m| m.clone().expand([b, h, t, tk]));
            let out = attention(
                q,
                expand(k),
                expand(v),
                None,
                bias,
                AttentionModuleOptions::default(),
            );
            return out.swap_dims(1, 2).reshape([b, t, h * hd]);
        }
        // Grouped-query attention without copying K/V: query head `kv·g + j`
        // uses KV head `kv`, so the g query heads of a group are stacked along
        // the sequence axis and share one matmul with their KV head.
        // Scaling q (head_dim wide) is cheaper than scaling the scores (tk wide),
        // forward and backward.
        let q = q
            .mul_scalar(1.0 / (hd as f64).sqrt())
            .reshape([b, kvh, g * t, hd]);
        let scores = q.matmul(k.swap_dims(2, 3)); // [b, kvh, g·t, tk]
        let mut scores = scores.reshape([b, h, t, tk]);
        if let Some(bias) = bias.get(pass.pads) {
            scores = scores + bias.clone();
        }
        let probs = softmax(scores, 3).reshape([b, kvh, g * t, tk]);
        let out = probs.matmul(v).reshape([b, h, t, hd]); // [b, h, t, hd]
        out.swap_dims(1, 2).reshape([b, t, h * hd])
    }
}

/// A projection `x·W (+ bias)`, plus `s·(x·A)·B` where the pass's layer has an adapter on
/// `target`: the one place every linear map of a decoder layer goes through.
fn project(
    x: Tensor<3>,
    w: &Param<Tensor<2>>,
    bias: Option<&Param<Tensor<1>>>,
    pass: &Pass<'_>,
    target: Target,
) -> Tensor<3> {
    let bias = bias.map(|p| weight(p, pass.dtype));
    let adapter = pass
        .lora
        .and_then(|(layer, scale)| Some((layer.get(target)?, scale)));
    match adapter {
        None => product(x, weight(w, pass.dtype), bias, pass.fused_norms),
        Some((pair, scale)) => {
            product(x.clone(), weight(w, pass.dtype), bias, pass.fused_norms)
                + pair.delta(x, scale, pass.dtype)
        }
    }
}

/// `x · w (+ bias)`: with `fused`, on flex in f32, the fused product ([`crate::fused::linear`]:
/// flex's GEMM into a buffer of its own, forward and backward); else Burn's `linear`. Both give
/// the same values within f32 rounding (the same GEMM with the same parallelism, in practice the
/// same bits).
pub(crate) fn product<const D: usize>(
    x: Tensor<D>,
    w: Tensor<2>,
    bias: Option<Tensor<1>>,
    fused: bool,
) -> Tensor<D> {
    #[cfg(feature = "flex")]
    if fused && let Some(y) = crate::fused::linear(&x, &w) {
        return match bias {
            Some(b) => y + b.unsqueeze(),
            None => y,
        };
    }
    let _ = fused;
    linear(x, w, bias)
}

/// What every layer of one forward pass shares: the rotary tables, the additive mask, the
/// hyperparameters and the compute dtype.
#[derive(Clone, Copy)]
struct Pass<'a> {
    cos: &'a Tensor<4>,
    sin: &'a Tensor<4>,
    bias: &'a Mask,
    c: &'a QwenConfig,
    dtype: FloatDType,
    /// Whether RMSNorm and SwiGLU try the fused kernels.
    fused_norms: bool,
    /// RoPE's host tables when RoPE and attention try the fused kernels.
    host_tables: Option<&'a HostTables>,
    /// Each row's left padding.
    pads: &'a [usize],
    /// This layer's adapters and their scale, with LoRA.
    lora: Option<(&'a LayerLora, f64)>,
}

/// RoPE's cos and signed sin `[batch, seq, head_dim]` on the host, for the fused kernels.
#[cfg(feature = "flex")]
type HostTables = (crate::fused::Table, crate::fused::Table);
#[cfg(not(feature = "flex"))]
type HostTables = ();

/// [`rope_tables`]' values on the host (`pos` is `[batch·seq]`), for the fused RoPE.
#[cfg(feature = "flex")]
fn host_rope_tables(c: &QwenConfig, pos: &[f32]) -> HostTables {
    let (hd, half) = (c.head_dim, c.head_dim / 2);
    let inv_freq: Vec<f32> = (0..half)
        .map(|j| (1.0 / c.rope_theta.powf(2.0 * j as f64 / hd as f64)) as f32)
        .collect();
    let mut cos = Vec::with_capacity(pos.len() * hd);
    let mut sin = Vec::with_capacity(pos.len() * hd);
    for &p in pos {
        let angles = inv_freq.iter().map(|&f| p * f);
        let (c1, s1): (Vec<f32>, Vec<f32>) = angles.map(|a| (a.cos(), a.sin())).unzip();
        cos.extend_from_slice(&c1);
        cos.extend_from_slice(&c1);
        sin.extend(s1.iter().map(|s| -s));
        sin.extend_from_slice(&s1);
    }
    (
        crate::fused::Table(std::sync::Arc::new(cos)),
        crate::fused::Table(std::sync::Arc::new(sin)),
    )
}

#[cfg(not(feature = "flex"))]
fn host_rope_tables(_: &QwenConfig, _: &[f32]) -> HostTables {}

/// RMSNorm through the fused kernel when asked and it applies, else [`rms_norm`].
fn norm<const D: usize>(x: Tensor<D>, w: &Param<Tensor<1>>, eps: f64, fused: bool) -> Tensor<D> {
    #[cfg(feature = "flex")]
    if fused && let Some(y) = crate::fused::rms_norm(&x, &w.val(), eps) {
        return y;
    }
    let _ = fused;
    rms_norm(x, w, eps)
}

/// A parameter in the compute dtype: itself in f32, a cast (tracked, so the gradient reaches the
/// f32 parameter) otherwise.
fn weight<const D: usize>(w: &Param<Tensor<D>>, dtype: FloatDType) -> Tensor<D> {
    w.val().cast(dtype)
}

/// `w · x / sqrt(mean(x²) + eps)` over the last axis, computed in f32 and returned in `x`'s
/// dtype (a bf16 mean of squares over a wide row loses too much).
fn rms_norm<const D: usize>(x: Tensor<D>, w: &Param<Tensor<1>>, eps: f64) -> Tensor<D> {
    let dtype = x.dtype();
    let x = x.cast(FloatDType::F32);
    let rms = x.clone().square().mean_dim(D - 1).add_scalar(eps).sqrt();
    let out = x.div(rms).mul(w.val().unsqueeze());
    match dtype {
        burn::tensor::DType::BF16 => out.cast(FloatDType::BF16),
        burn::tensor::DType::F16 => out.cast(FloatDType::F16),
        _ => out,
    }
}

/// cos and signed sin `[batch, 1, seq, head_dim]` for the rotate-half RoPE layout.
fn rope_tables(
    c: &QwenConfig,
    pos: Vec<f32>,
    batch: usize,
    seq: usize,
    device: &Device,
) -> (Tensor<4>, Tensor<4>) {
    let half = c.head_dim / 2;
    let inv_freq: Vec<f32> = (0..half)
        .map(|j| (1.0 / c.rope_theta.powf(2.0 * j as f64 / c.head_dim as f64)) as f32)
        .collect();
    let inv = Tensor::<3>::from_data(TensorData::new(inv_freq, [1, 1, half]), device);
    let pos = Tensor::<3>::from_data(TensorData::new(pos, [batch, seq, 1]), device);
    let ang = pos * inv; // [batch, seq, half]
    let (cos, sin) = (ang.clone().cos(), ang.sin());
    // The sign of rotate_half is folded into sin: `[-x₂, x₁]·[s, s] = [x₂, x₁]·[-s, s]`,
    // which saves a negation of q and k in every layer.
    let cos = Tensor::cat(vec![cos.clone(), cos], 2).unsqueeze_dim::<4>(1);
    let sin = Tensor::cat(vec![sin.clone().neg(), sin], 2).unsqueeze_dim::<4>(1);
    (cos, sin)
}

/// `x·cos + rotate_half(x)·sin`, `rotate_half(x) = [-x₂, x₁]`, with the sign
/// already in `sin` (see [`rope_tables`]).
fn rope(x: Tensor<4>, cos: &Tensor<4>, sin: &Tensor<4>) -> Tensor<4> {
    let [b, h, t, d] = x.dims();
    let x1 = x.clone().slice([0..b, 0..h, 0..t, 0..d / 2]);
    let x2 = x.clone().slice([0..b, 0..h, 0..t, d / 2..d]);
    let rotated = Tensor::cat(vec![x2, x1], 3);
    x * cos.clone() + rotated * sin.clone()
}

/// A standard normal draw (Box–Muller), so no distribution crate is needed.
pub(crate) fn standard_normal(rng: &mut impl Rng) -> f32 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random::<f64>();
    ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
}
