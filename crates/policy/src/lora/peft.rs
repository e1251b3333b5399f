//! PEFT's adapter directory: `adapter_config.json` and `adapter_model.safetensors`, the layout
//! PEFT, vLLM and `transformers` load.
//!
//! The weights are `base_model.model.model.layers.N.<module>.lora_A.weight` `[r, in]` and
//! `….lora_B.weight` `[out, r]`; the config names `r`, `lora_alpha`, `target_modules` and
//! `use_rslora`. Loading refuses what it would otherwise have to guess: a PEFT feature this
//! crate does not implement (DoRA, `modules_to_save`, biases, per-module ranks, `fan_in_fan_out`,
//! …) is named, never ignored, and a missing, unexpected or misshapen tensor is named with both
//! shapes.

use std::path::Path;

use burn::module::Param;
use burn::tensor::{Tensor, TensorData};
use safetensors::SafeTensors;
use serde_json::{Value, json};

use super::{LayerLora, LoraConfig, LoraPair, Target};
use crate::checkpoint::{WeightDtype, to_f32, write_safetensors};
use crate::error::{Error, Result};
use crate::model::{Qwen, transpose_host};

/// The adapter's config file in a PEFT adapter directory.
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// The adapter's weights in a PEFT adapter directory.
pub const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";

/// Writes `model`'s adapters into `dir` as PEFT does: `adapter_config.json` (with
/// `base_model_name_or_path` as given) and `adapter_model.safetensors` in f32.
///
/// # Errors
/// [`Error::InvalidRequest`] when the model has no adapters; IO errors naming the file;
/// [`Error::NonFinite`] (nothing written) for a NaN or infinite adapter value.
pub fn save_adapter(model: &Qwen, dir: &Path, base_model_name_or_path: &str) -> Result<()> {
    let lora = model
        .lora
        .as_ref()
        .ok_or_else(|| Error::InvalidRequest("the model has no LoRA adapters to save".into()))?;
    let tensors = lora.tensors()?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    write_safetensors(&dir.join(ADAPTER_WEIGHTS_FILE), &tensors, WeightDtype::F32)?;
    let config_path = dir.join(ADAPTER_CONFIG_FILE);
    let text = serde_json::to_string_pretty(&peft_config(&lora.config, base_model_name_or_path))
        .map_err(|e| Error::json(&config_path, &e))?;
    std::fs::write(&config_path, text + "\n").map_err(|e| Error::io(&config_path, e))
}

/// PEFT's `LoraConfig` for `config`, with the defaults PEFT writes for what this crate does not
/// use (no DoRA, no bias, no per-module ranks).
fn peft_config(config: &LoraConfig, base_model_name_or_path: &str) -> Value {
    // PEFT writes an integer alpha as an integer.
    let alpha = if config.alpha.fract() == 0.0 && config.alpha.abs() < 1e15 {
        json!(config.alpha as i64)
    } else {
        json!(config.alpha)
    };
    json!({
        "alpha_pattern": {},
        "base_model_name_or_path": base_model_name_or_path,
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "layers_pattern": null,
        "layers_to_transform": null,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "modules_to_save": null,
        "peft_type": "LORA",
        "r": config.rank,
        "rank_pattern": {},
        "revision": null,
        "target_modules": config.targets,
        "task_type": "CAUSAL_LM",
        "use_dora": false,
        "use_rslora": config.use_rslora,
    })
}

