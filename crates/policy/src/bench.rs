//! The policy bench (`rstar bench policy`, which `cargo xtask bench policy` runs): prefill and decode
//! tokens/s and a training step (forward + backward through [`crate::sequence_nll`]) of a random
//! model, side by side with a PyTorch peer (`xtask/bench/policy_peer.py`) running the same
//! architecture and weights on the same device in the same run.
//!
//! Trust: the device is synchronised before every clock read; the same-weights check (our
//! logits against the peer's on a check prompt) runs before anything is timed and fails the
//! bench when they differ by more than [`BenchOptions::check_tol`] (1e-2 in f32, 0.25 in bf16);
//! and on a GPU a prefill or training step faster than the hardware allows fails it too (its
//! matmul FLOPs over [`BenchOptions::peak_tflops`], by default 495 in f32, the H200's TF32
//! tensor-core rate and more than any f32 matmul gets, 990 in bf16). On a GPU the peak memory
//! of each workload is reported for both sides: ours from nvidia-smi's `memory.used` above the
//! level before the workload (sampled every 20 ms), the peer's from
//! `torch.cuda.max_memory_reserved`.
//!
//! [`run`] prints its table to standard output as it goes (the header before anything is
//! timed), so a run cut short still says what it measured.
//!
//! The PyTorch side is a [`Peer`]: the `rstar` binary's runs `policy_peer.py` with a Python (this
//! crate starts no process). Without one, the bench measures ours alone:
//!
//! ```no_run
//! use std::path::Path;
//!
//! use burn::tensor::Device;
//! use rstar_policy::bench::{BenchOptions, BenchShape, Peer, run};
//!
//! struct Absent;
//! impl Peer for Absent {
//!     fn run(&mut self, _: &Path, _: &serde_json::Value) -> Result<serde_json::Value, String> {
//!         Err("no PyTorch here".into())
//!     }
//! }
//!
//! let options = BenchOptions { shape: BenchShape::Tiny, reps: 3, ..BenchOptions::default() };
//! let report = run(&options, &Device::flex(), &mut Absent, None)?;
//! for row in &report.rows {
//!     println!("{}: {:.0} tokens/s", row.workload, row.ours);
//! }
//! # Ok::<(), rstar_policy::bench::BenchError>(())
//! ```

use std::path::Path;
use std::str::FromStr;
use std::time::Instant;

use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{KvCache, Precision, Qwen, QwenConfig, Tokenizer, WeightDtype, save_dir, sequence_nll};

/// Why a bench run gave no figures: a figure that cannot be trusted is not printed as one.
#[derive(Debug, thiserror::Error)]
#[error("policy bench: {0}")]
pub struct BenchError(pub String);

fn fail<T>(message: impl Into<String>) -> Result<T, BenchError> {
    Err(BenchError(message.into()))
}

/// The model and workloads of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchShape {
    /// The embedded default's model (`QwenConfig::tiny_char`, about 0.8M parameters): prefill
    /// 8×256, decode 64 rows × 32 steps after 32 tokens, train 32×200.
    Tiny,
    /// Qwen3-0.6B's shape with random weights: prefill 4×512, decode 64 rows × 32 steps after
    /// 128 tokens, train 8×512.
    Qwen3_0_6b,
}

impl BenchShape {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BenchShape::Tiny => "tiny",
            BenchShape::Qwen3_0_6b => "qwen3-0.6b",
        }
    }

    fn config_and_shapes(self) -> (QwenConfig, Shapes) {
        match self {
            BenchShape::Tiny => (
                QwenConfig::tiny_char(),
                Shapes {
                    prefill: [8, 256],
                    decode: [64, 32, 32],
                    train: [32, 200],
                },
            ),
            BenchShape::Qwen3_0_6b => (
                QwenConfig::qwen3_0_6b(),
                Shapes {
                    prefill: [4, 512],
                    decode: [64, 128, 32],
                    train: [8, 512],
                },
            ),
        }
    }
}

impl FromStr for BenchShape {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tiny" => Ok(BenchShape::Tiny),
            "qwen3-0.6b" => Ok(BenchShape::Qwen3_0_6b),
            other => Err(format!("`{other}`: expected `tiny` or `qwen3-0.6b`")),
        }
    }
}

