//! LoRA adapters over a frozen base, in factored form.
//!
//! A target projection `y = x·W` (W stored `[in, out]`) becomes
//! `y = x·W + s·(x·A)·B` with `A: [in, r]`, `B: [r, out]` and the scale `s = alpha / r`
//! (`alpha / √r` with rsLoRA). [`Qwen::with_lora`] adds the adapters: the base parameters stop
//! requiring gradients, so the autodiff graph records nothing for them and Burn's optimizer,
//! which keeps state only for parameters that receive a gradient, holds the adapters' moments
//! alone: `Σ r·(in + out)` floats per moment over the targets instead of the whole model.
//!
//! A is initialised as PEFT does (`nn.Linear`'s Kaiming-uniform, `a = √5`: uniform in
//! `±1/√in`) and B as zeros, so a fresh adapter leaves the model's outputs exactly as they
//! were. The adapters sit after the base in the parameter visiting order
//! (`Qwen::lora` is the last field), so the base's parameter ids and any optimizer record keyed
//! by them are unchanged.
//!
//! Everything that leaves the model in HF form ([`Qwen::hf_tensors`], and so every save and
//! weight publish) gets the merged weights `W + s·A·B`; [`Qwen::adapter_tensors`] gives A and
//! B alone, in PEFT's names and layout.
//!
//! Why not Burn's own `Module::apply_lora`: its `Param::val()` returns the merged weight, which
//! every `.val()` here (the forward pass, `hf_tensors`) would read silently; autodiff would
//! keep a full-size merged weight per layer, a second copy of the model; and it initialises A
//! differently from PEFT (`docs/ARCHITECTURE.md`, "LoRA: the factored form").
//!
//! ```
//! use burn::tensor::{Device, Int, Tensor};
//! use rstar_policy::lora::LoraConfig;
//! use rstar_policy::{Qwen, QwenConfig};
//!
//! let device = Device::flex().autodiff();
//! let base = Qwen::random(QwenConfig::test_tiny(40), 0, &device).unwrap();
//! let tuned = base.clone().with_lora(&LoraConfig::new(4, 8.0), 1).unwrap();
//! // B starts at zero: the adapted model computes what the base does.
//! let tokens = Tensor::<2, Int>::from_ints([[1, 2, 3]], &device);
//! let (a, b) = (base.forward(tokens.clone()), tuned.forward(tokens));
//! assert_eq!(a.into_data(), b.into_data());
//! // Only the adapters train: 4·(in + out) per target, 7 targets, 2 layers.
//! assert_eq!(tuned.trainable_parameters(), tuned.lora.as_ref().unwrap().parameters());
//! ```

use burn::module::{Module, Param};
use burn::tensor::{Device, FloatDType, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::config::QwenConfig;
use crate::error::{Error, Result};
use crate::model::{Qwen, TensorSpec, to_vec_f32};
use crate::precision::Precision;

mod peft;

pub use peft::{
    ADAPTER_CONFIG_FILE, ADAPTER_CONFIG_METADATA, ADAPTER_WEIGHTS_FILE, adapter_bytes,
    load_adapter, load_adapter_bytes, read_adapter_config, save_adapter,
};

/// A projection LoRA can adapt, in HF's module names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// `self_attn.q_proj`.
    QProj,
    /// `self_attn.k_proj`.
    KProj,
    /// `self_attn.v_proj`.
    VProj,
    /// `self_attn.o_proj`.
    OProj,
    /// `mlp.gate_proj`.
    GateProj,
    /// `mlp.up_proj`.
    UpProj,
    /// `mlp.down_proj`.
    DownProj,
}

impl Target {
    /// All seven, in the order a decoder layer applies them.
    pub const ALL: [Target; 7] = [
        Target::QProj,
        Target::KProj,
        Target::VProj,
        Target::OProj,
        Target::GateProj,
        Target::UpProj,
        Target::DownProj,
    ];

