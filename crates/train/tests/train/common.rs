//! Shared helpers: the sandbox, a tiny policy overfitted on a few demonstrations, prompts.

use std::sync::OnceLock;

use burn::module::Module;
use burn::tensor::Device;
use rstar_episode::episode::Limits;
use rstar_policy::{Qwen, QwenConfig, Tokenizer};
use rstar_rollout::Prompt;
use rstar_rollout::scheduled::PoolTools;
use rstar_tasks::tasks::{Split, Task, TaskConfig, TaskSet};
use rstar_toolenv::BlockingPool;
use rstar_train::sft::{self, SftRow};
use rstar_train::{LrSchedule, SftOptions, ToolOptions, start_pool};

/// One sandbox for the whole test binary (starting one takes a moment).
pub fn pool() -> &'static BlockingPool {
    static POOL: OnceLock<BlockingPool> = OnceLock::new();
    POOL.get_or_init(|| {
        start_pool(&ToolOptions {
            python: rstar_testdata::python(),
            workers: 2,
            timeout_secs: 5.0,
            servers: Vec::new(),
            latency_budget_secs: None,
        })
        .expect("the sandbox starts")
    })
}

/// The sandbox as the rollouts' tools.
pub fn tools() -> PoolTools {
    PoolTools::new(pool().pool().clone())
}

/// `n` training tasks of the embedded default.
pub fn tasks(n: usize, seed: u64) -> Vec<Task> {
    TaskSet::new(TaskConfig::embedded_default())
        .unwrap()
        .generate(Split::Train, n, seed)
        .unwrap()
}

/// Prompts of tasks.
pub fn prompts(tasks: &[Task]) -> Vec<Prompt> {
    tasks.iter().map(Prompt::from).collect()
}

/// A small model config for the char tokenizer (2 layers, width 32).
pub fn tiny_config() -> QwenConfig {
    QwenConfig::test_tiny(Tokenizer::char().vocab_size())
}

/// SFT options for tests.
pub fn sft_options(steps: usize) -> SftOptions {
    SftOptions {
        steps,
        batch_size: 4,
        corpus_size: 4,
        failing_fraction: 0.5,
        wrong_programs: Default::default(),
        bug_weights: Default::default(),
        lr: 1e-2,
        warmup_steps: 2,
        schedule: LrSchedule::Constant,
        min_lr_ratio: 0.1,
        weight_decay: 0.0,
        grad_clip: Some(1.0),
        log_every: 0,
        threads: 1,
        micro_batches: 1,
        precision: rstar_policy::Precision::F32,
        lora: None,
        base_precision: rstar_policy::Precision::F32,
        gradient_checkpointing: false,
    }
}

/// Tokenized demonstrations of `tasks` with real tool outputs (half of them with a bug).
pub fn rows(tasks: &[Task]) -> Vec<SftRow> {
    let demos = sft::build_demonstrations(tasks, &Limits::compact(), 0.5, 3, &tools()).unwrap();
    sft::tokenize(&demos, &Tokenizer::char())
}

/// A tiny policy trained on the demonstrations of `tasks` until it writes the format: it makes
/// tool calls and answers. On the autodiff device, ready for more training.
pub fn overfit_trainable(tasks: &[Task], steps: usize) -> Qwen {
    let device = Device::flex().autodiff();
    let model = Qwen::random(tiny_config(), 1, &device).unwrap();
    sft::train(model, &rows(tasks), &sft_options(steps), 5, |_| {}).unwrap()
}

/// [`overfit_trainable`] on the plain (non-autodiff) device, for rollouts.
pub fn overfit(tasks: &[Task], steps: usize) -> Qwen {
    overfit_trainable(tasks, steps).valid()
}

/// The lines of a JSONL file, parsed.
pub fn jsonl<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Vec<T> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The smoke preset with a smaller model and corpus (debug builds are slow), written to
/// `dir/smoke.json`; returns the path.
#[allow(dead_code)] // reason: used by rstar-cli's end-to-end tests, which include this file
pub fn small_smoke_config(dir: &std::path::Path) -> std::path::PathBuf {
    let mut config = rstar_train::TrainConfig::smoke();
    config.model = tiny_config();
    config.sft.steps = 8;
    config.sft.corpus_size = 12;
    config.tools.workers = 2;
    let path = dir.join("smoke.json");
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    path
}
