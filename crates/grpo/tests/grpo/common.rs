//! Helpers shared by the integration tests: the device, tensor construction, read-back.

use burn::tensor::{DType, Device, Tensor, TensorData};

/// The CPU device with autodiff.
pub fn device() -> Device {
    Device::flex().autodiff()
}

/// A `[rows, cols]` tensor from rows of `f64` (as the fixtures store them), rounded to `f32`.
pub fn t2(rows: &[Vec<f64>], device: &Device) -> Tensor<2> {
    let r = rows.len();
    let c = rows.first().map_or(0, Vec::len);
    let flat: Vec<f32> = rows.iter().flatten().map(|&x| x as f32).collect();
    Tensor::from_data(TensorData::new(flat, [r, c]), device)
}

/// A `[rows, cols]` tensor from a row-major `f32` slice.
pub fn flat2(values: &[f32], rows: usize, cols: usize, device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(values.to_vec(), [rows, cols]), device)
}

/// A `[rows, cols]` tensor of dtype `f64`, for finite differences that `f32` rounding would
/// swamp.
pub fn flat2_f64(values: &[f64], rows: usize, cols: usize, device: &Device) -> Tensor<2> {
    Tensor::from_data(
        TensorData::new(values.to_vec(), [rows, cols]),
        (device, DType::F64),
    )
}

/// A fixture's matrix (a JSON array of rows of numbers), as `f64` rows.
///
/// # Panics
/// When `v` is not one (a fixture error).
pub fn json_matrix(v: &serde_json::Value) -> Vec<Vec<f64>> {
    v.as_array()
        .expect("a matrix")
        .iter()
        .map(|row| {
            row.as_array()
                .expect("a row")
                .iter()
                .map(|x| x.as_f64().expect("a number"))
                .collect()
        })
        .collect()
}

/// All values of a tensor, row-major.
pub fn values<const D: usize>(t: &Tensor<D>) -> Vec<f32> {
    t.to_data().iter::<f32>().collect()
}

/// The single value of a `[1]` tensor.
pub fn scalar(t: &Tensor<1>) -> f64 {
    t.to_data().iter::<f64>().next().expect("a scalar")
}

/// A small deterministic generator (SplitMix64), so the tests need no RNG dependency.
#[derive(Debug, Clone)]
pub struct SplitMix(pub u64);

impl SplitMix {
    /// The next value, uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.uniform()
    }
}