    /// The HF module name (`q_proj`, …).
    pub fn name(self) -> &'static str {
        match self {
            Target::QProj => "q_proj",
            Target::KProj => "k_proj",
            Target::VProj => "v_proj",
            Target::OProj => "o_proj",
            Target::GateProj => "gate_proj",
            Target::UpProj => "up_proj",
            Target::DownProj => "down_proj",
        }
    }

    /// The module path inside a decoder layer (`self_attn.q_proj`, `mlp.up_proj`, …).
    pub fn path(self) -> &'static str {
        match self {
            Target::QProj => "self_attn.q_proj",
            Target::KProj => "self_attn.k_proj",
            Target::VProj => "self_attn.v_proj",
            Target::OProj => "self_attn.o_proj",
            Target::GateProj => "mlp.gate_proj",
            Target::UpProj => "mlp.up_proj",
            Target::DownProj => "mlp.down_proj",
        }
    }

    /// The target named `name`, if any.
    pub fn parse(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }

    /// `(in, out)` features of this projection under `config`.
    pub fn features(self, config: &QwenConfig) -> (usize, usize) {
        let d = config.hidden_size;
        let q = config.num_attention_heads * config.head_dim;
        let kv = config.num_key_value_heads * config.head_dim;
        let i = config.intermediate_size;
        match self {
            Target::QProj => (d, q),
            Target::KProj | Target::VProj => (d, kv),
            Target::OProj => (q, d),
            Target::GateProj | Target::UpProj => (d, i),
            Target::DownProj => (i, d),
        }
    }
}

/// Which projections get adapters, their rank and their scale.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    /// The adapters' rank r (PEFT's `r`), at least 1.
    pub rank: usize,
    /// PEFT's `lora_alpha`, > 0: the update is scaled by `alpha / rank` (`alpha / √rank` with
    /// rsLoRA).
    pub alpha: f64,
    /// The projections adapted, any of `q_proj k_proj v_proj o_proj gate_proj up_proj
    /// down_proj`, each at most once; all seven by default.
    #[serde(default = "all_targets")]
    pub targets: Vec<String>,
    /// Rank-stabilised LoRA (PEFT's `use_rslora`): scale `alpha / √rank`.
    #[serde(default)]
    pub use_rslora: bool,
}

pub(crate) fn all_targets() -> Vec<String> {
    Target::ALL.iter().map(|t| t.name().to_string()).collect()
}

impl Default for LoraConfig {
    /// PEFT's defaults for r and alpha (8, 8), on all seven projections.
    fn default() -> Self {
        LoraConfig::new(8, 8.0)
    }
}

impl LoraConfig {
    /// Rank `rank` and `alpha` on all seven projections, without rsLoRA.
    pub fn new(rank: usize, alpha: f64) -> Self {
        LoraConfig {
            rank,
            alpha,
            targets: all_targets(),
            use_rslora: false,
        }
    }

    /// The same config on `targets` only.
    pub fn with_targets(mut self, targets: &[&str]) -> Self {
        self.targets = targets.iter().map(|t| t.to_string()).collect();
        self
    }

    /// The same config with rsLoRA on or off.
    pub fn with_rslora(mut self, on: bool) -> Self {
        self.use_rslora = on;
        self
    }

    /// The targets, checked.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming `rank`, `alpha` or `targets`: a rank of 0, an alpha that
    /// is not a finite number > 0, no target, or a target that is unknown or repeated.
    pub fn validate(&self) -> Result<Vec<Target>> {
        let bad = |field: &str, reason: String| Error::InvalidConfig {
            field: format!("lora.{field}"),
            reason,
        };
        if self.rank == 0 {
            return Err(bad("rank", "must be at least 1".into()));
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            return Err(bad(
                "alpha",
                format!("must be a finite number > 0, got {}", self.alpha),
            ));
        }
        if self.targets.is_empty() {
            return Err(bad("targets", "names no projection".into()));
        }
        let mut out = Vec::with_capacity(self.targets.len());
        for name in &self.targets {
            let Some(t) = Target::parse(name) else {
                return Err(bad(
                    "targets",
                    format!("unknown projection `{name}` (expected any of {})", {
                        all_targets().join(", ")
                    }),
                ));
            };
            if out.contains(&t) {
                return Err(bad("targets", format!("`{name}` is named twice")));
            }
            out.push(t);
        }
        Ok(out)
    }

    /// The factor on `x·A·B`: `alpha / rank`, or `alpha / √rank` with rsLoRA.
    pub fn scale(&self) -> f64 {
        if self.use_rslora {
            self.alpha / (self.rank as f64).sqrt()
        } else {
            self.alpha / self.rank as f64
        }
    }
}

