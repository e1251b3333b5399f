//! `cargo xtask bench policy`: prefill and decode tokens/s and a training step
//! (forward + backward) of the embedded-default model on `flex`, side by side
//! with a PyTorch peer (`xtask/bench/policy_peer.py`) running the same
//! architecture and weights on the same CPU in the same run.
//!
//! `cargo xtask bench policy-gpu` (or `RSTAR_BENCH_BACKEND=wgpu|cuda|tch` with that feature)
//! runs the same workloads on a GPU against PyTorch on CUDA, and
//! `RSTAR_BENCH_SHAPE=qwen3-0.6b` switches to Qwen3-0.6B's shape with random weights and
//! larger workloads. Other knobs: `RSTAR_BENCH_PRECISION=f32|bf16` (ours:
//! `Qwen::with_precision`; the peer: `torch.autocast` to bf16, both over f32 weights),
//! `RSTAR_BENCH_VOCAB=N` (another vocabulary size), `RSTAR_BENCH_TRAIN=BxT` (the training
//! batch), `RSTAR_BENCH_REPS`.
//!
//! Trust: the device is synchronised before every clock read; the same-weights check (our
//! logits against the peer's on a check prompt) runs before anything is timed and fails the
//! bench when they differ by more than `RSTAR_BENCH_CHECK_TOL` (1e-2 in f32, 0.25 in bf16);
//! and on a GPU a prefill or training step faster than the hardware allows fails it too (its
//! matmul FLOPs over `RSTAR_BENCH_PEAK_TFLOPS`, by default 495 in f32, the H200's TF32
//! tensor-core rate and more than any f32 matmul gets, 990 in bf16). On a GPU the peak memory
//! of each workload is reported for both sides: ours from nvidia-smi's `memory.used` above the
//! level before the workload (sampled every 20 ms), the peer's from
//! `torch.cuda.max_memory_reserved`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use burn::tensor::{Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rstar_policy::{
    KvCache, Precision, Qwen, QwenConfig, Tokenizer, WeightDtype, save_dir, sequence_nll,
};

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

/// The model and workloads `RSTAR_BENCH_SHAPE` names.
fn shape(name: &str) -> (QwenConfig, Shapes) {
    match name {
        "tiny" => (
            QwenConfig::tiny_char(),
            Shapes {
                prefill: [8, 256],
                decode: [64, 32, 32],
                train: [32, 200],
            },
        ),
        "qwen3-0.6b" => (
            QwenConfig::qwen3_0_6b(),
            Shapes {
                prefill: [4, 512],
                decode: [64, 128, 32],
                train: [8, 512],
            },
        ),
        other => panic!("RSTAR_BENCH_SHAPE `{other}`: expected `tiny` or `qwen3-0.6b`"),
    }
}

/// The device `RSTAR_BENCH_BACKEND` names.
fn backend(name: &str) -> Device {
    match name {
        "flex" => Device::flex(),
        #[cfg(feature = "wgpu")]
        "wgpu" => Device::wgpu(burn::tensor::DeviceKind::DefaultDevice),
        #[cfg(feature = "cuda")]
        "cuda" => Device::cuda(0),
        #[cfg(feature = "tch")]
        #[allow(
            deprecated,
            reason = "burn-tch is deprecated in Burn 0.22, and measured here"
        )]
        "tch" => Device::libtorch_cuda(0),
        other => panic!(
            "RSTAR_BENCH_BACKEND `{other}`: expected `flex`{}{}{} (the others need their feature)",
            if cfg!(feature = "wgpu") {
                ", `wgpu`"
            } else {
                ""
            },
            if cfg!(feature = "cuda") {
                ", `cuda`"
            } else {
                ""
            },
            if cfg!(feature = "tch") { ", `tch`" } else { "" },
        ),
    }
}

/// Peak GPU memory: `nvidia-smi --query-gpu=memory.used -lms 20` in the background, its
/// largest reading since the last [`GpuMemory::start`]. `None` without nvidia-smi.
struct GpuMemory {
    current: Arc<AtomicU64>,
    peak: Arc<AtomicU64>,
    base: u64,
    child: std::process::Child,
}

