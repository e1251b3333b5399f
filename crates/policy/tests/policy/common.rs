//! Shared helpers: the fixture models, the HF references and tensor conversions.

use std::path::PathBuf;
use std::sync::OnceLock;

use burn::tensor::{Device, Int, Tensor, TensorData};
use rstar_policy::{Qwen, Tokenizer, load_model};
use serde_json::Value;

/// A fixture model directory: `qwen3_tiny` or `qwen2_tiny`.
pub fn fixture_dir(name: &str) -> PathBuf {
    rstar_testdata::fixture(&format!("qwen/{name}"))
}

/// PEFT's adapter directories for the tiny Qwen3, copied into `tests/data/peft` (their README
/// says from where): `case_1`, `case_2`, `case_3`.
pub fn peft_adapter(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/peft")
        .join(case)
}

/// The recorded HF outputs of a fixture model.
pub fn reference(name: &str) -> Value {
    let path = fixture_dir(name).join("reference.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The real Qwen3 tokenizer, parsed once per test binary.
pub fn qwen_tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let path = rstar_testdata::fixture("qwen/tokenizer_qwen3/tokenizer.json");
        Tokenizer::from_hf_file(&path).unwrap()
    })
}

pub fn device() -> Device {
    Device::flex()
}

pub fn load(name: &str) -> Qwen {
    load_model(&fixture_dir(name), &device()).unwrap()
}

pub fn ids_tensor(rows: &[Vec<u32>], device: &Device) -> Tensor<2, Int> {
    let t = rows[0].len();
    assert!(rows.iter().all(|r| r.len() == t));
    let data: Vec<i64> = rows.iter().flatten().map(|&x| i64::from(x)).collect();
    Tensor::from_data(TensorData::new(data, [rows.len(), t]), device)
}

pub fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.try_into_vec_as::<f32>().unwrap()
}

pub fn f32s(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .flat_map(|x| match x {
            Value::Array(_) => f32s(x),
            _ => vec![x.as_f64().unwrap() as f32],
        })
        .collect()
}

pub fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
