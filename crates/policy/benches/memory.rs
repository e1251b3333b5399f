//! `cargo xtask bench memory`: the peak heap of one training step (forward, backward and an
//! AdamW step) of a random Qwen3-0.6B-shaped model on `flex`, for full fine-tuning in f32, LoRA
//! over an f32 base, LoRA over a bf16 base ([`Qwen::with_base_precision`]), and LoRA over a bf16
//! base with each layer recomputed in the backward pass ([`Qwen::with_gradient_checkpointing`])
//! or under Burn's gradient checkpointing; each configuration's peak and its ratio to full
//! fine-tuning (`N.N× below full`), and the per-parameter and per-token costs that
//! `docs/policy.md`'s projection table is computed from.
//!
//! Trust: the CPU backend allocates every tensor on the Rust heap, so a counting global
//! allocator sees all of it; each configuration runs in a fresh process (this binary again,
//! with `RSTAR_MEMORY_CASE` set), so nothing one leaves behind is counted in the next; and
//! each child also reports the kernel's peak resident set (`VmHWM`), which bounds the count
//! from above (code, stacks, allocator slack).
//!
//! Knobs: `RSTAR_MEMORY_TRAIN=BxT` (the batch, default `2x1024`), `RSTAR_MEMORY_CASES` (a
//! comma-separated subset of `full,lora,lora-bf16,lora-bf16-short,lora-bf16-bf16,lora-bf16-ckpt,
//! lora-bf16-burn-ckpt,full-ckpt`; all but `lora-bf16-bf16` (bf16 compute, slow on a CPU) by default;
//! `lora-bf16-short` is the bf16 base at the same token count in sequences half as long, which
//! separates attention's `t²` term from the per-token one), `RSTAR_MEMORY_RANK` (16),
//! `RSTAR_MEMORY_LAYERS` (Qwen3-0.6B's 28; fewer for a quick look).
#![allow(unsafe_code)] // reason: a `GlobalAlloc` that counts bytes must implement an unsafe trait

