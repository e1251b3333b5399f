//! `cargo xtask bench memory`: the peak heap of one training step (forward, backward and an
//! AdamW step) of a random Qwen3-0.6B-shaped model on `flex`, for full fine-tuning in f32, LoRA
//! over an f32 base, LoRA over a bf16 base ([`Qwen::with_base_precision`]), and LoRA over a bf16
//! base with each layer recomputed in the backward pass ([`Qwen::with_gradient_checkpointing`]),
//! and full fine-tuning so recomputed; each configuration's peak and its ratio to full
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
//! full-ckpt`; all but `lora-bf16-bf16` (bf16 compute, slow on a CPU) by default;
//! `lora-bf16-short` is the bf16 base at the same token count in sequences half as long, which
//! separates attention's `t²` term from the per-token one), `RSTAR_MEMORY_RANK` (16),
//! `RSTAR_MEMORY_LAYERS` (Qwen3-0.6B's 28; fewer for a quick look), `RSTAR_MEMORY_REPLAY=FILE`
//! (take the cases' results from an earlier run's stderr instead of measuring them again).
use std::process::Command;
use std::time::Instant;

use burn::optim::{AdamWConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rstar_policy::lora::LoraConfig;
use rstar_policy::{Precision, Qwen, QwenConfig, sequence_nll};
use rstar_testdata::alloc::{Counting, current, peak, reset_peak};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A configuration: its name, what it is, and how the model is prepared.
struct Case {
    name: &'static str,
    what: &'static str,
    lora: bool,
    base: Precision,
    compute: Precision,
    checkpointing: Ckpt,
    /// The batch and depth, against `RSTAR_MEMORY_TRAIN` and the shape's layers.
    batch: Batch,
}

/// A case's batch and depth.
#[derive(Clone, Copy, PartialEq)]
enum Batch {
    /// `RSTAR_MEMORY_TRAIN` on every layer.
    Same,
    /// Twice the sequences, half as long: the same tokens, half of attention's `t²` part.
    Short,
    /// One layer: against [`Batch::Same`], the step's cost outside the layers (the head and the
    /// loss) is what remains.
    OneLayer,
}

/// Which gradient checkpointing a case uses.
#[derive(Clone, Copy, PartialEq)]
enum Ckpt {
    /// None: every activation kept for the backward pass.
    Off,
    /// `Qwen::with_gradient_checkpointing`: each decoder layer recomputed in the backward pass.
    /// (Burn's `Device::gradient_checkpointing` is not a case: the chunked loss a vocabulary of
    /// Qwen's size needs makes fresh autodiff leaves with `Tensor::autodiff`, which carry the
    /// default strategy, and Burn refuses to mix strategies in one operation.)
    Layers,
}

const CASES: &[Case] = &[
    Case {
        name: "full",
        what: "full fine-tuning, f32",
        lora: false,
        base: Precision::F32,
        compute: Precision::F32,
        checkpointing: Ckpt::Off,
        batch: Batch::Same,
    },
    Case {
        name: "lora",
        what: "LoRA over an f32 base",
        lora: true,
        base: Precision::F32,
        compute: Precision::F32,
        checkpointing: Ckpt::Off,
        batch: Batch::Same,
    },
    Case {
        name: "lora-bf16",
        what: "LoRA over a bf16 base",
        lora: true,
        base: Precision::Bf16,
        compute: Precision::F32,
        checkpointing: Ckpt::Off,
        batch: Batch::Same,
    },
    Case {
        name: "lora-bf16-short",
        what: "LoRA over a bf16 base, sequences half as long",
        lora: true,
        base: Precision::Bf16,
        compute: Precision::F32,
        checkpointing: Ckpt::Off,
        batch: Batch::Short,
    },
    Case {
        name: "lora-bf16-bf16",
        what: "LoRA over a bf16 base, bf16 compute",
        lora: true,
        base: Precision::Bf16,
        compute: Precision::Bf16,
        checkpointing: Ckpt::Off,
        batch: Batch::Same,
    },
    Case {
        name: "lora-1",
        what: "LoRA over an f32 base, one layer",
        lora: true,
        base: Precision::F32,
        compute: Precision::F32,
        checkpointing: Ckpt::Off,
        batch: Batch::OneLayer,
    },
    Case {
        name: "lora-bf16-ckpt",
        what: "LoRA over a bf16 base, each layer recomputed",
        lora: true,
        base: Precision::Bf16,
        compute: Precision::F32,
        checkpointing: Ckpt::Layers,
        batch: Batch::Same,
    },
    Case {
        name: "full-ckpt",
        what: "full fine-tuning, f32, each layer recomputed",
        lora: false,
        base: Precision::F32,
        compute: Precision::F32,
        checkpointing: Ckpt::Layers,
        batch: Batch::Same,
    },
];

const DEFAULT_CASES: &str = "full,lora,lora-bf16,lora-bf16-short,lora-1,lora-bf16-ckpt,full-ckpt";

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
    let mut config = config();
    match case.batch {
        Batch::Same => {}
        Batch::Short => (b, t) = (2 * b, t / 2),
        Batch::OneLayer => config.num_hidden_layers = 1,
    }
    let rank = env_usize("RSTAR_MEMORY_RANK", 16);
    let device = Device::flex().autodiff();
    let start = current();
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
    let weights = current() - start;
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
    let resident = current() - start;
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
    // RSTAR_MEMORY_REPLAY=FILE: the cases' JSON lines from an earlier run (its stderr), so the
    // table and the projection can be recomputed without measuring again.
    let replay: Vec<serde_json::Value> = std::env::var_os("RSTAR_MEMORY_REPLAY")
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
                fail(&format!(
                    "RSTAR_MEMORY_REPLAY {}: {e}",
                    path.to_string_lossy()
                ))
            });
            text.lines()
                .filter_map(|l| l.find('{').map(|i| &l[i..]))
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        })
        .unwrap_or_default();
    let mut results: Vec<(&Case, serde_json::Value)> = Vec::new();
    for name in names.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let case = CASES
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| fail(&format!("unknown case `{name}` in RSTAR_MEMORY_CASES")));
        if let Some(v) = replay.iter().find(|v| v["case"] == name) {
            results.push((case, v.clone()));
            continue;
        }
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
            // The one-layer case is another model: no ratio.
            Some(full) if case.name != "full" && case.batch != Batch::OneLayer => {
                format!("{:.1}× below full", full / f("peak"))
            }
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
    project(&results, &c, [b, t]);
}

