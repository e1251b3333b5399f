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
            ("num_hidden_layers", self.num_hidden_layers),
        ] {
            if v == 0 {
                return bad(field, "must be positive".into());
            }
        }
        if let Some(id) = self
            .eos_token_ids
            .iter()
            .find(|&&id| id as usize >= self.vocab_size)
        {
            return bad(
                "eos_token_ids",
                format!(
                    "{id} is outside the vocabulary of size {} (vocab_size): generation would never stop",
                    self.vocab_size
                ),
            );
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
        HfConfig::parse(text, path)?.validate(path)
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

/// HF `config.json` as written: the fields this crate reads, all optional (absent and `null`
/// read as `None`, other fields are ignored); [`HfConfig::validate`] turns it into a
/// [`QwenConfig`].
#[derive(Debug, Default, Deserialize)]
struct HfConfig {
    architectures: Option<Vec<String>>,
    model_type: Option<String>,
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rope_theta: Option<f64>,
    rope_parameters: Option<HfRopeParameters>,
    /// Kept as written: any non-`null` value is unsupported, and the error shows it.
    rope_scaling: Option<Value>,
    rms_norm_eps: Option<f64>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    hidden_act: Option<String>,
    use_sliding_window: Option<bool>,
    eos_token_id: Option<EosTokenIds>,
}

/// `rope_parameters` (transformers ≥ 4.56 moves `rope_theta` here).
#[derive(Debug, Default, Deserialize)]
struct HfRopeParameters {
    rope_type: Option<String>,
    rope_theta: Option<f64>,
}

/// `eos_token_id`: one id or a list of ids.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum EosTokenIds {
    One(u32),
    Many(Vec<u32>),
}

impl HfConfig {
    /// Reads the text; a field of the wrong type is named in the error.
    fn parse(text: &str, path: &Path) -> Result<Self> {
        let json_err = |e: &serde_json::Error| Error::json(path, e);
        let v: Value = serde_json::from_str(text).map_err(|e| json_err(&e))?;
        let Value::Object(obj) = v else {
            return Err(Error::Json {
                path: path.to_path_buf(),
                line: 1,
                message: "a config.json must be a JSON object".into(),
            });
        };
        serde_json::from_str::<HfConfig>(text).map_err(|whole| {
            // Every field is optional, so the field that fails alone is the one that fails the
            // whole; serde_json's own message does not name it.
            obj.into_iter()
                .find_map(|(name, value)| {
                    let alone = Value::Object(serde_json::Map::from_iter([(name.clone(), value)]));
                    serde_json::from_value::<HfConfig>(alone)
                        .err()
                        .map(|e| Error::Json {
                            path: path.to_path_buf(),
                            line: whole.line(),
                            message: format!("`{name}`: {e}"),
                        })
                })
                .unwrap_or_else(|| json_err(&whole))
        })
    }