/// A training batch `BxT` (`8x1024`): B ≥ 1 rows of T ≥ 2 tokens.
///
/// # Errors
/// Anything else, in words.
pub fn parse_train_batch(s: &str) -> Result<[usize; 2], String> {
    parse_dims(s, [1, 2])
        .ok_or_else(|| format!("`{s}`: expected BxT with B ≥ 1 and T ≥ 2, e.g. 8x1024"))
}

/// A decoding workload `RxPxS` (`64x32x32`): R ≥ 1 rows, each a P ≥ 1-token prompt then S ≥ 1
/// decoding steps.
///
/// # Errors
/// Anything else, in words.
pub fn parse_decode(s: &str) -> Result<[usize; 3], String> {
    parse_dims(s, [1, 1, 1]).ok_or_else(|| {
        format!(
            "`{s}`: expected RxPxS (rows, prompt tokens, decoding steps, each ≥ 1), e.g. 64x32x32"
        )
    })
}

/// `N` whole numbers joined by `x`, each at least its `min`.
fn parse_dims<const N: usize>(s: &str, min: [usize; N]) -> Option<[usize; N]> {
    let parts: Vec<usize> = s
        .split('x')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let dims: [usize; N] = parts.try_into().ok()?;
    dims.iter().zip(min).all(|(&d, m)| d >= m).then_some(dims)
}

/// What one run measures, and against what.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The model and workloads.
    pub shape: BenchShape,
    /// The backend's name, as printed (`flex`, `wgpu`, `cuda`, `tch`); anything but `flex` is a
    /// GPU run (the peer on CUDA, one thread count, peak memory, the FLOP/s check).
    pub backend: String,
    /// Compute precision, ours ([`Qwen::with_precision`]) and the peer's (`torch.autocast`),
    /// both over f32 weights.
    pub precision: Precision,
    /// Timed repetitions of each workload (after one warm-up); the median is reported.
    pub reps: usize,
    /// Rounds, alternating the peer and ours, each side keeping its best per workload (default
    /// 2 on the CPU, 1 on a GPU); with no peer, one.
    pub rounds: Option<usize>,
    /// Another training batch `[B, T]` than the shape's.
    pub train: Option<[usize; 2]>,
    /// Another decoding workload `[rows, prompt, steps]` than the shape's.
    pub decode: Option<[usize; 3]>,
    /// Another vocabulary size than the shape's.
    pub vocab: Option<usize>,
    /// The same-weights check's largest allowed |logits difference| (default 1e-2 in f32, 0.25
    /// in bf16).
    pub check_tol: Option<f64>,
    /// The GPU's matmul peak in TFLOP/s that no figure may exceed (default 495 in f32, 990 in
    /// bf16: an H200's dense TF32 and bf16 rates).
    pub peak_tflops: Option<f64>,
}

impl Default for BenchOptions {
    /// The tiny shape on flex in f32, 5 repetitions.
    fn default() -> Self {
        BenchOptions {
            shape: BenchShape::Tiny,
            backend: "flex".into(),
            precision: Precision::F32,
            reps: 5,
            rounds: None,
            train: None,
            decode: None,
            vocab: None,
            check_tol: None,
            peak_tflops: None,
        }
    }
}

/// The workloads: prefill `[batch, tokens]`, decode `[rows, prompt, steps]`, train `[batch, tokens]`.
struct Shapes {
    prefill: [usize; 2],
    decode: [usize; 3],
    train: [usize; 2],
}

impl Shapes {
    /// Tokens each workload processes: all prefill positions, one per decode row and step, the
    /// scored next-token positions of the training batch.
    fn tokens(&self) -> [f64; 3] {
        [
            (self.prefill[0] * self.prefill[1]) as f64,
            (self.decode[0] * self.decode[2]) as f64,
            (self.train[0] * (self.train[1] - 1)) as f64,
        ]
    }
}

/// The workloads, in the peer's keys (`prefill_s`, `prefill_threads`, `prefill_peak_mib`, …).
const KEYS: [&str; 3] = ["prefill", "decode", "train"];

/// The peer's figures for one workload.
#[derive(Debug, Clone)]
struct Theirs {
    /// Tokens/s.
    rate: f64,
    /// The thread count that gave it (CPU).
    threads: u64,
    /// Its peak MiB (GPU).
    peak_mib: Option<f64>,
}