impl GpuMemory {
    fn spawn() -> Option<Self> {
        let mut child = Command::new("nvidia-smi")
            .args([
                "--query-gpu=memory.used",
                "--format=csv,noheader,nounits",
                "-i",
                "0",
                "-lms",
                "20",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let stdout = child.stdout.take()?;
        let (current, peak) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (c, p) = (current.clone(), peak.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(mib) = line.trim().parse::<u64>() {
                    c.store(mib, Ordering::Relaxed);
                    p.fetch_max(mib, Ordering::Relaxed);
                }
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        Some(Self {
            current,
            peak,
            base: 0,
            child,
        })
    }

    /// Starts a workload: the peak restarts from the current level.
    fn start(&mut self) {
        std::thread::sleep(std::time::Duration::from_millis(60));
        self.base = self.current.load(Ordering::Relaxed);
        self.peak.store(self.base, Ordering::Relaxed);
    }

    /// MiB above the level at [`GpuMemory::start`] (memory pools keep what they took, so this
    /// is what the workload needed on top of what was already held).
    fn peak_mib(&self) -> u64 {
        std::thread::sleep(std::time::Duration::from_millis(60));
        self.peak.load(Ordering::Relaxed).saturating_sub(self.base)
    }
}

impl Drop for GpuMemory {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Fails the bench: a figure that cannot be trusted is not printed as one.
fn fail(message: &str) -> ! {
    eprintln!("policy bench: {message}");
    std::process::exit(1);
}

fn main() {
    // As the `rstar` binary does (rstar_policy::alloc); RSTAR_BENCH_MALLOC=default measures without it.
    if std::env::var("RSTAR_BENCH_MALLOC").as_deref() != Ok("default") {
        rstar_policy::keep_freed_memory();
    }
    let reps: usize = std::env::var("RSTAR_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let backend_name = std::env::var("RSTAR_BENCH_BACKEND").unwrap_or_else(|_| "flex".into());
    let shape_name = std::env::var("RSTAR_BENCH_SHAPE").unwrap_or_else(|_| "tiny".into());
    let precision: Precision = std::env::var("RSTAR_BENCH_PRECISION")
        .unwrap_or_else(|_| "f32".into())
        .parse()
        .unwrap_or_else(|e: String| fail(&format!("RSTAR_BENCH_PRECISION: {e}")));
    let gpu = backend_name != "flex";
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let device = backend(&backend_name);
    let tokenizer = Tokenizer::char();
    let (mut config, mut shapes) = shape(&shape_name);
    if let Ok(bt) = std::env::var("RSTAR_BENCH_TRAIN") {
        let parts: Vec<usize> = bt.split('x').filter_map(|x| x.parse().ok()).collect();
        if parts.len() != 2 || parts[0] == 0 || parts[1] < 2 {
            fail(&format!(
                "RSTAR_BENCH_TRAIN `{bt}`: expected BxT with B ≥ 1 and T ≥ 2, e.g. 8x1024"
            ));
        }
        shapes.train = [parts[0], parts[1]];
    }
    if let Some(v) = std::env::var("RSTAR_BENCH_VOCAB")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        config.vocab_size = v;
    }
    let model = Qwen::random(config.clone(), 0, &device)
        .expect("model builds")
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
        rstar_policy::cpu::level().name(),
        rstar_policy::cpu::detected().name()
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

    // The PyTorch peer on the same weights, first: its check logits decide whether our figures
    // mean anything before any of them is taken.
    let dir = tempfile::tempdir().expect("temp dir");
    save_dir(&model, &tokenizer, dir.path(), WeightDtype::F32).expect("checkpoint saves");
    let check_ids = tokenizer
        .encode("<|im_start|>user\nprint(2**10)<|im_end|>")
        .expect("encodes");
    let spec = serde_json::json!({
        "threads": threads, "reps": reps, "prefill": shapes.prefill, "decode": shapes.decode,
        "train": shapes.train, "check_ids": check_ids, "device": if gpu { "cuda" } else { "cpu" },
        "precision": precision.name(),
    });
    let python = std::env::var_os("RSTAR_PYTHON").map_or_else(rstar_testdata::python, Into::into);
    // RSTAR_BENCH_PEER: the peer script, for a prebuilt bench run away from its checkout.
    let script = std::env::var_os("RSTAR_BENCH_PEER").map_or_else(
        || rstar_testdata::workspace_root().join("xtask/bench/policy_peer.py"),
        Into::into,
    );
    let peer = Command::new(&python)
        .arg(&script)
        .arg(dir.path())
        .arg(spec.to_string())
        .output();
    let peer: Option<serde_json::Value> = match peer {
        Ok(out) if out.status.success() => serde_json::from_slice(&out.stdout).ok(),
        Ok(out) => {
            println!(
                "peer unavailable ({}): {}",
                python.display(),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            None
        }
        Err(e) => {
            println!("peer unavailable ({}): {e}", python.display());
            None
        }
    };
    if let Some(p) = &peer {
        check_same_weights(&model, &check_ids, p, precision, &device);
    }

    // On flex each workload runs in a 1-thread and an N-thread rayon pool and keeps the
    // faster, as the peer does with its thread count: on a shared machine the extra thread
    // can cost more than it brings. A GPU backend runs once.
    let pools = if gpu || threads == 1 {
        vec![1]
    } else {
        vec![1, threads]
    };
    let mut memory = if gpu { GpuMemory::spawn() } else { None };
    let mut best = [(0.0f64, 0usize); 3];
    let mut peaks = [None; 3];
    for n in pools {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .expect("rayon pool");
        let (rates, mib) = pool.install(|| {
            measure(
                &model,
                &config,
                &shapes,
                reps,
                &mut rng,
                &device,
                memory.as_mut(),
            )
        });
        for (b, r) in best.iter_mut().zip(rates) {
            if r > b.0 {
                *b = (r, n);
            }
        }
        peaks = mib;
    }
    drop(memory);
    if gpu {
        check_possible(&config, &shapes, best.map(|b| b.0), precision);
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
    let theirs = peer.as_ref().map(|p| {
        let seconds =
            ["prefill_s", "decode_s", "train_s"].map(|k| p[k].as_f64().unwrap_or(f64::NAN));
        let tokens = shapes.tokens();
        [0, 1, 2].map(|i| tokens[i] / seconds[i])
    });
    let keys = ["prefill", "decode", "train"];
    for (i, &(name, (value, n))) in ours.iter().enumerate() {
        let mine = if gpu {
            format!("{value:.0}")
        } else {
            format!("{value:.0} ({n}t)")
        };
        let memory = if gpu {
            let theirs = peer
                .as_ref()
                .and_then(|p| p[format!("{}_peak_mib", keys[i])].as_f64())
                .map_or("-".to_string(), |m| format!("{m:.0}"));
            let ours = peaks[i].map_or("-".to_string(), |m: u64| m.to_string());
            format!("  {ours} / {theirs}")
        } else {
            String::new()
        };
        match theirs {
            Some(t) => {
                let threads = peer.as_ref().map_or(0, |p| {
                    p[format!("{}_threads", keys[i])].as_u64().unwrap_or(0)
                });
                let cell = if gpu {
                    format!("{:.0}", t[i])
                } else {
                    format!("{:.0} ({threads}t)", t[i])
                };
                println!(
                    "{name:<16} {mine:>14} {cell:>14} {:>9.2}x{memory}",
                    value / t[i]
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
}

/// Our logits against the peer's on the check prompt, before anything is timed: a bench of
/// two different models measures nothing, so a gap above `RSTAR_BENCH_CHECK_TOL` fails it.
fn check_same_weights(
    model: &Qwen,
    check_ids: &[u32],
    peer: &serde_json::Value,
    precision: Precision,
    device: &Device,
) {
    let ids: Vec<i64> = check_ids.iter().map(|&x| i64::from(x)).collect();
    let n = ids.len();
    let x = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, n]), device);
    let ours: Vec<f32> = model.forward(x).try_into_vec_as::<f32>().expect("readback");
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
    let tolerance = env_f64(
        "RSTAR_BENCH_CHECK_TOL",
        match precision {
            Precision::F32 => 1e-2,
            Precision::Bf16 => 0.25,
        },
    ) as f32;
    println!(
        "peer: torch {}; same weights check: max |logits diff| = {diff:.2e} over {} values (tolerance {tolerance:.0e})",
        peer["torch"].as_str().unwrap_or("?"),
        theirs.len()
    );
    if theirs.is_empty() || diff > tolerance {
        fail(&format!(
            "the same-weights check failed (max |logits diff| {diff:.2e} > {tolerance:.0e} over {} values): the two sides do not run the same model, so no figure is taken",
            theirs.len()
        ));
    }
}

/// Fails the bench when a throughput implies more matmul FLOP/s than the GPU has: an
/// unsynchronised clock or skipped work, not a fast kernel.
fn check_possible(config: &QwenConfig, shapes: &Shapes, rates: [f64; 3], precision: Precision) {
    let peak = env_f64(
        "RSTAR_BENCH_PEAK_TFLOPS",
        match precision {
            Precision::F32 => 495.0,
            Precision::Bf16 => 990.0,
        },
    ) * 1e12;
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
            fail(&format!(
                "{name}: {:.0} TFLOP/s is above the GPU's {:.0} (RSTAR_BENCH_PEAK_TFLOPS): the figure cannot be right",
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
    mut memory: Option<&mut GpuMemory>,
) -> ([f64; 3], [Option<u64>; 3]) {
    let vocab = config.vocab_size;
    let mut peaks = [None; 3];
    let start_memory = |memory: &mut Option<&mut GpuMemory>| {
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
    peaks[0] = memory.as_deref().map(GpuMemory::peak_mib);

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
    peaks[1] = memory.as_deref().map(GpuMemory::peak_mib);

    // Training step: forward + backward of the masked next-token NLL, as SFT computes it
    // (`sequence_nll`: memory bounded in the vocabulary).
    let [tb, tt] = shapes.train;
    let ad = device.clone().autodiff();
    let train_model = Qwen::random(config.clone(), 0, &ad)
        .expect("model builds")
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
    peaks[2] = memory.as_deref().map(GpuMemory::peak_mib);

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