/// A model shape for the projection: name, layers, hidden, intermediate, query heads, KV heads,
/// head dim, vocabulary, tied embeddings.
struct Shape {
    name: &'static str,
    layers: usize,
    hidden: usize,
    intermediate: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    vocab: usize,
    tied: bool,
}

/// Qwen3-1.7B, 4B, 8B and 14B as their published `config.json` files give them.
const SHAPES: &[Shape] = &[
    Shape {
        name: "Qwen3-1.7B",
        layers: 28,
        hidden: 2048,
        intermediate: 6144,
        heads: 16,
        kv_heads: 8,
        head_dim: 128,
        vocab: 151_936,
        tied: true,
    },
    Shape {
        name: "Qwen3-4B",
        layers: 36,
        hidden: 2560,
        intermediate: 9728,
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        vocab: 151_936,
        tied: true,
    },
    Shape {
        name: "Qwen3-8B",
        layers: 36,
        hidden: 4096,
        intermediate: 12_288,
        heads: 32,
        kv_heads: 8,
        head_dim: 128,
        vocab: 151_936,
        tied: false,
    },
    Shape {
        name: "Qwen3-14B",
        layers: 40,
        hidden: 5120,
        intermediate: 17_408,
        heads: 40,
        kv_heads: 8,
        head_dim: 128,
        vocab: 151_936,
        tied: false,
    },
];

impl Shape {
    fn of(c: &QwenConfig) -> Shape {
        Shape {
            name: "Qwen3-0.6B",
            layers: c.num_hidden_layers,
            hidden: c.hidden_size,
            intermediate: c.intermediate_size,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            vocab: c.vocab_size,
            tied: c.tie_word_embeddings,
        }
    }

    /// The seven projections' weights in one layer.
    fn projections_per_layer(&self) -> f64 {
        let (d, q, kv, i) = (
            self.hidden as f64,
            (self.heads * self.head_dim) as f64,
            (self.kv_heads * self.head_dim) as f64,
            self.intermediate as f64,
        );
        d * q + 2.0 * d * kv + q * d + 3.0 * d * i
    }