/// Reads a PEFT adapter's `adapter_config.json` from `dir`.
///
/// # Errors
/// [`Error::Io`] / [`Error::Json`] naming the file; [`Error::Unsupported`] naming the field for
/// anything but a plain LoRA this crate computes exactly: a `peft_type` other than `LORA`, DoRA,
/// `modules_to_save`, a bias, `rank_pattern` / `alpha_pattern`, `fan_in_fan_out`,
/// `layers_to_transform`, `exclude_modules`, `target_parameters`, trainable tokens, a regex
/// `target_modules` or a target other than the seven projections; [`Error::InvalidConfig`] for a
/// rank of 0 or an alpha that is not > 0.
pub fn read_adapter_config(dir: &Path) -> Result<LoraConfig> {
    let path = dir.join(ADAPTER_CONFIG_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    parse_adapter_config(&path, &text)
}

/// [`read_adapter_config`] of the text of an `adapter_config.json`, errors naming `path`.
fn parse_adapter_config(path: &Path, text: &str) -> Result<LoraConfig> {
    let path = path.to_path_buf();
    let value: Value = serde_json::from_str(text).map_err(|e| Error::json(&path, &e))?;
    let unsupported = |field: &str, value: &Value, reason: &str| Error::Unsupported {
        path: path.clone(),
        field: field.into(),
        value: value.to_string(),
        reason: reason.into(),
    };
    let missing = |field: &str| Error::Json {
        path: path.clone(),
        line: 0,
        message: format!("missing field `{field}`"),
    };
    let get = |field: &str| value.get(field).unwrap_or(&Value::Null);
    let peft_type = get("peft_type");
    if peft_type != "LORA" {
        return Err(unsupported(
            "peft_type",
            peft_type,
            "only LoRA adapters are supported",
        ));
    }
    // Each PEFT feature that changes what the adapter computes, with the value that means "off".
    let is_off = |v: &Value| match v {
        Value::Null | Value::Bool(false) => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    for (field, reason) in [
        ("use_dora", "DoRA is not implemented"),
        (
            "modules_to_save",
            "fully trained extra modules are not supported",
        ),
        ("rank_pattern", "per-module ranks are not supported"),
        ("alpha_pattern", "per-module alphas are not supported"),
        (
            "fan_in_fan_out",
            "only nn.Linear's [out, in] layout is supported",
        ),
        (
            "layers_to_transform",
            "adapters on a subset of layers are not supported",
        ),
        (
            "layers_pattern",
            "adapters on a subset of layers are not supported",
        ),
        ("exclude_modules", "excluded modules are not supported"),
        (
            "target_parameters",
            "adapters on parameters are not supported",
        ),
        (
            "trainable_token_indices",
            "trainable tokens are not supported",
        ),
        ("lora_bias", "LoRA biases are not supported"),
        ("use_qalora", "QA-LoRA is not supported"),
        ("use_bdlora", "block-diagonal LoRA is not supported"),
        ("layer_replication", "layer replication is not supported"),
    ] {
        let v = get(field);
        if !is_off(v) {
            return Err(unsupported(field, v, reason));
        }
    }
    let bias = get("bias");
    if !(bias.is_null() || bias == "none") {
        return Err(unsupported("bias", bias, "only `none` is supported"));
    }
    let rank = get("r").as_u64().ok_or_else(|| missing("r"))? as usize;
    let alpha = get("lora_alpha")
        .as_f64()
        .ok_or_else(|| missing("lora_alpha"))?;
    let use_rslora = get("use_rslora").as_bool().unwrap_or(false);
    let targets_value = get("target_modules");
    let targets: Vec<String> = match targets_value {
        Value::String(s) if s == "all-linear" => super::all_targets(),
        Value::Array(items) => items
            .iter()
            .map(|t| {
                t.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| unsupported("target_modules", t, "a module name is a string"))
            })
            .collect::<Result<_>>()?,
        Value::Null => return Err(missing("target_modules")),
        other => {
            return Err(unsupported(
                "target_modules",
                other,
                "a list of module names or `all-linear` (not a regex)",
            ));
        }
    };
    for t in &targets {
        if Target::parse(t).is_none() {
            return Err(unsupported(
                "target_modules",
                &json!(t),
                "adapters go on q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj and down_proj only",
            ));
        }
    }
    let config = LoraConfig {
        rank,
        alpha,
        targets,
        use_rslora,
    };
    config.validate()?;
    Ok(config)
}

/// `model` with the PEFT adapter in `dir` on it (replacing any adapters it had): the base is
/// frozen as by [`Qwen::with_lora`], and the adapter's A and B are what the file holds.
///
/// # Errors
/// Those of [`read_adapter_config`]; [`Error::Io`] / [`Error::Safetensors`] naming the weights
/// file; [`Error::MissingTensor`] for a target's tensor that is absent, [`Error::ShapeMismatch`]
/// (both shapes) for one whose shape does not match the base and the rank,
/// [`Error::Safetensors`] naming a tensor the config does not account for,
/// [`Error::UnsupportedDtype`] and [`Error::NonFinite`] naming the tensor.
pub fn load_adapter(model: Qwen, dir: &Path) -> Result<Qwen> {
    let config = read_adapter_config(dir)?;
    let path = dir.join(ADAPTER_WEIGHTS_FILE);
    let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| Error::Safetensors {
        path: path.clone(),
        message: e.to_string(),
    })?;
    apply_adapter(model, &config, &file, path)
}

/// The key of a one-file adapter's safetensors metadata that holds its `adapter_config.json`
/// ([`adapter_bytes`]).
pub const ADAPTER_CONFIG_METADATA: &str = "adapter_config";