/// One projection's adapter.
#[derive(Module, Debug)]
pub struct LoraPair {
    /// `[in, r]` (PEFT's `lora_A.weight` transposed).
    pub a: Param<Tensor<2>>,
    /// `[r, out]` (PEFT's `lora_B.weight` transposed).
    pub b: Param<Tensor<2>>,
}

impl LoraPair {
    /// `x·A·B · scale`, in `dtype`.
    pub(crate) fn delta<const D: usize>(
        &self,
        x: Tensor<D>,
        scale: f64,
        dtype: FloatDType,
    ) -> Tensor<D> {
        let a = self.a.val().cast(dtype);
        let b = self.b.val().cast(dtype);
        // Scaling the rank-wide middle is cheaper than scaling the output.
        burn::tensor::module::linear(
            burn::tensor::module::linear(x, a, None).mul_scalar(scale),
            b,
            None,
        )
    }

    /// The dense update `scale · A·B`, `[in, out]`.
    pub(crate) fn merged_delta(&self, scale: f64) -> Tensor<2> {
        self.a.val().matmul(self.b.val()).mul_scalar(scale)
    }
}

/// One decoder layer's adapters; `None` where the projection is not a target.
#[derive(Module, Debug)]
pub struct LayerLora {
    /// On `self_attn.q_proj`.
    pub q_proj: Option<LoraPair>,
    /// On `self_attn.k_proj`.
    pub k_proj: Option<LoraPair>,
    /// On `self_attn.v_proj`.
    pub v_proj: Option<LoraPair>,
    /// On `self_attn.o_proj`.
    pub o_proj: Option<LoraPair>,
    /// On `mlp.gate_proj`.
    pub gate_proj: Option<LoraPair>,
    /// On `mlp.up_proj`.
    pub up_proj: Option<LoraPair>,
    /// On `mlp.down_proj`.
    pub down_proj: Option<LoraPair>,
}

impl LayerLora {
    /// No adapter on any projection.
    pub fn empty() -> Self {
        LayerLora {
            q_proj: None,
            k_proj: None,
            v_proj: None,
            o_proj: None,
            gate_proj: None,
            up_proj: None,
            down_proj: None,
        }
    }

    /// The adapter on `target`, if any.
    pub fn get(&self, target: Target) -> Option<&LoraPair> {
        match target {
            Target::QProj => self.q_proj.as_ref(),
            Target::KProj => self.k_proj.as_ref(),
            Target::VProj => self.v_proj.as_ref(),
            Target::OProj => self.o_proj.as_ref(),
            Target::GateProj => self.gate_proj.as_ref(),
            Target::UpProj => self.up_proj.as_ref(),
            Target::DownProj => self.down_proj.as_ref(),
        }
    }

    /// The place of the adapter on `target`.
    pub fn slot(&mut self, target: Target) -> &mut Option<LoraPair> {
        match target {
            Target::QProj => &mut self.q_proj,
            Target::KProj => &mut self.k_proj,
            Target::VProj => &mut self.v_proj,
            Target::OProj => &mut self.o_proj,
            Target::GateProj => &mut self.gate_proj,
            Target::UpProj => &mut self.up_proj,
            Target::DownProj => &mut self.down_proj,
        }
    }
}

/// A model's adapters: one [`LayerLora`] per decoder layer, with the config they were made
/// from and its scale.
#[derive(Module, Debug)]
pub struct QwenLora {
    /// Per decoder layer.
    pub layers: Vec<LayerLora>,
    /// The config (rank, alpha, targets, rsLoRA).
    #[module(skip)]
    pub config: LoraConfig,
    /// [`LoraConfig::scale`].
    #[module(skip)]
    pub scale: f64,
}

impl QwenLora {
    /// The number of adapter parameters: `Σ r·(in + out)` over the layers and targets.
    pub fn parameters(&self) -> usize {
        let mut n = 0;
        for layer in &self.layers {
            for t in Target::ALL {
                if let Some(p) = layer.get(t) {
                    n += p.a.val().shape().num_elements() + p.b.val().shape().num_elements();
                }
            }
        }
        n
    }

