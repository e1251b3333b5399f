//! Model configuration: HF `config.json` parsing, validation and presets.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::{Error, Result};

/// Which decoder family a config describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Architecture {
    /// `Qwen2ForCausalLM` (Qwen2, Qwen2.5): q/k/v biases, no q/k norm.
    Qwen2,
    /// `Qwen3ForCausalLM`: per-head RMSNorm on q and k, biases only if `attention_bias`.
    Qwen3,
}

impl Architecture {
    /// The HF class name (`architectures[0]` in `config.json`).
    pub fn hf_class(self) -> &'static str {
        match self {
            Architecture::Qwen2 => "Qwen2ForCausalLM",
            Architecture::Qwen3 => "Qwen3ForCausalLM",
        }
    }

    /// The HF `model_type`.
    pub fn model_type(self) -> &'static str {
        match self {
            Architecture::Qwen2 => "qwen2",
            Architecture::Qwen3 => "qwen3",
        }
    }
}

/// The hyperparameters of a Qwen2/Qwen3 decoder, normalised from HF `config.json`.
///
/// Field names follow HF. `qkv_bias` and `qk_norm` are explicit here where HF
/// derives them from the architecture (`Qwen2` always has q/k/v biases,
/// `Qwen3` has q/k norm and biases only with `attention_bias`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QwenConfig {
    /// The decoder family.
    pub architecture: Architecture,
    /// Number of token ids (rows of the embedding).
    pub vocab_size: usize,
    /// Width of the residual stream (`d_model`).
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads (grouped-query attention when smaller than the query heads).
    pub num_key_value_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// RoPE base θ.
    pub rope_theta: f64,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Longest sequence (prompt + generation) the model accepts.
    pub max_position_embeddings: usize,
    /// Whether the output projection reuses the token embedding.
    pub tie_word_embeddings: bool,
    /// Whether q/k/v projections have biases.
    pub qkv_bias: bool,
    /// Whether q and k get a per-head RMSNorm before RoPE.
    pub qk_norm: bool,
    /// End-of-sequence ids from the config (may be empty).
    pub eos_token_ids: Vec<u32>,
}

impl QwenConfig {
    /// The embedded default: a Qwen3-style model of about 0.8M parameters
    /// for the built-in character tokenizer (4 layers, width 128, 4 query
    /// heads over 2 KV heads, tied embeddings).
    pub fn tiny_char() -> Self {
        let vocab = crate::tokenizer::CharTokenizer::new().vocab_size();
        QwenConfig {
            architecture: Architecture::Qwen3,
            vocab_size: vocab,
            hidden_size: 128,
            intermediate_size: 384,
            num_hidden_layers: 4,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 32,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-6,
            max_position_embeddings: 4096,
            tie_word_embeddings: true,
            qkv_bias: false,
            qk_norm: true,
            eos_token_ids: vec![crate::tokenizer::CharTokenizer::IM_END],
        }
    }

    /// The shape of Qwen3-0.6B (its published `config.json`: 28 layers, width 1024, 16 query
    /// heads of 128 over 8 KV heads, SwiGLU 3072, tied embeddings over the padded 151 936-token
    /// vocabulary, RoPE theta 1e6, EOS `<|im_end|>` and `<|endoftext|>`): about 0.6B
    /// parameters, 0.44B of them outside the embedding. For benchmarks and GPU checks with
    /// random weights; a real checkpoint is read with [`crate::load_model`].
    pub fn qwen3_0_6b() -> Self {
        QwenConfig {
            architecture: Architecture::Qwen3,
            vocab_size: 151_936,
            hidden_size: 1024,
            intermediate_size: 3072,
            num_hidden_layers: 28,
            num_attention_heads: 16,
            num_key_value_heads: 8,
            head_dim: 128,
            rope_theta: 1_000_000.0,
            rms_norm_eps: 1e-6,
            max_position_embeddings: 40_960,
            tie_word_embeddings: true,
            qkv_bias: false,
            qk_norm: true,
            eos_token_ids: vec![151_645, 151_643],
        }
    }