/// `model`'s adapters as one safetensors file: PEFT's `adapter_model.safetensors` (f32) with
/// its `adapter_config.json` as the text of the metadata key [`ADAPTER_CONFIG_METADATA`]. What
/// `rstar serve`'s `/v1/upload_lora_adapter` takes, for engines that cannot read the trainer's
/// disk; [`load_adapter_bytes`] reads it back.
///
/// # Errors
/// As [`save_adapter`].
pub fn adapter_bytes(model: &Qwen, base_model_name_or_path: &str) -> Result<Vec<u8>> {
    let lora = model
        .lora
        .as_ref()
        .ok_or_else(|| Error::InvalidRequest("the model has no LoRA adapters to send".into()))?;
    let config = peft_config(&lora.config, base_model_name_or_path).to_string();
    crate::checkpoint::safetensors_bytes_with(
        &lora.tensors()?,
        WeightDtype::F32,
        &[(ADAPTER_CONFIG_METADATA, config.as_str())],
    )
}

/// [`load_adapter`] of one file as [`adapter_bytes`] writes it (a PEFT weights file whose
/// metadata holds the adapter's config); `source` names it in errors.
///
/// # Errors
/// Those of [`load_adapter`]; [`Error::Safetensors`] for bytes that are not a safetensors file
/// or whose metadata has no [`ADAPTER_CONFIG_METADATA`].
pub fn load_adapter_bytes(model: Qwen, bytes: &[u8], source: &Path) -> Result<Qwen> {
    let path = source.to_path_buf();
    let bad = |message: String| Error::Safetensors {
        path: path.clone(),
        message,
    };
    let (_, metadata) = SafeTensors::read_metadata(bytes).map_err(|e| bad(e.to_string()))?;
    let text = metadata
        .metadata()
        .as_ref()
        .and_then(|m| m.get(ADAPTER_CONFIG_METADATA))
        .ok_or_else(|| {
            bad(format!(
                "the metadata has no `{ADAPTER_CONFIG_METADATA}`: one adapter file carries its \
                 adapter_config.json there"
            ))
        })?;
    let config = parse_adapter_config(&path.join(ADAPTER_CONFIG_FILE), text)?;
    let file = SafeTensors::deserialize(bytes).map_err(|e| bad(e.to_string()))?;
    apply_adapter(model, &config, &file, path.clone())
}

/// `model` with the adapter of `config` whose tensors `file` (read from `path`) holds.
fn apply_adapter(
    model: Qwen,
    config: &LoraConfig,
    file: &SafeTensors<'_>,
    path: std::path::PathBuf,
) -> Result<Qwen> {
    let targets = config.validate()?;
    let device = model.device();
    let r = config.rank;
    let mut expected = std::collections::HashSet::new();
    let mut layers = Vec::with_capacity(model.layers.len());
    for l in 0..model.layers.len() {
        let mut layer = LayerLora::empty();
        for &t in &targets {
            let (fan_in, fan_out) = t.features(&model.config);
            let prefix = format!("base_model.model.model.layers.{l}.{}", t.path());
            let mut read = |which: &str, shape: [usize; 2]| -> Result<Param<Tensor<2>>> {
                let name = format!("{prefix}.{which}.weight");
                let view = file.tensor(&name).map_err(|_| Error::MissingTensor {
                    path: path.clone(),
                    name: name.clone(),
                })?;
                if view.shape() != shape {
                    return Err(Error::ShapeMismatch {
                        path: path.clone(),
                        name,
                        found: view.shape().to_vec(),
                        expected: shape.to_vec(),
                    });
                }
                let data = to_f32(&view).ok_or_else(|| Error::UnsupportedDtype {
                    path: path.clone(),
                    name: name.clone(),
                    dtype: format!("{:?}", view.dtype()),
                })?;
                crate::checkpoint::check_finite(&path, &name, &data)?;
                expected.insert(name);
                // PEFT's [r, in] / [out, r] are the transposes of what is stored here.
                let (rows, cols) = (shape[0], shape[1]);
                Ok(Param::from_data(
                    TensorData::new(transpose_host(&data, rows, cols), [cols, rows]),
                    &device,
                ))
            };
            let a = read("lora_A", [r, fan_in])?;
            let b = read("lora_B", [fan_out, r])?;
            *layer.slot(t) = Some(LoraPair { a, b });
        }
        layers.push(layer);
    }
    let mut extra: Vec<String> = file
        .names()
        .into_iter()
        .filter(|n| !expected.contains(*n))
        .map(str::to_string)
        .collect();
    extra.sort();
    if let Some(first) = extra.first() {
        return Err(Error::Safetensors {
            path,
            message: format!(
                "tensor `{first}` is not an adapter of the config's targets on this base \
                 ({} such tensors)",
                extra.len()
            ),
        });
    }
    Ok(model.with_adapters(config, layers))
}