/// The PyTorch side of the bench: `xtask/bench/policy_peer.py` run by a Python with torch (the
/// `rstar` binary's `rstar bench policy` spawns it; this crate starts no process). Given the
/// directory the model was saved to ([`save_dir`], f32) and the workloads as JSON
/// (`{"threads", "reps", "prefill": [b, t], "decode": [rows, prompt, steps], "train": [b, t],
/// "check_ids": [..], "device": "cpu"|"cuda", "precision": "f32"|"bf16"}`), it answers
/// `{"torch": version, "check_logits": [..], "prefill_s", "decode_s", "train_s",
/// "<workload>_threads", "<workload>_peak_mib", "cpu_capability"}` (the last on the CPU only),
/// or why it could not run.
pub trait Peer: Send {
    /// One run of every workload on the weights in `weights`.
    ///
    /// # Errors
    /// Why the peer did not run (a missing Python or torch, a failed script): the bench then
    /// reports ours alone.
    fn run(
        &mut self,
        weights: &Path,
        spec: &serde_json::Value,
    ) -> Result<serde_json::Value, String>;
}

/// A device's memory in use, sampled while a workload runs (on NVIDIA GPUs the binary reads
/// `nvidia-smi`).
pub trait MemoryProbe: Send {
    /// A workload starts: the peak restarts from the level now.
    fn start(&mut self);
    /// MiB above the level at [`MemoryProbe::start`] (memory pools keep what they took, so this
    /// is what the workload needed on top of what was already held).
    fn peak_mib(&self) -> u64;
}

/// Our throughput and the peer's for one workload.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    /// `prefill`, `decode` or `train`.
    pub workload: &'static str,
    /// Our tokens/s (the faster of 1 and N threads on flex).
    pub ours: f64,
    /// The rayon threads that gave `ours`.
    pub our_threads: usize,
    /// The peer's tokens/s, when it ran.
    pub theirs: Option<f64>,
    /// On a GPU, our peak MiB above the level before the workload.
    pub our_peak_mib: Option<u64>,
}

/// A run's figures (also printed by [`run`]).
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// Prefill, decode and train, in that order.
    pub rows: Vec<BenchRow>,
    /// The peer's torch version, when it ran.
    pub torch: Option<String>,
    /// The instruction set the peer's CPU kernels ran with (`AVX512`, `AVX2`, ...: torch's
    /// `get_cpu_capability()`), when it ran on the CPU.
    pub peer_cpu: Option<String>,
}

