//! Loading HF model directories and saving/loading this crate's checkpoints.
//!
//! A checkpoint directory holds `config.json` (HF format), one or more
//! `*.safetensors` files with HF tensor names and layout, and a tokenizer
//! (`tokenizer.json` for HF, `tokenizer_rstar.json` for the built-in one). The
//! same loader reads both HF directories and the ones [`save_dir`] writes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use burn::tensor::Device;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use serde::{Deserialize, Serialize};

use crate::config::QwenConfig;
use crate::digest::{Verify, verify_digests, write_digests};
use crate::error::{Error, Result};
use crate::model::{Qwen, TensorSpec};
use crate::tokenizer::Tokenizer;

/// The element type weights are written in. Reading accepts f32, bf16 and
/// f16 files; computation is always f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum WeightDtype {
    /// 32-bit floats (exact round trip).
    #[default]
    F32,
    /// bfloat16 (half the size; rounds the weights).
    Bf16,
}

/// Loads `config.json` and the weights of a model directory onto `device`, after checking the
/// directory's digests when it has them ([`crate::digest`]). Every weight is checked to be
/// finite.
///
/// # Errors
/// [`Error::Unsupported`] for an architecture other than Qwen2/Qwen3 (naming
/// the field), [`Error::MissingTensor`] and [`Error::ShapeMismatch`] naming the
/// tensor, [`Error::NoWeights`] when no `*.safetensors` file is present,
/// [`Error::Digest`] for a file that changed since it was saved, [`Error::NonFinite`] for a
/// tensor with NaN or infinite values.
pub fn load_model(dir: &Path, device: &Device) -> Result<Qwen> {
    load_model_with(dir, device, Verify::Digests)
}

/// [`load_model`], checking the digests or not (`verify`).
///
/// # Errors
/// As [`load_model`].
pub fn load_model_with(dir: &Path, device: &Device, verify: Verify) -> Result<Qwen> {
    if verify == Verify::Digests {
        verify_digests(dir)?;
    }
    let config = QwenConfig::from_hf_file(&dir.join("config.json"))?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::NoWeights {
            path: dir.to_path_buf(),
        });
    }
    let bytes: Vec<Vec<u8>> = files
        .iter()
        .map(|p| std::fs::read(p).map_err(|e| Error::io(p, e)))
        .collect::<Result<_>>()?;
    let parsed: Vec<SafeTensors<'_>> = bytes
        .iter()
        .zip(&files)
        .map(|(b, p)| {
            SafeTensors::deserialize(b).map_err(|e| Error::Safetensors {
                path: p.clone(),
                message: e.to_string(),
            })
        })
        .collect::<Result<_>>()?;
    from_parsed(config, &parsed, &files, dir, device)
}

/// Loads a model of `config` from the bytes of one safetensors file in HF naming (what
/// [`safetensors_bytes`] writes; a trainer pushing weights over HTTP sends them). `origin`
/// names the source in errors.
///
/// # Errors
/// As [`load_model`]: bytes that are not safetensors, a missing tensor, a shape or dtype that
/// does not fit `config`.
pub fn load_model_from_bytes(
    config: QwenConfig,
    bytes: &[u8],
    device: &Device,
    origin: &Path,
) -> Result<Qwen> {
    let parsed = SafeTensors::deserialize(bytes).map_err(|e| Error::Safetensors {
        path: origin.to_path_buf(),
        message: e.to_string(),
    })?;
    // Every tensor must be one of the architecture's: a model with more layers or another
    // head would otherwise load its matching part silently.
    let expected: std::collections::HashSet<String> = crate::model::tensor_specs(&config)
        .into_iter()
        .map(|s| s.name)
        .collect();
    if let Some(extra) = parsed.names().into_iter().find(|n| !expected.contains(*n)) {
        return Err(Error::Safetensors {
            path: origin.to_path_buf(),
            message: format!("tensor `{extra}` is not one of the architecture's (another model?)"),
        });
    }
    from_parsed(config, &[parsed], &[origin.to_path_buf()], origin, device)
}

