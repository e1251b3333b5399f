//! `cargo xtask bench grpo`: rstar-grpo against verl's formulas in PyTorch (the stack verl runs
//! on) and a vectorised numpy port (benches/grpo_peer.py), on the same inputs, in the same run.
//! Prints medians and ratios, and how closely the sides agree.
//!
//! Workload: advantages of 512 prompts × 16 rollouts; the rStar2-Agent loss (token-mean, dual
//! clip, metrics) on a 32 × 2048-token micro-batch, forward alone and forward + backward to
//! `log_prob`, on Burn's `flex` CPU backend.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use burn::tensor::{Device, Tensor, TensorData};
use rstar_grpo::{GlobalBatch, GrpoConfig, PolicyLossInputs, group_advantages, policy_loss};

const PROMPTS: usize = 512;
const GROUP: usize = 16;
const B: usize = 32;
const T: usize = 2048;
const REPS: usize = 15;

struct SplitMix(u64);

impl SplitMix {
    fn uniform(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn median_ms<T>(mut f: impl FnMut() -> T) -> (f64, T) {
    let mut times = Vec::with_capacity(REPS);
    #[allow(unused_assignments)] // reason: the warm-up result is overwritten by the timed runs
    let mut out = Some(f()); // warm-up
    for _ in 0..REPS {
        let start = Instant::now();
        out = Some(f());
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    (times[REPS / 2], out.expect("REPS > 0"))
}

fn write(dir: &Path, name: &str, bytes: Vec<u8>) -> anyhow::Result<()> {
    Ok(std::fs::write(dir.join(name), bytes)?)
}

fn f32s(x: &[f32]) -> Vec<u8> {
    x.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn read_f32s(path: &Path) -> anyhow::Result<Vec<f32>> {
    Ok(std::fs::read(path)?
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn tensor(x: &[f32], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(x.to_vec(), [B, T]), device)
}

fn main() -> anyhow::Result<()> {
    let mut rng = SplitMix(2508);
    let groups: Vec<u32> = (0..PROMPTS * GROUP).map(|i| (i / GROUP) as u32).collect();
    let scores: Vec<f32> = (0..PROMPTS * GROUP)
        .map(|_| if rng.uniform() < 0.4 { 1.0 } else { 0.0 })
        .collect();
    let old: Vec<f32> = (0..B * T).map(|_| -3.0 * rng.uniform() - 0.01).collect();
    let lp: Vec<f32> = old
        .iter()
        .map(|o| o + 0.8 * (rng.uniform() - 0.5))
        .collect();
    let row_adv: Vec<f32> = (0..B).map(|_| 3.0 * (rng.uniform() - 0.5)).collect();
    let adv: Vec<f32> = (0..B * T).map(|i| row_adv[i / T]).collect();
    // Sequences of varied length with tool-response spans masked out.
    let mask: Vec<f32> = (0..B * T)
        .map(|i| {
            let (b, t) = (i / T, i % T);
            let len = T / 2 + (b * 37) % (T / 2);
            f32::from(u8::from(t < len && !(100..160).contains(&(t % 512))))
        })
        .collect();

    let dir = std::env::temp_dir().join(format!("rstar-grpo-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    write(&dir, "scores.f32", f32s(&scores))?;
    write(
        &dir,
        "groups.u32",
        groups.iter().flat_map(|g| g.to_le_bytes()).collect(),
    )?;
    for (name, x) in [
        ("log_prob", &lp),
        ("old_log_prob", &old),
        ("advantages", &adv),
        ("mask", &mask),
    ] {
        write(&dir, &format!("{name}.f32"), f32s(x))?;
    }

    // Ours.
    let config = GrpoConfig::rstar2_agent();
    let (adv_ms, ours_adv) = median_ms(|| group_advantages(&scores, &groups, &config.advantage));
    let ours_adv = ours_adv?;
    let plain = Device::flex();
    let (fwd_ms, fwd) = median_ms(|| {
        let inputs = PolicyLossInputs::new(
            tensor(&lp, &plain),
            tensor(&old, &plain),
            tensor(&adv, &plain),
            tensor(&mask, &plain),
        );
        policy_loss(&config, inputs, &GlobalBatch::new())
    });
    let ours_loss = fwd?.metrics.loss;
    let ad = Device::flex().autodiff();
    let (bwd_ms, ours_grad) = median_ms(|| {
        let log_prob = tensor(&lp, &ad).require_grad();
        let inputs = PolicyLossInputs::new(
            log_prob.clone(),
            tensor(&old, &ad),
            tensor(&adv, &ad),
            tensor(&mask, &ad),
        );
        let out = policy_loss(&config, inputs, &GlobalBatch::new()).expect("valid inputs");
        let grad = log_prob.grad(&out.loss.backward()).expect("gradient");
        grad.into_data().iter::<f32>().collect::<Vec<f32>>()
    });

    // The peer.
    let python = std::env::var_os("RSTAR_PYTHON").unwrap_or_else(|| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/grpo_peer.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(&dir)
        .args([B.to_string(), T.to_string(), REPS.to_string()])
        .output()?;
    if !out.status.success() {
        anyhow::bail!(
            "peer failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let peer: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let peer_adv = read_f32s(&dir.join("peer_adv.f32"))?;
    let peer_grad = read_f32s(&dir.join("peer_grad.f32"))?;
    let torch_grad = read_f32s(&dir.join("torch_grad.f32")).ok();
    std::fs::remove_dir_all(&dir)?;

    let max_diff = |a: &[f32], b: &[f32]| {
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max)
    };
    let torch = peer["torch"].as_str();
    println!(
        "rstar-grpo (Burn flex) vs verl's formulas in PyTorch {} ({} threads) and numpy {}; medians of {REPS} runs",
        torch.unwrap_or("(not installed)"),
        peer["torch_threads"].as_u64().unwrap_or(0),
        peer["numpy"].as_str().unwrap_or("?")
    );
    println!(
        "{:<44} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "workload", "ours ms", "torch ms", "numpy ms", "vs torch", "vs numpy"
    );
    for (name, ours, key) in [
        ("advantages, 512 prompts x 16 rollouts", adv_ms, "adv_ms"),
        ("loss forward + metrics, 32 x 2048 tokens", fwd_ms, "fwd_ms"),
        (
            "loss forward + backward, 32 x 2048 tokens",
            bwd_ms,
            "fwd_bwd_ms",
        ),
    ] {
        let numpy = peer[key].as_f64().unwrap_or(f64::NAN);
        let torch = peer[format!("torch_{key}")].as_f64().unwrap_or(f64::NAN);
        println!(
            "{name:<44} {ours:>9.3} {torch:>9.3} {numpy:>9.3} {:>8.2}x {:>8.2}x",
            torch / ours,
            numpy / ours
        );
    }
    println!("(ratios = peer time / ours: above 1 means rstar-grpo is faster)");
    let peer_loss = peer["loss"].as_f64().unwrap_or(f64::NAN);
    print!(
        "agreement: loss {ours_loss:.7} vs numpy {peer_loss:.7}; max |d advantage| {:.2e}; max |d grad| vs numpy {:.2e}",
        max_diff(&ours_adv, &peer_adv),
        max_diff(&ours_grad, &peer_grad)
    );
    match torch_grad {
        Some(g) => println!(", vs torch autograd {:.2e}", max_diff(&ours_grad, &g)),
        None => println!(),
    }
    Ok(())
}
