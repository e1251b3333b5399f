//! What checking a checkpoint costs: `save_dir` (with its digests), then `load_dir` with the
//! digests and the finiteness check, and with `Verify::Skip` (the finiteness check alone),
//! and `verify_digests` alone. On an existing model directory, or on a random model of
//! Qwen3-0.6B's shape (2.4 GB of f32 weights) written to a temporary directory.
//!
//! ```sh
//! cargo run --release -p rstar-policy --features flex --example verify_cost -- [MODEL_DIR]
//! ```

use std::time::Instant;

use burn::tensor::Device;
use rstar_policy::{Qwen, QwenConfig, Tokenizer, Verify, WeightDtype};

fn main() -> anyhow::Result<()> {
    let device = Device::flex();
    let tmp = tempfile::tempdir()?;
    let dir = match std::env::args().nth(1) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => {
            let model = Qwen::random(QwenConfig::qwen3_0_6b(), 1, &device)?;
            let t = Instant::now();
            rstar_policy::save_dir(&model, &Tokenizer::char(), tmp.path(), WeightDtype::F32)?;
            println!(
                "save_dir (weights, tokenizer, digests): {:.2} s",
                t.elapsed().as_secs_f64()
            );
            tmp.path().to_path_buf()
        }
    };
    let bytes: u64 = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!("{}: {:.2} GB", dir.display(), bytes as f64 / 1e9);
    // Twice each, alternating, so that both see a warm page cache; the second figure counts.
    for round in 0..2 {
        let t = Instant::now();
        let check = rstar_policy::verify_digests(&dir)?;
        let digests = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let (model, _) = rstar_policy::load_dir_with(&dir, &device, Verify::Skip)?;
        let finite_only = t.elapsed().as_secs_f64();
        // The finiteness pass on its own: the scan the loader runs over each tensor.
        let tensors = model.hf_tensors()?;
        let t = Instant::now();
        let finite = tensors
            .iter()
            .all(|(_, data)| data.iter().all(|x| x.is_finite()));
        let scan = t.elapsed().as_secs_f64();
        assert!(finite);
        drop((model, tensors));
        let t = Instant::now();
        drop(rstar_policy::load_dir_with(&dir, &device, Verify::Digests)?);
        let both = t.elapsed().as_secs_f64();
        println!(
            "round {round}: verify_digests {digests:.2} s ({check:?}, {:.2} GB/s); load (finiteness checked) {finite_only:.2} s, of which the finiteness scan {scan:.3} s; load with digests {both:.2} s",
            bytes as f64 / 1e9 / digests
        );
    }
    Ok(())
}
