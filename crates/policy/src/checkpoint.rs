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

/// Loads `config.json` and the weights of a model directory onto `device`.
///
/// # Errors
/// [`Error::Unsupported`] for an architecture other than Qwen2/Qwen3 (naming
/// the field), [`Error::MissingTensor`] and [`Error::ShapeMismatch`] naming the
/// tensor, [`Error::NoWeights`] when no `*.safetensors` file is present.
pub fn load_model(dir: &Path, device: &Device) -> Result<Qwen> {
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
        to_f32(&view).ok_or_else(|| Error::UnsupportedDtype {
            path: files[file].clone(),
            name: spec.name.clone(),
            dtype: format!("{:?}", view.dtype()),
        })
    })
}

/// Loads a model directory and its tokenizer.
pub fn load_dir(dir: &Path, device: &Device) -> Result<(Qwen, Tokenizer)> {
    let model = load_model(dir, device)?;
    let tokenizer = Tokenizer::from_dir(dir)?;
    Ok((model, tokenizer))
}

/// Saves a model and its tokenizer into `dir` (created if missing) as
/// `config.json`, `model.safetensors` and the tokenizer file.
pub fn save_dir(model: &Qwen, tokenizer: &Tokenizer, dir: &Path, dtype: WeightDtype) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let config_path = dir.join("config.json");
    std::fs::write(&config_path, model.config.to_hf_json()?)
        .map_err(|e| Error::io(&config_path, e))?;
    write_safetensors(&dir.join("model.safetensors"), &model.hf_tensors()?, dtype)?;
    tokenizer.save_to_dir(dir)?;
    Ok(())
}

/// Writes named tensors (HF layout) to a safetensors file.
pub fn write_safetensors(
    path: &Path,
    tensors: &[(TensorSpec, Vec<f32>)],
    dtype: WeightDtype,
) -> Result<()> {
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
    let buf = safetensors::serialize(views, Some(meta)).map_err(|e| Error::Safetensors {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    std::fs::write(path, buf).map_err(|e| Error::io(path, e))
}

fn to_f32(view: &TensorView<'_>) -> Option<Vec<f32>> {
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