fn ids(rng: &mut ChaCha8Rng, b: usize, t: usize, vocab: usize, device: &Device) -> Tensor<2, Int> {
    let data: Vec<i64> = (0..b * t)
        .map(|_| rng.random_range(0..vocab as i64))
        .collect();
    Tensor::from_data(TensorData::new(data, [b, t]), device)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Waits for everything queued on `device`: before every clock read.
fn sync(device: &Device) {
    device.sync().expect("the device runs what was queued");
}

fn time_median(reps: usize, device: &Device, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    median(
        (0..reps)
            .map(|_| {
                sync(device);
                let start = Instant::now();
                f();
                sync(device);
                start.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// Matmul FLOPs of a forward pass over `batch × seq` positions (projections, MLP, output
/// head; attention scores and values over the causal half): a lower bound on its work.
fn forward_flops(c: &QwenConfig, batch: usize, seq: usize) -> f64 {
    let (d, hd) = (c.hidden_size as f64, c.head_dim as f64);
    let (h, kvh) = (c.num_attention_heads as f64, c.num_key_value_heads as f64);
    let per_token_layer = d * hd * (2.0 * h + 2.0 * kvh) + 3.0 * d * c.intermediate_size as f64;
    let tokens = (batch * seq) as f64;
    let linear =
        2.0 * tokens * (per_token_layer * c.num_hidden_layers as f64 + d * c.vocab_size as f64);
    // q·kᵀ and p·v over the causal half: 2 · 2 · b · h · hd · s²/2.
    let attention =
        2.0 * (batch as f64) * h * hd * (seq as f64).powi(2) * c.num_hidden_layers as f64;
    linear + attention
}

/// Runs the bench on `device` (which `options.backend` names), printing as it goes.
///
/// # Errors
/// The same-weights check failed, a GPU figure is above the hardware's peak, or the model
/// could not be built. A peer that does not start is not an error: its column shows `-`.
pub fn run(
    options: &BenchOptions,
    device: &Device,
    peer: &mut dyn Peer,
    mut memory: Option<&mut dyn MemoryProbe>,
) -> Result<BenchReport, BenchError> {
    let BenchOptions {
        shape,
        ref backend,
        precision,
        reps,
        ..
    } = *options;
    let reps = reps.max(1);
    let backend_name = backend.as_str();
    let shape_name = shape.name();
    let gpu = backend_name != "flex";
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let device = device.clone();
    let tokenizer = Tokenizer::char();
    let (mut config, mut shapes) = shape.config_and_shapes();
    if let Some(train) = options.train {
        shapes.train = train;
    }
    if let Some(decode) = options.decode {
        shapes.decode = decode;
    }
    if let Some(v) = options.vocab {
        config.vocab_size = v;
    }
    let model = Qwen::random(config.clone(), 0, &device)
        .map_err(|e| BenchError(format!("the model does not build: {e}")))?
        .with_precision(precision);
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    // The CPU and the instruction sets the fused kernels run with (issue #72); flex's GEMM
    // picks AVX-512 at run time on its own (gemm's `x86-v4`).
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    println!(
        "cpu: {cpu_model}; fused kernels: {} (detected {})",
        crate::cpu::level().name(),
        crate::cpu::detected().name()
    );
    println!(
        "policy bench: {shape_name} ({} params, vocab {}), {backend_name}, {precision}, {}, median of {reps}",
        config.num_params(),
        config.vocab_size,
        if gpu {
            "against PyTorch on CUDA".to_string()
        } else {
            format!("{threads} cores")
        }
    );

    // The weights the peer loads, and the workloads it runs.
    let dir = tempfile::tempdir()
        .map_err(|e| BenchError(format!("a temporary directory for the weights: {e}")))?;
    save_dir(&model, &tokenizer, dir.path(), WeightDtype::F32)
        .map_err(|e| BenchError(format!("saving the weights for the peer: {e}")))?;
    let check_ids = tokenizer
        .encode("<|im_start|>user\nprint(2**10)<|im_end|>")
        .map_err(|e| BenchError(format!("encoding the check prompt: {e}")))?;
    let spec = serde_json::json!({
        "threads": threads, "reps": reps, "prefill": shapes.prefill, "decode": shapes.decode,
        "train": shapes.train, "check_ids": check_ids, "device": if gpu { "cuda" } else { "cpu" },
        "precision": precision.name(),
    });
    let rounds = options.rounds.unwrap_or(if gpu { 1 } else { 2 }).max(1);
    // On flex each workload runs in a 1-thread and an N-thread rayon pool and keeps the
    // faster, as the peer does with its thread count: on a shared machine the extra thread
    // can cost more than it brings. A GPU backend runs once.
    let pools = if gpu || threads == 1 {
        vec![1]
    } else {
        vec![1, threads]
    };
    let mut best = [(0.0f64, 0usize); 3];
    let mut peaks = [None; 3];
    let mut theirs: Option<[Theirs; 3]> = None;
    let mut torch = None;
    let mut peer_cpu = None;
    // Rounds alternate the two sides (the peer, then ours), and each side keeps its best
    // round per workload: load from elsewhere on a shared machine only ever slows a side down,
    // and alternating gives both the same chances of a quiet moment.
    for round in 0..rounds {
        // The PyTorch peer on the same weights, first: its check logits decide whether our
        // figures mean anything before any of them is taken.
        let answer = peer.run(dir.path(), &spec).map_err(|why| {
            println!("peer unavailable: {why}");
        });
        if let Ok(p) = answer {
            if round == 0 {
                check_same_weights(
                    &model,
                    &check_ids,
                    &p,
                    precision,
                    options.check_tol,
                    &device,
                )?;
            }
            torch = p["torch"].as_str().map(str::to_string);
            peer_cpu = p["cpu_capability"].as_str().map(str::to_string);
            let tokens = shapes.tokens();
            let now = [0, 1, 2].map(|i| {
                let k = KEYS[i];
                Theirs {
                    rate: tokens[i] / p[format!("{k}_s")].as_f64().unwrap_or(f64::NAN),
                    threads: p[format!("{k}_threads")].as_u64().unwrap_or(0),
                    peak_mib: p[format!("{k}_peak_mib")].as_f64(),
                }
            });
            theirs = Some(match theirs {
                None => now,
                Some(old) => [0, 1, 2].map(|i| {
                    if now[i].rate > old[i].rate {
                        now[i].clone()
                    } else {
                        old[i].clone()
                    }
                }),
            });
        }
        for &n in &pools {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .map_err(|e| BenchError(format!("a rayon pool of {n} threads: {e}")))?;
            let (rates, mib) = pool.install(|| {
                measure(
                    &model,
                    &config,
                    &shapes,
                    reps,
                    &mut rng,
                    &device,
                    memory.as_mut().map(|m| &mut **m as &mut dyn MemoryProbe),
                )
            });
            for (b, r) in best.iter_mut().zip(rates) {
                if r > b.0 {
                    *b = (r, n);
                }
            }
            peaks = mib;
        }
        if theirs.is_none() {
            break;
        }
    }
    if gpu {
        check_possible(
            &config,
            &shapes,
            best.map(|b| b.0),
            precision,
            options.peak_tflops,
        )?;
    }
    let ours = [
        ("prefill tok/s", best[0]),
        ("decode tok/s", best[1]),
        ("train tok/s", best[2]),
    ];

    println!(
        "{:<16} {:>14} {:>14} {:>10}{}",
        "metric",
        format!("rstar ({backend_name})"),
        if gpu { "pytorch (cuda)" } else { "pytorch" },
        "ratio",
        if gpu {
            "  peak MiB: rstar / pytorch"
        } else {
            ""
        }
    );
    let keys = KEYS;
    for (i, &(name, (value, n))) in ours.iter().enumerate() {
        let mine = if gpu {
            format!("{value:.0}")
        } else {
            format!("{value:.0} ({n}t)")
        };
        let memory = if gpu {
            let theirs = theirs
                .as_ref()
                .and_then(|t| t[i].peak_mib)
                .map_or("-".to_string(), |m| format!("{m:.0}"));
            let ours = peaks[i].map_or("-".to_string(), |m: u64| m.to_string());
            format!("  {ours} / {theirs}")
        } else {
            String::new()
        };
        match &theirs {
            Some(t) => {
                let cell = if gpu {
                    format!("{:.0}", t[i].rate)
                } else {
                    format!("{:.0} ({}t)", t[i].rate, t[i].threads)
                };
                println!(
                    "{name:<16} {mine:>14} {cell:>14} {:>9.2}x{memory}",
                    value / t[i].rate
                )
            }
            None => println!("{name:<16} {mine:>14} {:>14} {:>10}{memory}", "-", "-"),
        }
    }
    println!(
        "shapes: prefill {}x{}, decode {} rows x {} steps after a {}-token prompt, train {}x{} fwd+bwd; ratio = rstar / pytorch throughput; {}",
        shapes.prefill[0],
        shapes.prefill[1],
        shapes.decode[0],
        shapes.decode[2],
        shapes.decode[1],
        shapes.train[0],
        shapes.train[1],
        if gpu {
            format!("both on the GPU, {precision} compute over f32 weights")
        } else {
            format!("each side: the faster of 1 and {threads} threads (Nt)")
        }
    );
    if theirs.is_some() && rounds > 1 {
        println!("each side: its best of {rounds} alternating rounds, each the median of {reps}");
    }
    let rows = keys
        .iter()
        .enumerate()
        .map(|(i, &workload)| BenchRow {
            workload,
            ours: best[i].0,
            our_threads: best[i].1,
            theirs: theirs.as_ref().map(|t| t[i].rate),
            our_peak_mib: peaks[i],
        })
        .collect();
    Ok(BenchReport {
        rows,
        torch,
        peer_cpu,
    })
}

/// Our logits against the peer's on the check prompt, before anything is timed: a bench of
/// two different models measures nothing, so a gap above `check_tol` fails it.
fn check_same_weights(
    model: &Qwen,
    check_ids: &[u32],
    peer: &serde_json::Value,
    precision: Precision,
    check_tol: Option<f64>,
    device: &Device,
) -> Result<(), BenchError> {
    let ids: Vec<i64> = check_ids.iter().map(|&x| i64::from(x)).collect();
    let n = ids.len();
    let x = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, n]), device);
    let ours: Vec<f32> = model
        .forward(x)
        .try_into_vec_as::<f32>()
        .map_err(|e| BenchError(format!("reading the check logits back: {e:?}")))?;
    let theirs: Vec<f32> = peer["check_logits"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_f64().unwrap_or(f64::NAN) as f32)
                .collect()
        })
        .unwrap_or_default();
    // The peer sends every position's logits, or only the last position's for a large
    // vocabulary: compare the same tail. A NaN is a failed check, not a small difference.
    let tail = &ours[ours.len().saturating_sub(theirs.len())..];
    let diff = tail
        .iter()
        .zip(&theirs)
        .map(|(a, b)| (a - b).abs())
        .fold(
            0.0f32,
            |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
        );
    let tolerance = check_tol.unwrap_or(match precision {
        Precision::F32 => 1e-2,
        Precision::Bf16 => 0.25,
    }) as f32;
    println!(
        "peer: torch {}{}; same weights check: max |logits diff| = {diff:.2e} over {} values (tolerance {tolerance:.0e})",
        peer["torch"].as_str().unwrap_or("?"),
        peer["cpu_capability"]
            .as_str()
            .map_or_else(String::new, |c| format!(" (CPU kernels: {c})")),
        theirs.len()
    );
    if theirs.is_empty() || diff > tolerance {
        return fail(format!(
            "the same-weights check failed (max |logits diff| {diff:.2e} > {tolerance:.0e} over {} values): the two sides do not run the same model, so no figure is taken",
            theirs.len()
        ));
    }
    Ok(())
}