    /// A and B of every adapter in PEFT's names and layout: for layer N and a target,
    /// `base_model.model.model.layers.N.<path>.lora_A.weight` `[r, in]` and `….lora_B.weight`
    /// `[out, r]` (the transposes of what is stored here), layer by layer in [`Target::ALL`]
    /// order.
    ///
    /// # Errors
    /// [`Error::Readback`] if a tensor cannot be read back.
    pub fn tensors(&self) -> Result<Vec<(TensorSpec, Vec<f32>)>> {
        let mut out = Vec::new();
        for (l, layer) in self.layers.iter().enumerate() {
            for t in Target::ALL {
                let Some(p) = layer.get(t) else { continue };
                let prefix = format!("base_model.model.model.layers.{l}.{}", t.path());
                for (which, param) in [("lora_A", &p.a), ("lora_B", &p.b)] {
                    let v = param.val();
                    let [rows, cols] = v.dims();
                    let data = to_vec_f32(v)?;
                    out.push((
                        TensorSpec {
                            name: format!("{prefix}.{which}.weight"),
                            shape: vec![cols, rows],
                            transposed: true,
                        },
                        crate::model::transpose_host(&data, rows, cols),
                    ));
                }
            }
        }
        Ok(out)
    }
}

impl Qwen {
    /// The same model with fresh LoRA adapters on `config.targets` of every layer, A drawn
    /// from `seed` (PEFT's Kaiming-uniform, `±1/√in`) and B zero. The base parameters stop
    /// requiring gradients; only the adapters get gradients and optimizer state. Adapters
    /// already on the model are replaced.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] from [`LoraConfig::validate`].
    pub fn with_lora(self, config: &LoraConfig, seed: u64) -> Result<Self> {
        let targets = config.validate()?;
        let device = self.device();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let r = config.rank;
        let mut layers = Vec::with_capacity(self.layers.len());
        for _ in 0..self.layers.len() {
            let mut layer = LayerLora::empty();
            for t in Target::ALL {
                if !targets.contains(&t) {
                    continue;
                }
                let (fan_in, fan_out) = t.features(&self.config);
                let bound = 1.0 / (fan_in as f64).sqrt();
                let a: Vec<f32> = (0..fan_in * r)
                    .map(|_| rng.random_range(-bound..bound) as f32)
                    .collect();
                *layer.slot(t) = Some(LoraPair {
                    a: param(a, [fan_in, r], &device),
                    b: param(vec![0.0; r * fan_out], [r, fan_out], &device),
                });
            }
            layers.push(layer);
        }
        Ok(self.with_adapters(config, layers))
    }

    /// The same model with the base frozen and `layers` as its adapters (one per decoder
    /// layer, built from `config`).
    pub(crate) fn with_adapters(self, config: &LoraConfig, layers: Vec<LayerLora>) -> Self {
        debug_assert_eq!(layers.len(), self.layers.len());
        let mut model = Qwen { lora: None, ..self }.no_grad();
        model.lora = Some(QwenLora {
            layers,
            config: config.clone(),
            scale: config.scale(),
        });
        model
    }

    /// The same model with the seven projection weights of every layer (`q k v o gate up down`)
    /// stored in `precision`: with [`Precision::Bf16`], half the bytes of the frozen base's
    /// largest part. The adapters and their optimizer state, the embeddings, the head, the norms
    /// and any biases stay f32, and the forward pass casts each projection to the compute dtype
    /// where it is used ([`Qwen::with_precision`]): with bf16 compute that cast is a no-op, with
    /// f32 compute a per-use f32 copy. [`Precision::F32`] casts back (the bf16 rounding stays).
    ///
    /// Merging ([`Qwen::merge_lora`]) and saving ([`Qwen::hf_tensors`]) read the projections as
    /// f32, so a merged model is an f32 model of the rounded base plus the adapters.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] (field `base_precision`) for bf16 on a model without adapters:
    /// its projections train, and bf16 weights lose every update smaller than about 1/256 of the
    /// weight (for bf16 compute over f32 weights, use [`Qwen::with_precision`]).
    pub fn with_base_precision(mut self, precision: Precision) -> Result<Self> {
        if precision == Precision::Bf16 && self.lora.is_none() {
            return Err(Error::InvalidConfig {
                field: "base_precision".into(),
                reason: "a bf16 base needs LoRA adapters: without them the projections train, and \
                         bf16 weights lose every update smaller than about 1/256 of the weight \
                         (for bf16 compute over f32 weights, set the compute precision instead)"
                    .into(),
            });
        }
        let dtype = precision.dtype();
        let cast = |w: Param<Tensor<2>>| w.map(|t| t.cast(dtype));
        self.layers = self
            .layers
            .into_iter()
            .map(|mut l| {
                let a = l.self_attn;
                l.self_attn = crate::model::Attention {
                    q_proj: cast(a.q_proj),
                    k_proj: cast(a.k_proj),
                    v_proj: cast(a.v_proj),
                    o_proj: cast(a.o_proj),
                    ..a
                };
                let m = l.mlp;
                l.mlp = crate::model::Mlp {
                    gate_proj: cast(m.gate_proj),
                    up_proj: cast(m.up_proj),
                    down_proj: cast(m.down_proj),
                };
                l
            })
            .collect();
        Ok(self)
    }