    /// Every weight but the projections (embeddings, head, norms).
    fn others(&self) -> f64 {
        let (d, v) = (self.hidden as f64, self.vocab as f64);
        let embed = if self.tied { v * d } else { 2.0 * v * d };
        embed + self.layers as f64 * (2.0 * d + 2.0 * self.head_dim as f64) + d
    }

    /// LoRA parameters at rank `r` on all seven projections.
    fn lora(&self, r: usize) -> f64 {
        let (d, q, kv, i) = (
            self.hidden as f64,
            (self.heads * self.head_dim) as f64,
            (self.kv_heads * self.head_dim) as f64,
            self.intermediate as f64,
        );
        let per_layer = (d + q) + 2.0 * (d + kv) + (q + d) + 3.0 * (d + i);
        r as f64 * per_layer * self.layers as f64
    }
}

/// The measured costs that the projection multiplies out.
struct Costs {
    /// Bytes per frozen projection weight in bf16.
    proj_bf16: f64,
    /// Bytes per other frozen weight (f32).
    other: f64,
    /// Bytes held between steps per trainable parameter (weight and AdamW's two moments).
    trainable: f64,
    /// A layer's activations kept for the backward pass, per token and unit of
    /// `hidden + intermediate`, attention's `t²` part aside.
    token: f64,
    /// Bytes per attention score kept (`sequences × heads × t²` per layer).
    score: f64,
    /// The f32 copy of a bf16 projection weight that f32 compute makes and the matmul's
    /// backward keeps, per weight (none with bf16 compute).
    copies: f64,
    /// The head's and the loss's transient bytes (chunked logits, the hidden state's gradient)
    /// at this bench's tokens and width.
    head: f64,
    /// `tokens × hidden` where `head` was measured.
    head_at: f64,
}

impl Costs {
    /// One layer's activations for `tokens` in `seqs` sequences of `t`.
    fn layer(&self, s: &Shape, tokens: f64, seqs: f64, t: f64) -> f64 {
        self.token * tokens * (s.hidden + s.intermediate) as f64
            + self.score * seqs * s.heads as f64 * t * t
    }

    /// The head's transient, scaled from the measurement by `tokens × hidden`: an upper bound,
    /// since its logit chunks do not grow.
    fn head(&self, s: &Shape, tokens: f64) -> f64 {
        self.head * (tokens * s.hidden as f64 / self.head_at).max(1.0)
    }

    /// What a LoRA model of rank `r` over a bf16 base holds between steps.
    fn held(&self, s: &Shape, r: usize) -> f64 {
        self.proj_bf16 * s.projections_per_layer() * s.layers as f64
            + self.other * s.others()
            + self.trainable * s.lora(r)
    }

    /// The peak of a step without checkpointing: every layer's activations, the f32 copies,
    /// the head, the adapters' gradients.
    fn plain(&self, s: &Shape, r: usize, tokens: f64, seqs: f64, t: f64) -> f64 {
        self.held(s, r)
            + s.layers as f64 * self.layer(s, tokens, seqs, t)
            + self.copies * s.projections_per_layer() * s.layers as f64
            + self.head(s, tokens)
            + 4.0 * s.lora(r)
    }

    /// The peak of a step with each layer recomputed: the layers' inputs (f32), then the larger
    /// of the head's transient and one layer's activations and copies (the head runs and is
    /// freed before the first recomputation), the adapters' gradients.
    fn checkpointed(&self, s: &Shape, r: usize, tokens: f64, seqs: f64, t: f64) -> f64 {
        self.held(s, r)
            + (s.layers as f64 + 1.0) * tokens * s.hidden as f64 * 4.0
            + self
                .head(s, tokens)
                .max(self.layer(s, tokens, seqs, t) + self.copies * s.projections_per_layer())
            + 4.0 * s.lora(r)
    }
}