/// Fails the bench when a throughput implies more matmul FLOP/s than the GPU has: an
/// unsynchronised clock or skipped work, not a fast kernel.
fn check_possible(
    config: &QwenConfig,
    shapes: &Shapes,
    rates: [f64; 3],
    precision: Precision,
    peak_tflops: Option<f64>,
) -> Result<(), BenchError> {
    let peak = peak_tflops.unwrap_or(match precision {
        Precision::F32 => 495.0,
        Precision::Bf16 => 990.0,
    }) * 1e12;
    let tokens = shapes.tokens();
    let [pb, pt] = shapes.prefill;
    let [tb, tt] = shapes.train;
    // Seconds each workload took, and the least FLOPs it must have done (a training step is a
    // forward and a backward of twice its FLOPs).
    let checks = [
        (
            "prefill",
            tokens[0] / rates[0],
            forward_flops(config, pb, pt),
        ),
        (
            "train",
            tokens[2] / rates[2],
            3.0 * forward_flops(config, tb, tt - 1),
        ),
    ];
    for (name, seconds, flops) in checks {
        let rate = flops / seconds;
        if rate > peak {
            return fail(format!(
                "{name}: {:.0} TFLOP/s is above the GPU's {:.0} (the peak TFLOP/s option): the figure cannot be right",
                rate / 1e12,
                peak / 1e12
            ));
        }
        println!(
            "{name}: {:.1} TFLOP/s of matmuls ({:.1}% of {:.0})",
            rate / 1e12,
            100.0 * rate / peak,
            peak / 1e12
        );
    }
    Ok(())
}