use std::alloc::{GlobalAlloc, Layout, System};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use burn::module::Module;
use burn::optim::{AdamWConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rstar_policy::lora::LoraConfig;
use rstar_policy::{Precision, Qwen, QwenConfig, sequence_nll};

/// Bytes currently allocated and the peak since the last [`reset_peak`].
struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn add(bytes: usize) {
    let now = CURRENT.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counters are only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on as is.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes through
        // this allocator).
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc` and `alloc`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
            add(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn now() -> usize {
    CURRENT.load(Ordering::Relaxed)
}

fn reset_peak() {
    PEAK.store(now(), Ordering::Relaxed);
}

fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// A configuration: its name, what it is, and how the model is prepared.
struct Case {
    name: &'static str,
    what: &'static str,
    lora: bool,
    base: Precision,
    compute: Precision,
    checkpointing: Ckpt,
    /// Sequences twice as many and half as long, the same tokens.
    short: bool,
}

/// Which gradient checkpointing a case uses.
#[derive(Clone, Copy, PartialEq)]
enum Ckpt {
    /// None: every activation kept for the backward pass.
    Off,
    /// `Qwen::with_gradient_checkpointing`: each decoder layer recomputed in the backward pass.
    Layers,
    /// Burn's `Device::gradient_checkpointing` (memory-bound operations recomputed).
    Burn,
}

const CASES: &[Case] = &[
    Case {
        name: "full",
        what: "full fine-tuning, f32",
        lora: false,
        base: Precision::F32,
        compute: Precision::F32,
        checkpointing: Ckpt::Off,
        short: false,
    },
    Case {
        name: "lora",
        what: "LoRA over an f32 base",
        lora: true,
        base: Precision::F32,
        compute: Precision::F32,
        checkpointing: Ckpt::Off,
        short: false,
    },
    Case {
        name: "lora-bf16",
        what: "LoRA over a bf16 base",
        lora: true,
        base: Precision::Bf16,
        compute: Precision::F32,
        checkpointing: Ckpt::Off,
        short: false,
    },
    Case {
        name: "lora-bf16-short",
        what: "LoRA over a bf16 base, sequences half as long",
        lora: true,
        base: Precision::Bf16,
        compute: Precision::F32,
        checkpointing: Ckpt::Off,
        short: true,
    },
    Case {
        name: "lora-bf16-bf16",
        what: "LoRA over a bf16 base, bf16 compute",
        lora: true,
        base: Precision::Bf16,
        compute: Precision::Bf16,
        checkpointing: Ckpt::Off,
        short: false,
    },
    Case {
        name: "lora-bf16-ckpt",
        what: "LoRA over a bf16 base, each layer recomputed",
        lora: true,
        base: Precision::Bf16,
        compute: Precision::F32,
        checkpointing: Ckpt::Layers,
        short: false,
    },
    Case {
        name: "lora-bf16-burn-ckpt",
        what: "LoRA over a bf16 base, Burn's checkpointing",
        lora: true,
        base: Precision::Bf16,
        compute: Precision::F32,
        checkpointing: Ckpt::Burn,
        short: false,
    },
    Case {
        name: "full-ckpt",
        what: "full fine-tuning, f32, each layer recomputed",
        lora: false,
        base: Precision::F32,
        compute: Precision::F32,
        checkpointing: Ckpt::Layers,
        short: false,
    },
];

const DEFAULT_CASES: &str =
    "full,lora,lora-bf16,lora-bf16-short,lora-bf16-ckpt,lora-bf16-burn-ckpt,full-ckpt";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| fail(&format!("{name} `{s}`: expected a number")))
        })
        .unwrap_or(default)
}

fn fail(message: &str) -> ! {
    eprintln!("memory bench: {message}");
    std::process::exit(2)
}

/// `RSTAR_MEMORY_TRAIN`: `[batch, tokens]`.
fn train_shape() -> [usize; 2] {
    let bt = std::env::var("RSTAR_MEMORY_TRAIN").unwrap_or_else(|_| "2x1024".into());
    let parts: Vec<usize> = bt.split('x').filter_map(|x| x.parse().ok()).collect();
    match parts[..] {
        [b, t] if b >= 1 && t >= 4 => [b, t],
        _ => fail(&format!(
            "RSTAR_MEMORY_TRAIN `{bt}`: expected BxT with B ≥ 1 and T ≥ 4, e.g. 2x1024"
        )),
    }
}

fn config() -> QwenConfig {
    let mut c = QwenConfig::qwen3_0_6b();
    c.num_hidden_layers = env_usize("RSTAR_MEMORY_LAYERS", c.num_hidden_layers);
    c
}

/// The kernel's peak resident set of this process, in bytes (`VmHWM`), if readable.
fn peak_rss() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs one case in this process and prints its figures as one JSON line.
fn run_case(case: &Case) {
    let [mut b, mut t] = train_shape();
    if case.short {
        (b, t) = (2 * b, t / 2);
    }
    let rank = env_usize("RSTAR_MEMORY_RANK", 16);
    let mut device = Device::flex().autodiff();
    if case.checkpointing == Ckpt::Burn {
        device = device.gradient_checkpointing();
    }
    let config = config();
    let start = now();
    let model = Qwen::random(config.clone(), 0, &device).expect("the model builds");
    let mut model = if case.lora {
        model
            .with_lora(&LoraConfig::new(rank, 2.0 * rank as f64), 1)
            .expect("adapters attach")
            .with_base_precision(case.base)
            .expect("a LoRA model takes a bf16 base")
    } else {
        model
    };
    model = model
        .with_precision(case.compute)
        .with_gradient_checkpointing(case.checkpointing == Ckpt::Layers);
    let weights = now() - start;
    let trainable = model.trainable_parameters();
    let ids: Vec<i64> = (0..b * t)
        .map(|i| ((i * 7919 + 13) % config.vocab_size) as i64)
        .collect();
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [b, t]), &device);
    let mask = Tensor::<2>::ones([b, t - 1], &device);
    let mut optimizer: ModuleOptimizer = AdamWConfig::new().with_weight_decay(0.0).init();
    reset_peak();
    let clock = Instant::now();
    let loss = sequence_nll(&model, tokens, mask);
    let forward_peak = peak() - start;
    let grads = loss.backward();
    let grads = GradientsParams::from_grads(grads, &model);
    let model = optimizer.step(1e-4, model, grads);
    let secs = clock.elapsed().as_secs_f64();
    drop(loss);
    let step_peak = peak() - start;
    // What stays between steps: the weights and the optimizer's moments.
    let resident = now() - start;
    let line = serde_json::json!({
        "case": case.name,
        "batch": [b, t],
        "params": config.num_params(),
        "trainable": trainable,
        "weights": weights,
        "resident": resident,
        "forward_peak": forward_peak,
        "peak": step_peak,
        "secs": secs,
        "peak_rss": peak_rss(),
        "base": model.base_precision().name(),
    });
    println!("{line}");
}

fn gib(bytes: f64) -> String {
    format!("{:.2} GiB", bytes / f64::from(1u32 << 30))
}

fn main() {
    if let Ok(name) = std::env::var("RSTAR_MEMORY_CASE") {
        let case = CASES
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| fail(&format!("unknown case `{name}`")));
        run_case(case);
        return;
    }
    let names = std::env::var("RSTAR_MEMORY_CASES").unwrap_or_else(|_| DEFAULT_CASES.into());
    let [b, t] = train_shape();
    let c = config();
    println!(
        "memory bench: Qwen3-0.6B shape ({} layers, {} params), one training step of {b} × {t} tokens (forward, backward, AdamW), flex, LoRA rank {}, each case in a fresh process",
        c.num_hidden_layers,
        c.num_params(),
        env_usize("RSTAR_MEMORY_RANK", 16)
    );
    let exe = std::env::current_exe().expect("the bench's own path");
    let mut results: Vec<(&Case, serde_json::Value)> = Vec::new();
    for name in names.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let case = CASES
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| fail(&format!("unknown case `{name}` in RSTAR_MEMORY_CASES")));
        let out = Command::new(&exe)
            .env("RSTAR_MEMORY_CASE", name)
            .output()
            .expect("the bench runs itself");
        if !out.status.success() {
            fail(&format!(
                "case {name} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| fail(&format!("case {name} printed no result: {stdout}")));
        let v: serde_json::Value = serde_json::from_str(line).expect("the child's JSON");
        eprintln!("  {name}: {v}");
        results.push((case, v));
    }
    let full = results
        .iter()
        .find(|(c, _)| c.name == "full")
        .map(|(_, v)| v["peak"].as_f64().unwrap_or(0.0));
    println!(
        "{:<52} {:>10} {:>10} {:>10} {:>10} {:>8}  vs full",
        "case", "weights", "resident", "peak", "peak RSS", "step s"
    );
    for (case, v) in &results {
        let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
        let ratio = match full {
            Some(full) if case.name != "full" => format!("{:.1}× below full", full / f("peak")),
            _ => "—".into(),
        };
        println!(
            "{:<52} {:>10} {:>10} {:>10} {:>10} {:>8.1}  {ratio}",
            format!("{} ({}×{})", case.what, v["batch"][0], v["batch"][1]),
            gib(f("weights")),
            gib(f("resident")),
            gib(f("peak")),
            gib(f("peak_rss")),
            f("secs"),
        );
    }
    // The costs the projection table uses: bytes per frozen and per trainable parameter held
    // between steps, and the step's transient bytes (activations, gradients) per token and
    // layer, with attention's t² part separated by the half-length run.
    let get = |name: &str| results.iter().find(|(c, _)| c.name == name).map(|(_, v)| v);
    if let (Some(long), Some(short)) = (get("lora-bf16"), get("lora-bf16-short")) {
        let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
        let tokens = (b * t) as f64;
        let layers = c.num_hidden_layers as f64;
        let transient = |v| f(v, "peak") - f(v, "resident");
        // transient = tokens·L·per_token + b·h·t²·L·per_score; halving t at the same tokens
        // halves the t² part.
        let (tl, ts) = (transient(long), transient(short));
        let t2 = 2.0 * (tl - ts);
        let per_token_layer = (tl - t2) / (tokens * layers);
        let per_score = t2 / ((b * c.num_attention_heads * t * t) as f64 * layers);
        println!(
            "per token and layer (bf16 base, f32 compute): {:.0} bytes ({:.1} × (hidden + intermediate)); attention's t² part: {:.2} bytes per score (b·heads·t² per layer)",
            per_token_layer,
            per_token_layer / (c.hidden_size + c.intermediate_size) as f64,
            per_score
        );
    }
}