    /// The precision the projection weights are stored in ([`Qwen::with_base_precision`]): bf16
    /// when the first layer's `q_proj` is bf16, else f32.
    pub fn base_precision(&self) -> Precision {
        match self
            .layers
            .first()
            .map(|l| l.self_attn.q_proj.val().dtype())
        {
            Some(burn::tensor::DType::BF16) => Precision::Bf16,
            _ => Precision::F32,
        }
    }

    /// The same model with its adapters folded into the base weights (`W + s·A·B`) and removed;
    /// the weights require gradients again, as a model loaded from a checkpoint does.
    ///
    /// # Errors
    /// Those of building a model from tensors.
    pub fn merge_lora(self) -> Result<Self> {
        if self.lora.is_none() {
            return Ok(self);
        }
        let tensors = self.hf_tensors()?;
        let device = self.device();
        let mut by_name: std::collections::HashMap<String, Vec<f32>> = tensors
            .into_iter()
            .map(|(spec, data)| (spec.name, data))
            .collect();
        Qwen::from_tensors(self.config.clone(), &device, |spec| {
            by_name
                .remove(&spec.name)
                .ok_or_else(|| Error::Readback(format!("no tensor {}", spec.name)))
        })
        .map(|m| {
            m.with_precision(self.precision)
                .with_fused_kernels(self.fused_kernels)
        })
    }

    /// A and B of every adapter in PEFT's names and layout ([`QwenLora::tensors`]); empty
    /// without adapters.
    ///
    /// # Errors
    /// [`Error::Readback`] if a tensor cannot be read back.
    pub fn adapter_tensors(&self) -> Result<Vec<(TensorSpec, Vec<f32>)>> {
        self.lora.as_ref().map_or(Ok(Vec::new()), QwenLora::tensors)
    }

    /// The SHA-256 (hex) of the base weights alone, adapters left out: every tensor's HF name,
    /// shape and little-endian f32 values in [`crate::tensor_specs`] order. Equal for two models
    /// exactly when their bases hold the same values, whatever file or dtype they came from, so a
    /// LoRA checkpoint can tell that the base it is resumed over is the one it was trained on.
    ///
    /// # Errors
    /// [`Error::Readback`] if a tensor cannot be read back.
    pub fn base_digest(&self) -> Result<String> {
        use sha2::{Digest as _, Sha256};
        let base = Qwen {
            lora: None,
            ..self.clone()
        };
        let mut hash = Sha256::new();
        for (spec, data) in base.hf_tensors()? {
            hash.update(spec.name.as_bytes());
            hash.update([0]);
            for d in &spec.shape {
                hash.update((*d as u64).to_le_bytes());
            }
            for v in &data {
                hash.update(v.to_le_bytes());
            }
        }
        Ok(format!("{:x}", hash.finalize()))
    }

    /// The number of parameter values that require gradients (what the optimizer keeps state
    /// for): every parameter without adapters, the adapters alone with them.
    pub fn trainable_parameters(&self) -> usize {
        struct Count(usize);
        impl burn::module::ModuleVisitor for Count {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                if param.is_require_grad() {
                    self.0 += param.val().shape().num_elements();
                }
            }
        }
        let mut count = Count(0);
        self.visit(&mut count);
        count.0
    }
}

fn param(data: Vec<f32>, shape: [usize; 2], device: &Device) -> Param<Tensor<2>> {
    Param::from_data(TensorData::new(data, shape), device)
}