/// The model of `config` from parsed safetensors files (`files[i]` names `parsed[i]`; `dir`
/// names them all in a missing-tensor error).
fn from_parsed(
    config: QwenConfig,
    parsed: &[SafeTensors<'_>],
    files: &[PathBuf],
    dir: &Path,
    device: &Device,
) -> Result<Qwen> {
    let mut index: HashMap<String, usize> = HashMap::new();
    for (i, st) in parsed.iter().enumerate() {
        for name in st.names() {
            index.insert(name.to_string(), i);
        }
    }
    Qwen::from_tensors(config, device, |spec: &TensorSpec| {
        let &file = index.get(&spec.name).ok_or_else(|| Error::MissingTensor {
            path: dir.to_path_buf(),
            name: spec.name.clone(),
        })?;
        let view = parsed[file]
            .tensor(&spec.name)
            .map_err(|e| Error::Safetensors {
                path: files[file].clone(),
                message: e.to_string(),
            })?;
        if view.shape() != spec.shape.as_slice() {
            return Err(Error::ShapeMismatch {
                path: files[file].clone(),
                name: spec.name.clone(),
                expected: spec.shape.clone(),
                found: view.shape().to_vec(),
            });
        }
        let data = to_f32(&view).ok_or_else(|| Error::UnsupportedDtype {
            path: files[file].clone(),
            name: spec.name.clone(),
            dtype: format!("{:?}", view.dtype()),
        })?;
        check_finite(&files[file], &spec.name, &data)?;
        Ok(data)
    })
}

/// [`Error::NonFinite`] when `data` holds a NaN or an infinity.
pub(crate) fn check_finite(path: &Path, name: &str, data: &[f32]) -> Result<()> {
    match data.iter().position(|x| !x.is_finite()) {
        None => Ok(()),
        Some(first) => Err(Error::NonFinite {
            path: path.to_path_buf(),
            name: name.to_string(),
            count: data[first..].iter().filter(|x| !x.is_finite()).count(),
            first,
        }),
    }
}

/// Loads a model directory and its tokenizer ([`load_model`]: digests and finiteness checked).
///
/// # Errors
/// As [`load_model`], and the tokenizer's.
pub fn load_dir(dir: &Path, device: &Device) -> Result<(Qwen, Tokenizer)> {
    load_dir_with(dir, device, Verify::Digests)
}

/// [`load_dir`], checking the digests or not (`verify`).
///
/// # Errors
/// As [`load_dir`].
pub fn load_dir_with(dir: &Path, device: &Device, verify: Verify) -> Result<(Qwen, Tokenizer)> {
    let model = load_model_with(dir, device, verify)?;
    let tokenizer = Tokenizer::from_dir(dir)?;
    Ok((model, tokenizer))
}

/// Saves a model and its tokenizer into `dir` (created if missing) as
/// `config.json`, `model.safetensors`, the tokenizer file and `checksums.sha256`
/// ([`crate::digest`]).
///
/// # Errors
/// IO errors naming the file; [`Error::NonFinite`] (nothing written) when a weight is NaN or
/// infinite: a diverged model is never saved as if it were sound.
pub fn save_dir(model: &Qwen, tokenizer: &Tokenizer, dir: &Path, dtype: WeightDtype) -> Result<()> {
    let tensors = model.hf_tensors()?;
    check_all_finite(dir, &tensors)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let config_path = dir.join("config.json");
    std::fs::write(&config_path, model.config.to_hf_json()?)
        .map_err(|e| Error::io(&config_path, e))?;
    write_safetensors(&dir.join("model.safetensors"), &tensors, dtype)?;
    tokenizer.save_to_dir(dir)?;
    write_digests(dir)
}

/// [`check_finite`] over named tensors.
fn check_all_finite(path: &Path, tensors: &[(TensorSpec, Vec<f32>)]) -> Result<()> {
    tensors
        .iter()
        .try_for_each(|(spec, data)| check_finite(path, &spec.name, data))
}

/// Saves `model` like [`save_dir`], with its output head untied: `tie_word_embeddings: false`
/// and `lm_head.weight` a copy of the embedding, so it computes exactly what the tied model
/// does. For servers that do not reload a tied head (vLLM's `reload_weights` keeps the old one):
/// serve and reload such copies. An untied model is saved as is.
///
/// # Errors
/// As [`save_dir`].
pub fn save_dir_untied(
    model: &Qwen,
    tokenizer: &Tokenizer,
    dir: &Path,
    dtype: WeightDtype,
) -> Result<()> {
    if !model.config.tie_word_embeddings {
        return save_dir(model, tokenizer, dir, dtype);
    }
    let mut tensors = model.hf_tensors()?;
    check_all_finite(dir, &tensors)?;
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let mut config = model.config.clone();
    config.tie_word_embeddings = false;
    let embed = tensors
        .iter()
        .find(|(spec, _)| spec.name == "model.embed_tokens.weight")
        .map(|(spec, data)| (spec.shape.clone(), data.clone()))
        .expect("every model has an embedding");
    tensors.push((
        TensorSpec {
            name: "lm_head.weight".into(),
            shape: embed.0,
            transposed: false,
        },
        embed.1,
    ));
    let config_path = dir.join("config.json");
    std::fs::write(&config_path, config.to_hf_json()?).map_err(|e| Error::io(&config_path, e))?;
    write_safetensors(&dir.join("model.safetensors"), &tensors, dtype)?;
    tokenizer.save_to_dir(dir)?;
    write_digests(dir)
}

/// Writes named tensors (HF layout) to a safetensors file.
pub fn write_safetensors(
    path: &Path,
    tensors: &[(TensorSpec, Vec<f32>)],
    dtype: WeightDtype,
) -> Result<()> {
    let buf = safetensors_bytes(tensors, dtype).map_err(|e| match e {
        Error::Safetensors { message, .. } => Error::Safetensors {
            path: path.to_path_buf(),
            message,
        },
        Error::NonFinite {
            name, count, first, ..
        } => Error::NonFinite {
            path: path.to_path_buf(),
            name,
            count,
            first,
        },
        other => other,
    })?;
    std::fs::write(path, buf).map_err(|e| Error::io(path, e))
}

/// Named tensors (HF layout) as the bytes of a safetensors file, in `dtype`.
///
/// # Errors
/// [`Error::Safetensors`] when a tensor's data does not fit its shape, [`Error::NonFinite`]
/// when it holds NaN or infinite values.
pub fn safetensors_bytes(
    tensors: &[(TensorSpec, Vec<f32>)],
    dtype: WeightDtype,
) -> Result<Vec<u8>> {
    safetensors_bytes_with(tensors, dtype, &[])
}

/// [`safetensors_bytes`] with `metadata` (key, text) beside `format: pt`.
pub(crate) fn safetensors_bytes_with(
    tensors: &[(TensorSpec, Vec<f32>)],
    dtype: WeightDtype,
    metadata: &[(&str, &str)],
) -> Result<Vec<u8>> {
    let path = Path::new("<safetensors>");
    check_all_finite(path, tensors)?;
    let encoded: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(spec, data)| {
            let bytes = match dtype {
                WeightDtype::F32 => data.iter().flat_map(|x| x.to_le_bytes()).collect(),
                WeightDtype::Bf16 => data
                    .iter()
                    .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
                    .collect(),
            };
            (spec.name.clone(), spec.shape.clone(), bytes)
        })
        .collect();
    let st_dtype = match dtype {
        WeightDtype::F32 => Dtype::F32,
        WeightDtype::Bf16 => Dtype::BF16,
    };
    let views = encoded
        .iter()
        .map(|(name, shape, bytes)| {
            TensorView::new(st_dtype, shape.clone(), bytes).map(|v| (name.clone(), v))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Safetensors {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    for (key, text) in metadata {
        meta.insert((*key).to_string(), (*text).to_string());
    }
    safetensors::serialize(views, Some(meta)).map_err(|e| Error::Safetensors {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

pub(crate) fn to_f32(view: &TensorView<'_>) -> Option<Vec<f32>> {
    let data = view.data();
    Some(match view.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => return None,
    })
}