    /// A very small model for unit tests (2 layers, width 32, vocab `vocab_size`).
    pub fn test_tiny(vocab_size: usize) -> Self {
        QwenConfig {
            architecture: Architecture::Qwen3,
            vocab_size,
            hidden_size: 32,
            intermediate_size: 64,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 8,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-6,
            max_position_embeddings: 512,
            tie_word_embeddings: true,
            qkv_bias: false,
            qk_norm: true,
            eos_token_ids: Vec::new(),
        }
    }

    /// Switches to the Qwen2 layout (q/k/v biases, no q/k norm).
    pub fn with_architecture(mut self, architecture: Architecture) -> Self {
        self.architecture = architecture;
        self.qkv_bias = architecture == Architecture::Qwen2;
        self.qk_norm = architecture == Architecture::Qwen3;
        self
    }

    /// Number of parameters the config implies.
    pub fn num_params(&self) -> usize {
        let d = self.hidden_size;
        let q = self.num_attention_heads * self.head_dim;
        let kv = self.num_key_value_heads * self.head_dim;
        let mut layer = d * q + 2 * d * kv + q * d + 3 * d * self.intermediate_size + 2 * d;
        if self.qkv_bias {
            layer += q + 2 * kv;
        }
        if self.qk_norm {
            layer += 2 * self.head_dim;
        }
        let mut total = self.vocab_size * d + self.num_hidden_layers * layer + d;
        if !self.tie_word_embeddings {
            total += self.vocab_size * d;
        }
        total
    }