    /// The normalised config, validated.
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming the field for an architecture other than Qwen2/Qwen3, an
    /// activation other than SiLU, RoPE scaling or sliding windows; [`Error::Json`] naming a
    /// missing required field; [`QwenConfig::validate`]'s errors.
    fn validate(self, path: &Path) -> Result<QwenConfig> {
        let unsupported = |field: &str, value: String, reason: &str| Error::Unsupported {
            path: path.to_path_buf(),
            field: field.to_string(),
            value,
            reason: reason.to_string(),
        };
        let quoted = |s: &str| Value::from(s).to_string();
        let required = |field: &str, value: Option<usize>| {
            value.ok_or_else(|| Error::Json {
                path: path.to_path_buf(),
                line: 0,
                message: format!("missing or non-numeric field `{field}`"),
            })
        };
        let class = self.architectures.as_ref().and_then(|a| a.first());
        let architecture = match (class.map(String::as_str), self.model_type.as_deref()) {
            (Some("Qwen2ForCausalLM"), _) | (None, Some("qwen2")) => Architecture::Qwen2,
            (Some("Qwen3ForCausalLM"), _) | (None, Some("qwen3")) => Architecture::Qwen3,
            (Some(_), _) => {
                let written = Value::from(self.architectures.clone().unwrap_or_default());
                return Err(unsupported(
                    "architectures",
                    written.to_string(),
                    "Qwen2ForCausalLM or Qwen3ForCausalLM",
                ));
            }
            (None, model_type) => {
                return Err(unsupported(
                    "model_type",
                    model_type.map_or_else(|| "null".to_string(), quoted),
                    "qwen2 or qwen3",
                ));
            }
        };
        if let Some(act) = &self.hidden_act
            && act != "silu"
        {
            return Err(unsupported("hidden_act", quoted(act), "silu"));
        }
        if let Some(scaling) = &self.rope_scaling
            && !scaling.is_null()
        {
            return Err(unsupported(
                "rope_scaling",
                scaling.to_string(),
                "null (no RoPE scaling)",
            ));
        }
        let rope = self.rope_parameters.unwrap_or_default();
        if let Some(kind) = &rope.rope_type
            && kind != "default"
        {
            return Err(unsupported(
                "rope_parameters.rope_type",
                quoted(kind),
                "default",
            ));
        }
        if self.use_sliding_window == Some(true) {
            return Err(unsupported("use_sliding_window", "true".into(), "false"));
        }
        let hidden_size = required("hidden_size", self.hidden_size)?;
        let num_attention_heads = required("num_attention_heads", self.num_attention_heads)?;
        let attention_bias = self.attention_bias.unwrap_or(false);
        let config = QwenConfig {
            architecture,
            vocab_size: required("vocab_size", self.vocab_size)?,
            hidden_size,
            intermediate_size: required("intermediate_size", self.intermediate_size)?,
            num_hidden_layers: required("num_hidden_layers", self.num_hidden_layers)?,
            num_attention_heads,
            num_key_value_heads: self.num_key_value_heads.unwrap_or(num_attention_heads),
            head_dim: self
                .head_dim
                .unwrap_or(hidden_size / num_attention_heads.max(1)),
            rope_theta: self
                .rope_theta
                .or(rope.rope_theta)
                .unwrap_or(match architecture {
                    Architecture::Qwen2 => 10_000.0,
                    Architecture::Qwen3 => 1_000_000.0,
                }),
            rms_norm_eps: self.rms_norm_eps.unwrap_or(1e-6),
            max_position_embeddings: self.max_position_embeddings.unwrap_or(32_768),
            tie_word_embeddings: self.tie_word_embeddings.unwrap_or(false),
            qkv_bias: architecture == Architecture::Qwen2 || attention_bias,
            qk_norm: architecture == Architecture::Qwen3,
            eos_token_ids: match self.eos_token_id {
                None => Vec::new(),
                Some(EosTokenIds::One(id)) => vec![id],
                Some(EosTokenIds::Many(ids)) => ids,
            },
        };
        config.validate()?;
        Ok(config)
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
    fn hf_fields_of_the_wrong_type_are_named_and_unknown_fields_ignored() {
        let good = QwenConfig::test_tiny(100).to_hf_json().unwrap();
        let mut v: Value = serde_json::from_str(&good).unwrap();
        v["some_future_field"] = json!({"x": 1});
        v["num_key_value_heads"] = Value::Null;
        let c = QwenConfig::from_hf_str(&v.to_string(), Path::new("c.json")).unwrap();
        assert_eq!(c.num_key_value_heads, c.num_attention_heads);
        for (field, bad) in [
            ("hidden_size", json!("64")),
            ("rope_theta", json!([1])),
            ("tie_word_embeddings", json!(1)),
            ("eos_token_id", json!("eos")),
            ("architectures", json!("Qwen2ForCausalLM")),
        ] {
            let mut v: Value = serde_json::from_str(&good).unwrap();
            v[field] = bad;
            let msg = QwenConfig::from_hf_str(&v.to_string(), Path::new("c.json"))
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains("c.json") && msg.contains(&format!("`{field}`")),
                "{msg}"
            );
        }
        let mut v: Value = serde_json::from_str(&good).unwrap();
        v.as_object_mut().unwrap().remove("vocab_size");
        let msg = QwenConfig::from_hf_str(&v.to_string(), Path::new("c.json"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("`vocab_size`"), "{msg}");
        let msg = QwenConfig::from_hf_str("[1]", Path::new("c.json"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("JSON object"), "{msg}");
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