fn project(results: &[(&Case, serde_json::Value)], c: &QwenConfig, [b, t]: [usize; 2]) {
    let get = |name: &str| results.iter().find(|(c, _)| c.name == name).map(|(_, v)| v);
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    let (Some(lora), Some(bf16), Some(short), Some(one)) = (
        get("lora"),
        get("lora-bf16"),
        get("lora-bf16-short"),
        get("lora-1"),
    ) else {
        println!("(the projection needs the cases lora, lora-bf16, lora-bf16-short and lora-1)");
        return;
    };
    let me = Shape::of(c);
    let rank = env_usize("RSTAR_MEMORY_RANK", 16);
    let (layers, tokens) = (me.layers as f64, (b * t) as f64);
    let width = (me.hidden + me.intermediate) as f64;
    let proj = me.projections_per_layer() * layers;
    let trainable = f(lora, "trainable");
    let transient = |v| f(v, "peak") - f(v, "resident");
    // Halving the sequence length at the same tokens halves attention's t² part.
    let t2 = 2.0 * (transient(bf16) - transient(short));
    // Every layer against one: a layer's activations; what one layer leaves is the head's.
    let per_layer = (transient(lora) - transient(one)) / (layers - 1.0);
    let costs = Costs {
        proj_bf16: (f(bf16, "weights") - f(lora, "weights")) / proj + 4.0,
        other: (f(lora, "weights") - 4.0 * trainable - 4.0 * proj) / me.others(),
        trainable: (f(lora, "resident") - f(lora, "weights")) / trainable + 4.0,
        token: (per_layer - t2 / layers) / (tokens * width),
        score: t2 / ((b * me.heads * t * t) as f64 * layers),
        copies: (transient(bf16) - transient(lora)) / proj,
        head: transient(one) - per_layer,
        head_at: tokens * me.hidden as f64,
    };
    println!(
        "measured: a frozen projection weight in bf16 {:.2} B, another frozen weight {:.2} B, a trainable parameter {:.2} B held (+4 B of gradient in the step); a layer's activations {:.2} B per token·(hidden + intermediate) + {:.2} B per attention score (sequences·heads·t²); f32 copies of a bf16 base {:.2} B per projection weight (f32 compute; none in bf16); the head and loss {} at {b} × {t} tokens",
        costs.proj_bf16,
        costs.other,
        costs.trainable,
        costs.token,
        costs.score,
        costs.copies,
        gib(costs.head)
    );
    let (seqs_me, t_me) = (b as f64, t as f64);
    for (name, predicted) in [
        ("lora-bf16", costs.plain(&me, rank, tokens, seqs_me, t_me)),
        (
            "lora-bf16-ckpt",
            costs.checkpointed(&me, rank, tokens, seqs_me, t_me),
        ),
    ] {
        if let Some(v) = get(name) {
            println!(
                "check: {name}'s peak predicted by the formula {}, measured {}",
                gib(predicted),
                gib(f(v, "peak"))
            );
        }
    }
    let (seqs, len, r) = (3usize, 4096usize, 32usize);
    let tokens = (seqs * len) as f64;
    println!(
        "projection: LoRA rank {r} on all seven projections over a bf16 base, one step of {seqs} × {len} = {} tokens, activations and copies as measured here (f32 compute; bf16 compute would need no copies and smaller activations)",
        seqs * len
    );
    println!(
        "{:<11} {:>7} {:>11} {:>10} {:>16} {:>16}  fits 80 GB H100 / 141 GB H200",
        "model", "params", "base+LoRA", "adapters", "step, no ckpt", "step, ckpt"
    );
    let fits = |x: f64| match (x <= 80e9, x <= 141e9) {
        (true, _) => "both",
        (false, true) => "H200 only",
        _ => "neither",
    };
    for s in SHAPES {
        let params = s.projections_per_layer() * s.layers as f64 + s.others();
        let plain = costs.plain(s, r, tokens, seqs as f64, len as f64);
        let ckpt = costs.checkpointed(s, r, tokens, seqs as f64, len as f64);
        println!(
            "{:<11} {:>6.1}B {:>8.1} GB {:>7.2} GB {:>13.1} GB {:>13.1} GB  no ckpt: {}, ckpt: {}",
            s.name,
            params / 1e9,
            costs.held(s, r) / 1e9,
            costs.trainable * s.lora(r) / 1e9,
            plain / 1e9,
            ckpt / 1e9,
            fits(plain),
            fits(ckpt)
        );
    }
}