    /// Checks the invariants the model relies on.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &str, reason: String| {
            Err(Error::InvalidConfig {
                field: field.to_string(),
                reason,
            })
        };
        for (field, v) in [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_attention_heads", self.num_attention_heads),
            ("num_key_value_heads", self.num_key_value_heads),
            ("head_dim", self.head_dim),
            ("max_position_embeddings", self.max_position_embeddings),
        ] {
            if v == 0 {
                return bad(field, "must be positive".into());
            }
        }
        if !self
            .num_attention_heads
            .is_multiple_of(self.num_key_value_heads)
        {
            return bad(
                "num_key_value_heads",
                format!(
                    "{} does not divide num_attention_heads {}",
                    self.num_key_value_heads, self.num_attention_heads
                ),
            );
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad(
                "head_dim",
                format!("{} is odd; RoPE needs pairs", self.head_dim),
            );
        }
        if self.rope_theta.is_nan() || self.rope_theta <= 0.0 {
            return bad("rope_theta", format!("{} is not positive", self.rope_theta));
        }
        if self.rms_norm_eps.is_nan() || self.rms_norm_eps <= 0.0 {
            return bad(
                "rms_norm_eps",
                format!("{} is not positive", self.rms_norm_eps),
            );
        }
        Ok(())
    }

    /// Reads an HF `config.json`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming the field for an architecture other than
    /// Qwen2/Qwen3, an activation other than SiLU, RoPE scaling, or sliding
    /// windows; [`Error::Json`] for malformed JSON or a missing required field.
    pub fn from_hf_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Self::from_hf_str(&text, path)
    }

    /// Parses HF `config.json` text; `path` names the source in errors.
    pub fn from_hf_str(text: &str, path: &Path) -> Result<Self> {
        let v: Value = serde_json::from_str(text).map_err(|e| Error::json(path, &e))?;
        let unsupported = |field: &str, value: &Value, reason: &str| Error::Unsupported {
            path: path.to_path_buf(),
            field: field.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let missing = |field: &str| Error::Json {
            path: path.to_path_buf(),
            line: 0,
            message: format!("missing or non-numeric field `{field}`"),
        };
        let class = v
            .get("architectures")
            .and_then(|a| a.get(0))
            .and_then(Value::as_str);
        let model_type = v.get("model_type").and_then(Value::as_str);
        let architecture = match (class, model_type) {
            (Some("Qwen2ForCausalLM"), _) | (None, Some("qwen2")) => Architecture::Qwen2,
            (Some("Qwen3ForCausalLM"), _) | (None, Some("qwen3")) => Architecture::Qwen3,
            (Some(_), _) => {
                return Err(unsupported(
                    "architectures",
                    &v["architectures"],
                    "Qwen2ForCausalLM or Qwen3ForCausalLM",
                ));
            }
            (None, _) => {
                return Err(unsupported(
                    "model_type",
                    v.get("model_type").unwrap_or(&Value::Null),
                    "qwen2 or qwen3",
                ));
            }
        };
        let usize_field = |field: &str| -> Result<usize> {
            v.get(field)
                .and_then(Value::as_u64)
                .map(|x| x as usize)
                .ok_or_else(|| missing(field))
        };
        if let Some(act) = v.get("hidden_act")
            && act.as_str() != Some("silu")
        {
            return Err(unsupported("hidden_act", act, "silu"));
        }
        if let Some(scaling) = v.get("rope_scaling")
            && !scaling.is_null()
        {
            return Err(unsupported(
                "rope_scaling",
                scaling,
                "null (no RoPE scaling)",
            ));
        }
        if let Some(rp) = v.get("rope_parameters")
            && let Some(kind) = rp.get("rope_type")
            && kind.as_str() != Some("default")
        {
            return Err(unsupported("rope_parameters.rope_type", kind, "default"));
        }
        if v.get("use_sliding_window").and_then(Value::as_bool) == Some(true) {
            return Err(unsupported(
                "use_sliding_window",
                &v["use_sliding_window"],
                "false",
            ));
        }
        let hidden_size = usize_field("hidden_size")?;
        let num_attention_heads = usize_field("num_attention_heads")?;
        let num_key_value_heads = match v.get("num_key_value_heads") {
            Some(Value::Null) | None => num_attention_heads,
            Some(_) => usize_field("num_key_value_heads")?,
        };
        let head_dim = match v.get("head_dim") {
            Some(Value::Null) | None => hidden_size / num_attention_heads.max(1),
            Some(_) => usize_field("head_dim")?,
        };
        let rope_theta = v
            .get("rope_theta")
            .and_then(Value::as_f64)
            .or_else(|| {
                v.get("rope_parameters")
                    .and_then(|r| r.get("rope_theta"))
                    .and_then(Value::as_f64)
            })
            .unwrap_or(match architecture {
                Architecture::Qwen2 => 10_000.0,
                Architecture::Qwen3 => 1_000_000.0,
            });
        let rms_norm_eps = v
            .get("rms_norm_eps")
            .and_then(Value::as_f64)
            .unwrap_or(1e-6);
        let tie_word_embeddings = v
            .get("tie_word_embeddings")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let attention_bias = v
            .get("attention_bias")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let eos_token_ids = match v.get("eos_token_id") {
            Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(Value::as_u64)
                .map(|x| x as u32)
                .collect(),
            _ => Vec::new(),
        };
        let config = QwenConfig {
            architecture,
            vocab_size: usize_field("vocab_size")?,
            hidden_size,
            intermediate_size: usize_field("intermediate_size")?,
            num_hidden_layers: usize_field("num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rope_theta,
            rms_norm_eps,
            max_position_embeddings: v
                .get("max_position_embeddings")
                .and_then(Value::as_u64)
                .map(|x| x as usize)
                .unwrap_or(32_768),
            tie_word_embeddings,
            qkv_bias: architecture == Architecture::Qwen2 || attention_bias,
            qk_norm: architecture == Architecture::Qwen3,
            eos_token_ids,
        };
        config.validate()?;
        Ok(config)
    }

    /// Renders an HF-compatible `config.json`, so checkpoints saved by this
    /// crate also load in transformers (for the Qwen2 and Qwen3 layouts).
    ///
    /// # Errors
    /// A Qwen2 config without q/k/v biases or a Qwen3 config without q/k
    /// norm has no HF equivalent.
    pub fn to_hf_json(&self) -> Result<String> {
        match self.architecture {
            Architecture::Qwen2 if !self.qkv_bias || self.qk_norm => {
                return Err(Error::InvalidConfig {
                    field: "qkv_bias".into(),
                    reason: "Qwen2 has q/k/v biases and no q/k norm".into(),
                });
            }
            Architecture::Qwen3 if !self.qk_norm => {
                return Err(Error::InvalidConfig {
                    field: "qk_norm".into(),
                    reason: "Qwen3 has q/k norm".into(),
                });
            }
            _ => {}
        }
        let eos = match self.eos_token_ids.as_slice() {
            [] => Value::Null,
            [one] => json!(one),
            many => json!(many),
        };
        let mut v = json!({
            "architectures": [self.architecture.hf_class()],
            "model_type": self.architecture.model_type(),
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rope_theta": self.rope_theta,
            "rope_scaling": null,
            "rms_norm_eps": self.rms_norm_eps,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "eos_token_id": eos,
            "torch_dtype": "float32",
            "use_sliding_window": false,
        });
        if self.architecture == Architecture::Qwen3 {
            v["attention_bias"] = json!(self.qkv_bias);
        }
        Ok(serde_json::to_string_pretty(&v).expect("a json value serialises"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiny_char_has_about_a_million_params() {
        let c = QwenConfig::tiny_char();
        c.validate().unwrap();
        let n = c.num_params();
        assert!((500_000..1_000_000).contains(&n), "{n}");
    }

    #[test]
    fn qwen3_0_6b_has_the_published_parameter_counts() {
        let c = QwenConfig::qwen3_0_6b();
        c.validate().unwrap();
        // By hand: the 151 936 x 1024 embedding, then per layer q (1024 x 2048), k and v
        // (1024 x 1024 each), o (2048 x 1024), gate/up/down (3 x 1024 x 3072), two RMS norms
        // (2 x 1024) and q/k norms (2 x 128); 28 layers and the final norm (1024).
        let embedding = 151_936 * 1024;
        let layer = 1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024 + 3 * 1024 * 3072 + 2 * 1024 + 256;
        assert_eq!(c.num_params(), embedding + 28 * layer + 1024);
        assert_eq!(c.num_params(), 596_049_920);
        // The model card's "0.44B non-embedding parameters".
        let non_embedding = c.num_params() - embedding;
        assert!(
            (435_000_000..445_000_000).contains(&non_embedding),
            "{non_embedding}"
        );
        // It survives the HF config.json round trip.
        let back = QwenConfig::from_hf_str(&c.to_hf_json().unwrap(), Path::new("config.json"));
        assert_eq!(back.unwrap().num_params(), c.num_params());
    }

    #[test]
    fn hf_json_round_trips() {
        for arch in [Architecture::Qwen2, Architecture::Qwen3] {
            let c = QwenConfig::test_tiny(100).with_architecture(arch);
            let text = c.to_hf_json().unwrap();
            let back = QwenConfig::from_hf_str(&text, Path::new("x.json")).unwrap();
            assert_eq!(back, c);
        }
    }

    #[test]
    fn rejects_other_architectures_naming_the_field() {
        let text = r#"{"architectures": ["LlamaForCausalLM"], "vocab_size": 10}"#;
        let err = QwenConfig::from_hf_str(text, Path::new("c.json")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("architectures") && msg.contains("Llama"),
            "{msg}"
        );
        let text = r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_act": "gelu"}"#;
        let msg = QwenConfig::from_hf_str(text, Path::new("c.json"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("hidden_act"), "{msg}");
        let text = r#"{"architectures": ["Qwen2ForCausalLM"], "rope_scaling": {"type": "yarn"}}"#;
        let msg = QwenConfig::from_hf_str(text, Path::new("c.json"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("rope_scaling"), "{msg}");
    }

    #[test]
    fn rejects_inconsistent_heads() {
        let mut c = QwenConfig::test_tiny(10);
        c.num_key_value_heads = 3;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("num_key_value_heads")
        );
    }
}