/// Prefill, decode and training throughputs (tokens/s) in the current rayon pool, and on a GPU
/// each workload's peak memory (MiB above the level before it).
fn measure(
    model: &Qwen,
    config: &QwenConfig,
    shapes: &Shapes,
    reps: usize,
    rng: &mut ChaCha8Rng,
    device: &Device,
    mut memory: Option<&mut dyn MemoryProbe>,
) -> ([f64; 3], [Option<u64>; 3]) {
    let vocab = config.vocab_size;
    let mut peaks = [None; 3];
    let start_memory = |memory: &mut Option<&mut dyn MemoryProbe>| {
        if let Some(m) = memory.as_deref_mut() {
            m.start();
        }
    };
    // Prefill: logits for every position.
    let [b, t] = shapes.prefill;
    let x = ids(rng, b, t, vocab, device);
    start_memory(&mut memory);
    let prefill_s = time_median(reps, device, || {
        let logits = model.forward(x.clone());
        let _ = logits.into_data();
    });
    peaks[0] = memory.as_deref().map(|m| m.peak_mib());

    // Decode: one token per row per step through the KV cache, logits to the host.
    let [b, p, steps] = shapes.decode;
    let prompt = ids(rng, b, p, vocab, device);
    let pads = vec![0; b];
    let mut decode_times = Vec::new();
    start_memory(&mut memory);
    for rep in 0..=reps {
        let mut cache = KvCache::new(config.num_hidden_layers);
        let _ = model
            .forward_hidden(prompt.clone(), &pads, Some(&mut cache))
            .into_data();
        let mut next = ids(rng, b, 1, vocab, device);
        sync(device);
        let start = Instant::now();
        for _ in 0..steps {
            let hidden = model.forward_hidden(next, &pads, Some(&mut cache));
            let logits: Vec<f32> = model
                .logits(hidden)
                .try_into_vec_as::<f32>()
                .expect("readback");
            let chosen: Vec<i64> = logits
                .chunks(vocab)
                .map(|row| {
                    let mut best = 0;
                    for (i, &l) in row.iter().enumerate() {
                        if l > row[best] {
                            best = i;
                        }
                    }
                    best as i64
                })
                .collect();
            next = Tensor::from_data(TensorData::new(chosen, [b, 1]), device);
        }
        sync(device);
        if rep > 0 {
            decode_times.push(start.elapsed().as_secs_f64());
        }
    }
    let decode_s = median(decode_times);
    peaks[1] = memory.as_deref().map(|m| m.peak_mib());

    // Training step: forward + backward of the masked next-token NLL, as SFT computes it
    // (`sequence_nll`: memory bounded in the vocabulary).
    let [tb, tt] = shapes.train;
    let ad = device.clone().autodiff();
    let train_model = Qwen::random(config.clone(), 0, &ad)
        .expect("the model built on this device already")
        .with_precision(model.precision);
    let train_ids = ids(rng, tb, tt, vocab, &ad);
    let mask = Tensor::<2>::ones([tb, tt - 1], &ad);
    start_memory(&mut memory);
    let train_s = time_median(reps, device, || {
        let loss = sequence_nll(&train_model, train_ids.clone(), mask.clone());
        let grads = loss.backward();
        let _ = train_model
            .embed_tokens
            .val()
            .grad(&grads)
            .expect("gradient")
            .into_data();
    });
    peaks[2] = memory.as_deref().map(|m| m.peak_mib());

    let tokens = shapes.tokens();
    (
        [
            tokens[0] / prefill_s,
            tokens[1] / decode_s,
            tokens[2] / train_s,
        ],
        peaks,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_batches_parse_or_say_why() {
        assert_eq!("tiny".parse::<BenchShape>(), Ok(BenchShape::Tiny));
        assert_eq!(
            "qwen3-0.6b".parse::<BenchShape>(),
            Ok(BenchShape::Qwen3_0_6b)
        );
        for shape in [BenchShape::Tiny, BenchShape::Qwen3_0_6b] {
            assert_eq!(shape.name().parse::<BenchShape>(), Ok(shape));
        }
        assert!("big".parse::<BenchShape>().unwrap_err().contains("`tiny`"));
        assert_eq!(parse_decode("64x32x32"), Ok([64, 32, 32]));
        assert_eq!(parse_decode("1x1x1"), Ok([1, 1, 1]));
        for bad in [
            "",
            "64x32",
            "64x32x32x1",
            "0x32x32",
            "64x0x32",
            "64x32x0",
            "ax1x1",
            "64x-1x3",
        ] {
            let err = parse_decode(bad).unwrap_err();
            assert!(err.contains("RxPxS"), "{bad}: {err}");
        }
        assert_eq!(parse_train_batch("8x1024"), Ok([8, 1024]));
        assert_eq!(parse_train_batch("1x2"), Ok([1, 2]));
        for bad in ["0x16", "4x1", "8", "8x", "x8", "8x8x8", "-1x4", "8 x 8"] {
            let err = parse_train_batch(bad).unwrap_err();
            assert!(err.contains("expected BxT"), "{bad}: {err}");
        }
    }

    /// A peer that reads the weights back and answers with their check logits (the same
    /// model, so the check passes) and the given seconds per workload, one set per call.
    struct RustPeer {
        seconds: Vec<[f64; 3]>,
        calls: usize,
        /// Added to every check logit: a peer on other weights.
        offset: f32,
    }

    impl Peer for RustPeer {
        fn run(
            &mut self,
            weights: &Path,
            spec: &serde_json::Value,
        ) -> Result<serde_json::Value, String> {
            let model = crate::load_model(weights, &Device::flex()).map_err(|e| e.to_string())?;
            let ids: Vec<i64> = spec["check_ids"]
                .as_array()
                .ok_or("no check_ids")?
                .iter()
                .map(|v| v.as_i64().unwrap_or(0))
                .collect();
            let n = ids.len();
            let x = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, n]), &Device::flex());
            let logits: Vec<f32> = model
                .forward(x)
                .try_into_vec_as::<f32>()
                .map_err(|e| format!("{e:?}"))?;
            let [p, d, t] = self.seconds[self.calls.min(self.seconds.len() - 1)];
            self.calls += 1;
            Ok(serde_json::json!({
                "torch": "fake",
                "cpu_capability": "AVX2",
                "check_logits": logits.iter().map(|l| l + self.offset).collect::<Vec<_>>(),
                "prefill_s": p, "decode_s": d, "train_s": t,
                "prefill_threads": 1, "decode_threads": 2, "train_threads": 1,
            }))
        }
    }

    /// A peer that never runs.
    struct NoPeer;

    impl Peer for NoPeer {
        fn run(&mut self, _: &Path, _: &serde_json::Value) -> Result<serde_json::Value, String> {
            Err("no python here".into())
        }
    }

    fn quick() -> BenchOptions {
        BenchOptions {
            reps: 1,
            train: Some([2, 8]),
            ..BenchOptions::default()
        }
    }

    #[test]
    fn a_peer_on_other_weights_fails_the_bench_before_any_timing() {
        let mut peer = RustPeer {
            seconds: vec![[1.0; 3]],
            calls: 0,
            offset: 0.5,
        };
        let err = run(&quick(), &Device::flex(), &mut peer, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("same-weights check failed"), "{err}");
        assert_eq!(peer.calls, 1, "no second round after a failed check");
        // Within the tolerance it passes; a looser one passes the offset too.
        peer.offset = 1e-3;
        assert!(run(&quick(), &Device::flex(), &mut peer, None).is_ok());
        peer.offset = 0.5;
        let loose = BenchOptions {
            check_tol: Some(0.6),
            ..quick()
        };
        assert!(run(&loose, &Device::flex(), &mut peer, None).is_ok());
    }

    #[test]
    fn each_side_keeps_its_best_of_the_alternating_rounds() {
        let mut peer = RustPeer {
            // Round 2 is faster at prefill, round 1 at decode and train.
            seconds: vec![[4.0, 2.0, 8.0], [2.0, 4.0, 16.0], [0.001; 3]],
            calls: 0,
            offset: 0.0,
        };
        let options = BenchOptions {
            rounds: Some(2),
            ..quick()
        };
        let report = run(&options, &Device::flex(), &mut peer, None).unwrap();
        assert_eq!(peer.calls, 2);
        assert_eq!(report.torch.as_deref(), Some("fake"));
        assert_eq!(report.peer_cpu.as_deref(), Some("AVX2"));
        // Tokens per workload: prefill 8·256, decode 64 rows · 32 steps, train 2·(8−1).
        let want = [8.0 * 256.0 / 2.0, 64.0 * 32.0 / 2.0, 2.0 * 7.0 / 8.0];
        for (row, want) in report.rows.iter().zip(want) {
            assert_eq!(row.theirs, Some(want), "{}", row.workload);
            assert!(row.ours > 0.0);
        }
    }

    #[test]
    fn without_a_peer_the_bench_still_measures_ours_once() {
        let options = BenchOptions {
            rounds: Some(3),
            ..quick()
        };
        let report = run(&options, &Device::flex(), &mut NoPeer, None).unwrap();
        assert_eq!(report.torch, None);
        assert_eq!(report.peer_cpu, None);
        let names: Vec<_> = report.rows.iter().map(|r| r.workload).collect();
        assert_eq!(names, ["prefill", "decode", "train"]);
        for row in &report.rows {
            assert!(row.ours.is_finite() && row.ours > 0.0, "{row:?}");
            assert_eq!(row.theirs, None);
            assert!(row.our_threads >= 1);
        }
    }
}
