//! Integration tests of the trainer's library: the rollout driver, SFT, one GRPO-RoC step,
//! configs, HF models. Its runs of the `rstar` binary (smoke, resume, plots, scheduled
//! rollouts, `--backend wgpu`) are in `rstar-cli`'s `tests/cli.rs`.

mod train {
    mod asynchronous;
    mod chat_sft;
    mod common;
    mod config;
    mod correction;
    mod hf;
    mod rl;
    mod rollout;
    mod sft;
    mod tools;
}
